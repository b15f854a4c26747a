//! Gaps found by running real agents through cachet: compressed request bodies, Codex signed
//! in with ChatGPT (its zstd bodies, its upstream, its WebSocket attempts), the log line of a
//! wrong base URL, and model-list requests in the metrics.

use std::io::Write;

use serde_json::{json, Value};

use crate::support::*;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

fn messages_body() -> Vec<u8> {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
           "system": "You are terse.\nCurrent date: 2026-11-23",
           "messages": [{"role": "user", "content": "hi"}]})
    .to_string()
    .into_bytes()
}

async fn post_encoded(
    proxy: &cachet::server::ProxyHandle,
    encoding: &str,
    body: Vec<u8>,
) -> reqwest::Response {
    client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "sk-ant-dummy")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .header("content-encoding", encoding)
        .body(body)
        .send()
        .await
        .unwrap()
}

/// The one compressed body the upstream received is the client's, with its coding, and the
/// decoded body named the model in the metrics.
async fn forwarded_as_sent_and_read(
    proxy: &cachet::server::ProxyHandle,
    upstream: &FakeUpstream,
    sent: &[u8],
    coding: &str,
    model: &str,
) {
    let received = upstream.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body.as_ref(), sent, "the bytes as sent");
    assert_eq!(received[0].headers["content-encoding"], coding);
    let metrics = metrics_text(proxy).await;
    assert_eq!(
        metric_sum(&metrics, "cachet_requests_total", &[("model", model)]),
        1.0,
        "the decoded body named the model: {metrics}"
    );
}

/// The session of [`codex_chatgpt_body`] (its `prompt_cache_key`, the thread id).
const CODEX_CHATGPT_SESSION: &str = "01a22368-b2d3-7781-8b8d-7a6024bffff6";

/// `POST {base}/v1/responses` with [`codex_chatgpt_body`] and the headers Codex sent with it
/// (its access token replaced).
async fn post_as_codex_signed_in(base: &str) -> reqwest::Response {
    client()
        .post(format!("{base}/v1/responses"))
        .header("authorization", "Bearer chatgpt-access-token")
        .header("chatgpt-account-id", "acc-e2e")
        .header("originator", "codex_exec")
        .header("session-id", CODEX_CHATGPT_SESSION)
        .header("accept", "text/event-stream")
        .header("content-type", "application/json")
        .header("content-encoding", "zstd")
        .body(codex_chatgpt_body())
        .send()
        .await
        .unwrap()
}

/// The body Codex 0.171.0 signed in with ChatGPT sent for its first turn, zstd-compressed,
/// captured as it left the client.
fn codex_chatgpt_body() -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/data/clients/codex_chatgpt_responses.json.zst",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// A gzip body (RFC 9110 §8.4: the coding applies to the content) is read decoded, so the
/// check and the metrics see its model, and forwarded as the client sent it.
#[tokio::test]
async fn a_gzip_body_is_read_decoded_and_forwarded_as_sent() {
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"type":"message","usage":{"input_tokens":3,"output_tokens":1}}"#,
    ))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let sent = gzip(&messages_body());
    let resp = post_encoded(&proxy, "gzip", sent.clone()).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    forwarded_as_sent_and_read(&proxy, &upstream, &sent, "gzip", "claude-sonnet-4-5").await;
    proxy.shutdown().await;
}

/// With a policy, the decoded body is what the pipeline shapes; it goes upstream
/// uncompressed, without the header that would claim otherwise.
#[tokio::test]
async fn a_gzip_body_shaped_by_a_policy_goes_upstream_decoded() {
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"type":"message","usage":{"input_tokens":3,"output_tokens":1}}"#,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    // A policy that changes every request: the date line leaves the system prompt.
    let policy = policy_file(
        dir.path(),
        "move",
        r#"
name = "move-dates"
[[context]]
reason = "ephemeral"
transform = { move_lines = { pattern = '(?m)^Current date:.*$' }, invalidateCacheReason = "move the date" }
"#,
    );
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        vec![policy],
        &dir.path().join("store"),
    ))
    .await;
    let resp = post_encoded(&proxy, "gzip", gzip(&messages_body())).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let received = upstream.requests();
    assert!(!received[0].headers.contains_key("content-encoding"));
    let forwarded: Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(forwarded["model"], "claude-sonnet-4-5");
    proxy.shutdown().await;
}

