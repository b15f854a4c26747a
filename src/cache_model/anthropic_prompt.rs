//! An Anthropic Messages request flattened into the blocks the prompt cache sees.
//!
//! Order: tools → system → messages. One block per tool definition, per system text block
//! and per message content block (string content is one block). Each block carries the
//! cumulative key of the prefix ending with it, computed over a normalised form:
//! `cache_control` removed, object keys sorted (except inside `tool_use` input), `"X"` ≡ `[{"type":"text","text":"X"}]`, and Claude Code's
//! `x-anthropic-billing-header:` system block left out (its nonce changes every request).
//! Settings that invalidate a level are mixed into the chain where that level starts:
//! the model before tools; `tool_choice`, `thinking` and the presence of images before
//! messages.

use serde_json::{Map, Value};

use super::hash::{canonical_json, Chain, PrefixHash};
use super::tokens;
use crate::error::ApiError;
use crate::providers::anthropic;

/// Cache lifetime asked for by a marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ttl {
    FiveMinutes,
    OneHour,
}

impl Ttl {
    pub fn millis(self) -> u64 {
        match self {
            Ttl::FiveMinutes => 5 * 60 * 1000,
            Ttl::OneHour => 60 * 60 * 1000,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Ttl::FiveMinutes => "5m",
            Ttl::OneHour => "1h",
        }
    }
}

/// Which part of the prompt a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Tools,
    System,
    Messages,
}

#[derive(Debug, Clone)]
pub struct Block {
    pub level: Level,
    pub tokens: u64,
    /// Tokens of every block up to and including this one.
    pub cumulative_tokens: u64,
    /// Key of the prefix ending with this block.
    pub key: PrefixHash,
    /// The block's own `cache_control`, if any.
    pub marker: Option<Ttl>,
    /// Whether a marker may sit here (not thinking blocks, not empty text).
    pub markable: bool,
    /// Last block of its message (tool and system blocks count as their own message).
    pub ends_message: bool,
}

#[derive(Debug, Clone)]
pub struct Prompt {
    pub model: String,
    pub blocks: Vec<Block>,
    /// Input tokens outside the key (the billing header block): always billed uncached.
    pub unkeyed_tokens: u64,
    /// Top-level automatic `cache_control`, if the request has one.
    pub automatic: Option<Ttl>,
    /// Served in fast mode: what it caches and reads is apart from the standard speed's
    /// ("switching between fast and standard speed invalidates the prompt cache").
    pub fast: bool,
    /// Asked `inference_geo: "us"`: run, and answered, in the US only.
    pub us_only: bool,
}

impl Prompt {
    pub fn total_tokens(&self) -> u64 {
        self.keyed_tokens() + self.unkeyed_tokens
    }

    pub fn keyed_tokens(&self) -> u64 {
        self.blocks.last().map_or(0, |b| b.cumulative_tokens)
    }
}

