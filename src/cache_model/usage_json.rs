//! The usage objects exactly as each API reports them.

use serde_json::{json, Value};

use super::Accounting;
use crate::route::Endpoint;

impl Accounting {
    /// The provider's `usage` object for `endpoint`, with the reply's output tokens.
    pub fn usage_json(&self, endpoint: Endpoint, output_tokens: u64) -> Value {
        match endpoint {
            Endpoint::Chat => self.chat_usage_json(output_tokens),
            Endpoint::Responses => self.responses_usage_json(output_tokens),
            _ => self.anthropic_usage_json(output_tokens),
        }
    }

    /// Anthropic: `input_tokens` is only the uncached part; cache fields beside it. After a
    /// compaction, the counts are the answer's and `iterations` lists both samplings
    /// (platform.claude.com, Compaction, "Understanding usage").
    pub fn anthropic_usage_json(&self, output_tokens: u64) -> Value {
        let mut usage = self.anthropic_counts_json(output_tokens);
        if let Some(compaction) = &self.compaction {
            let mut first = compaction
                .sampling
                .anthropic_counts_json(compaction.output_tokens);
            let mut answer = self.anthropic_counts_json(output_tokens);
            for (iteration, kind) in [(&mut first, "compaction"), (&mut answer, "message")] {
                if let Some(fields) = iteration.as_object_mut() {
                    fields.remove("service_tier");
                    fields.remove("speed");
                    fields.remove("inference_geo");
                    fields.insert("type".into(), json!(kind));
                }
            }
            usage["iterations"] = json!([first, answer]);
        }
        usage
    }

    fn anthropic_counts_json(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.uncached(),
            "cache_creation_input_tokens": self.cache_write(),
            "cache_read_input_tokens": self.cache_read,
            "cache_creation": {
                "ephemeral_5m_input_tokens": self.cache_write_5m,
                "ephemeral_1h_input_tokens": self.cache_write_1h,
            },
            "output_tokens": output_tokens,
            "service_tier": "standard",
            "speed": if self.fast { crate::providers::anthropic::FAST_SPEED } else { "standard" },
            "inference_geo": if self.us_only { crate::providers::anthropic::US_INFERENCE_GEO } else { "global" },
        })
    }

    /// The `service_tier` of an OpenAI answer (Chat and Responses): the tier that served it.
    pub fn openai_service_tier(&self) -> &'static str {
        if self.fast {
            crate::providers::openai::FAST_ANSWER
        } else if self.flex {
            crate::providers::openai::FLEX_TIER
        } else {
            "default"
        }
    }

    /// Chat Completions: `cached_tokens` and `cache_write_tokens` are inside
    /// `prompt_tokens` (openai-python `PromptTokensDetails`).
    pub fn chat_usage_json(&self, output_tokens: u64) -> Value {
        json!({
            "prompt_tokens": self.input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": self.input_tokens + output_tokens,
            "prompt_tokens_details": {
                "cached_tokens": self.cache_read,
                "cache_write_tokens": self.cache_write_30m,
                "audio_tokens": 0,
            },
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        })
    }

    /// Responses: `cached_tokens` and `cache_write_tokens` are inside `input_tokens`, the
    /// writes split by lifetime (openai-python `ResponseUsage.InputTokensDetails`).
    pub fn responses_usage_json(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "input_tokens_details": {
                "cached_tokens": self.cache_read,
                "cache_write_tokens": self.cache_write_30m + self.cache_write_12h,
                "cache_write_tokens_details": {
                    "ttl_30m_tokens": self.cache_write_30m,
                    "ttl_12h_tokens": self.cache_write_12h,
                },
            },
            "output_tokens": output_tokens,
            "output_tokens_details": { "reasoning_tokens": 0 },
            "total_tokens": self.input_tokens + output_tokens,
        })
    }
}
