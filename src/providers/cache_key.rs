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

/// The keys dropped everywhere: markers do not change what the provider caches, nor does
/// a Gemini part's `thoughtSignature` (see [`super::gemini::THOUGHT_SIGNATURE`]).
fn is_dropped(key: &str) -> bool {
    key == "cache_control" || key == super::gemini::THOUGHT_SIGNATURE
}

/// The key whose string value stands for one text block.
const TEXT_CONTENT: &str = "content";

/// A `content` string, its JSON written by `write_string`, as the one-text-block array it
/// is equivalent to.
fn write_text_blocks<O: Out>(out: &mut O, write_string: impl FnOnce(&mut O)) {
    out.extend_from_slice(br#"[{"text":"#);
    write_string(out);
    out.extend_from_slice(br#","type":"text"}]"#);
}

/// The canonical form of any JSON value, following the rules in the module comment.
pub fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().filter(|k| !is_dropped(k)).collect();
            keys.sort();
            let mut out = Map::with_capacity(keys.len());
            for key in keys {
                let inner = &map[key.as_str()];
                let normalised = match inner {
                    Value::String(text) if key == TEXT_CONTENT => text_blocks(text),
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
                map.iter().filter(|(k, _)| !is_dropped(k)).collect();
            fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (key, inner)) in fields.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_text(key, out);
                out.push(b':');
                match inner {
                    Value::String(text) if *key == TEXT_CONTENT => {
                        write_text_blocks(out, |out| write_text(text, out));
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

fn write_scalar<O: Out>(value: &Value, out: &mut O) {
    let mut bytes = Vec::new();
    let _ = serde_json::to_writer(&mut bytes, value);
    out.extend_from_slice(&bytes);
}

/// A short text (an object's key) written as serde_json writes a string.
fn write_key<O: Out>(text: &str, out: &mut O) {
    let mut bytes = Vec::with_capacity(text.len() + 2);
    write_text(text, &mut bytes);
    out.extend_from_slice(&bytes);
}

/// Where the raw copy writes the canonical form: a buffer, or anything that takes it piece
/// by piece (a hash, a count, a row written in place).
pub trait Out {
    fn extend_from_slice(&mut self, bytes: &[u8]);

    fn push(&mut self, byte: u8) {
        self.extend_from_slice(&[byte]);
    }
}

impl Out for Vec<u8> {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        Vec::extend_from_slice(self, bytes);
    }

    fn push(&mut self, byte: u8) {
        Vec::push(self, byte);
    }
}

/// Counts what it is given.
struct Count(usize);

impl Out for Count {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// The length of [`canonical_bytes_of_raw`] without making it, when the raw copy can make
/// it (`None` where it must be parsed instead).
pub fn canonical_len_of_raw(raw: &[u8]) -> Option<usize> {
    let mut count = Count(0);
    write_canonical_of_raw(raw, &mut count)?;
    Some(count.0)
}

/// [`canonical_bytes_of_raw`] written into `out` piece by piece, when the raw copy can
/// make it; `None` (with part of it written) where it must be parsed instead.
pub fn write_canonical_of_raw<O: Out>(raw: &[u8], out: &mut O) -> Option<()> {
    let mut reader = RawReader { raw, at: 0 };
    reader.value(out, 0)?;
    reader.skip_space();
    (reader.at == raw.len()).then_some(())
}

/// The canonical bytes of a value given as raw JSON: equal to [`canonical_bytes`] of the
/// parsed value, and `None` where parsing it fails.
pub fn canonical_bytes_of_raw(raw: &[u8]) -> Option<Vec<u8>> {
    copy_canonical(raw).or_else(|| {
        let value: Value = serde_json::from_slice(raw).ok()?;
        Some(canonical_bytes(&value))
    })
}

/// What [`canonical_bytes`] writes for the value of `field` in the JSON object `raw`
/// (the last one given, as in a `Value`; `null` when there is none), the `content` rule
/// included, copied from the raw bytes into `out` rather than parsed: a first prompt can be
/// a pasted file of megabytes. `None` (with part of it written) where the copy cannot be
/// made (an escaped key, an escape serde_json spells otherwise, bytes that are not JSON):
/// the caller parses.
pub fn canonical_field_of_raw<O: Out>(raw: &[u8], field: &str, out: &mut O) -> Option<()> {
    use crate::json::scan;
    let entries = scan::entries(raw, scan::skip_ws(raw, 0)).ok()?;
    if entries.iter().any(|e| raw[e.key.clone()].contains(&b'\\')) {
        return None;
    }
    let Some(span) = entries
        .iter()
        .rev()
        .find(|e| scan::key_is(raw, &e.key, field))
        .map(|e| e.value.clone())
    else {
        out.extend_from_slice(b"null");
        return Some(());
    };
    RawReader::field_value(raw, field, span, out, 1)
}

/// [`canonical_bytes_of_raw`] by copying: agents' messages are mostly long strings that
/// serde_json would unescape into a `String` and escape again to the same bytes. A string
/// written as serde_json writes strings (escapes only where it escapes, as it spells them)
/// is copied as it is. `None` for anything else (another escape, an escaped key, a body
/// nested deeper than [`COPY_DEPTH`], or bytes that are not JSON): the caller parses.
fn copy_canonical(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len() + 32);
    write_canonical_of_raw(raw, &mut out)?;
    Some(out)
}

/// Nesting deeper than this is left to serde_json (whose own limit is 128).
const COPY_DEPTH: usize = 64;

struct RawReader<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> RawReader<'a> {
    fn skip_space(&mut self) {
        self.at = crate::json::lex::skip_ws(self.raw, self.at);
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_space();
        (self.raw.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    fn value<O: Out>(&mut self, out: &mut O, depth: usize) -> Option<()> {
        if depth > COPY_DEPTH {
            return None;
        }
        self.skip_space();
        match *self.raw.get(self.at)? {
            b'"' => {
                let string = self.string()?;
                out.extend_from_slice(string);
                Some(())
            }
            b'{' => self.object(out, depth),
            b'[' => {
                self.at += 1;
                out.push(b'[');
                self.skip_space();
                if self.raw.get(self.at) == Some(&b']') {
                    self.at += 1;
                } else {
                    loop {
                        self.value(out, depth + 1)?;
                        self.skip_space();
                        match *self.raw.get(self.at)? {
                            b',' => out.push(b','),
                            b']' => break,
                            _ => return None,
                        }
                        self.at += 1;
                    }
                    self.at += 1;
                }
                out.push(b']');
                Some(())
            }
            _ => {
                // A literal or a number: written as a `Value` writes it (`1e2` is `100.0`).
                let start = self.at;
                while let Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z') =
                    self.raw.get(self.at)
                {
                    self.at += 1;
                }
                let token = &self.raw[start..self.at];
                match token {
                    b"true" | b"false" | b"null" => out.extend_from_slice(token),
                    _ => {
                        let number: Value = serde_json::from_slice(token).ok()?;
                        number.is_number().then_some(())?;
                        write_scalar(&number, out);
                    }
                }
                Some(())
            }
        }
    }

    /// A string at the cursor, quotes included, when serde_json would write it back as it
    /// is: valid UTF-8, no raw control character, and only the escapes serde_json writes
    /// (`\"`, `\\`, `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` in lower case for the other
    /// control characters).
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        let mut at = start + 1;
        loop {
            // The body check's scan to the next quote, backslash, control or non-ASCII byte.
            at = crate::json::lex::find_special(self.raw, at);
            match *self.raw.get(at)? {
                b'"' => break,
                b'\\' => match *self.raw.get(at + 1)? {
                    b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => at += 2,
                    b'u' => {
                        let code = control_escape(self.raw.get(at + 2..at + 6)?)?;
                        // Only what has no short form of its own.
                        if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                            return None;
                        }
                        at += 6;
                    }
                    _ => return None,
                },
                0..0x20 => return None,
                _ => at += 1,
            }
        }
        let string = &self.raw[start..=at];
        std::str::from_utf8(string).ok()?;
        self.at = at + 1;
        Some(string)
    }

    /// The value at `span` of `raw` as it is written under `key` (a `content` string as
    /// its one text block), read from where a skip found it and no further.
    fn field_value<O: Out>(
        raw: &'a [u8],
        key: &str,
        span: std::ops::Range<usize>,
        out: &mut O,
        depth: usize,
    ) -> Option<()> {
        let mut value = RawReader {
            raw: &raw[..span.end],
            at: span.start,
        };
        let read = if key == TEXT_CONTENT && raw[span.start] == b'"' {
            let mut read = None;
            write_text_blocks(out, |out| read = value.value(out, depth));
            read
        } else {
            value.value(out, depth)
        };
        read?;
        (value.at == span.end).then_some(())
    }

    fn object<O: Out>(&mut self, out: &mut O, depth: usize) -> Option<()> {
        self.at += 1;
        // Each field's key (its text, unescaped since it holds no escape) and where its value
        // lies in `raw`. The values are written straight into `out` in key order, so each
        // byte is copied once: a buffer per object copied a 30 MB string once per level it
        // sits in, every buffer grown by doubling.
        let mut fields: Vec<(&'a str, std::ops::Range<usize>)> = Vec::new();
        self.skip_space();
        if self.raw.get(self.at) == Some(&b'}') {
            self.at += 1;
        } else {
            loop {
                self.skip_space();
                if self.raw.get(self.at) != Some(&b'"') {
                    return None;
                }
                let key = self.string()?;
                let key = std::str::from_utf8(&key[1..key.len() - 1]).ok()?;
                if key.contains('\\') {
                    return None;
                }
                self.eat(b':')?;
                self.skip_space();
                let start = self.at;
                self.at = crate::json::scan::value_end(self.raw, start).ok()?;
                if !is_dropped(key) {
                    fields.push((key, start..self.at));
                }
                self.skip_space();
                match *self.raw.get(self.at)? {
                    b',' => self.at += 1,
                    b'}' => {
                        self.at += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        // Sorted by key (a stable sort); of a key given twice the last value counts, as in
        // a `Value`.
        fields.sort_by(|a, b| a.0.cmp(b.0));
        out.push(b'{');
        let mut first = true;
        for (i, (key, span)) in fields.iter().enumerate() {
            if fields.get(i + 1).is_some_and(|next| next.0 == *key) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            write_key(key, out);
            out.push(b':');
            RawReader::field_value(self.raw, key, span.clone(), out, depth + 1)?;
        }
        out.push(b'}');
        Some(())
    }
}

/// The character of a `\u` escape's four hex digits, when it is a control character
/// written as serde_json writes one (`00`, then two lower-case hex digits).
fn control_escape(hex: &[u8]) -> Option<u8> {
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    let code = match hex {
        [b'0', b'0', high, low] => digit(*high)? * 16 + digit(*low)?,
        _ => return None,
    };
    (code < 0x20).then_some(code)
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
/// by a 128-bit hash of the raw bytes and only new messages are made canonical.
pub fn key_of_raw(raw: &[u8]) -> MessageKey {
    key_of_raw_among(raw, 1)
}

/// [`key_of_raw`] of one of `among` messages keyed together (a body's history).
pub fn key_of_raw_among(raw: &[u8], among: usize) -> MessageKey {
    key_of_raw_keeping(raw, among, &mut Fresh::default())
}

/// [`key_of_raw_among`], keeping in `fresh` the canonical bytes of a message keyed for the
/// first time, for the store to write as they are.
pub fn key_of_raw_keeping(raw: &[u8], among: usize, fresh: &mut Fresh) -> MessageKey {
    static SEEN: crate::memo::Memo<MessageKey> = crate::memo::Memo::new(65_536);
    let key = || crate::memo::key(b"message", raw);
    SEEN.get_or_insert_among(among, key, || {
        if raw.len() > KEPT_CANONICAL {
            // Too large to be kept for the store: hashed as it is made, never held whole.
            let mut hasher = Sha256::new();
            if write_canonical_of_raw(raw, &mut hasher).is_some() {
                return hasher.finalize().into();
            }
        }
        match canonical_bytes_of_raw(raw) {
            Some(bytes) => {
                let key = key_of_bytes(&bytes);
                fresh.keep(key, bytes);
                key
            }
            None => key_of_bytes(raw),
        }
    })
}

impl Out for Sha256 {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.update(bytes);
    }
}

/// At most this many bytes of canonical messages are kept per request (a first request of
/// a long history keys every message); the rest are made canonical again as they are
/// written, rather than held beside the body until the record.
const KEPT_CANONICAL_BYTES: usize = 1 << 20;

/// The largest canonical message kept for the store.
const KEPT_CANONICAL: usize = KEPT_CANONICAL_BYTES / 16;

/// The canonical bytes of the messages a request keyed for the first time: each new
/// message is parsed and made canonical once, to be keyed, and written by the store as it
/// was made, carried with the request's history hashes to its record.
#[derive(Debug, Clone, Default)]
pub struct Fresh {
    kept: std::collections::HashMap<MessageKey, std::sync::Arc<[u8]>>,
    bytes: usize,
}

impl Fresh {
    fn keep(&mut self, key: MessageKey, bytes: Vec<u8>) {
        if bytes.len() <= KEPT_CANONICAL && self.bytes + bytes.len() <= KEPT_CANONICAL_BYTES {
            self.bytes += bytes.len();
            self.kept.insert(key, bytes.into());
        }
    }

    /// The canonical bytes of the message keyed `key`, when it was keyed here.
    pub fn get(&self, key: &MessageKey) -> Option<&std::sync::Arc<[u8]>> {
        self.kept.get(key)
    }
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

    /// A new message keyed from its raw bytes comes with its canonical bytes, kept with the
    /// request that keyed it: they are the canonical bytes of the parsed message, and a
    /// message keyed before (remembered) brings none, so no other request's bytes are held.
    #[test]
    fn a_new_message_is_kept_as_it_was_keyed_without_a_second_parse() {
        let raw = tool_result("kept", 10);
        let expected = canonical_bytes(&serde_json::from_slice(&raw).unwrap());
        let mut fresh = Fresh::default();
        let key = key_of_raw_keeping(&raw, 1, &mut fresh);
        assert_eq!(fresh.get(&key).map(|b| b.to_vec()), Some(expected));
        let mut again = Fresh::default();
        assert_eq!(key_of_raw_keeping(&raw, 1, &mut again), key);
        assert!(again.get(&key).is_none());
    }

    /// The messages agents send are copied, not parsed: a Claude Code tool result as it
    /// sends it (escapes, non-ASCII, a marker) takes the copy.
    #[test]
    fn an_agents_message_is_made_canonical_by_copying() {
        let raw = tool_result("copied", 100);
        let value: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(copy_canonical(&raw), Some(canonical_bytes(&value)));
    }

    /// Memory stays bounded: a message larger than the limit is not kept beside the body.
    #[test]
    fn a_large_new_message_is_not_kept_for_the_store() {
        let mut fresh = Fresh::default();
        let raw = tool_result("large", KEPT_CANONICAL);
        let key = key_of_raw_keeping(&raw, 1, &mut fresh);
        assert!(fresh.get(&key).is_none());
        let small = tool_result("small", 10);
        let key = key_of_raw_keeping(&small, 1, &mut fresh);
        assert!(fresh.get(&key).is_some());
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

    /// A message of megabytes is keyed without its canonical form held whole: it is hashed
    /// as it is made, and the key is that of the canonical bytes.
    #[test]
    fn a_huge_message_is_keyed_as_it_is_made_canonical() {
        let text = "let x = \"quoted\";\n".repeat(150_000);
        let message = json!({"role": "user", "content": [{"type": "text", "text": text}]});
        let raw = serde_json::to_vec(&message).unwrap();
        let (key, peak) = crate::alloc_meter::peak_during(|| key_of_raw(&raw));
        assert_eq!(key, key_of_bytes(&canonical_bytes(&message)));
        assert!(
            peak < raw.len() / 4,
            "{peak} bytes held to key {}",
            raw.len()
        );
    }

    /// A message of megabytes (a pasted file) is made canonical into one buffer, each byte
    /// copied once, whatever depth its text sits at: no buffer per level, none grown.
    #[test]
    fn a_huge_message_is_made_canonical_in_one_copy() {
        let text = "fn main() { println!(\"hi\"); }\n".repeat(100_000);
        for message in [
            json!({"role": "user", "content": text}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}]}),
        ] {
            let raw = serde_json::to_vec(&message).unwrap();
            let (bytes, peak) =
                crate::alloc_meter::peak_during(|| canonical_bytes_of_raw(&raw).unwrap());
            assert_eq!(bytes, canonical_bytes(&message));
            assert!(
                peak < raw.len() + raw.len() / 8,
                "{peak} bytes held at once for a message of {}",
                raw.len()
            );
        }
    }

    /// Written from the raw bytes, the canonical form is the one of the parsed value: key
    /// order, a key given twice (the last counts), escapes in keys and strings, numbers as
    /// a `Value` writes them, markers at any depth; and what is not JSON is refused.
    #[test]
    fn canonical_bytes_of_raw_json_equal_those_of_its_value() {
        let samples: [&[u8]; 17] = [
            // Escapes serde_json does not write, each alone (one would hide the next).
            br#""\/x""#,
            br#""\u00e9""#,
            br#""\u001F""#,
            br#""\u0009""#,
            br#""\u000a""#,
            br#"{"a":"\u001f","b":"\u0007\u001b"}"#,
            br#"{"x":[ 1 , {"y" : [ ] } ,"z" ] , "content" : "a\tb" }"#,
            br#"{"role":"user","content":"hi"}"#,
            br#" { "content" : [ {"type":"text","text":"a\nb \"q\" \u00e9 \ud83d\ude00","cache_control":{"type":"ephemeral"}} ], "role":"user" } "#,
            br#"{"b":1,"a":2,"b":3,"\u0063ontent":"escaped key"}"#,
            br#"{"n":[1E2,-0,-0.0,1.50,12345678901234567890,123456789012345678901234,-9223372036854775808,2.5e-7]}"#,
            br#"{"type":"tool_use","id":"toolu_1","input":{"z":null,"y":true,"x":false,"content":{"k":"v"}}}"#,
            br#"[{"content":"x","cache_control":{"type":"ephemeral"}},"content",[]]"#,
            br#""plain""#,
            br#"{}"#,
            br#"{"content":"a","content":["b"]}"#,
            br#"{"content":["a"],"content":"b"}"#,
        ];
        for raw in samples {
            let value: Value = serde_json::from_slice(raw).unwrap();
            assert_eq!(
                canonical_bytes_of_raw(raw),
                Some(canonical_bytes(&value)),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
        let bad: [&[u8]; 9] = [
            b"not json",
            br#"{"a":1"#,
            br#"{"a":1} x"#,
            br#""\ud800""#,
            b"",
            b"\"a\x01b\"",
            b"\"\xff\"",
            br#"{"a":1,}"#,
            br#"[1 2]"#,
        ];
        for raw in bad {
            assert_eq!(
                canonical_bytes_of_raw(raw).is_some(),
                serde_json::from_slice::<Value>(raw).is_ok(),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        /// JSON values with the keys the canonical form treats apart.
        fn json() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                any::<u64>().prop_map(Value::from),
                any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(Value::from),
                "\\PC{0,12}".prop_map(Value::from),
                "[a\"\\\\\n\u{7f}\u{e9}\u{1F600}]{0,6}".prop_map(Value::from),
            ];
            leaf.prop_recursive(4, 48, 6, |inner| {
                let key = prop_oneof![
                    Just("content".to_string()),
                    Just("cache_control".to_string()),
                    Just("type".to_string()),
                    "[a-z\"\u{e9}]{0,4}",
                ];
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    prop::collection::vec((key, inner), 0..5)
                        .prop_map(|fields| Value::Object(fields.into_iter().collect())),
                ]
            })
        }

        /// Whether an object key anywhere in `value` is written with an escape.
        fn has_escaped_key(value: &Value) -> bool {
            match value {
                Value::Object(map) => map.iter().any(|(key, inner)| {
                    key.chars().any(|c| c == '"' || c == '\\' || c < ' ') || has_escaped_key(inner)
                }),
                Value::Array(items) => items.iter().any(has_escaped_key),
                _ => false,
            }
        }

        proptest! {
            #[test]
            fn raw_and_parsed_give_the_same_canonical_bytes(value in json(), pretty in any::<bool>()) {
                let raw = if pretty {
                    serde_json::to_vec_pretty(&value).unwrap()
                } else {
                    serde_json::to_vec(&value).unwrap()
                };
                let parsed: Value = serde_json::from_slice(&raw).unwrap();
                let expected = canonical_bytes(&parsed);
                // serde_json escapes as it writes, so only an escaped key sends it back.
                if let Some(copied) = copy_canonical(&raw) {
                    prop_assert_eq!(&copied, &expected);
                } else {
                    prop_assert!(has_escaped_key(&parsed), "{}", String::from_utf8_lossy(&raw));
                }
                prop_assert_eq!(canonical_bytes_of_raw(&raw), Some(expected));
            }
        }
    }

    #[test]
    fn tool_result_string_content_is_normalised_too() {
        let a = json!({"type": "tool_result", "tool_use_id": "t1", "content": "ok"});
        let b = json!({"type": "tool_result", "tool_use_id": "t1",
            "content": [{"type": "text", "text": "ok"}]});
        assert_eq!(message_key(&a), message_key(&b));
    }
}
