//! Bad input and upstream faults: each answered clearly, in the client's provider format.

use std::sync::Arc;

use crate::support::*;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::Notify;

async fn post(
    proxy: &cachet::transport::server::ProxyHandle,
    path: &str,
    body: impl Into<reqwest::Body>,
    anthropic: bool,
) -> (u16, Value) {
    let mut rb = client()
        .post(format!("http://{}{path}", proxy.addr))
        .body(body);
    if anthropic {
        rb = rb
            .header("x-api-key", "sk-ant-secret-123")
            .header("anthropic-version", "2023-06-01");
    } else {
        rb = rb.header("authorization", "Bearer sk-openai-secret-456");
    }
    let r = rb.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test]
async fn malformed_json_is_refused_in_provider_format_and_not_forwarded() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let (s, v) = post(
        &proxy,
        "/v1/messages",
        "{\"model\": \"claude\", \"messages\": [",
        true,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("request body is not valid JSON: EOF while parsing"),
        "{v}"
    );
    let (s, v) = post(
        &proxy,
        "/v1/chat/completions",
        "{\"model\":\"gpt-4o\",\"messages\":\"hi\"}",
        false,
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["message"], "messages: must be an array");
    let (s, v) = post(&proxy, "/v1/responses", "{\"input\":\"hi\"}", false).await;
    assert_eq!(s, 400);
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("model: field required"));
    assert!(
        upstream.requests().is_empty(),
        "refused requests never reach the upstream"
    );
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&text, "cachet_requests_total", &[("status", "400")]),
        3.0
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn oversized_body_gets_413() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let mut config = test_config(&upstream.url());
    config.server.max_body_bytes = 1024;
    let proxy = start_proxy(config).await;
    let big = format!(
        "{{\"model\":\"m\",\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "x".repeat(4096)
    );
    let (s, v) = post(&proxy, "/v1/messages", big.clone(), true).await;
    assert_eq!(s, 413);
    assert_eq!(v["error"]["type"], "request_too_large");
    // Without a content-length (chunked), the limit still holds.
    let chunks = futures_util::stream::iter(
        big.into_bytes()
            .chunks(500)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let (s, v) = post(
        &proxy,
        "/v1/chat/completions",
        reqwest::Body::wrap_stream(chunks),
        false,
    )
    .await;
    assert_eq!(s, 413);
    assert_eq!(v["error"]["code"], "request_too_large");
    assert!(upstream.requests().is_empty());
    proxy.shutdown().await;
}

/// A body that arrives in many frames is forwarded whole and byte for byte, whether the
/// client declared its length (read into one buffer of that length) or sent it chunked.
#[tokio::test]
async fn a_body_in_many_frames_is_forwarded_whole() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let body = format!(
        "{{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{{\"role\":\"user\",\"content\":\"{}\"}}]}}",
        "0123456789abcdef".repeat(20_000)
    );
    for declared in [true, false] {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body
            .as_bytes()
            .chunks(7_001)
            .map(|c| Ok(c.to_vec()))
            .collect();
        let mut rb = client()
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "sk-ant-secret-123")
            .header("anthropic-version", "2023-06-01")
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )));
        if declared {
            rb = rb.header("content-length", body.len());
        }
        let r = rb.send().await.unwrap();
        assert_eq!(r.status(), 200, "declared length: {declared}");
    }
    let received = upstream.requests();
    assert_eq!(received.len(), 2);
    for r in received {
        assert_eq!(r.body, body.as_bytes());
    }
    proxy.shutdown().await;
}

/// A request that cannot reach `upstream`: a 502 of the provider's `error_type`, naming the
/// host, never the URL or a key. Returns its message.
async fn unreachable(upstream: &str, anthropic: bool) -> String {
    let proxy = start_proxy(test_config(upstream)).await;
    let path = if anthropic {
        "/v1/messages"
    } else {
        "/v1/chat/completions"
    };
    let (s, v) = post(&proxy, path, "{\"model\":\"m\",\"messages\":[]}", anthropic).await;
    proxy.shutdown().await;
    assert_eq!(s, 502, "{v}");
    let error_type = if anthropic {
        "api_error"
    } else {
        "server_error"
    };
    assert_eq!(v["error"]["type"], error_type);
    let message = v["error"]["message"].as_str().unwrap().to_string();
    assert!(
        message.starts_with("cannot connect to upstream 127.0.0.1: "),
        "{v}"
    );
    assert!(!message.contains(upstream), "never the URL: {message}");
    assert!(
        !message.contains("sk-openai-secret-456"),
        "never a key: {message}"
    );
    message
}

