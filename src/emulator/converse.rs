//! Bedrock's Converse and ConverseStream as the emulator serves them for Claude models: the
//! Converse body is read as the Messages body it stands for (text, tool-use and tool-result
//! blocks; a `cachePoint` block marks the block before it, as `cache_control` would: "a
//! cache checkpoint ... caches everything before it", Bedrock prompt-caching docs), answered
//! and accounted by the Messages rules, and the answer written back in Converse's shape:
//! `output.message`, `stopReason`, `usage` (`inputTokens` outside the cache,
//! `cacheReadInputTokens`, `cacheWriteInputTokens`), or the stream's events (`messageStart`,
//! `contentBlockStart`/`Delta`/`Stop`, `messageStop`, `metadata`) as an AWS event stream.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::{json, Map, Value};

use super::generate::{answer, Asked};
use super::routes::Shared;
use crate::error::ApiError;
use crate::http_serve::{full, ResponseBody};
use crate::providers::bedrock::{eventstream, Operation};
use crate::route::{Endpoint, Provider};

/// Answer a Converse request for `model`.
pub(super) async fn respond(
    shared: &Shared,
    seq: u64,
    request_id: &str,
    headers: &HeaderMap,
    model: &str,
    op: Operation,
    body: &[u8],
) -> Result<Response<ResponseBody>, ApiError> {
    let converse: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("Malformed input request: {e}")))?;
    let request = to_messages(&converse, model)?;
    let asked = Asked::of(headers)?;
    let (endpoint, provider) = (Endpoint::Messages, Provider::Bedrock);
    let resp = answer(
        shared,
        endpoint,
        provider,
        (seq, request_id),
        asked,
        request,
    )
    .await?;
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|_| ApiError::invalid("the answer was cut"))?
        .to_bytes();
    let message: Value =
        serde_json::from_slice(&bytes).map_err(|_| ApiError::invalid("the answer is not JSON"))?;
    let (body, content_type) = match op.stream {
        true => (events(&message), eventstream::CONTENT_TYPE),
        false => (Bytes::from(whole(&message).to_string()), "application/json"),
    };
    let mut resp = Response::new(full(body));
    *resp.status_mut() = StatusCode::OK;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    if let Ok(id) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert("x-amzn-requestid", id);
    }
    Ok(resp)
}

/// The marker a `cachePoint` block asks for (`ttl` "5m" or "1h").
fn marker(point: &Value) -> Value {
    match point.get("ttl").and_then(Value::as_str) {
        Some(ttl) => json!({"type": "ephemeral", "ttl": ttl}),
        None => json!({"type": "ephemeral"}),
    }
}

/// Converse content blocks as Anthropic blocks, a `cachePoint` marking the block before it.
fn blocks(content: &[Value]) -> Result<Vec<Value>, ApiError> {
    let mut out: Vec<Value> = Vec::new();
    for block in content {
        if let Some(point) = block.get("cachePoint") {
            let Some(last) = out.last_mut() else {
                return Err(ApiError::invalid(
                    "A cachePoint block must follow the content it caches",
                ));
            };
            last["cache_control"] = marker(point);
            continue;
        }
        out.push(block_of(block)?);
    }
    Ok(out)
}

