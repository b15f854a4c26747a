//! Provider prompt-cache accounting, independent of HTTP: given a request body, its
//! endpoint and a time, what would the provider report as cache reads, cache writes and
//! uncached input — and what does it store for later requests. Used by the emulator and by
//! offline replay. The rules follow PROVIDERS.md; token counting is described in [`tokens`].

mod anthropic;
pub mod anthropic_prompt;
pub mod boundaries;
mod clock;
pub mod context_editing;
pub mod diagnosis;
pub mod gemini;
pub mod gemini_explicit;
mod hash;
pub mod next_turn;
mod openai;
pub mod openai_diagnosis;
pub mod openai_prompt;
pub mod thinking;
pub mod tokens;
mod usage_json;

#[cfg(test)]
mod tests_anthropic;
#[cfg(test)]
mod tests_openai;
#[cfg(test)]
mod tests_props;
#[cfg(test)]
mod tests_thinking;

use serde_json::Value;

pub use anthropic::{AnthropicCache, MAX_MARKERS};
pub use anthropic_prompt::Ttl;
pub use clock::Clock;
pub use openai::{
    count_in_window, surely_kept_ms, takes_breakpoints, OpenAiCache, MIN_CACHED_TOKENS,
    OVERFLOW_PER_MINUTE, RATE_WINDOW_MS, STEP_TOKENS,
};

use crate::error::ApiError;
use crate::route::Endpoint;

/// What counts as one block for the Anthropic lookback (the provider does not document
/// it precisely).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BlockUnit {
    /// Each tool definition, system block and message content block (the default).
    #[default]
    ContentBlock,
    /// Each tool definition, system block and whole message: reads and lookback steps
    /// only at message ends.
    Message,
}

/// Tunables of the model; the defaults follow the providers' documentation.
#[derive(Debug, Clone)]
pub struct CacheModelConfig {
    /// Block boundaries an Anthropic marker looks back over (the marked block counts).
    pub lookback_blocks: usize,
    pub block_unit: BlockUnit,
    /// OpenAI idle expiry.
    pub openai_idle_secs: u64,
    /// OpenAI machines a route can land on (not documented; with more, two different
    /// `prompt_cache_key`s for one prefix share a machine less often).
    pub openai_machines: usize,
    /// Requests a minute for one prefix and `prompt_cache_key` before some overflow to
    /// other machines (the prompt-caching guide: "approximately 15").
    pub openai_overflow_per_minute: usize,
}

impl Default for CacheModelConfig {
    fn default() -> Self {
        CacheModelConfig {
            lookback_blocks: 20,
            block_unit: BlockUnit::ContentBlock,
            openai_idle_secs: 600,
            openai_machines: 8,
            openai_overflow_per_minute: OVERFLOW_PER_MINUTE,
        }
    }
}

/// The provider-side cache state of one account (both families).
#[derive(Debug, Clone, Default)]
pub struct CacheModel {
    pub config: CacheModelConfig,
    anthropic: AnthropicCache,
    openai: OpenAiCache,
    gemini: gemini::GeminiCache,
}

/// One marker as the accounting saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// Index of the marked block in the flattened prompt.
    pub block: usize,
    pub ttl: &'static str,
    /// Tokens of the prefix up to and including the marked block.
    pub prefix_tokens: u64,
}

/// Diagnostics: how the prompt was cut and where the hit ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    /// Blocks (Anthropic) or segments (OpenAI) in the prompt.
    pub blocks: usize,
    /// Anthropic markers in effect (explicit and automatic), in block order.
    pub markers: Vec<Marker>,
    /// Last block of the prefix read from cache.
    pub hit_block: Option<usize>,
    pub min_cacheable_tokens: u64,
    /// OpenAI `prompt_cache_key` ("" when absent): a routing hint, not a partition.
    pub partition: Option<String>,
}

