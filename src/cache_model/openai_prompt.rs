//! An OpenAI Chat Completions or Responses request rendered into the token stream its
//! prompt cache keys on, with the positions where content parts end and where explicit
//! `prompt_cache_breakpoint` markers sit.
//!
//! Order: tools, output schema, then instructions and input items (Responses) or messages
//! (Chat). Text is tokenized with the real BPE tokenizer; what the tokenizer does not see
//! (role and separator tokens around a message, images) becomes synthetic token ids derived
//! from the content, so a change anywhere changes the tokens from there on. Token counts
//! follow [`super::tokens`].

use serde_json::{Map, Value};

use super::hash::canonical_json;
use super::tokens::{OPENAI_IMAGE_TOKENS, OPENAI_MESSAGE_OVERHEAD};
use crate::error::ApiError;
use crate::route::Endpoint;

/// How explicit caching (GPT-5.6 and later) is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheMode {
    /// One implicit breakpoint (the end of the prompt) plus up to three explicit ones.
    #[default]
    Implicit,
    /// Only explicit breakpoints, up to four; none means no caching.
    Explicit,
}

#[derive(Debug, Clone, Default)]
pub struct OpenAiPrompt {
    pub model: String,
    /// The rendered prompt.
    pub tokens: Vec<u32>,
    /// Token positions where a tool, schema, message, item or content part ends
    /// (ascending, the last one is `tokens.len()`).
    pub part_ends: Vec<usize>,
    /// Token positions of explicit `prompt_cache_breakpoint` markers (ascending).
    pub breakpoints: Vec<usize>,
    pub mode: CacheMode,
    /// `prompt_cache_key` ("" when absent).
    pub cache_key: String,
    /// `prompt_cache_retention` and `prompt_cache_options.ttl`.
    pub retention: crate::providers::openai::Retention,
    /// Served in fast mode, whose cache is apart from the standard tier's.
    pub fast: bool,
    /// Served by flex processing, whose cache is apart from the other tiers'.
    pub flex: bool,
}

impl OpenAiPrompt {
    /// A chain of keys this prompt's cache entries or routing are found by, started with
    /// `start` (which names the model), then the tier when fast mode or flex serves it.
    pub fn chain(&self, start: &[&str]) -> super::hash::Chain {
        let mut chain = super::hash::Chain::new(start);
        if self.fast {
            chain.push(&["service_tier", crate::providers::openai::FAST_ANSWER]);
        } else if self.flex {
            chain.push(&["service_tier", crate::providers::openai::FLEX_TIER]);
        }
        chain
    }

    pub fn total_tokens(&self) -> u64 {
        self.tokens.len() as u64
    }
}

/// Render a Chat or Responses request. Errors are the 400s the API would answer.
pub fn render(endpoint: Endpoint, req: &Value) -> Result<OpenAiPrompt, ApiError> {
    let obj = req
        .as_object()
        .ok_or_else(|| ApiError::invalid("request body must be a JSON object"))?;
    let model = obj
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("you must provide a model parameter"))?;
    let mut r = Renderer::default();
    if let Some(Value::Array(tools)) = obj.get("tools") {
        for tool in tools {
            r.json(tool);
            r.end_part();
        }
    }
    let schema = match endpoint {
        Endpoint::Responses => obj.get("text").and_then(|t| t.get("format")),
        _ => obj.get("response_format"),
    };
    if let Some(schema) = schema.filter(|s| !s.is_null()) {
        r.json(schema);
        r.end_part();
    }
    match endpoint {
        Endpoint::Responses => {
            if let Some(instructions) = obj.get("instructions").and_then(Value::as_str) {
                r.overhead("instructions", "");
                r.text(instructions);
                r.end_part();
            }
            match obj.get("input") {
                Some(Value::String(s)) => {
                    r.overhead("user", "");
                    r.text(s);
                    r.end_part();
                }
                Some(Value::Array(items)) => {
                    for item in items {
                        r.item(item)?;
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
                r.item(message)?;
            }
        }
    }
    let mut part_ends = r.part_ends;
    part_ends.dedup();
    let (mode, ttl) = cache_options(endpoint, obj)?;
    Ok(OpenAiPrompt {
        model: model.to_string(),
        tokens: r.tokens,
        part_ends,
        breakpoints: r.breakpoints,
        mode,
        cache_key: obj
            .get("prompt_cache_key")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        retention: crate::providers::openai::Retention::of(
            obj.get("prompt_cache_retention").and_then(Value::as_str),
            ttl,
        ),
        fast: crate::models::serves_fast(model, crate::providers::asks_fast(endpoint, req)),
        flex: crate::models::serves_flex(model, crate::providers::openai::asks_flex(endpoint, req)),
    })
}

/// `prompt_cache_options`, validated like the SDK types say: mode implicit|explicit; ttl
/// "30m", or "12h" on Responses (openai-python 3.57: Responses `PromptCacheOptions.ttl`
/// `Literal["30m", "12h"]`, Chat's `Literal["30m"]`, "currently the only supported value").
fn cache_options(
    endpoint: Endpoint,
    obj: &Map<String, Value>,
) -> Result<(CacheMode, Option<&'static str>), ApiError> {
    use crate::providers::openai::{TTL_12H, TTL_30M};
    let Some(options) = obj.get("prompt_cache_options").filter(|o| !o.is_null()) else {
        return Ok((CacheMode::Implicit, None));
    };
    let mode = match options.get("mode").and_then(Value::as_str) {
        None | Some("implicit") => CacheMode::Implicit,
        Some("explicit") => CacheMode::Explicit,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid value for 'prompt_cache_options.mode': '{other}'. Supported values are: 'implicit' and 'explicit'."
            )))
        }
    };
    let ttl = match options.get("ttl") {
        None | Some(Value::Null) => None,
        Some(v) if v == TTL_30M => Some(TTL_30M),
        Some(v) if v == TTL_12H && endpoint == Endpoint::Responses => Some(TTL_12H),
        Some(v) => {
            let supported = if endpoint == Endpoint::Responses {
                "'30m' and '12h'"
            } else {
                "'30m'"
            };
            return Err(ApiError::invalid(format!(
                "Invalid value for 'prompt_cache_options.ttl': {v}. Supported values are: {supported}."
            )));
        }
    };
    Ok((mode, ttl))
}

