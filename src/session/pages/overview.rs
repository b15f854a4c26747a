//! `GET /sessions` for a browser: the most recently active sessions (`limit`, 50 unless
//! asked otherwise) with client (and its A/B variant), model, requests, hit ratio, cost, savings, breaks and last
//! activity, each linked to its timeline. Sorted by `?sort=KEY&order=asc|desc`; the column
//! headers are those links, so sorting needs no script.

use std::cmp::Ordering;

use maud::{html, Markup};

use super::format;
use super::layout::{self, card};
use super::view::{SessionView, Totals};
use crate::session::store::{SessionStore, SessionSummary, StoreResult};
use crate::session::whatif::WhatIfBoard;
use crate::usage::Usage;

/// A column to sort by, named as in `?sort=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Session,
    Client,
    Model,
    Requests,
    Hit,
    Cost,
    Savings,
    Breaks,
    Last,
}

impl SortKey {
    const ALL: [SortKey; 9] = [
        SortKey::Session,
        SortKey::Client,
        SortKey::Model,
        SortKey::Requests,
        SortKey::Hit,
        SortKey::Cost,
        SortKey::Savings,
        SortKey::Breaks,
        SortKey::Last,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Session => "session",
            SortKey::Client => "client",
            SortKey::Model => "model",
            SortKey::Requests => "requests",
            SortKey::Hit => "hit",
            SortKey::Cost => "cost",
            SortKey::Savings => "savings",
            SortKey::Breaks => "breaks",
            SortKey::Last => "last",
        }
    }

    fn title(self) -> &'static str {
        match self {
            SortKey::Session => "session",
            SortKey::Client => "client",
            SortKey::Model => "model",
            SortKey::Requests => "requests",
            SortKey::Hit => "hit ratio",
            SortKey::Cost => "cost",
            SortKey::Savings => "saved",
            SortKey::Breaks => "breaks",
            SortKey::Last => "last activity",
        }
    }

    /// Names read A to Z first; figures and times largest first.
    fn default_descending(self) -> bool {
        !matches!(self, SortKey::Session | SortKey::Client | SortKey::Model)
    }

    fn is_text(self) -> bool {
        !self.default_descending()
    }
}

/// The order asked for: `?sort=cost&order=asc`. Unknown values fall back to the
/// default, most recent activity first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort {
    pub key: SortKey,
    pub descending: bool,
}

impl Sort {
    pub fn from_query(query: Option<&str>) -> Sort {
        let key = crate::http_serve::query_value(query, "sort")
            .and_then(|name| SortKey::ALL.into_iter().find(|k| k.name() == name))
            .unwrap_or(SortKey::Last);
        let descending = match crate::http_serve::query_value(query, "order") {
            Some("asc") => false,
            Some("desc") => true,
            _ => key.default_descending(),
        };
        Sort { key, descending }
    }

    fn apply(self, rows: &mut [SessionRow]) {
        rows.sort_by(|a, b| {
            let (ma, mb) = (missing(self.key, a), missing(self.key, b));
            let by_key = compare(self.key, a, b);
            let by_key = if self.descending {
                by_key.reverse()
            } else {
                by_key
            };
            // Rows without the value last, whichever the order; ties most recent first,
            // then by id, so the order is stable.
            ma.cmp(&mb)
                .then(by_key)
                .then(b.summary.updated.cmp(&a.summary.updated))
                .then(a.summary.id.cmp(&b.summary.id))
        });
    }
}

/// One session's line: what the store lists and what its log adds up to.
pub struct SessionRow {
    pub summary: SessionSummary,
    pub totals: Totals,
    /// The live what-if's best candidate for the session and what it would have saved.
    pub could_save: Option<(String, f64)>,
}

impl SessionRow {
    /// `None` when nothing in the session could be priced.
    fn cost(&self) -> Option<f64> {
        (self.totals.priced > 0).then_some(self.totals.cost)
    }

    fn savings(&self) -> Option<f64> {
        (self.totals.priced > 0).then_some(self.totals.savings)
    }
}

