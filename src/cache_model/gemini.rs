//! Gemini API implicit caching (`generateContent`).
//!
//! "Implicit caching is enabled by default for all Gemini 2.5 and newer models": a request
//! whose prompt starts with the prefix of an earlier one reads it, at no write fee, and
//! the reads are reported as `usageMetadata.cachedContentTokenCount`, counted inside
//! `promptTokenCount`. Nothing is cached below the model's minimum input token count
//! (ai.google.dev/gemini-api/docs/caching, 2026-10: 2,048 for Gemini 2.5 Flash and Pro,
//! 4,096 for Gemini 3 and later; `min_cacheable_tokens` in `data/models.toml`).
//!
//! How long an implicit entry lives and where a match may end are not documented ("send
//! requests with similar prefix in a short amount of time"): the model keeps an entry
//! [`IMPLICIT_IDLE_MS`] after its last use and reads the longest stored prefix that ends
//! where a part ends (a system part, a `Tool`, a content's part). Order: the system
//! instruction, the tools, then the contents (as a `CachedContent` holds them).
//! Tokens: text through the tokenizer of [`super::tokens`], an inline image a fixed
//! [`IMAGE_TOKENS`], any other part its compact JSON, plus [`CONTENT_OVERHEAD`] per content.
//! A part's `thoughtSignature` is no part of the prefix
//! ([`crate::providers::gemini::THOUGHT_SIGNATURE`]).

use std::collections::HashMap;

use serde_json::Value;

use super::hash::{canonical_json, Chain, PrefixHash};
use super::{Accounting, Detail};
use crate::error::ApiError;

/// How long an implicit entry is kept after its last use (not documented by Google).
pub const IMPLICIT_IDLE_MS: u64 = 5 * 60 * 1000;
/// The minimum of a Gemini model the table does not know: the newest models' figure.
pub const FALLBACK_MIN_TOKENS: u64 = 4096;
/// An inline image ("258 tokens if both dimensions <= 384 pixels", the tokens guide; a
/// larger one is tiled by as many).
pub const IMAGE_TOKENS: u64 = 258;
/// Role and turn tokens around each content.
pub const CONTENT_OVERHEAD: u64 = 3;

/// A rendered prompt: the key and the running token count at each part's end.
#[derive(Debug, Default)]
pub struct GeminiPrompt {
    pub ends: Vec<(PrefixHash, u64)>,
}

impl GeminiPrompt {
    pub fn total_tokens(&self) -> u64 {
        self.ends.last().map_or(0, |(_, n)| *n)
    }
}

/// The implicit caches of one account: prefix keys and their expiry.
#[derive(Debug, Clone, Default)]
pub struct GeminiCache {
    entries: HashMap<PrefixHash, u64>,
    /// The explicit caches (`cachedContents`).
    pub explicit: super::gemini_explicit::ExplicitCaches,
}

impl GeminiCache {
    /// Account a `generateContent` request for `model` (named by its path) at `now_ms`.
    pub fn account(
        &mut self,
        model: &str,
        req: &Value,
        now_ms: u64,
    ) -> Result<Accounting, ApiError> {
        // A request against an explicit cache reads exactly the cache (its own contents
        // are billed in full, even when they repeat the cache's).
        if field(
            req,
            crate::providers::gemini::CACHED_CONTENT,
            "cached_content",
        )
        .is_some()
        {
            return self.explicit.account(model, req, now_ms);
        }
        let prompt = render(model, req)?;
        let min = min_tokens(model);
        self.entries.retain(|_, expires| *expires > now_ms);
        let hit = prompt
            .ends
            .iter()
            .rposition(|(key, n)| *n >= min && self.entries.contains_key(key));
        let read = hit.map_or(0, |i| prompt.ends[i].1);
        let expires = now_ms + IMPLICIT_IDLE_MS;
        for (key, n) in &prompt.ends {
            if *n >= min {
                self.entries.insert(*key, expires);
            }
        }
        Ok(Accounting {
            input_tokens: prompt.total_tokens(),
            cache_read: read,
            cache_write_5m: 0,
            cache_write_1h: 0,
            cache_write_30m: 0,
            cache_write_12h: 0,
            storage_token_secs: 0,
            detail: Detail {
                blocks: prompt.ends.len(),
                markers: Vec::new(),
                hit_block: hit,
                min_cacheable_tokens: min,
                partition: None,
            },
            compaction: None,
            cleared: None,
            fast: false,
            flex: false,
            us_only: false,
        })
    }
}

/// The model's minimum for implicit caching.
pub fn min_tokens(model: &str) -> u64 {
    crate::models::lookup(model)
        .filter(|m| m.provider == "gemini")
        .map_or(FALLBACK_MIN_TOKENS, |m| m.min_cacheable_tokens)
}

