//! Gemini API explicit caches (`cachedContents`): create, get, list, update, delete, and a
//! `generateContent` that names one.
//!
//! Facts (ai.google.dev/api/caching and the API's answers as clients quote them):
//! - A `CachedContent` holds `systemInstruction`, `contents`, `tools` and `toolConfig`
//!   ("Input only. Immutable": never echoed), for one model ("Cached content can be only
//!   used with model it was created for"), until `expireTime`, set by `ttl` or
//!   `expireTime` (one of them; one hour when neither is given).
//! - Below the model's minimum (the caching guide's table, `min_cacheable_tokens`) a
//!   create is refused: "Cached content is too small. total_token_count=N,
//!   min_total_token_count=M" (BerriAI/litellm#17696).
//! - Only the expiration is updatable (`cachedContents.patch`).
//! - A missing, deleted or expired cache is a 403 "CachedContent not found (or permission
//!   denied)", for `get` and `generateContent` alike.
//! - A request that names a cache may not set `systemInstruction`, `tools` or `toolConfig`
//!   (a 400, even when they equal the cache's: vercel/ai#3333); its own `contents` follow
//!   the cache's, and the cache's tokens are read (`cachedContentTokenCount`, inside
//!   `promptTokenCount`), the request's own billed in full even when they repeat the
//!   cache's.
//! - Billing: the tokens of a create at the input price, and storage per token-hour for
//!   the time the TTL sets ("billed based on the TTL duration", Google's answer on
//!   discuss.ai.google.dev, "This is a question about explicit caching"). cachet bills
//!   each TTL set (a create, an update) from then to the expiry it sets, the earlier
//!   TTL's remainder not refunded: an upper bound where Google does not say more.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::gemini::{field, min_tokens, render};
use super::{Accounting, Detail};
use crate::error::{ApiError, ErrorKind};
use crate::providers::gemini::{explicit, CACHED_FIELDS};

/// A cache's lifetime when the create names none.
pub const DEFAULT_TTL_MS: u64 = 3_600_000;
/// The API's message for a cache it does not hold (answered with 403 PERMISSION_DENIED).
pub const NOT_FOUND: &str = "CachedContent not found (or permission denied)";
/// The API's message for a request that names a cache and sets what a cache holds.
pub const WITH_CACHED_FIELDS: &str = "CachedContent can not be used with GenerateContent request setting system_instruction, tools or tool_config.\n\nProposed fix: move those values to CachedContent from GenerateContent request.";

/// The fields of a `CachedContent` a create may set, in their JSON and proto spellings.
const CREATE_FIELDS: &[&str] = &[
    "model",
    "displayName",
    "display_name",
    "systemInstruction",
    "system_instruction",
    "contents",
    "tools",
    "toolConfig",
    "tool_config",
    "ttl",
    "expireTime",
    "expire_time",
    "name",
];

/// The fields an update may change (the expiration), and the resource's name beside them.
const UPDATABLE: &[&str] = &["ttl", "expireTime", "expire_time"];

/// One explicit cache.
#[derive(Debug, Clone)]
pub struct Explicit {
    pub name: String,
    /// The model, without `models/`.
    pub model: String,
    pub display_name: String,
    /// What it holds, as the start of a request: `systemInstruction`, `tools`,
    /// `toolConfig`, `contents`.
    pub prefix: Value,
    pub tokens: u64,
    pub create_ms: u64,
    pub update_ms: u64,
    pub expire_ms: u64,
}

impl Explicit {
    /// The resource as the API answers it (the cached members are input only).
    pub fn resource(&self) -> Value {
        json!({
            "name": self.name,
            "model": format!("models/{}", self.model),
            "createTime": timestamp(self.create_ms),
            "updateTime": timestamp(self.update_ms),
            "expireTime": timestamp(self.expire_ms),
            "displayName": self.display_name,
            "usageMetadata": {"totalTokenCount": self.tokens},
        })
    }

    /// What setting its TTL at `now_ms` bills: storage from then to the expiry.
    fn storage(&self, now_ms: u64) -> u64 {
        self.tokens
            .saturating_mul(self.expire_ms.saturating_sub(now_ms) / 1000)
    }
}

