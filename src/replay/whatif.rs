//! The what-if of candidate policies, fed one answered request at a time: per candidate,
//! one [`ArmRun`] of `cachet replay` (its shaper and a cache model of its own), so what it
//! predicts for a request is what `cachet replay` predicts for the same record. Bounded: a
//! session past `max_requests`, or older than `max_age_ms` since its first request
//! followed, or with a request over the per-request bound, stops being followed; a record
//! older than `max_age_ms` behind the newest one fed is not taken; at most `max_sessions`
//! sessions are kept (the one idle longest is let go first). Each is counted in
//! [`Skipped`].
//!
//! `cachet serve` feeds it live ([`super::live`]); `cachet advise` answers offline.

use std::collections::HashMap;

use serde::Serialize;

use super::run::ArmRun;
use super::shaper::Shaper;
use crate::session::whatif::RequestReads;
pub use crate::session::whatif::SessionWhatIf;
use crate::trace::Record;

/// The bounds of a [`WhatIf`].
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub max_requests: usize,
    pub max_sessions: usize,
    pub max_age_ms: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_requests: 2000,
            max_sessions: 256,
            max_age_ms: 24 * 3600 * 1000,
        }
    }
}

/// What the bounds left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Requests of sessions past `max_requests`.
    pub too_large: u64,
    /// Requests of sessions older than `max_age_ms`, and records that far behind the
    /// newest one.
    pub too_old: u64,
    /// Requests of sessions that sent one over the per-request bound.
    pub request_too_large: u64,
    /// Sessions let go to stay within `max_sessions`.
    pub evicted: u64,
}

impl Skipped {
    /// Each cause (as `cachet_whatif_skipped_total` labels it) with its count.
    pub fn by_cause(&self) -> [(&'static str, u64); 4] {
        [
            ("too_large", self.too_large),
            ("too_old", self.too_old),
            ("request_too_large", self.request_too_large),
            ("evicted", self.evicted),
        ]
    }

    fn count(&mut self, cause: &str) {
        match cause {
            "too_large" => self.too_large += 1,
            "too_old" => self.too_old += 1,
            _ => self.request_too_large += 1,
        }
    }
}

/// Whether a candidate applies to a session, from its first request's API.
pub type Applies = Box<dyn Fn(&Record) -> bool + Send>;

struct Candidate {
    name: String,
    run: ArmRun,
    shaper: Box<dyn Shaper + Send>,
    /// `None`: every session.
    applies: Option<Applies>,
}

/// Candidates followed over the requests fed.
pub struct WhatIf {
    candidates: Vec<Candidate>,
    sessions: HashMap<String, SessionWhatIf>,
    budget: Budget,
    skipped: Skipped,
    newest_ms: u64,
}

impl WhatIf {
    pub fn new(budget: Budget, candidates: Vec<(String, Box<dyn Shaper + Send>)>) -> WhatIf {
        WhatIf {
            candidates: (candidates.into_iter())
                .map(|(name, shaper)| Candidate {
                    run: ArmRun::new(&name, None).without_diagnoses(),
                    name,
                    shaper,
                    applies: None,
                })
                .collect(),
            sessions: HashMap::new(),
            budget,
            skipped: Skipped::default(),
            newest_ms: 0,
        }
    }

    /// Candidate `name` applies only to the sessions `applies` says (the shipped ones to
    /// the APIs their policies match).
    pub fn only_for(&mut self, name: &str, applies: Applies) {
        if let Some(c) = self.candidates.iter_mut().find(|c| c.name == name) {
            c.applies = Some(applies);
        }
    }

    pub fn candidates(&self) -> Vec<&str> {
        self.candidates.iter().map(|c| c.name.as_str()).collect()
    }

    pub fn skipped(&self) -> Skipped {
        self.skipped
    }

    pub fn session(&self, id: &str) -> Option<&SessionWhatIf> {
        self.sessions.get(id)
    }

    /// Each candidate's predicted cost over the sessions followed.
    pub fn fleet(&self) -> Vec<(&str, f64)> {
        (self.candidates.iter().enumerate())
            .map(|(i, c)| {
                let cost = self.sessions.values().map(|s| s.cost_usd[i]).sum();
                (c.name.as_str(), cost)
            })
            .collect()
    }

