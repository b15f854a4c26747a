//! OpenAI Chat Completions (`POST /v1/chat/completions`): every rule cachet knows about
//! this API.
//!
//! - Messages: roles `system`/`developer` (leading ones are the system prompt), `user`,
//!   `assistant` (with `tool_calls`), `tool` (a tool's result).
//! - Cache key order: tools, then the messages (system first). No marker: the provider
//!   caches the longest matching prefix on its own.
//! - Stream: `data: [DONE]` ends an answer; usage arrives in a last chunk with
//!   `"choices": []` only when `stream_options.include_usage` is set.

mod request;

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{json, Value};

use super::message::Fields;
use super::{Api, MsgKind, Section, Terminal};
use crate::json::scan;
use crate::route::Endpoint;

/// OpenAI Chat Completions.
pub struct Chat;

pub static CHAT: Chat = Chat;

impl Api for Chat {
    fn endpoint(&self) -> Endpoint {
        Endpoint::Chat
    }

    fn terminal(&self, _event: &str, data: &[u8]) -> Option<Terminal> {
        terminal(data)
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

/// The order the provider's prompt cache keys on.
pub const CACHE_KEY_ORDER: [Section; 3] = [Section::Tools, Section::System, Section::Messages];

pub fn message_kind(b: &[u8]) -> MsgKind {
    let Some((fields, mut kind)) = Fields::with_role(b) else {
        return MsgKind::default();
    };
    kind.from_model = kind.role == "assistant";
    kind.tool_result = kind.role == "tool";
    kind.calls_tool = fields
        .get("tool_calls")
        .and_then(|calls| scan::elements(b, calls.start).ok())
        .is_some_and(|calls| !calls.is_empty());
    kind.other_content = !kind.tool_result;
    kind
}

/// Tool calls must be answered by `tool` messages right after them; `tool` messages may
/// follow each other.
pub fn check_boundary(prev: Option<&MsgKind>, next: Option<&MsgKind>) -> Result<(), String> {
    let separated = "a tool result would be separated from its tool call";
    if prev.is_some_and(|p| p.calls_tool) && !next.is_some_and(|n| n.tool_result) {
        return Err(separated.into());
    }
    if next.is_some_and(|n| n.tool_result) && !prev.is_some_and(|p| p.calls_tool || p.tool_result) {
        return Err(separated.into());
    }
    Ok(())
}

/// How an SSE data line ends the stream, if it does.
pub fn terminal(data: &[u8]) -> Option<Terminal> {
    (data == b"[DONE]").then_some(Terminal::Done)
}

/// The assistant message of a non-streaming response body.
pub fn assistant_from_body(v: &Value) -> Option<Value> {
    v.pointer("/choices/0/message").cloned()
}

/// The assistant message assembled from a stream's chunks.
pub fn assistant_from_stream(events: &[(String, Bytes)]) -> Option<Value> {
    let mut content = String::new();
    let mut saw_content = false;
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for (_, data) in events {
        let Ok(ev) = serde_json::from_slice::<Value>(data) else {
            continue;
        };
        let Some(delta) = ev.pointer("/choices/0/delta") else {
            continue;
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            content.push_str(text);
            saw_content = true;
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let entry = calls.entry(index).or_default();
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                entry.0 = id.to_string();
            }
            if let Some(name) = call.pointer("/function/name").and_then(Value::as_str) {
                entry.1.push_str(name);
            }
            if let Some(args) = call.pointer("/function/arguments").and_then(Value::as_str) {
                entry.2.push_str(args);
            }
        }
    }
    if !saw_content && calls.is_empty() {
        return None;
    }
    let mut message = json!({"role": "assistant", "content": if saw_content { Value::String(content) } else { Value::Null }});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .into_values()
            .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            .collect();
    }
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_arguments_are_joined() {
        let events: Vec<(String, Bytes)> = [
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]}"#,
            "[DONE]",
        ]
        .iter()
        .map(|d| (String::new(), Bytes::from(d.to_string())))
        .collect();
        let m = assistant_from_stream(&events).unwrap();
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert!(m["content"].is_null());
    }
}