/// An RFC 3339 time in UTC, as the API writes it.
pub fn timestamp(ms: u64) -> String {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// The explicit caches of one account.
#[derive(Debug, Clone, Default)]
pub struct ExplicitCaches {
    entries: BTreeMap<String, Explicit>,
    created: u64,
}

/// What a create or an update did: the resource and the bill of its TTL.
#[derive(Debug, Clone)]
pub struct Stored {
    pub resource: Value,
    pub accounting: Accounting,
}

impl ExplicitCaches {
    fn expire(&mut self, now_ms: u64) {
        self.entries.retain(|_, c| c.expire_ms > now_ms);
    }

    /// A live cache by name (`cachedContents/ID`).
    pub fn get(&mut self, name: &str, now_ms: u64) -> Result<&Explicit, ApiError> {
        self.expire(now_ms);
        self.entries.get(name).ok_or_else(not_found)
    }

    /// The live caches, oldest first.
    pub fn list(&mut self, now_ms: u64) -> Vec<Value> {
        self.expire(now_ms);
        let mut live: Vec<&Explicit> = self.entries.values().collect();
        live.sort_by_key(|c| (c.create_ms, c.name.clone()));
        live.iter().map(|c| c.resource()).collect()
    }

    /// Create a cache from a `CachedContent` body.
    pub fn create(&mut self, body: &Value, now_ms: u64) -> Result<Stored, ApiError> {
        self.expire(now_ms);
        let obj = object(body)?;
        unknown_field(obj, CREATE_FIELDS)?;
        let model = match obj.get("model").and_then(Value::as_str) {
            Some(m) if !m.is_empty() => m.strip_prefix("models/").unwrap_or(m).to_string(),
            _ => {
                return Err(ApiError::invalid(
                    "* CachedContent.model: model is required\n",
                ))
            }
        };
        if !model.starts_with("gemini-") {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!("models/{model} is not found for API version v1beta, or is not supported for createCachedContent."),
            ));
        }
        let expire_ms = now_ms.saturating_add(ttl_ms(obj, now_ms)?.unwrap_or(DEFAULT_TTL_MS));
        let prefix = explicit::prefix_of(obj);
        let tokens = prefix_tokens(&model, &prefix)?;
        let min = min_tokens(&model);
        if tokens < min {
            return Err(ApiError::invalid(format!(
                "Cached content is too small. total_token_count={tokens}, min_total_token_count={min}"
            )));
        }
        self.created += 1;
        let name = format!("cachedContents/emu{:024}", self.created);
        let display_name = field(body, "displayName", "display_name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let cache = Explicit {
            name: name.clone(),
            model,
            display_name,
            prefix,
            tokens,
            create_ms: now_ms,
            update_ms: now_ms,
            expire_ms,
        };
        let mut accounting = stored_accounting(&cache, now_ms);
        accounting.input_tokens = tokens;
        accounting.cache_write_5m = tokens;
        let resource = cache.resource();
        self.entries.insert(name, cache);
        Ok(Stored {
            resource,
            accounting,
        })
    }

    /// Update a cache's expiration (`update_mask`: the `updateMask` parameter, if given).
    pub fn update(
        &mut self,
        name: &str,
        body: &Value,
        update_mask: Option<&str>,
        now_ms: u64,
    ) -> Result<Stored, ApiError> {
        self.expire(now_ms);
        let obj = object(body)?;
        unknown_field(obj, CREATE_FIELDS)?;
        let masked: Vec<&str> = match update_mask {
            Some(mask) => mask.split(',').map(str::trim).collect(),
            None => obj
                .keys()
                .map(String::as_str)
                .filter(|k| *k != "name")
                .collect(),
        };
        if let Some(other) = masked.iter().find(|f| !UPDATABLE.contains(f)) {
            return Err(ApiError::invalid(format!(
                "Only the expiration (ttl or expire_time) of a CachedContent can be updated; `{other}` cannot."
            )));
        }
        let ttl = ttl_ms(obj, now_ms)?.ok_or_else(|| {
            ApiError::invalid("* UpdateCachedContentRequest: ttl or expire_time is required\n")
        })?;
        let cache = self.entries.get_mut(name).ok_or_else(not_found)?;
        cache.update_ms = now_ms;
        cache.expire_ms = now_ms.saturating_add(ttl);
        Ok(Stored {
            resource: cache.resource(),
            accounting: stored_accounting(cache, now_ms),
        })
    }

    /// Delete a cache.
    pub fn delete(&mut self, name: &str, now_ms: u64) -> Result<(), ApiError> {
        self.expire(now_ms);
        self.entries.remove(name).map(|_| ()).ok_or_else(not_found)
    }

    /// Account a `generateContent` request that names a cache: the cache's tokens are read,
    /// the request's own contents follow them.
    pub fn account(
        &mut self,
        model: &str,
        req: &Value,
        now_ms: u64,
    ) -> Result<Accounting, ApiError> {
        let name = explicit::named_cache(req).unwrap_or_default();
        let sets_cached = CACHED_FIELDS
            .iter()
            .zip(["system_instruction", "tools", "tool_config"])
            .any(|(camel, snake)| field(req, camel, snake).is_some());
        if sets_cached {
            return Err(ApiError::invalid(WITH_CACHED_FIELDS));
        }
        let cache = self.get(name, now_ms)?;
        if cache.model != model {
            return Err(ApiError::invalid(format!(
                "Model used by GenerateContent request (models/{model}) and CachedContent (models/{}) has to be the same.",
                cache.model
            )));
        }
        let whole = explicit::expand(req, &cache.prefix);
        let prompt = render(model, &whole)?;
        Ok(Accounting {
            input_tokens: prompt.total_tokens(),
            cache_read: cache.tokens,
            ..empty(model, prompt.ends.len())
        })
    }
}

