//! Reading a Gemini answer's usage: `usageMetadata` of a `GenerateContentResponse` (a whole
//! answer, or each chunk of a stream, the last one holding the final counts).
//!
//! `promptTokenCount` counts the whole prompt, the cached part included
//! (`cachedContentTokenCount`: "Number of tokens in the cached part of the prompt (the
//! cached content)"); `toolUsePromptTokenCount` is the prompt of a tool's use, beside it;
//! `candidatesTokenCount` and `thoughtsTokenCount` are the answer and its thinking, both
//! billed as output (ai.google.dev/api/generate-content, `UsageMetadata`). Nothing is
//! reported as written: implicit caching has no write fee, and an explicit cache is
//! written by its own `cachedContents` call.

use serde::Deserialize;

use crate::usage::Usage;

/// The counts of `usageMetadata` cachet reads; the rest (per-modality details) is skipped.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMetadata {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    cached_content_token_count: u64,
    #[serde(default)]
    tool_use_prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
}

impl UsageMetadata {
    /// The normalised usage: reads inside the prompt's count, not beside it.
    pub fn usage(&self) -> Usage {
        let read = self.cached_content_token_count.min(self.prompt_token_count);
        Usage {
            cache_read: read,
            uncached: (self.prompt_token_count - read)
                .saturating_add(self.tool_use_prompt_token_count),
            output: self
                .candidates_token_count
                .saturating_add(self.thoughts_token_count),
            ..Usage::default()
        }
    }
}

/// The fields of a response (or stream chunk) cachet reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseFields {
    usage_metadata: Option<UsageMetadata>,
    model_version: Option<String>,
    response_id: Option<String>,
}

/// What a response body or a stream chunk says: its usage, the model that answered, its id.
pub fn read(json: &[u8]) -> (Option<Usage>, Option<String>, Option<String>) {
    let Ok(fields) = serde_json::from_slice::<ResponseFields>(json) else {
        return (None, None, None);
    };
    (
        fields.usage_metadata.map(|u| u.usage()),
        fields.model_version,
        fields.response_id,
    )
}

/// The name of the cache a `cachedContents` answer holds (`cachedContents/ID`).
pub fn cache_name(json: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Named {
        name: Option<String>,
    }
    let named = serde_json::from_slice::<Named>(json).ok()?.name?;
    named.starts_with("cachedContents/").then_some(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hit on an explicit or implicit cache: the cached tokens are inside the prompt's
    /// count (the discuss.ai.google.dev example: prompt 11,500 with 10,000 cached and
    /// thinking 10,000 beside 1,000 candidates).
    #[test]
    fn cached_tokens_sit_inside_the_prompt_and_thoughts_are_output() {
        let body = br#"{"candidates":[],"usageMetadata":{"promptTokenCount":11500,
            "candidatesTokenCount":1000,"totalTokenCount":22500,"cachedContentTokenCount":10000,
            "thoughtsTokenCount":10000,"promptTokensDetails":[{"modality":"TEXT","tokenCount":11500}]},
            "modelVersion":"gemini-2.5-pro","responseId":"r1"}"#;
        let (usage, model, id) = read(body);
        let usage = usage.unwrap();
        assert_eq!(usage.cache_read, 10_000);
        assert_eq!(usage.uncached, 1_500);
        assert_eq!(usage.cache_write, 0);
        assert_eq!(usage.total_input(), 11_500);
        assert_eq!(usage.output, 11_000);
        assert_eq!(model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(id.as_deref(), Some("r1"));
    }

    #[test]
    fn a_count_the_answer_leaves_out_is_zero_and_nonsense_does_not_overflow() {
        let (usage, ..) = read(br#"{"usageMetadata":{"promptTokenCount":5}}"#);
        assert_eq!(usage.unwrap().uncached, 5);
        let (usage, ..) = read(
            br#"{"usageMetadata":{"promptTokenCount":3,"cachedContentTokenCount":9,
            "toolUsePromptTokenCount":18446744073709551615}}"#,
        );
        let usage = usage.unwrap();
        assert_eq!(usage.cache_read, 3);
        assert_eq!(usage.uncached, u64::MAX);
        assert_eq!(read(b"not json").0, None);
    }
}
