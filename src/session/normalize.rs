//! Canonical form of messages, system prompts and tools, for content addresses and anchors.
//!
//! Two renderings the provider caches identically must give the same key: `cache_control`
//! is dropped everywhere, `"content": "X"` equals `[{"type":"text","text":"X"}]` (Claude Code
//! rewrites an older user message from the block form to the string form), and object keys
//! are sorted (Codex reorders `client_metadata` from one request to the next).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// A content address: sha256 of a message's canonical bytes.
pub type MessageKey = [u8; 32];

/// The canonical form of any JSON value, following the rules in the module comment.
pub fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().filter(|k| *k != "cache_control").collect();
            keys.sort();
            let mut out = Map::with_capacity(keys.len());
            for key in keys {
                let inner = &map[key.as_str()];
                let normalised = match (key.as_str(), inner) {
                    ("content", Value::String(text)) => text_blocks(text),
                    _ => canonical(inner),
                };
                out.insert(key.clone(), normalised);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

/// `"X"` as the one-text-block array it is equivalent to.
fn text_blocks(text: &str) -> Value {
    let mut block = Map::new();
    block.insert("text".into(), Value::String(text.to_owned()));
    block.insert("type".into(), Value::String("text".into()));
    Value::Array(vec![Value::Object(block)])
}

/// The canonical bytes of a value: what the content store keeps. Equal to serialising
/// [`canonical`]'s result, written directly so a long history is not copied on the way.
pub fn canonical_bytes(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut fields: Vec<(&String, &Value)> =
                map.iter().filter(|(k, _)| *k != "cache_control").collect();
            fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, inner)) in fields.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_text(key, out);
                out.push(b':');
                match (key.as_str(), inner) {
                    ("content", Value::String(text)) => {
                        out.extend_from_slice(br#"[{"text":"#);
                        write_text(text, out);
                        out.extend_from_slice(br#","type":"text"}]"#);
                    }
                    _ => write_canonical(inner, out),
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_text(text: &str, out: &mut Vec<u8>) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

fn write_scalar(value: &Value, out: &mut Vec<u8>) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// The content address of a message (or any value).
pub fn message_key(msg: &Value) -> MessageKey {
    key_of_bytes(&canonical_bytes(msg))
}

pub fn key_of_bytes(bytes: &[u8]) -> MessageKey {
    Sha256::digest(bytes).into()
}

/// [`key_of_bytes`] of text that comes back unchanged on every request (a system prompt of
/// tens of KB), remembered by a 128-bit hash of the bytes instead of hashed with SHA-256
/// again.
pub fn key_of_repeated_bytes(bytes: &[u8]) -> MessageKey {
    static SEEN: crate::memo::Memo<MessageKey> = crate::memo::Memo::new(4096);
    SEEN.get_or_insert_with(crate::memo::key(b"bytes", bytes), || key_of_bytes(bytes))
}

/// The content address of a message given as raw JSON: equal to [`message_key`] of its
/// parsed value (bytes that are not JSON get the hash of the bytes themselves). Agents
/// resend the same bytes for every old message on every request, so keys are remembered
/// by a 128-bit hash of the raw bytes and only new messages are parsed.
pub fn key_of_raw(raw: &[u8]) -> MessageKey {
    static SEEN: crate::memo::Memo<MessageKey> = crate::memo::Memo::new(65_536);
    SEEN.get_or_insert_with(
        crate::memo::key(b"message", raw),
        || match serde_json::from_slice::<Value>(raw) {
            Ok(value) => {
                let bytes = canonical_bytes(&value);
                let key = key_of_bytes(&bytes);
                keep_canonical(key, bytes);
                key
            }
            Err(_) => key_of_bytes(raw),
        },
    )
}

/// Canonical bytes of messages keyed lately (new ones: [`key_of_raw`] parsed them), for a
/// store to take as it writes them: each new message is parsed and made canonical once, to
/// be keyed, not a second time to be stored. Bounded in bytes, and what no store takes
/// within seconds is dropped; a message not found here is made canonical again.
fn recent_canonical() -> &'static moka::sync::Cache<MessageKey, std::sync::Arc<Vec<u8>>> {
    static RECENT: std::sync::OnceLock<moka::sync::Cache<MessageKey, std::sync::Arc<Vec<u8>>>> =
        std::sync::OnceLock::new();
    RECENT.get_or_init(|| {
        moka::sync::Cache::builder()
            .max_capacity(RECENT_CANONICAL_BYTES)
            .weigher(|_, bytes: &std::sync::Arc<Vec<u8>>| {
                u32::try_from(bytes.len()).unwrap_or(u32::MAX)
            })
            .time_to_live(std::time::Duration::from_secs(10))
            .build()
    })
}

/// At most this many bytes of canonical messages wait for a store; a message larger than
/// a sixteenth of it is not kept.
const RECENT_CANONICAL_BYTES: u64 = 1 << 20;

fn keep_canonical(key: MessageKey, bytes: Vec<u8>) {
    if (bytes.len() as u64) <= RECENT_CANONICAL_BYTES / 16 {
        recent_canonical().insert(key, std::sync::Arc::new(bytes));
    }
}

/// The canonical bytes of the message keyed `key`, when it was keyed lately; taken, so a
/// message is handed over once.
pub fn take_canonical(key: &MessageKey) -> Option<Vec<u8>> {
    let bytes = recent_canonical().remove(key)?;
    Some(std::sync::Arc::try_unwrap(bytes).unwrap_or_else(|shared| shared.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The remembered key is the SHA-256 key of the same bytes, on the first ask and after.
    #[test]
    fn a_remembered_key_is_the_key_of_its_bytes() {
        let texts: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"You are a coding agent.".to_vec(),
            "x".repeat(40_000).into_bytes(),
            "x".repeat(40_001).into_bytes(),
        ];
        for _ in 0..2 {
            for text in &texts {
                assert_eq!(key_of_repeated_bytes(text), key_of_bytes(text));
            }
        }
    }

    /// A Claude Code tool result as the agent sends it (escapes, non-ASCII, a marker), with
    /// a nonce so no other test keyed it first.
    fn tool_result(nonce: &str, filler: usize) -> Vec<u8> {
        format!(
            r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"toolu_01{nonce}","content":"fn main() {{\n    println!(\"é {}\");\n}}","cache_control":{{"type":"ephemeral"}}}}]}}"#,
            "x".repeat(filler)
        )
        .into_bytes()
    }

    /// A new message keyed from its raw bytes is handed to the store canonical already, once:
    /// the bytes the store takes are the canonical bytes of the parsed message. A sent blob
    /// whose raw bytes are not JSON shows where they came from (made canonical again, it
    /// would store nothing).
    #[test]
    fn a_new_message_is_stored_as_it_was_keyed_without_a_second_parse() {
        use crate::session::store::Blob;
        let raw = tool_result("kept", 10);
        let expected = canonical_bytes(&serde_json::from_slice(&raw).unwrap());
        let key = key_of_raw(&raw);
        let blob = Blob::sent(key, bytes::Bytes::from_static(b"not json"));
        assert_eq!(blob.stored_bytes().as_deref(), Some(&expected[..]));
        // Taken: a second write of the same blob makes its bytes canonical itself.
        assert_eq!(blob.stored_bytes(), None);
        let blob = Blob::sent(key, bytes::Bytes::from(raw));
        assert_eq!(blob.stored_bytes().as_deref(), Some(&expected[..]));
    }

    /// Memory stays bounded: a message larger than a sixteenth of the budget is not kept.
    #[test]
    fn a_large_new_message_is_not_kept_for_the_store() {
        let raw = tool_result("large", (RECENT_CANONICAL_BYTES / 16) as usize);
        let key = key_of_raw(&raw);
        assert_eq!(take_canonical(&key), None);
        let small = tool_result("small", 10);
        let key = key_of_raw(&small);
        assert!(take_canonical(&key).is_some());
    }

    #[test]
    fn string_content_equals_single_text_block() {
        let a = json!({"role": "user", "content": "hello"});
        let b = json!({"role": "user", "content": [{"type": "text", "text": "hello"}]});
        assert_eq!(message_key(&a), message_key(&b));
    }

    #[test]
    fn cache_control_is_ignored_at_any_depth() {
        let a = json!({"role": "user", "content": [{"type": "text", "text": "hi"}]});
        let b = json!({"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
        ]});
        assert_eq!(message_key(&a), message_key(&b));
    }

    #[test]
    fn key_order_is_ignored() {
        let a: Value = serde_json::from_str(r#"{"role":"user","content":"x"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"content":"x","role":"user"}"#).unwrap();
        assert_eq!(message_key(&a), message_key(&b));
    }

    #[test]
    fn canonical_bytes_equal_the_serialised_canonical_value() {
        let samples = [
            json!({"role": "user", "content": "a \"quoted\" line\n", "z": 1.5, "a": [null, true]}),
            json!({"type": "tool_result", "content": [{"text": "é", "type": "text",
                "cache_control": {"type": "ephemeral"}}], "is_error": false}),
            json!([{"b": {"d": 1, "c": "content"}, "a": -3}]),
            json!("plain"),
        ];
        for sample in samples {
            let expected = serde_json::to_vec(&canonical(&sample)).unwrap();
            assert_eq!(canonical_bytes(&sample), expected, "{sample}");
        }
    }

    #[test]
    fn different_text_gives_different_key() {
        let a = json!({"role": "user", "content": "hello"});
        let b = json!({"role": "user", "content": "hello!"});
        assert_ne!(message_key(&a), message_key(&b));
        let c = json!({"role": "assistant", "content": "hello"});
        assert_ne!(message_key(&a), message_key(&c));
    }

    #[test]
    fn raw_keys_equal_value_keys_whatever_the_formatting() {
        let a = br#"{"role":"user","content":"hi"}"#;
        let b = br#" { "content" : [ {"type":"text","text":"hi","cache_control":{"type":"ephemeral"}} ], "role":"user" } "#;
        let v: Value = serde_json::from_slice(a).unwrap();
        assert_eq!(key_of_raw(a), message_key(&v));
        assert_eq!(key_of_raw(b), key_of_raw(a));
        assert_ne!(key_of_raw(b"not json"), key_of_raw(a));
    }

    #[test]
    fn tool_result_string_content_is_normalised_too() {
        let a = json!({"type": "tool_result", "tool_use_id": "t1", "content": "ok"});
        let b = json!({"type": "tool_result", "tool_use_id": "t1",
            "content": [{"type": "text", "text": "ok"}]});
        assert_eq!(message_key(&a), message_key(&b));
    }
}
