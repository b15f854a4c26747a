//! OpenAI prompt caching.
//!
//! Routing (developers.openai.com/api/docs/guides/prompt-caching): a request goes to a
//! machine chosen by a hash of the start of its prompt (about the first 256 tokens)
//! combined with `prompt_cache_key`; each machine has its own cache. The key is a routing
//! hint, not a partition: requests with different keys but the same prefix usually land
//! on different machines and miss, and hit when their routes meet on one machine. Above
//! about 15 requests a minute for one prefix and key, requests overflow to other machines.
//!
//! Models before GPT-5.6: prompts of 1024 tokens or more are stored whole; a later prompt
//! on the same machine reads its longest matching token prefix in whole blocks of 128
//! tokens (1024, 1152, ...), so a long message whose end changed is still mostly read.
//! No write is reported or billed.
//!
//! GPT-5.6 and later (openai-python `PromptCacheOptions` / `PromptCacheBreakpoint`): a
//! request writes at its breakpoints, the exact end of a content part, not rounded:
//! `implicit` mode (the default) one implicit breakpoint (the end of the prompt, here) and
//! the latest three explicit ones; `explicit` mode the latest four explicit ones and no
//! caching without any. Reads take the longest stored breakpoint prefix with no lookback
//! limit. Writes are reported in `cache_write_tokens` (billed 1.25x input); entries live
//! at least the `ttl` of 30 minutes.
//!
//! Entries expire after an idle period (each hit or write renews them), or after 24 hours
//! with `prompt_cache_retention: "24h"`. On GPT-5.6 and later a Responses request may ask
//! `prompt_cache_options.ttl: "12h"`: what it writes and reads lives at least 12 hours, and
//! its writes are reported apart (`cache_write_tokens_details.ttl_12h_tokens`).

use crate::providers::openai::{Retention, ROUTING_TOKENS, TTL_12H, TTL_30M};
use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use super::hash::PrefixHash;
use super::openai_prompt::{render, CacheMode, OpenAiPrompt};
use super::{Accounting, CacheModelConfig, Detail, Marker};
use crate::error::ApiError;
use crate::route::Endpoint;

/// Shortest prompt (or breakpoint prefix) that is cached.
pub const MIN_CACHED_TOKENS: u64 = 1024;
/// Hits come in steps of this many tokens (models before GPT-5.6).
pub const STEP_TOKENS: u64 = 128;
/// Lifetime with `prompt_cache_retention: "24h"`.
const EXTENDED_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;
/// The minimum lifetime of breakpoints written with `ttl: "12h"`.
const TTL_12H_MS: u64 = 12 * 60 * 60 * 1000;

/// The shortest idle time the provider keeps a prefix: the guide's "5 to 10 minutes of
/// inactivity" (the model evicts after 10, `CacheModelConfig::openai_idle_secs`).
const MIN_IDLE_MS: u64 = 5 * 60 * 1000;
/// The `ttl` of GPT-5.6 breakpoints: a minimum lifetime.
const BREAKPOINT_TTL_MS: u64 = 30 * 60 * 1000;
/// Explicit breakpoints written per request (GPT-5.6: "up to four").
const MAX_WRITES: usize = 4;
/// Requests in one [`RATE_WINDOW_MS`] for one prefix and `prompt_cache_key` before some
/// overflow to other machines (the prompt-caching guide: "approximately 15 requests per
/// minute").
pub const OVERFLOW_PER_MINUTE: usize = 15;
/// The window the overflow rate is counted over.
pub const RATE_WINDOW_MS: u64 = 60_000;
/// Routes remembered for the overflow rate before idle ones are dropped.
const ROUTES_KEPT: usize = 4096;

/// One machine's stored prefixes of one model: token-block keys (before GPT-5.6) and
/// breakpoint prefix keys (GPT-5.6 and later), each with its expiry.
#[derive(Debug, Clone, Default)]
struct Machine {
    blocks: HashMap<PrefixHash, u64>,
    entries: HashMap<PrefixHash, u64>,
}

/// The OpenAI caches of one account.
#[derive(Debug, Clone, Default)]
pub struct OpenAiCache {
    machines: HashMap<(String, usize), Machine>,
    /// Recent request times per route, for the overflow rate.
    recent: HashMap<u64, VecDeque<u64>>,
}

