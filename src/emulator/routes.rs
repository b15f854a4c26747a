//! Request handling: route, inject faults, account the cache, render the reply.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::conversations::Conversations;
pub(super) use super::read::read_json;
use super::read::read_optional_json;
use super::recent::Recent;
use super::reply::ReplyScript;
use super::stored::Stored;
use super::{files, models, EmulatorOptions};
use crate::cache_model::diagnosis::{diagnostics_json, CacheMissReason, Fingerprint};
use crate::cache_model::openai_diagnosis::ResponsesFingerprint;
use crate::cache_model::{Accounting, CacheModel, Clock};
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::{full, ResponseBody};
use crate::providers::error_body;
use crate::route::{Endpoint, Provider};

/// Requests remembered for [`super::EmulatorHandle::accounted`].
pub const LOG_CAPACITY: usize = 10_000;
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
    pub(super) clock: Clock,
    pub(super) script: ReplyScript,
    seq: AtomicU64,
    log: Mutex<VecDeque<Accounted>>,
    /// Fingerprints by response id, oldest first, for cache diagnostics.
    fingerprints: Mutex<Recent<Fingerprint>>,
    /// Responses fingerprints by response id, for the prompt cache diagnostics.
    pub(super) responses_fingerprints: Mutex<Recent<ResponsesFingerprint>>,
    /// Stored Responses answers, for requests that continue one by `previous_response_id`.
    pub(super) stored: Mutex<Stored>,
    /// The Conversations API's conversations, for requests that name one.
    pub(super) conversations: Mutex<Conversations>,
    /// The credentials the provider APIs accept (empty: any).
    api_keys: Vec<String>,
    /// The AWS credentials whose SigV4 signatures Bedrock requests may carry (empty: any).
    aws_credentials: Vec<crate::providers::bedrock::sigv4::AwsCredentials>,
    /// The service accounts whose assertions the token endpoint takes.
    service_accounts: Vec<super::google_token::ServiceAccount>,
    /// The access tokens it minted, accepted on Vertex AI's routes.
    minted: Mutex<super::google_token::MintedTokens>,
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
            responses_fingerprints: Mutex::new(Recent::new(DIAGNOSIS_CAPACITY)),
            stored: Mutex::new(Stored::default()),
            conversations: Mutex::new(Conversations::default()),
            api_keys: opts.api_keys.clone(),
            aws_credentials: opts.aws_credentials.clone(),
            service_accounts: opts.service_accounts.clone(),
            minted: Mutex::default(),
        }
    }

    /// The service accounts the token endpoint knows.
    pub(super) fn service_accounts(&self) -> &[super::google_token::ServiceAccount] {
        &self.service_accounts
    }

    pub(super) fn minted_count(&self) -> usize {
        recover(&self.minted).len()
    }

    /// Remember a token the token endpoint minted, valid until `expires` (seconds).
    pub(super) fn mint(&self, token: String, expires: u64) {
        recover(&self.minted).insert(token, expires);
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
    pub(super) fn diagnose(
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
        let now = self.now_secs();
        // A token the token endpoint minted is good for Vertex AI only.
        let minted = |p: &str| provider == Provider::Vertex && recover(&self.minted).valid(p, now);
        let accepted = presented.iter().any(|p| self.accepts(p) || minted(p));
        if accepted {
            return None;
        }
        let message = match (provider, presented.is_empty()) {
            (Provider::Anthropic, true) => "x-api-key header is required",
            (Provider::Anthropic, false) => "invalid x-api-key",
            (Provider::OpenAi, true) => "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            (Provider::OpenAi, false) => "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
            (Provider::Gemini, true) => "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
            (Provider::Gemini, false) => "API key not valid. Please pass a valid API key.",
            (Provider::Bedrock, _) => "Missing Authentication Token",
            (Provider::Vertex, _) => "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.",
        };
        Some(ApiError::new(ErrorKind::Authentication, message))
    }

    /// Whether `key` is one of the accepted credentials.
    pub(super) fn accepts(&self, key: &str) -> bool {
        self.api_keys
            .iter()
            .any(|k| bool::from(subtle::ConstantTimeEq::ct_eq(k.as_bytes(), key.as_bytes())))
    }

    pub(super) fn script(&self) -> &ReplyScript {
        &self.script
    }

    pub(super) fn now_secs(&self) -> u64 {
        self.clock.now_secs()
    }

    /// Forget every cached prefix, as a provider evicting its cache does.
    pub fn clear_cache(&self) {
        let mut cache = recover(&self.cache);
        *cache = CacheModel::new(cache.config.clone());
    }

    /// The next request's sequence number (its ids are made from it).
    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    pub fn log_snapshot(&self) -> Vec<Accounted> {
        recover(&self.log).iter().cloned().collect()
    }

    pub(super) fn record(&self, entry: Accounted) {
        let mut log = recover(&self.log);
        if log.len() == LOG_CAPACITY {
            log.pop_front();
        }
        log.push_back(entry);
    }

    /// Run `f` on the shared cache model at the clock's time (Gemini's explicit caches).
    pub(super) fn with_cache<R>(&self, f: impl FnOnce(&mut CacheModel, u64) -> R) -> R {
        let now_ms = self.clock.now_ms();
        f(&mut recover(&self.cache), now_ms)
    }

    /// Account one request on the shared cache model. A panic inside the model (a bug) is
    /// answered as a 500 for this request only: the lock it poisoned is taken back, so the
    /// next request is served as usual.
    pub(super) fn account(
        &self,
        endpoint: Endpoint,
        request: &Value,
    ) -> Result<Accounting, ApiError> {
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
pub(super) fn recover<T>(lock: &Mutex<T>) -> MutexGuard<'_, T> {
    lock.lock().unwrap_or_else(PoisonError::into_inner)
}

pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<ResponseBody> {
    let seq = shared.next_seq();
    let path = req.uri().path().trim_end_matches('/').to_string();
    let provider = crate::providers::family_of(&path, req.headers());
    let request_id = format!("req_emu{seq:020}");
    // The same edge rule as the proxy: no path that climbs out of where it points.
    if let Err(err) = crate::http_serve::path_guard::check(req.uri().path()) {
        return error_response(provider, &request_id, &err);
    }
    // Google's Gemini API, with its own credentials and errors.
    if provider == Provider::Gemini {
        return super::gemini::handle(&shared, seq, req).await;
    }
    // Google's token endpoint, where a test's service-account key points its `token_uri`.
    if path == super::google_token::PATH && req.method() == Method::POST {
        return super::google_token::serve(&shared, seq, req).await;
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
        (&Method::GET, "/v1/responses") if super::websocket::asks_upgrade(&req) => {
            return super::websocket::upgrade(shared.clone(), req)
                .unwrap_or_else(|err| error_response(provider, &request_id, &err));
        }
        (&Method::GET, "/v1/models") => {
            let list = match provider {
                Provider::Anthropic | Provider::Gemini | Provider::Bedrock | Provider::Vertex => {
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
    match super::generate::generate(&shared, endpoint, provider, seq, &request_id, req).await {
        Ok(resp) => resp,
        Err(err) => error_response(provider, &request_id, &err),
    }
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

pub(super) fn json_response(
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
