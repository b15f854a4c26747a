//! Anthropic Messages (`POST /v1/messages`): every rule cachet knows about this API.
//!
//! - Messages: `role` user or assistant (Claude Code also sends `role: "system"` messages
//!   inside `messages`; they are carried as they are). Content is a string or blocks;
//!   `tool_use` blocks call tools, `tool_result` blocks answer them.
//! - System prompt: `system`, a string or text blocks; each block is a part.
//! - What does not key the cache: Claude Code's `x-anthropic-billing-header:` system block
//!   (its nonce changes on every request; the provider evidently leaves it out) and
//!   `cache_control` itself.
//! - Cache key order: tools, then system, then messages.
//! - Stream: `message_stop` ends an answer, an `error` event ends it in failure.

pub mod blocks;
pub mod markers;
mod request;

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::message::Fields;
use super::{Api, MsgKind, Section, Terminal};
use crate::error::ErrorKind;
use crate::json::scan;
use crate::route::Endpoint;

/// `speed` of a request, and of the answer's `usage`, served in fast mode (platform.claude.com,
/// Fast mode: `speed: "fast"`; anthropic-python `Usage.speed`: `standard` | `fast`).
pub const FAST_SPEED: &str = "fast";
/// The `inference_geo` (asked in a Messages request, answered in its `usage`) of inference
/// run in the US only, billed at `models::US_ONLY_FACTOR` ("US: Inference stays within US
/// data centers. A 1.1x pricing multiplier applies", Claude Platform on AWS, Data
/// residency; "Global: ... Standard pricing applies"). Claude Opus 4.6, Sonnet 4.6 and later
/// take it; older models refuse it with a 400.
pub const US_INFERENCE_GEO: &str = "us";

/// The block Claude Code puts first in `system`; its nonce changes on every request.
pub const BILLING_HEADER_PREFIX: &str = "x-anthropic-billing-header:";

/// The beta that asks for the provider's own cache diagnostics: with it, a request naming
/// `diagnostics.previous_message_id` gets `diagnostics.cache_miss_reason` in its answer.
pub const CACHE_DIAGNOSIS_BETA: &str = "cache-diagnosis-2026-04-07";

/// Block boundaries a cache marker looks back over for an earlier entry, the marked block
/// included: "up to 20 blocks before your explicit breakpoint" (prompt-caching docs).
pub const LOOKBACK_BLOCKS: usize = 20;

/// The content block of a server-side compaction's summary (beta `compact-2026-01-12`).
/// "When the API receives a `compaction` block, all content blocks before it are ignored"
/// (platform.claude.com, Compaction, "Passing compaction blocks back"): the prompt, and
/// what its cache keys on, starts at the last one.
pub const COMPACTION_BLOCK: &str = "compaction";

/// The `context_management` edit that compacts the conversation once the prompt reaches
/// its trigger: `{"type": "input_tokens", "value": N}`, 150,000 unless set, at least
/// 50,000 (platform.claude.com, Compaction, "Parameters").
pub const COMPACT_EDIT: &str = "compact_20260112";
pub const COMPACT_TRIGGER_DEFAULT: u64 = 150_000;
pub const COMPACT_TRIGGER_MIN: u64 = 50_000;

/// The `context_management` edit that clears old tool results once the prompt passes its
/// trigger (beta `context-management-2025-06-27`; platform.claude.com, Context editing):
/// the provider replaces the oldest results with a placeholder, which "invalidates cached
/// prompt prefixes". Its answer lists it in `context_management.applied_edits`.
pub const CLEAR_TOOL_USES_EDIT: &str = "clear_tool_uses_20250919";

/// Whether an applied edit's `type` is a tool-result clearing (any dated version).
pub fn is_tool_clearing_edit(kind: &str) -> bool {
    kind.starts_with("clear_tool_uses")
}

