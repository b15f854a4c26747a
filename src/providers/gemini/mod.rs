//! Google's Gemini API (`generativelanguage.googleapis.com/v1beta`): every rule cachet knows
//! about it.
//!
//! - Routes: `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`
//!   (`?alt=sse`: server-sent events, each a whole `GenerateContentResponse`),
//!   `:countTokens`, and `/v1beta/cachedContents` (explicit caches). The model is in the
//!   path, never in the body (ai.google.dev/api/generate-content).
//! - Credential: the key in `x-goog-api-key` (Gemini CLI and the google-genai SDKs send it
//!   so) or in the `key` query parameter.
//! - Messages (`contents`): roles `user` and `model`, each a list of `parts` (`text`,
//!   `inlineData`, `functionCall`, `functionResponse`, `thought` parts...). A tool's result
//!   is a `functionResponse` part of a `user` turn (older clients: role `function`).
//! - System prompt: `systemInstruction`, a content object whose text parts are the parts.
//!   Tools: `tools`, each element a `Tool` holding `functionDeclarations`.
//! - Caching: implicit caching is on by default for Gemini 2.5 and later (a prefix of at
//!   least the model's minimum, reads reported as `usageMetadata.cachedContentTokenCount`,
//!   included in `promptTokenCount`); explicit caches are `cachedContents` objects with a TTL
//!   and a storage price, named by a request's `cachedContent` (ai.google.dev/gemini-api/
//!   docs/caching). No marker.
//! - Stream: no terminal event: the last chunk carries the candidate's `finishReason` (and
//!   the final `usageMetadata`); an error after the 200 is a chunk `{"error": {...}}`.
//! - Errors: `{"error": {"code": HTTP status, "message": M, "status": "INVALID_ARGUMENT"}}`.

pub mod explicit;
mod request;
pub mod usage;

use bytes::Bytes;
use http::{HeaderName, Method};
use serde_json::{json, Value};

use super::message::Fields;
use super::{Api, MsgKind, Section, Terminal};
use crate::error::ErrorKind;
use crate::json::scan;
use crate::route::Endpoint;

/// The Gemini API's generation endpoint (both `:generateContent` and
/// `:streamGenerateContent`).
pub struct Gemini;

pub static GENERATE: Gemini = Gemini;

/// Where the Gemini API is served ([`crate::config::UpstreamConfig::gemini`]'s default).
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// The header Gemini clients send their key in.
pub const API_KEY_HEADER: HeaderName = HeaderName::from_static("x-goog-api-key");

/// The query parameter a key may be sent in instead.
pub const API_KEY_QUERY: &str = "key";

/// The version prefix of the API's paths.
pub const PATH_PREFIX: &str = "/v1beta/";

/// The field of a part that carries the model's encrypted reasoning beside a function call
/// or text. Clients send it back with the calls of the turn in progress ("you must pass
/// back thought signatures during function calling", checked for the current turn only:
/// ai.google.dev/gemini-api/docs/thought-signatures) and drop it from earlier turns (Gemini
/// CLI 0.61.0 resumes a session without them). cachet takes it as no part of the cached
/// prompt, as Anthropic's earlier thinking is not (an assumption: Google does not say).
pub const THOUGHT_SIGNATURE: &str = "thoughtSignature";

/// The request field that names an explicit cache (`cachedContents/ID`).
pub const CACHED_CONTENT: &str = "cachedContent";

/// The fields an explicit cache holds, which a request that names one may not set itself:
/// "CachedContent can not be used with GenerateContent request setting system_instruction,
/// tools or tool_config" (the API's 400; ai.google.dev/api/caching, `CachedContent`).
pub const CACHED_FIELDS: [&str; 3] = ["systemInstruction", "tools", "toolConfig"];

impl Api for Gemini {
    fn endpoint(&self) -> Endpoint {
        Endpoint::GenerateContent
    }

    fn terminal(&self, _event: &str, data: &[u8]) -> Option<Terminal> {
        terminal(data)
    }

