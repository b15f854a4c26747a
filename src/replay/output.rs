//! The side-by-side table and the `--json` document.

use std::fmt::Write;

use serde_json::json;

use super::run::ArmStats;

/// Arms as columns, figures as rows.
pub fn table(arms: &[ArmStats]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = vec![
        (
            "requests".into(),
            arms.iter().map(|a| a.requests.to_string()).collect(),
        ),
        (
            "cache read tokens".into(),
            arms.iter()
                .map(|a| a.cache_read_tokens.to_string())
                .collect(),
        ),
        (
            "cache write tokens".into(),
            arms.iter()
                .map(|a| a.cache_write_tokens.to_string())
                .collect(),
        ),
        (
            "uncached tokens".into(),
            arms.iter().map(|a| a.uncached_tokens.to_string()).collect(),
        ),
        (
            "output tokens".into(),
            arms.iter().map(|a| a.output_tokens.to_string()).collect(),
        ),
        (
            "hit ratio".into(),
            arms.iter()
                .map(|a| format!("{:.1}%", a.hit_ratio * 100.0))
                .collect(),
        ),
        ("cost".into(), arms.iter().map(cost_cell).collect()),
        (
            "savings".into(),
            arms.iter()
                .map(|a| format!("${:.4}", a.savings_usd))
                .collect(),
        ),
    ];
    for section in ["tools", "system", "messages"] {
        rows.push((
            format!("breaks: {section}"),
            arms.iter()
                .map(|a| a.breaks.get(section).copied().unwrap_or(0).to_string())
                .collect(),
        ));
    }
    if arms.iter().any(|a| a.errors > 0) {
        rows.push((
            "skipped (errors)".into(),
            arms.iter().map(|a| a.errors.to_string()).collect(),
        ));
    }
    let label_w = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    let col_w: Vec<usize> = arms
        .iter()
        .enumerate()
        .map(|(i, a)| {
            rows.iter()
                .map(|(_, v)| v[i].len())
                .max()
                .unwrap_or(0)
                .max(a.arm.len())
        })
        .collect();
    let mut out = String::new();
    let _ = write!(out, "{:label_w$}", "");
    for (a, w) in arms.iter().zip(&col_w) {
        let _ = write!(out, "  {:>w$}", a.arm);
    }
    out.push('\n');
    for (label, values) in &rows {
        let _ = write!(out, "{label:label_w$}");
        for (v, w) in values.iter().zip(&col_w) {
            let _ = write!(out, "  {v:>w$}");
        }
        out.push('\n');
    }
    out
}

/// The arm's cost; requests of models the table does not know are not priced, and the
/// cell says so rather than showing a total that leaves them out silently.
fn cost_cell(a: &ArmStats) -> String {
    match a.unpriced_requests {
        0 => format!("${:.4}", a.cost_usd),
        n if n == a.requests => "unknown".into(),
        n => format!("${:.4} (+{n} unpriced)", a.cost_usd),
    }
}

/// `{"arms":[{"arm", "requests", "cache_read_tokens", ..., "breaks": {section: n}}]}`.
pub fn json_document(arms: &[ArmStats]) -> serde_json::Value {
    json!({ "arms": arms })
}
