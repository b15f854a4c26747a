//! The OpenAI family's rules shared by Chat Completions and Responses: the error body and
//! the service tiers.

pub(crate) mod explicit;
pub(crate) mod request;

use bytes::Bytes;
use serde_json::Value;

use crate::error::ErrorKind;
use crate::route::Endpoint;

/// OpenAI fast mode (priority processing until 2026-07-30), the same on Chat and Responses:
/// a request asks for it with `service_tier: "fast"` or `"priority"`, and an answer served so
/// says `"priority"` whichever it asked (developers.openai.com/api/docs/guides/fast-mode;
/// openai-python 3.57, `Response.service_tier`). Its cache is not the standard tier's: a
/// tier change is a miss (`service_tier_changed`, the Responses `prompt_cache_diagnostics`).
pub const FAST_TIERS: [&str; 2] = ["priority", "fast"];
/// The `service_tier` of an OpenAI answer served in fast mode.
pub const FAST_ANSWER: &str = "priority";

/// OpenAI flex processing, on Chat and Responses: asked and answered `service_tier: "flex"`,
/// billed at the Batch API's rates, half the standard ones (developers.openai.com, Flex
/// processing), and refused with a 400 by a model without it. A tier of its own, cached
/// apart like fast mode (`service_tier_changed`).
pub const FLEX_TIER: &str = "flex";

/// Whether a Chat or Responses request asks for flex processing ([`FLEX_TIER`]).
pub fn asks_flex(endpoint: Endpoint, request: &Value) -> bool {
    matches!(endpoint, Endpoint::Chat | Endpoint::Responses)
        && request.get("service_tier").and_then(Value::as_str) == Some(FLEX_TIER)
}

/// The `prompt_cache_retention` value that keeps entries for a day.
pub const EXTENDED_RETENTION: &str = "24h";
/// The `prompt_cache_options.ttl` values: the default, and the longer one Responses takes.
pub const TTL_30M: &str = "30m";
pub const TTL_12H: &str = "12h";

/// How long an OpenAI request asks the provider to keep its prefix: the two request fields
/// that say so, read in one place for the emulator, the diagnosis and shaping.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// `prompt_cache_retention: "24h"`: kept up to a day.
    pub extended_24h: bool,
    /// `prompt_cache_options.ttl: "12h"` (Responses, GPT-5.6 and later): every breakpoint
    /// the request writes lives at least 12 hours.
    pub ttl_12h: bool,
}

impl Retention {
    /// What a request's envelope asks (`prompt_cache_retention`,
    /// `prompt_cache_options.ttl`); only those two options are parsed, and only on Chat
    /// and Responses.
    pub fn of_envelope(env: &crate::envelope::Envelope) -> Retention {
        #[derive(serde::Deserialize)]
        struct Options {
            ttl: Option<String>,
        }
        if !matches!(env.endpoint(), Endpoint::Chat | Endpoint::Responses) {
            return Retention::default();
        }
        let retention = env
            .option_raw("prompt_cache_retention")
            .and_then(|raw| serde_json::from_slice::<String>(raw).ok());
        let ttl = env
            .option_raw("prompt_cache_options")
            .and_then(|raw| serde_json::from_slice::<Options>(raw).ok())
            .and_then(|o| o.ttl);
        Retention::of(retention.as_deref(), ttl.as_deref())
    }

    /// From the request's `prompt_cache_retention` and `prompt_cache_options.ttl` values.
    pub fn of(retention: Option<&str>, ttl: Option<&str>) -> Retention {
        Retention {
            extended_24h: retention == Some(EXTENDED_RETENTION),
            ttl_12h: ttl == Some(TTL_12H),
        }
    }
}

/// The `prompt_cache_key` a request sets (its cache routing key; Codex and pi set it to
/// their session id).
pub fn prompt_cache_key(env: &crate::envelope::Envelope) -> Option<String> {
    let raw = env.option_raw("prompt_cache_key")?;
    super::non_empty(serde_json::from_slice::<String>(raw).ok().as_deref())
}

/// Tokens of the prompt start that choose the machine: "roughly the first 256 tokens"
/// (PROVIDERS.md, OpenAI caching).
pub const ROUTING_TOKENS: usize = 256;
/// Bytes of the prompt start hashed for the route: [`ROUTING_TOKENS`] at
/// about four bytes a token.
const ROUTING_BYTES: usize = ROUTING_TOKENS * 4;
/// The route of an OpenAI request: its model, `prompt_cache_key` and the first
/// `ROUTING_BYTES` of its prompt in the provider's cache-key order (tools, instructions,
/// input). `None` for an API without the rule.
pub fn route_of(env: &crate::envelope::Envelope) -> Option<u64> {
    if !matches!(env.endpoint(), Endpoint::Chat | Endpoint::Responses) {
        return None;
    }
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for key in ["model", "prompt_cache_key"] {
        let value = env.option_raw(key).unwrap_or_default();
        h.update(&(value.len() as u64).to_le_bytes());
        h.update(value);
    }
    let mut left = ROUTING_BYTES;
    let parts = env
        .tools_raw()
        .chain(env.system_raw().flatten())
        .chain(env.history_raw());
    for part in parts {
        let take = part.len().min(left);
        h.update(&part[..take]);
        left -= take;
        if left == 0 {
            break;
        }
    }
    Some(h.digest())
}

/// The `error.type` and `error.code` of an error body (PROVIDERS.md, Errors).
fn error_type(kind: ErrorKind) -> (&'static str, Option<&'static str>) {
    match kind {
        ErrorKind::InvalidRequest => ("invalid_request_error", None),
        ErrorKind::TooLarge => ("invalid_request_error", Some("request_too_large")),
        ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
        ErrorKind::NotFound => ("invalid_request_error", Some("not_found")),
        ErrorKind::RequestTimeout => ("invalid_request_error", Some("request_timeout")),
        ErrorKind::UpgradeRefused => ("invalid_request_error", Some("websocket_not_supported")),
        ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
        ErrorKind::Internal => ("server_error", None),
        ErrorKind::BadGateway => ("server_error", Some("bad_gateway")),
        ErrorKind::Unavailable | ErrorKind::Overloaded => ("server_error", Some("overloaded")),
        ErrorKind::Timeout => ("server_error", Some("timeout")),
    }
}

/// An error body: `{"error":{"message":M,"type":T,"param":null,"code":C}}`.
pub fn error_body(kind: ErrorKind, message: &str) -> Bytes {
    let (ty, code) = error_type(kind);
    let value = serde_json::json!({
        "error": { "message": message, "type": ty, "param": null, "code": code },
    });
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
}
