//! The side-by-side table and the `--json` document.

use std::fmt::Write;

use serde_json::json;

use super::ideal::Ideal;
use super::run::ArmStats;

/// Arms as columns, figures as rows; with `ideal`, each arm's share of it.
pub fn table(arms: &[ArmStats], ideal: Option<&Ideal>) -> String {
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
    if let Some(ideal) = ideal {
        rows.push((
            "share of ideal".into(),
            arms.iter()
                .map(|a| {
                    ideal
                        .share_of(a.cache_read_tokens - a.keep_warm_cache_read)
                        .map_or("-".into(), |s| format!("{:.1}%", s * 100.0))
                })
                .collect(),
        ));
    }
    for section in ["tools", "system", "messages"] {
        rows.push((
            format!("breaks: {section}"),
            arms.iter()
                .map(|a| a.breaks.get(section).copied().unwrap_or(0).to_string())
                .collect(),
        ));
    }
    if arms.iter().any(|a| a.keep_warm_requests > 0) {
        rows.push((
            "keep-warm requests".into(),
            arms.iter()
                .map(|a| a.keep_warm_requests.to_string())
                .collect(),
        ));
    }
    if arms.iter().any(|a| a.stateful_unknown > 0) {
        rows.push((
            "continued, earlier turns not traced".into(),
            arms.iter()
                .map(|a| a.stateful_unknown.to_string())
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

/// The two lines above the table that state the ideal.
pub fn ideal_lines(ideal: &Ideal) -> String {
    format!(
        "ideal cache reads: {} of {} input tokens ({:.1}%)\n\
         ideal within the client's markers and the 20-block lookback: {} ({:.1}%)\n\n",
        ideal.cache_read_tokens,
        ideal.input_tokens,
        ideal.share * 100.0,
        ideal.marked.cache_read_tokens,
        ideal.marked.share * 100.0,
    )
}

/// `{"arms":[{"arm", "requests", "cache_read_tokens", ..., "breaks": {section: n}}]}`.
/// With `ideal`: a top-level `"ideal"` object and `"share_of_ideal"` on every arm (null when
/// the ideal reads nothing).
pub fn json_document(arms: &[ArmStats], ideal: Option<&Ideal>) -> serde_json::Value {
    let mut doc = json!({ "arms": arms });
    if let Some(ideal) = ideal {
        if let Some(list) = doc["arms"].as_array_mut() {
            for (value, arm) in list.iter_mut().zip(arms) {
                value["share_of_ideal"] =
                    json!(ideal.share_of(arm.cache_read_tokens - arm.keep_warm_cache_read));
            }
        }
        doc["ideal"] = json!(ideal);
    }
    doc
}