/// Flatten a Messages (or count_tokens) request. Errors are 400s worded like the API's.
pub fn flatten(req: &Value) -> Result<Prompt, ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::invalid("request body must be a JSON object"))?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("model: Field required"))?;
    let messages = obj
        .get("messages")
        .ok_or_else(|| ApiError::invalid("messages: Field required"))?
        .as_array()
        .ok_or_else(|| ApiError::invalid("messages: Input should be a valid list"))?;
    let fast = crate::models::serves_fast(
        model,
        crate::providers::asks_fast(crate::route::Endpoint::Messages, req),
    );
    let mut chain = Chain::new(&["model", model]);
    if fast {
        chain.push(&["speed", anthropic::FAST_SPEED]);
    }
    let mut b = Builder {
        chain,
        blocks: Vec::new(),
        total: 0,
    };

    let tools = match obj.get("tools") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(t)) => t.as_slice(),
        Some(_) => return Err(ApiError::invalid("tools: Input should be a valid list")),
    };
    for (i, tool) in tools.iter().enumerate() {
        let canon = without_cache_control(tool);
        let marker = marker_of(tool, &format!("tools.{i}"))?;
        b.push(
            Level::Tools,
            &["tool", &canonical_json(&canon)],
            tokens::count(&canon.to_string()),
            marker,
            true,
        );
    }

    // Level boundary: settings that invalidate system and messages (none modelled beyond
    // the tools themselves), then the system blocks.
    b.chain.push(&["system"]);
    let mut unkeyed_tokens = 0;
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => {
            if anthropic::is_cache_neutral_system_text(s) {
                unkeyed_tokens += tokens::count(s);
            } else if !s.is_empty() {
                let canon = canonical_json(&text_block(s));
                b.push(
                    Level::System,
                    &["system", &canon],
                    tokens::count(s),
                    None,
                    true,
                );
            }
        }
        Some(Value::Array(parts)) => {
            for (i, part) in parts.iter().enumerate() {
                let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                if anthropic::is_cache_neutral_system_text(text) {
                    unkeyed_tokens += tokens::count(text);
                    continue;
                }
                let marker = marker_of(part, &format!("system.{i}"))?;
                let canon = canonical_json(&without_cache_control(part));
                b.push(
                    Level::System,
                    &["system", &canon],
                    block_tokens(part),
                    marker,
                    !text.is_empty(),
                );
            }
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "system: Input should be a valid string or list",
            ))
        }
    }

    // The provider ignores every block before the last compaction block.
    let (first_message, first_block) = anthropic::compaction_start(messages).unwrap_or((0, 0));
    let kept_messages = &messages[first_message..];

    // Level boundary: settings that invalidate messages only.
    let setting = |key: &str| obj.get(key).map(Value::to_string).unwrap_or_default();
    let has_images = if kept_messages
        .iter()
        .any(|m| contains_image(m.get("content")))
    {
        "images"
    } else {
        ""
    };
    b.chain.push(&[
        "messages",
        &setting("tool_choice"),
        &setting("thinking"),
        has_images,
    ]);

    // Thinking blocks the provider drops (by model and `context_management`) are not part
    // of the prompt: the messages after them no longer match earlier requests.
    let thinking_kept = super::thinking::kept_by_message(obj, messages, model);
    for (mi, message) in messages.iter().enumerate().skip(first_message) {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(format!("messages.{mi}.role: Field required")))?;
        match message.get("content") {
            Some(Value::String(s)) => {
                let canon = canonical_json(&text_block(s));
                b.push(
                    Level::Messages,
                    &["message", role, "first", &canon],
                    tokens::count(s),
                    None,
                    !s.is_empty(),
                );
                b.end_message();
            }
            Some(Value::Array(content)) => {
                let mut pushed = 0;
                for (ci, block) in content.iter().enumerate() {
                    if mi == first_message && ci < first_block {
                        continue;
                    }
                    if is_thinking(block) && !thinking_kept[mi] {
                        continue;
                    }
                    let path = format!("messages.{mi}.content.{ci}");
                    let marker = marker_of(block, &path)?;
                    let markable = is_markable(block);
                    if marker.is_some() && !markable {
                        return Err(ApiError::invalid(format!(
                            "{path}: cache_control cannot be set on this block (thinking or empty text)"
                        )));
                    }
                    let canon = canonical_json(&without_cache_control(block));
                    let first = if pushed == 0 { "first" } else { "" };
                    pushed += 1;
                    b.push(
                        Level::Messages,
                        &["message", role, first, &canon],
                        block_tokens(block),
                        marker,
                        markable,
                    );
                }
                if pushed > 0 {
                    b.end_message();
                }
            }
            _ => {
                return Err(ApiError::invalid(format!(
                    "messages.{mi}.content: Input should be a valid string or list"
                )))
            }
        }
    }

    let automatic = match obj.get("cache_control") {
        None | Some(Value::Null) => None,
        Some(cc) => Some(parse_ttl(cc, "cache_control")?),
    };
    Ok(Prompt {
        model: model.to_string(),
        blocks: b.blocks,
        unkeyed_tokens,
        automatic,
        fast,
        us_only: req.get("inference_geo").and_then(Value::as_str)
            == Some(anthropic::US_INFERENCE_GEO),
    })
}

struct Builder {
    chain: Chain,
    blocks: Vec<Block>,
    total: u64,
}

