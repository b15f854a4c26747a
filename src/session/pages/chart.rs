//! The timeline's chart: one stacked bar per request (read from cache, written, uncached),
//! a token axis, request numbers, and rows of markers below for breaks, expired TTLs,
//! patches and lanes. Every bar and marker has a tooltip (`<title>`) and links to its
//! table row.
//!
//! Bars are placed in percent of the chart's width, so the chart fills the window up to
//! about 270 requests (4 px each in 1100 px) and scrolls sideways past that; text keeps its
//! size at any width. `zoom` widens it further. Written with maud, in [`crate::svg`]'s
//! coordinates.

use maud::{html, Markup};

use super::describe;
use super::format;
use super::layout::{BREAK, READ, TTL, UNCACHED, WRITE, WRITE_1H};
use super::view::{Expiry, Money, RequestView};
use crate::session::entry::{PatchEvent, PatchOutcome};
use crate::svg::{pct, px};

const TOP: f64 = 14.0;
const PLOT_HEIGHT: f64 = 200.0;
const BASE: f64 = TOP + PLOT_HEIGHT;
const LABEL_Y: f64 = BASE + 15.0;
const ROWS_TOP: f64 = BASE + 24.0;
const ROW_HEIGHT: f64 = 18.0;
const AXIS_WIDTH: f64 = 78.0;
/// The chart's width in a 1280 px window, less the axis and margins: what the x labels'
/// spacing is planned for.
const FIT_WIDTH: f64 = 1100.0;
/// Narrowest and widest column per request.
const MIN_PITCH: f64 = 4.0;
const MAX_PITCH: f64 = 56.0;
/// Room an x label needs.
const LABEL_ROOM: f64 = 30.0;
/// Lane colours, repeated past six lanes.
const LANES: [&str; 6] = [
    "#5f6368", "#1a73e8", "#e37400", "#9334e6", "#188038", "#d01884",
];

pub const ZOOMS: [u32; 4] = [1, 2, 4, 8];

/// An axis step of 1, 2, 2.5 or 5 times a power of ten, giving about `ticks` ticks.
fn nice_step(max: u64, ticks: u64) -> u64 {
    let raw = (max as f64 / ticks as f64).max(1.0);
    let magnitude = 10f64.powf(raw.log10().floor());
    let nice = match raw / magnitude {
        n if n <= 1.0 => 1.0,
        n if n <= 2.0 => 2.0,
        n if n <= 2.5 => 2.5,
        n if n <= 5.0 => 5.0,
        _ => 10.0,
    };
    ((nice * magnitude).round() as u64).max(1)
}

/// Label every `step`-th request so labels keep `LABEL_ROOM` apart at the planned width.
fn label_step(n: usize, zoom: u32) -> u64 {
    let pitch = (FIT_WIDTH / n.max(1) as f64).clamp(MIN_PITCH, MAX_PITCH) * zoom as f64;
    [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000]
        .into_iter()
        .find(|&step| step as f64 * pitch >= LABEL_ROOM)
        .unwrap_or(1000)
}

/// The patch whose marker colour stands for all of a request's patches: problems first.
fn notable(patches: &[PatchEvent]) -> Option<PatchOutcome> {
    use PatchOutcome::*;
    [Refused, Stale, Persisted, Ephemeral, Replayed]
        .into_iter()
        .find(|o| patches.iter().any(|p| p.outcome == *o))
}

fn outcome_color(o: PatchOutcome) -> &'static str {
    match o {
        PatchOutcome::Persisted => "#1a73e8",
        PatchOutcome::Ephemeral => "#6fa8f5",
        PatchOutcome::Replayed => "#0f9d9a",
        PatchOutcome::Refused => "#d93025",
        PatchOutcome::Stale => "#80868b",
    }
}

/// The bar's tooltip: everything the row says, on a few lines.
fn tooltip(r: &RequestView<'_>) -> String {
    let rec = r.record;
    let mut lines = vec![format!(
        "#{} · {} · lane {} · {}",
        r.number(),
        format::datetime(rec.time),
        rec.lane,
        rec.model
    )];
    match &r.usage {
        Some(u) => {
            let mut write = format::tokens(u.cache_write);
            if u.cache_write_1h > 0 {
                write.push_str(&format!(" (1h: {})", format::tokens(u.cache_write_1h)));
            }
            if u.cache_write_12h > 0 {
                write.push_str(&format!(" (12h: {})", format::tokens(u.cache_write_12h)));
            }
            lines.push(format!(
                "read {} · written {} · uncached {} · output {}",
                format::tokens(u.cache_read),
                write,
                format::tokens(u.uncached),
                format::tokens(u.output)
            ));
        }
        None => lines.push(format!(
            "no usage reported (status {})",
            rec.status.map_or("?".into(), |s| s.to_string())
        )),
    }
    let money = match r.money {
        Money::Priced { cost, savings } => {
            format!(
                "cost {} · saved {}",
                format::usd(cost),
                format::usd(savings)
            )
        }
        Money::Unpriced => "unpriced model".into(),
        Money::NoUsage => String::new(),
    };
    lines.push(format!("hit {} {money}", format::percent(r.hit())));
    if let Some(gap) = &r.gap {
        lines.push(describe::gap(gap));
    }
    if let Some(variant) = &rec.variant {
        lines.push(format!("variant {variant}"));
    }
    if let Some(d) = &rec.diagnosis {
        lines.push(format!("break: {}", describe::diagnosis(d)));
    }
    if let Some(p) = &rec.provider_diagnosis {
        lines.push(format!("provider: {}", describe::provider_reason(p)));
    }
    for p in &r.patches {
        lines.push(format!("{} {}", p.outcome.label(), describe::patch(p)));
    }
    lines.join("\n")
}

