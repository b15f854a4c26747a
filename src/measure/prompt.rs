//! What the provider's prompt cache keys on, for one request as it was sent: the model,
//! the tools, the system prompt (without what does not key the cache) and the history up
//! to the request-only tail, each element by content address, plus where its cache
//! markers sit. Two requests whose shapes agree up to a point share a cached prefix up to
//! that point.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::envelope::{Envelope, Ttl};
use crate::providers::cache_key::{key_of_bytes, key_of_raw, key_of_repeated_bytes, MessageKey};
use crate::providers::tool_name;
use crate::route::{Endpoint, Section};

/// A named element of the prefix: a tool (by name) or a system part (by part name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub name: String,
    pub key: MessageKey,
}

/// The system parts the cache keys on, each by its name and the address of its text.
pub fn system_of(env: &Envelope) -> Vec<Named> {
    let endpoint = env.endpoint();
    env.system_parts()
        .iter()
        .filter(|p| !crate::providers::api(endpoint).is_cache_neutral_system_text(&p.text))
        .map(|p| Named {
            name: p.name.clone(),
            // The text is what keys the cache: a string system prompt equals its one text
            // block, and markers never count.
            key: key_of_repeated_bytes(p.text.as_bytes()),
        })
        .collect()
}

impl PromptShape {
    /// Name the system parts as `named` (the envelope that was shaped) did, where a part's
    /// text is the same: the body read back after shaping names its parts by position
    /// (`base.2`), where the shaped envelope knew a policy's part by its name (`memory`).
    pub fn name_system_parts(&mut self, named: &[Named]) {
        for part in &mut self.system {
            if let Some(n) = named.iter().find(|n| n.key == part.key) {
                part.name.clone_from(&n.name);
            }
        }
    }
}

/// A cache marker: where it sits, counted in content blocks from the start of the prompt
/// (tools, then system, then messages), and its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Blocks before and including the marked one.
    pub block: u32,
    /// The history message it sits in (`None` on a tool or system block).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<u32>,
    pub ttl: MarkTtl,
}

/// A marker's lifetime, as written in the session log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MarkTtl {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    OneHour,
}

impl MarkTtl {
    pub fn seconds(self) -> u64 {
        match self {
            MarkTtl::FiveMinutes => 300,
            MarkTtl::OneHour => 3600,
        }
    }
}

impl From<Ttl> for MarkTtl {
    fn from(t: Ttl) -> Self {
        match t {
            Ttl::FiveMinutes => MarkTtl::FiveMinutes,
            Ttl::OneHour => MarkTtl::OneHour,
        }
    }
}

impl Mark {
    pub fn section(&self, tools: usize) -> Section {
        match self.message {
            Some(_) => Section::Messages,
            None if (self.block as usize) <= tools => Section::Tools,
            None => Section::System,
        }
    }
}

/// The cache-relevant shape of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptShape {
    pub endpoint: Endpoint,
    pub model: String,
    pub tools: Vec<Named>,
    /// Content address of the whole tool list (`None` without tools).
    pub tools_key: Option<MessageKey>,
    pub system: Vec<Named>,
    /// Content address of the whole system prompt (`None` without one).
    pub system_key: Option<MessageKey>,
    /// The history the provider may cache: everything before the request-only tail.
    pub messages: Vec<MessageKey>,
    /// The request-only tail.
    pub tail: Vec<MessageKey>,
    /// Cache markers in prompt order (Anthropic).
    pub marks: Vec<Mark>,
    /// The last history message holding the provider's compaction summary, if any: the
    /// provider's prompt starts there.
    pub compacted_at: Option<usize>,
}

fn list_key(items: &[Named]) -> Option<MessageKey> {
    if items.is_empty() {
        return None;
    }
    let mut all = Vec::with_capacity(items.len() * 32);
    for item in items {
        all.extend_from_slice(&item.key);
    }
    Some(key_of_bytes(&all))
}

impl PromptShape {
    /// The shape of a request whose body parsed into `env`, the last `tail` messages of
    /// which are the request-only tail.
    pub fn of(env: &Envelope, tail: usize) -> PromptShape {
        Self::with_history_keys(env, tail, env.history_raw().map(key_of_raw).collect())
    }

