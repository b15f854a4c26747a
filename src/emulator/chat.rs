//! OpenAI Chat Completions replies: the completion object and its chunk sequence
//! (role chunk → deltas → finish chunk → usage chunk when asked → `[DONE]`).

use bytes::Bytes;
use serde_json::{json, Value};

use super::body::{sse, text_deltas};
use super::reply::Reply;
use super::turn::{json_pieces, Turn};

pub const FINGERPRINT: &str = "fp_cachet_emulator";

/// The non-streaming response body.
pub fn completion(turn: &Turn) -> Value {
    let (message, finish) = match turn.reply {
        Reply::Text(text) => (
            json!({"role": "assistant", "content": text, "refusal": null, "annotations": []}),
            "stop",
        ),
        Reply::ToolCall { name, input } => (
            json!({
                "role": "assistant", "content": null, "refusal": null, "annotations": [],
                "tool_calls": [{"id": turn.id("call_"), "type": "function",
                    "function": {"name": name, "arguments": Turn::arguments(input)}}],
            }),
            "tool_calls",
        ),
    };
    json!({
        "id": turn.id("chatcmpl-"),
        "object": "chat.completion",
        "created": turn.created,
        "model": turn.model,
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": turn.accounting.chat_usage_json(turn.output_tokens),
        "service_tier": turn.accounting.openai_service_tier(),
        "system_fingerprint": FINGERPRINT,
    })
}

/// The streaming chunks. With `include_usage`, every chunk has `"usage": null` and one
/// more chunk with empty `choices` carries the usage before `[DONE]`.
pub fn chunks(turn: &Turn, include_usage: bool) -> Vec<Bytes> {
    let chunk = |choices: Value| {
        let mut c = json!({
            "id": turn.id("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": turn.created,
            "model": turn.model,
            "service_tier": turn.accounting.openai_service_tier(),
            "system_fingerprint": FINGERPRINT,
            "choices": choices,
        });
        if include_usage {
            c["usage"] = Value::Null;
        }
        c
    };
    let choice = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]);
    let mut deltas = Vec::new();
    let finish = match turn.reply {
        Reply::Text(text) => {
            deltas.push(json!({"role": "assistant", "content": "", "refusal": null}));
            deltas.extend(text_deltas(text).into_iter().map(|t| json!({"content": t})));
            "stop"
        }
        Reply::ToolCall { name, input } => {
            deltas.push(json!({
                "role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"index": 0, "id": turn.id("call_"), "type": "function",
                    "function": {"name": name, "arguments": ""}}],
            }));
            for piece in json_pieces(&Turn::arguments(input)) {
                deltas
                    .push(json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}));
            }
            "tool_calls"
        }
    };
    let mut out: Vec<Bytes> = deltas
        .into_iter()
        .map(|d| sse(None, &chunk(choice(d, Value::Null))))
        .collect();
    out.push(sse(None, &chunk(choice(json!({}), json!(finish)))));
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = turn.accounting.chat_usage_json(turn.output_tokens);
        out.push(sse(None, &last));
    }
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}
