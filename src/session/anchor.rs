//! Anchors: which client history a persisted patch was made against.
//!
//! An anchor is the number of history messages and a rolling hash of their keys. The rolling
//! hash of the first `n` messages is `h(n) = sha256(h(n-1) || key(n-1))` with `h(0)` all
//! zeros, so one pass over a request's history yields every prefix hash and any anchor is
//! checked in O(1).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::providers::cache_key::{key_of_raw_keeping, message_key, Fresh, MessageKey};

/// The client history a patch (or a recorded request) was made against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Anchor {
    /// Number of history messages.
    pub count: usize,
    /// Hex rolling hash of those messages' keys.
    pub hash: String,
}

impl Anchor {
    /// The anchor of a whole history.
    pub fn of(history: &[Value]) -> Anchor {
        PrefixHashes::new(history).full()
    }

    /// Whether `history` starts with the prefix this anchor describes.
    pub fn matches(&self, history: &[Value]) -> bool {
        PrefixHashes::new(history).matches(self)
    }

    /// The message count and the rolling hash as bytes; `None` when the hash is not valid
    /// hex of 32 bytes (such an anchor matches no history).
    pub fn decoded(&self) -> Option<(usize, [u8; 32])> {
        let mut hash = [0u8; 32];
        hex::decode_to_slice(&self.hash, &mut hash).ok()?;
        Some((self.count, hash))
    }
}

/// Rolling hashes of every prefix of one history, computed once per request.
#[derive(Debug, Clone)]
pub struct PrefixHashes {
    keys: Vec<MessageKey>,
    /// `prefix[n]` is the rolling hash of the first `n` messages; `len == keys.len() + 1`.
    prefix: Vec<[u8; 32]>,
    /// The canonical bytes of the messages first keyed here, for the request's record.
    fresh: Fresh,
}

impl PartialEq for PrefixHashes {
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys && self.prefix == other.prefix
    }
}

impl PrefixHashes {
    pub fn new(history: &[Value]) -> PrefixHashes {
        Self::from_keys(history.iter().map(message_key).collect())
    }

