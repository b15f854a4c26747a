//! Bounded memos of pure functions of a request's parts, shared across requests.
//!
//! Agents resend their whole history on every request, and each request is the previous
//! one plus a small tail. What cachet derives from one message, tool or system block (its
//! canonical key, its kind, its token count) is therefore asked again and again of the
//! same bytes. A [`Memo`] answers those from a hash of the bytes: a pass of xxh3 instead of
//! a JSON scan, a canonical serialisation or a BPE run.
//!
//! Keys are 128-bit xxh3 hashes of the input bytes (plus whatever else the function reads,
//! mixed in by the caller), seeded per process so that no client can craft two inputs that
//! share one. Two different inputs sharing one is taken as impossible (about 2^-128 per
//! pair), so a hit is the function's own answer. The memo holds at most `capacity` answers
//! and starts over when full: a bound on memory, never a wrong answer.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// A bounded map from a 128-bit input hash to a computed value.
pub struct Memo<V> {
    capacity: usize,
    map: OnceLock<Mutex<HashMap<u128, V>>>,
}

impl<V: Clone> Memo<V> {
    /// An empty memo of at most `capacity` answers (usable in a `static`).
    pub const fn new(capacity: usize) -> Self {
        Memo {
            capacity,
            map: OnceLock::new(),
        }
    }

    /// Answers held now.
    pub fn len(&self) -> usize {
        self.map
            .get()
            .and_then(|m| m.lock().ok().map(|m| m.len()))
            .unwrap_or(0)
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value remembered for `key`, or `compute()` remembered under it.
    pub fn get_or_insert_with(&self, key: u128, compute: impl FnOnce() -> V) -> V {
        let map = self.map.get_or_init(Default::default);
        if let Some(found) = map.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return found;
        }
        // Computed outside the lock: another thread may compute the same value meanwhile,
        // which costs time only.
        let value = compute();
        if let Ok(mut m) = map.lock() {
            if m.len() >= self.capacity {
                m.clear();
            }
            m.insert(key, value.clone());
        }
        value
    }

    /// As [`Memo::get_or_insert_with`], for one of `among` inputs asked together (the
    /// messages of one body). A batch of more than half the memo's capacity bypasses it:
    /// it would start the memo over within itself, pushing out every other conversation's
    /// answers and finding none of its own on the next request, and hold the memo full
    /// on top of the body. Its answers are computed, neither looked up nor kept.
    pub fn get_or_insert_among(
        &self,
        among: usize,
        key: impl FnOnce() -> u128,
        compute: impl FnOnce() -> V,
    ) -> V {
        match among > self.capacity / 2 {
            true => compute(),
            false => self.get_or_insert_with(key(), compute),
        }
    }
}

/// A hasher for memo keys built from several pieces, seeded for this process.
pub fn hasher() -> xxhash_rust::xxh3::Xxh3 {
    use std::hash::{BuildHasher, RandomState};
    static SEED: OnceLock<u64> = OnceLock::new();
    let seed = *SEED.get_or_init(|| RandomState::new().hash_one(0u8));
    xxhash_rust::xxh3::Xxh3::with_seed(seed)
}

/// The memo key of `bytes` read under a context `tag` (a function that depends on more
/// than the bytes, such as the provider API, passes it here).
pub fn key(tag: &[u8], bytes: &[u8]) -> u128 {
    let mut hasher = hasher();
    hasher.update(&(tag.len() as u64).to_le_bytes());
    hasher.update(tag);
    hasher.update(bytes);
    hasher.digest128()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn a_remembered_answer_is_not_computed_again() {
        let memo = Memo::new(4);
        let calls = Cell::new(0);
        let f = |x: u32| {
            calls.set(calls.get() + 1);
            x * 2
        };
        assert_eq!(memo.get_or_insert_with(1, || f(1)), 2);
        assert_eq!(memo.get_or_insert_with(1, || f(99)), 2);
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn a_full_memo_starts_over_and_stays_bounded() {
        let memo = Memo::new(3);
        for k in 0..10u128 {
            assert_eq!(memo.get_or_insert_with(k, || k as u64), k as u64);
        }
        assert!(memo.len() <= 3, "{}", memo.len());
    }

    #[test]
    fn a_batch_over_half_the_memo_bypasses_it() {
        let memo = Memo::new(8);
        memo.get_or_insert_with(1, || 10u64);
        let hashed = Cell::new(0);
        let key = |k: u128| {
            hashed.set(hashed.get() + 1);
            k
        };
        for k in 2..20u128 {
            assert_eq!(
                memo.get_or_insert_among(5, || key(k), || k as u64 * 10),
                k as u64 * 10
            );
        }
        assert_eq!(hashed.get(), 0, "a bypassing batch hashes nothing");
        assert_eq!(memo.len(), 1, "nor fills the memo, nor starts it over");
        assert_eq!(
            memo.get_or_insert_among(4, || key(1), || 0),
            10,
            "half is remembered"
        );
        assert_eq!(memo.get_or_insert_among(4, || key(30), || 300), 300);
        assert_eq!(memo.len(), 2);
    }

    #[test]
    fn the_tag_separates_equal_bytes_read_in_different_contexts() {
        assert_ne!(key(b"chat", b"{}"), key(b"responses", b"{}"));
        assert_ne!(key(b"ab", b"c"), key(b"a", b"bc"));
        assert_eq!(key(b"chat", b"{}"), key(b"chat", b"{}"));
    }
}
