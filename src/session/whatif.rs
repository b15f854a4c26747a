//! The live what-if's figures as the admin pages read them, and the queue that feeds it.
//! Once an answer has ended and its session is known, the after-response queue hands what
//! the request was ([`Answered`]) to [`WhatIfFeed::feed`], which never waits: a full queue
//! drops it and counts it. The worker that predicts each candidate's cost (replay's arm
//! run) makes its trace record and fills a [`WhatIfBoard`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, RwLock};

use bytes::Bytes;
use prometheus::IntCounter;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::route::Route;
use crate::usage::Usage;

/// An answered request as the what-if follows it: what its trace record is made of, handed
/// over as it is (the body shared, not copied) so that the record is made on the worker.
#[derive(Debug, Clone)]
pub struct Answered {
    /// When it went upstream, on the session clock.
    pub time_ms: u64,
    /// The session the log gave it.
    pub session: String,
    pub route: Route,
    pub path: String,
    pub headers: http::HeaderMap,
    /// The body as the client sent it; `None` when it is over the per-request bound
    /// (`sessions.whatif_max_request_bytes`): its session is no longer followed.
    pub body: Option<Bytes>,
    pub status: u16,
    pub usage: Option<Usage>,
    pub response_id: Option<String>,
    /// A Responses answer a later request may continue: its output items.
    pub output: Option<Value>,
}

/// The baseline every candidate is compared with: the requests as the client sent them,
/// on the same cache model.
pub const CLIENT: &str = "client";

/// One session's figures: per candidate, in the order of the board's candidates.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SessionWhatIf {
    pub requests: usize,
    /// Whether each candidate matches the session's API (the client always does): a
    /// candidate that does not is neither run nor shown on it.
    pub applies: Vec<bool>,
    /// Each candidate's predicted cost (keep-warms included).
    pub cost_usd: Vec<f64>,
    /// Each candidate's predicted cache reads, and input tokens (read, written or not).
    pub cache_read: Vec<u64>,
    pub input: Vec<u64>,
    /// What the provider billed: the real usage, priced from `data/models.toml`.
    pub billed: Billed,
    /// Per request, in the order fed: the real cache reads beside each candidate's.
    #[serde(skip)]
    pub reads: Vec<RequestReads>,
    /// Time of the first request fed.
    #[serde(skip)]
    pub first_ms: u64,
    /// Time of the latest request fed.
    #[serde(skip)]
    pub last_ms: u64,
    /// Why the session is no longer followed (a `cachet_whatif_skipped_total` cause):
    /// past the budget's requests, its age, or a request over the per-request bound.
    pub skipped: Option<&'static str>,
}

/// What the provider billed for the requests followed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Billed {
    pub cost_usd: f64,
    pub cache_read: u64,
    pub input: u64,
    /// Requests whose model the table does not price, or that reported no usage.
    pub unpriced: usize,
}

/// One request followed: when it went upstream (the session log's `sent_ms`), what it read
/// from cache, and what each candidate would have read (0 where it does not apply).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestReads {
    pub sent_ms: u64,
    pub real: Option<u64>,
    pub predicted: Vec<u64>,
}

/// The cache-read share of `input`.
fn hit_ratio(read: u64, input: u64) -> f64 {
    if input == 0 {
        0.0
    } else {
        read as f64 / input as f64
    }
}

/// A candidate over the sessions it applies to (the client over every session followed).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetRow {
    pub candidate: String,
    pub sessions: usize,
    /// The client as sent, on the same cache model, over those sessions.
    pub client_cost_usd: f64,
    pub cost_usd: f64,
    pub saving_usd: f64,
    pub hit_ratio: f64,
    /// What the provider billed for those sessions.
    pub billed_usd: f64,
    pub billed_hit_ratio: f64,
}

/// What the live what-if has predicted so far, per session followed.
#[derive(Debug, Clone, Default)]
pub struct WhatIfBoard {
    /// [`CLIENT`] first, then the candidates.
    pub candidates: Vec<String>,
    pub sessions: HashMap<String, SessionWhatIf>,
}

/// The board, shared between the worker and the admin listener.
pub type SharedBoard = Arc<RwLock<WhatIfBoard>>;

