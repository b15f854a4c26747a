//! The Gemini API (`/v1beta/models/{model}:generateContent`, `:streamGenerateContent`,
//! `:countTokens`), as strict as Google's: the key (`x-goog-api-key` or `key=`), the model
//! in the path, the body's shape, answered with Google's error body; implicit caching by
//! [`crate::cache_model::gemini`], explicit caches (`/v1beta/cachedContents`) by
//! [`super::gemini_caches`].
//!
//! Facts (each cited where it is used): ai.google.dev/api/generate-content (the request
//! and `GenerateContentResponse`, `usageMetadata`), ai.google.dev/gemini-api/docs/caching
//! (implicit caching), and the API's own error bodies as clients report them.

use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::body::{event_body, text_deltas, whole_body};
use super::fault::{self, Faults};
use super::reply::Reply;
use super::routes::{read_json, Accounted, Shared};
use super::turn::Turn;
use crate::cache_model::gemini_explicit as explicit;
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::{full, ResponseBody};
use crate::providers::gemini::{self as api, API_KEY_HEADER, API_KEY_QUERY};
use crate::route::Endpoint;

/// The top-level fields of a `GenerateContentRequest` (and `countTokens`' own), in their
/// JSON and proto spellings: any other is refused as the API refuses it.
const FIELDS: &[&str] = &[
    "model",
    "contents",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "cachedContent",
    "cached_content",
    "labels",
    "serviceTier",
    "service_tier",
    "generateContentRequest",
    "generate_content_request",
];

