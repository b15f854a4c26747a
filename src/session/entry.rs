//! The session log's entries: append-only, versioned JSON.
//!
//! Every entry carries `"version": 1` so a stored session survives upgrades; an entry a
//! later cachet wrote and this one cannot read decodes as [`Entry::Unknown`] and is kept in
//! place (positions in the log matter to the caches that read it).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::anchor::{Anchor, PrefixHashes};
use super::MessageKey;
use crate::envelope::Ttl;
use crate::measure::{Diagnosis, Mark, MarkTtl};
use crate::patch::ops::Op;
use crate::usage::Usage;

/// The entry format this build writes.
pub const ENTRY_VERSION: u32 = 1;

fn current_version() -> u32 {
    ENTRY_VERSION
}

// Both real variants are a few hundred bytes and live in one `Vec`; boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    ContextTransform(ContextTransform),
    Request(RequestRecord),
    /// An entry this build cannot read; never written.
    #[serde(other)]
    Unknown,
}

impl Entry {
    /// The entry with its request index set (a request record; any other entry as it is).
    pub fn with_request_index(mut self, index: u64) -> Entry {
        if let Entry::Request(record) = &mut self {
            record.request_index = index;
        }
        self
    }

    /// Decode one stored entry; unreadable ones become [`Entry::Unknown`].
    pub fn decode(text: &str) -> Entry {
        serde_json::from_str(text).unwrap_or(Entry::Unknown)
    }

    /// About how long this entry's JSON is, at least: its keys' part, and room for the
    /// rest. Buffers are sized by it.
    pub fn size_hint(&self) -> usize {
        let keys = match self {
            Entry::Request(r) => r.sent.keys.len() + r.tail.len(),
            _ => 0,
        };
        1024 + keys * (2 * std::mem::size_of::<MessageKey>() + 3)
    }

    pub fn encode(&self) -> String {
        // Sized for its keys first: a record of a history of 100,000 messages is 6 MB of
        // hex, and a buffer grown by doubling would hold up to half as much again.
        let mut out = Vec::with_capacity(self.size_hint());
        // An `Entry` holds only JSON-representable data, so this cannot fail.
        let _ = serde_json::to_writer(&mut out, self);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The length of [`Entry::encode`]'s text, counted without holding it.
    pub fn encoded_len(&self) -> usize {
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0 += bytes.len();
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut count = Count(0);
        let _ = serde_json::to_writer(&mut count, self);
        count.0
    }

    /// [`Entry::encode`]'s text, written to `out` as it is made.
    pub fn encode_to(&self, out: impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(out, self).map_err(std::io::Error::other)
    }
}

/// The reason of a patch that records what the session's cached prefix holds (a
/// `move_lines` with `when = "changed"`): read by that transform, never replayed as a patch.
pub const HOLD_REASON: &str = "hold";

/// The reasons whose patches are persisted; `ephemeral` patches never are.
pub const PERSISTED_REASONS: &[&str] = &["before_request", "turn_end", HOLD_REASON];

pub fn is_persisted_reason(reason: &str) -> bool {
    PERSISTED_REASONS.contains(&reason)
}

/// A persisted patch, replayed on later requests whose history matches its anchor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextTransform {
    #[serde(default = "current_version")]
    pub version: u32,
    /// Unix time in milliseconds.
    pub time: u64,
    pub transformer: String,
    /// `before_request`, `turn_end` or `hold` ([`HOLD_REASON`]).
    pub reason: String,
    /// The client history the patch was made against.
    pub anchor: Anchor,
    pub patch: Vec<Op>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<Value>,
    /// The request during which the patch was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_index: Option<u64>,
}

