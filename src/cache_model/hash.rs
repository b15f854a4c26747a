//! Cumulative prefix hashes: each block's key covers every block before it.

use sha2::{Digest, Sha256};

/// A prefix key (the first 16 bytes of a SHA-256).
pub type PrefixHash = u128;

/// A running hash over a sequence of parts. `push` returns the key of the prefix so far.
#[derive(Debug, Clone)]
pub struct Chain {
    state: PrefixHash,
}

impl Chain {
    pub fn new(seed: &[&str]) -> Self {
        let mut chain = Chain { state: 0 };
        chain.push(seed);
        chain
    }

    /// Mix `parts` into the chain. Parts are length-prefixed so `["ab","c"]` and
    /// `["a","bc"]` differ.
    pub fn push(&mut self, parts: &[&str]) -> PrefixHash {
        let mut h = Sha256::new();
        h.update(self.state.to_le_bytes());
        for part in parts {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let digest = h.finalize();
        let mut first = [0u8; 16];
        first.copy_from_slice(&digest[..16]);
        self.state = PrefixHash::from_le_bytes(first);
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_and_length_prefixed() {
        let mut a = Chain::new(&["m"]);
        let mut b = Chain::new(&["m"]);
        assert_eq!(a.push(&["x"]), b.push(&["x"]));
        assert_ne!(a.push(&["ab", "c"]), b.push(&["a", "bc"]));
        let mut c = Chain::new(&["other"]);
        assert_ne!(c.push(&["x"]), Chain::new(&["m"]).push(&["x"]));
    }
}