/// An answer with Google's error body: `{"error": {"code", "message", "status"}}`.
fn google_error(status: StatusCode, name: &str, message: &str) -> Response<ResponseBody> {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "status": name}});
    let mut resp = Response::new(full(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// An error in Google's shape. A cache the API does not hold is its 403 PERMISSION_DENIED
/// (for `get`, `delete` and `generateContent` alike), never a 404.
pub(super) fn error_response(err: &ApiError) -> Response<ResponseBody> {
    if err.kind == ErrorKind::NotFound && err.message == explicit::NOT_FOUND {
        return google_error(StatusCode::FORBIDDEN, "PERMISSION_DENIED", &err.message);
    }
    let mut resp = Response::new(full(api::error_body(err.kind, &err.message)));
    *resp.status_mut() = err.status();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// The key a request presents: its `x-goog-api-key` header, else its `key` parameter.
fn presented_key(req: &Request<Incoming>) -> Option<String> {
    if let Some(v) = req.headers().get(API_KEY_HEADER) {
        return v.to_str().ok().map(|v| v.trim().to_string());
    }
    query_param(req.uri().query()?, API_KEY_QUERY)
}

/// A query parameter's decoded value.
pub(super) fn query_param(query: &str, name: &str) -> Option<String> {
    let url = reqwest::Url::parse(&format!("http://query.invalid/?{query}")).ok()?;
    let value = url.query_pairs().find(|(k, _)| k == name)?.1;
    Some(value.into_owned())
}

/// Serve one request under `/v1beta/`.
pub async fn handle(shared: &Shared, seq: u64, req: Request<Incoming>) -> Response<ResponseBody> {
    // No key: 403 "Method doesn't allow unregistered callers" (PERMISSION_DENIED); a wrong
    // one: 400 "API key not valid. Please pass a valid API key." (INVALID_ARGUMENT, reason
    // API_KEY_INVALID), as the API answers both (google-gemini/gemini-cli#25198,
    // googleapis/js-genai#898).
    if shared.checks_keys() {
        match presented_key(&req) {
            None => {
                return google_error(
                    StatusCode::FORBIDDEN,
                    "PERMISSION_DENIED",
                    "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
                )
            }
            Some(key) if !shared.accepts(&key) => {
                return google_error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_ARGUMENT",
                    "API key not valid. Please pass a valid API key.",
                )
            }
            Some(_) => {}
        }
    }
    let path = req.uri().path().trim_end_matches('/').to_string();
    let endpoint = api::classify(req.method(), &path);
    if endpoint == Some(Endpoint::CachedContents) {
        return super::gemini_caches::handle(shared, req).await;
    }
    let model = api::model_in_path(&path).map(str::to_string);
    let (endpoint, model) = match (endpoint, model) {
        (Some(e @ (Endpoint::GenerateContent | Endpoint::GeminiCountTokens)), Some(m)) => (e, m),
        _ => {
            let message = format!("Method not found: {} {path}", req.method());
            return google_error(StatusCode::NOT_FOUND, "NOT_FOUND", &message);
        }
    };
    if !model.starts_with("gemini-") {
        let message = format!(
            "models/{model} is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."
        );
        return google_error(StatusCode::NOT_FOUND, "NOT_FOUND", &message);
    }
    let sse = req
        .uri()
        .query()
        .and_then(|q| query_param(q, "alt"))
        .as_deref()
        == Some("sse");
    let streams = api::streams(&path);
    match generate(shared, seq, endpoint, &model, streams, sse, req).await {
        Ok(resp) => resp,
        Err(err) => error_response(&err),
    }
}

async fn generate(
    shared: &Shared,
    seq: u64,
    endpoint: Endpoint,
    model: &str,
    streams: bool,
    sse: bool,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    if req.method() != Method::POST {
        return Err(ApiError::new(ErrorKind::NotFound, "Method not found."));
    }
    let faults = Faults::parse(header(fault::HEADER).as_deref())?;
    let reply_header = header(super::generate::REPLY_HEADER);
    let mut request = read_json(req).await?;
    check(&request, endpoint)?;
    if let Some(delay) = faults.first_byte_delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(kind) = faults.error {
        return Err(ApiError::new(kind, Faults::error_message(kind)));
    }
    // The path's model is the request's `model` (the REST binding of the method).
    request["model"] = json!(model);
    if endpoint == Endpoint::GeminiCountTokens {
        let n =
            crate::cache_model::CacheModel::count_tokens(Endpoint::GeminiCountTokens, &request)?;
        return Ok(ok(full(json!({"totalTokens": n}).to_string())));
    }
    let reply =
        shared
            .script()
            .decide(reply_header.as_deref(), Endpoint::GenerateContent, &request)?;
    let accounting = shared.account(Endpoint::GenerateContent, &request)?;
    let output_tokens = reply.output_tokens();
    shared.record(Accounted {
        endpoint,
        model: model.to_string(),
        accounting: accounting.clone(),
        output_tokens,
    });
    let turn = Turn {
        seq,
        model,
        request: &request,
        reply: &reply,
        accounting: &accounting,
        output_tokens,
        created: shared.now_secs(),
        compaction: false,
        warmup: false,
        diagnostics: None,
    };
    if !streams {
        let body = Bytes::from(response(&turn, true).to_string());
        return Ok(ok(whole_body(body, faults.cut_after)));
    }
    let chunks = chunks(&turn);
    if !sse {
        // Without `alt=sse` the stream is one JSON array of the responses.
        let body = Bytes::from(Value::Array(chunks).to_string());
        return Ok(ok(whole_body(body, faults.cut_after)));
    }
    let events = chunks
        .iter()
        .map(|c| Bytes::from(format!("data: {c}\r\n\r\n")))
        .collect();
    let mut resp = ok(event_body(events, faults.event_delay, faults.cut_after));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    Ok(resp)
}

pub(super) fn ok(body: ResponseBody) -> Response<ResponseBody> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    resp
}

/// The body checks the API makes, with its messages: unknown fields ("Invalid JSON payload
/// received. Unknown name"), `contents` required and not empty ("*
/// GenerateContentRequest.contents: contents is not specified",
/// langchain-ai/langchain-google#1393), roles `user` and `model` ("Please use a valid
/// role: user, model."), parts not empty, and a function response right after its call.
fn check(request: &Value, endpoint: Endpoint) -> Result<(), ApiError> {
    let Some(obj) = request.as_object() else {
        return Err(ApiError::invalid(
            "Invalid JSON payload received. Expected an object.",
        ));
    };
    if let Some(name) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."
        )));
    }
    let generation = obj
        .get("generateContentRequest")
        .or(obj.get("generate_content_request"));
    let contents = match (endpoint, generation) {
        (Endpoint::GeminiCountTokens, Some(inner)) => {
            return check(inner, Endpoint::GenerateContent)
        }
        (Endpoint::GeminiCountTokens, None) => obj.get("contents"),
        _ => obj.get("contents"),
    };
    let contents = match contents {
        Some(Value::Array(c)) if !c.is_empty() => c,
        _ => {
            return Err(ApiError::invalid(
                "* GenerateContentRequest.contents: contents is not specified\n",
            ))
        }
    };
    let mut kinds = Vec::with_capacity(contents.len());
    for (i, content) in contents.iter().enumerate() {
        match content.get("role").and_then(Value::as_str) {
            None | Some("user" | "model" | "function") => {}
            Some(_) => return Err(ApiError::invalid("Please use a valid role: user, model.")),
        }
        match content.get("parts") {
            Some(Value::Array(parts)) if !parts.is_empty() => {}
            _ => {
                return Err(ApiError::invalid(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty.\n"
            )))
            }
        }
        kinds.push(api::message_kind(
            &serde_json::to_vec(content).unwrap_or_default(),
        ));
    }
    for (i, kind) in kinds.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| &kinds[p]);
        let next = kinds.get(i + 1);
        let unanswered = kind.calls_tool && next.is_some_and(|n| !n.tool_result);
        if unanswered || (kind.tool_result && !prev.is_some_and(|p| p.calls_tool)) {
            return Err(ApiError::invalid(
                "Please ensure that function response turn comes immediately after a function call turn.",
            ));
        }
    }
    Ok(())
}