fn block_of(block: &Value) -> Result<Value, ApiError> {
    if let Some(text) = block.get("text") {
        return Ok(json!({"type": "text", "text": text}));
    }
    if let Some(tool) = block.get("toolUse") {
        return Ok(
            json!({"type": "tool_use", "id": tool["toolUseId"], "name": tool["name"],
            "input": tool.get("input").cloned().unwrap_or(json!({}))}),
        );
    }
    if let Some(result) = block.get("toolResult") {
        let content: Vec<Value> = result
            .get("content")
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .map(|p| match (p.get("text"), p.get("json")) {
                        (Some(t), _) => json!({"type": "text", "text": t}),
                        (_, Some(j)) => json!({"type": "text", "text": j.to_string()}),
                        _ => json!({"type": "text", "text": p.to_string()}),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut out =
            json!({"type": "tool_result", "tool_use_id": result["toolUseId"], "content": content});
        if result.get("status").and_then(Value::as_str) == Some("error") {
            out["is_error"] = json!(true);
        }
        return Ok(out);
    }
    if let Some(reasoning) = block.get("reasoningContent") {
        let text = reasoning
            .pointer("/reasoningText/text")
            .cloned()
            .unwrap_or(json!(""));
        let signature = reasoning.pointer("/reasoningText/signature").cloned();
        return Ok(
            json!({"type": "thinking", "thinking": text, "signature": signature.unwrap_or(json!(""))}),
        );
    }
    // Images, documents: their bytes count as text would.
    Ok(json!({"type": "text", "text": block.to_string()}))
}

/// The Messages request a Converse request stands for.
fn to_messages(converse: &Value, model: &str) -> Result<Value, ApiError> {
    let messages = converse
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("messages: required"))?;
    let mut history = Vec::with_capacity(messages.len());
    for m in messages {
        let content = m.get("content").and_then(Value::as_array).ok_or_else(|| {
            ApiError::invalid("messages.content: a list of content blocks is required")
        })?;
        history.push(json!({"role": m["role"], "content": blocks(content)?}));
    }
    let mut request = Map::new();
    request.insert("model".into(), json!(model));
    let max_tokens = converse
        .pointer("/inferenceConfig/maxTokens")
        .and_then(Value::as_u64)
        .unwrap_or(4096);
    request.insert("max_tokens".into(), json!(max_tokens));
    if let Some(system) = converse.get("system").and_then(Value::as_array) {
        request.insert("system".into(), Value::Array(blocks(system)?));
    }
    if let Some(tools) = converse
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
    {
        let mut out: Vec<Value> = Vec::new();
        for tool in tools {
            if let Some(point) = tool.get("cachePoint") {
                if let Some(last) = out.last_mut() {
                    last["cache_control"] = marker(point);
                }
                continue;
            }
            let spec = tool.get("toolSpec").unwrap_or(tool);
            out.push(json!({"name": spec["name"], "description": spec.get("description").cloned().unwrap_or(json!("")),
                "input_schema": spec.pointer("/inputSchema/json").cloned().unwrap_or(json!({"type": "object"}))}));
        }
        request.insert("tools".into(), Value::Array(out));
    }
    if let Some(thinking) = converse.pointer("/additionalModelRequestFields/thinking") {
        request.insert("thinking".into(), thinking.clone());
    }
    request.insert("messages".into(), Value::Array(history));
    request.insert("stream".into(), json!(false));
    Ok(Value::Object(request))
}

/// Converse's `usage` of a Messages answer's.
fn usage(message: &Value) -> Value {
    let n = |k: &str| message["usage"][k].as_u64().unwrap_or(0);
    let (input, read, write, output) = (
        n("input_tokens"),
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
        n("output_tokens"),
    );
    json!({"inputTokens": input, "outputTokens": output,
        "totalTokens": input + read + write + output,
        "cacheReadInputTokens": read, "cacheWriteInputTokens": write})
}

/// The content of a Messages answer as Converse blocks.
fn content(message: &Value) -> Vec<Value> {
    let blocks = message["content"].as_array().cloned().unwrap_or_default();
    blocks
        .iter()
        .filter_map(|b| match b["type"].as_str()? {
            "text" => Some(json!({"text": b["text"]})),
            "tool_use" => Some(
                json!({"toolUse": {"toolUseId": b["id"], "name": b["name"], "input": b["input"]}}),
            ),
            _ => None,
        })
        .collect()
}

fn whole(message: &Value) -> Value {
    json!({
        "output": {"message": {"role": "assistant", "content": content(message)}},
        "stopReason": message["stop_reason"],
        "usage": usage(message),
        "metrics": {"latencyMs": 0},
    })
}

/// The ConverseStream events of a Messages answer, framed.
fn events(message: &Value) -> Bytes {
    let mut out = Vec::new();
    let mut push = |kind: &str, payload: Value| {
        out.extend_from_slice(&eventstream::event_frame(
            kind,
            payload.to_string().as_bytes(),
        ));
    };
    push("messageStart", json!({"role": "assistant"}));
    for (i, block) in content(message).iter().enumerate() {
        if let Some(text) = block.get("text") {
            push(
                "contentBlockDelta",
                json!({"contentBlockIndex": i, "delta": {"text": text}}),
            );
        } else if let Some(tool) = block.get("toolUse") {
            push(
                "contentBlockStart",
                json!({"contentBlockIndex": i,
                "start": {"toolUse": {"toolUseId": tool["toolUseId"], "name": tool["name"]}}}),
            );
            push(
                "contentBlockDelta",
                json!({"contentBlockIndex": i,
                "delta": {"toolUse": {"input": tool["input"].to_string()}}}),
            );
        }
        push("contentBlockStop", json!({"contentBlockIndex": i}));
    }
    push("messageStop", json!({"stopReason": message["stop_reason"]}));
    push(
        "metadata",
        json!({"usage": usage(message), "metrics": {"latencyMs": 0}}),
    );
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cachePoint marks what comes before it: the system block, the tool, the block of the
    /// last message (pi's Converse requests place them so).
    #[test]
    fn cache_points_mark_the_block_before_them() {
        let converse = json!({
            "system": [{"text": "You are pi."}, {"cachePoint": {"type": "default"}}],
            "messages": [{"role": "user", "content": [{"text": "hi"}, {"cachePoint": {"type": "default", "ttl": "1h"}}]}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "read", "inputSchema": {"json": {"type": "object"}}}}, {"cachePoint": {"type": "default"}}]},
            "inferenceConfig": {"maxTokens": 100},
        });
        let m = to_messages(&converse, "us.anthropic.claude-opus-5-5").unwrap();
        assert_eq!(
            m["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(m["messages"][0]["content"][0]["cache_control"]["ttl"], "1h");
        assert_eq!(m["tools"][0]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(m["max_tokens"], 100);
        let lone = json!({"messages": [{"role": "user", "content": [{"cachePoint": {"type": "default"}}]}]});
        assert!(to_messages(&lone, "m").is_err());
    }

    #[test]
    fn the_stream_ends_with_metadata_carrying_the_usage() {
        let message = json!({"content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"path": "x"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7, "output_tokens": 5}});
        let mut reader = eventstream::Reader::default();
        let mut names = Vec::new();
        let mut last = Bytes::new();
        reader.feed(&events(&message), |f| {
            if let eventstream::Frame::Event { kind, payload } = f {
                names.push(kind);
                last = payload;
            }
        });
        assert_eq!(names.first().map(String::as_str), Some("messageStart"));
        assert_eq!(names.last().map(String::as_str), Some("metadata"));
        let u = crate::providers::bedrock::converse::usage_of(&last).unwrap();
        assert_eq!(
            (u.uncached, u.cache_read, u.cache_write, u.output),
            (3, 100, 7, 5)
        );
    }
}