fn not_found() -> ApiError {
    ApiError::new(ErrorKind::NotFound, NOT_FOUND)
}

fn object(body: &Value) -> Result<&serde_json::Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::invalid("Invalid JSON payload received. Expected an object."))
}

fn unknown_field(obj: &serde_json::Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        Some(name) => Err(ApiError::invalid(format!(
            "Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."
        ))),
        None => Ok(()),
    }
}

/// The lifetime a body sets from `now_ms`: its `ttl` (a protobuf duration, `"300s"`) or
/// its `expireTime` (RFC 3339), never both.
fn ttl_ms(obj: &serde_json::Map<String, Value>, now_ms: u64) -> Result<Option<u64>, ApiError> {
    let ttl = obj.get("ttl");
    let expire = obj.get("expireTime").or_else(|| obj.get("expire_time"));
    match (ttl, expire) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "Invalid JSON payload received. ttl and expire_time are a oneof: set one of them.",
        )),
        (Some(ttl), None) => {
            let secs = ttl
                .as_str()
                .and_then(|s| s.strip_suffix('s'))
                .and_then(|s| s.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "Invalid value at 'cached_content.ttl' (type.googleapis.com/google.protobuf.Duration), {ttl}"
                    ))
                })?;
            Ok(Some((secs * 1000.0) as u64))
        }
        (None, Some(at)) => {
            let at = at
                .as_str()
                .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "Invalid value at 'cached_content.expire_time' (type.googleapis.com/google.protobuf.Timestamp), {at}"
                    ))
                })?;
            let at = u64::try_from(at.as_millisecond()).unwrap_or(0);
            Ok(Some(at.saturating_sub(now_ms)))
        }
        (None, None) => Ok(None),
    }
}

/// The tokens a cache holds, in the order a request's prompt has them.
fn prefix_tokens(model: &str, prefix: &Value) -> Result<u64, ApiError> {
    let mut whole = prefix.clone();
    if whole.get("contents").is_none() {
        whole["contents"] = json!([]);
    }
    Ok(render(model, &whole)?.total_tokens())
}

/// The accounting of setting a cache's TTL at `now_ms`: its storage only.
fn stored_accounting(cache: &Explicit, now_ms: u64) -> Accounting {
    Accounting {
        storage_token_secs: cache.storage(now_ms),
        ..empty(&cache.model, 0)
    }
}

fn empty(model: &str, blocks: usize) -> Accounting {
    Accounting {
        input_tokens: 0,
        cache_read: 0,
        cache_write_5m: 0,
        cache_write_1h: 0,
        cache_write_30m: 0,
        cache_write_12h: 0,
        storage_token_secs: 0,
        detail: Detail {
            blocks,
            markers: Vec::new(),
            hit_block: None,
            min_cacheable_tokens: min_tokens(model),
            partition: None,
        },
        compaction: None,
        cleared: None,
        fast: false,
        flex: false,
        us_only: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(words: usize, ttl: &str) -> Value {
        let text: String = (0..words).map(|i| format!("word{i} ")).collect();
        json!({"model": "models/gemini-2.5-flash", "ttl": ttl,
            "systemInstruction": {"parts": [{"text": text}]},
            "contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    }

    /// A create bills its tokens once (at the input price, as a write) and their storage
    /// for the TTL it sets; an update bills the storage from then to its new expiry; a
    /// request against the cache reads exactly the cache's tokens.
    #[test]
    fn a_cache_bills_its_ttl_and_is_read_whole() {
        let mut caches = ExplicitCaches::default();
        let created = caches.create(&body(3000, "600s"), 1_000).unwrap();
        let tokens = created.resource["usageMetadata"]["totalTokenCount"]
            .as_u64()
            .unwrap();
        let a = &created.accounting;
        assert_eq!((a.input_tokens, a.cache_write_5m), (tokens, tokens));
        assert_eq!(a.storage_token_secs, tokens * 600);
        let name = created.resource["name"].as_str().unwrap().to_string();
        let updated = caches
            .update(&name, &json!({"ttl": "60s"}), Some("ttl"), 301_000)
            .unwrap();
        assert_eq!(updated.accounting.storage_token_secs, tokens * 60);
        assert_eq!(updated.accounting.input_tokens, 0);
        let req = json!({"cachedContent": name,
            "contents": [{"role": "user", "parts": [{"text": "and then?"}]}]});
        let read = caches.account("gemini-2.5-flash", &req, 302_000).unwrap();
        assert_eq!(read.cache_read, tokens);
        assert!(read.input_tokens > tokens);
        let late = caches.account("gemini-2.5-flash", &req, 361_000);
        assert_eq!(late.unwrap_err().message, NOT_FOUND, "expired with its TTL");
    }
}