impl OpenAiCache {
    pub fn account(
        &mut self,
        endpoint: Endpoint,
        req: &Value,
        now_ms: u64,
        config: &CacheModelConfig,
    ) -> Result<Accounting, ApiError> {
        let prompt = render(endpoint, req)?;
        let explicit = takes_breakpoints(&prompt.model);
        let keep_ms = lifetime_ms(&prompt, config);
        let machine_id = self.route(&prompt, now_ms, config);
        let machine = self
            .machines
            .entry((prompt.model.clone(), machine_id))
            .or_default();
        machine.blocks.retain(|_, expires| *expires > now_ms);
        machine.entries.retain(|_, expires| *expires > now_ms);
        let expires = now_ms + keep_ms;
        // The 12-hour ttl is an option of the models that take breakpoints.
        let twelve_hours = explicit && prompt.retention.ttl_12h;
        let (read, written, hit, markers) = if explicit {
            let ttl = if twelve_hours { TTL_12H } else { TTL_30M };
            breakpoint_accounting(&prompt, machine, expires, ttl)
        } else {
            block_accounting(&prompt, machine, expires)
        };
        Ok(Accounting {
            input_tokens: prompt.total_tokens(),
            cache_read: read,
            cache_write_5m: 0,
            cache_write_1h: 0,
            cache_write_30m: if twelve_hours { 0 } else { written },
            cache_write_12h: if twelve_hours { written } else { 0 },
            storage_token_secs: 0,
            fast: prompt.fast,
            flex: prompt.flex,
            us_only: false,
            detail: Detail {
                blocks: prompt.part_ends.len(),
                markers,
                hit_block: hit,
                min_cacheable_tokens: MIN_CACHED_TOKENS,
                partition: Some(prompt.cache_key.clone()),
            },
            compaction: None,
            cleared: None,
        })
    }

    /// Input tokens of a request as the accounting counts them.
    pub fn count_tokens(endpoint: Endpoint, req: &Value) -> Result<u64, ApiError> {
        Ok(render(endpoint, req)?.total_tokens())
    }

    /// The machine serving this request: a hash of the prompt start and the cache key,
    /// or another machine once that route is over the per-minute rate.
    fn route(&mut self, prompt: &OpenAiPrompt, now_ms: u64, config: &CacheModelConfig) -> usize {
        let start = &prompt.tokens[..prompt.tokens.len().min(ROUTING_TOKENS)];
        let bytes: Vec<u8> = start.iter().flat_map(|t| t.to_le_bytes()).collect();
        let route = prompt
            .chain(&["route", &prompt.model, &prompt.cache_key])
            .push_bytes(&bytes) as u64;
        let machines = config.openai_machines.max(1);
        if self.recent.len() > ROUTES_KEPT {
            self.recent
                .retain(|_, times| times.back().is_some_and(|&t| t + RATE_WINDOW_MS > now_ms));
        }
        let sent = count_in_window(self.recent.entry(route).or_default(), now_ms);
        let home = (route % machines as u64) as usize;
        let over = sent.saturating_sub(config.openai_overflow_per_minute.max(1));
        if over == 0 || machines == 1 {
            home
        } else {
            (home + 1 + (over - 1) % (machines - 1)) % machines
        }
    }
}

/// Add a request at `now_ms` to `times` (request times, oldest first), forget those that
/// left the [`RATE_WINDOW_MS`] before it, and say how many are in the window, this one
/// included: the count the overflow rate is judged on.
pub fn count_in_window(times: &mut VecDeque<u64>, now_ms: u64) -> usize {
    while times.front().is_some_and(|&t| t + RATE_WINDOW_MS <= now_ms) {
        times.pop_front();
    }
    times.push_back(now_ms);
    times.len()
}

/// Whether `model` takes explicit breakpoints and `prompt_cache_options` (GPT-5.6 and
/// later, per the model table).
pub fn takes_breakpoints(model: &str) -> bool {
    crate::models::lookup(model)
        .is_some_and(|m| m.provider == "openai" && m.explicit_breakpoints().is_some())
}

/// Before GPT-5.6: the longest stored prefix in whole 128-token blocks; the whole prompt
/// is stored when it reaches the minimum.
fn block_accounting(
    prompt: &OpenAiPrompt,
    machine: &mut Machine,
    expires: u64,
) -> (u64, u64, Option<usize>, Vec<Marker>) {
    let mut chain = prompt.chain(&["blocks", &prompt.model]);
    let keys: Vec<PrefixHash> = prompt
        .tokens
        .chunks_exact(STEP_TOKENS as usize)
        .map(|block| {
            let bytes: Vec<u8> = block.iter().flat_map(|t| t.to_le_bytes()).collect();
            chain.push_bytes(&bytes)
        })
        .collect();
    // Shorter prefixes of a stored prompt live at least as long as longer ones.
    let hit = keys.iter().rposition(|k| machine.blocks.contains_key(k));
    let matched = hit.map_or(0, |i| (i as u64 + 1) * STEP_TOKENS);
    let read = if matched >= MIN_CACHED_TOKENS {
        matched
    } else {
        0
    };
    if let Some(i) = hit {
        for k in &keys[..=i] {
            machine.blocks.insert(*k, expires);
        }
    }
    if prompt.total_tokens() >= MIN_CACHED_TOKENS {
        for k in &keys {
            machine.blocks.insert(*k, expires);
        }
    }
    (read, 0, hit, Vec::new())
}

