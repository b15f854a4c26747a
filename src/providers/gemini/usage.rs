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

/// The fields of a `cachedContents` answer (a `CachedContent`) cachet reads.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    name: Option<String>,
    model: Option<String>,
    update_time: Option<String>,
    expire_time: Option<String>,
    usage_metadata: Option<StoredTokens>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredTokens {
    #[serde(default)]
    total_token_count: u64,
}

/// What a cache's create or update answer says: the bill of the TTL it set (the cache's
/// tokens as a write, which a create bills at the input price, and their storage from
/// `updateTime` to `expireTime`, the rule of [`crate::cache_model::gemini_explicit`]), the
/// model (without `models/`) and the cache's name (`cachedContents/ID`). An update bills
/// no write: [`stored_bill`] drops it.
pub fn read_stored(json: &[u8]) -> (Option<Usage>, Option<String>, Option<String>) {
    let Ok(stored) = serde_json::from_slice::<Stored>(json) else {
        return (None, None, None);
    };
    let name = stored.name.filter(|n| n.starts_with("cachedContents/"));
    let model = stored
        .model
        .map(|m| m.strip_prefix("models/").unwrap_or(&m).to_string());
    let at = |t: &Option<String>| {
        t.as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_second())
    };
    let usage = match (
        &stored.usage_metadata,
        at(&stored.update_time),
        at(&stored.expire_time),
    ) {
        (Some(tokens), Some(from), Some(to)) if name.is_some() => {
            let secs = u64::try_from(to.saturating_sub(from)).unwrap_or(0);
            let tokens = tokens.total_token_count;
            Some(Usage {
                cache_write: tokens,
                cache_storage_token_secs: tokens.saturating_mul(secs),
                ..Usage::default()
            })
        }
        _ => None,
    };
    (usage, model, name)
}

/// The bill of a `cachedContents` call by its method, from what its answer says: a create
/// bills its tokens and their storage, an update the storage of its new TTL, a get, a
/// list or a delete nothing (a get answers the same resource a create does).
pub fn stored_bill(method: &http::Method, usage: Option<Usage>) -> Option<Usage> {
    match *method {
        http::Method::POST => usage,
        http::Method::PATCH => usage.map(|u| Usage {
            cache_write: 0,
            ..u
        }),
        _ => None,
    }
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

    /// A create bills the cache's tokens and their storage for its TTL; an update the
    /// storage of its new one; a get, which answers the same resource, nothing.
    #[test]
    fn a_cache_is_billed_by_the_call_that_sets_its_ttl() {
        let body = br#"{"name":"cachedContents/ez2yh","model":"models/gemini-3.5-flash-lite",
            "createTime":"2026-09-07T01:18:17.438678Z","updateTime":"2026-09-07T01:18:17.438678Z",
            "expireTime":"2026-09-07T02:18:17.023637828Z","displayName":"",
            "usageMetadata":{"totalTokenCount":7021}}"#;
        let (usage, model, name) = read_stored(body);
        assert_eq!(model.as_deref(), Some("gemini-3.5-flash-lite"));
        assert_eq!(name.as_deref(), Some("cachedContents/ez2yh"));
        let created = stored_bill(&http::Method::POST, usage).unwrap();
        assert_eq!(created.cache_write, 7021);
        assert_eq!(created.cache_storage_token_secs, 7021 * 3600);
        let updated = stored_bill(&http::Method::PATCH, usage).unwrap();
        assert_eq!((updated.cache_write, updated.total_input()), (0, 0));
        assert_eq!(updated.cache_storage_token_secs, 7021 * 3600);
        assert_eq!(stored_bill(&http::Method::GET, usage), None);
        assert_eq!(read_stored(b"{}").0, None);
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