/// What the provider would bill for one request's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accounting {
    /// All input tokens (read + written + uncached).
    pub input_tokens: u64,
    pub cache_read: u64,
    pub cache_write_5m: u64,
    pub cache_write_1h: u64,
    /// OpenAI writes (GPT-5.6 and later; `cache_write_tokens`, 30-minute minimum lifetime).
    pub cache_write_30m: u64,
    /// OpenAI writes with `prompt_cache_options.ttl: "12h"` (12-hour minimum lifetime).
    pub cache_write_12h: u64,
    /// Gemini explicit caches: the storage a TTL set bills, in token-seconds.
    pub storage_token_secs: u64,
    pub detail: Detail,
    /// The compaction sampled before this answer, when the request's prompt reached its
    /// `compact_20260112` trigger (Anthropic).
    pub compaction: Option<Box<Compaction>>,
    /// What a `clear_tool_uses` context edit cleared from the prompt before it was
    /// sampled (Anthropic).
    pub cleared: Option<crate::usage::Cleared>,
    /// Served in fast mode (Anthropic `speed: "fast"`, OpenAI `service_tier: "fast"` or
    /// `"priority"`, on a model that has it).
    pub fast: bool,
    /// Served by OpenAI's flex processing (`service_tier: "flex"`).
    pub flex: bool,
    /// Anthropic: inference run in the US only (`inference_geo: "us"`), answered so.
    pub us_only: bool,
}

/// A server-side compaction: the sampling over the prompt as sent, and the summary it
/// wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub sampling: Accounting,
    pub summary: String,
    pub output_tokens: u64,
}

impl Accounting {
    pub fn cache_write(&self) -> u64 {
        self.cache_write_5m + self.cache_write_1h + self.cache_write_30m + self.cache_write_12h
    }

    /// Input tokens neither read from nor written to the cache.
    pub fn uncached(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cache_read + self.cache_write())
    }

    /// The normalised usage, with the request's output tokens (a compaction's included):
    /// the whole bill, as cachet reads it from the provider's answer.
    pub fn usage(&self, output_tokens: u64) -> crate::usage::Usage {
        let mut usage = crate::usage::Usage {
            cache_read: self.cache_read,
            cache_write: self.cache_write(),
            cache_write_5m: self.cache_write_5m,
            cache_write_1h: self.cache_write_1h,
            cache_write_12h: self.cache_write_12h,
            cache_storage_token_secs: self.storage_token_secs,
            uncached: self.uncached(),
            output: output_tokens,
            iterations: None,
            cleared: self.cleared,
            fast: self.fast,
            flex: self.flex,
            us_only: self.us_only,
        };
        if let Some(compaction) = &self.compaction {
            let first = compaction.sampling.usage(0);
            usage.add(&first);
            usage.output = output_tokens;
            usage.cleared = self.cleared;
            usage.fast = self.fast;
            usage.flex = self.flex;
            usage.us_only = self.us_only;
            usage.iterations = Some(crate::usage::Iterations {
                first_read: first.cache_read,
                last_read: self.cache_read,
                last_write: self.cache_write(),
                compactions: 1,
            });
        }
        usage
    }
}

impl CacheModel {
    pub fn new(config: CacheModelConfig) -> Self {
        CacheModel {
            config,
            ..Default::default()
        }
    }

    /// Account a generation request (`Messages`, `Chat` or `Responses`) at `now_ms` and
    /// store what it writes. Errors are the 400s the provider would answer.
    pub fn account(
        &mut self,
        endpoint: Endpoint,
        request: &Value,
        now_ms: u64,
    ) -> Result<Accounting, ApiError> {
        // Bedrock's InvokeModel and Vertex's rawPredict carry Messages bodies (their
        // callers name the model the path names).
        match endpoint.read_as() {
            Endpoint::Messages => self.anthropic.account(request, now_ms, &self.config),
            Endpoint::Chat | Endpoint::Responses => {
                self.openai.account(endpoint, request, now_ms, &self.config)
            }
            // The model named by the path, as the API binds it to the request's `model`.
            Endpoint::GenerateContent => {
                let model = request.get("model").and_then(Value::as_str).unwrap_or("");
                self.gemini.account(model, request, now_ms)
            }
            other => Err(ApiError::invalid(format!(
                "the cache model does not account `{}` requests",
                other.label()
            ))),
        }
    }

    /// The Gemini API's explicit caches (`cachedContents`).
    pub fn gemini_caches(&mut self) -> &mut gemini_explicit::ExplicitCaches {
        &mut self.gemini.explicit
    }

    /// Input tokens of a request as the accounting counts them (`count_tokens`).
    pub fn count_tokens(endpoint: Endpoint, request: &Value) -> Result<u64, ApiError> {
        match endpoint {
            Endpoint::Messages | Endpoint::CountTokens => AnthropicCache::count_tokens(request),
            Endpoint::GenerateContent | Endpoint::GeminiCountTokens => {
                let model = request.get("model").and_then(Value::as_str).unwrap_or("");
                gemini::count_tokens(model, request)
            }
            _ => OpenAiCache::count_tokens(endpoint, request),
        }
    }
}
