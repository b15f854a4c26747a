//! Keep-warm requests in replay, as live cachet would have sent them (see
//! [`crate::ttl::keep_warm`]): after a request the arm marked for keep-warm, if the
//! session's next request comes later than the keep-warm delay and shows that request's
//! answer ended the turn, one keep-warm goes out at that time, built from the arm's body
//! and the answer as the next request carries it. A session whose last request leaves
//! a keep-warm pending gets it too (live cachet cannot know the session is over), with a
//! stand-in answer as long as the recorded output, when it goes out before the last
//! recorded request of the traces: replay counts what happens up to that moment, for
//! every arm alike (after it, neither a keep-warm's cost nor the rewrite it would spare
//! another arm when the person comes back is known).
//!
//! Keep-warms are accounted just before the request that follows them; with several
//! sessions interleaved, a request of another session that came in between was accounted
//! already (the cache model does not mind: each session reads its own prefixes).

use std::collections::HashMap;

use serde_json::Value;

use super::shaper::Shaped;
use crate::session::Anchor;
use crate::trace::Record;
use crate::ttl::keep_warm::{ends_turn, placeholder_answer, request_body};

/// The latest request of a session that may be followed by a keep-warm.
struct Pending {
    /// When the keep-warm would go out.
    fire_ms: u64,
    sent: Value,
    tail: usize,
    /// The client's history of that request.
    history: Anchor,
    output: u64,
}

/// Pending keep-warms, per session.
#[derive(Default)]
pub struct KeepWarms {
    pending: HashMap<String, Pending>,
}

impl KeepWarms {
    /// Before `record` is accounted: the keep-warm (time, body) its session's previous
    /// request caused, if any.
    pub fn due(&mut self, record: &Record) -> Option<(u64, Value)> {
        let p = self.pending.remove(&record.session)?;
        let fire = p.fire_ms;
        if record.time_ms <= fire {
            return None;
        }
        let messages = record.body.get("messages")?.as_array()?;
        let answer = match messages.get(p.history.count) {
            Some(answer) if p.history.matches(&messages[..p.history.count]) => answer.clone(),
            _ => placeholder_answer(p.output),
        };
        if !ends_turn(&answer) {
            return None;
        }
        Some((fire, request_body(&p.sent, p.tail, &answer)?))
    }

    /// After `record` was shaped into `shaped`.
    pub fn shaped(&mut self, record: &Record, shaped: &Shaped) {
        let history = record
            .body
            .get("messages")
            .and_then(Value::as_array)
            .map(|m| Anchor::of(m));
        match (shaped.keep_warm_after_ms, history) {
            (Some(after), Some(history)) => {
                self.pending.insert(
                    record.session.clone(),
                    Pending {
                        fire_ms: record.time_ms + after,
                        sent: shaped.body.clone(),
                        tail: shaped.uncached_tail,
                        history,
                        output: record.usage.map_or(1, |u| u.output),
                    },
                );
            }
            _ => {
                self.pending.remove(&record.session);
            }
        }
    }

    /// Let go of `session`'s pending keep-warm.
    pub fn forget(&mut self, session: &str) {
        self.pending.remove(session);
    }

    /// At the end of the traces: the keep-warm after each session's last request, when it
    /// goes out no later than `until_ms` (the last recorded request).
    pub fn rest(self, until_ms: u64) -> Vec<(u64, Value)> {
        let mut out: Vec<(u64, Value)> = self
            .pending
            .into_values()
            .filter(|p| p.fire_ms <= until_ms)
            .filter_map(|p| {
                let body = request_body(&p.sent, p.tail, &placeholder_answer(p.output))?;
                Some((p.fire_ms, body))
            })
            .collect();
        out.sort_by_key(|(t, _)| *t);
        out
    }
}