    /// Account one answered request (in time order) under every candidate: what it costs
    /// under each, in the order of [`WhatIf::candidates`]; `None` when it is not taken.
    pub fn feed(&mut self, record: &Record) -> Option<Vec<f64>> {
        if !record.endpoint().is_generation() {
            return None;
        }
        if record.time_ms + self.budget.max_age_ms < self.newest_ms {
            self.skipped.too_old += 1;
            return None;
        }
        self.newest_ms = self.newest_ms.max(record.time_ms);
        let budget = self.budget;
        let session = self.followed_session(&record.session, record.time_ms);
        let cause = match session {
            s if s.skipped.is_some() => s.skipped,
            s if s.requests >= budget.max_requests => Some("too_large"),
            s if record.time_ms.saturating_sub(s.first_ms) > budget.max_age_ms => Some("too_old"),
            _ => None,
        };
        if let Some(cause) = cause {
            self.stop_following(&record.session, record.time_ms, cause);
            return None;
        }
        let n = self.candidates.len();
        let session = (self.sessions.get_mut(&record.session))?;
        if session.requests == 0 {
            session.applies = (self.candidates.iter())
                .map(|c| c.applies.as_ref().is_none_or(|f| f(record)))
                .collect();
        }
        session.requests += 1;
        bill(session, record);
        let mut costs = vec![0.0; n];
        let mut predicted = vec![0; n];
        for (i, c) in self.candidates.iter_mut().enumerate() {
            if !session.applies[i] {
                continue;
            }
            if let Ok(Some(step)) = c.run.step(c.shaper.as_mut(), record) {
                let warm = step.keep_warm.map_or(0.0, |(_, cost)| cost);
                costs[i] = step.cost_usd.unwrap_or(0.0) + warm;
                session.cost_usd[i] += costs[i];
                session.cache_read[i] += step.usage.cache_read;
                session.input[i] += step.usage.total_input();
                predicted[i] = step.usage.cache_read;
            }
            c.run.forget_steps();
        }
        session.reads.push(RequestReads {
            sent_ms: record.time_ms,
            real: record.usage.map(|u| u.cache_read),
            predicted,
        });
        Some(costs)
    }

    /// Stop following session `id` from a request at `time_ms` on, for `cause` (its
    /// requests from then on are counted under it, this one included).
    pub fn stop_following(&mut self, id: &str, time_ms: u64, cause: &'static str) {
        let session = self.followed_session(id, time_ms);
        if session.skipped.is_none() {
            session.skipped = Some(cause);
            for c in &mut self.candidates {
                c.run.forget(id);
            }
        }
        self.skipped.count(cause);
    }

    /// Session `id`'s figures, made room for when it is new; `time_ms` is its latest request.
    fn followed_session(&mut self, id: &str, time_ms: u64) -> &mut SessionWhatIf {
        if !self.sessions.contains_key(id) {
            self.make_room();
        }
        let n = self.candidates.len();
        let session = (self.sessions.entry(id.to_owned())).or_insert_with(|| SessionWhatIf {
            cost_usd: vec![0.0; n],
            cache_read: vec![0; n],
            input: vec![0; n],
            applies: vec![true; n],
            first_ms: time_ms,
            ..Default::default()
        });
        session.last_ms = time_ms;
        session
    }

    /// The ids of the sessions followed.
    pub fn followed(&self) -> impl Iterator<Item = &String> {
        self.sessions.keys()
    }

