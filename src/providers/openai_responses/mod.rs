//! OpenAI Responses (`POST /v1/responses`): every rule cachet knows about this API.
//!
//! - Input items: `message` items with roles `system`/`developer` (leading ones are the
//!   system prompt when `instructions` is absent: pi sends its prompt this way), `user`
//!   and `assistant`; `reasoning` items; `*_call` items (function, custom tool, shell...)
//!   and their `*_call_output` answers.
//! - System prompt: `instructions`, else the leading `system`/`developer` message items.
//! - Cache key order: tools, then instructions, then input items. No marker before GPT-5.6.
//! - Stream: `response.completed` or `response.incomplete` end an answer;
//!   `response.failed` and `error` end it in failure.
//! - Codex signed in with ChatGPT reaches the API at the ChatGPT backend's Codex base
//!   ([`CHATGPT_CODEX_BASE_PATH`]), which serves `/responses` and `/models` without `/v1`.

mod request;
pub mod websocket;

/// The request's cache options (`prompt_cache_options`: breakpoints, retention, and the
/// comparison response of the prompt cache diagnostics).
pub const PROMPT_CACHE_OPTIONS: &str = "prompt_cache_options";

/// `prompt_cache_options` asking for the prompt cache diagnostics against the response `id`
/// ("Set `prompt_cache_options.comparison_response_id` to the baseline response's `id`",
/// developers.openai.com/api/docs/guides/prompt-caching/diagnostics), the request's own
/// options (`existing`, as JSON text) kept.
pub fn comparison_option(existing: Option<&[u8]>, id: &str) -> Bytes {
    let mut options = existing
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .filter(serde_json::Value::is_object)
        .unwrap_or_else(|| serde_json::json!({}));
    options["comparison_response_id"] = serde_json::json!(id);
    Bytes::from(options.to_string())
}

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::message::Fields;
use super::{Api, MsgKind, Section, Terminal};
use crate::route::Endpoint;

/// The base URL Codex uses when signed in with ChatGPT (codex-rs `CHATGPT_CODEX_BASE_URL`),
/// and its path. Codex appends `/responses` and `/models` to it, where an API key's base
/// (`https://api.openai.com/v1`) carries the `/v1`: an upstream base ending in this path
/// stands for `/v1`.
pub const CHATGPT_CODEX_BASE_URL: &str = "https://chatgpt.com/backend-api/codex";
pub const CHATGPT_CODEX_BASE_PATH: &str = "/backend-api/codex";

/// Whether an upstream base path already stands for OpenAI's `/v1`, so that a client's
/// `/v1/...` path goes under it without its `/v1`: a base ending in `/v1` (as SDK base URLs
/// do), or the ChatGPT backend's Codex base.
pub fn base_stands_for_v1(base_path: &str) -> bool {
    base_path.ends_with("/v1") || base_path.ends_with(CHATGPT_CODEX_BASE_PATH)
}

/// The conversation of the Conversations API a request goes on: `conversation` names it by
/// its id or as an object holding the id. The provider reads the conversation's items
/// before the request's input, and adds the input and the answer to it: "Input items and
/// output items from this response are automatically added to this conversation". Such a
/// request carries only its new input, like one naming `previous_response_id`, with which
/// it "cannot be used in conjunction" (the OpenAI SDK's `ResponseCreateParams`).
pub fn conversation_id(field: &[u8]) -> Option<String> {
    serde_json::from_slice::<ConversationRef>(field)
        .ok()?
        .into_id()
}

/// [`conversation_id`] of a field already read as JSON.
pub fn conversation_id_of(field: &Value) -> Option<String> {
    ConversationRef::deserialize(field).ok()?.into_id()
}

