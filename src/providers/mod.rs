//! The provider APIs: which one a request speaks (decided once at the edge), and one module
//! per API holding every rule cachet knows about it, with the same skeleton in each:
//!
//! - message kinds ([`MsgKind`]) and the provider's rules on neighbouring messages;
//! - how the system prompt is sent, and what does not key the cache;
//! - the order the prompt cache keys on;
//! - how a stream ends (done or failed) and what the client gets when it breaks;
//! - the assistant message assembled from a response.
//!
//! Rules that are the same for every API live here: user turns ([`turns`]). Usage fields
//! are read in `usage`, per API.

pub mod anthropic;
pub mod auth;
mod message;
pub mod openai_chat;
pub mod openai_responses;
pub mod turns;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method};
use serde_json::Value;

#[cfg(test)]
pub(crate) use message::TOOL_SHAPES;
pub use message::{check_boundary, text_of, tool_name, MsgKind};

/// OpenAI fast mode (priority processing until 2026-07-30), the same on Chat and Responses:
/// a request asks for it with `service_tier: "fast"` or `"priority"`, and an answer served so
/// says `"priority"` whichever it asked (developers.openai.com/api/docs/guides/fast-mode;
/// openai-python 3.57, `Response.service_tier`). Its cache is not the standard tier's: a
/// tier change is a miss (`service_tier_changed`, the Responses `prompt_cache_diagnostics`).
pub const OPENAI_FAST_TIERS: [&str; 2] = ["priority", "fast"];
/// The `service_tier` of an OpenAI answer served in fast mode.
pub const OPENAI_FAST_ANSWER: &str = "priority";

/// OpenAI flex processing, on Chat and Responses: asked and answered `service_tier: "flex"`,
/// billed at the Batch API's rates, half the standard ones (developers.openai.com, Flex
/// processing), and refused with a 400 by a model without it. A tier of its own, cached
/// apart like fast mode (`service_tier_changed`).
pub const OPENAI_FLEX_TIER: &str = "flex";

/// Whether a Chat or Responses request asks for flex processing ([`OPENAI_FLEX_TIER`]).
pub fn asks_flex(endpoint: Endpoint, request: &Value) -> bool {
    matches!(endpoint, Endpoint::Chat | Endpoint::Responses)
        && request.get("service_tier").and_then(Value::as_str) == Some(OPENAI_FLEX_TIER)
}

/// Whether a generation request asks to be served in fast mode: Anthropic's `speed`
/// ([`anthropic::FAST_SPEED`]), OpenAI's `service_tier` ([`OPENAI_FAST_TIERS`]). Whether it
/// is so served depends on the model too (`models::serves_fast`).
pub fn asks_fast(endpoint: Endpoint, request: &Value) -> bool {
    match endpoint {
        Endpoint::Messages => {
            request.get("speed").and_then(Value::as_str) == Some(anthropic::FAST_SPEED)
        }
        Endpoint::Chat | Endpoint::Responses => request
            .get("service_tier")
            .and_then(Value::as_str)
            .is_some_and(|tier| OPENAI_FAST_TIERS.contains(&tier)),
        _ => false,
    }
}

/// A section of the prompt, in the providers' cache-key vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    Tools,
    System,
    Messages,
}

impl Section {
    pub fn label(self) -> &'static str {
        match self {
            Section::Tools => "tools",
            Section::System => "system",
            Section::Messages => "messages",
        }
    }
}

/// How a stream ended on the provider's terminal event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// The answer is complete.
    Done,
    /// The provider ended the stream with an error (e.g. `overloaded_error` after a 200).
    Error,
}

/// The provider family: decides the upstream and the error format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Anthropic,
    OpenAi,
}

impl Provider {
    pub fn label(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }
}

/// The API endpoint, as named in policies and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Anthropic `POST /v1/messages/count_tokens`.
    CountTokens,
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// OpenAI `POST /v1/responses`.
    Responses,
    /// OpenAI `POST /v1/responses/compact`: the model compacts a conversation. Billed like a
    /// generation (its answer carries a response's `usage`), so it is counted like one;
    /// never reshaped, and kept out of the session log (its answer is not a turn).
    Compact,
    /// `GET /v1/models` (either family).
    Models,
    /// Any other `/v1/...` path: forwarded untouched.
    Other,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Messages => "messages",
            Endpoint::CountTokens => "count_tokens",
            Endpoint::Chat => "chat",
            Endpoint::Responses => "responses",
            Endpoint::Compact => "responses_compact",
            Endpoint::Models => "models",
            Endpoint::Other => "other",
        }
    }

    /// Endpoints whose body is a model request cachet parses and taps.
    pub fn is_generation(self) -> bool {
        matches!(
            self,
            Endpoint::Messages | Endpoint::Chat | Endpoint::Responses
        )
    }

    /// Endpoints whose answer is a bill: its `usage` is read and counted.
    pub fn is_billed(self) -> bool {
        self.is_generation() || self == Endpoint::Compact
    }

    /// Whether an answer with this status is a bill, whose usage the figures need: one
    /// without it counts in `cachet_usage_missing_total`.
    pub fn bills(self, status: u16) -> bool {
        self.is_billed() && (200..300).contains(&status)
    }

    /// The endpoint whose rules read this one's request and usage: a compaction's are a
    /// response's (the same prompt fields, the same `usage` object).
    pub fn read_as(self) -> Endpoint {
        match self {
            Endpoint::Compact => Endpoint::Responses,
            other => other,
        }
    }
}

