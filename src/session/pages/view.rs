//! One session's log as the pages show it: per request its usage, hit ratio, cost and
//! savings, the gap since its lane's previous request against the TTL of that request's
//! cache markers, the break diagnosis and every patch; and the session's totals.

use std::collections::{BTreeSet, HashMap};

use crate::measure::{MarkTtl, Who};
use crate::session::entry::{ContextTransform, Entry, PatchEvent, PatchOutcome, RequestRecord};
use crate::usage::Usage;

/// Cost and savings of a request, or why there are none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Money {
    Priced {
        cost: f64,
        savings: f64,
    },
    /// The model is not in the model table: no price is shown rather than a wrong one.
    Unpriced,
    /// The provider reported no usage (an error, a cut stream).
    NoUsage,
}

/// What became of the previous request's cache entries during the gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Within the TTL of every marker.
    Kept,
    /// Past the shortest TTL but within the longest: the entries at the shorter-lived
    /// markers expired, those at the longer-lived ones were kept.
    Partly(MarkTtl),
    /// Past the TTL of every marker (the longest is named).
    All(MarkTtl),
    /// The previous request carried no marker (automatic caching): no TTL to compare.
    Unmarked,
}

/// The time since the previous request of the same lane: what the cache had to outlive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub ms: u64,
    pub expiry: Expiry,
}

impl Gap {
    pub fn expired(&self) -> bool {
        matches!(self.expiry, Expiry::Partly(_) | Expiry::All(_))
    }
}

pub fn ttl_label(ttl: MarkTtl) -> &'static str {
    match ttl {
        MarkTtl::FiveMinutes => "5m",
        MarkTtl::OneHour => "1h",
    }
}

#[derive(Debug)]
pub struct RequestView<'a> {
    pub record: &'a RequestRecord,
    /// Usage, when the provider reported one.
    pub usage: Option<Usage>,
    pub money: Money,
    /// `None` for the first request of its lane.
    pub gap: Option<Gap>,
    /// The request's patches, plus persisted ones the log holds only as transforms.
    pub patches: Vec<PatchEvent>,
}

impl RequestView<'_> {
    /// Requests are numbered from 1 (`request_index` + 1), as the demo prints them.
    pub fn number(&self) -> u64 {
        self.record.request_index + 1
    }

    pub fn hit(&self) -> Option<f64> {
        self.usage.as_ref().and_then(hit_ratio)
    }

    pub fn failed(&self) -> bool {
        self.record.status.is_some_and(|s| !(200..300).contains(&s))
    }
}

/// Tokens read from the cache over all input tokens; `None` when no input was counted.
pub fn hit_ratio(u: &Usage) -> Option<f64> {
    let input = u.total_input();
    (input > 0).then(|| u.cache_read as f64 / input as f64)
}

/// One line of the timeline table, in log order.
#[derive(Debug)]
pub enum Row<'a> {
    Request(RequestView<'a>),
    /// A persisted patch whose request has no entry (its request failed before it was
    /// recorded), shown where the log holds it.
    Transform(&'a ContextTransform),
}

#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub requests: usize,
    /// Requests whose upstream status was not 2xx.
    pub failed: usize,
    pub usage: Usage,
    /// Over the priced requests only.
    pub cost: f64,
    pub priced: usize,
    pub savings: f64,
    /// Requests with usage whose model has no price.
    pub unpriced: usize,
    pub breaks: usize,
    /// The breaks by blame, in the order of [`Who::ALL`].
    pub blames: [usize; 4],
    pub expired_gaps: usize,
    pub patches: usize,
    pub first: Option<u64>,
    pub last: Option<u64>,
    pub lanes: BTreeSet<u32>,
    /// Distinct values in order of first use, with their request counts.
    pub models: Vec<(String, usize)>,
    pub clients: Vec<(String, usize)>,
    pub variants: Vec<(String, usize)>,
}

impl Totals {
    pub fn hit(&self) -> Option<f64> {
        hit_ratio(&self.usage)
    }