impl Builder {
    fn end_message(&mut self) {
        if let Some(last) = self.blocks.last_mut() {
            last.ends_message = true;
        }
    }

    fn push(
        &mut self,
        level: Level,
        parts: &[&str],
        tokens: u64,
        marker: Option<Ttl>,
        markable: bool,
    ) {
        self.total += tokens;
        let key = self.chain.push(parts);
        self.blocks.push(Block {
            level,
            tokens,
            cumulative_tokens: self.total,
            key,
            marker,
            markable,
            ends_message: level != Level::Messages,
        });
    }
}

fn text_block(s: &str) -> Value {
    let mut m = Map::new();
    m.insert("type".into(), Value::from("text"));
    m.insert("text".into(), Value::from(s));
    Value::Object(m)
}

/// The block with `cache_control` removed, here and in nested tool_result content.
fn without_cache_control(block: &Value) -> Value {
    match block {
        Value::Object(m) => {
            let mut out = Map::with_capacity(m.len());
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("cache_control", _) => {}
                    ("content", Value::String(s))
                        if m.get("type").and_then(Value::as_str) == Some("tool_result") =>
                    {
                        out.insert(k.clone(), Value::Array(vec![text_block(s)]));
                    }
                    ("content", Value::Array(items)) => {
                        out.insert(
                            k.clone(),
                            Value::Array(items.iter().map(without_cache_control).collect()),
                        );
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

fn marker_of(block: &Value, path: &str) -> Result<Option<Ttl>, ApiError> {
    match block.get("cache_control") {
        None | Some(Value::Null) => Ok(None),
        Some(cc) => parse_ttl(cc, &format!("{path}.cache_control")).map(Some),
    }
}

fn parse_ttl(cc: &Value, path: &str) -> Result<Ttl, ApiError> {
    if cc.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return Err(ApiError::invalid(format!(
            "{path}.type: Input should be 'ephemeral'"
        )));
    }
    match cc.get("ttl") {
        None | Some(Value::Null) => Ok(Ttl::FiveMinutes),
        Some(v) if v == "5m" => Ok(Ttl::FiveMinutes),
        Some(v) if v == "1h" => Ok(Ttl::OneHour),
        Some(_) => Err(ApiError::invalid(format!(
            "{path}.ttl: Input should be '5m' or '1h'"
        ))),
    }
}

fn is_thinking(block: &Value) -> bool {
    (block.get("type").and_then(Value::as_str))
        .is_some_and(crate::providers::anthropic::is_thinking_block)
}

fn is_markable(block: &Value) -> bool {
    if is_thinking(block) {
        return false;
    }
    match block.get("type").and_then(Value::as_str) {
        Some("text") => block
            .get("text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty()),
        _ => true,
    }
}

fn contains_image(content: Option<&Value>) -> bool {
    let Some(Value::Array(blocks)) = content else {
        return false;
    };
    blocks.iter().any(|b| {
        b.get("type").and_then(Value::as_str) == Some("image") || contains_image(b.get("content"))
    })
}

/// Tokens of one content block (see `tokens` for the rules).
pub fn block_tokens(block: &Value) -> u64 {
    let field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
    match block.get("type").and_then(Value::as_str) {
        Some("text") => tokens::count(field("text")),
        Some("thinking") => tokens::count(field("thinking")),
        Some(anthropic::COMPACTION_BLOCK) => tokens::count(field("content")),
        Some("image") => tokens::IMAGE_TOKENS,
        Some("document") => match block.pointer("/source/type").and_then(Value::as_str) {
            Some("text") => tokens::count(
                block
                    .pointer("/source/data")
                    .and_then(Value::as_str)
                    .unwrap_or(""),
            ),
            _ => tokens::IMAGE_TOKENS,
        },
        Some("tool_use") | Some("server_tool_use") => {
            let input = block.get("input").map(Value::to_string).unwrap_or_default();
            tokens::count(field("name")) + tokens::count(&input)
        }
        Some("tool_result") => match block.get("content") {
            Some(Value::String(s)) => tokens::count(s),
            Some(Value::Array(items)) => items.iter().map(block_tokens).sum(),
            _ => 0,
        },
        _ => tokens::count(&without_cache_control(block).to_string()),
    }
}
