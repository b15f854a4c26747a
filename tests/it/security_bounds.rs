//! Time and connection bounds: a body that stalls is answered with a provider-format 408
//! and its connection closed (`server.body_read_timeout_ms`); an idle keep-alive
//! connection closes when its next head is due; past `server.max_connections`
//! clients wait in the listen backlog and are served once a connection ends.

use crate::support::*;
use cachet::server::ProxyHandle;

/// A proxy with its `[server]` section set by `set`, in front of an upstream answering `{}`.
async fn proxy_with(
    set: impl FnOnce(&mut cachet::config::ServerConfig),
) -> (FakeUpstream, ProxyHandle) {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let mut config = test_config(&upstream.url());
    set(&mut config.server);
    let proxy = start_proxy(config).await;
    (upstream, proxy)
}

/// A full head announcing 1000 bytes, then 10 of them, then silence.
const STALLED: &str = "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\":\"";

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_the_connection_closed() {
    let (upstream, proxy) = proxy_with(|server| server.body_read_timeout_ms = 300).await;
    // `raw_exchange` reads until the server closes the connection.
    let answer = raw_exchange(proxy.addr, STALLED).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains(r#""type":"timeout_error""#), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(upstream.requests().is_empty());
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&metrics, "cachet_requests_total", &[("status", "408")]),
        1.0
    );
    proxy.shutdown().await;
}

/// The header-read deadline starts again once a keep-alive connection has been answered:
/// an idle connection is closed when its next head is due (`server.header_read_timeout_ms`,
/// checked every tick), not before and not never.
#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed_when_its_next_head_is_due() {
    let (upstream, proxy) = proxy_with(|server| server.header_read_timeout_ms = 300).await;
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let sent = std::time::Instant::now();
    // `raw_exchange` reads until the server closes the connection.
    let answer = raw_exchange(proxy.addr, &request).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        sent.elapsed() >= std::time::Duration::from_millis(250),
        "closed before its next head was due: {:?}",
        sent.elapsed()
    );
    assert_eq!(upstream.requests().len(), 1);
    proxy.shutdown().await;
}

#[tokio::test]
async fn past_the_connection_limit_clients_wait_instead_of_failing() {
    let upstream = FakeUpstream::start(Script::json(200, "{\"data\":[]}")).await;
    let mut config = test_config(&upstream.url());
    config.server.max_connections = 1;
    config.server.body_read_timeout_ms = 500;
    let proxy = start_proxy(config).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    // The first connection holds the only slot with a stalled body.
    let first = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let addr = proxy.addr;
    let (tx1, tx2) = (tx.clone(), tx);
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut first = first;
        first.write_all(STALLED.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = first.read_to_end(&mut out).await;
        tx1.send(("stalled", String::from_utf8_lossy(&out).into_owned()))
            .unwrap();
    });
    // The second waits in the backlog until the first is answered and closed.
    tokio::spawn(async move {
        let answer = raw_exchange(
            addr,
            "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        tx2.send(("waiting", answer)).unwrap();
    });
    let bound = std::time::Duration::from_secs(30);
    let (name, answer) = tokio::time::timeout(bound, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        name, "stalled",
        "the second connection was served beside the first"
    );
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let (name, answer) = tokio::time::timeout(bound, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(name, "waiting");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(upstream.requests().len(), 1);
    proxy.shutdown().await;
}