/// One forwarded request, in compact form: messages by content address.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RequestRecord {
    #[serde(default = "current_version")]
    pub version: u32,
    /// Unix time in milliseconds.
    pub time: u64,
    /// When the request went upstream, on the clock of `time`: requests sent side by side
    /// are written in the order their answers ended, not the order they were sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_ms: Option<u64>,
    pub request_index: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_index: Option<u64>,
    pub model: String,
    pub provider: String,
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The history sent upstream before the request-only tail: what the cache may hold.
    pub sent: SentMessages,
    /// Content addresses of the request-only tail's messages (hex in the log).
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_keys")]
    pub tail: Vec<MessageKey>,
    /// Content address (hex) of the system prompt's parts as sent, if any (a blob holding
    /// each part's name and address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_key: Option<String>,
    /// Content address (hex) of the tool definitions sent, if any (a blob holding each
    /// tool's name and address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_key: Option<String>,
    /// Cache markers of the prefix, by block.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<Mark>,
    /// The lane within the session: requests of one tools-and-system shape and one
    /// conversation (Claude Code's title and subagent requests get lanes of their own).
    #[serde(default)]
    pub lane: u32,
    /// The client's own history (before any patch), as lanes compare it.
    #[serde(default)]
    pub conversation: Conversation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Upstream HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// How the answer ended when it did not end whole (`client_gone` for an interrupt,
    /// `upstream_cut`, `upstream_error`, `idle_timeout`); absent for a complete answer.
    /// Its usage is what was counted before the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Why the request read less from the cache than it could have, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnosis: Option<Diagnosis>,
    /// The provider's own cache-miss reason, when asked for (Anthropic's cache
    /// diagnostics), as it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_diagnosis: Option<Value>,
    /// Every patch of this request: persisted, ephemeral, replayed, refused and stale.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<PatchEvent>,
    /// Experiment variant, when the request took part in one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The response's id (Anthropic `msg_…`), for the provider's cache diagnostics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// The Conversations API conversation the request named (`conversation`): the provider
    /// holds its earlier turns. The conversation's next request goes on this one's lane and
    /// counts its turns on from this one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// With `ttl = "auto"`: the lifetime chosen for the request's markers, the chance of a
    /// reuse after more than 5 minutes and the expected saving of the choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_decision: Option<TtlDecision>,
    /// A warmup (a Responses `generate: false`): it prepares the next turn and is none. It
    /// heads no lane, nothing is compared with it, and it is not diagnosed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
}

impl RequestRecord {
    /// Whether later requests go on from this one: a lane's head, what a diagnosis compares
    /// with, what a history continues. A warmup is not.
    pub fn in_conversation(&self) -> bool {
        !self.warmup
    }
}

/// What happened to one handler's patch during a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchOutcome {
    /// Applied and stored in the session, replayed on later requests.
    Persisted,
    /// Applied to this request only.
    Ephemeral,
    /// A stored patch applied again, at its anchor.
    Replayed,
    /// Dropped whole: invalid, or a cached-scope op without an invalidate reason.
    Refused,
    /// A stored patch whose anchor no longer matches the history.
    Stale,
}

impl PatchOutcome {
    pub fn label(self) -> &'static str {
        match self {
            PatchOutcome::Persisted => "persisted",
            PatchOutcome::Ephemeral => "ephemeral",
            PatchOutcome::Replayed => "replayed",
            PatchOutcome::Refused => "refused",
            PatchOutcome::Stale => "stale",
        }
    }
}