/// GPT-5.6 and later: reads at stored breakpoint prefixes, writes at this request's
/// breakpoints, with the lifetime `ttl`.
fn breakpoint_accounting(
    prompt: &OpenAiPrompt,
    machine: &mut Machine,
    expires: u64,
    ttl: &'static str,
) -> (u64, u64, Option<usize>, Vec<Marker>) {
    // "If there are no explicit breakpoints, the request does not use prompt caching."
    if prompt.mode == CacheMode::Explicit && prompt.breakpoints.is_empty() {
        return (0, 0, None, Vec::new());
    }
    let keys = part_keys(prompt);
    let at = |pos: usize| prompt.part_ends.binary_search(&pos).ok();
    let hit = (0..keys.len()).rev().find(|&i| {
        prompt.part_ends[i] as u64 >= MIN_CACHED_TOKENS && machine.entries.contains_key(&keys[i])
    });
    let read = hit.map_or(0, |i| prompt.part_ends[i] as u64);
    if let Some(i) = hit {
        machine.entries.insert(keys[i], expires);
    }
    let positions = write_positions(prompt);
    let mut markers = Vec::new();
    let mut furthest = read;
    for pos in positions {
        let Some(i) = at(pos) else { continue };
        if (pos as u64) < MIN_CACHED_TOKENS {
            continue;
        }
        machine.entries.insert(keys[i], expires);
        markers.push(Marker {
            block: i,
            ttl,
            prefix_tokens: pos as u64,
        });
        furthest = furthest.max(pos as u64);
    }
    (read, furthest - read, hit, markers)
}

/// The key of the prefix ending at each part end.
pub(super) fn part_keys(prompt: &OpenAiPrompt) -> Vec<PrefixHash> {
    let mut chain = prompt.chain(&["breakpoints", &prompt.model]);
    let mut start = 0;
    prompt
        .part_ends
        .iter()
        .map(|&end| {
            let bytes: Vec<u8> = prompt.tokens[start..end]
                .iter()
                .flat_map(|t| t.to_le_bytes())
                .collect();
            start = end;
            chain.push_bytes(&bytes)
        })
        .collect()
}

/// Where a GPT-5.6+ request writes: the latest three explicit breakpoints and the end of
/// the prompt (`implicit`), or the latest four explicit ones (`explicit`).
pub(super) fn write_positions(prompt: &OpenAiPrompt) -> Vec<usize> {
    let mut positions: Vec<usize> = match prompt.mode {
        CacheMode::Implicit => {
            let skip = prompt.breakpoints.len().saturating_sub(MAX_WRITES - 1);
            let mut p = prompt.breakpoints[skip..].to_vec();
            p.push(prompt.tokens.len());
            p
        }
        CacheMode::Explicit => {
            let skip = prompt.breakpoints.len().saturating_sub(MAX_WRITES);
            prompt.breakpoints[skip..].to_vec()
        }
    };
    positions.sort_unstable();
    positions.dedup();
    positions
}

/// How long the provider surely keeps a request's idle prefix: 5 minutes, a day with
/// extended retention, at least the 30-minute `ttl` of GPT-5.6 breakpoints, 12 hours with
/// the `12h` one. A miss after a longer gap is an expiry; before it, something else.
pub fn surely_kept_ms(model: &str, retention: Retention) -> u64 {
    kept_ms(model, retention, MIN_IDLE_MS)
}

/// How long a request's entries live.
pub(super) fn lifetime_ms(prompt: &OpenAiPrompt, config: &CacheModelConfig) -> u64 {
    kept_ms(
        &prompt.model,
        prompt.retention,
        config.openai_idle_secs * 1000,
    )
}

/// An idle prefix's life after `idle_ms`: at least a day with extended retention, at least
/// the `ttl` of breakpoints on a model that takes them.
fn kept_ms(model: &str, retention: Retention, idle_ms: u64) -> u64 {
    let mut keep_ms = if retention.extended_24h {
        idle_ms.max(EXTENDED_RETENTION_MS)
    } else {
        idle_ms
    };
    if takes_breakpoints(model) {
        let ttl_ms = if retention.ttl_12h {
            TTL_12H_MS
        } else {
            BREAKPOINT_TTL_MS
        };
        keep_ms = keep_ms.max(ttl_ms);
    }
    keep_ms
}
