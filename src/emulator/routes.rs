//! Request handling: route, inject faults, account the cache, render the reply.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

pub(super) use super::ask::Ask;
use super::body::{event_body, whole_body};
use super::conversations::Conversations;
use super::fault::{self, Faults};
pub(super) use super::read::read_json;
use super::read::read_optional_json;
use super::recent::Recent;
use super::reply::ReplyScript;
use super::stored::Stored;
use super::turn::Turn;
use super::{anthropic, chat, files, models, responses, EmulatorOptions};
use crate::cache_model::diagnosis::{diagnostics_json, CacheMissReason, Fingerprint};
use crate::cache_model::{Accounting, CacheModel, Clock};
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::{full, ResponseBody};
use crate::providers::error_body;
use crate::route::{Endpoint, Provider};

/// Requests remembered for [`super::EmulatorHandle::accounted`].
pub const LOG_CAPACITY: usize = 10_000;
pub(super) const REPLY_HEADER: &str = "x-cachet-emulate-reply";
/// The beta that turns on Anthropic's cache diagnostics.
pub const DIAGNOSIS_BETA: &str = crate::providers::anthropic::CACHE_DIAGNOSIS_BETA;
/// Request fingerprints kept for cache diagnostics (the oldest are forgotten).
pub const DIAGNOSIS_CAPACITY: usize = 1024;

/// One accounted request.
#[derive(Debug, Clone)]
pub struct Accounted {
    pub endpoint: Endpoint,
    pub model: String,
    pub accounting: Accounting,
    pub output_tokens: u64,
}

pub struct Shared {
    cache: Mutex<CacheModel>,
    clock: Clock,
    script: ReplyScript,
    seq: AtomicU64,
    log: Mutex<VecDeque<Accounted>>,
    /// Fingerprints by response id, oldest first, for cache diagnostics.
    fingerprints: Mutex<Recent<Fingerprint>>,
    /// Stored Responses answers, for requests that continue one by `previous_response_id`.
    stored: Mutex<Stored>,
    /// The Conversations API's conversations, for requests that name one.
    conversations: Mutex<Conversations>,
    /// The credentials the provider APIs accept (empty: any).
    api_keys: Vec<String>,
    /// The AWS credentials whose SigV4 signatures Bedrock requests may carry (empty: any).
    aws_credentials: Vec<crate::providers::bedrock::sigv4::AwsCredentials>,
}

impl Shared {
    pub fn new(opts: &EmulatorOptions, clock: Clock) -> Self {
        Shared {
            cache: Mutex::new(CacheModel::new(opts.cache.clone())),
            clock,
            script: opts.reply.clone(),
            seq: AtomicU64::new(0),
            log: Mutex::new(VecDeque::new()),
            fingerprints: Mutex::new(Recent::new(DIAGNOSIS_CAPACITY)),
            stored: Mutex::new(Stored::default()),
            conversations: Mutex::new(Conversations::default()),
            api_keys: opts.api_keys.clone(),
            aws_credentials: opts.aws_credentials.clone(),
        }
    }

    /// The AWS credentials Bedrock signatures are checked against.
    pub(super) fn aws_credentials(&self) -> &[crate::providers::bedrock::sigv4::AwsCredentials] {
        &self.aws_credentials
    }

    /// Whether only the configured keys are accepted.
    pub(super) fn checks_keys(&self) -> bool {
        !self.api_keys.is_empty()
    }