/// One handler's patch in the request log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PatchEvent {
    pub transformer: String,
    /// The hook point: `before_request`, `ephemeral`, `turn_end`, or `replay`.
    pub reason: String,
    pub outcome: PatchOutcome,
    /// The op names, in order.
    pub ops: Vec<String>,
    /// The invalidate-cache reasons given, in op order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub invalidate: Vec<String>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The system parts its ops set or remove, by name (what a break's blame is matched
    /// with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<String>,
    /// How many patches the event stands for. A request replays every patch its session
    /// persisted (one per turn for pinned memory): those are one event per transformer,
    /// with their count and distinct op names, so an entry does not grow with the
    /// session's age.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl PatchEvent {
    pub fn new(transformer: &str, reason: &str, outcome: PatchOutcome, ops: &[Op]) -> Self {
        PatchEvent {
            transformer: transformer.to_owned(),
            reason: reason.to_owned(),
            outcome,
            ops: ops.iter().map(|op| op.name().to_owned()).collect(),
            invalidate: ops
                .iter()
                .filter_map(|op| op.invalidate_cache_reason().map(str::to_owned))
                .collect(),
            error: None,
            parts: ops.iter().flat_map(Op::system_parts).collect(),
            count: 1,
        }
    }

    /// This event as the break's blame reads it: made for the previous request of the
    /// lane (`previous`) or this one. `None` for a patch that was not applied.
    pub fn patched(&self, previous: bool) -> Option<crate::measure::blame::Patched<'_>> {
        let applied = !matches!(self.outcome, PatchOutcome::Refused | PatchOutcome::Stale);
        applied.then_some(crate::measure::blame::Patched {
            transformer: &self.transformer,
            ops: &self.ops,
            parts: &self.parts,
            previous,
        })
    }

    /// Add `event` to a request's `events`. Replays (applied, stale or refused again) of
    /// one transformer with one outcome are folded into one event with their count and
    /// distinct ops: a session replays every patch it ever persisted on every request, so
    /// listing each would make entries grow with the session's age.
    pub fn push_folded(events: &mut Vec<PatchEvent>, event: PatchEvent) {
        let same = |e: &&mut PatchEvent| {
            event.reason == "replay"
                && e.reason == event.reason
                && e.outcome == event.outcome
                && e.transformer == event.transformer
                && e.error == event.error
        };
        let Some(earlier) = events.iter_mut().find(same) else {
            events.push(event);
            return;
        };
        earlier.count = earlier.count.saturating_add(event.count);
        for op in event.ops {
            if !earlier.ops.contains(&op) {
                earlier.ops.push(op);
            }
        }
        for reason in event.invalidate {
            if !earlier.invalidate.contains(&reason) {
                earlier.invalidate.push(reason);
            }
        }
        for part in event.parts {
            if !earlier.parts.contains(&part) {
                earlier.parts.push(part);
            }
        }
    }
}

/// The messages of a request as a delta on an earlier request of the same session, so the
/// log grows with new messages only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SentMessages {
    /// Number of messages sent.
    pub count: usize,
    /// Rolling hash of all of them (an [`Anchor`] over what was sent).
    pub hash: String,
    /// The earlier request whose sent messages are the first `base` of these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<u64>,
    #[serde(default)]
    pub base: usize,
    /// Content addresses of messages `base..count` (hex in the log).
    #[serde(with = "hex_keys")]
    pub keys: Vec<MessageKey>,
}

impl SentMessages {
    pub fn anchor(&self) -> Anchor {
        Anchor {
            count: self.count,
            hash: self.hash.clone(),
        }
    }
}

/// Content addresses held as their 32 bytes and written as hex. A record holds one for each
/// new message; as hex `String`s they took 88 bytes each, about 9 MB for a history of
/// 100,000 messages, and the session's cached log kept them.
mod hex_keys {
    use serde::de::{Deserializer, Error, SeqAccess, Visitor};
    use serde::ser::{SerializeSeq, Serializer};

    use super::MessageKey;

    pub fn serialize<S: Serializer>(keys: &[MessageKey], out: S) -> Result<S::Ok, S::Error> {
        let mut seq = out.serialize_seq(Some(keys.len()))?;
        let mut hex = [0u8; 64];
        for key in keys {
            // 64 bytes hold 32 as hex, and hex is ASCII: neither step can fail.
            let _ = hex::encode_to_slice(key, &mut hex);
            seq.serialize_element(std::str::from_utf8(&hex).unwrap_or_default())?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<MessageKey>, D::Error> {
        input.deserialize_seq(Keys)
    }

    struct Keys;

    impl<'de> Visitor<'de> for Keys {
        type Value = Vec<MessageKey>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of hex content addresses")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut keys = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(Key(key)) = seq.next_element()? {
                keys.push(key);
            }
            // A session's cached log keeps it: not the room its growth left.
            keys.shrink_to_fit();
            Ok(keys)
        }
    }

