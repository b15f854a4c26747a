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
pub mod bedrock;
pub mod cache_key;
pub mod check;
pub mod clients;
pub mod gemini;
mod message;
pub mod openai;
pub mod openai_chat;
pub mod openai_responses;
pub mod usage;
pub mod vertex;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method};
use serde_json::Value;

use crate::envelope::{CompileOptions, Envelope, MsgKind, Wire};
use crate::error::ApiError;
use crate::route::{Endpoint, Provider, Route, Section};

#[cfg(test)]
pub(crate) use message::TOOL_SHAPES;
pub use message::{text_of, tool_name};

/// Whether a generation request asks to be served in fast mode: Anthropic's `speed`
/// ([`anthropic::FAST_SPEED`]), OpenAI's `service_tier` ([`openai::FAST_TIERS`]). Whether it
/// is so served depends on the model too (`models::serves_fast`).
pub fn asks_fast(endpoint: Endpoint, request: &Value) -> bool {
    match endpoint.read_as() {
        Endpoint::Messages => {
            request.get("speed").and_then(Value::as_str) == Some(anthropic::FAST_SPEED)
        }
        Endpoint::Chat | Endpoint::Responses => request
            .get("service_tier")
            .and_then(Value::as_str)
            .is_some_and(|tier| openai::FAST_TIERS.contains(&tier)),
        _ => false,
    }
}

/// Top-level options whose change invalidates the cached messages on some API: Anthropic's
/// `thinking` and `tool_choice` ("tool_choice, adding or removing images, and thinking
/// settings invalidate messages only", prompt-caching docs), OpenAI's `reasoning`. A patch
/// setting one changes cached content (DESIGN §3).
pub const CACHE_KEYED_OPTIONS: &[&str] = &["thinking", "tool_choice", "reasoning"];

/// An error cachet answers itself, in the provider family's own error format.
pub fn error_body(provider: Provider, kind: crate::error::ErrorKind, message: &str) -> Bytes {
    match provider {
        Provider::Anthropic => anthropic::error_body(kind, message),
        Provider::OpenAi => openai::error_body(kind, message),
        Provider::Bedrock => bedrock::error_body(kind, message),
        Provider::Vertex => vertex::error_body(kind, message),
        Provider::Gemini => gemini::error_body(kind, message),
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

/// One provider API: what cachet asks of it once a request's route is known. Each API's
/// module implements it; [`api`] is the table from route to API, and the one place the
/// rest of cachet learns which rules apply.
pub trait Api: Send + Sync {
    /// The endpoint whose rules these are.
    fn endpoint(&self) -> Endpoint;

    /// Whether an SSE event ends the stream, and how.
    fn terminal(&self, event: &str, data: &[u8]) -> Option<Terminal>;

    /// What the client is sent when the upstream breaks off after its 200: an `error`
    /// event its SDK raises, or `None` to abort the body, so the client's HTTP layer
    /// reports an incomplete answer instead of a silently short one.
    fn stream_break_event(&self, _message: &str) -> Option<Bytes> {
        None
    }

    /// The assistant message of a whole JSON answer, in the provider's own shape.
    fn assistant_from_body(&self, _answer: &Value) -> Option<Value> {
        None
    }

    /// The assistant message assembled from a stream's events.
    fn assistant_from_stream(&self, _events: &[(String, Bytes)]) -> Option<Value> {
        None
    }

    /// The sections of a prompt in the order the provider's prompt cache keys on them.
    fn cache_key_order(&self) -> [Section; 3] {
        [Section::Tools, Section::System, Section::Messages]
    }

    /// Whether a system text is left out of the provider's cache key.
    fn is_cache_neutral_system_text(&self, _text: &str) -> bool {
        false
    }
}

impl dyn Api {
    /// The assistant message of an answer, from the whole JSON body or the stream's events.
    pub fn assistant_message(
        &self,
        json_body: Option<&[u8]>,
        events: &[(String, Bytes)],
    ) -> Option<Value> {
        match json_body {
            Some(body) => self.assistant_from_body(&serde_json::from_slice(body).ok()?),
            None => self.assistant_from_stream(events),
        }
    }
}

/// The request wire of an endpoint that has a context envelope (the generation endpoints
/// and a token count, which is read as Messages).
pub fn wire(endpoint: Endpoint) -> Option<&'static dyn Wire> {
    match endpoint {
        Endpoint::Messages => Some(&anthropic::MESSAGES),
        Endpoint::CountTokens => Some(&anthropic::COUNT_TOKENS),
        Endpoint::Chat => Some(&openai_chat::CHAT),
        Endpoint::Responses => Some(&openai_responses::RESPONSES),
        Endpoint::Invoke => Some(&bedrock::INVOKE),
        Endpoint::RawPredict => Some(&vertex::RAW_PREDICT),
        Endpoint::GenerateContent => Some(&gemini::GENERATE),
        Endpoint::Compact | Endpoint::Converse | Endpoint::Models | Endpoint::Other => None,
        Endpoint::GeminiCountTokens | Endpoint::CachedContents => None,
    }
}

/// Every API's request wire, one row each.
const WIRES: [&dyn Wire; 4] = [
    &anthropic::MESSAGES,
    &openai_chat::CHAT,
    &openai_responses::RESPONSES,
    &gemini::GENERATE,
];

/// The names a body's history array has on some API (`messages`, `input`), for reading a
/// body before its API's rules are asked.
pub fn history_keys() -> &'static [&'static [u8]] {
    static KEYS: std::sync::LazyLock<Vec<&'static [u8]>> =
        std::sync::LazyLock::new(|| keys_of(|w| w.history_key()));
    &KEYS
}