    /// Let go of the session idle longest while `max_sessions` are kept.
    fn make_room(&mut self) {
        while self.sessions.len() >= self.budget.max_sessions.max(1) {
            let Some(oldest) = (self.sessions.iter())
                .min_by_key(|(_, s)| s.last_ms)
                .map(|(id, _)| id.clone())
            else {
                return;
            };
            self.sessions.remove(&oldest);
            for c in &mut self.candidates {
                c.run.forget(&oldest);
            }
            self.skipped.evicted += 1;
        }
    }
}

/// Add what the provider billed for `record` (its real usage, priced from the model table)
/// to `session`.
fn bill(session: &mut SessionWhatIf, record: &Record) {
    let billed = &mut session.billed;
    let model = (record
        .body
        .get("model")
        .and_then(|m| m.as_str())
        .map(str::to_owned))
    .or_else(|| record.path_model());
    let info = model.as_deref().and_then(crate::models::lookup);
    match (record.usage, info) {
        (Some(usage), Some(info)) => {
            billed.cost_usd += info.cost_usd(&usage);
            billed.cache_read += usage.cache_read;
            billed.input += usage.total_input();
        }
        _ => billed.unpriced += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::shaper::AsRecorded;

    fn record(session: &str, time_secs: u64, turn: usize) -> Record {
        let system = "You are a careful coding agent. Read before you edit. ".repeat(120);
        let mut messages = Vec::new();
        for i in 0..turn {
            messages.push(serde_json::json!({"role": "user", "content": format!("task {i}")}));
            messages.push(serde_json::json!({"role": "assistant", "content": format!("done {i}")}));
        }
        messages.push(serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": format!("task {turn}"), "cache_control": {"type": "ephemeral"}}]}));
        serde_json::from_value(serde_json::json!({"v": 1, "time": time_secs, "session": session,
            "provider": "anthropic", "endpoint": "messages", "path": "/v1/messages",
            "body": {"model": "claude-sonnet-4-5", "max_tokens": 64,
                "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                "messages": messages}}))
        .unwrap()
    }

    fn records() -> Vec<Record> {
        let mut out = Vec::new();
        for turn in 0..6 {
            // Seconds, as a trace's numeric time reads.
            out.push(record("a", 1 + turn as u64 * 20, turn));
            out.push(record("b", 2 + turn as u64 * 20, turn));
        }
        out
    }

    #[test]
    fn fed_a_request_at_a_time_it_predicts_what_replay_does() {
        let records = records();
        let mut whatif = WhatIf::new(
            Budget::default(),
            vec![("as-recorded".into(), Box::new(AsRecorded) as _)],
        );
        for r in &records {
            whatif.feed(r);
        }
        let replayed = crate::replay::replay_arm("x", &records, &mut AsRecorded, None, &mut || {});
        let fleet = whatif.fleet();
        assert!(replayed.cost_usd > 0.0);
        assert!(
            (fleet[0].1 - replayed.cost_usd).abs() < 1e-12,
            "{fleet:?} {}",
            replayed.cost_usd
        );
        let per: HashMap<usize, f64> = replayed.per_request_cost.iter().copied().collect();
        let of = |s: &str| -> f64 {
            (records.iter().enumerate())
                .filter(|(_, r)| r.session == s)
                .map(|(i, _)| per[&i])
                .sum()
        };
        let a = whatif.session("a").unwrap();
        assert!((a.cost_usd[0] - of("a")).abs() < 1e-12);
        assert_eq!(a.requests, 6);
        assert_eq!(whatif.skipped(), Skipped::default());
        // Fed without end, a run keeps its totals, not a figure per request.
        let stats = whatif.candidates[0].run.stats();
        assert!(stats.per_request.is_empty() && stats.diagnoses.is_empty());
        assert_eq!(stats.requests, 12);
    }

    #[test]
    fn sessions_past_the_budget_are_skipped_and_counted() {
        let budget = Budget {
            max_requests: 4,
            max_sessions: 1,
            max_age_ms: 30_000,
        };
        let mut whatif = WhatIf::new(budget, vec![("x".into(), Box::new(AsRecorded) as _)]);
        for r in records() {
            whatif.feed(&r);
        }
        let skipped = whatif.skipped();
        // Sessions a and b alternate with room for one: each request evicts the other.
        assert_eq!(skipped.evicted, 11, "{skipped:?}");
        assert!(whatif.session("a").is_none());
        assert_eq!(whatif.session("b").unwrap().requests, 1);
        // A request far behind the newest one is not taken.
        whatif.feed(&record("c", 0, 0));
        assert_eq!(whatif.skipped().too_old, 1);
        let mut whatif = WhatIf::new(
            Budget {
                max_sessions: 8,
                max_age_ms: 3_600_000,
                ..budget
            },
            vec![("x".into(), Box::new(AsRecorded) as _)],
        );
        for r in records() {
            whatif.feed(&r);
        }
        assert_eq!(whatif.skipped().too_large, 4);
        assert_eq!(whatif.session("a").unwrap().skipped, Some("too_large"));
        assert_eq!(whatif.session("a").unwrap().requests, 4);
        // A session followed longer than its age budget is let go, and counted.
        let mut whatif = WhatIf::new(budget, vec![("x".into(), Box::new(AsRecorded) as _)]);
        for r in records().iter().filter(|r| r.session == "a") {
            whatif.feed(r);
        }
        // Its requests at 1 s and 21 s are within 30 s of its first; from 41 s on, not.
        assert_eq!(whatif.session("a").unwrap().requests, 2);
        assert_eq!(whatif.session("a").unwrap().skipped, Some("too_old"));
        assert_eq!(whatif.skipped().too_old, 4);
    }
}