/// Render a request (already checked by the emulator) into its part ends.
pub fn render(model: &str, req: &Value) -> Result<GeminiPrompt, ApiError> {
    let mut chain = Chain::new(&["gemini", model]);
    let mut tokens = 0u64;
    let mut ends = Vec::new();
    let mut end = |chain: &mut Chain, what: &str, body: &str, n: u64, tokens: &mut u64| {
        *tokens += n;
        ends.push((chain.push(&[what, body]), *tokens));
    };
    let system = field(req, "systemInstruction", "system_instruction");
    for part in parts_of(system) {
        let (body, n) = part_tokens(part);
        end(&mut chain, "system", &body, n, &mut tokens);
    }
    if let Some(Value::Array(tools)) = req.get("tools") {
        for tool in tools {
            let body = canonical_json(tool);
            let n = crate::tokens::count(&body);
            end(&mut chain, "tool", &body, n, &mut tokens);
        }
    }
    let Some(Value::Array(contents)) = req.get("contents") else {
        return Err(ApiError::invalid(
            "* GenerateContentRequest.contents: contents is not specified\n",
        ));
    };
    for content in contents {
        let role = content
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        let mut overhead = CONTENT_OVERHEAD;
        for part in parts_of(Some(content)) {
            let (body, n) = part_tokens(part);
            end(&mut chain, role, &body, n + overhead, &mut tokens);
            overhead = 0;
        }
    }
    Ok(GeminiPrompt { ends })
}

/// A field by its JSON name or its proto name (the API takes both).
pub(super) fn field<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

fn parts_of(content: Option<&Value>) -> &[Value] {
    match content.and_then(|c| c.get("parts")) {
        Some(Value::Array(parts)) => parts,
        _ => &[],
    }
}

/// A part's canonical text (its identity in the prefix) and its tokens.
fn part_tokens(part: &Value) -> (String, u64) {
    let mut part = part.clone();
    if let Some(fields) = part.as_object_mut() {
        fields.remove(crate::providers::gemini::THOUGHT_SIGNATURE);
    }
    let body = canonical_json(&part);
    let n = match (part.get("text"), field(&part, "inlineData", "inline_data")) {
        (Some(Value::String(text)), _) => crate::tokens::count(text),
        (_, Some(_)) => IMAGE_TOKENS,
        _ => crate::tokens::count(&body),
    };
    (body, n)
}

/// `countTokens`: the prompt's tokens, from `contents` or a whole `generateContentRequest`.
pub fn count_tokens(model: &str, req: &Value) -> Result<u64, ApiError> {
    let inner = field(req, "generateContentRequest", "generate_content_request").unwrap_or(req);
    Ok(render(model, inner)?.total_tokens())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn long(words: usize) -> String {
        (0..words).map(|i| format!("word{i} ")).collect()
    }

    fn request(system: &str, turns: &[&str]) -> Value {
        let contents: Vec<Value> = turns
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let role = if i % 2 == 0 { "user" } else { "model" };
                json!({"role": role, "parts": [{"text": t}]})
            })
            .collect();
        json!({"systemInstruction": {"parts": [{"text": system}]}, "contents": contents})
    }

    /// The caching guide: a request that starts with an earlier request's prefix reads it,
    /// and nothing is read below the model's minimum (2,048 for Gemini 2.5 Flash).
    #[test]
    fn a_grown_conversation_reads_its_earlier_prompt_above_the_minimum_only() {
        let mut cache = GeminiCache::default();
        let model = "gemini-2.5-flash";
        assert_eq!(min_tokens(model), 2048);
        let system = long(3000);
        let first = cache.account(model, &request(&system, &["hi"]), 0).unwrap();
        assert_eq!(first.cache_read, 0);
        assert_eq!(first.cache_write(), 0, "implicit caching has no write");
        let second = cache
            .account(model, &request(&system, &["hi", "hello", "more"]), 1000)
            .unwrap();
        assert_eq!(second.cache_read, first.input_tokens);
        assert!(second.input_tokens > second.cache_read);

        let mut small = GeminiCache::default();
        let short = long(100);
        small.account(model, &request(&short, &["hi"]), 0).unwrap();
        let again = small
            .account(model, &request(&short, &["hi", "a", "b"]), 1)
            .unwrap();
        assert_eq!(again.cache_read, 0, "below the minimum nothing is cached");
    }

    #[test]
    fn a_changed_system_instruction_reads_nothing_and_an_idle_entry_expires() {
        let mut cache = GeminiCache::default();
        let model = "gemini-2.5-pro";
        let system = long(3000);
        cache.account(model, &request(&system, &["hi"]), 0).unwrap();
        let changed = format!("{system} changed");
        let other = cache
            .account(model, &request(&changed, &["hi"]), 1)
            .unwrap();
        assert_eq!(other.cache_read, 0);
        let late = cache
            .account(model, &request(&system, &["hi"]), 2 + IMPLICIT_IDLE_MS)
            .unwrap();
        assert_eq!(late.cache_read, 0);
        let mut signed = request(&system, &["hi", "call", "result"]);
        signed["contents"][1]["parts"][0]["thoughtSignature"] = json!("c2ln");
        cache.account(model, &signed, 4 + IMPLICIT_IDLE_MS).unwrap();
        let resumed = cache
            .account(
                model,
                &request(&system, &["hi", "call", "result", "more"]),
                5 + IMPLICIT_IDLE_MS,
            )
            .unwrap();
        let signed_total = cache
            .account(model, &signed, 6 + IMPLICIT_IDLE_MS)
            .unwrap()
            .input_tokens;
        assert_eq!(
            resumed.cache_read, signed_total,
            "a dropped signature is no break"
        );
        let other_model = cache
            .account(
                "gemini-2.5-flash",
                &request(&system, &["hi"]),
                3 + IMPLICIT_IDLE_MS,
            )
            .unwrap();
        assert_eq!(other_model.cache_read, 0, "each model has its own cache");
    }
}
