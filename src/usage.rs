//! Usage normalised across providers: cachet always speaks of three disjoint kinds of
//! input, read from cache, written to cache, and uncached (each provider's answer is read
//! into this by `providers::usage`).

use serde::{Deserialize, Serialize};

/// Token usage of one request, normalised.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub cache_read: u64,
    /// All tokens written to cache (`cache_write_5m + cache_write_1h` when the split is known).
    pub cache_write: u64,
    pub cache_write_5m: u64,
    pub cache_write_1h: u64,
    /// OpenAI writes with a 12-hour minimum lifetime (`prompt_cache_options.ttl: "12h"`,
    /// reported in `cache_write_tokens_details.ttl_12h_tokens`); part of `cache_write`.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cache_write_12h: u64,
    /// Gemini explicit caches (`cachedContents`): the storage a TTL set bills, in
    /// token-seconds (priced per token-hour).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub cache_storage_token_secs: u64,
    /// The answer was served in fast mode (Anthropic `usage.speed: "fast"`, OpenAI
    /// `service_tier: "priority"`), billed at the model's fast-mode multiplier.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast: bool,
    /// The answer was served by OpenAI's flex processing (`service_tier: "flex"`), billed
    /// at half of every rate. Never together with `fast`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flex: bool,
    /// Anthropic ran the inference in the US only (`usage.inference_geo: "us"`), billed at
    /// a multiplier on every price.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub us_only: bool,
    /// Input tokens neither read from nor written to the cache.
    pub uncached: u64,
    pub output: u64,
    /// When the provider sampled more than once for one request (Anthropic's
    /// `usage.iterations`: a server-side compaction before the answer, a server-tool loop),
    /// the cache counts of the first and the last sampling. The counts above are then
    /// the whole bill; these say what the prompt as sent read and what the request left
    /// cached. `None` for a single sampling, where both are the counts above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<Iterations>,
    /// Tool uses the provider cleared from the prompt before sampling it (Anthropic's
    /// `context_management.applied_edits`, a `clear_tool_uses_*` edit): the cache could
    /// only be read up to the first cleared one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleared: Option<Cleared>,
}

/// What a `clear_tool_uses_*` context edit cleared from one request's prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cleared {
    pub tool_uses: u64,
    pub input_tokens: u64,
}

/// The first and last of several samplings of one request (see [`Usage::iterations`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Iterations {
    /// Tokens the first sampling read from the cache: the prompt as the client sent it.
    pub first_read: u64,
    /// Tokens the last sampling read and wrote: the prompt it ran on, what the next
    /// request finds cached.
    pub last_read: u64,
    pub last_write: u64,
    /// Samplings that compacted the conversation (Anthropic `compaction` iterations).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub compactions: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Tokens the prompt as sent read from the cache: the first sampling's.
    pub fn prompt_read(&self) -> u64 {
        self.iterations.map_or(self.cache_read, |i| i.first_read)
    }

    /// Tokens the request left cached for the next one: what its last sampling read and
    /// wrote.
    pub fn left_cached(&self) -> u64 {
        self.iterations.map_or_else(
            || self.cache_read.saturating_add(self.cache_write),
            |i| i.last_read.saturating_add(i.last_write),
        )
    }

    // Counts saturate: a provider's nonsense count must not overflow a sum.
    pub fn total_input(&self) -> u64 {
        self.cache_read
            .saturating_add(self.cache_write)
            .saturating_add(self.uncached)
    }

    pub fn add(&mut self, other: &Usage) {
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
        self.cache_write_5m = self.cache_write_5m.saturating_add(other.cache_write_5m);
        self.cache_write_1h = self.cache_write_1h.saturating_add(other.cache_write_1h);
        self.cache_write_12h = self.cache_write_12h.saturating_add(other.cache_write_12h);
        self.cache_storage_token_secs = self
            .cache_storage_token_secs
            .saturating_add(other.cache_storage_token_secs);
        self.uncached = self.uncached.saturating_add(other.uncached);
        self.output = self.output.saturating_add(other.output);
        // A sum of requests has no first and last sampling, nor one prompt's edits, nor one
        // speed (a sum is priced at the standard rates; each request is priced on its own).
        self.iterations = None;
        self.cleared = None;
        self.fast = false;
        self.flex = false;
        self.us_only = false;
    }

    /// The tier that served the answer, by name: `fast`, `flex` or `standard`.
    pub fn tier(&self) -> &'static str {
        match (self.fast, self.flex) {
            (true, _) => "fast",
            (false, true) => "flex",
            (false, false) => "standard",
        }
    }
}