impl Endpoint {
    /// Whether an SSE event ends the stream, and how.
    pub fn terminal(self, event: &str, data: &[u8]) -> Option<Terminal> {
        match self {
            Endpoint::Messages => anthropic::terminal(event),
            Endpoint::Chat => openai_chat::terminal(data),
            Endpoint::Responses => openai_responses::terminal(event),
            _ => Some(Terminal::Done),
        }
    }

    /// What the client is sent when the upstream breaks off after its 200: Anthropic and
    /// Responses streams get an `error` event (their SDKs raise it); Chat streams are aborted
    /// (`None`) so the client's HTTP layer reports an incomplete body instead of a silently
    /// short answer.
    pub fn stream_break_event(self, message: &str) -> Option<Bytes> {
        match self {
            Endpoint::Messages => Some(anthropic::stream_break_event(message)),
            Endpoint::Responses => Some(openai_responses::stream_break_event(message)),
            _ => None,
        }
    }

    /// The assistant message of a response, in the provider's own shape (an Anthropic
    /// message, a Chat message, the Responses output items), from the whole JSON body or
    /// the stream's events.
    pub fn assistant_message(
        self,
        json_body: Option<&[u8]>,
        events: &[(String, Bytes)],
    ) -> Option<Value> {
        if let Some(body) = json_body {
            let v: Value = serde_json::from_slice(body).ok()?;
            return match self {
                Endpoint::Messages => anthropic::assistant_from_body(&v),
                Endpoint::Chat => openai_chat::assistant_from_body(&v),
                Endpoint::Responses => openai_responses::assistant_from_body(&v),
                _ => None,
            };
        }
        match self {
            Endpoint::Messages => anthropic::assistant_from_stream(events),
            Endpoint::Chat => openai_chat::assistant_from_stream(events),
            Endpoint::Responses => openai_responses::assistant_from_stream(events),
            _ => None,
        }
    }

    /// The sections of a prompt in the order the provider's prompt cache keys on them.
    pub fn cache_key_order(self) -> [Section; 3] {
        match self {
            Endpoint::Chat => openai_chat::CACHE_KEY_ORDER,
            Endpoint::Responses => openai_responses::CACHE_KEY_ORDER,
            _ => anthropic::CACHE_KEY_ORDER,
        }
    }

    /// Whether a system text is left out of the provider's cache key.
    pub fn is_cache_neutral_system_text(self, text: &str) -> bool {
        matches!(self, Endpoint::Messages | Endpoint::CountTokens)
            && anthropic::is_cache_neutral_system_text(text)
    }
}

/// A classified request target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub provider: Provider,
    pub endpoint: Endpoint,
}

/// The API version header every Anthropic client sends.
pub const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
/// Anthropic's API key header (OpenAI's key goes in `authorization: Bearer`).
pub const ANTHROPIC_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// The betas an Anthropic request opts into, comma-separated.
pub const ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
/// The upstream's id of a request, what a provider's support asks for: Anthropic's
/// `request-id`, OpenAI's `x-request-id`.
pub const REQUEST_ID_HEADERS: [HeaderName; 2] = [
    HeaderName::from_static("request-id"),
    HeaderName::from_static("x-request-id"),
];

/// The header a provider names its request id in (see [`REQUEST_ID_HEADERS`]).
pub fn request_id_header(provider: Provider) -> HeaderName {
    let [anthropic, openai] = REQUEST_ID_HEADERS;
    match provider {
        Provider::Anthropic => anthropic,
        Provider::OpenAi => openai,
    }
}

/// The family a request speaks: the one its path names, else the one its headers name
/// ([`family_named_by`]). Routing, the errors cachet answers itself (refusals at the edge,
/// paths outside `/v1/`) and the emulator all go by this one rule.
pub fn family_of(path: &str, headers: &HeaderMap) -> Provider {
    family_named_by_path(path).unwrap_or_else(|| family_named_by(headers))
}

