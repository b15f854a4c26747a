//! A session's log as loaded: an immutable snapshot that shares its entries with the cache
//! and with every later, longer snapshot of the same session.
//!
//! The log is append-only, so a request that finds the session grown by `k` entries builds
//! its snapshot from the cached one plus those `k`: a persistent vector (`imbl`) of shared
//! entries, where appending copies no earlier entry. Loading a session therefore costs
//! O(new entries), whatever its length.
//!
//! What a request reads of the log is kept as it grows, in persistent maps shared the same
//! way: each lane's latest request, the persisted patches by anchor and their count per
//! transformer, the latest request of each client history, and the gaps between requests.
//! So planning a replay, assigning a lane and deciding a lifetime do not walk the log
//! either; each has the walk it replaces beside it ([`Entries`]), and a test that the two
//! agree.

use std::sync::Arc;

use super::anchor::PrefixHashes;
use super::entry::{ContextTransform, Entry, RequestRecord};
use super::replay::{walk_plan, ReplayPlan, Tallies};
use crate::ttl::Learned;

/// A session's entries in log order, however they are held: a loaded [`SessionLog`], or a
/// plain slice (tests, tools). What reads a log takes this.
pub trait Entries {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + ExactSizeIterator + '_;

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
                if !heads.iter().any(|h| h.lane == r.lane) {
                    heads.push(r);
                }
            }
        }
        heads
    }

    /// Which persisted patches apply to `history`, and the tally of the stale ones.
    fn replay_plan(&self, history: &PrefixHashes) -> ReplayPlan<'_> {
        walk_plan(self.transforms(), history)
    }

    /// The latest request with a turn index whose client history `history` continues:
    /// one that starts it and is shorter.
    fn latest_continued(&self, history: &PrefixHashes) -> Option<&RequestRecord> {
        self.entries().rev().find_map(|e| match e {
            Entry::Request(r) if continues(history, r) => Some(r),
            _ => None,
        })
    }
}

/// Whether `r` has a turn index and `history` continues the client history it was made
/// of.
fn continues(history: &PrefixHashes, r: &RequestRecord) -> bool {
    r.turn_index.is_some()
        && r.conversation.history.count < history.len()
        && history.matches(&r.conversation.history)
}

impl Entries for [Entry] {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + ExactSizeIterator + '_ {
        self.iter()
    }
}

impl<const N: usize> Entries for [Entry; N] {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + ExactSizeIterator + '_ {
        self.iter()
    }
}

impl Entries for Vec<Entry> {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + ExactSizeIterator + '_ {
        self.iter()
    }
}

impl Entries for SessionLog {
    fn entries(&self) -> impl DoubleEndedIterator<Item = &Entry> + ExactSizeIterator + '_ {
        self.iter()
    }

    fn transforms(&self) -> impl Iterator<Item = &ContextTransform> + '_ {
        SessionLog::transforms(self)
    }

    fn lane_heads(&self) -> Vec<&RequestRecord> {
        SessionLog::lane_heads(self)
    }

    fn replay_plan(&self, history: &PrefixHashes) -> ReplayPlan<'_> {
        SessionLog::replay_plan(self, history)
    }

    fn latest_continued(&self, history: &PrefixHashes) -> Option<&RequestRecord> {
        SessionLog::latest_continued(self, history)
    }
}

/// An anchor as an index looks it up: message count and rolling hash.
type AnchorKey = (usize, [u8; 32]);

/// How many of the latest entries [`SessionLog::latest_continued`] reads before it looks
/// the history's prefixes up: the request an agent's next one continues is nearly always
/// among them.
const RECENT: usize = 8;

#[derive(Clone, Default)]
pub struct SessionLog {
    entries: imbl::Vector<Arc<Entry>>,
    /// What requests read of the entries, kept as they are appended; shared between
    /// snapshots until one grows.
    index: Arc<Index>,
    /// Approximate bytes held (the entries' JSON size), for the cache's budget.
    bytes: usize,
}