/// The names a body's tool definitions have on some API.
pub fn tools_keys() -> &'static [&'static [u8]] {
    static KEYS: std::sync::LazyLock<Vec<&'static [u8]>> =
        std::sync::LazyLock::new(|| keys_of(|w| w.tools_key()));
    &KEYS
}

fn keys_of(key: impl Fn(&dyn Wire) -> &'static str) -> Vec<&'static [u8]> {
    let mut keys: Vec<&'static [u8]> = Vec::new();
    for wire in WIRES {
        let k = key(wire).as_bytes();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys
}

/// What the body check gathers of a body of any API, to split its envelope from.
pub fn gathered() -> crate::json::check::Gathered {
    crate::json::check::Gathered::new(history_keys(), tools_keys())
}

/// Parse a request body of `endpoint` into its envelope.
pub fn parse_envelope(endpoint: Endpoint, body: Bytes) -> Result<Envelope, ApiError> {
    Envelope::parse(wire_or_refuse(endpoint)?, body)
}

/// The wire of an endpoint, or the refusal of one that has no context envelope.
/// The beta a request must name for `endpoint`'s provider to explain its cache misses
/// (Anthropic's), if any.
pub fn diagnosis_beta(endpoint: Endpoint) -> Option<&'static str> {
    (endpoint == Endpoint::Messages).then_some(anthropic::CACHE_DIAGNOSIS_BETA)
}

/// What asks `endpoint`'s provider to explain its cache misses against the earlier answer
/// `id`: the top-level option to set on `env` (see [`diagnosis_beta`]). Anthropic:
/// `diagnostics.previous_message_id`, behind its beta. OpenAI (Responses, GPT-5.6 and later
/// supported models: the caller checks the model): `prompt_cache_options.
/// comparison_response_id`, kept beside the request's own cache options. `None` for an API
/// without diagnostics.
pub fn diagnosis_option(
    endpoint: Endpoint,
    env: &Envelope,
    id: &str,
) -> Option<(&'static str, Bytes)> {
    match endpoint {
        Endpoint::Messages => {
            let field = serde_json::json!({ "previous_message_id": id });
            Some(("diagnostics", Bytes::from(field.to_string())))
        }
        Endpoint::Responses => {
            let existing = env.option_raw(openai_responses::PROMPT_CACHE_OPTIONS);
            let options = openai_responses::comparison_option(existing, id);
            Some((openai_responses::PROMPT_CACHE_OPTIONS, options))
        }
        _ => None,
    }
}

pub fn wire_or_refuse(endpoint: Endpoint) -> Result<&'static dyn Wire, ApiError> {
    wire(endpoint).ok_or_else(|| {
        ApiError::invalid(format!(
            "the {} endpoint has no context envelope",
            endpoint.label()
        ))
    })
}

/// Parse, then compile with `opts` and no patch: the one-call form for shaping cache
/// markers (Anthropic `cache_control`, OpenAI explicit breakpoints) or setting
/// `prompt_cache_key` on a request (e.g. from a test or the emulator).
pub fn reshape(endpoint: Endpoint, body: Bytes, opts: &CompileOptions) -> Result<Bytes, ApiError> {
    Ok(parse_envelope(endpoint, body)?
        .compile_with_markers(opts)
        .to_bytes())
}

/// A message's kind, read by its API's wire (an endpoint without one reads as Messages).
fn read_kind(endpoint: Endpoint, b: &[u8]) -> MsgKind {
    wire(endpoint).unwrap_or(&anthropic::MESSAGES).classify(b)
}

