//! The live what-if's figures as the admin pages read them, and the queue that feeds it.
//! Once an answer has ended and its session is known, the after-response queue hands what
//! the request was ([`Answered`]) to [`WhatIfFeed::feed`], which never waits: a full queue
//! drops it and counts it. The worker that predicts each candidate's cost (replay's arm
//! run) makes its trace record and fills a [`WhatIfBoard`].

use std::collections::HashMap;
use std::sync::{mpsc, Arc, RwLock};

use bytes::Bytes;
use prometheus::IntCounter;
use serde::Serialize;
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
    /// Each candidate's predicted cost (keep-warms included).
    pub cost_usd: Vec<f64>,
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
    /// Each candidate (not the client) with its saving on `figures`: the client's cost
    /// less the candidate's.
    fn savings<'a>(&'a self, figures: &'a SessionWhatIf) -> impl Iterator<Item = (&'a str, f64)> {
        let client = figures.cost_usd.first().copied().unwrap_or(0.0);
        (self.candidates.iter().zip(&figures.cost_usd))
            .skip(1)
            .map(move |(name, cost)| (name.as_str(), client - cost))
    }

    /// The candidate that would have saved most on session `id`, and how much.
    pub fn best(&self, id: &str) -> Option<(&str, f64)> {
        let figures = self.sessions.get(id)?;
        self.savings(figures).max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// Per candidate (the client first), its predicted cost over the sessions followed.
    pub fn fleet(&self) -> Vec<(&str, f64)> {
        (self.candidates.iter().enumerate())
            .map(|(i, name)| {
                let cost = (self.sessions.values())
                    .filter_map(|s| s.cost_usd.get(i))
                    .sum();
                (name.as_str(), cost)
            })
            .collect()
    }

    /// `GET /sessions/{id}`'s `whatif`: the client's predicted cost and each candidate's,
    /// with its saving; `None` when the session is not followed.
    pub fn session_json(&self, id: &str) -> Option<Value> {
        let figures = self.sessions.get(id)?;
        let candidates: Vec<Value> = (self.savings(figures).zip(figures.cost_usd.iter().skip(1)))
            .map(|((name, saving), cost)| {
                json!({"candidate": name, "cost_usd": cost, "saving_usd": saving})
            })
            .collect();
        Some(json!({
            "requests": figures.requests,
            "skipped": figures.skipped,
            "client_cost_usd": figures.cost_usd.first().copied().unwrap_or(0.0),
            "candidates": candidates,
        }))
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
    fn savings_are_the_client_cost_less_the_candidate() {
        let mut board = WhatIfBoard {
            candidates: vec![CLIENT.into(), "a".into(), "b".into()],
            ..Default::default()
        };
        for (id, costs) in [("s", [1.0, 0.25, 1.5]), ("t", [2.0, 2.0, 1.0])] {
            let figures = SessionWhatIf {
                requests: 3,
                cost_usd: costs.to_vec(),
                ..Default::default()
            };
            board.sessions.insert(id.into(), figures);
        }
        assert_eq!(board.best("s"), Some(("a", 0.75)));
        assert_eq!(board.best("t"), Some(("b", 1.0)));
        assert_eq!(board.fleet(), [(CLIENT, 3.0), ("a", 2.25), ("b", 2.5)]);
        let doc = board.session_json("s").unwrap();
        assert_eq!(doc["client_cost_usd"], 1.0);
        assert_eq!(doc["candidates"][1]["saving_usd"], -0.5);
        assert!(board.session_json("u").is_none());
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