/// Codex signed in with ChatGPT compresses each Responses request with zstd (its
/// `enable_request_compression` feature, on by default: `content-encoding: zstd`). The body
/// here is the one Codex 0.171.0 sent for its first turn, captured as it left the client. It
/// is read decoded (model, session, the session log) and forwarded as sent.
#[tokio::test]
async fn a_codex_zstd_body_is_read_decoded_and_forwarded_as_sent() {
    let upstream = FakeUpstream::start(Script::json(200, RESPONSES_ANSWER)).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let resp = post_as_codex_signed_in(&format!("http://{}", proxy.addr)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let sent = codex_chatgpt_body();
    forwarded_as_sent_and_read(&proxy, &upstream, &sent, "zstd", "gpt-5.1-codex").await;
    let log = wait_for_requests(&proxy, CODEX_CHATGPT_SESSION, 1).await;
    assert_eq!(log["requests"], 1, "{log}");
    proxy.shutdown().await;
}

const RESPONSES_ANSWER: &str = r#"{"object":"response","status":"completed","output":[],"usage":{"input_tokens":9000,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"total_tokens":9005}}"#;

/// Codex signed in with ChatGPT needs no setting but its base URL: a request carrying the
/// ChatGPT account header goes to the ChatGPT backend (`upstream.chatgpt`), under its base
/// without `/v1`, with the client's own token, never a key cachet holds for OpenAI (that
/// key is for `upstream.openai`, and would leave for another host). API-key requests still
/// go to `upstream.openai`, with the held key.
#[tokio::test]
async fn a_chatgpt_signed_in_request_goes_to_the_chatgpt_backend_with_its_own_token() {
    let openai = FakeUpstream::start(Script::json(200, RESPONSES_ANSWER)).await;
    let chatgpt = FakeUpstream::start(Script::json(200, RESPONSES_ANSWER)).await;
    std::env::set_var("CACHET_IT_CHATGPT_HELD", "sk-proj-HELD-by-cachet");
    let mut config = test_config(&openai.url());
    config.upstream.chatgpt = format!("{}/backend-api/codex", chatgpt.url());
    config.upstream.openai_api_key_env = Some("CACHET_IT_CHATGPT_HELD".into());
    config.server.allow_open_relay = true;
    let proxy = start_proxy(config).await;
    let sent = codex_chatgpt_body();
    let resp = post_as_codex_signed_in(&format!("http://{}", proxy.addr)).await;
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let models = client()
        .get(format!(
            "http://{}/v1/models?client_version=0.171.0",
            proxy.addr
        ))
        .header("authorization", "Bearer chatgpt-access-token")
        .header("chatgpt-account-id", "acc-e2e")
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    let received = chatgpt.requests();
    let paths: Vec<&str> = received.iter().map(|r| r.path_and_query.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/backend-api/codex/responses",
            "/backend-api/codex/models?client_version=0.171.0"
        ]
    );
    for r in &received {
        assert_eq!(r.headers["authorization"], "Bearer chatgpt-access-token");
    }
    assert_eq!(received[0].body.as_ref(), sent.as_slice());
    assert!(openai.requests().is_empty(), "nothing went to the API");

    let resp = client()
        .post(format!("http://{}/v1/responses", proxy.addr))
        .header("authorization", "Bearer sk-client")
        .header("content-type", "application/json")
        .body(r#"{"model":"gpt-5.1-codex","input":"hi"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let received = openai.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path_and_query, "/v1/responses");
    assert_eq!(
        received[0].headers["authorization"],
        "Bearer sk-proj-HELD-by-cachet"
    );
    assert_eq!(chatgpt.requests().len(), 2);
    proxy.shutdown().await;
}

/// The emulator reads a compressed body as cachet does, so Codex signed in with ChatGPT runs
/// against it (the demo, the tests, `cachet replay`).
#[tokio::test]
async fn the_emulator_reads_a_codex_zstd_body() {
    let emulator = start_emulator().await;
    let resp = post_as_codex_signed_in(&emulator.url()).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(
        text.contains("response.completed") && text.contains("input_tokens"),
        "{text}"
    );
}

/// Codex (signed in with ChatGPT, or on its built-in OpenAI provider) first asks for the
/// Responses API over a WebSocket: `GET /v1/responses` with `upgrade: websocket`. With
/// `server.websocket = false`, cachet does not proxy it; it says so itself, in the
/// provider's format, rather than sending the client's credentials upstream. It answers 426, the
/// status Codex reads as "go on over HTTP" at once (codex-rs/core/src/client.rs,
/// `stream_responses_websocket`: `StatusCode::UPGRADE_REQUIRED` gives
/// `WebsocketStreamOutcome::FallbackToHttp`); any other status is an error Codex retries
/// five times, about 6 s a turn, before it falls back (tests/e2e/run.py, `codex-chatgpt`).
#[tokio::test]
async fn a_websocket_upgrade_is_answered_by_cachet_and_not_forwarded() {
    let upstream = FakeUpstream::start(Script::json(404, r#"{"error":{"message":"x"}}"#)).await;
    let mut config = test_config(&upstream.url());
    config.server.websocket = false;
    let proxy = start_proxy(config).await;
    let resp = client()
        .get(format!("http://{}/v1/responses", proxy.addr))
        .header("authorization", "Bearer chatgpt-access-token")
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 426);
    assert_eq!(resp.headers()["x-cachet-error"], "1");
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("WebSocket"), "{message}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(upstream.requests().is_empty(), "nothing forwarded");
    // A plain GET of the same path still goes upstream.
    let resp = client()
        .get(format!("http://{}/v1/responses", proxy.addr))
        .header("authorization", "Bearer sk-dummy")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert_eq!(upstream.requests().len(), 1);
    proxy.shutdown().await;
}

#[tokio::test]
async fn an_unsupported_encoding_is_answered_in_the_provider_format() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let resp = post_encoded(&proxy, "br", vec![0x0b, 0x02, 0x80]).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["x-cachet-error"], "1");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("content-encoding `br` is not supported"),
        "{message}"
    );
    // A body that does not decode says so, rather than "not valid JSON".
    let resp = post_encoded(&proxy, "gzip", messages_body()).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("gzip"), "{message}");
    assert!(upstream.requests().is_empty(), "nothing forwarded");
    proxy.shutdown().await;
}