/// What a message (a Responses input item) of `endpoint` is, from its raw JSON bytes.
pub fn message_kind(endpoint: Endpoint, b: &[u8]) -> MsgKind {
    message_kind_among(endpoint, b, 1)
}

/// [`message_kind`] of one of `among` messages read together (a body's history).
pub fn message_kind_among(endpoint: Endpoint, b: &[u8], among: usize) -> MsgKind {
    MsgKind::remembered(endpoint, b, among, |b| read_kind(endpoint, b))
}

/// The provider's rule for two neighbouring messages (`None` = start or end of the list):
/// why the pair would be rejected.
pub fn check_boundary(
    endpoint: Endpoint,
    prev: Option<&MsgKind>,
    next: Option<&MsgKind>,
) -> Result<(), String> {
    match endpoint {
        Endpoint::Responses => openai_responses::check_boundary(prev, next),
        Endpoint::Chat => openai_chat::check_boundary(prev, next),
        Endpoint::GenerateContent => gemini::check_boundary(prev, next),
        _ => anthropic::check_boundary(prev, next),
    }
}

/// A value trimmed, unless it is empty.
fn non_empty(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// An endpoint whose answer is no turn: a token count, a compaction (read by the rules of
/// `read_as`, whose request and usage it shares), or a call cachet forwards without reading
/// (a model list, a file upload). Its stream, if any, ends where the body does.
struct Unanswered {
    endpoint: Endpoint,
    read_as: Option<&'static dyn Api>,
}

static COUNT_TOKENS: Unanswered = Unanswered {
    endpoint: Endpoint::CountTokens,
    read_as: Some(&anthropic::MESSAGES),
};
static COMPACT: Unanswered = Unanswered {
    endpoint: Endpoint::Compact,
    read_as: Some(&openai_responses::RESPONSES),
};
static GEMINI_COUNT_TOKENS: Unanswered = Unanswered {
    endpoint: Endpoint::GeminiCountTokens,
    read_as: Some(&gemini::GENERATE),
};
static CACHED_CONTENTS: Unanswered = Unanswered {
    endpoint: Endpoint::CachedContents,
    read_as: Some(&gemini::GENERATE),
};
static MODELS: Unanswered = Unanswered {
    endpoint: Endpoint::Models,
    read_as: None,
};
static OTHER: Unanswered = Unanswered {
    endpoint: Endpoint::Other,
    read_as: None,
};

impl Api for Unanswered {
    fn endpoint(&self) -> Endpoint {
        self.endpoint
    }

    fn terminal(&self, _event: &str, _data: &[u8]) -> Option<Terminal> {
        Some(Terminal::Done)
    }

    fn cache_key_order(&self) -> [Section; 3] {
        self.read_as
            .map_or([Section::Tools, Section::System, Section::Messages], |a| {
                a.cache_key_order()
            })
    }

    fn is_cache_neutral_system_text(&self, text: &str) -> bool {
        self.read_as
            .is_some_and(|a| a.is_cache_neutral_system_text(text))
    }
}

/// Whether cachet reads an exchange's request and answer whole: a bill's, and a Gemini
/// cache's (`cachedContents`), whose create holds what the requests that name the cache
/// later are measured with, under the name its answer gives.
pub fn reads_whole(endpoint: Endpoint) -> bool {
    endpoint.is_billed() || endpoint == Endpoint::CachedContents
}

/// What an answer read as `usage` bills, by the call's method: a Gemini cache's create and
/// update bill the TTL they set, its get, list and delete nothing; any other answer what it
/// reports.
pub fn bill_of(
    endpoint: Endpoint,
    method: &http::Method,
    usage: Option<crate::usage::Usage>,
) -> Option<crate::usage::Usage> {
    match endpoint {
        Endpoint::CachedContents => gemini::usage::stored_bill(method, usage),
        _ => usage,
    }
}

/// The rules of a route's API: one row per endpoint (a token count is read by Messages'
/// rules, a compaction by Responses').
pub fn api(endpoint: Endpoint) -> &'static dyn Api {
    match endpoint {
        Endpoint::Messages => &anthropic::MESSAGES,
        Endpoint::CountTokens => &COUNT_TOKENS,
        Endpoint::Chat => &openai_chat::CHAT,
        Endpoint::Responses => &openai_responses::RESPONSES,
        Endpoint::Compact => &COMPACT,
        Endpoint::Invoke => &bedrock::INVOKE,
        Endpoint::Converse => &bedrock::converse::CONVERSE,
        Endpoint::RawPredict => &vertex::RAW_PREDICT,
        Endpoint::Models => &MODELS,
        Endpoint::GenerateContent => &gemini::GENERATE,
        Endpoint::GeminiCountTokens => &GEMINI_COUNT_TOKENS,
        Endpoint::CachedContents => &CACHED_CONTENTS,
        Endpoint::Other => &OTHER,
    }
}

