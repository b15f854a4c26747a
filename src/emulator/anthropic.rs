//! Anthropic Messages replies: the message object and its SSE event sequence
//! (message_start → content block events → message_delta → message_stop).

use bytes::Bytes;
use serde_json::{json, Value};

use super::body::{sse, text_deltas};
use super::reply::Reply;
use super::turn::{json_pieces, Turn};

fn content_and_stop(turn: &Turn) -> (Value, &'static str) {
    match turn.reply {
        Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Reply::ToolCall { name, input } => (
            json!({"type": "tool_use", "id": turn.id("toolu_"), "name": name, "input": input}),
            "tool_use",
        ),
    }
}

/// The non-streaming response body, with the cache `diagnostics` object when the request
/// asked for one.
pub fn message(turn: &Turn, diagnostics: Option<&Value>) -> Value {
    let (block, stop) = content_and_stop(turn);
    let mut message = json!({
        "id": turn.id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": [block],
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": turn.accounting.anthropic_usage_json(turn.output_tokens),
    });
    if let Some(d) = diagnostics {
        message["diagnostics"] = d.clone();
    }
    message
}

/// The streaming events, in the API's order (`diagnostics` rides on `message_start`).
pub fn events(turn: &Turn, diagnostics: Option<&Value>) -> Vec<Bytes> {
    let (block, stop) = content_and_stop(turn);
    let mut start = message(turn, diagnostics);
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"] = turn.accounting.anthropic_usage_json(1);
    let mut out = vec![sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": start}),
    )];
    let (empty_block, deltas) = match turn.reply {
        Reply::Text(text) => (
            json!({"type": "text", "text": ""}),
            text_deltas(text)
                .into_iter()
                .map(|t| json!({"type": "text_delta", "text": t}))
                .collect::<Vec<_>>(),
        ),
        Reply::ToolCall { input, .. } => {
            let mut b = block.clone();
            b["input"] = json!({});
            let pieces = json_pieces(&Turn::arguments(input));
            (
                b,
                pieces
                    .into_iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect(),
            )
        }
    };
    out.push(sse(
        Some("content_block_start"),
        &json!({"type": "content_block_start", "index": 0, "content_block": empty_block}),
    ));
    out.push(sse(Some("ping"), &json!({"type": "ping"})));
    for delta in deltas {
        out.push(sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ));
    }
    out.push(sse(
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": 0}),
    ));
    let a = turn.accounting;
    out.push(sse(
        Some("message_delta"),
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {
                "input_tokens": a.uncached(),
                "cache_creation_input_tokens": a.cache_write(),
                "cache_read_input_tokens": a.cache_read,
                "output_tokens": turn.output_tokens,
            },
        }),
    ));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}