/// Model lists carry no model and no usage: they count as requests, and make no all-zero
/// token series.
#[tokio::test]
async fn model_lists_make_no_token_series() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    for headers in [
        vec![
            ("x-api-key", "sk-ant-dummy"),
            ("anthropic-version", "2023-06-01"),
        ],
        vec![("authorization", "Bearer sk-dummy")],
    ] {
        let mut req = client().get(format!("http://{}/v1/models", proxy.addr));
        for (k, v) in headers {
            req = req.header(k, v);
        }
        assert_eq!(req.send().await.unwrap().status(), 200);
    }
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&metrics, "cachet_requests_total", &[("endpoint", "models")]),
        2.0,
        "{metrics}"
    );
    for name in [
        "cachet_input_tokens_total",
        "cachet_output_tokens_total",
        "cachet_cost_usd_total",
    ] {
        assert!(
            !metrics.lines().any(|l| l.starts_with(name)),
            "no {name} series for requests without usage: {metrics}"
        );
    }
    proxy.shutdown().await;
    emulator.shutdown().await;
}

/// A wrong base URL (pi's OpenAI APIs without `/v1`) shows in the log at info.
#[tokio::test]
async fn no_route_answers_are_logged_at_info() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut serve = serve_process(|cmd| {
        cmd.stderr(log).env("RUST_LOG", "info").env("NO_COLOR", "1");
    });
    let resp = client()
        .post(format!("http://{}/chat/completions", serve.addr))
        .header("authorization", "Bearer sk-dummy-secret")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // Stop it with SIGTERM and wait: every line it logged is then in the file.
    terminate(&serve.child);
    serve.child.wait().unwrap();
    let text = std::fs::read_to_string(&log_path).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("no route for POST /chat/completions"))
        .unwrap_or_else(|| panic!("no log line: {text}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(!text.contains("sk-dummy-secret"));
}

/// Whether an answer is in Anthropic's error shape (`{"type":"error","error":{"type":..}}`)
/// rather than OpenAI's (`{"error":{"message":..}}`); panics on neither.
fn anthropic_error_shape(answer: &str, what: &str) -> bool {
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body}"));
    let anthropic = body["type"] == "error" && body["error"]["type"].is_string();
    let openai = body.get("type").is_none() && body["error"]["message"].is_string();
    assert_ne!(anthropic, openai, "{what}: {body}");
    anthropic
}

