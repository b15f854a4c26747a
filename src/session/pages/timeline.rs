//! `GET /sessions/{id}/timeline`: one session on one page. Figures for the whole session,
//! the chart, then a table with a row per request (time, gap and TTL expiry, lane, model,
//! variant, tokens by kind, hit ratio, cost and savings, the break and every patch, the
//! full diagnosis one click away) and a totals row.

use std::collections::HashMap;

use maud::{html, Markup};

use super::chart::{self, ZOOMS};
use super::describe;
use super::format;
use super::layout::{self, card, swatch, BREAK, READ, TTL, UNCACHED, WRITE, WRITE_1H};
use super::view::{Money, RequestView, Row, SessionView, Totals};
use crate::route::Provider;
use crate::session::entry::{ContextTransform, Entry};
use crate::session::store::{SessionStore, StoreResult};
use crate::usage::Usage;

/// A candidate policy's predicted cache reads per request (the live what-if's), by the
/// time each request went upstream (the log's `sent_ms`).
pub type Predicted<'a> = (&'a str, &'a HashMap<u64, u64>);

/// The page for session `id`, or `None` for an unknown session. `query` may hold
/// `zoom=2|4|8` (the chart's width over the window's). With `whatif`, a column of the
/// candidate's reads beside the real ones.
pub async fn timeline_html(
    store: &dyn SessionStore,
    id: &str,
    query: Option<&str>,
    whatif: Option<Predicted<'_>>,
) -> StoreResult<Option<String>> {
    let log = store.load_from(id, 0).await?;
    if log.is_empty() {
        return Ok(None);
    }
    Ok(Some(render_with(id, &log, zoom_from(query), whatif)))
}

fn zoom_from(query: Option<&str>) -> u32 {
    crate::http_serve::query_value(query, "zoom")
        .and_then(|z| z.parse().ok())
        .filter(|z| ZOOMS.contains(z))
        .unwrap_or(1)
}

pub fn render(id: &str, log: &[Entry], zoom: u32) -> String {
    render_with(id, log, zoom, None)
}

pub fn render_with(id: &str, log: &[Entry], zoom: u32, whatif: Option<Predicted<'_>>) -> String {
    let view = SessionView::of(log);
    let requests: Vec<&RequestView<'_>> = view.requests().collect();
    let t = &view.totals;
    let with_date = match (t.first, t.last) {
        (Some(a), Some(b)) => format::different_days(a, b),
        _ => false,
    };
    let columns = Columns {
        lanes: t.lanes.len() > 1,
        variants: !t.variants.is_empty(),
        with_date,
        whatif,
    };
    let body = html! {
        p.nav { a href="/sessions" { "← all sessions" } }
        h1 { "Session " (id) }
        p.sub { (subtitle(t)) }
        (cards(t))
        div.legend {
            (swatch(READ, "read from cache"))
            (swatch(WRITE, "written to cache"))
            (swatch(WRITE_1H, "written, 1h TTL"))
            (swatch(UNCACHED, "uncached"))
            (swatch(BREAK, "prefix break"))
            (swatch(TTL, "gap past the markers' TTL"))
            span.dim { "hover a bar for its details; click it for its row" }
            @if requests.len() > 40 {
                span.zoom {
                    "zoom"
                    @for z in ZOOMS {
                        @if z == zoom { b { (z) "×" } }
                        @else { a href={ "?zoom=" (z) } { (z) "×" } }
                    }
                }
            }
        }
        (chart::chart(&requests, zoom, t.lanes.len()))
        div.table-wrap {
            table.requests {
                thead { (header(&columns)) }
                tbody {
                    @for row in &view.rows {
                        @match row {
                            Row::Request(r) => (request_row(r, &columns)),
                            Row::Transform(tr) => (transform_row(tr, &columns)),
                        }
                    }
                }
                tfoot { (totals_row(t, &columns)) }
            }
        }
    };
    layout::page(&format!("cachet · session {id}"), body)
}

/// Which optional columns the session needs.
struct Columns<'a> {
    lanes: bool,
    variants: bool,
    with_date: bool,
    /// The live what-if's best candidate and its reads.
    whatif: Option<Predicted<'a>>,
}