    /// From the raw JSON of each history message, as the client sent them.
    pub fn of_raw<'a>(messages: impl Iterator<Item = &'a [u8]>) -> PrefixHashes {
        Self::of_raw_after(&Self::from_keys(Vec::new()), 0, messages)
    }

    /// From keys already computed (e.g. by the content store).
    pub fn from_keys(keys: Vec<MessageKey>) -> PrefixHashes {
        let mut hashes = PrefixHashes {
            keys: Vec::with_capacity(keys.len()),
            prefix: Vec::with_capacity(keys.len() + 1),
            fresh: Fresh::default(),
        };
        hashes.prefix.push([0u8; 32]);
        keys.into_iter().for_each(|key| hashes.push(key));
        hashes
    }

    /// [`PrefixHashes::of_raw`] of a history whose first `reused` messages are those of
    /// `earlier` (the same bytes): their keys and prefix hashes are taken, the rest computed.
    pub fn of_raw_after<'a>(
        earlier: &PrefixHashes,
        reused: usize,
        messages: impl Iterator<Item = &'a [u8]>,
    ) -> PrefixHashes {
        let reused = reused.min(earlier.len());
        let among = messages.size_hint().0;
        let mut hashes = PrefixHashes {
            keys: Vec::with_capacity(among),
            prefix: Vec::with_capacity(among + 1),
            fresh: Fresh::default(),
        };
        hashes.keys.extend_from_slice(&earlier.keys[..reused]);
        hashes.prefix.extend_from_slice(&earlier.prefix[..=reused]);
        for raw in messages.skip(reused) {
            let key = key_of_raw_keeping(raw, among, &mut hashes.fresh);
            hashes.push(key);
        }
        hashes
    }

    /// The history one message longer.
    fn push(&mut self, key: MessageKey) {
        let current = self.prefix.last().copied().unwrap_or_default();
        let mut hasher = Sha256::new();
        hasher.update(current);
        hasher.update(key);
        self.prefix.push(hasher.finalize().into());
        self.keys.push(key);
    }

    /// The canonical bytes of a message these hashes keyed for the first time.
    pub fn fresh(&self, key: &MessageKey) -> Option<&std::sync::Arc<[u8]>> {
        self.fresh.get(key)
    }

    /// Number of messages in the history.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The message keys, in history order.
    pub fn keys(&self) -> &[MessageKey] {
        &self.keys
    }

    /// The message keys, in history order, taken rather than copied.
    pub fn into_keys(self) -> Vec<MessageKey> {
        self.keys
    }

    /// The anchor of the first `count` messages, if the history is that long.
    pub fn anchor_at(&self, count: usize) -> Option<Anchor> {
        self.prefix.get(count).map(|h| Anchor {
            count,
            hash: hex::encode(h),
        })
    }

    /// The anchor of the whole history.
    pub fn full(&self) -> Anchor {
        Anchor {
            count: self.len(),
            hash: hex::encode(self.prefix[self.len()]),
        }
    }

    /// The rolling hash of the first `count` messages, if the history is that long.
    pub fn hash_at(&self, count: usize) -> Option<&[u8; 32]> {
        self.prefix.get(count)
    }

    /// Whether this history starts with the anchored prefix. O(1).
    pub fn matches(&self, anchor: &Anchor) -> bool {
        anchor
            .decoded()
            .is_some_and(|(count, hash)| self.hash_at(count) == Some(&hash))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn history(turns: usize) -> Vec<Value> {
        (0..turns)
            .flat_map(|i| {
                [
                    json!({"role": "user", "content": format!("question {i}")}),
                    json!({"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}]}),
                ]
            })
            .collect()
    }

    #[test]
    fn a_longer_history_with_the_same_prefix_matches() {
        let old = history(3);
        let anchor = Anchor::of(&old);
        assert_eq!(anchor.count, 6);
        assert!(anchor.matches(&old));
        assert!(anchor.matches(&history(5)));
    }

    #[test]
    fn an_edited_message_in_the_prefix_does_not_match() {
        let anchor = Anchor::of(&history(3));
        let mut edited = history(4);
        edited[2] = json!({"role": "user", "content": "question 1, reworded"});
        assert!(!anchor.matches(&edited));
    }

    #[test]
    fn a_fork_that_drops_the_last_two_turns_does_not_match() {
        let anchor = Anchor::of(&history(4));
        let mut forked = history(2);
        forked.push(json!({"role": "user", "content": "a different direction"}));
        forked.push(json!({"role": "assistant", "content": "ok"}));
        forked.push(json!({"role": "user", "content": "and more"}));
        forked.push(json!({"role": "assistant", "content": "sure"}));
        assert_eq!(forked.len(), 8);
        assert!(!anchor.matches(&forked));
        // The fork still carries the earlier, shared prefix.
        assert!(Anchor::of(&history(2)).matches(&forked));
    }

    #[test]
    fn a_compacted_shorter_history_does_not_match() {
        let anchor = Anchor::of(&history(4));
        let compacted = vec![json!({"role": "user", "content": "summary of the conversation"})];
        assert!(!anchor.matches(&compacted));
        assert!(!anchor.matches(&history(3)));
    }

    #[test]
    fn block_to_string_rewrite_is_not_an_edit() {
        let mut old = history(2);
        old[0] = json!({"role": "user", "content": [
            {"type": "text", "text": "question 0", "cache_control": {"type": "ephemeral"}}
        ]});
        let anchor = Anchor::of(&old);
        assert!(anchor.matches(&history(3)));
    }

    #[test]
    fn prefix_hashes_agree_with_anchor_of_each_prefix() {
        let h = history(4);
        let hashes = PrefixHashes::new(&h);
        for n in 0..=h.len() {
            let expected = Anchor::of(&h[..n]);
            assert_eq!(hashes.anchor_at(n), Some(expected.clone()));
            assert!(hashes.matches(&expected));
        }
        assert_eq!(hashes.anchor_at(h.len() + 1), None);
    }

    #[test]
    fn a_garbled_hash_never_matches() {
        let h = history(1);
        let hashes = PrefixHashes::new(&h);
        let bad = Anchor {
            count: 1,
            hash: "not hex".into(),
        };
        assert!(!hashes.matches(&bad));
        let empty = Anchor {
            count: 0,
            hash: hex::encode([0u8; 32]),
        };
        assert!(hashes.matches(&empty));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn messages() -> impl Strategy<Value = Vec<Value>> {
            prop::collection::vec("[a-c]{0,3}", 0..12).prop_map(|texts| {
                texts
                    .into_iter()
                    .map(|t| json!({"role": "user", "content": t}))
                    .collect()
            })
        }

        proptest! {
            #[test]
            fn every_prefix_matches_and_an_edit_inside_it_does_not(
                h in messages(), cut in 0usize..12, at in 0usize..12
            ) {
                let cut = cut.min(h.len());
                let anchor = Anchor::of(&h[..cut]);
                prop_assert!(anchor.matches(&h));
                if at < cut {
                    let mut edited = h.clone();
                    edited[at] = json!({"role": "user", "content": "edited!"});
                    prop_assert!(!anchor.matches(&edited));
                }
                if cut > 0 {
                    prop_assert!(!anchor.matches(&h[..cut - 1]));
                }
            }
        }
    }
}