/// The API version header every Anthropic client sends.
pub const ANTHROPIC_VERSION: HeaderName = HeaderName::from_static("anthropic-version");
/// Anthropic's API key header (OpenAI's key goes in `authorization: Bearer`).
pub const ANTHROPIC_KEY: HeaderName = HeaderName::from_static("x-api-key");
/// The betas an Anthropic request opts into, comma-separated.
pub const ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
/// The upstream's id of a request, what a provider's support asks for: Anthropic's
/// `request-id` (which Vertex passes on), OpenAI's `x-request-id`, Bedrock's
/// `x-amzn-requestid`.
pub const REQUEST_ID_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("request-id"),
    HeaderName::from_static("x-request-id"),
    HeaderName::from_static("x-amzn-requestid"),
];

/// The header a provider names its request id in (see [`REQUEST_ID_HEADERS`]).
pub fn request_id_header(provider: Provider) -> HeaderName {
    let [anthropic, openai, bedrock] = REQUEST_ID_HEADERS;
    match provider {
        Provider::Anthropic | Provider::Vertex => anthropic,
        Provider::OpenAi | Provider::Gemini => openai,
        Provider::Bedrock => bedrock,
    }
}

/// The model a route's path names, where the path does (Gemini's
/// `/v1beta/models/{model}:generateContent`, Bedrock, Vertex); `None` where the body names it.
pub fn model_in_path(endpoint: Endpoint, path: &str) -> Option<String> {
    match endpoint {
        Endpoint::GenerateContent | Endpoint::GeminiCountTokens => {
            gemini::model_in_path(path).map(str::to_owned)
        }
        Endpoint::Invoke | Endpoint::Converse => bedrock::model_of(path),
        Endpoint::RawPredict => vertex::model_of(path),
        _ => None,
    }
}

/// The family a request speaks: the one its path names, else the one its headers name
/// ([`family_named_by`]). Routing, the errors cachet answers itself (refusals at the edge,
/// paths outside `/v1/`) and the emulator all go by this one rule.
pub fn family_of(path: &str, headers: &HeaderMap) -> Provider {
    family_named_by_path(path).unwrap_or_else(|| family_named_by(headers))
}

/// The family whose API a path is under: Anthropic's `/v1/messages`, OpenAI's `/v1/chat/`
/// and `/v1/responses`, Gemini's `/v1beta/` (whole segments: `/v1/messagesx` names none).
fn family_named_by_path(path: &str) -> Option<Provider> {
    if gemini::classify(&Method::GET, path).is_some() {
        return Some(Provider::Gemini);
    }
    let under = |api: &str| {
        path.strip_prefix(api)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if under("/v1/messages") {
        Some(Provider::Anthropic)
    } else if under("/v1/chat") || under("/v1/responses") {
        Some(Provider::OpenAi)
    } else if path.starts_with("/model/") {
        Some(Provider::Bedrock)
    } else if under("/v1/projects") {
        Some(Provider::Vertex)
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
    if let Some(endpoint) = gemini::classify(method, path) {
        return Some(Route {
            provider: Provider::Gemini,
            endpoint,
        });
    }
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
        (_, p) if p.starts_with("/model/") => {
            let endpoint = (*method == Method::POST)
                .then(|| bedrock::operation(p))
                .flatten()
                .map_or(Endpoint::Other, |op| op.endpoint);
            route(Provider::Bedrock, endpoint)
        }
        (_, p) if family_named_by_path(p) == Some(Provider::Vertex) => {
            // Vertex's token count is a `rawPredict` of the model `count-tokens`, whose body
            // names the model: forwarded untouched.
            let generation = vertex::target(p).filter(|t| t.model != "count-tokens");
            let endpoint = match (method, generation) {
                (&Method::POST, Some(_)) => Endpoint::RawPredict,
                _ => Endpoint::Other,
            };
            route(Provider::Vertex, endpoint)
        }
        (_, p) if p.starts_with("/v1/") || p == "/v1" => route(family(), Endpoint::Other),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_and_openai_error_shapes() {
        let kind = crate::error::ErrorKind::TooLarge;
        let message = "body is 40 MiB, limit 32 MiB";
        let a: Value =
            serde_json::from_slice(&error_body(Provider::Anthropic, kind, message)).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "request_too_large");
        let o: Value =
            serde_json::from_slice(&error_body(Provider::OpenAi, kind, message)).unwrap();
        assert_eq!(o["error"]["message"], message);
        assert_eq!(kind.status().as_u16(), 413);
    }

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
