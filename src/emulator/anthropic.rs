//! Anthropic Messages replies: the message object and its SSE event sequence
//! (message_start → content block events → message_delta → message_stop).

use bytes::Bytes;
use serde_json::{json, Value};

use super::body::{sse, text_deltas};
use super::reply::Reply;
use super::turn::{json_pieces, Turn};
use crate::providers::anthropic::COMPACTION_BLOCK;

fn content_and_stop(turn: &Turn) -> (Value, &'static str) {
    match turn.reply {
        Reply::Text(text) => (json!({"type": "text", "text": text}), "end_turn"),
        Reply::ToolCall { name, input } => (
            json!({"type": "tool_use", "id": turn.id("toolu_"), "name": name, "input": input}),
            "tool_use",
        ),
    }
}

/// The summary block a compaction puts first in the answer (platform.claude.com,
/// Compaction, "Working with compaction blocks").
fn compaction_block(turn: &Turn) -> Option<Value> {
    let compaction = turn.accounting.compaction.as_ref()?;
    Some(json!({"type": COMPACTION_BLOCK, "content": compaction.summary}))
}

/// The non-streaming response body, with the cache `diagnostics` object when the request
/// asked for one.
pub fn message(turn: &Turn, diagnostics: Option<&Value>) -> Value {
    let (block, stop) = content_and_stop(turn);
    let content: Vec<Value> = compaction_block(turn).into_iter().chain([block]).collect();
    let mut message = json!({
        "id": turn.id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": turn.accounting.anthropic_usage_json(turn.output_tokens),
    });
    if let Some(d) = diagnostics {
        message["diagnostics"] = d.clone();
    }
    if let Some(edits) = applied_edits(turn) {
        message["context_management"] = edits;
    }
    message
}

/// The answer's `context_management` when a `clear_tool_uses` edit cleared tool uses
/// (platform.claude.com, Context editing, "Context editing response").
fn applied_edits(turn: &Turn) -> Option<Value> {
    let cleared = turn.accounting.cleared?;
    Some(json!({"applied_edits": [{
        "type": crate::providers::anthropic::CLEAR_TOOL_USES_EDIT,
        "cleared_tool_uses": cleared.tool_uses,
        "cleared_input_tokens": cleared.input_tokens,
    }]}))
}

/// The streaming events, in the API's order (`diagnostics` rides on `message_start`).
pub fn events(turn: &Turn, diagnostics: Option<&Value>) -> Vec<Bytes> {
    let (block, stop) = content_and_stop(turn);
    let mut start = message(turn, diagnostics);
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    if let Some(fields) = start.as_object_mut() {
        // Streamed, the applied edits come in the final `message_delta`.
        fields.remove("context_management");
    }
    start["usage"] = turn.accounting.anthropic_usage_json(1);
    if let Some(fields) = start["usage"].as_object_mut() {
        fields.remove("iterations");
    }
    let mut out = vec![sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": start}),
    )];
    // A compaction streams as one block: its start, one delta with the whole summary, its
    // stop (platform.claude.com, Compaction, "Streaming").
    let mut index = 0;
    if let Some(Value::String(summary)) = compaction_block(turn).map(|b| b["content"].clone()) {
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": COMPACTION_BLOCK, "content": ""}}),
        ));
        out.push(sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "compaction_delta", "content": summary}}),
        ));
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": 0}),
        ));
        index = 1;
    }
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
        &json!({"type": "content_block_start", "index": index, "content_block": empty_block}),
    ));
    out.push(sse(Some("ping"), &json!({"type": "ping"})));
    for delta in deltas {
        out.push(sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": index, "delta": delta}),
        ));
    }
    out.push(sse(
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": index}),
    ));
    let a = turn.accounting;
    let mut usage = json!({
        "input_tokens": a.uncached(),
        "cache_creation_input_tokens": a.cache_write(),
        "cache_read_input_tokens": a.cache_read,
        "output_tokens": turn.output_tokens,
    });
    if let Some(iterations) = a.anthropic_usage_json(turn.output_tokens).get("iterations") {
        usage["iterations"] = iterations.clone();
    }
    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null},
        "usage": usage,
    });
    if let Some(edits) = applied_edits(turn) {
        delta["context_management"] = edits;
    }
    out.push(sse(Some("message_delta"), &delta));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}
