//! The gaps a session shows between its requests, learned from its log: tool-loop gaps
//! (the agent runs a tool and asks again, usually within seconds) and turn gaps (the
//! person reads the answer and writes the next prompt).

use crate::envelope::Ttl;
use crate::session::log::SessionLog;
use crate::session::{Entry, PrefixHashes, RequestRecord};

/// A marker lifetime in milliseconds.
pub fn lifetime_ms(ttl: Ttl) -> u64 {
    ttl.seconds() * 1000
}

/// Observed gaps of one session, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gaps {
    /// From the last request of a turn to the first of the next.
    pub turn: Vec<u64>,
    /// Between two requests of one turn's tool loop.
    pub tool: Vec<u64>,
}

/// The latest earlier request of the conversation a request continues.
#[derive(Debug, Clone, Copy)]
pub struct Previous<'a> {
    pub record: &'a RequestRecord,
    /// Milliseconds from that request to this one.
    pub gap_ms: u64,
}

impl Gaps {
    /// The gaps in `log`, plus the gap from this request's previous one (a request at
    /// `now_ms` in turn `turn_index`, whose client history is `history`). Only requests
    /// that extend the one before them count: a side request with a history of its own
    /// (Claude Code's title requests) says nothing about the person or the tools.
    pub fn learn<'a>(
        log: &'a SessionLog,
        history: &PrefixHashes,
        now_ms: u64,
        turn_index: u64,
    ) -> (Gaps, Option<Previous<'a>>) {
        let mut gaps = Gaps::default();
        let records: Vec<&RequestRecord> = log
            .iter()
            .filter_map(|e| match e {
                Entry::Request(r) if r.turn_index.is_some() => Some(r),
                _ => None,
            })
            .collect();
        let mut last_of_lane: Vec<&RequestRecord> = Vec::new();
        for r in &records {
            if let Some(at) = last_of_lane.iter().position(|p| p.lane == r.lane) {
                gaps.add(
                    last_of_lane[at],
                    r.time,
                    r.turn_index,
                    r.conversation.history.count,
                );
                last_of_lane[at] = r;
            } else {
                last_of_lane.push(r);
            }
        }
        let previous = records
            .iter()
            .rev()
            .find(|r| {
                r.conversation.history.count < history.len()
                    && history.matches(&r.conversation.history)
            })
            .map(|r| Previous {
                record: r,
                gap_ms: now_ms.saturating_sub(r.time),
            });
        if let Some(p) = previous {
            gaps.add(p.record, now_ms, Some(turn_index), history.len());
        }
        (gaps, previous)
    }

    fn add(&mut self, before: &RequestRecord, time: u64, turn: Option<u64>, count: usize) {
        if count <= before.conversation.history.count || time < before.time {
            return;
        }
        let gap = time - before.time;
        match (turn, before.turn_index) {
            (Some(now), Some(then)) if now > then => self.turn.push(gap),
            (Some(_), Some(_)) => self.tool.push(gap),
            _ => {}
        }
    }

    /// Share of turn gaps longer than 5 minutes and within the hour: the reuses a 1h
    /// entry would catch and a 5m one would not.
    pub fn late_turn_share(&self) -> f64 {
        late_share(&self.turn)
    }

    /// The same for tool-loop gaps (a long build or test run).
    pub fn late_tool_share(&self) -> f64 {
        late_share(&self.tool)
    }

    /// Given that the next turn has not come within `after_ms`, the chance that it comes
    /// within the hour after: Laplace's rule over the turn gaps longer than `after_ms`
    /// (one half with none seen).
    pub fn within_hour_after(&self, after_ms: u64) -> f64 {
        let over: Vec<u64> = self
            .turn
            .iter()
            .copied()
            .filter(|&g| g > after_ms)
            .collect();
        let hour = lifetime_ms(Ttl::OneHour);
        let within = over.iter().filter(|&&g| g <= after_ms + hour).count();
        (within as f64 + 1.0) / (over.len() as f64 + 2.0)
    }
}

fn late_share(gaps: &[u64]) -> f64 {
    if gaps.is_empty() {
        return 0.0;
    }
    let (short, long) = (lifetime_ms(Ttl::FiveMinutes), lifetime_ms(Ttl::OneHour));
    let late = gaps.iter().filter(|&&g| g > short && g <= long).count();
    late as f64 / gaps.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::lanes::Conversation;
    use serde_json::json;

    fn history(n: usize) -> PrefixHashes {
        let messages: Vec<serde_json::Value> = (0..n)
            .map(|i| json!({"role": if i % 2 == 0 { "user" } else { "assistant" }, "content": format!("m{i}")}))
            .collect();
        PrefixHashes::new(&messages)
    }

    fn record(n: usize, turn: u64, time_s: u64, lane: u32) -> Entry {
        Entry::Request(RequestRecord {
            time: time_s * 1000,
            turn_index: Some(turn),
            lane,
            conversation: Conversation::of(&history(n)),
            ..Default::default()
        })
    }

    #[test]
    fn tool_and_turn_gaps_are_told_apart_and_side_lanes_are_ignored() {
        let log = vec![
            record(1, 0, 0, 0),
            record(3, 0, 5, 0),
            record(1, 0, 6, 1), // a title request: a lane of its own
            record(5, 0, 9, 0),
            record(7, 1, 9 + 400, 0), // the person took 400 s
            record(1, 0, 410, 1),     // the title lane again: not a gap
            record(9, 1, 415, 0),
        ];
        let log = SessionLog::from(log);
        let (gaps, previous) = Gaps::learn(&log, &history(11), 415_000 + 3_000, 1);
        assert_eq!(gaps.turn, vec![400_000]);
        assert_eq!(gaps.tool, vec![5_000, 4_000, 6_000, 3_000]);
        assert_eq!(previous.unwrap().record.time, 415_000);
        assert_eq!(gaps.late_turn_share(), 1.0);
        assert_eq!(gaps.late_tool_share(), 0.0);
        // A request that starts turn 2 after 20 minutes adds a turn gap.
        let (gaps, _) = Gaps::learn(&log, &history(11), 415_000 + 1_200_000, 2);
        assert_eq!(gaps.turn, vec![400_000, 1_200_000]);
    }

    #[test]
    fn the_chance_of_a_return_within_the_hour_follows_the_gaps_seen() {
        let none = Gaps::default();
        assert_eq!(none.within_hour_after(270_000), 0.5);
        let back_soon = Gaps {
            turn: vec![400_000, 700_000, 60_000],
            tool: vec![],
        };
        assert_eq!(back_soon.within_hour_after(270_000), 0.75);
        let hour = lifetime_ms(Ttl::OneHour);
        let gone = Gaps {
            turn: vec![5 * hour, 8 * hour, 3 * hour],
            tool: vec![],
        };
        assert!(gone.within_hour_after(270_000) < 0.25);
    }
}
