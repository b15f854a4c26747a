//! The Responses API's WebSocket mode (`GET /v1/responses` upgraded, as Codex asks first):
//! the handshake goes upstream, and only once the upstream switched does the client get its
//! 101, with the upstream's headers. A refusal, an unreachable upstream or one that does
//! not answer in time is the client's 426 (in OpenAI's error format), which Codex falls
//! back to HTTP from. Once both sockets are open, [`super::socket_relay`] passes the
//! messages, and makes each `response.create` an [`Exchange`] of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response};
use hyper::body::Incoming;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::{Exchange, Pipeline};
use crate::error::{ApiError, ErrorKind};
use crate::route::{Endpoint, Route};
use crate::transport::forward::{self, Destination};
use crate::transport::websocket::{self, UPSTREAM_MESSAGE_LIMIT};
use crate::transport::ProxyBody;

/// How much of a refusal's body is quoted in the client's error.
const QUOTED: usize = 300;

impl Pipeline {
    /// A client's WebSocket handshake, its client key already checked: the upstream's 101
    /// and the sockets relayed in the background, or a 426.
    pub async fn websocket(
        self: &Arc<Self>,
        route: Route,
        mut req: Request<Incoming>,
    ) -> Response<ProxyBody> {
        let to = Destination::of(route.provider, req.headers());
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let host = self.upstreams.host(to, path);
        let url = match self.upstreams.url(to, path) {
            Ok(url) => url,
            Err(err) => return self.refuse_upgrade(route, req, &err.message),
        };
        let headers = websocket::upstream_handshake(&self.upstreams, to, req.headers());
        let upstream_cfg = &self.config.upstream;
        let timeout = Duration::from_millis(
            upstream_cfg.connect_timeout_ms + upstream_cfg.response_timeout_ms,
        );
        let sent = tokio::time::timeout(timeout, self.client.send_upgrade(url, headers)).await;
        let upstream = match sent {
            Ok(Ok(resp)) if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS => resp,
            Ok(Ok(resp)) => {
                let status = resp.status();
                let body = tokio::time::timeout(Duration::from_secs(5), resp.bytes()).await;
                let body = body.ok().and_then(Result::ok).unwrap_or_default();
                let quoted = String::from_utf8_lossy(&body[..body.len().min(QUOTED)]).into_owned();
                let message =
                    format!("upstream {host} refused the WebSocket upgrade ({status}): {quoted}");
                return self.refuse_upgrade(route, req, &message);
            }
            Ok(Err(e)) => {
                let message = forward::send_error(&e, &host).message;
                return self.refuse_upgrade(route, req, &message);
            }
            Err(_) => {
                let message =
                    format!("upstream {host} did not answer the WebSocket upgrade in time");
                return self.refuse_upgrade(route, req, &message);
            }
        };
        let response = websocket::switching(upstream.headers());
        let from_client = hyper::upgrade::on(&mut req);
        let (parts, _) = req.into_parts();
        self.count_socket("opened");
        tracing::info!(upstream = %host, "WebSocket opened");
        let pipeline = self.clone();
        let limit = self.config.server.max_body_bytes;
        tokio::spawn(async move {
            let client = websocket::socket(from_client, Role::Server, limit);
            let upstream =
                websocket::socket(upstream.upgrade(), Role::Client, UPSTREAM_MESSAGE_LIMIT);
            match tokio::try_join!(client, upstream) {
                Ok((client, upstream)) => pipeline.relay(parts, client, upstream).await,
                Err(e) => {
                    pipeline.count_socket("client_gone");
                    tracing::warn!("WebSocket upgrade did not complete: {e}");
                }
            }
        });
        response
    }

    /// The upgrade refused: the client's 426, in OpenAI's error format (Codex then sends
    /// the turn over HTTP), counted and logged, its exchange finished with the refusal.
    fn refuse_upgrade(
        self: &Arc<Self>,
        route: Route,
        req: Request<Incoming>,
        why: &str,
    ) -> Response<ProxyBody> {
        self.count_socket("refused");
        tracing::warn!("WebSocket upgrade refused: {why}");
        let err = ApiError::new(
            ErrorKind::UpgradeRefused,
            format!("{why}; send the request over HTTP"),
        );
        let (parts, _unread) = req.into_parts();
        let ex = self.accept(route, parts);
        let mut resp = self.refuse(ex, err);
        resp.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        resp
    }

    /// `cachet_websocket_events_total{event}`.
    pub(super) fn count_socket(&self, event: &str) {
        self.metrics
            .websocket_events
            .with_label_values(&[event])
            .inc();
    }

    /// A socket's `response.create` message as an exchange of its own: accepted as a `POST
    /// /v1/responses` with the handshake's headers, and passed through the same phases as
    /// an HTTP body. Returns the exchange and the message to send upstream: the client's
    /// own bytes, unless a policy changed them.
    pub(super) async fn socket_request(
        self: &Arc<Self>,
        handshake: &Parts,
        message: Bytes,
    ) -> Result<(Exchange, Bytes), (Exchange, ApiError)> {
        let route = Route {
            provider: crate::route::Provider::OpenAi,
            endpoint: Endpoint::Responses,
        };
        let mut parts = handshake.clone();
        parts.method = Method::POST;
        let mut ex = self.accept(route, parts);
        ex.body = message.clone();
        let span = ex.telemetry.span();
        let prepared = tracing::Instrument::instrument(self.prepare(&mut ex), span).await;
        if let Err(err) = prepared {
            return Err((ex, err));
        }
        self.metrics
            .route(route.provider, route.endpoint)
            .overhead
            .observe(ex.start.elapsed().as_secs_f64());
        ex.sent_at = Some(Instant::now());
        ex.sent_ms = Some(self.clock.now_ms());
        let out = match ex.payload.is(&ex.body) {
            true => message,
            false => ex.payload.to_bytes(),
        };
        Ok((ex, out))
    }
}
