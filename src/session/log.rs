//! A session's log as loaded: an immutable snapshot that shares its entries with the cache
//! and with every later, longer snapshot of the same session.
//!
//! The log is append-only, so a request that finds the session grown by `k` entries builds
//! its snapshot from the cached one plus those `k`: a persistent vector (`imbl`) of shared
//! entries, where appending copies no earlier entry. Loading a session therefore costs
//! O(new entries), whatever its length.

use std::sync::Arc;

use super::entry::{ContextTransform, Entry, RequestRecord};

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
}

#[derive(Clone, Default)]
pub struct SessionLog {
    entries: imbl::Vector<Arc<Entry>>,
    /// Positions of the `context_transform` entries, so replay planning does not walk the
    /// request records.
    transforms: imbl::Vector<usize>,
    /// Position of each lane's latest request, so lane assignment does not walk the log.
    lanes: imbl::OrdMap<u32, usize>,
    /// Approximate bytes held (the entries' JSON size), for the cache's budget.
    bytes: usize,
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
        self.transforms
            .iter()
            .filter_map(|&i| match self.entries.get(i).map(Arc::as_ref) {
                Some(Entry::ContextTransform(t)) => Some(t),
                _ => None,
            })
    }

    /// The latest request of every lane, most recently recorded first: O(lanes), where
    /// the walk of [`Entries::lane_heads`] is O(log).
    pub fn lane_heads(&self) -> Vec<&RequestRecord> {
        let mut at: Vec<usize> = self.lanes.values().copied().collect();
        at.sort_unstable_by(|a, b| b.cmp(a));
        at.into_iter()
            .filter_map(|i| match self.entries.get(i).map(Arc::as_ref) {
                Some(Entry::Request(r)) => Some(r),
                _ => None,
            })
            .collect()
    }

    /// This log with `tail` appended; `self` is left as it was and shares every entry with
    /// the result.
    pub fn extended(&self, tail: Vec<Entry>) -> SessionLog {
        let mut out = self.clone();
        for entry in tail {
            out.bytes += json_size(&entry);
            match &entry {
                Entry::ContextTransform(_) => out.transforms.push_back(out.entries.len()),
                Entry::Request(r) => {
                    out.lanes.insert(r.lane, out.entries.len());
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
                    let mut grown = SessionLog::new();
                    for part in entries.chunks(chunk) {
                        grown = grown.extended(part.to_vec());
                    }
                    for log in [SessionLog::from(entries.clone()), grown] {
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
