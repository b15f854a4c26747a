//! Two open sockets, client and upstream, relayed until either ends. Messages cross as
//! they came (text and binary payloads byte for byte; ping, pong and close frames with
//! their codes and reasons); a client's `response.create` is an [`Exchange`] of its own
//! ([`Pipeline::socket_request`]), whose answer's `response.*` events are tapped for usage
//! as an HTTP stream's are, and which [`Pipeline::finish`] ends as it ends an HTTP one. A
//! socket's responses are told apart by the `stream_id` their events echo; without one,
//! they come in the order they were asked (the API answers a lane FIFO).
//!
//! A socket ends, counted in `cachet_websocket_events_total{event}` and logged, when either
//! side closes or goes, a message exceeds the limit (`server.max_body_bytes` for the
//! client's; the client is closed with 1009), a frame breaks the protocol, nothing crosses
//! for `server.websocket_idle_timeout_secs` (1001), the upstream stalls mid-answer for
//! `upstream.idle_timeout_ms`, or the proxy shuts down (1001). Exchanges still open then
//! are finished with how their answer ended: none is lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::request::Parts;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message, Utf8Bytes};

use super::exchange::{Answer, Exchange, Outcome};
use super::Pipeline;
use crate::providers::openai_responses::websocket as ws;
use crate::providers::Terminal;
use crate::route::Endpoint;
use crate::tap::{Outcome as BodyEnd, Tap};
use crate::transport::websocket::Socket;

/// How long a side that was sent a close frame has to answer it.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A `response.create` sent upstream, its answer not yet ended.
struct Open {
    ex: Exchange,
    tap: Tap,
    stream_id: Option<String>,
    /// Its prompt's input items (JSON text), whole, while monitoring reads the socket: with
    /// its answer's output, what a request continuing that answer continues.
    items: Option<Vec<u8>>,
}

/// What a socket's relay keeps between messages: the answers still open, and the latest
/// answers, whole, for monitoring to read a request that continues one as the whole
/// request it stands for (Codex sends only the new input, by `previous_response_id`).
#[derive(Default)]
struct Relayed {
    open: VecDeque<Open>,
    held: VecDeque<ws::HeldAnswer>,
}

/// Why a socket ended: its `event` label, and what its open exchanges' answers became.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ended {
    ClientClosed,
    UpstreamClosed,
    ClientGone,
    UpstreamGone,
    Oversized,
    BadFrame,
    IdleTimeout,
    UpstreamStalled,
    Shutdown,
}

impl Ended {
    fn label(self) -> &'static str {
        match self {
            Ended::ClientClosed => "client_closed",
            Ended::UpstreamClosed => "upstream_closed",
            Ended::ClientGone => "client_gone",
            Ended::UpstreamGone => "upstream_gone",
            Ended::Oversized => "oversized",
            Ended::BadFrame => "bad_frame",
            Ended::IdleTimeout => "idle_timeout",
            Ended::UpstreamStalled => "upstream_stalled",
            Ended::Shutdown => "shutdown",
        }
    }

    /// How an answer still open when the socket ended ended.
    fn answer_end(self) -> BodyEnd {
        match self {
            Ended::ClientClosed | Ended::ClientGone | Ended::Oversized | Ended::Shutdown => {
                BodyEnd::ClientGone
            }
            Ended::IdleTimeout | Ended::UpstreamStalled => BodyEnd::IdleTimeout,
            Ended::UpstreamClosed | Ended::UpstreamGone | Ended::BadFrame => {
                BodyEnd::UpstreamCut(format!("the WebSocket ended ({})", self.label()))
            }
        }
    }

    /// The close frames cachet sends itself, to the client and upstream (`None`: that
    /// side closed or is gone).
    fn closes(self) -> (Option<CloseFrame>, Option<CloseFrame>) {
        let frame = |code, reason: &str| {
            Some(CloseFrame {
                code,
                reason: reason.to_string().into(),
            })
        };
        let away = || frame(CloseCode::Away, "cachet closed the socket");
        match self {
            Ended::ClientClosed | Ended::UpstreamClosed => (None, None),
            Ended::ClientGone => (None, away()),
            Ended::UpstreamGone => (frame(CloseCode::Error, "upstream connection lost"), None),
            Ended::Oversized => (frame(CloseCode::Size, "message too big"), away()),
            Ended::BadFrame => (frame(CloseCode::Protocol, "protocol error"), away()),
            Ended::IdleTimeout => (frame(CloseCode::Away, "idle timeout"), away()),
            Ended::UpstreamStalled => (frame(CloseCode::Again, "upstream stalled"), away()),
            Ended::Shutdown => (frame(CloseCode::Away, "cachet is shutting down"), away()),
        }
    }
}