impl WhatIfBoard {
    /// Each candidate (not the client) that applies to `figures`' session, by index, with
    /// its saving: the client's cost less the candidate's.
    fn savings<'a>(
        &'a self,
        figures: &'a SessionWhatIf,
    ) -> impl Iterator<Item = (usize, &'a str, f64)> {
        let client = figures.cost_usd.first().copied().unwrap_or(0.0);
        (self.candidates.iter().zip(&figures.cost_usd))
            .enumerate()
            .skip(1)
            .filter(|(i, _)| figures.applies.get(*i).copied().unwrap_or(false))
            .map(move |(i, (name, cost))| (i, name.as_str(), client - cost))
    }

    /// The candidate that would have saved most on session `id`, and how much.
    pub fn best(&self, id: &str) -> Option<(&str, f64)> {
        let figures = self.sessions.get(id)?;
        (self.savings(figures))
            .map(|(_, name, saving)| (name, saving))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Per candidate (the client first), over the sessions followed it applies to: its
    /// predicted cost and hit ratio, the client's cost and what the provider billed.
    pub fn fleet(&self) -> Vec<FleetRow> {
        (self.candidates.iter().enumerate())
            .map(|(i, name)| {
                let applying =
                    (self.sessions.values()).filter(|s| s.applies.get(i).copied().unwrap_or(false));
                let mut row = FleetRow {
                    candidate: name.clone(),
                    sessions: 0,
                    client_cost_usd: 0.0,
                    cost_usd: 0.0,
                    saving_usd: 0.0,
                    hit_ratio: 0.0,
                    billed_usd: 0.0,
                    billed_hit_ratio: 0.0,
                };
                let (mut read, mut input, mut billed_read, mut billed_input) = (0, 0, 0, 0);
                for s in applying {
                    row.sessions += 1;
                    row.client_cost_usd += s.cost_usd[0];
                    row.cost_usd += s.cost_usd[i];
                    row.billed_usd += s.billed.cost_usd;
                    read += s.cache_read[i];
                    input += s.input[i];
                    billed_read += s.billed.cache_read;
                    billed_input += s.billed.input;
                }
                row.saving_usd = row.client_cost_usd - row.cost_usd;
                row.hit_ratio = hit_ratio(read, input);
                row.billed_hit_ratio = hit_ratio(billed_read, billed_input);
                row
            })
            .collect()
    }

    /// Session `id`'s requests followed: the candidate that would have saved most (or the
    /// client's prediction when none applies), and its predicted cache reads by the time
    /// each request went upstream (the log's `sent_ms`).
    pub fn reads(&self, id: &str) -> Option<(&str, HashMap<u64, u64>)> {
        let figures = self.sessions.get(id)?;
        let best = (self.savings(figures)).max_by(|a, b| a.2.total_cmp(&b.2));
        let (i, name) = best.map_or((0, CLIENT), |(i, name, _)| (i, name));
        let reads = (figures.reads.iter())
            .map(|r| (r.sent_ms, r.predicted.get(i).copied().unwrap_or(0)))
            .collect();
        Some((name, reads))
    }

    /// `GET /sessions/{id}`'s `whatif`: what the provider billed, the client's predicted
    /// cost and each candidate's that applies to the session, with its saving and hit
    /// ratio; `None` when the session is not followed.
    pub fn session_json(&self, id: &str) -> Option<Value> {
        let figures = self.sessions.get(id)?;
        let candidates: Vec<Value> = (self.savings(figures))
            .map(|(i, name, saving)| {
                json!({"candidate": name, "cost_usd": figures.cost_usd[i], "saving_usd": saving,
                    "hit_ratio": hit_ratio(figures.cache_read[i], figures.input[i])})
            })
            .collect();
        let billed = &figures.billed;
        Some(json!({
            "requests": figures.requests,
            "skipped": figures.skipped,
            "billed": {"cost_usd": billed.cost_usd,
                "hit_ratio": hit_ratio(billed.cache_read, billed.input),
                "unpriced_requests": billed.unpriced},
            "client_cost_usd": figures.cost_usd.first().copied().unwrap_or(0.0),
            "client_hit_ratio": hit_ratio(
                figures.cache_read.first().copied().unwrap_or(0),
                figures.input.first().copied().unwrap_or(0)),
            "candidates": candidates,
        }))
    }
}

/// The what-if's figures as kept beside the embedded store, for `cachet advise --store`:
/// per session, each candidate's predicted cost and whether it applies.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// [`CLIENT`] first, then the candidates.
    pub candidates: Vec<String>,
    pub sessions: BTreeMap<String, SessionSnapshot>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    pub requests: usize,
    pub applies: Vec<bool>,
    pub cost_usd: Vec<f64>,
    pub cache_read: Vec<u64>,
    pub input: Vec<u64>,
    pub billed: Billed,
    pub skipped: Option<String>,
}

/// The file beside the embedded store's database `db` that keeps the what-if's figures.
pub fn snapshot_file(db: &Path) -> PathBuf {
    db.with_extension("whatif.json")
}