/// The family whose API a path is under: Anthropic's `/v1/messages`, OpenAI's `/v1/chat/`
/// and `/v1/responses` (whole segments: `/v1/messagesx` names none).
fn family_named_by_path(path: &str) -> Option<Provider> {
    let under = |api: &str| {
        path.strip_prefix(api)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if under("/v1/messages") {
        Some(Provider::Anthropic)
    } else if under("/v1/chat") || under("/v1/responses") {
        Some(Provider::OpenAi)
    } else {
        None
    }
}

/// The family a request's headers name, where its path does not: OpenAI for a ChatGPT
/// sign-in (whatever else it carries: Codex at a cachet with client keys sends its cachet key
/// as `x-api-key` beside it), else Anthropic's version or key header, else OpenAI.
pub fn family_named_by(headers: &HeaderMap) -> Provider {
    // Pre-parsed names: a lookup by `&str` parses the name on every request.
    if auth::signed_in_with_chatgpt(headers) {
        Provider::OpenAi
    } else if headers.contains_key(ANTHROPIC_VERSION) || headers.contains_key(ANTHROPIC_KEY) {
        Provider::Anthropic
    } else {
        Provider::OpenAi
    }
}

/// Classify a request by method, path (without query) and headers.
/// Returns `None` for paths outside `/v1/`.
pub fn classify(method: &Method, path: &str, headers: &HeaderMap) -> Option<Route> {
    let path = path.trim_end_matches('/');
    // Only the routes that do not name their provider read the family.
    let family = || family_of(path, headers);
    let route = |provider, endpoint| Some(Route { provider, endpoint });
    match (method, path) {
        (&Method::POST, "/v1/messages") => route(Provider::Anthropic, Endpoint::Messages),
        (&Method::POST, "/v1/messages/count_tokens") => {
            route(Provider::Anthropic, Endpoint::CountTokens)
        }
        (&Method::POST, "/v1/chat/completions") => route(Provider::OpenAi, Endpoint::Chat),
        (&Method::POST, "/v1/responses") => route(Provider::OpenAi, Endpoint::Responses),
        (&Method::POST, "/v1/responses/compact") => route(Provider::OpenAi, Endpoint::Compact),
        (&Method::GET, "/v1/models") => route(family(), Endpoint::Models),
        (_, p) if p.starts_with("/v1/") || p == "/v1" => route(family(), Endpoint::Other),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Codex signed in with ChatGPT, at a cachet with client keys, sends its cachet key as
    /// `x-api-key` beside its ChatGPT token (README, `~/.codex/config.toml#chatgpt-keyed`):
    /// its model list is still OpenAI's, not Anthropic's.
    #[test]
    fn a_chatgpt_sign_in_names_openai_whatever_key_header_it_carries() {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "ck-team".parse().unwrap());
        assert_eq!(family_named_by(&h), Provider::Anthropic);
        h.insert("authorization", "Bearer eyJhbGciOi.x.y".parse().unwrap());
        h.insert("chatgpt-account-id", "acc-1".parse().unwrap());
        assert_eq!(family_named_by(&h), Provider::OpenAi);
        let route = classify(&Method::GET, "/v1/models", &h).unwrap();
        assert_eq!(route.provider, Provider::OpenAi);
    }

    #[test]
    fn the_path_names_the_family_by_whole_segments_before_the_headers() {
        let mut anthropic = HeaderMap::new();
        anthropic.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let none = HeaderMap::new();
        for (path, by_path) in [
            ("/v1/messages", Some(Provider::Anthropic)),
            ("/v1/messages/batches/msgbatch_1", Some(Provider::Anthropic)),
            ("/v1/chat/completions/chatcmpl-1", Some(Provider::OpenAi)),
            ("/v1/chat", Some(Provider::OpenAi)),
            ("/v1/responses/resp_1/cancel", Some(Provider::OpenAi)),
            ("/v1/messagesx", None),
            ("/v1/chatter", None),
            ("/v1/models", None),
            ("/messages", None),
        ] {
            for headers in [&anthropic, &none] {
                let expected = by_path.unwrap_or_else(|| family_named_by(headers));
                assert_eq!(family_of(path, headers), expected, "{path}");
            }
        }
        // Routing goes by the same rule.
        let r = classify(&Method::GET, "/v1/messages/batches", &none).unwrap();
        assert_eq!(r.provider, Provider::Anthropic);
        let r = classify(&Method::GET, "/v1/responses/resp_1", &anthropic).unwrap();
        assert_eq!(r.provider, Provider::OpenAi);
    }

    #[test]
    fn known_routes_and_family_fallback() {
        let h = HeaderMap::new();
        let r = classify(&Method::POST, "/v1/messages", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::Anthropic, Endpoint::Messages)
        );
        let r = classify(&Method::POST, "/v1/responses", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::OpenAi, Endpoint::Responses)
        );
        let r = classify(&Method::GET, "/v1/files", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::OpenAi, Endpoint::Other)
        );
        let mut h = HeaderMap::new();
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let r = classify(&Method::GET, "/v1/models", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::Anthropic, Endpoint::Models)
        );
        assert!(classify(&Method::GET, "/healthz", &h).is_none());
    }
}