    /// The breaks by blame, those with any: `2 client · 1 provider`.
    pub fn blame_split(&self) -> String {
        (Who::ALL.iter().zip(self.blames))
            .filter(|(_, n)| *n > 0)
            .map(|(who, n)| format!("{n} {}", who.label()))
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// Add `other`'s breaks by blame to these.
    pub fn add_blames(&mut self, other: &Totals) {
        for (mine, theirs) in self.blames.iter_mut().zip(other.blames) {
            *mine += theirs;
        }
    }

    /// The most used model (the first one on a tie).
    pub fn main_model(&self) -> Option<&str> {
        most_used(&self.models)
    }

    pub fn main_client(&self) -> Option<&str> {
        most_used(&self.clients)
    }

    /// The A/B arm most requests went in (`None` outside any split).
    pub fn main_variant(&self) -> Option<&str> {
        most_used(&self.variants)
    }

    fn add(&mut self, r: &RequestView<'_>) {
        let rec = r.record;
        self.requests += 1;
        self.failed += usize::from(r.failed());
        if let Some(u) = &r.usage {
            self.usage.add(u);
        }
        match r.money {
            Money::Priced { cost, savings } => {
                self.cost += cost;
                self.priced += 1;
                self.savings += savings;
            }
            Money::Unpriced => self.unpriced += 1,
            Money::NoUsage => {}
        }
        self.breaks += usize::from(rec.diagnosis.is_some());
        if let Some(d) = &rec.diagnosis {
            let who = d.blame().who;
            self.blames[Who::ALL.iter().position(|w| *w == who).unwrap_or(3)] += 1;
        }
        self.expired_gaps += usize::from(r.gap.is_some_and(|g| g.expired()));
        self.patches += r.patches.iter().map(|p| p.count as usize).sum::<usize>();
        self.first = Some(self.first.map_or(rec.time, |t| t.min(rec.time)));
        self.last = Some(self.last.map_or(rec.time, |t| t.max(rec.time)));
        self.lanes.insert(rec.lane);
        count(&mut self.models, &rec.model);
        if let Some(client) = &rec.client {
            count(&mut self.clients, client);
        }
        if let Some(variant) = &rec.variant {
            count(&mut self.variants, variant);
        }
    }
}

fn count(seen: &mut Vec<(String, usize)>, value: &str) {
    match seen.iter_mut().find(|(v, _)| v == value) {
        Some((_, n)) => *n += 1,
        None => seen.push((value.to_owned(), 1)),
    }
}

fn most_used(seen: &[(String, usize)]) -> Option<&str> {
    let max = seen.iter().map(|(_, n)| *n).max()?;
    seen.iter()
        .find(|(_, n)| *n == max)
        .map(|(v, _)| v.as_str())
}

/// A session's log, ready to render.
#[derive(Debug)]
pub struct SessionView<'a> {
    pub rows: Vec<Row<'a>>,
    pub totals: Totals,
}

impl<'a> SessionView<'a> {
    /// Rows in request order (`request_index`): entries are written when their answer
    /// ends, which is not always the order the requests came in.
    pub fn of(log: &'a [Entry]) -> Self {
        let mut entries: Vec<(u64, u8, &'a Entry)> = Vec::new();
        let mut last_index = 0;
        for entry in log {
            match entry {
                Entry::Request(r) => {
                    last_index = r.request_index;
                    entries.push((r.request_index, 1, entry));
                }
                Entry::ContextTransform(t) if !recorded_with_request(log, t) => {
                    // Before the request it was made for (which has no entry).
                    entries.push((t.request_index.unwrap_or(last_index), 0, entry));
                }
                Entry::ContextTransform(_) | Entry::Unknown => {}
            }
        }
        entries.sort_by_key(|&(index, kind, _)| (index, kind));
        let mut rows = Vec::with_capacity(entries.len());
        let mut totals = Totals::default();
        // The latest answered request of each lane so far.
        let mut previous: HashMap<u32, &'a RequestRecord> = HashMap::new();
        for (_, _, entry) in entries {
            match entry {
                Entry::Request(record) => {
                    let view = request_view(previous.get(&record.lane).copied(), record);
                    if record.usage.is_some() {
                        previous.insert(record.lane, record);
                    }
                    totals.add(&view);
                    rows.push(Row::Request(view));
                }
                Entry::ContextTransform(t) => rows.push(Row::Transform(t)),
                Entry::Unknown => {}
            }
        }
        SessionView { rows, totals }
    }

    pub fn requests(&self) -> impl Iterator<Item = &RequestView<'a>> {
        self.rows.iter().filter_map(|row| match row {
            Row::Request(r) => Some(r),
            Row::Transform(_) => None,
        })
    }
}

