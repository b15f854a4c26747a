//! A request's prompt as the boundaries its provider's cache can read at, with the rules
//! that constrain reads: where the client's markers store prefixes, how far a read looks
//! back, the minimum, the granularity and the lifetime. The ideal-cache computation of
//! `cachet replay --ideal` runs on these, so it follows the same provider rules as the
//! accounting.

use serde_json::Value;

use super::anthropic::{resolve_markers, FALLBACK_MIN_TOKENS};
use super::anthropic_prompt::{flatten, Ttl};
use super::openai::{lifetime_ms, part_keys, takes_breakpoints, write_positions};
use super::openai_prompt::render;
use super::{CacheModelConfig, MIN_CACHED_TOKENS, STEP_TOKENS};
use crate::error::ApiError;
use crate::route::Endpoint;

/// Cacheable boundaries of one request.
#[derive(Debug, Clone, Default)]
pub struct Boundaries {
    /// Each boundary's cumulative prefix key and tokens, in prompt order.
    pub keys: Vec<(u128, u64)>,
    /// Boundaries where the request stores its prefix, with that entry's lifetime.
    pub stores: Vec<(usize, u64)>,
    /// Boundaries a read walks back from.
    pub reads_from: Vec<usize>,
    /// Boundaries a read may walk back over (`None`: no limit).
    pub lookback: Option<usize>,
    pub min_tokens: u64,
    /// Reads come in multiples of this many tokens.
    pub granularity: u64,
    /// The longest lifetime any of its entries can have.
    pub ttl_ms: u64,
    /// All input tokens.
    pub total_tokens: u64,
}

impl Boundaries {
    pub fn of(
        endpoint: Endpoint,
        request: &Value,
        config: &CacheModelConfig,
    ) -> Result<Boundaries, ApiError> {
        match endpoint.read_as() {
            Endpoint::Messages => anthropic(request, config),
            Endpoint::Chat | Endpoint::Responses => openai(endpoint, request, config),
            other => Err(ApiError::invalid(format!(
                "the cache model does not account `{}` requests",
                other.label()
            ))),
        }
    }
}

fn anthropic(request: &Value, config: &CacheModelConfig) -> Result<Boundaries, ApiError> {
    let prompt = flatten(request)?;
    let markers = resolve_markers(&prompt)?;
    let min = crate::models::lookup(&prompt.model)
        .map_or(FALLBACK_MIN_TOKENS, |m| m.min_cacheable_tokens);
    let stores: Vec<(usize, u64)> = markers.iter().map(|&(i, t)| (i, t.millis())).collect();
    let ttl_ms = stores
        .iter()
        .map(|&(_, t)| t)
        .max()
        .unwrap_or(Ttl::FiveMinutes.millis());
    Ok(Boundaries {
        keys: prompt
            .blocks
            .iter()
            .map(|b| (b.key, b.cumulative_tokens))
            .collect(),
        reads_from: markers.iter().map(|&(i, _)| i).collect(),
        stores,
        lookback: Some(config.lookback_blocks.max(1)),
        min_tokens: min,
        granularity: 1,
        ttl_ms,
        total_tokens: prompt.total_tokens(),
    })
}

fn openai(
    endpoint: Endpoint,
    request: &Value,
    config: &CacheModelConfig,
) -> Result<Boundaries, ApiError> {
    let prompt = render(endpoint, request)?;
    let keys: Vec<(u128, u64)> = part_keys(&prompt)
        .into_iter()
        .zip(prompt.part_ends.iter().map(|&e| e as u64))
        .collect();
    let ttl_ms = lifetime_ms(&prompt, config);
    let last = keys.len().checked_sub(1);
    let explicit = takes_breakpoints(&prompt.model);
    let stores: Vec<(usize, u64)> = if explicit {
        write_positions(&prompt)
            .into_iter()
            .filter_map(|pos| prompt.part_ends.binary_search(&pos).ok())
            .map(|i| (i, ttl_ms))
            .collect()
    } else {
        last.map(|i| (i, ttl_ms)).into_iter().collect()
    };
    Ok(Boundaries {
        keys,
        stores,
        // Reads consider every stored prefix, with no lookback limit.
        reads_from: last.into_iter().collect(),
        lookback: None,
        min_tokens: MIN_CACHED_TOKENS,
        granularity: if explicit { 1 } else { STEP_TOKENS },
        ttl_ms,
        total_tokens: prompt.total_tokens(),
    })
}
