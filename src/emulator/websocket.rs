//! The Responses API's WebSocket mode, as OpenAI and the ChatGPT backend serve it
//! (`GET /v1/responses`, `upgrade: websocket`; see
//! [`crate::providers::openai_responses::websocket`]): each `response.create` message is
//! answered with the events of the HTTP stream, one text message each, from the same cache
//! accounting as a `POST`. The socket holds its recent answers, which a request on it may
//! continue by `previous_response_id` whatever its `store`. Faults asked in the handshake's
//! `x-cachet-emulate-fault` apply to every message: an error status is an `error` event,
//! `cut:N` drops the connection after N events, `error-event:N` ends the answer with the
//! stream's error event, `slow-*` pace it.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::fault::Faults;
use super::generate::{produce, Asked, Held};
use super::routes::Shared;
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::{full, ResponseBody};
use crate::providers::openai_responses::websocket as ws;
use crate::route::Endpoint;

/// Answers a socket keeps for requests that continue them.
const HELD_ANSWERS: usize = 16;
/// The largest message a socket takes (the API's request limit).
const MAX_MESSAGE: usize = 32 * 1024 * 1024;

/// Whether a request asks for the WebSocket mode.
pub(super) fn asks_upgrade(req: &Request<Incoming>) -> bool {
    req.headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Answer the handshake (101, or the 400 of a request that is not one) and serve the socket
/// in the background.
pub(super) fn upgrade(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
) -> Result<Response<ResponseBody>, ApiError> {
    let headers = req.headers();
    let version = headers
        .get(http::header::SEC_WEBSOCKET_VERSION)
        .and_then(|v| v.to_str().ok());
    let key = headers.get(http::header::SEC_WEBSOCKET_KEY);
    let (Some("13"), Some(key)) = (version, key) else {
        return Err(ApiError::invalid(
            "a WebSocket handshake needs sec-websocket-version: 13 and a sec-websocket-key",
        ));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let asked = Asked::of(headers)?;
    // The ChatGPT backend pins a session with a turn state of its own, which Codex sends
    // back on the turn's later handshakes.
    let turn_state = crate::providers::auth::signed_in_with_chatgpt(headers).then(|| {
        headers
            .get(ws::TURN_STATE_HEADER)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("ts-emulated"))
    });
    let upgrading = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrading.await {
            Ok(upgraded) => {
                let io = hyper_util::rt::TokioIo::new(upgraded);
                let mut config = WebSocketConfig::default();
                config.max_message_size = Some(MAX_MESSAGE);
                config.max_frame_size = Some(MAX_MESSAGE);
                let socket = WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await;
                serve(&shared, socket, &asked).await;
            }
            Err(e) => tracing::debug!("emulator: WebSocket upgrade failed: {e}"),
        }
    });
    let mut resp = Response::new(full(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = resp.headers_mut();
    out.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        out.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(state) = turn_state {
        out.insert(ws::TURN_STATE_HEADER, state);
    }
    Ok(resp)
}

type Socket = WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

/// Serve one socket until the client closes it (or a fault drops it).
async fn serve(shared: &Shared, mut socket: Socket, asked: &Asked) {
    let mut held: VecDeque<Held> = VecDeque::new();
    while let Some(message) = socket.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Binary(_)) => {
                let event = ws::error_event(
                    ErrorKind::InvalidRequest,
                    400,
                    "binary messages are not supported: send JSON text",
                );
                if send(&mut socket, event).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(Message::Close(_)) | Err(_) => return,
            Ok(_) => continue,
        };
        let seq = shared.next_seq();
        match answer(shared, seq, text.as_bytes(), asked, &held) {
            Ok((events, answered)) => {
                if !stream(&mut socket, events, &asked.faults).await {
                    return;
                }
                if let Some(answered) = answered {
                    if held.len() == HELD_ANSWERS {
                        held.pop_front();
                    }
                    held.push_back(answered);
                }
            }
            Err(event) => {
                if send(&mut socket, event).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The events answering one message (each a text message), and the conversation its
/// answer leaves on the socket; or the `error` event refusing it.
fn answer(
    shared: &Shared,
    seq: u64,
    message: &[u8],
    asked: &Asked,
    held: &VecDeque<Held>,
) -> Result<(Vec<bytes::Bytes>, Option<Held>), bytes::Bytes> {
    let refuse = |err: ApiError| {
        let code = err
            .message
            .starts_with("Previous response with id")
            .then_some("previous_response_not_found");
        ws::error_event_with_code(err.kind, err.status().as_u16(), &err.message, code)
    };
    let mut request: Value = serde_json::from_slice(message)
        .map_err(|e| refuse(ApiError::invalid(format!("message is not valid JSON: {e}"))))?;
    let Some(object) = request.as_object_mut() else {
        return Err(refuse(ApiError::invalid("message must be a JSON object")));
    };
    match object.remove("type") {
        Some(Value::String(t)) if t == ws::RESPONSE_CREATE => {}
        other => {
            let what = other.map_or("no type".to_string(), |t| t.to_string());
            return Err(refuse(ApiError::invalid(format!(
                "unsupported client event ({what}): expected {}",
                ws::RESPONSE_CREATE
            ))));
        }
    }
    if object.get("background") == Some(&Value::Bool(true)) {
        return Err(refuse(ApiError::invalid(
            "background is not supported over WebSocket",
        )));
    }
    let stream_id = object.remove("stream_id");
    for field in ws::TRANSPORT_FIELDS {
        object.remove(field);
    }
    if let Some(kind) = asked.faults.error {
        let err = ApiError::new(kind, Faults::error_message(kind));
        return Err(refuse(err));
    }
    let previous = request
        .get("previous_response_id")
        .and_then(Value::as_str)
        .and_then(|id| held.iter().find(|h| h.id == id));
    let generated =
        produce(shared, Endpoint::Responses, seq, asked, request, previous).map_err(refuse)?;
    let mut events = super::responses::event_payloads(&generated.turn());
    if let Some(n) = asked.faults.error_event_after {
        events.truncate(n);
        let error = super::fault::stream_error_payload(n);
        events.push(error);
    }
    let events = events
        .into_iter()
        .map(|mut event| {
            if let Some(id) = &stream_id {
                event["stream_id"] = id.clone();
            }
            bytes::Bytes::from(event.to_string())
        })
        .collect();
    Ok((events, generated.held))
}

/// Send a message's events, as the faults pace and cut them; `false` once the socket is
/// gone (or cut).
async fn stream(socket: &mut Socket, events: Vec<bytes::Bytes>, faults: &Faults) -> bool {
    if let Some(delay) = faults.first_byte_delay {
        tokio::time::sleep(delay).await;
    }
    for (sent, event) in events.into_iter().enumerate() {
        if faults.cut_after.is_some_and(|n| sent >= n) {
            // Dropped without a close frame, as a connection that breaks.
            let _ = socket.flush().await;
            return false;
        }
        if let Some(delay) = faults.event_delay {
            tokio::time::sleep(delay).await;
        }
        if send(socket, event).await.is_err() {
            return false;
        }
    }
    true
}

async fn send(
    socket: &mut Socket,
    event: bytes::Bytes,
) -> Result<(), tokio_tungstenite::tungstenite::Error> {
    let text =
        tokio_tungstenite::tungstenite::Utf8Bytes::try_from(event).unwrap_or_else(|_| "{}".into());
    socket.send(Message::Text(text)).await
}