/// The answer's content parts. A function call carries a `thoughtSignature` beside it, as
/// thinking models answer one ("Gemini 3 returns thought signatures for all model
/// responses ... with a function call"; 2.5 models may: ai.google.dev/gemini-api/docs/
/// thought-signatures), which clients send back with the call.
fn parts(turn: &Turn) -> Vec<Value> {
    match turn.reply {
        Reply::Text(text) => vec![json!({"text": text})],
        Reply::ToolCall { name, input } => {
            let id = turn.id("emulated-thought-");
            let signature = base64::engine::general_purpose::STANDARD.encode(id);
            vec![
                json!({"functionCall": {"name": name, "args": input}, "thoughtSignature": signature}),
            ]
        }
    }
}

/// `usageMetadata`: `promptTokenCount` holds the whole prompt, the cached part included
/// (`cachedContentTokenCount`, present when something was read); `candidatesTokenCount`
/// the answer (ai.google.dev/api/generate-content, `UsageMetadata`).
fn usage(turn: &Turn, output: Option<u64>) -> Value {
    let a = turn.accounting;
    let mut u = json!({
        "promptTokenCount": a.input_tokens,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": a.input_tokens}],
    });
    if a.cache_read > 0 {
        u["cachedContentTokenCount"] = json!(a.cache_read);
        u["cacheTokensDetails"] = json!([{"modality": "TEXT", "tokenCount": a.cache_read}]);
    }
    if let Some(out) = output {
        u["candidatesTokenCount"] = json!(out);
        u["totalTokenCount"] = json!(a.input_tokens + out);
    } else {
        u["totalTokenCount"] = json!(a.input_tokens);
    }
    u
}

/// A whole `GenerateContentResponse`.
fn response(turn: &Turn, last: bool) -> Value {
    let mut candidate = json!({"content": {"parts": parts(turn), "role": "model"}, "index": 0});
    if last {
        candidate["finishReason"] = json!("STOP");
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage(turn, last.then_some(turn.output_tokens)),
        "modelVersion": turn.model,
        "responseId": turn.id("gem"),
    })
}

/// The stream's chunks: the text in pieces (a call whole), each chunk a response; the last
/// one carries `finishReason` and the final counts.
fn chunks(turn: &Turn) -> Vec<Value> {
    let Reply::Text(text) = turn.reply else {
        return vec![response(turn, true)];
    };
    let pieces = text_deltas(text);
    let n = pieces.len();
    pieces
        .into_iter()
        .enumerate()
        .map(|(i, piece)| {
            let mut chunk = response(turn, i + 1 == n);
            chunk["candidates"][0]["content"]["parts"] = json!([{"text": piece}]);
            chunk
        })
        .collect()
}