/// The family a request speaks is the one its path names, else the one its headers name,
/// by one rule (`providers::family_of`) that routing, the edge's refusals and the emulator
/// share: a refused path under `/v1/chat/` answers in OpenAI's format even with
/// `anthropic-version`, and `GET /v1/messages/batches` (Anthropic's Message Batches API)
/// goes to the Anthropic family even with only a bearer token.
#[tokio::test]
async fn answers_speak_the_family_the_path_names_before_the_headers() {
    const KEY_ENV: &str = "CACHET_IT_PATH_FAMILY_KEY";
    std::env::set_var(KEY_ENV, "ck-path-family-0123456789");
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let mut config = test_config(&upstream.url());
    config
        .server
        .client_keys
        .push(cachet::config::ClientKeyConfig {
            name: "team".into(),
            key_env: KEY_ENV.into(),
        });
    let proxy = start_proxy(config).await;
    let emulator = start_emulator().await;
    let anthropic_headers = "anthropic-version: 2023-06-01\r\n";
    let openai_headers = "authorization: Bearer sk-dummy\r\n";
    // (method and path, headers that name the other family, the path's family is Anthropic)
    let cases = [
        (
            "POST /v1/chat/completions/%2e%2e/admin",
            anthropic_headers,
            false,
        ),
        ("POST /v1/responses/%2e%2e/admin", anthropic_headers, false),
        ("POST /v1/messages/%2e%2e/admin", openai_headers, true),
        ("GET /v1/messages/batches", openai_headers, true),
        (
            "GET /v1/chat/completions/chatcmpl-1",
            anthropic_headers,
            false,
        ),
        ("GET /v1/responses/resp_1", anthropic_headers, false),
    ];
    for (request, headers, anthropic) in cases {
        let raw = format!(
            "{request} HTTP/1.1\r\nhost: x\r\n{headers}content-length: 0\r\nconnection: close\r\n\r\n"
        );
        // The proxy refuses the path, or the request (no cachet client key) before forwarding it.
        let answer = raw_exchange(proxy.addr, &raw).await;
        assert!(answer.starts_with("HTTP/1.1 4"), "{request}: {answer}");
        assert_eq!(
            anthropic_error_shape(&answer, request),
            anthropic,
            "{request}"
        );
        if request.contains("%2e") {
            let answer = raw_exchange(emulator.addr, &raw).await;
            assert!(
                answer.starts_with("HTTP/1.1 4"),
                "emulator {request}: {answer}"
            );
            assert_eq!(
                anthropic_error_shape(&answer, request),
                anthropic,
                "emulator {request}"
            );
        }
    }
    assert!(upstream.requests().is_empty(), "nothing is forwarded");
    proxy.shutdown().await;
}

/// Where the path names no family, every answer cachet gives itself speaks the family the
/// request's headers name (`providers::family_named_by`): a client that sends only
/// `x-api-key` (Anthropic's key header) to a path outside `/v1/`, or to one the edge
/// refuses, gets an Anthropic error, as it would at `/v1/models`.
#[tokio::test]
async fn answers_outside_v1_speak_the_family_the_headers_name() {
    let upstream = FakeUpstream::start(Script::json(200, "{}")).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let cases = [
        ("x-api-key: sk-ant-dummy\r\n", true),
        ("anthropic-version: 2023-06-01\r\n", true),
        ("authorization: Bearer sk-dummy\r\n", false),
        ("", false),
    ];
    for (headers, anthropic) in cases {
        // Outside `/v1/` (a base URL without it), and a path the edge refuses, sent as is.
        for path in ["/messages", "/v1/%2e%2e/admin"] {
            let answer = raw_exchange(
                proxy.addr,
                &format!(
                    "POST {path} HTTP/1.1\r\nhost: x\r\n{headers}content-length: 2\r\nconnection: close\r\n\r\n{{}}"
                ),
            )
            .await;
            assert!(
                answer.starts_with("HTTP/1.1 4"),
                "{path} {headers}: {answer}"
            );
            let what = format!("{path} {headers}");
            assert_eq!(anthropic_error_shape(&answer, &what), anthropic, "{what}");
        }
    }
    proxy.shutdown().await;
}
