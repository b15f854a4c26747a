//! The gaps a session shows between its requests, learned from its log: tool-loop gaps
//! (the agent runs a tool and asks again, usually within seconds) and turn gaps (the
//! person reads the answer and writes the next prompt).
//!
//! A session's loaded log learns them as it grows ([`Learned`], kept by
//! [`crate::session::SessionLog`]), so a request's decision reads what is learned instead
//! of walking every request the session made.

use crate::envelope::Ttl;
use crate::session::RequestRecord;

/// A marker lifetime in milliseconds.
pub fn lifetime_ms(ttl: Ttl) -> u64 {
    ttl.seconds() * 1000
}

/// Observed gaps of one session, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gaps {
    /// From the last request of a turn to the first of the next, in log order.
    pub turn: crate::persistent::Vector<u64>,
    /// How many of `turn` are late (see [`Gaps::late_turn_share`]).
    turn_late: usize,
    /// Between two requests of one turn's tool loop: how many there were and how many were
    /// late. Only counts are kept: a session has one for nearly every request.
    pub tool: GapCount,
}

/// A count of gaps, and of those among them that were late.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GapCount {
    pub all: usize,
    pub late: usize,
}

/// What a gap is measured from: a request, as the log recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Seen {
    time: u64,
    turn: Option<u64>,
    /// Messages in its client history.
    count: usize,
}

impl Seen {
    fn of(r: &RequestRecord) -> Seen {
        Seen::new(r.time, r.turn_index, r.conversation.history.count)
    }

    /// A request at `time` in turn `turn`, with `count` messages in its client history.
    pub(super) fn new(time: u64, turn: Option<u64>, count: usize) -> Seen {
        Seen { time, turn, count }
    }
}

/// The gaps of a log so far, and each lane's latest request, which the next request of
/// that lane measures its gap from. Grown one entry at a time; a clone shares its parts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Learned {
    gaps: Gaps,
    last_of_lane: crate::persistent::HashMap<u32, Seen>,
}

impl Learned {
    /// Learn from the next request of the log. Only requests that extend the one before
    /// them in their lane count: a side request with a history of its own (Claude Code's
    /// title requests) says nothing about the person or the tools.
    pub fn observe(&mut self, r: &RequestRecord) {
        if r.turn_index.is_none() {
            return;
        }
        if let Some(before) = self.last_of_lane.get(&r.lane) {
            self.gaps
                .add(*before, r.time, r.turn_index, r.conversation.history.count);
        }
        self.last_of_lane.insert(r.lane, Seen::of(r));
    }

    /// Learned from every request of a log, in log order.
    pub fn of<'a>(requests: impl IntoIterator<Item = &'a RequestRecord>) -> Learned {
        let mut learned = Learned::default();
        for r in requests {
            learned.observe(r);
        }
        learned
    }

    /// The gaps learned so far.
    pub(super) fn gaps(&self) -> &Gaps {
        &self.gaps
    }
}

impl Gaps {
    /// Gaps from lists of turn and tool-loop gaps, in milliseconds.
    pub fn of_lists(turn: &[u64], tool: &[u64]) -> Gaps {
        let mut gaps = Gaps::default();
        turn.iter().for_each(|&g| gaps.push_turn(g));
        tool.iter().for_each(|&g| gaps.push_tool(g));
        gaps
    }

    pub(super) fn add(&mut self, before: Seen, time: u64, turn: Option<u64>, count: usize) {
        if count <= before.count || time < before.time {
            return;
        }
        let gap = time - before.time;
        match (turn, before.turn) {
            (Some(now), Some(then)) if now > then => self.push_turn(gap),
            (Some(_), Some(_)) => self.push_tool(gap),
            _ => {}
        }
    }

    fn push_turn(&mut self, gap: u64) {
        self.turn.push_back(gap);
        self.turn_late += usize::from(is_late(gap));
    }

    fn push_tool(&mut self, gap: u64) {
        self.tool.all += 1;
        self.tool.late += usize::from(is_late(gap));
    }

    /// Share of turn gaps longer than 5 minutes and within the hour: the reuses a 1h
    /// entry would catch and a 5m one would not.
    pub fn late_turn_share(&self) -> f64 {
        share(self.turn_late, self.turn.len())
    }

    /// The same for tool-loop gaps (a long build or test run).
    pub fn late_tool_share(&self) -> f64 {
        share(self.tool.late, self.tool.all)
    }