    /// [`PromptShape::of`] with the history's message keys known (the session layer's
    /// prefix hashes hold them).
    pub fn with_history_keys(env: &Envelope, tail: usize, history: Vec<MessageKey>) -> PromptShape {
        let endpoint = env.endpoint();
        let tools: Vec<Named> = env
            .tools_raw()
            .map(|raw| named_tool(endpoint, raw))
            .collect();
        let system = system_of(env);
        let cut = history.len().saturating_sub(tail);
        let mut messages = history;
        let tail = messages.split_off(cut);
        let marks = marks_of(env, cut);
        let compacted_at = env
            .history_kinds()
            .iter()
            .take(cut)
            .rposition(|k| k.compaction);
        PromptShape {
            endpoint,
            model: env.meta.model.clone(),
            tools_key: list_key(&tools),
            tools,
            system_key: list_key(&system),
            system,
            messages,
            tail,
            marks,
            compacted_at,
        }
    }
}

/// A request as sent, parsed, with its shape: what recording a request needs.
pub struct SentRequest {
    pub env: Envelope,
    pub shape: PromptShape,
}

impl SentRequest {
    pub fn new(env: Envelope, tail: usize) -> Self {
        let shape = PromptShape::of(&env, tail);
        SentRequest { env, shape }
    }

    /// From a JSON body (for callers that hold a value rather than the bytes sent).
    pub fn from_json(
        endpoint: Endpoint,
        body: &Value,
        tail: usize,
    ) -> Result<Self, crate::error::ApiError> {
        let bytes = bytes::Bytes::from(serde_json::to_vec(body).unwrap_or_default());
        Ok(SentRequest::new(
            crate::providers::parse_envelope(endpoint, bytes)?,
            tail,
        ))
    }

    /// The raw bytes of the shape's history messages.
    pub fn history(&self) -> Vec<bytes::Bytes> {
        self.env
            .history_shared()
            .take(self.shape.messages.len())
            .collect()
    }
}

/// A tool's name and key, remembered by its bytes and API: agents send the same tools on
/// every request, and finding a name can mean reading past a long schema.
fn named_tool(endpoint: Endpoint, raw: &[u8]) -> Named {
    static SEEN: crate::memo::Memo<Named> = crate::memo::Memo::new(4096);
    // Each API names a tool in its own place: the endpoint is part of the key.
    let key = crate::memo::key(endpoint.label().as_bytes(), raw);
    SEEN.get_or_insert_with(key, || Named {
        name: tool_name(endpoint, raw).unwrap_or_default(),
        key: key_of_raw(raw),
    })
}

/// Markers of the tools, system blocks and the first `history` messages, by block.
fn marks_of(env: &Envelope, history: usize) -> Vec<Mark> {
    env.prefix_marks(history)
        .into_iter()
        .map(|(block, ttl, message)| Mark {
            block: block + 1,
            message,
            ttl: ttl.into(),
        })
        .collect()
}