/// A read error's meaning: a message over the limit, a frame that breaks the protocol, or
/// the connection gone.
fn read_failed(err: &WsError, gone: Ended) -> Ended {
    match err {
        WsError::Capacity(_) => Ended::Oversized,
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => gone,
        WsError::Protocol(_) | WsError::Utf8(_) => Ended::BadFrame,
        _ => gone,
    }
}

impl Pipeline {
    /// Relay two open sockets until either ends; then finish the exchanges still open.
    pub(super) async fn relay(
        self: Arc<Self>,
        parts: Parts,
        mut client: Socket,
        mut upstream: Socket,
    ) {
        let mut relayed = Relayed::default();
        let idle = Duration::from_secs(self.config.server.websocket_idle_timeout_secs.max(1));
        let stall = Duration::from_millis(self.config.upstream.idle_timeout_ms);
        let mut connection = parts
            .extensions
            .get::<crate::http_serve::Connection>()
            .cloned();
        let ended = loop {
            let wait = match relayed.open.is_empty() {
                true => idle,
                false => stall.min(idle),
            };
            let shutting_down = async {
                match &mut connection {
                    Some(c) => c.shutting_down().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                message = client.next() => match message {
                    Some(Ok(Message::Text(text))) => {
                        let Some(end) = self.from_client(&parts, text, &mut client, &mut upstream, &mut relayed).await else {
                            continue;
                        };
                        break end;
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = upstream.send(Message::Close(frame)).await;
                        break Ended::ClientClosed;
                    }
                    Some(Ok(other)) => {
                        if upstream.send(other).await.is_err() {
                            break Ended::UpstreamGone;
                        }
                    }
                    Some(Err(e)) => break read_failed(&e, Ended::ClientGone),
                    None => break Ended::ClientGone,
                },
                message = upstream.next() => match message {
                    Some(Ok(Message::Text(text))) => {
                        self.tap_event(text.as_bytes(), &mut relayed);
                        if client.send(Message::Text(text)).await.is_err() {
                            break Ended::ClientGone;
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = client.send(Message::Close(frame)).await;
                        break Ended::UpstreamClosed;
                    }
                    Some(Ok(other)) => {
                        if client.send(other).await.is_err() {
                            break Ended::ClientGone;
                        }
                    }
                    Some(Err(e)) => break read_failed(&e, Ended::UpstreamGone),
                    None => break Ended::UpstreamGone,
                },
                () = tokio::time::sleep(wait) => break match relayed.open.is_empty() {
                    true => Ended::IdleTimeout,
                    false => Ended::UpstreamStalled,
                },
                () = shutting_down => break Ended::Shutdown,
            }
        };
        self.count_socket(ended.label());
        let unanswered = relayed.open.len();
        match ended {
            Ended::ClientClosed | Ended::UpstreamClosed => {
                tracing::info!(ended = ended.label(), unanswered, "WebSocket closed")
            }
            _ => tracing::warn!(ended = ended.label(), unanswered, "WebSocket ended"),
        }
        for open in relayed.open {
            let result = open.tap.finish(ended.answer_end());
            self.clone()
                .finish(open.ex, Outcome::Answered(Answer::new(200, result)));
        }
        let (to_client, to_upstream) = ended.closes();
        tokio::join!(close(client, to_client), close(upstream, to_upstream));
    }

    /// A client's text message: a `response.create` is an exchange, whose message goes
    /// upstream (or whose refusal is the client's `error` event); anything else goes as it
    /// came. `Some` when the socket ended.
    async fn from_client(
        self: &Arc<Self>,
        parts: &Parts,
        text: Utf8Bytes,
        client: &mut Socket,
        upstream: &mut Socket,
        relayed: &mut Relayed,
    ) -> Option<Ended> {
        if ws::event_type(text.as_bytes()).as_deref() != Some(ws::RESPONSE_CREATE) {
            return upstream
                .send(Message::Text(text))
                .await
                .err()
                .map(|_| Ended::UpstreamGone);
        }
        let stream_id = ws::stream_id(text.as_bytes());
        let message = Bytes::from(text);
        match self.socket_request(parts, message.clone()).await {
            Ok((mut ex, out)) => {
                let keep_events = ex.wants_assistant() || self.keeps_output(&ex);
                let items = match self.store.is_some() {
                    true => ws::read_create(&message, &relayed.held).map(|(items, whole)| {
                        if matches!(ex.after, super::exchange::After::Observe) {
                            ex.observed = whole;
                        }
                        items
                    }),
                    false => None,
                };
                relayed.open.push_back(Open {
                    tap: Tap::new(Endpoint::Responses, true, keep_events),
                    ex,
                    stream_id,
                    items,
                });
                // The message goes as it came unless a policy changed it (then it is JSON text
                // that policy wrote).
                let out = Utf8Bytes::try_from(out).unwrap_or_else(|_| "{}".into());
                upstream
                    .send(Message::Text(out))
                    .await
                    .err()
                    .map(|_| Ended::UpstreamGone)
            }
            Err((ex, err)) => {
                let event = ws::error_event(err.kind, err.status().as_u16(), &err.message);
                self.clone().finish(ex, Outcome::Failed(err));
                let event = Utf8Bytes::try_from(event).unwrap_or_else(|_| "{}".into());
                client
                    .send(Message::Text(event))
                    .await
                    .err()
                    .map(|_| Ended::ClientGone)
            }
        }
    }

    /// An upstream event, read by the tap of the answer it belongs to (by its `stream_id`,
    /// else the oldest open); an answer that ended with it is finished.
    fn tap_event(self: &Arc<Self>, message: &[u8], relayed: &mut Relayed) {
        let open = &mut relayed.open;
        if open.is_empty() {
            return;
        }
        let Some(kind) = ws::event_type(message) else {
            return;
        };
        let at = match open.iter().any(|o| o.stream_id.is_some()) {
            true => {
                let lane = ws::stream_id(message);
                open.iter().position(|o| o.stream_id == lane).unwrap_or(0)
            }
            false => 0,
        };
        let tap = &mut open[at].tap;
        tap.feed(&sse_frame(&kind, message));
        let Some(terminal) = tap.terminal() else {
            return;
        };
        let Some(done) = open.remove(at) else {
            return;
        };
        // An `error` event carries the status the request would have had over HTTP.
        let status = match kind.as_str() {
            "error" => serde_json::from_slice::<serde_json::Value>(message)
                .ok()
                .and_then(|v| v.get("status").and_then(serde_json::Value::as_u64))
                .and_then(|s| u16::try_from(s).ok())
                .unwrap_or(200),
            _ => 200,
        };
        let end = match terminal {
            Terminal::Done => BodyEnd::Complete,
            Terminal::Error => BodyEnd::UpstreamError,
        };
        if let (Some(items), Terminal::Done) = (done.items, terminal) {
            if let Some((id, output)) = ws::completed_answer(message) {
                let items = ws::join_items(items, &output);
                let stream_id = done.stream_id.clone();
                ws::hold(
                    &mut relayed.held,
                    ws::HeldAnswer {
                        id,
                        stream_id,
                        items,
                    },
                );
            }
        }
        let result = done.tap.finish(end);
        self.clone()
            .finish(done.ex, Outcome::Answered(Answer::new(status, result)));
    }
}

/// A socket message as the SSE event an HTTP stream carries it in, for the tap.
fn sse_frame(kind: &str, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + kind.len() + 16);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(kind.as_bytes());
    out.push(b'\n');
    for line in message.split(|&b| b == b'\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
        out.push(b'\n');
    }
    out.push(b'\n');
    out
}

/// Send a side cachet's own close frame (if any), and give it a moment to answer.
async fn close(mut socket: Socket, frame: Option<CloseFrame>) {
    if let Some(frame) = frame {
        if socket.send(Message::Close(Some(frame))).await.is_err() {
            return;
        }
    }
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(_)) = socket.next().await {}
    })
    .await;
}