/// `previous`: the lane's latest answered request before this one, as the break
/// diagnosis compares with.
fn request_view<'a>(
    previous: Option<&RequestRecord>,
    record: &'a RequestRecord,
) -> RequestView<'a> {
    let money = match &record.usage {
        None => Money::NoUsage,
        Some(u) => match crate::models::price(&record.model) {
            Some(info) => Money::Priced {
                cost: info.cost_usd(u),
                savings: info.savings_usd(u),
            },
            None => Money::Unpriced,
        },
    };
    let gap = previous.map(|prev| Gap {
        ms: record.time.saturating_sub(prev.time),
        expiry: expiry(prev, record.time),
    });
    RequestView {
        record,
        usage: record.usage,
        money,
        gap,
        patches: record.patches.clone(),
    }
}

/// What the gap since `prev` did to the entries written at its markers. Compared in whole
/// seconds, as the break diagnosis does.
fn expiry(prev: &RequestRecord, now_ms: u64) -> Expiry {
    let ttls = prev.marks.iter().map(|m| m.ttl);
    let (Some(shortest), Some(longest)) = (
        ttls.clone().min_by_key(|t| t.seconds()),
        ttls.max_by_key(|t| t.seconds()),
    ) else {
        return Expiry::Unmarked;
    };
    let gap_secs = now_ms.saturating_sub(prev.time) / 1000;
    if gap_secs > longest.seconds() {
        Expiry::All(longest)
    } else if gap_secs > shortest.seconds() {
        Expiry::Partly(shortest)
    } else {
        Expiry::Kept
    }
}

