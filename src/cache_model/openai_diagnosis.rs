//! OpenAI's prompt cache diagnostics (Responses API, GPT-5.6 and later supported models;
//! developers.openai.com/api/docs/guides/prompt-caching/diagnostics): a request names an
//! earlier response in `prompt_cache_options.comparison_response_id`, and its response
//! carries `prompt_cache_diagnostics`, whose `type` is `cache_hit` (no miss detected),
//! `cache_miss` (with `reason`, `cache_missed_tokens` and, when known,
//! `comparison_reusable_tokens`: the comparison response's `cached_tokens +
//! cache_write_tokens`), `comparison_response_not_found` or `unavailable` (no conclusive
//! result, or a model without diagnostics). The reasons are the guide's table, in its
//! order: `model_changed`, `prompt_cache_key_changed`, `service_tier_changed`,
//! `tools_changed`, `text_format_changed`, `reasoning_effort_changed`, `verbosity_changed`,
//! `context_compacted`, `input_changed`; "diagnostics report the first classified reason".
//!
//! A fingerprint holds only keys and token counts of the prompt as the cache model renders
//! it ([`super::openai_prompt`]), like the provider's records ("configuration metadata,
//! token-count estimates, and hashes").

use serde_json::{json, Value};

use super::hash::{canonical_json, Chain, PrefixHash};
use super::openai_prompt::render;
use super::Accounting;
use crate::error::ApiError;
use crate::route::Endpoint;

/// What is kept of one response's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponsesFingerprint {
    model: String,
    cache_key: String,
    /// `standard`, `fast` or `flex`: tiers whose caches are apart.
    tier: &'static str,
    tools: PrefixHash,
    format: PrefixHash,
    effort: Option<String>,
    verbosity: Option<String>,
    /// Compaction items in the input.
    compactions: usize,
    /// At each part end of the rendered prompt: its cumulative key and tokens.
    parts: Vec<(PrefixHash, u64)>,
    /// What a request could have reused of it: its cached and written tokens.
    reusable: u64,
}

/// The outcome of a comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    CacheHit,
    CacheMiss {
        reason: &'static str,
        reusable: u64,
        missed: u64,
    },
    NotFound,
    Unavailable,
}

impl Comparison {
    /// The response's `prompt_cache_diagnostics` object.
    pub fn to_json(&self) -> Value {
        match self {
            Comparison::CacheHit => json!({"type": "cache_hit"}),
            Comparison::CacheMiss {
                reason,
                reusable,
                missed,
            } => json!({"type": "cache_miss", "reason": reason,
                        "comparison_reusable_tokens": reusable, "cache_missed_tokens": missed}),
            Comparison::NotFound => json!({"type": "comparison_response_not_found"}),
            Comparison::Unavailable => json!({"type": "unavailable"}),
        }
    }
}

/// The comparison response a request names, `Ok(None)` without one.
pub fn comparison_id(request: &Value) -> Result<Option<&str>, ApiError> {
    match request
        .get("prompt_cache_options")
        .and_then(|o| o.get("comparison_response_id"))
    {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) => Ok(Some(id)),
        Some(_) => Err(ApiError::invalid(
            "prompt_cache_options.comparison_response_id: Input should be a valid string",
        )),
    }
}

impl ResponsesFingerprint {
    /// The fingerprint of a Responses request (as the provider reads it: a continued
    /// conversation expanded), answered with `accounting`.
    pub fn of(request: &Value, accounting: &Accounting) -> Result<Self, ApiError> {
        let prompt = render(Endpoint::Responses, request)?;
        let mut chain = Chain::new(&[&prompt.model]);
        let mut start = 0;
        let mut parts = Vec::with_capacity(prompt.part_ends.len());
        for &end in &prompt.part_ends {
            let bytes: Vec<u8> = prompt.tokens[start..end]
                .iter()
                .flat_map(|t| t.to_le_bytes())
                .collect();
            parts.push((chain.push_bytes(&bytes), end as u64));
            start = end;
        }
        let hash = |value: Option<&Value>| {
            let text = value.map(canonical_json).unwrap_or_default();
            Chain::new(&[&text]).push(&[])
        };
        let text_field = |pointer: &str| {
            request
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let input = request.get("input").and_then(Value::as_array);
        Ok(ResponsesFingerprint {
            tier: match (prompt.fast, prompt.flex) {
                (true, _) => "fast",
                (_, true) => "flex",
                _ => "standard",
            },
            model: prompt.model,
            cache_key: prompt.cache_key,
            tools: hash(request.get("tools")),
            format: hash(request.pointer("/text/format")),
            effort: text_field("/reasoning/effort"),
            verbosity: text_field("/text/verbosity"),
            compactions: input.map_or(0, |items| {
                items
                    .iter()
                    .filter(|i| {
                        i.get("type").and_then(Value::as_str)
                            == Some(crate::providers::openai_responses::COMPACTION_ITEM)
                    })
                    .count()
            }),
            parts,
            reusable: accounting.cache_read
                + accounting.cache_write_30m
                + accounting.cache_write_12h,
        })
    }

    /// This request compared with the earlier one `before`: the first classified reason
    /// its prefix could not be reused, or a hit when it extends that prompt.
    pub fn compared_with(&self, before: &ResponsesFingerprint) -> Comparison {
        let reusable = before.reusable;
        let settings = [
            ("model_changed", self.model != before.model),
            (
                "prompt_cache_key_changed",
                self.cache_key != before.cache_key,
            ),
            ("service_tier_changed", self.tier != before.tier),
            ("tools_changed", self.tools != before.tools),
            ("text_format_changed", self.format != before.format),
            ("reasoning_effort_changed", self.effort != before.effort),
            ("verbosity_changed", self.verbosity != before.verbosity),
        ];
        if let Some((reason, _)) = settings.iter().find(|(_, changed)| *changed) {
            return Comparison::CacheMiss {
                reason,
                reusable,
                missed: reusable,
            };
        }
        let common = self
            .parts
            .iter()
            .zip(&before.parts)
            .take_while(|(a, b)| a.0 == b.0)
            .count();
        if common == before.parts.len() {
            return Comparison::CacheHit;
        }
        let kept = common.checked_sub(1).map_or(0, |last| before.parts[last].1);
        let reason = match self.compactions > before.compactions {
            true => "context_compacted",
            false => "input_changed",
        };
        Comparison::CacheMiss {
            reason,
            reusable,
            missed: reusable.saturating_sub(kept),
        }
    }
}