/// Where the provider's prompt starts in `messages`: the last compaction block, as
/// (message, block), if there is one.
pub fn compaction_start(messages: &[Value]) -> Option<(usize, usize)> {
    messages.iter().enumerate().rev().find_map(|(mi, message)| {
        let blocks = message.get("content")?.as_array()?;
        let bi = blocks
            .iter()
            .rposition(|b| b.get("type").and_then(Value::as_str) == Some(COMPACTION_BLOCK))?;
        Some((mi, bi))
    })
}

/// The first edit of a request's `context_management` (its value, if any) whose `type`
/// `kind` accepts, with its place in `edits`.
pub fn context_edit(
    context_management: Option<&Value>,
    kind: impl Fn(&str) -> bool,
) -> Option<(usize, &Value)> {
    context_management?
        .get("edits")?
        .as_array()?
        .iter()
        .enumerate()
        .find(|(_, e)| e.get("type").and_then(Value::as_str).is_some_and(&kind))
}

/// The trigger of a request's compaction edit, if it asks for one. A trigger below the
/// minimum, or of another type, is the 400 the API answers.
pub fn compaction_trigger(request: &Value) -> Result<Option<u64>, String> {
    let Some((i, edit)) = context_edit(request.get("context_management"), |t| t == COMPACT_EDIT)
    else {
        return Ok(None);
    };
    let Some(trigger) = edit.get("trigger").filter(|t| !t.is_null()) else {
        return Ok(Some(COMPACT_TRIGGER_DEFAULT));
    };
    let path = format!("context_management.edits.{i}.trigger");
    if trigger.get("type").and_then(Value::as_str) != Some("input_tokens") {
        return Err(format!("{path}.type: Input should be 'input_tokens'"));
    }
    match trigger.get("value").and_then(Value::as_u64) {
        Some(n) if n >= COMPACT_TRIGGER_MIN => Ok(Some(n)),
        _ => Err(format!(
            "{path}.value: Input should be greater than or equal to {COMPACT_TRIGGER_MIN}"
        )),
    }
}

/// Anthropic Messages (`POST /v1/messages`), or its token count (`count_tokens`), whose
/// request is read by the same wire; or another route that carries a Messages body (Bedrock's
/// `InvokeModel`, Vertex's `rawPredict`), read by the same rules under its own provider.
pub struct Messages {
    provider: crate::route::Provider,
    endpoint: Endpoint,
    /// Where the route names the model: `false` for a route whose path names it (the body
    /// has no `model`).
    model_in_body: bool,
}

impl Messages {
    /// The Messages rules on another provider's route, whose path names the model.
    pub const fn routed(provider: crate::route::Provider, endpoint: Endpoint) -> Messages {
        Messages {
            provider,
            endpoint,
            model_in_body: false,
        }
    }
}

pub static MESSAGES: Messages = Messages {
    provider: crate::route::Provider::Anthropic,
    endpoint: Endpoint::Messages,
    model_in_body: true,
};
pub static COUNT_TOKENS: Messages = Messages {
    provider: crate::route::Provider::Anthropic,
    endpoint: Endpoint::CountTokens,
    model_in_body: true,
};

impl Api for Messages {
    fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    fn terminal(&self, event: &str, _data: &[u8]) -> Option<Terminal> {
        terminal(event)
    }

    fn stream_break_event(&self, message: &str) -> Option<Bytes> {
        Some(stream_break_event(message))
    }

    fn assistant_from_body(&self, answer: &Value) -> Option<Value> {
        assistant_from_body(answer)
    }

    fn assistant_from_stream(&self, events: &[(String, Bytes)]) -> Option<Value> {
        assistant_from_stream(events)
    }

    fn cache_key_order(&self) -> [Section; 3] {
        CACHE_KEY_ORDER
    }

    fn is_cache_neutral_system_text(&self, text: &str) -> bool {
        is_cache_neutral_system_text(text)
    }
}

