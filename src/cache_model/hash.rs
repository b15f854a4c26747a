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
        self.finish(h)
    }

    /// Mix raw bytes (length-prefixed, like one part) into the chain.
    pub fn push_bytes(&mut self, bytes: &[u8]) -> PrefixHash {
        let mut h = Sha256::new();
        h.update(self.state.to_le_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
        self.finish(h)
    }

    fn finish(&mut self, h: Sha256) -> PrefixHash {
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

/// Compact JSON with object keys sorted, so that field order (which the provider's prompt
/// rendering ignores) does not change a key. The value of an `input` field (tool_use
/// arguments) keeps its order: there the order is part of the prompt text.
pub fn canonical_json(value: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(key.as_str()).to_string());
                out.push(':');
                match (key.as_str(), &map[key]) {
                    ("input", v) => out.push_str(&v.to_string()),
                    (_, v) => write_canonical(v, out),
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod canonical_tests {
    use serde_json::json;

    #[test]
    fn keys_sorted_except_tool_input() {
        let a = json!({"type": "text", "text": "x"});
        let b = json!({"text": "x", "type": "text"});
        assert_eq!(super::canonical_json(&a), super::canonical_json(&b));
        let u1 = json!({"type": "tool_use", "input": {"b": 1, "a": 2}});
        let u2 = json!({"type": "tool_use", "input": {"a": 2, "b": 1}});
        assert_ne!(super::canonical_json(&u1), super::canonical_json(&u2));
        assert_eq!(
            super::canonical_json(&u1),
            r#"{"input":{"b":1,"a":2},"type":"tool_use"}"#
        );
    }
}