impl Columns<'_> {
    fn count(&self) -> usize {
        12 + usize::from(self.lanes)
            + usize::from(self.variants)
            + usize::from(self.whatif.is_some())
    }
}

fn subtitle(t: &Totals) -> String {
    let mut parts = vec![format!(
        "{} request{}",
        t.requests,
        if t.requests == 1 { "" } else { "s" }
    )];
    if t.lanes.len() > 1 {
        parts[0].push_str(&format!(" in {} lanes", t.lanes.len()));
    }
    if let Some(client) = t.main_client() {
        parts.push(format!("client {client}"));
    }
    let models: Vec<&str> = t
        .models
        .iter()
        .map(|(m, _)| m.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    if !models.is_empty() {
        parts.push(models.join(", "));
    }
    if !t.variants.is_empty() {
        let variants: Vec<&str> = t.variants.iter().map(|(v, _)| v.as_str()).collect();
        parts.push(format!("variants {}", variants.join(", ")));
    }
    if let (Some(first), Some(last)) = (t.first, t.last) {
        parts.push(format!(
            "{} to {} ({})",
            format::datetime(first),
            format::clock(last, format::different_days(first, last)),
            format::duration(last - first)
        ));
    }
    parts.join(" · ")
}

fn money_total(t: &Totals) -> (String, String) {
    if t.priced == 0 && t.unpriced > 0 {
        return ("unpriced".into(), "unpriced".into());
    }
    (format::usd(t.cost), format::usd(t.savings))
}

fn cards(t: &Totals) -> Markup {
    let (cost, savings) = money_total(t);
    let unpriced = if t.unpriced > 0 {
        format!(" ({} unpriced)", t.unpriced)
    } else {
        String::new()
    };
    html! {
        div.cards {
            (card(&t.requests.to_string(), &if t.failed > 0 { format!("requests, {} failed", t.failed) } else { "requests".into() }, ""))
            (card(&format::percent(t.hit()), "read from cache", ""))
            (card(&cost, &format!("cost{unpriced}"), ""))
            (card(&savings, "saved by caching", if t.savings > 0.0 { "good" } else { "" }))
            (card(&t.breaks.to_string(), "prefix breaks", if t.breaks > 0 { "bad" } else { "" }))
            (card(&t.expired_gaps.to_string(), "gaps past TTL", if t.expired_gaps > 0 { "bad" } else { "" }))
            (card(&t.patches.to_string(), "patches", ""))
        }
    }
}

fn header(c: &Columns) -> Markup {
    html! {
        tr {
            th title="request number (request_index + 1)" { "#" }
            th.l { "time (UTC)" }
            th title="since the previous request of the same lane" { "gap" }
            @if c.lanes { th { "lane" } }
            th.l { "model" }
            @if c.variants { th.l { "variant" } }
            th { "read" }
            @if let Some((name, _)) = c.whatif {
                th title={ "cache reads predicted under " (name) ", the candidate that would have saved most (the live what-if)" } { "could read" }
            }
            th { "written" }
            th { "uncached" }
            th { "output" }
            th { "hit" }
            th { "cost" }
            th title="against sending every input token uncached" { "saved" }
            th.l { "break · patches" }
        }
    }
}

fn money_cells(money: Money) -> Markup {
    html! {
        @match money {
            Money::Priced { cost, savings } => {
                td { (format::usd(cost)) }
                td { (format::usd(savings)) }
            }
            Money::Unpriced => {
                td.dim title="the model is not in the model table" { "unpriced" }
                td.dim { "unpriced" }
            }
            Money::NoUsage => { td.dim { "–" } td.dim { "–" } }
        }
    }
}

fn request_row(r: &RequestView<'_>, c: &Columns) -> Markup {
    let rec = r.record;
    let u = r.usage.unwrap_or_default();
    let dash = r.usage.is_none();
    let num = |n: u64| {
        if dash {
            "–".to_owned()
        } else {
            format::tokens(n)
        }
    };
    html! {
        tr id={ "r" (r.number()) } {
            td { (r.number()) }
            td.l title=(format::datetime(rec.time)) { (format::clock(rec.time, c.with_date)) }
            @match &r.gap {
                Some(gap) => {
                    @if let Some(short) = describe::expiry_short(gap) {
                        td.expired title=(describe::gap(gap)) { (format::duration(gap.ms)) " " span.ttl { (short) } }
                    } @else {
                        td title=(describe::gap(gap)) { (format::duration(gap.ms)) }
                    }
                }
                None => td.dim title="the first request of its lane" { "–" },
            }
            @if c.lanes { td { (rec.lane) } }
            td.l { (rec.model) @if u.fast { span.dim title="served in fast mode, priced at its multiplier" { " · fast" } } @if u.flex { span.dim title="served by flex processing, priced at half" { " · flex" } } @if u.us_only { span.dim title="inference run in the US only, priced at its multiplier" { " · us" } } }
            @if c.variants { td.l { (rec.variant.as_deref().unwrap_or("–")) } }
            td { (num(u.cache_read)) }
            @if let Some((name, reads)) = c.whatif {
                @match rec.sent_ms.and_then(|at| reads.get(&at)) {
                    Some(n) => td.whatif title={ "under " (name) } { (format::tokens(*n)) },
                    None => td.dim title="not followed by the what-if" { "–" },
                }
            }
            td title=(write_split(&rec.provider, &u)) { (num(u.cache_write)) }
            td { (num(u.uncached)) }
            td { (num(u.output)) }
            td { (format::percent(r.hit())) }
            (money_cells(r.money))
            td.events { (events(r)) }
        }
    }
}

/// The written tokens by lifetime, in the provider's own terms: Anthropic's 5-minute and
/// 1-hour markers; OpenAI's 30-minute writes, or 12-hour ones when asked.
fn write_split(provider: &str, u: &Usage) -> String {
    let shorter = u
        .cache_write
        .saturating_sub(u.cache_write_1h + u.cache_write_12h);
    let mut split = if provider == Provider::OpenAi.label() {
        format!(
            "{}: {}",
            crate::providers::openai::TTL_30M,
            format::tokens(shorter)
        )
    } else {
        format!(
            "5m: {}, 1h: {}",
            format::tokens(shorter),
            format::tokens(u.cache_write_1h)
        )
    };
    if u.cache_write_12h > 0 {
        split += &format!(", 12h: {}", format::tokens(u.cache_write_12h));
    }
    split
}

/// The break (its full diagnosis one click away), a failed status, and the patches.
fn events(r: &RequestView<'_>) -> Markup {
    let rec = r.record;
    html! {
        @if r.failed() || r.usage.is_none() {
            div.ev {
                span.tag.status { "status " (rec.status.map_or("?".into(), |s| s.to_string())) }
                @if r.usage.is_none() { "no usage reported" }
            }
        }
        @if let Some(outcome) = &rec.outcome {
            div.ev {
                span.tag.status { (describe::outcome(outcome)) }
                " usage as counted before the end"
            }
        }
        @if rec.warmup {
            div.ev {
                span.tag { "warmup" }
                " prepares the next turn (generate: false): no output, compared with nothing"
            }
        }
        @if let Some(d) = &rec.diagnosis {
            details.ev.brk {
                summary {
                    span class={ "tag blame " (d.blame().who.label()) } { (d.blame().who.label()) }
                    b { (d.reason.label()) } " in " (d.section.label()) ": " (d.detail)
                }
                dl {
                    @for (label, value) in describe::diagnosis_facts(d) { dt { (label) } dd { (value) } }
                    @if let Some(p) = &rec.provider_diagnosis {
                        dt { "provider says" } dd { (describe::provider_reason(p)) }
                        dt { "provider's answer" } dd { (p.to_string()) }
                    }
                }
            }
            @if let Some(advice) = crate::measure::blame::advice(d) { div.ev.advice { (advice) } }
        } @else if let Some(p) = &rec.provider_diagnosis {
            div.ev.dim { "provider: " (describe::provider_reason(p)) }
        }
        @if let Some(u) = &r.usage {
            @if let Some(i) = u.iterations.filter(|i| i.compactions > 0) {
                div.ev.dim {
                    "provider compacted the conversation: the prompt as sent read "
                    (format::tokens(i.first_read)) ", the answer ran on "
                    (format::tokens(u.left_cached())) " (both billed)"
                }
            }
            @if let Some(c) = u.cleared {
                div.ev.dim {
                    "provider cleared " (c.tool_uses) " tool uses (" (format::tokens(c.input_tokens)) ") before caching"
                }
            }
        }
        @for p in &r.patches {
            div.ev title=(describe::patch(p)) {
                span class={ "tag " (p.outcome.label()) } { (p.outcome.label()) }
                (p.transformer) " (" (p.reason) "): " (p.ops.join(", "))
                @if p.count > 1 { " ×" (p.count) }
                @if !p.invalidate.is_empty() {
                    span.inv { "invalidates the cache: " (p.invalidate.join("; ")) }
                }
                @if let Some(error) = &p.error { span.err { (error) } }
            }
        }
    }
}

fn transform_row(t: &ContextTransform, c: &Columns) -> Markup {
    let ops: Vec<&str> = t.patch.iter().map(|op| op.name()).collect();
    html! {
        tr.transform {
            td colspan=(c.count()) {
                span.tag.persisted { "persisted" }
                "patch by " (t.transformer) " (" (t.reason) "): " (ops.join(", "))
                @if let Some(i) = t.request_index { " · made during request " (i + 1) ", which has no entry" }
            }
        }
    }
}

fn totals_row(t: &Totals, c: &Columns) -> Markup {
    let u = &t.usage;
    let (cost, savings) = money_total(t);
    html! {
        tr {
            td.l colspan="2" { "total" }
            td { (t.first.zip(t.last).map_or("–".into(), |(a, b)| format::duration(b - a))) }
            @if c.lanes { td { (t.lanes.len()) } }
            td.l { (t.models.len()) " model" @if t.models.len() != 1 { "s" } }
            @if c.variants { td.l { (t.variants.len()) } }
            td { (format::tokens(u.cache_read)) }
            @if let Some((_, reads)) = c.whatif {
                td { (format::tokens(reads.values().sum())) }
            }
            td { (format::tokens(u.cache_write)) }
            td { (format::tokens(u.uncached)) }
            td { (format::tokens(u.output)) }
            td { (format::percent(t.hit())) }
            td {
                (cost)
                @if t.unpriced > 0 && cost != "unpriced" { " " br; span.dim { "+ " (t.unpriced) " unpriced" } }
            }
            td { (savings) }
            td.events {
                (t.requests) " requests · " (t.breaks) " break" @if t.breaks != 1 { "s" }
                " · " (t.expired_gaps) " past TTL · " (t.patches) " patch" @if t.patches != 1 { "es" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::breaks::SectionName;
    use crate::measure::{BreakReason, Diagnosis};
    use crate::session::anchor::Anchor;
    use crate::session::entry::{PatchEvent, PatchOutcome, RequestRecord, ENTRY_VERSION};
    use crate::usage::Usage;

    const EVIL: &str = "<script>alert(1)</script>\"'&";

    #[test]
    fn what_clients_and_hooks_name_is_escaped() {
        let request = RequestRecord {
            version: ENTRY_VERSION,
            model: EVIL.into(),
            client: Some(EVIL.into()),
            variant: Some(EVIL.into()),
            usage: Some(Usage::default()),
            diagnosis: Some(Diagnosis {
                section: SectionName::Tools,
                reason: BreakReason::ToolsChanged,
                part: None,
                tool: Some(EVIL.into()),
                message_index: None,
                expected_read: None,
                read: 0,
                detail: EVIL.into(),
                blame: None,
            }),
            provider_diagnosis: Some(serde_json::json!({ "cache_miss_reason": { "type": EVIL } })),
            patches: vec![PatchEvent {
                error: Some(EVIL.into()),
                invalidate: vec![EVIL.into()],
                ..PatchEvent::new(EVIL, EVIL, PatchOutcome::Refused, &[])
            }],
            ..RequestRecord::default()
        };
        let transform = ContextTransform {
            version: ENTRY_VERSION,
            time: 0,
            transformer: EVIL.into(),
            reason: EVIL.into(),
            anchor: Anchor {
                count: 0,
                hash: String::new(),
            },
            patch: Vec::new(),
            display: None,
            request_index: Some(7),
        };
        let log = [Entry::Request(request), Entry::ContextTransform(transform)];
        let html = render(EVIL, &log, 1);
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("alert(1)</"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;&quot;'&amp;"));
        // Every value above is shown: the id, model, client, variant, tool, detail, the
        // provider's reason, the patch's names and error, the transform.
        assert!(html.matches("&lt;script&gt;").count() >= 10, "{html}");
    }

    /// What the provider did to the prompt on its own is on the request's row: a
    /// server-side compaction (from `usage.iterations`) and cleared tool results (from
    /// `context_management.applied_edits`).
    #[test]
    fn the_providers_compaction_and_clearing_are_shown() {
        let usage = Usage {
            cache_read: 151_900,
            uncached: 7,
            iterations: Some(crate::usage::Iterations {
                first_read: 150_000,
                last_read: 1_900,
                last_write: 700,
                compactions: 1,
            }),
            cleared: Some(crate::usage::Cleared {
                tool_uses: 8,
                input_tokens: 52_000,
            }),
            ..Usage::default()
        };
        let request = RequestRecord {
            version: ENTRY_VERSION,
            model: "claude-opus-4-6".into(),
            usage: Some(usage),
            ..RequestRecord::default()
        };
        let html = render("s", &[Entry::Request(request)], 1);
        assert!(
            html.contains("provider compacted the conversation"),
            "{html}"
        );
        assert!(html.contains("provider cleared 8 tool uses"), "{html}");
        let plain = RequestRecord {
            usage: Some(Usage::default()),
            ..RequestRecord::default()
        };
        let html = render("s", &[Entry::Request(plain)], 1);
        assert!(!html.contains("provider c"), "{html}");
    }

    /// A fast-mode, flex or US-only answer says so beside its model, and no other mark;
    /// 12-hour writes are named in the written cell's split.
    #[test]
    fn fast_answers_and_twelve_hour_writes_are_shown() {
        let shown = |usage: Usage| {
            let record = RequestRecord {
                version: ENTRY_VERSION,
                model: "claude-opus-5-5".into(),
                usage: Some(usage),
                ..RequestRecord::default()
            };
            render("s", &[Entry::Request(record)], 1)
        };
        let marks = [" · fast", " · flex", " · us"];
        let served = [
            Usage {
                fast: true,
                ..Usage::default()
            },
            Usage {
                flex: true,
                ..Usage::default()
            },
            Usage {
                us_only: true,
                ..Usage::default()
            },
        ];
        for (i, usage) in served.into_iter().enumerate() {
            let page = shown(Usage {
                uncached: 10,
                ..usage
            });
            for (j, mark) in marks.iter().enumerate() {
                assert_eq!(page.contains(mark), i == j, "{mark}: {page}");
            }
        }
        let twelve = shown(Usage {
            cache_write: 3_000,
            cache_write_12h: 2_000,
            ..Usage::default()
        });
        assert!(marks.iter().all(|m| !twelve.contains(m)), "{twelve}");
        assert!(twelve.contains("12h: 2,000"), "{twelve}");
    }

    /// OpenAI writes live 30 minutes, or 12 hours when asked (GPT-5.6 and later: "The cache
    /// write price is for 30 minutes of retention", the gpt-6.2-sol model page); they are
    /// named so, not by Anthropic's 5-minute and 1-hour lifetimes.
    #[test]
    fn openai_writes_are_named_by_their_own_lifetimes() {
        let record = |provider: &str| RequestRecord {
            version: ENTRY_VERSION,
            model: "gpt-6.2-sol".into(),
            provider: provider.into(),
            usage: Some(Usage {
                cache_write: 3_000,
                cache_write_12h: 2_000,
                ..Usage::default()
            }),
            ..RequestRecord::default()
        };
        let openai = render("s", &[Entry::Request(record("openai"))], 1);
        assert!(openai.contains("30m: 1,000, 12h: 2,000"), "{openai}");
        assert!(
            !openai.contains("5m:") && !openai.contains("1h:"),
            "{openai}"
        );
        let anthropic = render("s", &[Entry::Request(record("anthropic"))], 1);
        assert!(anthropic.contains("5m: 1,000, 1h: 0"), "{anthropic}");
    }
}