    /// Given that the next turn has not come within `after_ms`, the chance that it comes
    /// within the hour after: Laplace's rule over the turn gaps longer than `after_ms`
    /// (one half with none seen). Reads every turn gap: one per turn, and only for
    /// keep-warm.
    pub fn within_hour_after(&self, after_ms: u64) -> f64 {
        let hour = lifetime_ms(Ttl::OneHour);
        let over = self.turn.iter().filter(|&&g| g > after_ms);
        let (mut n, mut within) = (0usize, 0usize);
        for &g in over {
            n += 1;
            within += usize::from(g <= after_ms + hour);
        }
        (within as f64 + 1.0) / (n as f64 + 2.0)
    }
}

/// Past 5 minutes and within the hour.
fn is_late(gap: u64) -> bool {
    let (short, long) = (lifetime_ms(Ttl::FiveMinutes), lifetime_ms(Ttl::OneHour));
    gap > short && gap <= long
}

fn share(late: usize, all: usize) -> f64 {
    if all == 0 {
        return 0.0;
    }
    late as f64 / all as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::fixtures::conversation;
    use crate::session::entry::Conversation;
    use crate::session::{Entry, PrefixHashes, SessionLog};

    fn history(n: usize) -> PrefixHashes {
        history_of(0, n)
    }

    /// The first `n` messages of conversation `c`.
    fn history_of(c: usize, n: usize) -> PrefixHashes {
        PrefixHashes::new(&conversation(c, n))
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

    fn turns(gaps: &Gaps) -> Vec<u64> {
        gaps.turn.iter().copied().collect()
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
        assert_eq!(turns(&gaps), [400_000]);
        // 5 s, 4 s, 6 s and 3 s: none late.
        assert_eq!(gaps.tool, GapCount { all: 4, late: 0 });
        assert_eq!(previous.unwrap().record.time, 415_000);
        assert_eq!(gaps.late_turn_share(), 1.0);
        assert_eq!(gaps.late_tool_share(), 0.0);
        // A request that starts turn 2 after 20 minutes adds a turn gap.
        let (gaps, _) = Gaps::learn(&log, &history(11), 415_000 + 1_200_000, 2);
        assert_eq!(turns(&gaps), [400_000, 1_200_000]);
        assert_eq!(gaps.late_turn_share(), 1.0);
    }

    #[test]
    fn the_chance_of_a_return_within_the_hour_follows_the_gaps_seen() {
        let none = Gaps::default();
        assert_eq!(none.within_hour_after(270_000), 0.5);
        let back_soon = Gaps::of_lists(&[400_000, 700_000, 60_000], &[]);
        assert_eq!(back_soon.within_hour_after(270_000), 0.75);
        let hour = lifetime_ms(Ttl::OneHour);
        let gone = Gaps::of_lists(&[5 * hour, 8 * hour, 3 * hour], &[]);
        assert!(gone.within_hour_after(270_000) < 0.25);
    }

    /// What a loaded log learned as it grew (however it grew: one load, or a few entries
    /// at a time as the cache extends it) is what walking the whole log learns, and the
    /// request a history continues is the one the walk finds: on generated sessions of
    /// several conversations that grow, fork, go back to an earlier point and restart, with
    /// side requests and requests without a turn.
    #[test]
    fn what_the_log_learns_as_it_grows_is_what_walking_it_learns() {
        use proptest::prelude::*;
        use proptest::test_runner::TestRunner;
        // (conversation, messages, turn or none, seconds since the last request, lane)
        let request = (
            0usize..3,
            0usize..12,
            prop::option::of(0u64..5),
            0u64..900,
            0u32..3,
        );
        let mut runner = TestRunner::default();
        runner
            .run(
                &(
                    prop::collection::vec(request, 0..40),
                    1usize..6,
                    (0usize..3, 0usize..14),
                ),
                |(requests, chunk, (c, n))| {
                    let mut time = 0;
                    let entries: Vec<Entry> = requests
                        .iter()
                        .map(|&(conversation, messages, turn, after, lane)| {
                            time += after * 1000;
                            Entry::Request(RequestRecord {
                                time,
                                turn_index: turn,
                                lane,
                                conversation: Conversation::of(&history_of(conversation, messages)),
                                ..Default::default()
                            })
                        })
                        .collect();
                    let walked = Learned::of(entries.iter().filter_map(|e| match e {
                        Entry::Request(r) => Some(r),
                        _ => None,
                    }));
                    let now = time + 30_000;
                    let current = history_of(c, n);
                    let (walked_gaps, walked_previous) =
                        Gaps::learn_from(&walked, &entries, &current, now, 3);
                    for log in SessionLog::loaded_and_grown(&entries, chunk) {
                        prop_assert_eq!(log.learned(), &walked);
                        let (gaps, previous) = Gaps::learn(&log, &current, now, 3);
                        prop_assert_eq!(&gaps, &walked_gaps);
                        prop_assert_eq!(
                            previous.map(|p| p.record),
                            walked_previous.map(|p| p.record)
                        );
                    }
                    Ok(())
                },
            )
            .unwrap();
    }
}