/// Whether a persisted patch is also in its request's own patch list (then the request
/// shows it).
fn recorded_with_request(log: &[Entry], t: &ContextTransform) -> bool {
    log.iter().any(|e| match e {
        Entry::Request(r) => {
            Some(r.request_index) == t.request_index
                && r.patches.iter().any(|p| {
                    p.outcome == PatchOutcome::Persisted
                        && p.transformer == t.transformer
                        && p.reason == t.reason
                })
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Mark;
    use crate::session::anchor::Anchor;
    use crate::session::entry::ENTRY_VERSION;

    fn request(index: u64, time: u64, lane: u32, ttls: &[MarkTtl]) -> RequestRecord {
        RequestRecord {
            version: ENTRY_VERSION,
            time,
            request_index: index,
            model: "claude-sonnet-4-5".into(),
            provider: "anthropic".into(),
            endpoint: "messages".into(),
            lane,
            marks: ttls
                .iter()
                .enumerate()
                .map(|(i, &ttl)| Mark {
                    block: i as u32 + 1,
                    message: None,
                    ttl,
                })
                .collect(),
            usage: Some(Usage {
                cache_read: 3000,
                cache_write: 1000,
                cache_write_5m: 1000,
                uncached: 10,
                output: 20,
                ..Usage::default()
            }),
            status: Some(200),
            ..RequestRecord::default()
        }
    }

    fn gaps(log: &[Entry]) -> Vec<Option<Gap>> {
        SessionView::of(log).requests().map(|r| r.gap).collect()
    }

    const MIN: u64 = 60_000;

    #[test]
    fn a_gap_past_the_markers_ttl_is_an_expiry() {
        use MarkTtl::{FiveMinutes as M5, OneHour as H1};
        let log = [
            Entry::Request(request(0, 0, 0, &[M5])),
            Entry::Request(request(1, 4 * MIN, 0, &[M5])),
            Entry::Request(request(2, 10 * MIN, 0, &[H1, M5])),
            Entry::Request(request(3, 20 * MIN, 0, &[H1])),
            Entry::Request(request(4, 90 * MIN, 0, &[])),
            Entry::Request(request(5, 200 * MIN, 0, &[])),
        ];
        let expiries: Vec<_> = gaps(&log)
            .into_iter()
            .map(|g| g.map(|g| (g.ms / MIN, g.expiry)))
            .collect();
        assert_eq!(
            expiries,
            [
                None,
                Some((4, Expiry::Kept)),
                Some((6, Expiry::All(M5))),
                Some((10, Expiry::Partly(M5))),
                Some((70, Expiry::All(H1))),
                Some((110, Expiry::Unmarked)),
            ]
        );
        let view = SessionView::of(&log);
        assert_eq!(view.totals.expired_gaps, 3);
    }

    #[test]
    fn gaps_are_measured_within_a_lane() {
        // A title request in lane 1 between two main-loop requests does not shorten the
        // main loop's gap.
        let log = [
            Entry::Request(request(0, 0, 0, &[MarkTtl::FiveMinutes])),
            Entry::Request(request(1, 5 * MIN, 1, &[MarkTtl::FiveMinutes])),
            Entry::Request(request(2, 7 * MIN, 0, &[MarkTtl::FiveMinutes])),
        ];
        let g = gaps(&log);
        assert_eq!(g[1], None, "first request of its lane");
        assert_eq!(g[2].map(|g| g.ms), Some(7 * MIN));
        assert!(g[2].is_some_and(|g| g.expired()));
    }

    #[test]
    fn rows_follow_request_order_when_entries_were_written_out_of_it() {
        // Request 2's answer was recorded before request 1's.
        let log = [
            Entry::Request(request(0, 0, 0, &[MarkTtl::FiveMinutes])),
            Entry::Request(request(2, 9 * MIN, 0, &[MarkTtl::FiveMinutes])),
            Entry::Request(request(1, 2 * MIN, 0, &[MarkTtl::FiveMinutes])),
        ];
        let view = SessionView::of(&log);
        let order: Vec<u64> = view.requests().map(|r| r.number()).collect();
        assert_eq!(order, [1, 2, 3]);
        let g = gaps(&log);
        assert_eq!(g[1].map(|g| g.ms), Some(2 * MIN));
        assert_eq!(g[2].map(|g| g.ms), Some(7 * MIN));
        assert!(g[2].is_some_and(|g| g.expired()));
    }

    #[test]
    fn totals_add_up_and_unknown_models_stay_unpriced() {
        let mut unknown = request(1, 1000, 0, &[]);
        unknown.model = "no-such-model-x".into();
        let mut failed = request(2, 2000, 0, &[]);
        failed.usage = None;
        failed.status = Some(529);
        let log = [
            Entry::Request(request(0, 0, 0, &[])),
            Entry::Request(unknown),
            Entry::Request(failed),
        ];
        let view = SessionView::of(&log);
        let requests: Vec<_> = view.requests().collect();
        assert!(matches!(requests[0].money, Money::Priced { cost, .. } if cost > 0.0));
        assert_eq!(requests[1].money, Money::Unpriced);
        assert_eq!(requests[2].money, Money::NoUsage);
        let t = &view.totals;
        assert_eq!((t.requests, t.failed, t.unpriced), (3, 1, 1));
        assert_eq!(t.usage.cache_read, 6000, "both answered requests count");
        let Money::Priced { cost, savings } = requests[0].money else {
            unreachable!()
        };
        assert_eq!((t.cost, t.savings), (cost, savings), "only priced requests");
        assert_eq!(t.main_model(), Some("claude-sonnet-4-5"));
        assert_eq!(t.hit(), Some(6000.0 / 8020.0));
    }

    #[test]
    fn persisted_patches_are_shown_once() {
        let transform = |index: u64, transformer: &str| {
            Entry::ContextTransform(ContextTransform {
                version: ENTRY_VERSION,
                time: 0,
                transformer: transformer.into(),
                reason: "before_request".into(),
                anchor: Anchor {
                    count: 0,
                    hash: String::new(),
                },
                patch: Vec::new(),
                display: None,
                request_index: Some(index),
            })
        };
        let mut with_event = request(0, 0, 0, &[]);
        with_event.patches = vec![PatchEvent::new(
            "memory",
            "before_request",
            PatchOutcome::Persisted,
            &[],
        )];
        let log = [
            transform(0, "memory"),
            Entry::Request(with_event),
            // Request 1 failed before it was recorded: its patch gets a row of its own.
            transform(1, "notes"),
        ];
        let view = SessionView::of(&log);
        assert_eq!(view.rows.len(), 2);
        assert!(matches!(view.rows[1], Row::Transform(t) if t.transformer == "notes"));
    }
}
