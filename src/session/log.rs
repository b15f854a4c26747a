//! A session's log as loaded: an immutable snapshot that shares its entries with the cache
//! and with every later, longer snapshot of the same session.
//!
//! The log is append-only, so a request that finds the session grown by `k` entries builds
//! its snapshot from the cached one plus those `k`: a persistent vector of shared entries
//! ([`crate::persistent`]: a plain `Vec` for the first few, `imbl` past them), where
//! appending copies no earlier entry. Loading a session therefore costs O(new entries),
//! whatever its length.
//!
//! What a request reads of the log is kept as it grows, in persistent maps shared the same
//! way (and as small as what they hold while the session is short): each lane's latest and
//! latest answered request, the persisted patches by anchor and their count per
//! transformer, the latest request of each client history (among the latest
//! [`CONTINUED_KEPT`]), the whole key list each held record sent, and the gaps between
//! requests.
//! So planning a replay, assigning a lane and deciding a lifetime do not walk the log
//! either; each has the walk it replaces beside it ([`Entries`]), and a test that the two
//! agree.
//!
//! Because requests read the log only through those indexes and its latest entries, a
//! loaded log holds whole only what they can reach: every persisted patch, the latest
//! [`KEPT_REQUESTS`] request records, and each lane's latest and latest answered request.
//! Older request records stay in the store (the pages and the admin API read it there); the
//! snapshot keeps a slot for each, so positions are the store's. A session's memory then
//! follows its live history, not its age.

use std::sync::Arc;

use super::anchor::PrefixHashes;
use super::entry::{ContextTransform, Entry, RequestRecord};
use super::gaps::{Gaps, Learned, Seen};
use super::patch_plan::{walk_plan, PatchPlan, Tallies};
use crate::measure::MarkTtl;
use crate::persistent;
use crate::providers::cache_key::MessageKey;
use crate::usage::Usage;

/// A session's entries in log order, however they are held: a loaded [`SessionLog`], or a
/// plain slice (tests, tools). What reads a log takes this.
pub trait Entries {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_;

    /// The persisted patches, in log order.
    fn transforms(&self) -> impl Iterator<Item = &ContextTransform> + '_ {
        self.entries().filter_map(|e| match e {
            Entry::ContextTransform(t) => Some(t),
            _ => None,
        })
    }

    /// The latest request of every lane, most recently recorded first.
    fn lane_heads(&self) -> Vec<&RequestRecord> {
        let mut heads: Vec<&RequestRecord> = Vec::new();
        for entry in self.entries().rev() {
            if let Entry::Request(r) = entry {
                if r.in_conversation() && !heads.iter().any(|h| h.lane == r.lane) {
                    heads.push(r);
                }
            }
        }
        heads
    }

    /// Which persisted patches apply to `history`, and the tally of the stale ones.
    fn replay_plan(&self, history: &PrefixHashes) -> PatchPlan<'_> {
        walk_plan(self.transforms(), history)
    }

    /// The latest request whose client history `history` continues (one that starts it
    /// and is shorter), among the latest [`CONTINUED_KEPT`] requests with a turn index.
    fn latest_continued(&self, history: &PrefixHashes) -> Option<Continued> {
        self.entries()
            .rev()
            .filter_map(|e| match e {
                Entry::Request(r) if r.turn_index.is_some() => Some(r),
                _ => None,
            })
            .take(CONTINUED_KEPT)
            .find(|r| continues(history, r))
            .map(Continued::of)
    }

    /// The latest request of `lane` that got an answer: what a diagnosis compares with.
    fn previous_answered(&self, lane: u32) -> Option<&RequestRecord> {
        self.entries().rev().find_map(|e| match e {
            Entry::Request(r) if r.lane == lane && r.usage.is_some() && r.in_conversation() => {
                Some(r)
            }
            _ => None,
        })
    }

    /// The whole list of message keys request `request_index` sent, following its chain
    /// of bases; `None` when a base is missing.
    fn sent_keys(&self, request_index: u64) -> Option<Vec<MessageKey>> {
        walk_sent_keys(self, request_index)
    }
}

