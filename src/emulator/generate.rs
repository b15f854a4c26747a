//! One generation request answered: the faults it asks for, the conversation it continues,
//! the reply, the cache accounting and the diagnostics ([`produce`]); then rendered for
//! HTTP here (a whole body, or its event stream) or for a socket by
//! [`super::websocket`], from the same answer.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::body::{event_body, whole_body};
use super::fault::{self, Faults};
use super::reply::Reply;
use super::routes::{json_response, read_json, recover, Shared, DIAGNOSIS_BETA};
use super::turn::Turn;
use super::{anthropic, chat, responses};
use crate::cache_model::{Accounting, CacheModel};
use crate::error::ApiError;
use crate::http_serve::ResponseBody;
use crate::route::{Endpoint, Provider};

pub(super) const REPLY_HEADER: &str = "x-cachet-emulate-reply";

/// What a request asks of the emulator besides its body, in its headers (for a socket, in
/// its handshake's).
pub(super) struct Asked {
    pub faults: Faults,
    reply_header: Option<String>,
    /// The betas it opts into: `anthropic-beta`, as sent (Bedrock's body names them
    /// instead).
    pub betas: Option<String>,
    diagnosis_beta: bool,
    /// A stream framed as an AWS event stream (Bedrock), not SSE.
    pub event_stream: bool,
}

impl Asked {
    pub fn of(headers: &HeaderMap) -> Result<Asked, ApiError> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let betas = header("anthropic-beta");
        Ok(Asked {
            faults: Faults::parse(header(fault::HEADER).as_deref())?,
            reply_header: header(REPLY_HEADER),
            diagnosis_beta: betas
                .as_deref()
                .is_some_and(|betas| betas.split(',').any(|b| b.trim() == DIAGNOSIS_BETA)),
            betas,
            event_stream: false,
        })
    }
}

/// A conversation a socket holds: its latest answer's id, and the items of that answer's
/// prompt and output. A request on the same socket may continue it by
/// `previous_response_id` whatever its `store` ("the server keeps the prior state in memory
/// on the open socket", OpenAI's WebSocket mode guide).
pub(super) struct Held {
    pub id: String,
    pub items: Vec<Value>,
}

/// A request answered, before it is rendered.
pub(super) struct Generated {
    seq: u64,
    pub model: String,
    pub request: Value,
    reply: Reply,
    accounting: Accounting,
    output_tokens: u64,
    created: u64,
    compaction: bool,
    warmup: bool,
    /// Anthropic's `diagnostics` object, or the Responses `prompt_cache_diagnostics`.
    pub diagnostics: Option<Value>,
    /// A Responses answer's conversation (its prompt's items, then its output), for the
    /// socket it was asked on.
    pub held: Option<Held>,
}

impl Generated {
    pub fn turn(&self) -> Turn<'_> {
        Turn {
            seq: self.seq,
            model: &self.model,
            request: &self.request,
            reply: &self.reply,
            accounting: &self.accounting,
            output_tokens: self.output_tokens,
            created: self.created,
            compaction: self.compaction,
            warmup: self.warmup,
            diagnostics: self.diagnostics.as_ref(),
        }
    }
}

