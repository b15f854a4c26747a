//! `--chart FILE.svg`: cumulative cost and cumulative hit ratio per arm, over the requests
//! in replay order. Plain SVG written by hand: two panels, axes, one polyline per arm.

use std::fmt::Write;

use super::run::ArmStats;

const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const W: f64 = 760.0;
const PANEL_H: f64 = 220.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 60.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One panel: `value(point)` of every arm's series, scaled to `max_y`.
fn panel(
    out: &mut String,
    arms: &[ArmStats],
    top: f64,
    title: &str,
    max_y: f64,
    fmt_y: &dyn Fn(f64) -> String,
    value: &dyn Fn(&(f64, f64)) -> f64,
) {
    let plot_w = W - LEFT - RIGHT;
    let bottom = top + PANEL_H;
    let n = arms
        .iter()
        .map(|a| a.series.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"#,
        top - 10.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#333"/>"##,
        W - RIGHT
    );
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="#333"/>"##
    );
    for i in 0..=4 {
        let frac = f64::from(i) / 4.0;
        let y = bottom - frac * PANEL_H;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/>"##,
            W - RIGHT
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            y + 4.0,
            fmt_y(frac * max_y)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="11" text-anchor="end">request {}</text>"#,
        W - RIGHT,
        bottom + 16.0,
        n
    );
    for (k, arm) in arms.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let points: Vec<String> = arm
            .series
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let x = LEFT + plot_w * (i as f64) / ((n - 1) as f64);
                let y = bottom - PANEL_H * (value(p) / max_y).clamp(0.0, 1.0);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
    }
}

/// The whole SVG document.
pub fn svg(arms: &[ArmStats]) -> String {
    let legend_h = 20.0 * arms.len() as f64;
    let height = TOP + 2.0 * PANEL_H + GAP + 40.0 + legend_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let max_cost = arms
        .iter()
        .flat_map(|a| a.series.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-9);
    panel(
        &mut out,
        arms,
        TOP,
        "Cumulative cost (USD)",
        max_cost,
        &|v| format!("${v:.3}"),
        &|p| p.0,
    );
    panel(
        &mut out,
        arms,
        TOP + PANEL_H + GAP,
        "Cumulative hit ratio",
        1.0,
        &|v| format!("{:.0}%", v * 100.0),
        &|p| p.1,
    );
    let legend_top = TOP + 2.0 * PANEL_H + GAP + 40.0;
    for (k, arm) in arms.iter().enumerate() {
        let y = legend_top + 20.0 * k as f64;
        let color = COLORS[k % COLORS.len()];
        let _ = writeln!(
            out,
            r#"<rect x="{LEFT}" y="{}" width="14" height="4" fill="{color}"/>"#,
            y - 4.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{y}" font-size="12">{}</text>"#,
            LEFT + 20.0,
            escape(&arm.arm)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_polyline_per_arm_and_names_escaped() {
        let arm = |name: &str| ArmStats {
            arm: name.into(),
            series: vec![(0.01, 0.0), (0.02, 0.5), (0.025, 0.7)],
            ..Default::default()
        };
        let doc = svg(&[arm("a<b"), arm("c")]);
        assert!(doc.starts_with("<svg"));
        assert_eq!(doc.matches("<polyline").count(), 4); // 2 arms × 2 panels
        assert!(doc.contains("a&lt;b"));
        assert!(doc.trim_end().ends_with("</svg>"));
    }
}