#[derive(Default)]
struct Renderer {
    tokens: Vec<u32>,
    part_ends: Vec<usize>,
    breakpoints: Vec<usize>,
}

/// Synthetic ids sit above every real vocabulary id.
const SYNTHETIC: u32 = 0x8000_0000;

fn synthetic(parts: &[&str], i: u64) -> u32 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.update(i.to_le_bytes());
    let d = h.finalize();
    SYNTHETIC | (u32::from_le_bytes([d[0], d[1], d[2], d[3]]) & !SYNTHETIC)
}

impl Renderer {
    fn text(&mut self, text: &str) {
        self.tokens.extend(crate::tokens::encode(text));
    }

    fn json(&mut self, value: &Value) {
        self.text(&canonical_json(&without_breakpoints(value)));
    }

    fn end_part(&mut self) {
        self.part_ends.push(self.tokens.len());
    }

    /// The role and separator tokens around a message.
    fn overhead(&mut self, role: &str, name: &str) {
        for i in 0..OPENAI_MESSAGE_OVERHEAD {
            self.tokens.push(synthetic(&["message", role, name], i));
        }
    }

    /// A Chat message or a Responses input item.
    fn item(&mut self, item: &Value) -> Result<(), ApiError> {
        let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("");
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => {
                self.text(field("name"));
                self.text(field("arguments"));
            }
            Some("function_call_output") => match item.get("output") {
                Some(Value::String(s)) => self.text(s),
                Some(Value::Array(parts)) => self.parts(parts)?,
                Some(other) => self.json(other),
                None => {}
            },
            Some("message") | None => {
                self.overhead(field("role"), field("name"));
                match item.get("content") {
                    Some(Value::String(s)) => self.text(s),
                    Some(Value::Array(parts)) => self.parts(parts)?,
                    Some(Value::Null) | None => {}
                    Some(other) => self.json(other),
                }
                if let Some(calls) = item.get("tool_calls").filter(|c| !c.is_null()) {
                    self.json(calls);
                }
            }
            Some(_) => self.json(item),
        }
        self.end_part();
        Ok(())
    }

    /// Content parts, each its own part; a `prompt_cache_breakpoint` marks a part's end.
    fn parts(&mut self, parts: &[Value]) -> Result<(), ApiError> {
        for part in parts {
            match part.get("type").and_then(Value::as_str) {
                Some("text") | Some("input_text") | Some("output_text") => {
                    self.text(part.get("text").and_then(Value::as_str).unwrap_or(""))
                }
                Some("image_url") | Some("input_image") => {
                    let canon = canonical_json(&without_breakpoints(part));
                    for i in 0..OPENAI_IMAGE_TOKENS {
                        self.tokens.push(synthetic(&["image", &canon], i));
                    }
                }
                _ => self.json(part),
            }
            self.end_part();
            match part.get("prompt_cache_breakpoint") {
                None | Some(Value::Null) => {}
                Some(b) if b.get("mode").and_then(Value::as_str) == Some("explicit") => {
                    self.breakpoints.push(self.tokens.len());
                }
                Some(_) => {
                    return Err(ApiError::invalid(
                        "Invalid value for 'prompt_cache_breakpoint.mode': expected 'explicit'.",
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The value with every `prompt_cache_breakpoint` removed: a marker is not prompt text.
fn without_breakpoints(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "prompt_cache_breakpoint")
                .map(|(k, v)| (k.clone(), without_breakpoints(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_breakpoints).collect()),
        other => other.clone(),
    }
}