/// The session inside `metadata.user_id` of a Messages request (Claude Code's): either a
/// JSON object string carrying `session_id`, or the older
/// `user_<hash>_account_<uuid>_session_<uuid>` form.
pub fn metadata_session(env: &crate::envelope::Envelope) -> Option<String> {
    if env.endpoint().read_as() != Endpoint::Messages {
        return None;
    }
    let metadata: Value = serde_json::from_slice(env.option_raw("metadata")?).ok()?;
    let user_id = metadata.get("user_id")?.as_str()?;
    if let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(user_id) {
        return super::non_empty(obj.get("session_id").and_then(Value::as_str));
    }
    let (_, session) = user_id.rsplit_once("_session_")?;
    super::non_empty(Some(session))
}

/// Whether a content block's `type` is a thinking block (`thinking`, or
/// `redacted_thinking`): it cannot carry a marker, and the provider drops it from the prompt
/// once the turn that asked for it is over (on models before Opus 4.5).
pub fn is_thinking_block(kind: &str) -> bool {
    matches!(kind, "thinking" | "redacted_thinking")
}

/// The settings that decide which thinking blocks the provider keeps in a request's
/// prompt (`thinking`, `context_management`), as values: only those two options are parsed.
pub fn thinking_settings(env: &crate::envelope::Envelope) -> Map<String, Value> {
    let mut request = Map::new();
    for key in ["thinking", "context_management"] {
        if let Some(value) = env
            .option_raw(key)
            .and_then(|raw| serde_json::from_slice(raw).ok())
        {
            request.insert(key.to_string(), value);
        }
    }
    request
}

/// The beta of interleaved thinking (thinking between tool calls), which pi and Claude Code
/// send on every request.
pub const INTERLEAVED_THINKING_BETA: &str = "interleaved-thinking-2025-05-14";
/// The smallest thinking budget the API takes.
pub const MIN_THINKING_BUDGET: u64 = 1024;

/// The `budget_tokens` of a request that thinks on a budget (`thinking.type: "enabled"`).
pub fn thinking_budget(request: &Value) -> Option<&Value> {
    let thinking = request.get("thinking")?;
    (thinking.get("type").and_then(Value::as_str) == Some("enabled"))
        .then(|| thinking.get("budget_tokens").unwrap_or(&Value::Null))
}

/// Whether a request's thinking budget may exceed its `max_tokens`: "`budget_tokens` must
/// be set to a value less than `max_tokens`. However, when using interleaved thinking with
/// tools, you can exceed this limit, as the token limit becomes your entire context window"
/// (platform.claude.com, Extended thinking). `betas` is the `anthropic-beta` header.
pub fn budget_may_exceed_max_tokens(betas: Option<&str>, has_tools: bool) -> bool {
    has_tools && betas.is_some_and(|b| b.split(',').any(|b| b.trim() == INTERLEAVED_THINKING_BETA))
}

/// The 400 the API answers for a request's thinking budget, if any: at least 1024, and
/// below `max_tokens` unless interleaved with tools ([`budget_may_exceed_max_tokens`]).
pub fn thinking_budget_error(request: &Value, betas: Option<&str>) -> Option<String> {
    let budget = thinking_budget(request)?;
    let Some(budget) = budget.as_u64() else {
        return Some("thinking.enabled.budget_tokens: Field required".into());
    };
    if budget < MIN_THINKING_BUDGET {
        return Some(format!(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to {MIN_THINKING_BUDGET}"
        ));
    }
    let has_tools = request
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let max_tokens = request.get("max_tokens").and_then(Value::as_u64)?;
    (budget >= max_tokens && !budget_may_exceed_max_tokens(betas, has_tools))
        .then(|| "`max_tokens` must be greater than `thinking.budget_tokens`".to_string())
}

/// The order the provider's prompt cache keys on.
pub const CACHE_KEY_ORDER: [Section; 3] = [Section::Tools, Section::System, Section::Messages];