/// The full list of message keys a recorded request sent ([`Entries::sent_keys`]).
pub fn sent_keys(log: &(impl Entries + ?Sized), request_index: u64) -> Option<Vec<MessageKey>> {
    log.sent_keys(request_index)
}

/// The full list of message keys a recorded request sent, following its chain of bases
/// through the log. `None` when a base is missing from the log. A loaded
/// [`crate::session::SessionLog`] answers from its index instead
/// ([`Entries::sent_keys`]).
pub fn walk_sent_keys(
    log: &(impl Entries + ?Sized),
    request_index: u64,
) -> Option<Vec<MessageKey>> {
    let find = |index: u64| {
        log.entries().rev().find_map(|e| match e {
            Entry::Request(r) if r.request_index == index => Some(r),
            _ => None,
        })
    };
    let entries = log.entries().count();
    let mut chain = Vec::new();
    let mut current = find(request_index)?;
    loop {
        chain.push(current);
        match current.sent.extends {
            Some(base) if current.sent.base > 0 && chain.len() <= entries => {
                current = find(base)?;
            }
            _ => break,
        }
    }
    let mut keys = Vec::new();
    for record in chain.iter().rev() {
        keys.truncate(record.sent.base);
        if keys.len() != record.sent.base {
            return None;
        }
        keys.extend_from_slice(&record.sent.keys);
    }
    Some(keys)
}

/// What a request reads of the earlier request its client history continues: when it
/// was, its turn, how long its history was, the lifetime of its last marker and what it
/// was billed (`ttl = "auto"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Continued {
    pub time: u64,
    pub turn_index: Option<u64>,
    /// Messages in its client history.
    pub history_count: usize,
    pub last_mark_ttl: Option<MarkTtl>,
    pub usage: Option<Usage>,
}

impl Continued {
    pub fn of(r: &RequestRecord) -> Continued {
        Continued {
            time: r.time,
            turn_index: r.turn_index,
            history_count: r.conversation.history.count,
            last_mark_ttl: r.marks.last().map(|m| m.ttl),
            usage: r.usage,
        }
    }
}

/// The latest earlier request of the conversation a request continues.
#[derive(Debug, Clone, Copy)]
pub struct Previous {
    pub record: Continued,
    /// Milliseconds from that request to this one.
    pub gap_ms: u64,
}

impl Gaps {
    /// The gaps in `log`, plus the gap from this request's previous one (a request at
    /// `now_ms` in turn `turn_index`, whose client history is `history`).
    pub fn learn(
        log: &SessionLog,
        history: &PrefixHashes,
        now_ms: u64,
        turn_index: u64,
    ) -> (Gaps, Option<Previous>) {
        Self::learn_from(log.learned(), log, history, now_ms, turn_index)
    }

    /// [`Gaps::learn`] from what was learned of `log` so far.
    pub(crate) fn learn_from(
        learned: &Learned,
        log: &(impl Entries + ?Sized),
        history: &PrefixHashes,
        now_ms: u64,
        turn_index: u64,
    ) -> (Gaps, Option<Previous>) {
        let mut gaps = learned.gaps().clone();
        let previous = log.latest_continued(history).map(|r| Previous {
            record: r,
            gap_ms: now_ms.saturating_sub(r.time),
        });
        if let Some(p) = previous {
            let seen = Seen::new(p.record.time, p.record.turn_index, p.record.history_count);
            gaps.add(seen, now_ms, Some(turn_index), history.len());
        }
        (gaps, previous)
    }
}

/// Whether `r` has a turn index and `history` continues the client history it was made
/// of.
fn continues(history: &PrefixHashes, r: &RequestRecord) -> bool {
    r.turn_index.is_some()
        && r.in_conversation()
        && r.conversation.history.count < history.len()
        && history.matches(&r.conversation.history)
}

impl Entries for [Entry] {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_ {
        self.iter()
    }
}

impl<const N: usize> Entries for [Entry; N] {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_ {
        self.iter()
    }
}

