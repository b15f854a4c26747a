//! OpenAI Responses replies: the response object and its event sequence, each event with
//! `type` as its SSE name and a `sequence_number` (response.created → … →
//! response.completed).

use bytes::Bytes;
use serde_json::{json, Value};

use super::body::{sse, text_deltas};
use super::reply::Reply;
use super::turn::{json_pieces, Turn};

/// The output item, complete (`done`) or as first announced.
fn item(turn: &Turn, done: bool) -> Value {
    let status = if done { "completed" } else { "in_progress" };
    if turn.compaction {
        return compaction_item(turn);
    }
    match turn.reply {
        Reply::Text(text) => json!({
            "id": turn.id("msg_"),
            "type": "message",
            "status": status,
            "content": if done { json!([output_text(text)]) } else { json!([]) },
            "role": "assistant",
        }),
        Reply::ToolCall { name, input } => json!({
            "id": turn.id("fc_"),
            "type": "function_call",
            "status": status,
            "arguments": if done { Turn::arguments(input) } else { String::new() },
            "call_id": turn.id("call_"),
            "name": name,
        }),
    }
}

fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text})
}

/// The conversation the response belongs to, as an object (`null` without one).
fn conversation(request: &Value) -> Value {
    crate::providers::openai_responses::conversation_of(request)
        .map_or(Value::Null, |id| json!({"id": id}))
}

/// The prompt-caching options applied (openai-python `Response.prompt_cache_options`,
/// "Supported for `gpt-5.6` and later models"): the request's, with the defaults `implicit`
/// and `30m`; `null` on older models. The request was validated when it was accounted.
fn applied_cache_options(request: &Value, model: &str) -> Value {
    if !crate::cache_model::takes_breakpoints(model) {
        return Value::Null;
    }
    let asked = |key: &str| {
        request
            .get("prompt_cache_options")
            .and_then(|o| o.get(key))
            .filter(|v| !v.is_null())
            .cloned()
    };
    json!({
        "mode": asked("mode").unwrap_or_else(|| json!("implicit")),
        "ttl": asked("ttl").unwrap_or_else(|| json!(crate::providers::openai::TTL_30M)),
        "comparison_response_id": asked("comparison_response_id").unwrap_or(Value::Null),
    })
}

/// The response object; `done` decides status, output and usage.
pub fn response(turn: &Turn, done: bool) -> Value {
    let req = turn.request;
    let echo = |key: &str, default: Value| req.get(key).cloned().unwrap_or(default);
    json!({
        "id": turn.id("resp_"),
        "object": "response",
        "created_at": turn.created,
        "status": if done { "completed" } else { "in_progress" },
        "background": false,
        "error": null,
        "incomplete_details": null,
        "instructions": echo("instructions", Value::Null),
        "max_output_tokens": echo("max_output_tokens", Value::Null),
        "model": turn.model,
        "output": if done && !turn.warmup { json!([item(turn, true)]) } else { json!([]) },
        "parallel_tool_calls": echo("parallel_tool_calls", json!(true)),
        "previous_response_id": echo("previous_response_id", Value::Null),
        "conversation": conversation(req),
        "prompt_cache_key": echo("prompt_cache_key", Value::Null),
        "prompt_cache_options": applied_cache_options(req, turn.model),
        "prompt_cache_diagnostics": turn.diagnostics.filter(|_| done),
        "reasoning": echo("reasoning", json!({"effort": null, "summary": null})),
        "service_tier": turn.accounting.openai_service_tier(),
        "store": echo("store", json!(true)),
        "temperature": echo("temperature", json!(1.0)),
        "text": echo("text", json!({"format": {"type": "text"}})),
        "tool_choice": echo("tool_choice", json!("auto")),
        "tools": echo("tools", json!([])),
        "top_p": echo("top_p", json!(1.0)),
        "truncation": echo("truncation", json!("disabled")),
        "usage": if done { turn.accounting.responses_usage_json(turn.output_tokens) } else { Value::Null },
        "user": null,
        "metadata": echo("metadata", json!({})),
    })
}

