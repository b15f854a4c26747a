//! The WebSocket plumbing of the Responses API's WebSocket mode: the handshake that goes
//! upstream (the client's, with cachet's credentials as on HTTP), the 101 the client gets
//! back (the upstream's own headers: `sec-websocket-accept`, `x-codex-turn-state`, ...),
//! and the two sockets once both connections switched. The sockets are tokio-tungstenite's
//! over hyper's upgraded connections; what crosses them is the pipeline's
//! (`pipeline::socket`).

use http::header::{HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use crate::transport::{forward, full, ProxyBody};

/// A socket over an upgraded HTTP/1.1 connection.
pub type Socket = WebSocketStream<TokioIo<Upgraded>>;

/// The largest message the upstream may send (a `response.completed` repeats the whole
/// output; the providers' own request limit, doubled).
pub const UPSTREAM_MESSAGE_LIMIT: usize = 64 * 1024 * 1024;

/// The handshake for the upstream: the client's end-to-end headers (credentials as on
/// HTTP, see [`forward::Upstreams::request_headers`]) and the upgrade's own. No extension
/// is offered: the messages cross as they are, and one side's compression could not be
/// the other's (RFC 7692 is negotiated per hop).
pub fn upstream_handshake(
    upstreams: &forward::Upstreams,
    to: forward::Destination,
    client: &HeaderMap,
) -> HeaderMap {
    let mut headers = upstreams.request_headers(to, client, false);
    headers.remove(http::header::SEC_WEBSOCKET_EXTENSIONS);
    headers.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    headers.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    headers
}

/// The 101 the client gets: the upstream's headers as they came (its
/// `sec-websocket-accept` answers the key the client sent, which went upstream unchanged).
pub fn switching(upstream: &HeaderMap) -> Response<ProxyBody> {
    let (mut headers, _) = forward::response_head(upstream, 101, false, false);
    headers.remove(http::header::SEC_WEBSOCKET_EXTENSIONS);
    headers.insert(
        http::header::CONNECTION,
        HeaderValue::from_static("upgrade"),
    );
    headers.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    let mut resp = Response::new(full(""));
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *resp.headers_mut() = headers;
    resp
}

/// A socket once its connection switched: `role` is cachet's on it (the server of the
/// client's, the client of the upstream's), `limit` the largest message it reads.
pub async fn socket(upgrade: OnUpgrade, role: Role, limit: usize) -> Result<Socket, hyper::Error> {
    let upgraded = upgrade.await?;
    let mut config = WebSocketConfig::default();
    config.max_message_size = Some(limit);
    config.max_frame_size = Some(limit);
    Ok(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), role, Some(config)).await)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UpstreamConfig;

    /// A held key replaces the client's API key in the handshake as in a `POST`, the
    /// upgrade's own headers go, and no compression is offered upstream.
    #[test]
    fn the_handshake_goes_with_held_credentials_and_no_extension() {
        std::env::set_var("CACHET_TEST_WS_HELD_KEY", "sk-held");
        let cfg = UpstreamConfig {
            openai_api_key_env: Some("CACHET_TEST_WS_HELD_KEY".into()),
            ..UpstreamConfig::default()
        };
        let upstreams = forward::Upstreams::from_config(&cfg).unwrap();
        let mut client = HeaderMap::new();
        client.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-client"),
        );
        client.insert("upgrade", HeaderValue::from_static("websocket"));
        client.insert("connection", HeaderValue::from_static("Upgrade"));
        client.insert(
            "sec-websocket-key",
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        client.insert("sec-websocket-version", HeaderValue::from_static("13"));
        client.insert(
            "sec-websocket-extensions",
            HeaderValue::from_static("permessage-deflate; client_max_window_bits"),
        );
        client.insert(
            "openai-beta",
            HeaderValue::from_static("responses_websockets=2026-02-06"),
        );
        let out = upstream_handshake(&upstreams, forward::Destination::OpenAi, &client);
        assert_eq!(out["authorization"], "Bearer sk-held");
        assert_eq!(out["upgrade"], "websocket");
        assert_eq!(out["connection"], "upgrade");
        assert_eq!(out["sec-websocket-key"], "dGhlIHNhbXBsZSBub25jZQ==");
        assert_eq!(out["openai-beta"], "responses_websockets=2026-02-06");
        assert!(out.get("sec-websocket-extensions").is_none());
    }
}