    struct Key(MessageKey);

    impl<'de> serde::Deserialize<'de> for Key {
        fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
            input.deserialize_str(KeyVisitor)
        }
    }

    struct KeyVisitor;

    impl Visitor<'_> for KeyVisitor {
        type Value = Key;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a hex content address")
        }

        fn visit_str<E: Error>(self, hex_key: &str) -> Result<Key, E> {
            let mut key = [0u8; 32];
            hex::decode_to_slice(hex_key, &mut key).map_err(E::custom)?;
            Ok(Key(key))
        }
    }
}

/// Unix time in milliseconds, now.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Entries for tests of the session log and its stores.
/// The client's own history of a request, as lanes compare it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Conversation {
    /// The whole history.
    pub history: Anchor,
    /// The history's first message (its one-message anchor hash), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
    /// The content keys (hex) of the second and the last message, for a history of two or
    /// more: a later request that has both where this one had them, and another first
    /// message, is this conversation with its first message rewritten (Claude Code's
    /// reminder naming the model after a model switch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub second: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

impl Conversation {
    pub fn of(client: &PrefixHashes) -> Self {
        let keys = client.keys();
        let key_at = |i: usize| (keys.len() >= 2).then(|| hex::encode(keys[i]));
        Conversation {
            history: client.full(),
            first: client.anchor_at(1).map(|a| a.hash),
            second: key_at(1),
            last: key_at(keys.len().saturating_sub(1)),
        }
    }

    /// Whether `client` is this conversation with only its first message rewritten: it
    /// holds this history's second and last message where this history had them.
    pub fn rewritten_first(&self, client: &PrefixHashes) -> bool {
        let count = self.history.count;
        let keys = client.keys();
        let is = |key: &Option<String>, at: usize| {
            key.as_deref()
                .and_then(decode_key)
                .is_some_and(|k| keys.get(at) == Some(&k))
        };
        count >= 2 && keys.len() >= count && is(&self.second, 1) && is(&self.last, count - 1)
    }
}

/// A hex content address.
pub fn decode_key(hex_key: &str) -> Option<MessageKey> {
    let mut key = [0u8; 32];
    hex::decode_to_slice(hex_key, &mut key).ok()?;
    Some(key)
}

/// What was decided for one request, as the session log shows it (`ttl_decision`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TtlDecision {
    /// The lifetime the request's markers were written with.
    pub ttl: MarkTtl,
    /// The chance that this prefix is next used more than 5 minutes from now (and within
    /// the hour).
    pub late_reuse: f64,
    /// Expected saving of writing this request's new tokens with 1h rather than 5m, in
    /// USD (token counts estimated from the prompt's size); negative when 5m was chosen.
    pub expected_saving_usd: f64,
    /// A keep-warm request follows this many seconds after the request if its answer ends
    /// the turn and the session sends nothing before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_warm_after_secs: Option<u64>,
}