pub fn chart(requests: &[&RequestView<'_>], zoom: u32, lanes: usize) -> Markup {
    let n = requests.len().max(1);
    let max = requests
        .iter()
        .filter_map(|r| r.usage.map(|u| u.total_input()))
        .max()
        .unwrap_or(0);
    let step = nice_step(max, 6);
    let top = (max.div_ceil(step) * step).max(step);
    let scale = PLOT_HEIGHT / top as f64;
    let y_of = |v: u64| BASE - v as f64 * scale;
    let ticks: Vec<u64> = (0..=top / step).map(|k| k * step).collect();
    let mut rows = vec!["breaks", "TTL", "patches"];
    if lanes > 1 {
        rows.push("lanes");
    }
    let row_y = |k: usize| ROWS_TOP + k as f64 * ROW_HEIGHT + ROW_HEIGHT / 2.0;
    let height = ROWS_TOP + rows.len() as f64 * ROW_HEIGHT + 4.0;
    let col = 100.0 / n as f64;
    let every = label_step(n, zoom);
    let width = format!(
        "width:calc({zoom} * max(100%, {}px));max-width:{}px",
        n as f64 * MIN_PITCH,
        n as f64 * MAX_PITCH * zoom as f64
    );
    html! {
        div.chart {
            svg.axis width=(AXIS_WIDTH) height=(px(height)) role="presentation" {
                text transform="rotate(-90)" x=(px(-(TOP + PLOT_HEIGHT / 2.0))) y="12" text-anchor="middle" { "tokens" }
                @for v in &ticks {
                    text x=(AXIS_WIDTH - 6.0) y=(px(y_of(*v) + 4.0)) text-anchor="end" { (format::short_tokens(*v)) }
                }
                text x=(AXIS_WIDTH - 6.0) y=(px(LABEL_Y)) text-anchor="end" { "request" }
                @for (k, name) in rows.iter().enumerate() {
                    text.row x=(AXIS_WIDTH - 6.0) y=(px(row_y(k) + 4.0)) text-anchor="end" { (name) }
                }
            }
            div.scroll {
                svg.plot height=(px(height)) style=(width) role="img"
                    aria-label={ "tokens per request, " (requests.len()) " requests" } {
                    @for v in ticks.iter().skip(1) {
                        line.grid x1="0" x2="100%" y1=(px(y_of(*v))) y2=(px(y_of(*v))) {}
                    }
                    @for k in 0..rows.len() {
                        line.grid x1="0" x2="100%" y1=(px(ROWS_TOP + k as f64 * ROW_HEIGHT)) y2=(px(ROWS_TOP + k as f64 * ROW_HEIGHT)) {}
                    }
                    @for (i, r) in requests.iter().enumerate() {
                        (bar(r, i as f64 * col, col, scale))
                    }
                    line.base x1="0" x2="100%" y1=(px(BASE)) y2=(px(BASE)) {}
                    @for (i, r) in requests.iter().enumerate() {
                        @let center = (i as f64 + 0.5) * col;
                        // Request 1 is labelled too, unless the next label would crowd it.
                        @if r.number().is_multiple_of(every) || (i == 0 && every != 2) {
                            text.x x=(pct(center)) y=(px(LABEL_Y)) text-anchor="middle" { (r.number()) }
                        }
                        @if let Some(gap) = r.gap.filter(|g| g.expired()) {
                            line x1=(pct(i as f64 * col)) x2=(pct(i as f64 * col)) y1=(px(TOP)) y2=(px(BASE))
                                stroke=(TTL) stroke-width="1.5" stroke-dasharray="4 3" {}
                            g.mark.ttl {
                                title { "#" (r.number()) ": " (describe::gap(&gap)) }
                                svg x=(pct(center)) y=(px(row_y(1))) overflow="visible" {
                                    @if matches!(gap.expiry, Expiry::All(_)) {
                                        path d="M0,-5L5,0L0,5L-5,0Z" fill=(TTL) {}
                                    } @else {
                                        path d="M0,-4.5L4.5,0L0,4.5L-4.5,0Z" fill="#fff" stroke=(TTL) stroke-width="1.5" {}
                                    }
                                }
                            }
                        }
                        @if let Some(d) = &r.record.diagnosis {
                            g.mark.brk {
                                title { "#" (r.number()) " break: " (describe::diagnosis(d)) }
                                svg x=(pct(center)) y=(px(row_y(0))) overflow="visible" {
                                    path d="M-5,5L0,-5L5,5Z" fill=(BREAK) {}
                                }
                            }
                        }
                        @if let Some(outcome) = notable(&r.patches) {
                            g.mark.patch {
                                title {
                                    "#" (r.number()) " patches:"
                                    @for p in &r.patches { "\n" (p.outcome.label()) " " (describe::patch(p)) }
                                }
                                circle cx=(pct(center)) cy=(px(row_y(2))) r="4" fill=(outcome_color(outcome)) {}
                            }
                        }
                        @if lanes > 1 {
                            rect x=(pct(i as f64 * col)) y=(px(row_y(3) - 4.0)) width=(pct(col)) height="8"
                                fill=(LANES[r.record.lane as usize % LANES.len()]) {
                                title { "#" (r.number()) " lane " (r.record.lane) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One request's column: the hover area, the stacked bar, and a red wash behind a break.
fn bar(r: &RequestView<'_>, left: f64, col: f64, scale: f64) -> Markup {
    let (x, w) = (left + col * 0.15, col * 0.7);
    let u = r.usage.unwrap_or_default();
    // Writes that live an hour or more (Anthropic's 1h, OpenAI's 12h) share one colour.
    let write_1h = (u.cache_write_1h + u.cache_write_12h).min(u.cache_write);
    // Bottom to top: read, written (5m or unsplit), written (1h or 12h), uncached.
    let mut y = BASE;
    let mut segments = Vec::new();
    for (tokens, color) in [
        (u.cache_read, READ),
        (u.cache_write - write_1h, WRITE),
        (write_1h, WRITE_1H),
        (u.uncached, UNCACHED),
    ] {
        if tokens > 0 {
            let h = tokens as f64 * scale;
            y -= h;
            segments.push((y, h, color));
        }
    }
    html! {
        a href={ "#r" (r.number()) } {
            g.req {
                title { (tooltip(r)) }
                rect.hover x=(pct(left)) y=(px(TOP)) width=(pct(col)) height=(px(PLOT_HEIGHT + 18.0)) {}
                @if r.record.diagnosis.is_some() {
                    rect x=(pct(left)) y=(px(TOP)) width=(pct(col)) height=(px(PLOT_HEIGHT)) fill=(BREAK) fill-opacity="0.09" {}
                }
                @for (y, h, color) in &segments {
                    rect x=(pct(x)) y=(px(*y)) width=(pct(w)) height=(px(*h)) fill=(color) {}
                }
                @if r.usage.is_none() || r.failed() {
                    rect x=(pct(x)) y=(px(BASE - 4.0)) width=(pct(w)) height="4" fill=(BREAK) {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_steps_are_round() {
        assert_eq!(nice_step(8000, 4), 2000);
        assert_eq!(nice_step(9000, 4), 2500);
        assert_eq!(nice_step(10_228, 6), 2000);
        assert_eq!(nice_step(150_000, 6), 25_000);
        assert_eq!(nice_step(0, 6), 1);
    }

    fn views(n: u64) -> Vec<crate::session::entry::Entry> {
        (0..n)
            .map(|i| {
                crate::session::entry::Entry::Request(crate::session::entry::RequestRecord {
                    request_index: i,
                    time: i * 1000,
                    usage: Some(crate::usage::Usage {
                        cache_read: 1000 + i,
                        uncached: 5,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
            })
            .collect()
    }

    #[test]
    fn a_thousand_requests_scroll_with_sparse_labels() {
        let log = views(1000);
        let view = super::super::view::SessionView::of(&log);
        let requests: Vec<_> = view.requests().collect();
        let html = chart(&requests, 1, 1).into_string();
        assert_eq!(html.matches(r#"<g class="req">"#).count(), 1000);
        // 4 px a request: 4000 px wide, scrolling inside the page.
        assert!(html.contains("max(100%, 4000px)"), "{html:.300}");
        let labels = html.matches(r#"<text class="x""#).count();
        assert!((10..=101).contains(&labels), "{labels} labels");
        // One request: one bar no wider than a column.
        let log = views(1);
        let view = super::super::view::SessionView::of(&log);
        let requests: Vec<_> = view.requests().collect();
        let html = chart(&requests, 1, 1).into_string();
        assert!(
            html.contains(&format!("max-width:{MAX_PITCH}px")),
            "{html:.300}"
        );
    }

    #[test]
    fn labels_keep_apart_at_every_size() {
        for n in [1, 9, 80, 200, 1000] {
            for zoom in ZOOMS {
                let step = label_step(n, zoom) as f64;
                let pitch = (FIT_WIDTH / n as f64).clamp(MIN_PITCH, MAX_PITCH) * zoom as f64;
                assert!(step * pitch >= LABEL_ROOM, "n={n} zoom={zoom}");
            }
        }
        assert_eq!(label_step(9, 1), 1);
        assert!(label_step(1000, 1) >= 10);
    }
}