#[tokio::test]
async fn unreachable_upstream_is_502_and_tls_failure_too() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again: connections are refused
    let refused = unreachable(&format!("http://127.0.0.1:{port}"), true).await;
    assert!(refused.contains("refused"), "{refused}");
    // An https upstream that speaks plain HTTP: the TLS handshake fails, and the message
    // says what the handshake read.
    let plain = FakeUpstream::start(Script::json(200, "{}")).await;
    let handshake = unreachable(&format!("https://{}", plain.addr), false).await;
    assert!(handshake.contains("corrupt message"), "{handshake}");
}

/// A request through a proxy with `config` that times out: a 504 `timeout_error`, whose
/// body is returned.
async fn timed_out(config: cachet::config::Config) -> Value {
    let proxy = start_proxy(config).await;
    let (s, v) = post(
        &proxy,
        "/v1/messages",
        "{\"model\":\"m\",\"messages\":[]}",
        true,
    )
    .await;
    proxy.shutdown().await;
    assert_eq!(s, 504, "{v}");
    assert_eq!(v["error"]["type"], "timeout_error");
    v
}

/// `upstream.connect_timeout_ms` bounds the TLS handshake too: an upstream that accepts the
/// connection and never answers the handshake is a 504 once it has passed, long before the
/// response time-out.
#[tokio::test]
async fn a_stalled_tls_handshake_is_a_connect_timeout_504() {
    // Connections complete in the kernel's backlog; nothing ever answers the ClientHello.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let mut config = test_config(&format!("https://{addr}"));
    config.upstream.connect_timeout_ms = 300;
    config.upstream.response_timeout_ms = 120_000;
    let v = timed_out(config).await;
    assert_eq!(
        v["error"]["message"], "upstream 127.0.0.1 did not answer in time",
        "the connect time-out, not the response time-out"
    );
}

#[tokio::test]
async fn upstream_timeout_is_504() {
    let mut script = Script::json(200, "{}");
    script.hang = true;
    let upstream = FakeUpstream::start(script).await;
    let mut config = test_config(&upstream.url());
    config.upstream.response_timeout_ms = 200;
    let v = timed_out(config).await;
    assert_eq!(
        v["error"]["message"],
        "upstream 127.0.0.1 did not answer within 200 ms"
    );
}