    fn assistant_from_body(&self, answer: &Value) -> Option<Value> {
        answer.pointer("/candidates/0/content").cloned()
    }

    fn assistant_from_stream(&self, events: &[(String, Bytes)]) -> Option<Value> {
        assistant_from_stream(events)
    }

    fn cache_key_order(&self) -> [Section; 3] {
        CACHE_KEY_ORDER
    }
}

/// The order the prompt is laid out in for the cache: the system instruction, the tools,
/// then the contents, as an explicit cache holds them (`CachedContent` has
/// `systemInstruction`, `tools` and `contents`, and a request's own contents follow).
/// Which of the first two comes first is not documented; a change of either breaks
/// everything after it.
pub const CACHE_KEY_ORDER: [Section; 3] = [Section::System, Section::Tools, Section::Messages];

/// The endpoint of a Gemini API path (query removed), by method: `None` outside
/// `/v1beta/`.
pub fn classify(method: &Method, path: &str) -> Option<Endpoint> {
    let rest = path.strip_prefix(PATH_PREFIX.trim_end_matches('/'))?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    if rest == "/cachedContents" || rest.starts_with("/cachedContents/") {
        return Some(Endpoint::CachedContents);
    }
    if method == Method::GET && rest == "/models" {
        return Some(Endpoint::Models);
    }
    let endpoint = match (method, model_action(path)) {
        (&Method::POST, Some((_, "generateContent" | "streamGenerateContent"))) => {
            Endpoint::GenerateContent
        }
        (&Method::POST, Some((_, "countTokens"))) => Endpoint::GeminiCountTokens,
        _ => Endpoint::Other,
    };
    Some(endpoint)
}

/// The model and the action of a `/v1beta/models/{model}:{action}` path.
fn model_action(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/v1beta/models/")?;
    let (model, action) = rest.rsplit_once(':')?;
    (!model.is_empty() && !model.contains('/')).then_some((model, action))
}

/// The model a request path names (`/v1beta/models/gemini-2.5-flash:generateContent`).
pub fn model_in_path(path: &str) -> Option<&str> {
    model_action(path).map(|(model, _)| model)
}

/// Remove the `key` parameter from a URL's query (the key goes in [`API_KEY_HEADER`]).
pub fn drop_query_key(url: &mut reqwest::Url) {
    if !url.query_pairs().any(|(k, _)| k == API_KEY_QUERY) {
        return;
    }
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != API_KEY_QUERY)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(kept);
    }
}

/// Whether a path asks for a streamed answer (`:streamGenerateContent`).
pub fn streams(path: &str) -> bool {
    model_action(path).is_some_and(|(_, action)| action == "streamGenerateContent")
}

/// How a stream chunk ends the stream, if it does: a candidate's `finishReason` ends the
/// answer, an `error` object ends it in failure.
pub fn terminal(data: &[u8]) -> Option<Terminal> {
    let start = scan::skip_ws(data, 0);
    if data.get(start) != Some(&b'{') {
        return None;
    }
    if scan::field(data, start, "error").is_some() {
        return Some(Terminal::Error);
    }
    memchr::memmem::find(data, b"\"finishReason\"").map(|_| Terminal::Done)
}

/// What a `contents` message is: a `model` turn (calling tools when it has a
/// `functionCall` part), or a `user` turn (carrying tool results when it has a
/// `functionResponse` part, and other content when it has any other part).
pub fn message_kind(b: &[u8]) -> MsgKind {
    let Some((fields, mut kind)) = Fields::with_role(b) else {
        return MsgKind::default();
    };
    kind.instruction = false;
    kind.from_model = kind.role == "model";
    let parts = fields
        .get("parts")
        .and_then(|p| scan::elements(b, p.start).ok())
        .unwrap_or_default();
    for part in &parts {
        let has = |name| scan::field(b, part.start, name).is_some();
        if has("functionCall") {
            kind.calls_tool = true;
        } else if has("functionResponse") {
            kind.tool_result = true;
        } else {
            kind.other_content = true;
        }
    }
    if kind.role == "function" {
        kind.tool_result = true;
    }
    kind
}