impl Entries for Vec<Entry> {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_ {
        self.iter()
    }
}

impl Entries for SessionLog {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_ {
        self.iter()
    }

    fn transforms(&self) -> impl Iterator<Item = &ContextTransform> + '_ {
        SessionLog::transforms(self)
    }

    fn lane_heads(&self) -> Vec<&RequestRecord> {
        SessionLog::lane_heads(self)
    }

    fn replay_plan(&self, history: &PrefixHashes) -> PatchPlan<'_> {
        SessionLog::replay_plan(self, history)
    }

    fn latest_continued(&self, history: &PrefixHashes) -> Option<Continued> {
        SessionLog::latest_continued(self, history)
    }

    fn previous_answered(&self, lane: u32) -> Option<&RequestRecord> {
        SessionLog::previous_answered(self, lane)
    }

    fn sent_keys(&self, request_index: u64) -> Option<Vec<MessageKey>> {
        SessionLog::sent_keys(self, request_index)
    }
}

/// An anchor as an index looks it up: message count and rolling hash.
type AnchorKey = (usize, [u8; 32]);

/// How many of the latest entries [`SessionLog::latest_continued`] reads before it looks
/// the history's prefixes up: the request an agent's next one continues is nearly always
/// among them.
const RECENT: usize = 8;

/// How many of the latest request records a loaded log holds whole. A new record's base
/// is one of the latest few requests of the snapshot its request loaded
/// ([`crate::session::record`]), so this leaves room for many requests of one session
/// recorded while another was in flight; it also covers the `RECENT` latest entries.
pub const KEPT_REQUESTS: usize = 64;

/// How many of the latest requests with a turn index a client history is looked up among
/// (the request it continues, for `ttl = "auto"`): a rewind further back than this reads
/// as a request with no previous one, which costs nothing when, as then, the previous
/// one's cache has long expired. Bounds what a session's index keeps per request.
#[cfg(not(test))]
pub const CONTINUED_KEPT: usize = 4096;
/// Small in unit tests, so generated sessions cross it.
#[cfg(test)]
pub const CONTINUED_KEPT: usize = 16;

/// What a slot of the log and an entry of the index of client histories cost, about
/// (the latter measured: 2.35 MB of persistent-map nodes for 10,000 histories).
const SLOT_BYTES: usize = 16;
const HISTORY_BYTES: usize = 240;

#[derive(Clone, Default)]
pub struct SessionLog {
    /// One slot per stored entry; `None` for a request record no request reads any more.
    entries: persistent::Vector<Option<Arc<Entry>>>,
    /// What requests read of the entries, kept as they are appended; shared between
    /// snapshots until one grows.
    index: Arc<Index>,
    /// Approximate bytes held (the held entries' JSON size), for the cache's budget.
    bytes: usize,
}

/// Positions and summaries of a log's entries, each kept on append.
#[derive(Clone, Default)]
struct Index {
    /// Positions of the `context_transform` entries, so replay planning does not walk the
    /// request records.
    transforms: persistent::Vector<usize>,
    /// Position of each lane's latest request, so lane assignment does not walk the log.
    lanes: persistent::HashMap<u32, usize>,
    /// Positions of the `context_transform` entries by anchor, and the anchors' message
    /// counts, so replay planning looks up the history's prefixes instead of reading
    /// every patch.
    anchored: persistent::HashMap<AnchorKey, persistent::Vector<usize>>,
    anchor_counts: imbl::OrdSet<usize>,
    /// Every persisted patch counted per transformer: the stale ones are these less those
    /// that apply.
    tallies: Tallies,
    /// Position and summary of the latest request (with a turn index) of each client
    /// history, so the request a history continues is found without walking the log, and
    /// read after its record has left memory: for the latest [`CONTINUED_KEPT`] requests
    /// with a turn index, whose positions and histories `turns` lists, oldest first.
    histories: persistent::HashMap<AnchorKey, (usize, Continued)>,
    turns: persistent::Vector<(usize, Option<AnchorKey>)>,
    /// The gaps between requests, learned as the log grew (`ttl = "auto"`).
    learned: Learned,
    /// Position of each lane's latest request that got an answer.
    answered: persistent::HashMap<u32, usize>,
    /// Positions of the latest [`KEPT_REQUESTS`] request records, oldest first.
    recent: persistent::Vector<usize>,
    /// The whole list of message keys each held request record sent (`None` when its
    /// chain of bases is broken), by request index, with the record's position: built from
    /// its base's list as it is appended, so no chain of deltas is walked.
    sent: persistent::HashMap<u64, (usize, Option<persistent::Vector<MessageKey>>)>,
}