    /// Cache diagnostics for a Messages request sent with the beta: remember its
    /// fingerprint under `message_id`, and compare it with the request that
    /// `diagnostics.previous_message_id` names. `None` when the request has no
    /// `diagnostics` object (nothing is added to the response).
    fn diagnose(
        &self,
        request: &Value,
        message_id: &str,
        unavailable: bool,
    ) -> Result<Option<Value>, ApiError> {
        let current = Fingerprint::of(request)?;
        let mut store = recover(&self.fingerprints);
        let reason = match request.get("diagnostics") {
            None | Some(Value::Null) => None,
            Some(d) => Some(match d.get("previous_message_id") {
                None | Some(Value::Null) => None,
                Some(_) if unavailable => Some(CacheMissReason::Unavailable),
                Some(Value::String(id)) => match store.get(id) {
                    Some(previous) => current.diverges_from(previous),
                    None => Some(CacheMissReason::PreviousMessageNotFound),
                },
                Some(_) => {
                    return Err(ApiError::invalid(
                        "diagnostics.previous_message_id: Input should be a valid string",
                    ))
                }
            }),
        };
        store.insert(message_id.to_string(), current);
        Ok(reason.map(|r| diagnostics_json(r.as_ref())))
    }

    /// The provider's 401 for a request that presents none of the accepted credentials
    /// (Anthropic: "invalid x-api-key"; OpenAI: `invalid_api_key`). The message never
    /// repeats what was sent.
    pub(super) fn refuse_credentials(
        &self,
        provider: Provider,
        headers: &http::HeaderMap,
    ) -> Option<ApiError> {
        if self.api_keys.is_empty() {
            return None;
        }
        let presented = crate::providers::auth::presented(provider, headers);
        let accepted = presented.iter().any(|p| {
            self.api_keys
                .iter()
                .any(|k| bool::from(subtle::ConstantTimeEq::ct_eq(k.as_bytes(), p.as_bytes())))
        });
        if accepted {
            return None;
        }
        let message = match (provider, presented.is_empty()) {
            (Provider::Anthropic, true) => "x-api-key header is required",
            (Provider::Anthropic, false) => "invalid x-api-key",
            (Provider::OpenAi, true) => "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            (Provider::OpenAi, false) => "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
            (Provider::Bedrock, _) => "Missing Authentication Token",
            (Provider::Vertex, _) => "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        };
        Some(ApiError::new(ErrorKind::Authentication, message))
    }

    /// Forget every cached prefix, as a provider evicting its cache does.
    pub fn clear_cache(&self) {
        let mut cache = recover(&self.cache);
        *cache = CacheModel::new(cache.config.clone());
    }

    pub fn log_snapshot(&self) -> Vec<Accounted> {
        recover(&self.log).iter().cloned().collect()
    }

    fn record(&self, entry: Accounted) {
        let mut log = recover(&self.log);
        if log.len() == LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(entry);
    }

    /// Account one request on the shared cache model. A panic inside the model (a bug) is
    /// answered as a 500 for this request only: the lock it poisoned is taken back, so the
    /// next request is served as usual.
    fn account(&self, endpoint: Endpoint, request: &Value) -> Result<Accounting, ApiError> {
        let now_ms = self.clock.now_ms();
        let mut cache = recover(&self.cache);
        catch_unwind(AssertUnwindSafe(|| {
            cache.account(endpoint, request, now_ms)
        }))
        .unwrap_or_else(|_| {
            tracing::error!("the emulator's cache model panicked on a request");
            Err(ApiError::new(
                ErrorKind::Internal,
                "the emulator could not account this request",
            ))
        })
    }
}

/// The guarded value, also after a panic elsewhere poisoned the lock: the emulator's
/// state stays usable (at worst one request's accounting is incomplete).
fn recover<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ResponseBody> {
    let seq = shared.seq.fetch_add(1, Ordering::SeqCst) + 1;
    let path = req.uri().path().trim_end_matches('/').to_string();
    let provider = crate::providers::family_of(&path, req.headers());
    let request_id = format!("req_emu{seq:020}");
    // The same edge rule as the proxy: no path that climbs out of where it points.
    if let Err(err) = crate::http_serve::path_guard::check(req.uri().path()) {
        return error_response(provider, &request_id, &err);
    }
    // The provider APIs check the credential; the emulator's own controls do not.
    if path.starts_with("/v1/") {
        if let Some(err) = shared.refuse_credentials(provider, req.headers()) {
            return error_response(provider, &request_id, &err);
        }
    }
    if path.starts_with("/model/") {
        return super::bedrock::serve(&shared, seq, &request_id, req).await;
    }
    if crate::providers::vertex::target(&path).is_some() {
        return super::vertex::serve(&shared, seq, &request_id, req).await;
    }
    let endpoint = match (req.method(), path.as_str()) {
        (&Method::POST, "/v1/messages") => Endpoint::Messages,
        (&Method::POST, "/v1/messages/count_tokens") => Endpoint::CountTokens,
        (&Method::POST, "/v1/chat/completions") => Endpoint::Chat,
        (&Method::POST, "/v1/responses") => Endpoint::Responses,
        (&Method::POST, "/v1/responses/compact") => Endpoint::Compact,
        (&Method::GET, "/v1/models") => {
            let list = match provider {
                Provider::Anthropic | Provider::Bedrock | Provider::Vertex => {
                    models::anthropic_list()
                }
                Provider::OpenAi
                    if crate::providers::auth::signed_in_with_chatgpt(req.headers()) =>
                {
                    models::chatgpt_list()
                }
                Provider::OpenAi => models::openai_list(shared.clock.now_secs()),
            };
            return json_response(
                provider,
                &request_id,
                StatusCode::OK,
                full(list.to_string()),
            );
        }
        (&Method::POST, "/v1/files") => {
            let now = shared.clock.now_secs();
            let file = files::upload(provider, seq, now, req).await;
            return object_response(provider, &request_id, file);
        }
        (_, p) if p == "/v1/conversations" || p.starts_with("/v1/conversations/") => {
            return conversations(&shared, &request_id, req).await;
        }
        (&Method::POST, "/emulator/clock/advance") => return advance_clock(&shared, req).await,
        (&Method::POST, "/emulator/cache/clear") => {
            shared.clear_cache();
            return json_response(provider, &request_id, StatusCode::OK, full("{}"));
        }
        (&Method::GET, "/emulator/clock") => {
            let now = json!({"now_ms": shared.clock.now_ms()});
            return json_response(provider, &request_id, StatusCode::OK, full(now.to_string()));
        }
        (&Method::HEAD | &Method::GET, "" | "/api/hello") => {
            return Response::new(full(Bytes::new()));
        }
        _ => {
            let err = ApiError::new(
                ErrorKind::NotFound,
                format!("{} {} is not served by the emulator", req.method(), path),
            );
            return error_response(provider, &request_id, &err);
        }
    };
    match generate(&shared, endpoint, provider, seq, &request_id, req).await {
        Ok(resp) => resp,
        Err(err) => error_response(provider, &request_id, &err),
    }
}

async fn generate(
    shared: &Shared,
    endpoint: Endpoint,
    provider: Provider,
    seq: u64,
    request_id: &str,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let ask = Ask::of(req.headers(), endpoint, provider, seq, request_id)?;
    let request = read_json(req).await?;
    answer(shared, ask, request).await
}

/// Serve a generation request whose body is `request`.
pub(super) async fn answer(
    shared: &Shared,
    ask: Ask<'_>,
    request: Value,
) -> Result<Response<ResponseBody>, ApiError> {
    let Ask {
        endpoint,
        provider,
        seq,
        request_id,
        faults,
        reply_header,
        diagnosis_beta,
        betas,
        event_stream,
    } = ask;
    if let Some(delay) = faults.first_byte_delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(kind) = faults.error {
        return Err(ApiError::new(kind, Faults::error_message(kind)));
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("model: Field required"))?
        .to_string();
    if endpoint == Endpoint::CountTokens {
        let n = CacheModel::count_tokens(endpoint, &request)?;
        return Ok(json_response(
            provider,
            request_id,
            StatusCode::OK,
            full(json!({"input_tokens": n}).to_string()),
        ));
    }
    if endpoint == Endpoint::Messages && request.get("max_tokens").and_then(Value::as_u64).is_none()
    {
        return Err(ApiError::invalid("max_tokens: Field required"));
    }
    if endpoint == Endpoint::Messages {
        if let Some(e) =
            crate::providers::anthropic::thinking_budget_error(&request, betas.as_deref())
        {
            return Err(ApiError::invalid(e));
        }
    }
    // A compaction reads its prompt as a response does, and answers with a summary: text,
    // whatever the script says of tool calls.
    let rules = endpoint.read_as();
    // A request that continues a stored response, or names a conversation, is a prompt of
    // the whole conversation.
    let conversation = match rules {
        Endpoint::Responses => recover(&shared.conversations).named(&request)?,
        _ => None,
    };
    let expanded = match (rules, &conversation) {
        (Endpoint::Responses, Some(id)) => {
            Some(recover(&shared.conversations).expand(id, &request)?)
        }
        (Endpoint::Responses, None) => recover(&shared.stored).expand(&request)?,
        _ => None,
    };
    let prompt = expanded.as_ref().unwrap_or(&request);
    // A compaction, asked by its endpoint or inline (Codex signed in with ChatGPT), answers
    // with a summary: text, whatever the script says of tool calls.
    let compaction = endpoint == Endpoint::Responses
        && crate::providers::openai_responses::asks_compaction(&request);
    let reply_header = match endpoint {
        _ if compaction || endpoint == Endpoint::Compact => reply_header
            .filter(|h| h.starts_with("text:"))
            .or(Some("text".into())),
        _ => reply_header,
    };
    let reply = shared
        .script
        .decide(reply_header.as_deref(), rules, prompt)?;
    let accounting = shared.account(rules, prompt)?;
    let output_tokens = reply.output_tokens();
    shared.record(Accounted {
        endpoint,
        model: model.clone(),
        accounting: accounting.clone(),
        output_tokens,
    });
    let turn = Turn {
        seq,
        model: &model,
        request: &request,
        reply: &reply,
        accounting: &accounting,
        output_tokens,
        created: shared.clock.now_secs(),
        compaction,
    };
    let diagnostics = if endpoint == Endpoint::Messages && diagnosis_beta {
        shared.diagnose(&request, &turn.id("msg_"), faults.diagnostics_unavailable)?
    } else {
        None
    };
    if endpoint == Endpoint::Responses {
        let output = &responses::response(&turn, true)["output"];
        recover(&shared.stored).keep(turn.id("resp_"), prompt, output);
        if let Some(id) = &conversation {
            recover(&shared.conversations).answered(id, &request, output);
        }
    }
    if endpoint == Endpoint::Compact {
        let body = Bytes::from(responses::compaction(&turn).to_string());
        let body = whole_body(body, faults.cut_after);
        return Ok(json_response(provider, request_id, StatusCode::OK, body));
    }
    let stream = request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if stream {
        let events = match endpoint {
            Endpoint::Chat => {
                let include_usage = request
                    .pointer("/stream_options/include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                chat::chunks(&turn, include_usage)
            }
            Endpoint::Responses => responses::events(&turn),
            _ => anthropic::events(&turn, diagnostics.as_ref()),
        };
        let mut events = events;
        if let Some(n) = faults.error_event_after {
            events.truncate(n);
            events.push(fault::stream_error_event(endpoint, n));
        }
        let content_type = match event_stream {
            true => {
                events = super::bedrock::frames(events, &accounting, output_tokens);
                crate::providers::bedrock::eventstream::CONTENT_TYPE
            }
            false => "text/event-stream; charset=utf-8",
        };
        let body = event_body(events, faults.event_delay, faults.cut_after);
        let mut resp = json_response(provider, request_id, StatusCode::OK, body);
        resp.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(content_type),
        );
        resp.headers_mut().insert(
            http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        return Ok(resp);
    }
    let value = match endpoint {
        Endpoint::Chat => chat::completion(&turn),
        Endpoint::Responses => responses::response(&turn, true),
        _ => anthropic::message(&turn, diagnostics.as_ref()),
    };
    let body = whole_body(Bytes::from(value.to_string()), faults.cut_after);
    Ok(json_response(provider, request_id, StatusCode::OK, body))
}

/// A request under `/v1/conversations`, served from the emulator's conversations.
async fn conversations(
    shared: &Shared,
    request_id: &str,
    req: Request<Incoming>,
) -> Response<ResponseBody> {
    let method = req.method().clone();
    let path = req.uri().path().trim_end_matches('/').to_string();
    let query = req.uri().query().map(str::to_string);
    let body = match method {
        Method::POST => match read_optional_json(req).await {
            Ok(body) => body,
            Err(err) => return error_response(Provider::OpenAi, request_id, &err),
        },
        _ => None,
    };
    let now = shared.clock.now_secs();
    let served = recover(&shared.conversations).serve(&method, &path, query.as_deref(), body, now);
    object_response(Provider::OpenAi, request_id, served)
}

async fn advance_clock(shared: &Shared, req: Request<Incoming>) -> Response<ResponseBody> {
    let body = match read_json(req).await {
        Ok(v) => v,
        Err(e) => return error_response(Provider::OpenAi, "", &e),
    };
    let Some(seconds) = body
        .get("seconds")
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s >= 0.0)
    else {
        let err = ApiError::invalid("expected {\"seconds\": N} with N a non-negative number");
        return error_response(Provider::OpenAi, "", &err);
    };
    shared.clock.advance_secs(seconds);
    let now = json!({"now_ms": shared.clock.now_ms()});
    json_response(Provider::OpenAi, "", StatusCode::OK, full(now.to_string()))
}

fn json_response(
    provider: Provider,
    request_id: &str,
    status: StatusCode,
    body: ResponseBody,
) -> Response<ResponseBody> {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(id) = HeaderValue::from_str(request_id) {
        if !request_id.is_empty() {
            headers.insert(crate::providers::request_id_header(provider), id);
        }
    }
    resp
}

/// An API object as a 200, or the error in the provider's own shape.
fn object_response(
    provider: Provider,
    request_id: &str,
    object: Result<Value, ApiError>,
) -> Response<ResponseBody> {
    match object {
        Ok(object) => json_response(
            provider,
            request_id,
            StatusCode::OK,
            full(object.to_string()),
        ),
        Err(err) => error_response(provider, request_id, &err),
    }
}

/// An error in the provider's own shape (Anthropic bodies carry the request id too).
pub(super) fn error_response(
    provider: Provider,
    request_id: &str,
    err: &ApiError,
) -> Response<ResponseBody> {
    let mut body = error_body(provider, err.kind, &err.message);
    if provider == Provider::Anthropic && !request_id.is_empty() {
        if let Ok(mut v) = serde_json::from_slice::<Value>(&body) {
            v["request_id"] = json!(request_id);
            body = Bytes::from(v.to_string());
        }
    }
    let mut resp = json_response(provider, request_id, err.status(), full(body));
    if err.kind == ErrorKind::RateLimit {
        resp.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_cache_lock_does_not_take_the_emulator_down() {
        let shared = Arc::new(Shared::new(&EmulatorOptions::default(), Clock::at_ms(0)));
        let poisoner = shared.clone();
        let _ = std::thread::spawn(move || {
            let _cache = poisoner.cache.lock();
            let _log = poisoner.log.lock();
            panic!("poison both locks");
        })
        .join();
        assert!(shared.cache.is_poisoned() && shared.log.is_poisoned());
        let req = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
        let a = shared.account(Endpoint::Chat, &req).unwrap();
        assert!(a.input_tokens > 0);
        shared.record(Accounted {
            endpoint: Endpoint::Chat,
            model: "gpt-4o".into(),
            accounting: a,
            output_tokens: 1,
        });
        assert_eq!(shared.log_snapshot().len(), 1);
    }
}