/// Whether a system text block is left out of the cache key.
pub fn is_cache_neutral_system_text(text: &str) -> bool {
    text.starts_with(BILLING_HEADER_PREFIX)
}

pub fn message_kind(b: &[u8]) -> MsgKind {
    let Some((fields, mut kind)) = Fields::with_role(b) else {
        return MsgKind::default();
    };
    kind.from_model = kind.role == "assistant";
    match fields.get("content") {
        Some(content) if b.get(content.start) == Some(&b'[') => {
            for block in scan::elements(b, content.start).unwrap_or_default() {
                match scan::str_field(b, block.start, "type").as_deref() {
                    Some("tool_use") => kind.calls_tool = true,
                    Some("tool_result") => kind.tool_result = true,
                    Some(COMPACTION_BLOCK) => {
                        kind.compaction = true;
                        kind.other_content = true;
                    }
                    _ => kind.other_content = true,
                }
            }
        }
        Some(_) => kind.other_content = true,
        None => {}
    }
    kind
}

/// A `tool_use` must be answered by the very next message, and a `tool_result` must follow
/// one.
pub fn check_boundary(prev: Option<&MsgKind>, next: Option<&MsgKind>) -> Result<(), String> {
    let separated = "a tool result would be separated from its tool call";
    if prev.is_some_and(|p| p.calls_tool) && !next.is_some_and(|n| n.tool_result) {
        return Err(separated.into());
    }
    if next.is_some_and(|n| n.tool_result) && !prev.is_some_and(|p| p.calls_tool) {
        return Err(separated.into());
    }
    Ok(())
}

/// How an SSE event ends the stream, if it does.
pub fn terminal(event: &str) -> Option<Terminal> {
    match event {
        "message_stop" => Some(Terminal::Done),
        "error" => Some(Terminal::Error),
        _ => None,
    }
}

/// The event sent to the client when the upstream breaks off after its 200: the SDKs
/// raise it as an error.
pub fn stream_break_event(message: &str) -> Bytes {
    stream_error_event(ErrorKind::BadGateway, message)
}

/// The `error.type` of an error body (PROVIDERS.md, Errors).
fn error_type(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::UpgradeRefused => "invalid_request_error",
        ErrorKind::TooLarge => "request_too_large",
        ErrorKind::Authentication => "authentication_error",
        ErrorKind::NotFound => "not_found_error",
        ErrorKind::RequestTimeout => "timeout_error",
        ErrorKind::RateLimit => "rate_limit_error",
        ErrorKind::Internal | ErrorKind::BadGateway => "api_error",
        ErrorKind::Unavailable | ErrorKind::Overloaded => "overloaded_error",
        ErrorKind::Timeout => "timeout_error",
    }
}

/// An error body: `{"type":"error","error":{"type":T,"message":M}}`.
pub fn error_body(kind: ErrorKind, message: &str) -> Bytes {
    let value = json!({
        "type": "error",
        "error": { "type": error_type(kind), "message": message },
    });
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
}