impl Index {
    /// Remember the client history of the request `r` at `at`, and forget the history of
    /// the request with a turn index that leaves the latest [`CONTINUED_KEPT`].
    fn remember_history(&mut self, at: usize, r: &RequestRecord) {
        let key = r.conversation.history.decoded();
        if let Some(key) = key {
            self.histories.insert(key, (at, Continued::of(r)));
        }
        self.turns.push_back((at, key));
        if self.turns.len() > CONTINUED_KEPT {
            if let Some((gone, Some(key))) = self.turns.pop_front() {
                if self.histories.get(&key).is_some_and(|(p, _)| *p == gone) {
                    self.histories.remove(&key);
                }
            }
        }
    }

    /// Whether requests can still read the request record at `at`.
    fn holds(&self, at: usize) -> bool {
        self.recent.front().is_some_and(|&oldest| at >= oldest)
            || self.lanes.values().any(|&p| p == at)
            || self.answered.values().any(|&p| p == at)
    }

    /// The whole key list `r` sent, from its base's list and its own keys (see
    /// [`walk_sent_keys`], the walk this replaces).
    fn sent_list(&self, r: &RequestRecord) -> Option<persistent::Vector<MessageKey>> {
        let mut keys = match r.sent.extends {
            Some(base) if r.sent.base > 0 => self.sent.get(&base)?.1.clone()?,
            _ => persistent::Vector::new(),
        };
        if keys.len() < r.sent.base {
            return None;
        }
        keys.truncate(r.sent.base);
        for key in &r.sent.keys {
            keys.push_back(*key);
        }
        Some(keys)
    }
}

impl SessionLog {
    pub fn new() -> SessionLog {
        SessionLog::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `index`, when this snapshot holds it.
    pub fn get(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index)?.as_deref()
    }

