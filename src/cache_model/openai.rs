//! OpenAI automatic prompt caching: prompts of 1024 tokens or more are stored whole; a
//! later prompt reads the longest stored prefix, rounded down to a multiple of 128
//! tokens. Entries are partitioned by model and `prompt_cache_key` and expire after an
//! idle period (each hit or write renews them), or after 24 hours with
//! `prompt_cache_retention: "24h"`.
//!
//! The prompt is a sequence of segments (tools, output schema, instructions, messages or
//! input items), each with a cumulative key; a prefix matches up to the last identical
//! segment. Agents only append between turns, so this equals token-level matching there.

use std::collections::HashMap;

use serde_json::Value;

use super::hash::{canonical_json, Chain, PrefixHash};
use super::tokens::{self, OPENAI_IMAGE_TOKENS, OPENAI_MESSAGE_OVERHEAD};
use super::{Accounting, Detail};
use crate::error::ApiError;
use crate::providers::Endpoint;

/// Shortest prompt that is cached.
pub const MIN_CACHED_TOKENS: u64 = 1024;
/// Hits come in steps of this many tokens.
pub const STEP_TOKENS: u64 = 128;
/// Lifetime with `prompt_cache_retention: "24h"`.
const EXTENDED_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

struct Segment {
    key: PrefixHash,
    cumulative_tokens: u64,
}

/// Stored prefixes: partition → boundary key → expiry.
#[derive(Debug, Clone, Default)]
pub struct OpenAiCache {
    partitions: HashMap<String, HashMap<PrefixHash, u64>>,
}

impl OpenAiCache {
    pub fn account(
        &mut self,
        endpoint: Endpoint,
        req: &Value,
        now_ms: u64,
        idle_ms: u64,
    ) -> Result<Accounting, ApiError> {
        let (model, segments) = segments(endpoint, req)?;
        let total = segments.last().map_or(0, |s| s.cumulative_tokens);
        // `prompt_cache_retention: "24h"` keeps this request's entries for a day.
        let keep_ms = match req.get("prompt_cache_retention").and_then(Value::as_str) {
            Some("24h") => idle_ms.max(EXTENDED_RETENTION_MS),
            _ => idle_ms,
        };
        let partition_name = req
            .get("prompt_cache_key")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let partition = self
            .partitions
            .entry(format!("{model}\u{0}{partition_name}"))
            .or_default();
        partition.retain(|_, expires| *expires > now_ms);

        let hit = segments
            .iter()
            .rposition(|s| partition.contains_key(&s.key));
        let matched = hit.map_or(0, |i| segments[i].cumulative_tokens);
        let cached = if matched >= MIN_CACHED_TOKENS {
            matched / STEP_TOKENS * STEP_TOKENS
        } else {
            0
        };
        if let Some(i) = hit {
            for s in &segments[..=i] {
                partition.insert(s.key, now_ms + keep_ms);
            }
        }
        if total >= MIN_CACHED_TOKENS {
            for s in &segments {
                partition.insert(s.key, now_ms + keep_ms);
            }
        }
        Ok(Accounting {
            input_tokens: total,
            cache_read: cached,
            cache_write_5m: 0,
            cache_write_1h: 0,
            detail: Detail {
                blocks: segments.len(),
                markers: Vec::new(),
                hit_block: hit,
                min_cacheable_tokens: MIN_CACHED_TOKENS,
                partition: Some(partition_name),
            },
        })
    }

    /// Input tokens of a request as the accounting counts them.
    pub fn count_tokens(endpoint: Endpoint, req: &Value) -> Result<u64, ApiError> {
        let (_, segments) = segments(endpoint, req)?;
        Ok(segments.last().map_or(0, |s| s.cumulative_tokens))
    }
}

fn segments(endpoint: Endpoint, req: &Value) -> Result<(String, Vec<Segment>), ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::invalid("request body must be a JSON object"))?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("you must provide a model parameter"))?;
    let mut out = Segments {
        chain: Chain::new(&["openai"]),
        list: Vec::new(),
        total: 0,
    };
    if let Some(Value::Array(tools)) = obj.get("tools") {
        for tool in tools {
            out.push(
                &["tool", &canonical_json(tool)],
                tokens::count(&tool.to_string()),
            );
        }
    }
    let schema = match endpoint {
        Endpoint::Responses => obj.get("text").and_then(|t| t.get("format")),
        _ => obj.get("response_format"),
    };
    if let Some(schema) = schema.filter(|s| !s.is_null()) {
        out.push(
            &["schema", &canonical_json(schema)],
            tokens::count(&schema.to_string()),
        );
    }
    match endpoint {
        Endpoint::Responses => {
            if let Some(instructions) = obj.get("instructions").and_then(Value::as_str) {
                out.push(
                    &["instructions", instructions],
                    OPENAI_MESSAGE_OVERHEAD + tokens::count(instructions),
                );
            }
            match obj.get("input") {
                Some(Value::String(s)) => {
                    out.push(&["user", s], OPENAI_MESSAGE_OVERHEAD + tokens::count(s))
                }
                Some(Value::Array(items)) => {
                    for item in items {
                        out.push(&["item", &canonical_json(item)], item_tokens(item));
                    }
                }
                None | Some(Value::Null) => {}
                Some(_) => {
                    return Err(ApiError::invalid(
                        "input: expected a string or an array of input items",
                    ))
                }
            }
        }
        _ => {
            let messages = obj
                .get("messages")
                .ok_or_else(|| ApiError::invalid("Missing required parameter: 'messages'."))?
                .as_array()
                .ok_or_else(|| {
                    ApiError::invalid("Invalid type for 'messages': expected an array.")
                })?;
            for message in messages {
                out.push(&["message", &canonical_json(message)], item_tokens(message));
            }
        }
    }
    Ok((model.to_string(), out.list))
}

struct Segments {
    chain: Chain,
    list: Vec<Segment>,
    total: u64,
}

impl Segments {
    fn push(&mut self, parts: &[&str], tokens: u64) {
        self.total += tokens;
        self.list.push(Segment {
            key: self.chain.push(parts),
            cumulative_tokens: self.total,
        });
    }
}

/// A chat message or a Responses input item.
fn item_tokens(item: &Value) -> u64 {
    let str_field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => {
            tokens::count(str_field("name")) + tokens::count(str_field("arguments"))
        }
        Some("function_call_output") => match item.get("output") {
            Some(Value::String(s)) => tokens::count(s),
            Some(other) => content_tokens(other),
            None => 0,
        },
        Some("message") | None => {
            let mut n = OPENAI_MESSAGE_OVERHEAD;
            if let Some(content) = item.get("content") {
                n += content_tokens(content);
            }
            if let Some(calls) = item.get("tool_calls").filter(|c| !c.is_null()) {
                n += tokens::count(&calls.to_string());
            }
            n
        }
        Some(_) => tokens::count(&item.to_string()),
    }
}

fn content_tokens(content: &Value) -> u64 {
    match content {
        Value::String(s) => tokens::count(s),
        Value::Array(parts) => parts.iter().map(part_tokens).sum(),
        Value::Null => 0,
        other => tokens::count(&other.to_string()),
    }
}

fn part_tokens(part: &Value) -> u64 {
    match part.get("type").and_then(Value::as_str) {
        Some("text") | Some("input_text") | Some("output_text") => {
            tokens::count(part.get("text").and_then(Value::as_str).unwrap_or(""))
        }
        Some("image_url") | Some("input_image") => OPENAI_IMAGE_TOKENS,
        _ => tokens::count(&part.to_string()),
    }
}