#[tokio::test]
async fn upstream_errors_pass_through_unchanged() {
    let body = "{\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"slow down\"},\"request_id\":\"req_9\"}";
    let upstream = FakeUpstream::start(
        Script::json(429, body)
            .header("retry-after", "7")
            .header("anthropic-ratelimit-requests-remaining", "0")
            .header("request-id", "req_9"),
    )
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .body("{\"model\":\"m\",\"messages\":[]}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(r.headers()["anthropic-ratelimit-requests-remaining"], "0");
    assert_eq!(r.headers()["request-id"], "req_9");
    assert_eq!(r.text().await.unwrap(), body);
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(&text, "cachet_requests_total", &[("status", "429")]),
        Some(1.0)
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn stream_cut_halfway_ends_with_an_error_event_and_is_counted() {
    let upstream = FakeUpstream::start(Script::sse(vec![
    chunk("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"),
    Step::Cut,
    ]))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .body("{\"model\":\"m\",\"messages\":[],\"stream\":true}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.starts_with("event: message_start"));
    assert!(
        text.contains("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\""),
        "{text}"
    );
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &m,
            "cachet_requests_total",
            &[("endpoint", "messages"), ("status", "200")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric_value(
            &m,
            "cachet_stream_errors_total",
            &[("cause", "upstream_cut")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric_value(&m, "cachet_input_tokens_total", &[("kind", "uncached")]),
        Some(5.0),
        "usage seen before the cut is kept"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    let gate = Arc::new(Notify::new());
    let upstream = FakeUpstream::start(Script::sse(vec![
        chunk("event: ping\ndata: {\"type\":\"ping\"}\n\n"),
        Step::Wait(gate.clone()),
        chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ]))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .body("{\"model\":\"m\",\"messages\":[]}")
        .send()
        .await
        .unwrap();
    let mut s = r.bytes_stream();
    let first = s.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"event: ping"));
    drop(s);
    // The upstream sees its response channel close: the proxy dropped the upstream request.
    tokio::time::timeout(
        std::time::Duration::from_secs(20),
        upstream.cancelled.notified(),
    )
    .await
    .expect("upstream request was cancelled");
    proxy.shutdown().await;
}

/// Claude Code interrupted mid-answer (Esc in the UI) closes its stream after the first
/// events. The session entry says so: its outcome is `client_gone`, beside the usage counted
/// before the end, and the timeline row shows it; an answer that ends whole has no outcome.
#[tokio::test]
async fn an_interrupted_answer_is_recorded_as_interrupted() {
    let gate = Arc::new(Notify::new());
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n";
    let upstream = FakeUpstream::start(Script::sse(vec![
        chunk(start),
        Step::Wait(gate.clone()),
        chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ]))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let body = serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 32000,
        "stream": true, "messages": [{"role": "user", "content": "Rename the loader."}]});
    let send = || {
        client()
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .header("x-claude-code-session-id", "cc-interrupt")
            .json(&body)
            .send()
    };
    let mut s = send().await.unwrap().bytes_stream();
    s.next().await.unwrap().unwrap();
    drop(s);
    let log = wait_for_requests(&proxy, "cc-interrupt", 1).await;
    let entry = request_entries(&log)[0].clone();
    assert_eq!(entry["outcome"], "client_gone", "{entry:#}");
    assert_eq!(entry["status"], 200);
    let page = client()
        .get(format!(
            "http://{}/sessions/cc-interrupt/timeline",
            proxy.admin_addr
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("interrupted by the client"), "{page}");
    // The next turn's answer ends whole.
    upstream.set_script(Script::sse(vec![
        chunk(start),
        chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ]));
    let whole = send().await.unwrap().bytes().await.unwrap();
    assert!(String::from_utf8_lossy(&whole).contains("message_stop"));
    let log = wait_for_requests(&proxy, "cc-interrupt", 2).await;
    let second = request_entries(&log)[1];
    assert!(second.get("outcome").is_none(), "{second:#}");
    proxy.shutdown().await;
}

#[tokio::test]
async fn graceful_shutdown_drains_streams_in_flight() {
    let gate = Arc::new(Notify::new());
    let upstream = FakeUpstream::start(Script::sse(vec![
        chunk("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n"),
        Step::Wait(gate.clone()),
        chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ]))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let addr = proxy.addr;
    let r = client()
        .post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", "k")
        .body("{\"model\":\"m\",\"messages\":[]}")
        .send()
        .await
        .unwrap();
    let mut s = r.bytes_stream();
    s.next().await.unwrap().unwrap();
    let shutdown = tokio::spawn(proxy.shutdown());
    // New connections are refused once shutdown started.
    let mut refused = false;
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(refused, "listener closed on shutdown");
    assert!(
        !shutdown.is_finished(),
        "shutdown waits for the stream in flight"
    );
    gate.notify_one();
    let mut rest = Vec::new();
    while let Some(c) = s.next().await {
        rest.extend_from_slice(&c.unwrap());
    }
    assert!(
        String::from_utf8(rest).unwrap().contains("message_stop"),
        "the stream finished"
    );
    shutdown.await.unwrap();
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let mut config = test_config(&upstream.url());
    config.server.header_read_timeout_ms = 200;
    let proxy = start_proxy(config).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The proxy closes the connection (with or without a 408) instead of waiting forever.
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        stream.read_to_end(&mut buf),
    )
    .await;
    assert!(closed.is_ok(), "connection still open");
    assert!(upstream.requests().is_empty());
    proxy.shutdown().await;
}

/// `server.check_body = false`: bodies go through unread (the provider answers malformed
/// ones itself), and the model label comes from the response, streamed or not.
#[tokio::test]
async fn unchecked_bodies_are_forwarded_and_labelled_by_the_answering_model() {
    let answer =
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"upstream says no"}}"#;
    let upstream = FakeUpstream::start(Script::json(400, answer)).await;
    let mut config = test_config(&upstream.url());
    config.server.check_body = false;
    let proxy = start_proxy(config).await;

    let malformed = "{\"model\": \"claude\", \"messages\": [";
    let (s, v) = post(&proxy, "/v1/messages", malformed, true).await;
    assert_eq!(s, 400);
    assert_eq!(
        v["error"]["message"], "upstream says no",
        "the provider's own answer"
    );
    assert_eq!(upstream.requests()[0].body, malformed.as_bytes());

    upstream.set_script(Script::json(
        200,
        r#"{"id":"msg_1","type":"message","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":5,"cache_read_input_tokens":100,"output_tokens":2}}"#,
    ));
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let (s, _) = post(&proxy, "/v1/messages", body, true).await;
    assert_eq!(s, 200);

    upstream.set_script(Script::sse(vec![
        chunk("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_2\",\"model\":\"claude-haiku-4-5-20251001\",\"usage\":{\"input_tokens\":7,\"cache_read_input_tokens\":0,\"output_tokens\":1}}}\n\n"),
        chunk("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":3}}\n\n"),
        chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ]));
    let (s, _) = post(&proxy, "/v1/messages", body, true).await;
    assert_eq!(s, 200);

    let text = metrics_text(&proxy).await;
    let requests = |model: &str, status: &str| {
        metric_value(
            &text,
            "cachet_requests_total",
            &[("model", model), ("status", status)],
        )
    };
    assert_eq!(requests("unknown", "400"), Some(1.0), "{text}");
    assert_eq!(
        requests("claude-sonnet-4-5-20250929", "200"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        requests("claude-haiku-4-5-20251001", "200"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric_value(
            &text,
            "cachet_input_tokens_total",
            &[
                ("model", "claude-sonnet-4-5-20250929"),
                ("kind", "cache_read")
            ]
        ),
        Some(100.0)
    );
}