    /// The entries held, in log order (reversible).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Entry> + '_ {
        self.entries.iter().filter_map(Option::as_deref)
    }

    /// How many entries this snapshot holds whole.
    pub fn held(&self) -> usize {
        self.iter().count()
    }

    /// The persisted patches, in log order.
    pub fn transforms(&self) -> impl Iterator<Item = &ContextTransform> + '_ {
        self.index
            .transforms
            .iter()
            .filter_map(|&i| self.transform_at(i))
    }

    fn transform_at(&self, i: usize) -> Option<&ContextTransform> {
        match self.get(i) {
            Some(Entry::ContextTransform(t)) => Some(t),
            _ => None,
        }
    }

    fn request_at(&self, i: usize) -> Option<&RequestRecord> {
        match self.get(i) {
            Some(Entry::Request(r)) => Some(r),
            _ => None,
        }
    }

    /// The latest request records held (at most [`KEPT_REQUESTS`]), newest first.
    pub fn latest_requests(&self) -> impl Iterator<Item = &RequestRecord> + '_ {
        self.index
            .recent
            .iter()
            .rev()
            .filter_map(|&at| self.request_at(at))
    }

    /// The latest request of every lane, most recently recorded first: O(lanes), where
    /// the walk of [`Entries::lane_heads`] is O(log).
    pub fn lane_heads(&self) -> Vec<&RequestRecord> {
        let mut at: Vec<usize> = self.index.lanes.values().copied().collect();
        at.sort_unstable_by(|a, b| b.cmp(a));
        at.into_iter().filter_map(|i| self.request_at(i)).collect()
    }

    /// Which persisted patches apply to `history` (in log order), and the tally of the
    /// stale ones: O(the anchors' distinct lengths up to the history's), not O(patches).
    pub fn replay_plan(&self, history: &PrefixHashes) -> PatchPlan<'_> {
        let mut at: Vec<usize> = Vec::new();
        for &count in self.index.anchor_counts.range(..=history.len()) {
            let Some(&hash) = history.hash_at(count) else {
                continue;
            };
            if let Some(positions) = self.index.anchored.get(&(count, hash)) {
                at.extend(positions.iter().copied());
            }
        }
        at.sort_unstable();
        let apply: Vec<&ContextTransform> = at
            .into_iter()
            .filter_map(|i| self.transform_at(i))
            .collect();
        PatchPlan {
            stale: self.index.tallies.without(&apply),
            apply,
        }
    }

    /// The latest request with a turn index whose client history `history` continues
    /// (see [`Entries::latest_continued`]): the last few entries are read, then each of
    /// the history's shorter prefixes is looked up.
    pub fn latest_continued(&self, history: &PrefixHashes) -> Option<Continued> {
        let recent = self.entries.len().saturating_sub(RECENT)..self.entries.len();
        let found = recent
            .rev()
            .filter_map(|i| self.request_at(i))
            .find(|r| continues(history, r));
        if let Some(r) = found {
            return Some(Continued::of(r));
        }
        // None of the recent entries matched, so a match's position is older than them.
        (0..history.len())
            .filter_map(|count| {
                let hash = *history.hash_at(count)?;
                self.index.histories.get(&(count, hash)).copied()
            })
            .max_by_key(|&(at, _)| at)
            .map(|(_, continued)| continued)
    }

    /// The latest request of `lane` that got an answer (see
    /// [`Entries::previous_answered`]): O(1).
    pub fn previous_answered(&self, lane: u32) -> Option<&RequestRecord> {
        self.request_at(*self.index.answered.get(&lane)?)
    }

    /// The whole list of message keys request `request_index` sent, when this snapshot
    /// holds its record (see [`Entries::sent_keys`]): no chain is walked.
    pub fn sent_keys(&self, request_index: u64) -> Option<Vec<MessageKey>> {
        let (_, keys) = self.index.sent.get(&request_index)?;
        keys.as_ref().map(|keys| keys.iter().copied().collect())
    }

    /// The gaps between requests learned from this log.
    pub fn learned(&self) -> &Learned {
        &self.index.learned
    }

    /// This log with `tail` appended; `self` is left as it was and shares every entry with
    /// the result.
    pub fn extended(&self, tail: Vec<Entry>) -> SessionLog {
        let mut out = self.clone();
        if tail.is_empty() {
            return out;
        }
        let index = Arc::make_mut(&mut out.index);
        for entry in tail {
            out.bytes += entry.encoded_len();
            let at = out.entries.len();
            match &entry {
                Entry::ContextTransform(t) => {
                    index.transforms.push_back(at);
                    index.tallies.add(t);
                    if let Some(key) = t.anchor.decoded() {
                        index.anchored.get_or_default(key).push_back(at);
                        index.anchor_counts.insert(key.0);
                    }
                }
                Entry::Request(r) => {
                    index.learned.observe(r);
                    if r.turn_index.is_some() && r.in_conversation() {
                        index.remember_history(at, r);
                    }
                    let list = index.sent_list(r);
                    index.sent.insert(r.request_index, (at, list));
                    // Records requests can no longer reach leave memory.
                    let mut released = Vec::with_capacity(3);
                    if r.in_conversation() {
                        released.extend(index.lanes.insert(r.lane, at));
                        if r.usage.is_some() {
                            released.extend(index.answered.insert(r.lane, at));
                        }
                    }
                    index.recent.push_back(at);
                    if index.recent.len() > KEPT_REQUESTS {
                        released.extend(index.recent.pop_front());
                    }
                    for gone in released {
                        if !index.holds(gone) {
                            out.bytes -= release(&mut out.entries, index, gone);
                        }
                    }
                }
                _ => {}
            }
            out.entries.push_back(Some(Arc::new(entry)));
        }
        out
    }

    /// The entries held, as owned values.
    pub fn to_vec(&self) -> Vec<Entry> {
        self.iter().cloned().collect()
    }

    /// Approximate bytes this snapshot holds: the held entries' JSON, a slot per entry
    /// and an index entry per client history, which stay as the session ages.
    pub fn weight(&self) -> usize {
        self.bytes + SLOT_BYTES * self.entries.len() + HISTORY_BYTES * self.index.histories.len()
    }

    /// Whether entry `index` of both snapshots is the same allocation (not a copy).
    pub fn shares_entry(&self, other: &SessionLog, index: usize) -> bool {
        match (self.entries.get(index), other.entries.get(index)) {
            (Some(Some(a)), Some(Some(b))) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

#[cfg(test)]
impl SessionLog {
    /// `entries` as one load gives them, and as the cache grows them `chunk` at a time:
    /// what a test of the kept indexes checks both of.
    pub(crate) fn loaded_and_grown(entries: &[Entry], chunk: usize) -> [SessionLog; 2] {
        let mut grown = SessionLog::new();
        for part in entries.chunks(chunk) {
            grown = grown.extended(part.to_vec());
        }
        [SessionLog::from(entries.to_vec()), grown]
    }
}

impl From<Vec<Entry>> for SessionLog {
    fn from(entries: Vec<Entry>) -> SessionLog {
        SessionLog::new().extended(entries)
    }
}

impl PartialEq for SessionLog {
    fn eq(&self, other: &SessionLog) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl PartialEq<Vec<Entry>> for SessionLog {
    fn eq(&self, other: &Vec<Entry>) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for SessionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Let the request record at `at` go from `entries` and its key list from `index`: the
/// bytes it held.
fn release(
    entries: &mut persistent::Vector<Option<Arc<Entry>>>,
    index: &mut Index,
    at: usize,
) -> usize {
    let Some(Some(entry)) = entries.get(at).cloned() else {
        return 0;
    };
    if let Entry::Request(r) = entry.as_ref() {
        if index
            .sent
            .get(&r.request_index)
            .is_some_and(|(p, _)| *p == at)
        {
            index.sent.remove(&r.request_index);
        }
    }
    entries.set(at, None);
    entry.encoded_len()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::session::entry::fixtures::memory_patch;

    /// A session that grows one entry per request: each new snapshot shares every earlier
    /// entry with the previous one (no entry is copied), and the previous one is unchanged.
    #[test]
    fn a_growing_log_shares_its_entries_instead_of_copying_them() {
        let mut log = SessionLog::new();
        for i in 0..2_000u64 {
            let next = log.extended(vec![memory_patch(i)]);
            assert_eq!(log.len() as u64, i);
            assert_eq!(next.len() as u64, i + 1);
            for probe in [0, log.len() / 2, log.len().saturating_sub(1)] {
                if probe < log.len() {
                    assert!(next.shares_entry(&log, probe), "entry {probe} was copied");
                }
            }
            log = next;
        }
        assert_eq!(log.get(1_999), Some(&memory_patch(1_999)));
        assert!(log.weight() > 2_000 * 100);
        assert_eq!(log.iter().next_back(), Some(&memory_patch(1_999)));
    }

    /// The lanes kept on append give what walking the whole log gives: each lane's latest
    /// request, most recent first, however the log was grown (one load, or request by
    /// request as the cache extends it).
    #[test]
    fn lane_heads_kept_on_append_equal_the_walk_of_the_log() {
        use proptest::prelude::*;
        use proptest::test_runner::TestRunner;
        let entry = (any::<bool>(), 0u32..5).prop_map(|(transform, lane)| (transform, lane));
        let mut runner = TestRunner::default();
        runner
            .run(
                &(prop::collection::vec(entry, 0..60), 1usize..8),
                |(items, chunk)| {
                    let entries: Vec<Entry> = items
                        .iter()
                        .enumerate()
                        .map(|(i, &(transform, lane))| {
                            if transform {
                                memory_patch(i as u64)
                            } else {
                                Entry::Request(RequestRecord {
                                    request_index: i as u64,
                                    lane,
                                    ..RequestRecord::default()
                                })
                            }
                        })
                        .collect();
                    let walked: Vec<(u32, u64)> = Entries::lane_heads(&entries)
                        .iter()
                        .map(|r| (r.lane, r.request_index))
                        .collect();
                    for log in SessionLog::loaded_and_grown(&entries, chunk) {
                        let kept: Vec<(u32, u64)> = log
                            .lane_heads()
                            .iter()
                            .map(|r| (r.lane, r.request_index))
                            .collect();
                        prop_assert_eq!(&kept, &walked);
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    /// A request record of a generated session (see the property test below).
    fn generated_request(i: u64, g: &GeneratedRequest, earlier: &[u64]) -> Entry {
        let (conversation, messages, turn, lane, answered, extends, base, new_keys) = *g;
        let extends = extends.and_then(|back| earlier.iter().rev().nth(back).copied());
        Entry::Request(RequestRecord {
            request_index: i,
            time: i * 1_000,
            turn_index: turn,
            lane,
            usage: answered.then(|| Usage {
                cache_read: i,
                ..Usage::default()
            }),
            conversation: super::super::entry::Conversation::of(&PrefixHashes::new(
                &crate::session::entry::fixtures::conversation(conversation, messages),
            )),
            sent: crate::session::SentMessages {
                count: base + new_keys,
                hash: format!("h{i}"),
                extends,
                base,
                keys: (0..new_keys)
                    .map(|k| [(i as u8).wrapping_add(k as u8); 32])
                    .collect(),
            },
            // One in twelve a warmup, which no lane, diagnosis or history goes on from.
            warmup: messages == 11,
            ..RequestRecord::default()
        })
    }

    /// (conversation, messages, turn, lane, answered, which recent request it extends,
    /// base, new keys)
    type GeneratedRequest = (
        usize,
        usize,
        Option<u64>,
        u32,
        bool,
        Option<usize>,
        usize,
        usize,
    );

    /// A loaded log holds whole only the entries requests can reach, and answers every
    /// question a request asks of it as walking the whole log does: lane heads, the
    /// previous answered request of each lane, the keys a request sent, the request a
    /// history continues, the persisted patches and the latest entries. On generated
    /// sessions longer than what is held, of several lanes and conversations, with
    /// requests that extend a recent one, start over, or name a base that is too short,
    /// and warmups, loaded at once or grown a few entries at a time.
    #[test]
    fn a_held_log_answers_requests_as_the_whole_log_does() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        let request = (
            // Most requests on lane 0, so the other lanes' heads grow old.
            (
                0usize..3,
                0usize..12,
                prop::option::of(0u64..5),
                prop_oneof![12 => Just(0u32), 1 => 1u32..4],
            ),
            (
                prop::bool::weighted(0.7),
                prop::option::of(0usize..10),
                0usize..6,
                0usize..4,
            ),
        )
            .prop_map(|((c, n, turn, lane), (answered, extends, base, keys))| {
                (c, n, turn, lane, answered, extends, base, keys)
            });
        let item = prop_oneof![1 => Just(None), 5 => request.prop_map(Some)];
        let mut runner = TestRunner::new(Config {
            cases: 64,
            ..Config::default()
        });
        runner
            .run(
                &(
                    prop::collection::vec(item, 0..4 * KEPT_REQUESTS),
                    1usize..9,
                    (0usize..3, 0usize..14),
                ),
                |(items, chunk, (c, n))| {
                    let mut earlier = Vec::new();
                    let entries: Vec<Entry> = items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| match item {
                            None => memory_patch(i as u64),
                            Some(g) => {
                                let entry = generated_request(i as u64, g, &earlier);
                                earlier.push(i as u64);
                                entry
                            }
                        })
                        .collect();
                    let requests: Vec<&RequestRecord> = entries
                        .iter()
                        .filter_map(|e| match e {
                            Entry::Request(r) => Some(r),
                            _ => None,
                        })
                        .collect();
                    let history =
                        PrefixHashes::new(&crate::session::entry::fixtures::conversation(c, n));
                    let lanes = 4;
                    for log in SessionLog::loaded_and_grown(&entries, chunk) {
                        prop_assert_eq!(log.len(), entries.len());
                        prop_assert_eq!(log.lane_heads(), Entries::lane_heads(&entries));
                        for lane in 0..lanes {
                            prop_assert_eq!(
                                log.previous_answered(lane),
                                Entries::previous_answered(&entries, lane)
                            );
                        }
                        // What a diagnosis asks: the keys of a lane's previous answered
                        // request, and of any recent one.
                        let asked = (0..lanes)
                            .filter_map(|lane| log.previous_answered(lane))
                            .chain(requests.iter().rev().take(KEPT_REQUESTS).copied());
                        for r in asked {
                            prop_assert_eq!(
                                log.sent_keys(r.request_index),
                                Entries::sent_keys(&entries, r.request_index)
                            );
                        }
                        prop_assert_eq!(
                            log.latest_continued(&history),
                            Entries::latest_continued(&entries, &history)
                        );
                        prop_assert!(log.transforms().eq(Entries::transforms(&entries)));
                        // Every entry from the oldest of the latest requests on is held.
                        let from = requests
                            .iter()
                            .rev()
                            .nth(KEPT_REQUESTS - 1)
                            .map_or(0, |r| r.request_index as usize);
                        let held: Vec<&Entry> = log.iter().collect();
                        let latest = &entries[from..];
                        prop_assert!(held.ends_with(&latest.iter().collect::<Vec<_>>()));
                        // And nothing else but patches and lane heads.
                        let transforms = entries.transforms().count();
                        prop_assert!(log.held() <= transforms + KEPT_REQUESTS + 2 * lanes as usize);
                        prop_assert_eq!(
                            log.bytes,
                            log.iter().map(Entry::encoded_len).sum::<usize>()
                        );
                    }
                    Ok(())
                },
            )
            .unwrap();
    }

    /// A session of 20,000 requests on one lane holds the same few entries and client
    /// histories as one of 200: what it holds follows what requests read, not the
    /// session's age.
    #[test]
    fn a_long_session_holds_what_a_short_one_holds() {
        // The first request sends 5 messages; each next one keeps 3 of its previous one's
        // and adds 2.
        // Each has a client history of its own (a conversation of its own).
        let grown = |n: u64| {
            let mut log = SessionLog::new();
            let mut earlier = Vec::new();
            for i in 0..n {
                let (extends, base, keys) = if i == 0 {
                    (None, 0, 5)
                } else {
                    (Some(0), 3, 2)
                };
                let g = (i as usize, 4, Some(1), 0, true, extends, base, keys);
                log = log.extended(vec![generated_request(i, &g, &earlier)]);
                earlier.push(i);
            }
            log
        };
        let (short, long) = (grown(200), grown(20_000));
        assert_eq!(long.len(), 20_000);
        assert_eq!(short.held(), KEPT_REQUESTS);
        assert_eq!(long.held(), KEPT_REQUESTS);
        // The same entries held, only their numbers a few digits longer; the index keeps
        // the latest client histories only, and the cache weighs them and a slot per entry.
        assert!(long.bytes < short.bytes * 11 / 10, "{}", long.bytes);
        assert_eq!(long.index.histories.len(), CONTINUED_KEPT);
        assert_eq!(long.index.turns.len(), CONTINUED_KEPT);
        assert_eq!(
            long.weight(),
            long.bytes + SLOT_BYTES * 20_000 + HISTORY_BYTES * CONTINUED_KEPT
        );
        // The latest request's keys are still whole: its base's, then its own.
        assert_eq!(long.sent_keys(19_999).map(|k| k.len()), Some(5));
        // The first request's record has left memory (the store still has it).
        assert_eq!(long.sent_keys(0), None);
        assert_eq!(long.get(0), None);
    }
}