/// Answer a request read as JSON: `socket` is what the socket it came on holds, if it came
/// on one. Faults of the error kind are the caller's to apply (before or instead of this).
pub(super) fn produce(
    shared: &Shared,
    endpoint: Endpoint,
    seq: u64,
    asked: &Asked,
    request: Value,
    socket: Option<&Held>,
) -> Result<Generated, ApiError> {
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::invalid("model: Field required"))?
        .to_string();
    if endpoint == Endpoint::Messages && request.get("max_tokens").and_then(Value::as_u64).is_none()
    {
        return Err(ApiError::invalid("max_tokens: Field required"));
    }
    if endpoint == Endpoint::Messages {
        if let Some(e) =
            crate::providers::anthropic::thinking_budget_error(&request, asked.betas.as_deref())
        {
            return Err(ApiError::invalid(e));
        }
    }
    // A compaction reads its prompt as a response does.
    let rules = endpoint.read_as();
    // A request that continues a stored response, the socket's latest answer, or names a
    // conversation, is a prompt of the whole conversation.
    let conversation = match rules {
        Endpoint::Responses => recover(&shared.conversations).named(&request)?,
        _ => None,
    };
    let on_socket = socket.filter(|held| {
        request.get("previous_response_id").and_then(Value::as_str) == Some(held.id.as_str())
    });
    let expanded = match (rules, &conversation, on_socket) {
        (Endpoint::Responses, Some(id), _) => {
            Some(recover(&shared.conversations).expand(id, &request)?)
        }
        (Endpoint::Responses, None, Some(held)) => Some(continued(&request, &held.items)),
        (Endpoint::Responses, None, None) => recover(&shared.stored).expand(&request)?,
        _ => None,
    };
    let prompt = expanded.as_ref().unwrap_or(&request);
    // A compaction, asked by its endpoint or inline (Codex signed in with ChatGPT), answers
    // with a summary: text, whatever the script says of tool calls.
    let compaction = endpoint == Endpoint::Responses
        && crate::providers::openai_responses::asks_compaction(&request);
    let reply_header = match endpoint {
        _ if compaction || endpoint == Endpoint::Compact => asked
            .reply_header
            .clone()
            .filter(|h| h.starts_with("text:"))
            .or(Some("text".into())),
        _ => asked.reply_header.clone(),
    };
    let reply = shared
        .script
        .decide(reply_header.as_deref(), rules, prompt)?;
    let accounting = shared.account(rules, prompt)?;
    // A warmup "does not return a model output, but prepares request state" (OpenAI's
    // WebSocket mode guide): its prompt is read (and cached) as any other's.
    let warmup = endpoint == Endpoint::Responses
        && crate::providers::openai_responses::is_warmup_of(&request);
    let output_tokens = if warmup { 0 } else { reply.output_tokens() };
    shared.record(super::Accounted {
        endpoint,
        model: model.clone(),
        accounting: accounting.clone(),
        output_tokens,
    });
    let mut generated = Generated {
        seq,
        model,
        reply,
        accounting,
        output_tokens,
        created: shared.clock.now_secs(),
        compaction,
        warmup,
        diagnostics: None,
        held: None,
        request: Value::Null,
    };
    let id = |prefix| format!("{prefix}emu{seq:020}");
    generated.diagnostics = match endpoint {
        Endpoint::Messages if asked.diagnosis_beta => {
            let unavailable = asked.faults.diagnostics_unavailable;
            shared.diagnose(&request, &id("msg_"), unavailable)?
        }
        Endpoint::Responses => shared.diagnose_responses(
            prompt,
            &generated.model,
            &id("resp_"),
            &generated.accounting,
            asked.faults.diagnostics_unavailable,
        )?,
        _ => None,
    };
    if endpoint == Endpoint::Responses {
        generated.request = request;
        let output = responses::response(&generated.turn(), true)["output"].clone();
        let prompt = expanded.as_ref().unwrap_or(&generated.request);
        recover(&shared.stored).keep(id("resp_"), prompt, &output);
        if let Some(conversation) = &conversation {
            recover(&shared.conversations).answered(conversation, &generated.request, &output);
        }
        let mut items = crate::providers::openai_responses::input_items(prompt);
        items.extend(output.as_array().into_iter().flatten().cloned());
        generated.held = Some(Held {
            id: id("resp_"),
            items,
        });
    } else {
        generated.request = request;
    }
    Ok(generated)
}

/// A request continuing `items` (a socket's latest answer): those items before its input.
fn continued(request: &Value, items: &[Value]) -> Value {
    let mut all = items.to_vec();
    all.extend(crate::providers::openai_responses::input_items(request));
    let mut expanded = request.clone();
    expanded["input"] = Value::Array(all);
    expanded
}

/// An HTTP generation request: read, answered, rendered as a whole body or as the API's
/// event stream.
pub(super) async fn generate(
    shared: &Shared,
    endpoint: Endpoint,
    provider: Provider,
    seq: u64,
    request_id: &str,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let asked = Asked::of(req.headers())?;
    let request = read_json(req).await?;
    answer(
        shared,
        endpoint,
        provider,
        (seq, request_id),
        asked,
        request,
    )
    .await
}

/// Serve a generation request whose body is `request` (read, or made from another API's:
/// Bedrock's and Vertex's), as `asked`; `(seq, request_id)` name its answer.
pub(super) async fn answer(
    shared: &Shared,
    endpoint: Endpoint,
    provider: Provider,
    (seq, request_id): (u64, &str),
    asked: Asked,
    request: Value,
) -> Result<Response<ResponseBody>, ApiError> {
    let faults = &asked.faults;
    if let Some(delay) = faults.first_byte_delay {
        tokio::time::sleep(delay).await;
    }
    if let Some(kind) = faults.error {
        return Err(ApiError::new(kind, Faults::error_message(kind)));
    }
    if endpoint == Endpoint::CountTokens {
        request
            .get("model")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid("model: Field required"))?;
        let n = CacheModel::count_tokens(endpoint, &request)?;
        return Ok(json_response(
            provider,
            request_id,
            StatusCode::OK,
            crate::http_serve::full(json!({"input_tokens": n}).to_string()),
        ));
    }
    let generated = produce(shared, endpoint, seq, &asked, request, None)?;
    let turn = generated.turn();
    if endpoint == Endpoint::Compact {
        let body = Bytes::from(responses::compaction(&turn).to_string());
        let body = whole_body(body, faults.cut_after);
        return Ok(json_response(provider, request_id, StatusCode::OK, body));
    }
    let diagnostics = generated.diagnostics.as_ref();
    let stream = turn
        .request
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if stream {
        let mut events = match endpoint {
            Endpoint::Chat => {
                let include_usage = turn
                    .request
                    .pointer("/stream_options/include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                chat::chunks(&turn, include_usage)
            }
            Endpoint::Responses => responses::events(&turn),
            _ => anthropic::events(&turn, diagnostics),
        };
        if let Some(n) = faults.error_event_after {
            events.truncate(n);
            events.push(fault::stream_error_event(endpoint, n));
        }
        let content_type = match asked.event_stream {
            true => {
                let (accounting, output_tokens) = (&generated.accounting, generated.output_tokens);
                events = super::bedrock::frames(events, accounting, output_tokens);
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
        _ => anthropic::message(&turn, diagnostics),
    };
    let body = whole_body(Bytes::from(value.to_string()), faults.cut_after);
    Ok(json_response(provider, request_id, StatusCode::OK, body))
}