/// Prompt tokens up to and including block `block` (counted as [`Mark::block`] counts),
/// block by block and no further than `enough`: exact below it, at least `enough` once
/// reached. The diagnosis asks whether a prefix is below the model's minimum, and a prompt
/// of hundreds of KB is not tokenised after every response to learn that it is not.
pub fn tokens_through(env: &Envelope, block: u32, enough: u64) -> u64 {
    let tools = env.tools_raw();
    let system = env.system_parts().iter().map(|p| p.text.as_bytes());
    let history = env.history_raw().flat_map(|raw| {
        crate::providers::anthropic::blocks::content_block_spans(raw)
            .into_iter()
            .map(move |span| &raw[span])
    });
    let mut total = 0;
    for text in tools.chain(system).chain(history).take(block as usize) {
        if total >= enough {
            break;
        }
        total += crate::tokens::count_up_to(&String::from_utf8_lossy(text), enough - total);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    use bytes::Bytes;

    /// The diagnosis asks whether a marker's prefix reaches the model's minimum: counting
    /// stops once it does, within a piece of it, however long the prompt; below it the
    /// count is exact.
    #[test]
    fn tokens_are_counted_only_as_far_as_asked() {
        let text = |i: usize| format!("step {i}: {}", "the quick brown fox jumps. ".repeat(200));
        let messages: Vec<serde_json::Value> = (0..60)
            .map(|i| serde_json::json!({"role": "user", "content": [{"type": "text", "text": text(i)}]}))
            .collect();
        let body = serde_json::json!({"model": "claude-sonnet-4-5", "system": "Be brief.", "messages": messages});
        let env = crate::providers::parse_envelope(
            Endpoint::Messages,
            Bytes::from(serde_json::to_vec(&body).unwrap()),
        )
        .unwrap();
        let blocks = 61;
        let all = tokens_through(&env, blocks, u64::MAX);
        let each = crate::tokens::count(&text(0));
        assert!(all > 50 * each, "{all}");
        let asked = tokens_through(&env, blocks, 2048);
        assert!((2048..2048 + 1024).contains(&asked), "{asked} of {all}");
        let first = tokens_through(&env, 2, 2048);
        assert_eq!(first, tokens_through(&env, 2, u64::MAX));
        assert!(first < 2048, "{first}");
    }

    /// A remembered tool is its API's reading of the bytes: Chat names a tool by its
    /// `function`, the others by the top-level name, on the first ask and after.
    #[test]
    fn a_remembered_tool_is_read_by_its_api() {
        let raw = br#"{"type":"function","name":"outer","function":{"name":"inner"}}"#;
        for _ in 0..2 {
            let chat = named_tool(Endpoint::Chat, raw);
            let messages = named_tool(Endpoint::Messages, raw);
            assert_eq!(
                (chat.name.as_str(), messages.name.as_str()),
                ("inner", "outer")
            );
            assert_eq!(chat.key, key_of_raw(raw));
        }
    }

    fn shape(body: &str, tail: usize) -> PromptShape {
        let env =
            crate::providers::parse_envelope(Endpoint::Messages, Bytes::from(body.to_string()))
                .unwrap();
        PromptShape::of(&env, tail)
    }

    /// Claude Code's billing block changes on every request and is not keyed; a marker
    /// moving from one block to another changes marks, never keys.
    #[test]
    fn billing_block_and_markers_do_not_change_keys() {
        let a = shape(
            r#"{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cch=1;"},{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}],
            "messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#,
            0,
        );
        let b = shape(
            r#"{"model":"m","system":[{"type":"text","text":"x-anthropic-billing-header: cch=2;"},{"type":"text","text":"You are Claude Code."}],
            "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}"#,
            0,
        );
        assert_eq!(a.system_key, b.system_key);
        assert_eq!(a.system.len(), 1);
        assert_eq!(a.messages[0], b.messages[0]);
        assert_eq!(a.marks.len(), 2);
        assert_eq!(
            a.marks[0],
            Mark {
                block: 2,
                message: None,
                ttl: MarkTtl::FiveMinutes
            }
        );
        assert_eq!(a.marks[1].message, Some(0));
        assert!(b.marks.is_empty());
    }

    /// Claude Code's shape: tools, a marked system block, a long history of tool calls and
    /// results, and a marker on the latest user message.
    fn claude_code_history(steps: usize) -> Envelope {
        let mut messages = vec![serde_json::json!({"role": "user", "content": "fix the test"})];
        for i in 0..steps {
            messages.push(serde_json::json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("step {i}")},
                {"type": "tool_use", "id": format!("toolu_{i}"), "name": "Bash", "input": {"command": "cargo test"}}]}));
            messages.push(serde_json::json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": "ok"}]}));
        }
        messages.push(serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]}));
        let body = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}, {"name": "Read", "input_schema": {"type": "object"}}],
            "messages": messages,
        });
        crate::providers::parse_envelope(
            Endpoint::Messages,
            Bytes::from(serde_json::to_vec(&body).unwrap()),
        )
        .unwrap()
    }

    /// The markers of a prompt are a few among thousands of blocks: reading them walks the
    /// history without holding a list of its blocks, so what it holds does not grow with
    /// the session.
    #[test]
    fn marks_are_read_without_a_list_of_every_block() {
        let held = |steps: usize| {
            let env = claude_code_history(steps);
            let history = env.history_raw().count();
            // The body's facts (its messages' blocks) are read once per body, first.
            let first = marks_of(&env, history);
            let (marks, peak) = crate::alloc_meter::peak_during(|| marks_of(&env, history));
            assert_eq!(marks, first);
            // Two tools, the system block, then three blocks a step and the first and
            // latest user messages.
            let last = 2 + 1 + 1 + 3 * steps + 1;
            assert_eq!(
                marks
                    .iter()
                    .map(|m| (m.block, m.message))
                    .collect::<Vec<_>>(),
                vec![(3, None), (last as u32, Some(history as u32 - 1))]
            );
            peak
        };
        let (short, long) = (held(10), held(2_000));
        assert!(
            long <= short + 64,
            "{long} bytes held reading the marks of 2,000 steps, {short} of 10"
        );
    }

    /// A tool's key from its raw bytes is [`message_key`] of the parsed tool, on each
    /// client's tool shapes.
    #[test]
    fn tool_keys_from_bytes_equal_message_key() {
        use crate::providers::cache_key::message_key;
        for raw in crate::providers::TOOL_SHAPES {
            let v: Value = serde_json::from_str(raw).unwrap();
            assert_eq!(key_of_raw(raw.as_bytes()), message_key(&v), "{raw}");
        }
    }

    #[test]
    fn the_tail_is_kept_apart() {
        let s = shape(
            r#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"Current date: today"}]}"#,
            1,
        );
        assert_eq!((s.messages.len(), s.tail.len()), (1, 1));
    }
}