/// The conversation a request already read as JSON names, if any.
pub fn conversation_of(request: &Value) -> Option<String> {
    request.get("conversation").and_then(conversation_id_of)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ConversationRef {
    Id(String),
    Object { id: String },
}

impl ConversationRef {
    fn into_id(self) -> Option<String> {
        let (ConversationRef::Id(id) | ConversationRef::Object { id }) = self;
        let id = id.trim();
        (!id.is_empty()).then(|| id.to_string())
    }
}

/// The Conversations API conversation a Responses request names.
pub fn conversation_of_envelope(env: &crate::envelope::Envelope) -> Option<String> {
    if env.endpoint() != Endpoint::Responses {
        return None;
    }
    conversation_id(env.option_raw("conversation")?)
}

/// The answer a Responses request continues (`previous_response_id`), if it names one.
pub fn previous_response(env: &crate::envelope::Envelope) -> Option<String> {
    let raw = env.option_raw("previous_response_id")?;
    super::non_empty(serde_json::from_slice::<String>(raw).ok().as_deref())
}

/// Whether a Responses request is a warmup: `generate: false` "does not return a model
/// output, but prepares request state so the next generated turn can start faster"
/// (OpenAI's WebSocket mode guide; Codex sends one with empty `input` as each socket
/// opens). It prepares the next turn and is not one: no answer to compare with, nothing a
/// later request continues but what it names by `previous_response_id`.
pub fn is_warmup(env: &crate::envelope::Envelope) -> bool {
    env.endpoint() == Endpoint::Responses
        && env
            .option_raw("generate")
            .is_some_and(|raw| raw.trim_ascii() == b"false")
}

/// [`is_warmup`] of a Responses request already read as JSON.
pub fn is_warmup_of(request: &Value) -> bool {
    request.get("generate") == Some(&Value::Bool(false))
}

/// Whether the provider keeps a request's answer for later requests to continue by
/// `previous_response_id`: `store` is on unless the request sets it `false` (Codex and pi
/// do). `store` is the field's raw JSON.
pub fn stores_answer(store: Option<&[u8]>) -> bool {
    store.is_none_or(|raw| raw.trim_ascii() != b"false")
}

/// [`stores_answer`] of a request already read as JSON.
pub fn stores_answer_of(request: &Value) -> bool {
    request.get("store") != Some(&Value::Bool(false))
}

/// A request's `input` as the list of items the provider reads: a string is one user
/// message.
pub fn input_items(request: &Value) -> Vec<Value> {
    match request.get("input") {
        Some(Value::String(text)) => vec![serde_json::json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

/// The order the provider's prompt cache keys on.
pub const CACHE_KEY_ORDER: [Section; 3] = [Section::Tools, Section::System, Section::Messages];

pub fn message_kind(b: &[u8]) -> MsgKind {
    let Some((fields, mut kind)) = Fields::with_role(b) else {
        return MsgKind::default();
    };
    kind.item_type = fields
        .name("type")
        .unwrap_or(std::borrow::Cow::Borrowed("message"));
    let t = &*kind.item_type;
    kind.tool_result = t.ends_with("_call_output");
    kind.calls_tool = t.ends_with("_call");
    kind.from_model =
        kind.calls_tool || t == "reasoning" || (t == "message" && kind.role == "assistant");
    kind.other_content = !kind.tool_result;
    kind.compaction = t == COMPACTION_ITEM;
    kind
}

/// The opaque item server-side compaction returns (`context_management` with
/// `compact_threshold`, or `/responses/compact`). The client sends it back in its input,
/// and may "drop items that came before the most recent compaction item"
/// (developers.openai.com, Compaction, "Server-side compaction"): the prompt the provider
/// samples, and caches, starts at the latest one.
pub const COMPACTION_ITEM: &str = "compaction";

/// The input item with which Codex signed in with ChatGPT asks for a compaction inline
/// (0.171.0, `remote_compaction_v2`): an ordinary streamed Responses request whose input is
/// the conversation with `{"type": "compaction_trigger"}` pushed last (codex-rs
/// `compact_remote_v2.rs`). The answer holds exactly one [`COMPACTION_ITEM`] ("remote
/// compaction v2 expected exactly one compaction output item") and ends with
/// `response.completed`.
pub const COMPACTION_TRIGGER_ITEM: &str = "compaction_trigger";

/// Whether a Responses request asks for a compaction inline: its last input item is a
/// [`COMPACTION_TRIGGER_ITEM`].
pub fn asks_compaction(request: &Value) -> bool {
    request
        .get("input")
        .and_then(Value::as_array)
        .and_then(|items| items.last())
        .and_then(|item| item.get("type"))
        .and_then(Value::as_str)
        == Some(COMPACTION_TRIGGER_ITEM)
}

/// Call outputs follow their calls (reasoning and further calls may sit between); a call
/// is followed by its output, another call or reasoning; reasoning by the model's output.
pub fn check_boundary(prev: Option<&MsgKind>, next: Option<&MsgKind>) -> Result<(), String> {
    let separated = "a tool result would be separated from its tool call";
    if let Some(n) = next.filter(|n| n.tool_result) {
        let ok = prev.is_some_and(|p| p.calls_tool || p.tool_result || p.item_type == "reasoning");
        if !ok {
            return Err(format!("{separated} (item `{}`)", n.item_type));
        }
    }
    if let (Some(p), Some(n)) = (prev, next) {
        if p.calls_tool && !(n.tool_result || n.calls_tool || n.item_type == "reasoning") {
            return Err(separated.into());
        }
        if p.item_type == "reasoning" && n.item_type == "message" && n.role != "assistant" {
            return Err("a reasoning item would be separated from its output".into());
        }
    }
    Ok(())
}

/// OpenAI Responses.
pub struct Responses {
    endpoint: Endpoint,
}

pub static RESPONSES: Responses = Responses {
    endpoint: Endpoint::Responses,
};

impl Api for Responses {
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
}

/// How an SSE event ends the stream, if it does.
pub fn terminal(event: &str) -> Option<Terminal> {
    match event {
        "response.completed" | "response.incomplete" => Some(Terminal::Done),
        "response.failed" | "error" => Some(Terminal::Error),
        _ => None,
    }
}

/// The event sent to the client when the upstream breaks off after its 200.
pub fn stream_break_event(message: &str) -> Bytes {
    let data = serde_json::json!({
        "type": "error", "code": "upstream_stream_interrupted",
        "message": message, "param": null,
    });
    Bytes::from(format!("event: error\ndata: {data}\n\n"))
}

/// The output items of a non-streaming response body.
pub fn assistant_from_body(v: &Value) -> Option<Value> {
    v.get("output").cloned()
}

/// The output items of the final `response.completed` (or `.incomplete`) event.
pub fn assistant_from_stream(events: &[(String, Bytes)]) -> Option<Value> {
    events.iter().rev().find_map(|(name, data)| {
        if matches!(name.as_str(), "response.completed" | "response.incomplete") {
            serde_json::from_slice::<Value>(data)
                .ok()?
                .pointer("/response/output")
                .cloned()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_told_apart() {
        let call = message_kind(br#"{"type":"function_call","call_id":"c"}"#);
        let out = message_kind(br#"{"type":"function_call_output","call_id":"c"}"#);
        let dev = message_kind(br#"{"type":"message","role":"developer","content":"x"}"#);
        let user = message_kind(br#"{"role":"user","content":"x"}"#);
        assert!(call.from_model && call.calls_tool);
        assert!(out.tool_result && !out.from_model);
        assert!(dev.is_instruction() && !dev.is_user_content());
        assert!(user.is_user_content());
        assert!(check_boundary(Some(&call), Some(&out)).is_ok());
        assert!(check_boundary(Some(&user), Some(&out)).is_err());
    }
}