impl WhatIfBoard {
    pub fn snapshot(&self) -> Snapshot {
        let sessions = (self.sessions.iter())
            .map(|(id, s)| {
                let kept = SessionSnapshot {
                    requests: s.requests,
                    applies: s.applies.clone(),
                    cost_usd: s.cost_usd.clone(),
                    cache_read: s.cache_read.clone(),
                    input: s.input.clone(),
                    billed: s.billed,
                    skipped: s.skipped.map(str::to_owned),
                };
                (id.clone(), kept)
            })
            .collect();
        Snapshot {
            candidates: self.candidates.clone(),
            sessions,
        }
    }
}

/// The queue to the what-if's worker; clones share it.
#[derive(Clone)]
pub struct WhatIfFeed {
    tx: mpsc::SyncSender<Answered>,
    dropped: IntCounter,
    /// The largest body followed (`sessions.whatif_max_request_bytes`).
    pub max_request_bytes: usize,
}

impl WhatIfFeed {
    /// A feed into `tx`, counting the requests it drops in `dropped`.
    pub fn new(
        tx: mpsc::SyncSender<Answered>,
        dropped: IntCounter,
        max_request_bytes: usize,
    ) -> WhatIfFeed {
        WhatIfFeed {
            tx,
            dropped,
            max_request_bytes,
        }
    }

    /// Queue an answered request without waiting: dropped and counted when the worker is
    /// behind (or gone).
    pub fn feed(&self, answered: Answered) {
        if self.tx.try_send(answered).is_err() {
            self.dropped.inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savings_are_the_client_cost_less_the_candidate_where_it_applies() {
        let mut board = WhatIfBoard {
            candidates: vec![CLIENT.into(), "a".into(), "b".into()],
            ..Default::default()
        };
        let sessions = [
            ("s", [1.0, 0.25, 1.5], [true, true, true]),
            ("t", [2.0, 2.0, 1.0], [true, true, true]),
            // A session of an API candidate b does not match: b is not shown on it.
            ("u", [4.0, 3.0, 0.0], [true, true, false]),
        ];
        for (id, costs, applies) in sessions {
            let figures = SessionWhatIf {
                requests: 3,
                cost_usd: costs.to_vec(),
                applies: applies.to_vec(),
                cache_read: vec![10, 60, 0],
                input: vec![100, 100, 0],
                billed: Billed {
                    cost_usd: costs[0] / 2.0,
                    cache_read: 30,
                    input: 100,
                    unpriced: 0,
                },
                ..Default::default()
            };
            board.sessions.insert(id.into(), figures);
        }
        assert_eq!(board.best("s"), Some(("a", 0.75)));
        assert_eq!(board.best("t"), Some(("b", 1.0)));
        assert_eq!(board.best("u"), Some(("a", 1.0)));
        let fleet = board.fleet();
        let row = |name: &str| fleet.iter().find(|r| r.candidate == name).unwrap();
        assert_eq!(row(CLIENT).sessions, 3);
        assert_eq!((row("a").sessions, row("a").cost_usd), (3, 5.25));
        assert_eq!(row("a").saving_usd, 7.0 - 5.25);
        // b over the two sessions it applies to, against the client's cost on those.
        assert_eq!((row("b").sessions, row("b").client_cost_usd), (2, 3.0));
        assert_eq!(row("b").billed_usd, 1.5);
        assert_eq!(row("a").hit_ratio, 0.6);
        assert_eq!(row("a").billed_hit_ratio, 0.3);
        let doc = board.session_json("s").unwrap();
        assert_eq!(doc["client_cost_usd"], 1.0);
        assert_eq!(doc["billed"]["cost_usd"], 0.5);
        assert_eq!(doc["candidates"][1]["saving_usd"], -0.5);
        assert_eq!(doc["candidates"][0]["hit_ratio"], 0.6);
        let doc = board.session_json("u").unwrap();
        assert_eq!(doc["candidates"].as_array().unwrap().len(), 1);
        assert!(board.session_json("v").is_none());
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let (tx, rx) = mpsc::sync_channel(1);
        let dropped = IntCounter::new("d", "d").unwrap();
        let feed = WhatIfFeed::new(tx, dropped.clone(), 1 << 20);
        let answered = Answered {
            time_ms: 0,
            session: "s".into(),
            route: Route {
                provider: crate::route::Provider::Anthropic,
                endpoint: crate::route::Endpoint::Messages,
            },
            path: "/v1/messages".into(),
            headers: http::HeaderMap::new(),
            body: Some(Bytes::from_static(b"{}")),
            status: 200,
            usage: None,
            response_id: None,
            output: None,
        };
        feed.feed(answered.clone());
        feed.feed(answered);
        assert_eq!(dropped.get(), 1);
        assert_eq!(rx.try_iter().count(), 1);
    }
}
