//! `--chart FILE.svg`: cumulative cost and cumulative hit ratio per arm, over the requests
//! in replay order. Two panels, axes, one polyline per arm, and a legend, written with
//! [`crate::svg`].

use maud::{html, Markup};

use super::run::ArmStats;
use crate::svg::{document, points, px};

const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];
const W: f64 = 760.0;
const PANEL_H: f64 = 220.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 60.0;

/// One panel: `value(point)` of every arm's series, scaled to `max_y`.
fn panel(
    arms: &[ArmStats],
    top: f64,
    title: &str,
    max_y: f64,
    fmt_y: &dyn Fn(f64) -> String,
    value: &dyn Fn(&(f64, f64)) -> f64,
) -> Markup {
    let plot_w = W - LEFT - RIGHT;
    let bottom = top + PANEL_H;
    let n = arms
        .iter()
        .map(|a| a.series.len())
        .max()
        .unwrap_or(0)
        .max(2);
    let series = |arm: &ArmStats| {
        points(arm.series.iter().enumerate().map(|(i, p)| {
            let x = LEFT + plot_w * (i as f64) / ((n - 1) as f64);
            let y = bottom - PANEL_H * (value(p) / max_y).clamp(0.0, 1.0);
            (x, y)
        }))
    };
    html! {
        text x=(LEFT) y=(top - 10.0) font-size="14" font-weight="bold" { (title) }
        line x1=(LEFT) y1=(bottom) x2=(W - RIGHT) y2=(bottom) stroke="#333" {}
        line x1=(LEFT) y1=(top) x2=(LEFT) y2=(bottom) stroke="#333" {}
        @for i in 0..=4 {
            @let frac = f64::from(i) / 4.0;
            @let y = bottom - frac * PANEL_H;
            line x1=(LEFT) y1=(px(y)) x2=(W - RIGHT) y2=(px(y)) stroke="#eee" {}
            text x=(LEFT - 6.0) y=(px(y + 4.0)) font-size="11" text-anchor="end" { (fmt_y(frac * max_y)) }
        }
        text x=(W - RIGHT) y=(bottom + 16.0) font-size="11" text-anchor="end" { "request " (n) }
        @for (k, arm) in arms.iter().enumerate() {
            polyline fill="none" stroke=(COLORS[k % COLORS.len()]) stroke-width="2" points=(series(arm)) {}
        }
    }
}

/// The whole SVG document.
pub fn svg(arms: &[ArmStats]) -> String {
    let legend_h = 20.0 * arms.len() as f64;
    let height = TOP + 2.0 * PANEL_H + GAP + 40.0 + legend_h;
    let max_cost = arms
        .iter()
        .flat_map(|a| a.series.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1e-9);
    let legend_top = TOP + 2.0 * PANEL_H + GAP + 40.0;
    let body = html! {
        (panel(arms, TOP, "Cumulative cost (USD)", max_cost, &|v| format!("${v:.3}"), &|p| p.0))
        (panel(arms, TOP + PANEL_H + GAP, "Cumulative hit ratio", 1.0, &|v| format!("{:.0}%", v * 100.0), &|p| p.1))
        @for (k, arm) in arms.iter().enumerate() {
            @let y = legend_top + 20.0 * k as f64;
            rect x=(LEFT) y=(y - 4.0) width="14" height="4" fill=(COLORS[k % COLORS.len()]) {}
            text x=(LEFT + 20.0) y=(y) font-size="12" { (arm.arm) }
        }
    };
    document(W, height, "sans-serif", body)
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
