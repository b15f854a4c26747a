//! The assistant message of a response, assembled from what the usage tap saw (the whole
//! JSON body, or the stream's events), for `context(turn_end)` handlers. In the provider's
//! own shape: an Anthropic message, a Chat message, or the Responses output items.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::providers::Endpoint;
use crate::tap::TapResult;

/// The assistant message, or `None` when the response carried none (errors, cut streams
/// before any content).
pub fn assistant_message(endpoint: Endpoint, result: &TapResult) -> Option<Value> {
    if let Some(body) = &result.json_body {
        let v: Value = serde_json::from_slice(body).ok()?;
        return from_body(endpoint, &v);
    }
    if result.kept_events.is_empty() {
        return None;
    }
    match endpoint {
        Endpoint::Messages => anthropic_stream(&result.kept_events),
        Endpoint::Chat => chat_stream(&result.kept_events),
        Endpoint::Responses => responses_stream(&result.kept_events),
        _ => None,
    }
}

fn from_body(endpoint: Endpoint, v: &Value) -> Option<Value> {
    match endpoint {
        Endpoint::Messages => Some(json!({"role": "assistant", "content": v.get("content")?})),
        Endpoint::Chat => v.pointer("/choices/0/message").cloned(),
        Endpoint::Responses => v.get("output").cloned(),
        _ => None,
    }
}

fn parse(data: &[u8]) -> Option<Value> {
    serde_json::from_slice(data).ok()
}

fn anthropic_stream(events: &[(String, bytes::Bytes)]) -> Option<Value> {
    let mut blocks: BTreeMap<u64, Value> = BTreeMap::new();
    let mut partial_json: BTreeMap<u64, String> = BTreeMap::new();
    for (_, data) in events {
        let Some(ev) = parse(data) else { continue };
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

fn chat_stream(events: &[(String, bytes::Bytes)]) -> Option<Value> {
    let mut content = String::new();
    let mut saw_content = false;
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for (_, data) in events {
        let Some(ev) = parse(data) else { continue };
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

fn responses_stream(events: &[(String, bytes::Bytes)]) -> Option<Value> {
    events.iter().rev().find_map(|(name, data)| {
        if name.starts_with("response.")
            && matches!(name.as_str(), "response.completed" | "response.incomplete")
        {
            parse(data)?.pointer("/response/output").cloned()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tap::Outcome;
    use bytes::Bytes;

    fn result(events: &[(&str, &str)]) -> TapResult {
        TapResult {
            model: None,
            usage: None,
            outcome: Outcome::Complete,
            bytes: 0,
            events: events.len() as u64,
            json_body: None,
            kept_events: events
                .iter()
                .map(|(n, d)| (n.to_string(), Bytes::from(d.to_string())))
                .collect(),
        }
    }

    #[test]
    fn anthropic_text_and_tool_use_from_the_stream() {
        let r = result(&[
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
            ),
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"bash","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"cmd\":"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"ls\"}"}}"#,
            ),
        ]);
        let m = assistant_message(Endpoint::Messages, &r).unwrap();
        assert_eq!(m["content"][0]["text"], "Hello");
        assert_eq!(m["content"][1]["input"]["cmd"], "ls");
    }

    #[test]
    fn chat_tool_call_arguments_are_joined() {
        let r = result(&[
            (
                "",
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"bash","arguments":""}}]}}]}"#,
            ),
            (
                "",
                r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]}}]}"#,
            ),
            ("", "[DONE]"),
        ]);
        let m = assistant_message(Endpoint::Chat, &r).unwrap();
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert!(m["content"].is_null());
    }
}