/// A model turn that calls tools must be answered by the user turn right after it, which
/// carries their results; a turn of results answers the calls just before it ("Please
/// ensure that function response turn comes immediately after a function call turn", the
/// API's 400).
pub fn check_boundary(prev: Option<&MsgKind>, next: Option<&MsgKind>) -> Result<(), String> {
    let separated = "a function response would be separated from its function call";
    if prev.is_some_and(|p| p.calls_tool) && !next.is_some_and(|n| n.tool_result) {
        return Err(separated.into());
    }
    if next.is_some_and(|n| n.tool_result && !n.from_model)
        && !prev.is_some_and(|p| p.calls_tool || p.tool_result)
    {
        return Err(separated.into());
    }
    Ok(())
}

/// The text of a message's text parts, joined by newlines; a part longer than a few times
/// `ends` bytes is read only at its ends.
pub fn text_of(b: &[u8], ends: usize) -> String {
    let Some(parts) = scan::field(b, scan::skip_ws(b, 0), "parts") else {
        return String::new();
    };
    scan::elements(b, parts.start)
        .unwrap_or_default()
        .iter()
        .filter_map(|part| {
            let text = scan::field(b, part.start, "text")?;
            scan::decode_str_ends(b, &text, ends)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names of a `Tool`'s function declarations.
pub fn tool_names(raw: &[u8]) -> Vec<String> {
    let start = scan::skip_ws(raw, 0);
    let Some(decls) = scan::field(raw, start, "functionDeclarations") else {
        return Vec::new();
    };
    scan::elements(raw, decls.start)
        .unwrap_or_default()
        .iter()
        .filter_map(|d| scan::str_field(raw, d.start, "name"))
        .collect()
}

/// The model's content assembled from a stream's chunks: their parts in order, adjacent
/// text parts of the same kind (thought or not) joined.
pub fn assistant_from_stream(events: &[(String, Bytes)]) -> Option<Value> {
    let mut parts: Vec<Value> = Vec::new();
    for (_, data) in events {
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            continue;
        };
        let Some(new) = chunk
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for part in new {
            let joined = match (parts.last_mut(), part.get("text").and_then(Value::as_str)) {
                (Some(last), Some(text))
                    if last.get("text").is_some()
                        && last.get("thought") == part.get("thought")
                        && part.get("thoughtSignature").is_none() =>
                {
                    let mut whole = last["text"].as_str().unwrap_or_default().to_string();
                    whole.push_str(text);
                    last["text"] = Value::String(whole);
                    true
                }
                _ => false,
            };
            if !joined {
                parts.push(part.clone());
            }
        }
    }
    (!parts.is_empty()).then(|| json!({"role": "model", "parts": parts}))
}

/// The `status` of Google's error body for an error of `kind` (google.rpc.Code names, as
/// the API answers them: cloud.google.com/apis/design/errors).
fn status_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::TooLarge => "INVALID_ARGUMENT",
        ErrorKind::Authentication => "UNAUTHENTICATED",
        ErrorKind::NotFound => "NOT_FOUND",
        ErrorKind::RequestTimeout | ErrorKind::Timeout => "DEADLINE_EXCEEDED",
        ErrorKind::UpgradeRefused => "FAILED_PRECONDITION",
        ErrorKind::RateLimit => "RESOURCE_EXHAUSTED",
        ErrorKind::Internal => "INTERNAL",
        ErrorKind::BadGateway | ErrorKind::Unavailable | ErrorKind::Overloaded => "UNAVAILABLE",
    }
}

/// An error in the Gemini API's own shape.
pub fn error_body(kind: ErrorKind, message: &str) -> Bytes {
    let body = json!({"error": {
        "code": kind.status().as_u16(),
        "message": message,
        "status": status_name(kind),
    }});
    Bytes::from(body.to_string())
}

#[cfg(test)]
mod tests;