/// Whether the row lacks the value sorted by (no client, unpriced, nothing sent).
fn missing(key: SortKey, row: &SessionRow) -> bool {
    match key {
        SortKey::Client => row.totals.main_client().is_none(),
        SortKey::Model => row.totals.main_model().is_none(),
        SortKey::Hit => row.totals.hit().is_none(),
        SortKey::Cost | SortKey::Savings => row.cost().is_none(),
        _ => false,
    }
}

fn compare(key: SortKey, a: &SessionRow, b: &SessionRow) -> Ordering {
    fn opt<T: PartialOrd>(a: Option<T>, b: Option<T>) -> Ordering {
        match (a, b) {
            (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            (Some(_), None) => Ordering::Greater,
            (None, Some(_)) => Ordering::Less,
            (None, None) => Ordering::Equal,
        }
    }
    let (ta, tb) = (&a.totals, &b.totals);
    match key {
        SortKey::Session => a.summary.id.cmp(&b.summary.id),
        SortKey::Client => opt(ta.main_client(), tb.main_client()),
        SortKey::Model => opt(ta.main_model(), tb.main_model()),
        SortKey::Requests => ta.requests.cmp(&tb.requests),
        SortKey::Hit => opt(ta.hit(), tb.hit()),
        SortKey::Cost => opt(a.cost(), b.cost()),
        SortKey::Savings => opt(a.savings(), b.savings()),
        SortKey::Breaks => ta.breaks.cmp(&tb.breaks),
        SortKey::Last => a.summary.updated.cmp(&b.summary.updated),
    }
}

/// The page: the store's most recent sessions, each log added up.
/// With the live what-if's `board`, each session's "could save" and the fleet's total per
/// candidate.
pub async fn overview_html(
    store: &dyn SessionStore,
    query: Option<&str>,
    board: Option<&WhatIfBoard>,
) -> StoreResult<String> {
    let limit = crate::session::pages::json::limit_from(query);
    let sort = Sort::from_query(query);
    let mut rows = Vec::new();
    for summary in store.list_sessions(limit).await? {
        let log = store.load_from(&summary.id, 0).await?;
        let totals = SessionView::of(&log).totals;
        let could_save = board
            .and_then(|b| b.best(&summary.id))
            .map(|(name, saving)| (name.to_owned(), saving));
        rows.push(SessionRow {
            summary,
            totals,
            could_save,
        });
    }
    sort.apply(&mut rows);
    let board = board.filter(|b| !b.sessions.is_empty());
    Ok(render(&rows, sort, limit, crate::session::now_ms(), board))
}

/// Per candidate, over the sessions the what-if follows that it applies to: what the
/// provider billed for them, the candidate's predicted hit ratio and cost, and its saving
/// against the client as sent on the same cache model.
fn fleet(board: &WhatIfBoard) -> Markup {
    let fleet = board.fleet();
    let client = fleet.first().map_or(0.0, |r| r.cost_usd);
    html! {
        h2 { "What the candidate policies could save" }
        p.sub {
            "Predicted off the request path on the emulator's cache model over the "
            (board.sessions.len()) " session" @if board.sessions.len() != 1 { "s" }
            " followed, as " code { "cachet replay --arm" } " would: the client as it sent its requests "
            (format::usd(client)) "."
        }
        table.whatif {
            thead { tr {
                th.l { "candidate" } th { "sessions" } th { "billed" } th { "read (billed)" }
                th { "read (predicted)" } th { "cost" } th { "could save" }
            } }
            tbody {
                @for row in fleet.iter().skip(1) {
                    tr {
                        td.l { (row.candidate) }
                        td { (row.sessions) }
                        td title="what the provider billed for these sessions" { (format::usd(row.billed_usd)) }
                        td title="billed" { (format::percent(Some(row.billed_hit_ratio))) }
                        td title="under the candidate" { (format::percent(Some(row.hit_ratio))) }
                        td { (format::usd(row.cost_usd)) }
                        td class=(if row.saving_usd > 0.0 { "good" } else { "" }) { (format::usd(row.saving_usd)) }
                    }
                }
            }
        }
    }
}

fn header_link(key: SortKey, sort: Sort, limit: usize) -> Markup {
    let sorted = key == sort.key;
    let descending = if sorted {
        !sort.descending
    } else {
        key.default_descending()
    };
    let order = if descending { "desc" } else { "asc" };
    let arrow = match (sorted, sort.descending) {
        (false, _) => "",
        (true, true) => " ▼",
        (true, false) => " ▲",
    };
    let class = match (sorted, key.is_text()) {
        (true, true) => "l sorted",
        (true, false) => "sorted",
        (false, true) => "l",
        (false, false) => "",
    };
    html! {
        th class=(class) {
            a href={ "?sort=" (key.name()) "&order=" (order) "&limit=" (limit) }
                title={ "sort by " (key.title()) } { (key.title()) (arrow) }
        }
    }
}

pub fn render(
    rows: &[SessionRow],
    sort: Sort,
    limit: usize,
    now: u64,
    board: Option<&WhatIfBoard>,
) -> String {
    let mut all = Totals::default();
    for row in rows {
        let t = &row.totals;
        all.requests += t.requests;
        all.usage.add(&t.usage);
        all.cost += t.cost;
        all.savings += t.savings;
        all.priced += t.priced;
        all.unpriced += t.unpriced;
        all.breaks += t.breaks;
        all.add_blames(t);
    }
    let money = |x: f64| {
        if all.priced == 0 && all.unpriced > 0 {
            "unpriced".to_owned()
        } else {
            format::usd(x)
        }
    };
    let body = html! {
        h1 { "Sessions" }
        p.sub {
            "The " (rows.len()) " most recently active session" @if rows.len() != 1 { "s" }
            " (at most " (limit) "), sorted by " (sort.key.title()) ", " (order_words(sort)) ". "
            "Times are UTC. The same list as JSON: "
            code { "curl -H 'accept: application/json' …/sessions" } "."
        }
        div.cards {
            (card(&rows.len().to_string(), "sessions", ""))
            (card(&all.requests.to_string(), "requests", ""))
            (card(&format::percent(all.hit()), "read from cache", ""))
            (card(&money(all.cost), &if all.unpriced > 0 { format!("cost ({} unpriced)", plural(all.unpriced, "request")) } else { "cost".into() }, ""))
            (card(&money(all.savings), "saved by caching", if all.savings > 0.0 { "good" } else { "" }))
            (card(&all.breaks.to_string(), &breaks_label(&all), if all.breaks > 0 { "bad" } else { "" }))
        }
        @if let Some(board) = board { (fleet(board)) }
        @if rows.is_empty() {
            p.empty { "No sessions yet: requests through the proxy appear here as they are answered." }
        } @else {
            div.table-wrap {
                table.sessions {
                    thead { tr { @for key in SortKey::ALL { (header_link(key, sort, limit)) } } }
                    tbody { @for row in rows { (session_row(row, now)) } }
                    tfoot { (totals_row(&all, rows.len(), &money)) }
                }
            }
        }
    };
    layout::page("cachet · sessions", body)
}

/// The breaks card's label, with who can fix them.
fn breaks_label(all: &Totals) -> String {
    match all.breaks {
        0 => "prefix breaks".into(),
        _ => format!("prefix breaks: {}", all.blame_split()),
    }
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn order_words(sort: Sort) -> &'static str {
    match (sort.key, sort.descending) {
        (SortKey::Last, true) => "most recent first",
        (SortKey::Last, false) => "oldest first",
        (k, true) if k.is_text() => "Z to A",
        (k, false) if k.is_text() => "A to Z",
        (_, true) => "largest first",
        (_, false) => "smallest first",
    }
}

fn session_row(row: &SessionRow, now: u64) -> Markup {
    let t = &row.totals;
    let s = &row.summary;
    let others = t.models.len().saturating_sub(1);
    let models: Vec<&str> = t.models.iter().map(|(m, _)| m.as_str()).collect();
    let unpriced = |x: Option<f64>| x.map_or_else(|| "unpriced".to_owned(), format::usd);
    html! {
        tr {
            td.l { a href={ "/sessions/" (s.id) "/timeline" } { (s.id) } }
            td.l {
                (t.main_client().unwrap_or("–"))
                // The A/B arm (injection mode or experiment) the session is in.
                @if let Some(variant) = t.main_variant() {
                    span.inv title="A/B variant" { "variant " (variant) }
                }
            }
            td.l title=(models.join(", ")) {
                (t.main_model().unwrap_or("–"))
                @if others > 0 { span.dim { " +" (others) } }
            }
            td { (t.requests) }
            td {
                (format::percent(t.hit()))
                span.bar { i style={ "width:" (format!("{:.0}", t.hit().unwrap_or(0.0) * 100.0)) "%" } {} }
            }
            @if t.requests == t.failed || t.usage == Usage::default() {
                td.dim { "–" } td.dim { "–" }
            } @else {
                td {
                    (unpriced(row.cost()))
                    @if t.unpriced > 0 && t.priced > 0 {
                        span.dim title="requests of models without a price are not counted" { " +" (t.unpriced) " unpriced" }
                    }
                }
                td {
                    (unpriced(row.savings()))
                    // The live what-if's best candidate for the session.
                    @if let Some((name, saving)) = &row.could_save {
                        span.inv title={ "with " (name) } { "could save " (format::usd(*saving)) " · " (name) }
                    }
                }
            }
            td class=(if t.breaks > 0 { "brk" } else { "" }) title=(t.blame_split()) {
                (t.breaks)
                @if t.breaks > 0 { span.inv { (t.blame_split()) } }
            }
            td title=(format::datetime(s.updated)) {
                (format::clock(s.updated, format::different_days(s.updated, now)))
                span.dim { " · " (format::ago(s.updated, now)) }
            }
        }
    }
}

fn totals_row(all: &Totals, sessions: usize, money: &dyn Fn(f64) -> String) -> Markup {
    html! {
        tr {
            td.l colspan="3" { "all " (sessions) " listed" }
            td { (all.requests) }
            td { (format::percent(all.hit())) }
            td { (money(all.cost)) }
            td { (money(all.savings)) }
            td { (all.breaks) }
            td {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, updated: u64, cost: Option<f64>, client: Option<&str>) -> SessionRow {
        let mut totals = Totals::default();
        if let Some(cost) = cost {
            totals.cost = cost;
            totals.priced = 1;
        } else {
            totals.unpriced = 1;
        }
        if let Some(c) = client {
            totals.clients.push((c.into(), 1));
        }
        SessionRow {
            summary: SessionSummary {
                id: id.into(),
                created: 0,
                updated,
                entries: 1,
                requests: 1,
            },
            totals,
            could_save: None,
        }
    }

    fn ids(rows: &[SessionRow]) -> Vec<&str> {
        rows.iter().map(|r| r.summary.id.as_str()).collect()
    }

    #[test]
    fn sort_is_read_from_the_query() {
        let s = Sort::from_query(Some("sort=cost"));
        assert_eq!((s.key, s.descending), (SortKey::Cost, true));
        let s = Sort::from_query(Some("limit=5&sort=client"));
        assert_eq!((s.key, s.descending), (SortKey::Client, false));
        let s = Sort::from_query(Some("sort=cost&order=asc"));
        assert!(!s.descending);
        let s = Sort::from_query(Some("sort=%3Cscript%3E"));
        assert_eq!((s.key, s.descending), (SortKey::Last, true));
        assert_eq!(Sort::from_query(None).key, SortKey::Last);
    }

    #[test]
    fn unpriced_and_missing_values_sort_last_either_way() {
        let mut rows = vec![
            row("a", 3, Some(0.5), Some("pi")),
            row("b", 2, None, None),
            row("c", 1, Some(2.0), Some("claude-code")),
        ];
        Sort::from_query(Some("sort=cost")).apply(&mut rows);
        assert_eq!(ids(&rows), ["c", "a", "b"]);
        Sort::from_query(Some("sort=cost&order=asc")).apply(&mut rows);
        assert_eq!(ids(&rows), ["a", "c", "b"]);
        Sort::from_query(Some("sort=client")).apply(&mut rows);
        assert_eq!(ids(&rows), ["c", "a", "b"]);
        Sort::from_query(Some("sort=client&order=desc")).apply(&mut rows);
        assert_eq!(ids(&rows), ["a", "c", "b"]);
        Sort::from_query(None).apply(&mut rows);
        assert_eq!(ids(&rows), ["a", "b", "c"], "most recent first");
    }
}