impl TtlDecision {
    pub fn ttl(&self) -> Ttl {
        match self.ttl {
            MarkTtl::OneHour => Ttl::OneHour,
            MarkTtl::FiveMinutes => Ttl::FiveMinutes,
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// The `i`-th persisted memory patch of a session (a `context_transform` entry).
    pub fn memory_patch(i: u64) -> Entry {
        Entry::ContextTransform(ContextTransform {
            version: ENTRY_VERSION,
            time: i,
            transformer: "memory".into(),
            reason: "before_request".into(),
            anchor: Anchor::of(&[]),
            patch: vec![Op::SystemPartSet {
                part_name: "memory".into(),
                text: format!("fact {i}"),
                before: None,
                after: None,
                invalidate_cache_reason: Some("memory".into()),
            }],
            display: None,
            request_index: Some(i),
        })
    }

    /// The first `n` messages of generated conversation `c`: user and assistant in turn,
    /// each message's text naming its conversation and place.
    pub fn conversation(c: usize, n: usize) -> Vec<serde_json::Value> {
        (0..n)
            .map(|i| {
                serde_json::json!({"role": if i % 2 == 0 { "user" } else { "assistant" },
                    "content": format!("c{c} m{i}")})
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn transform() -> ContextTransform {
        ContextTransform {
            version: ENTRY_VERSION,
            time: 1_700_000_000_000,
            transformer: "memory".into(),
            reason: "before_request".into(),
            anchor: Anchor {
                count: 2,
                hash: "ab".repeat(32),
            },
            patch: vec![Op::SystemPartSet {
                part_name: "memory".into(),
                text: "remember".into(),
                before: None,
                after: None,
                invalidate_cache_reason: Some("memory".into()),
            }],
            display: None,
            request_index: Some(0),
        }
    }

    #[test]
    fn entries_round_trip_with_version_and_type() {
        let entry = Entry::ContextTransform(transform());
        let text = entry.encode();
        let value: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["type"], "context_transform");
        assert_eq!(value["version"], 1);
        assert_eq!(value["patch"][0]["op"], "system_part_set");
        assert_eq!(value["patch"][0]["partName"], "memory");
        assert_eq!(Entry::decode(&text), entry);
    }

    #[test]
    fn unreadable_entries_decode_as_unknown() {
        assert_eq!(
            Entry::decode(r#"{"type":"future_kind","version":7}"#),
            Entry::Unknown
        );
        assert_eq!(Entry::decode("not json"), Entry::Unknown);
        let bad_patch = json!({"type": "context_transform", "version": 1, "time": 1,
            "transformer": "t", "reason": "turn_end", "anchor": {"count": 0, "hash": ""},
            "patch": [{"op": "no_such_op"}]});
        assert_eq!(Entry::decode(&bad_patch.to_string()), Entry::Unknown);
    }

    /// A record's content addresses are written as hex strings, as every stored log
    /// holds them, and read back from them; kept, each is its 32 bytes (as hex strings
    /// they took 88 bytes each, and a long history's record kept one per message).
    #[test]
    fn a_records_keys_are_hex_in_the_log_and_bytes_in_memory() {
        let keys: Vec<MessageKey> = (0..70_000u32)
            .map(|i| crate::providers::cache_key::key_of_bytes(&i.to_le_bytes()))
            .collect();
        let stored = json!({"type": "request", "version": 1, "time": 1,
            "request_index": 0, "model": "m", "provider": "anthropic",
            "endpoint": "messages",
            "sent": {"count": keys.len(), "hash": "h", "keys": keys.iter().map(hex::encode).collect::<Vec<_>>()},
            "tail": [hex::encode(keys[0])]})
        .to_string();
        let (entry, kept) = crate::alloc_meter::kept_by(|| Entry::decode(&stored));
        let Entry::Request(record) = &entry else {
            panic!("a stored record reads as one");
        };
        assert_eq!((&record.sent.keys, &record.tail[..]), (&keys, &keys[..1]));
        let bytes = keys.len() * std::mem::size_of::<MessageKey>();
        assert!(
            kept < bytes * 9 / 8,
            "{kept} bytes kept for {bytes} of keys"
        );
        let written: Value = serde_json::from_str(&entry.encode()).unwrap();
        let read: Value = serde_json::from_str(&stored).unwrap();
        assert_eq!(written["sent"]["keys"], read["sent"]["keys"]);
        assert_eq!(written["tail"], read["tail"]);
        let bad = stored.replacen(&hex::encode(keys[1]), "not hex", 1);
        assert_eq!(Entry::decode(&bad), Entry::Unknown);
    }

    #[test]
    fn ephemeral_is_not_persisted() {
        assert!(is_persisted_reason("before_request"));
        assert!(is_persisted_reason("turn_end"));
        assert!(!is_persisted_reason("ephemeral"));
    }
}