/// Positions and summaries of a log's entries, each kept on append.
#[derive(Clone, Default)]
struct Index {
    /// Positions of the `context_transform` entries, so replay planning does not walk the
    /// request records.
    transforms: imbl::Vector<usize>,
    /// Position of each lane's latest request, so lane assignment does not walk the log.
    lanes: imbl::OrdMap<u32, usize>,
    /// Positions of the `context_transform` entries by anchor, and the anchors' message
    /// counts, so replay planning looks up the history's prefixes instead of reading
    /// every patch.
    anchored: imbl::HashMap<AnchorKey, imbl::Vector<usize>>,
    anchor_counts: imbl::OrdSet<usize>,
    /// Every persisted patch counted per transformer: the stale ones are these less those
    /// that apply.
    tallies: Tallies,
    /// Position of the latest request (with a turn index) of each client history, so the
    /// request a history continues is found without walking the log.
    histories: imbl::HashMap<AnchorKey, usize>,
    /// The gaps between requests, learned as the log grew (`ttl = "auto"`).
    learned: Learned,
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

    pub fn get(&self, index: usize) -> Option<&Entry> {
        self.entries.get(index).map(Arc::as_ref)
    }

    /// Entries in log order (reversible).
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Entry> + ExactSizeIterator + '_ {
        self.entries.iter().map(Arc::as_ref)
    }

    /// The persisted patches, in log order.
    pub fn transforms(&self) -> impl Iterator<Item = &ContextTransform> + '_ {
        self.index
            .transforms
            .iter()
            .filter_map(|&i| self.transform_at(i))
    }

    fn transform_at(&self, i: usize) -> Option<&ContextTransform> {
        match self.entries.get(i).map(Arc::as_ref) {
            Some(Entry::ContextTransform(t)) => Some(t),
            _ => None,
        }
    }

    fn request_at(&self, i: usize) -> Option<&RequestRecord> {
        match self.entries.get(i).map(Arc::as_ref) {
            Some(Entry::Request(r)) => Some(r),
            _ => None,
        }
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
    pub fn replay_plan(&self, history: &PrefixHashes) -> ReplayPlan<'_> {
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
        ReplayPlan {
            stale: self.index.tallies.without(&apply),
            apply,
        }
    }

    /// The latest request with a turn index whose client history `history` continues
    /// (see [`Entries::latest_continued`]): the last few entries are read, then each of
    /// the history's shorter prefixes is looked up.
    pub fn latest_continued(&self, history: &PrefixHashes) -> Option<&RequestRecord> {
        let recent = self.entries.len().saturating_sub(RECENT)..self.entries.len();
        let found = recent
            .rev()
            .filter_map(|i| self.request_at(i))
            .find(|r| continues(history, r));
        if found.is_some() {
            return found;
        }
        // None of the recent entries matched, so a match's position is older than them.
        let at = (0..history.len())
            .filter_map(|count| {
                let hash = *history.hash_at(count)?;
                self.index.histories.get(&(count, hash)).copied()
            })
            .max()?;
        self.request_at(at)
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
            out.bytes += json_size(&entry);
            let at = out.entries.len();
            match &entry {
                Entry::ContextTransform(t) => {
                    index.transforms.push_back(at);
                    index.tallies.add(t);
                    if let Some(key) = t.anchor.decoded() {
                        index.anchored.entry(key).or_default().push_back(at);
                        index.anchor_counts.insert(key.0);
                    }
                }
                Entry::Request(r) => {
                    index.lanes.insert(r.lane, at);
                    index.learned.observe(r);
                    if r.turn_index.is_some() {
                        if let Some(key) = r.conversation.history.decoded() {
                            index.histories.insert(key, at);
                        }
                    }
                }
                _ => {}
            }
            out.entries.push_back(Arc::new(entry));
        }
        out
    }

    /// Entries from `start` on, as owned values.
    pub fn tail_from(&self, start: usize) -> Vec<Entry> {
        self.entries
            .iter()
            .skip(start)
            .map(|e| Entry::clone(e))
            .collect()
    }

    pub fn to_vec(&self) -> Vec<Entry> {
        self.tail_from(0)
    }

    /// Approximate bytes this snapshot holds.
    pub fn weight(&self) -> usize {
        self.bytes
    }

    /// Whether entry `index` of both snapshots is the same allocation (not a copy).
    pub fn shares_entry(&self, other: &SessionLog, index: usize) -> bool {
        match (self.entries.get(index), other.entries.get(index)) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
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

/// The size of an entry's JSON, counted without building the string.
fn json_size(entry: &Entry) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, entry);
    count.0
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
}