/// The opaque compaction item: the reply's text, encoded, not encrypted (opaque to the
/// client all the same). It has no parts to stream: it is announced and done whole.
fn compaction_item(turn: &Turn) -> Value {
    use base64::Engine;
    let summary = match turn.reply {
        Reply::Text(text) => text.as_str(),
        Reply::ToolCall { name, .. } => name.as_str(),
    };
    json!({
        "id": turn.id("cmp_"),
        "type": crate::providers::openai_responses::COMPACTION_ITEM,
        "encrypted_content": base64::engine::general_purpose::STANDARD.encode(summary),
    })
}

/// A compacted conversation (`POST /v1/responses/compact`): "all user messages, followed by
/// a single compaction item" (openai-python, `CompactedResponse.output`).
pub fn compaction(turn: &Turn) -> Value {
    let user_message =
        |content: Value| json!({"type": "message", "role": "user", "content": content});
    let mut output: Vec<Value> = match turn.request.get("input") {
        Some(Value::String(text)) => {
            vec![user_message(json!([{"type": "input_text", "text": text}]))]
        }
        Some(Value::Array(items)) => items
            .iter()
            .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
            .filter_map(|item| item.get("content").cloned().map(user_message))
            .collect(),
        _ => Vec::new(),
    };
    output.push(compaction_item(turn));
    json!({
        "id": turn.id("resp_"),
        "object": "response.compaction",
        "created_at": turn.created,
        "output": output,
        "usage": turn.accounting.responses_usage_json(turn.output_tokens),
    })
}

/// The streaming events, as SSE frames.
pub fn events(turn: &Turn) -> Vec<Bytes> {
    event_payloads(turn)
        .into_iter()
        .map(|p| {
            let name = p["type"].as_str().unwrap_or("message").to_string();
            sse(Some(&name), &p)
        })
        .collect()
}

/// The streaming events' JSON, `type` first and each with its `sequence_number` (a
/// socket sends each as a message).
pub fn event_payloads(turn: &Turn) -> Vec<Value> {
    if turn.warmup {
        return numbered(vec![
            json!({"type": "response.created", "response": response(turn, false)}),
            json!({"type": "response.in_progress", "response": response(turn, false)}),
            json!({"type": "response.completed", "response": response(turn, true)}),
        ]);
    }
    let mut payloads: Vec<Value> = vec![
        json!({"type": "response.created", "response": response(turn, false)}),
        json!({"type": "response.in_progress", "response": response(turn, false)}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item(turn, false)}),
    ];
    let done_item = item(turn, true);
    let item_id = done_item["id"].clone();
    match turn.reply {
        _ if turn.compaction => {}
        Reply::Text(text) => {
            let part = |t: &str| json!({"item_id": item_id, "output_index": 0, "content_index": 0, "part": output_text(t)});
            let mut added = part("");
            added["type"] = json!("response.content_part.added");
            payloads.push(added);
            for delta in text_deltas(text) {
                payloads.push(json!({
                    "type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "delta": delta, "logprobs": [],
                }));
            }
            payloads.push(json!({
                "type": "response.output_text.done", "item_id": item_id, "output_index": 0,
                "content_index": 0, "text": text, "logprobs": [],
            }));
            let mut done = part(text);
            done["type"] = json!("response.content_part.done");
            payloads.push(done);
        }
        Reply::ToolCall { name, input } => {
            let arguments = Turn::arguments(input);
            for piece in json_pieces(&arguments) {
                payloads.push(json!({
                    "type": "response.function_call_arguments.delta", "item_id": item_id,
                    "output_index": 0, "delta": piece,
                }));
            }
            payloads.push(json!({
                "type": "response.function_call_arguments.done", "item_id": item_id,
                "output_index": 0, "name": name, "arguments": arguments,
            }));
        }
    }
    payloads
        .push(json!({"type": "response.output_item.done", "output_index": 0, "item": done_item}));
    payloads.push(json!({"type": "response.completed", "response": response(turn, true)}));
    numbered(payloads)
}

/// Events with their `sequence_number`s.
fn numbered(mut payloads: Vec<Value>) -> Vec<Value> {
    for (seq, p) in payloads.iter_mut().enumerate() {
        p["sequence_number"] = json!(seq);
    }
    payloads
}