/// The SSE `error` event of a stream that fails after its 200 (an `overloaded_error`, or a
/// break cachet reports).
pub fn stream_error_event(kind: ErrorKind, message: &str) -> Bytes {
    let body = error_body(kind, message);
    let mut out = Vec::with_capacity(body.len() + 24);
    out.extend_from_slice(b"event: error\ndata: ");
    out.extend_from_slice(&body);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// The assistant message of a non-streaming response body.
pub fn assistant_from_body(v: &Value) -> Option<Value> {
    Some(json!({"role": "assistant", "content": v.get("content")?}))
}

/// The assistant message assembled from a stream's events.
pub fn assistant_from_stream(events: &[(String, Bytes)]) -> Option<Value> {
    let mut blocks: BTreeMap<u64, Value> = BTreeMap::new();
    let mut partial_json: BTreeMap<u64, String> = BTreeMap::new();
    for (_, data) in events {
        let Ok(ev) = serde_json::from_slice::<Value>(data) else {
            continue;
        };
        let index = ev.get("index").and_then(Value::as_u64).unwrap_or(0);
        match ev.get("type").and_then(Value::as_str) {
            Some("content_block_start") => {
                if let Some(block) = ev.get("content_block") {
                    blocks.insert(index, block.clone());
                }
            }
            Some("content_block_delta") => {
                let (Some(block), Some(delta)) = (blocks.get_mut(&index), ev.get("delta")) else {
                    continue;
                };
                let append = |block: &mut Value, field: &str, piece: Option<&Value>| {
                    let add = piece.and_then(Value::as_str).unwrap_or("");
                    let current = block.get(field).and_then(Value::as_str).unwrap_or("");
                    block[field] = Value::String(format!("{current}{add}"));
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => append(block, "text", delta.get("text")),
                    Some("thinking_delta") => append(block, "thinking", delta.get("thinking")),
                    Some("signature_delta") => append(block, "signature", delta.get("signature")),
                    Some("compaction_delta") => {
                        append(block, "content", delta.get("content"));
                        if let Some(opaque) =
                            delta.get("encrypted_content").filter(|v| v.is_string())
                        {
                            block["encrypted_content"] = opaque.clone();
                        }
                    }
                    Some("input_json_delta") => partial_json.entry(index).or_default().push_str(
                        delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                    ),
                    _ => {}
                }
            }
            _ => {}
        }
    }
    for (index, text) in partial_json {
        if let Some(block) = blocks.get_mut(&index) {
            block["input"] = serde_json::from_str(&text).unwrap_or(Value::Object(Map::new()));
        }
    }
    if blocks.is_empty() {
        return None;
    }
    Some(json!({"role": "assistant", "content": blocks.into_values().collect::<Vec<_>>()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(list: &[&str]) -> Vec<(String, Bytes)> {
        list.iter()
            .map(|d| (String::new(), Bytes::from(d.to_string())))
            .collect()
    }

    #[test]
    fn text_and_tool_use_from_the_stream() {
        let m = assistant_from_stream(&events(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"bash","input":{}}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\":"}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}"#,
        ]))
        .unwrap();
        assert_eq!(m["content"][0]["text"], "Hello");
        assert_eq!(m["content"][1]["input"]["cmd"], "ls");
    }

    /// A compaction streams as its block's start, one `compaction_delta` with the whole
    /// summary, and its stop (platform.claude.com, Compaction, "Streaming"); the message a
    /// `turn_end` handler sees carries the summary, as the client sends it back.
    #[test]
    fn a_compaction_block_from_the_stream() {
        let m = assistant_from_stream(&events(&[
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"compaction","content":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"compaction_delta","content":"Summary: the user asked for a scraper.","encrypted_content":"Eo8B"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Next"}}"#,
        ]))
        .unwrap();
        assert_eq!(
            m["content"][0],
            json!({"type": "compaction", "content": "Summary: the user asked for a scraper.", "encrypted_content": "Eo8B"})
        );
        assert_eq!(m["content"][1]["text"], "Next");
        let start = compaction_start(std::slice::from_ref(&m));
        assert_eq!(start, Some((0, 0)));
    }

    #[test]
    fn kinds_and_boundaries() {
        let tu = message_kind(
            br#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"a","input":{}}]}"#,
        );
        let tr = message_kind(
            br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}"#,
        );
        let u = message_kind(br#"{"role":"user","content":"hi"}"#);
        assert!(tu.from_model && !u.from_model);
        assert!(u.is_user_content() && !tr.is_user_content());
        assert!(check_boundary(Some(&tu), Some(&tr)).is_ok());
        assert!(check_boundary(Some(&tu), Some(&u)).is_err());
        assert!(check_boundary(Some(&u), Some(&tr)).is_err());
        assert!(is_cache_neutral_system_text(
            "x-anthropic-billing-header: cc_version=2.1; cch=abc;"
        ));
    }
}
