//! The Responses API's WebSocket mode through cachet, with a real WebSocket client
//! (tokio-tungstenite) against cachet and the emulator: Codex's handshake (`GET
//! /v1/responses`, `upgrade: websocket`, `OpenAI-Beta: responses_websockets=2026-02-06`,
//! codex-rs `responses_websocket.rs`), a `response.create` message per turn chaining
//! `previous_response_id`, and the answer's events one text message each (OpenAI's
//! "WebSocket mode" guide). Each turn is an exchange: counted, in the session log, tapped
//! for usage. The faults end the socket with a close code, counted.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::support::*;

type Ws = WebSocketStream<TcpStream>;

const BETA: &str = "responses_websockets=2026-02-06";

/// Open a socket to `addr`'s `/v1/responses` as Codex does, with `extra` headers.
async fn connect(
    addr: std::net::SocketAddr,
    extra: &[(&str, &str)],
) -> Result<(Ws, http::Response<Option<Vec<u8>>>), tokio_tungstenite::tungstenite::Error> {
    let mut request = format!("ws://{addr}/v1/responses")
        .into_client_request()
        .unwrap();
    let headers = request.headers_mut();
    headers.insert("openai-beta", BETA.parse().unwrap());
    headers.insert("authorization", "Bearer sk-test".parse().unwrap());
    for (name, value) in extra {
        headers.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
    }
    let tcp = TcpStream::connect(addr).await.unwrap();
    tokio_tungstenite::client_async(request, tcp).await
}

/// Codex's instructions are long: the prompt reaches the cache minimum on turn 1.
fn instructions() -> String {
    "You are a coding agent running in the Codex CLI. Follow the repository's conventions. "
        .repeat(80)
}

/// Codex's first turn over the socket (codex-rs `ResponseCreateWsRequest`: the Responses
/// body without `stream`, `type` first).
fn turn_one() -> Value {
    json!({"type": "response.create", "model": "gpt-5.1-codex", "instructions": instructions(),
        "input": [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "List the files in src."}]}],
        "tools": [{"type": "function", "name": "shell", "description": "Run a command",
                   "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}],
        "tool_choice": "auto", "parallel_tool_calls": false, "store": false,
        "prompt_cache_key": "019a-codex-ws-session", "include": []})
}

/// The next turn: only what follows the previous answer, chained by its id.
fn turn_two(previous: &str) -> Value {
    let mut body = turn_one();
    body["previous_response_id"] = json!(previous);
    body["input"] = json!([{"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Now read README.md."}]}]);
    body
}

/// The text messages answering one `response.create`, up to its terminal event.
async fn answer(ws: &mut Ws, request: &Value) -> Vec<Value> {
    ws.send(Message::Text(request.to_string().into()))
        .await
        .unwrap();
    let mut events = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("an event in time")
            .expect("the socket open")
            .unwrap();
        let Message::Text(text) = message else {
            continue;
        };
        let event: Value = serde_json::from_str(&text).unwrap();
        let kind = event["type"].as_str().unwrap().to_string();
        events.push(event);
        if matches!(
            kind.as_str(),
            "response.completed" | "response.failed" | "error"
        ) {
            return events;
        }
    }
}

fn completed(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .map(|e| &e["response"])
        .unwrap_or_else(|| panic!("no response.completed in {events:?}"))
}

/// The close frame the socket ends with (`None`: it ended without one).
async fn close_code(ws: &mut Ws) -> Option<CloseCode> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("the socket ends in time")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => return None,
        }
    }
}

async fn proxy_to(emulator: &cachet::emulator::EmulatorHandle) -> cachet::server::ProxyHandle {
    start_proxy(test_config(&emulator.url())).await
}

/// `/metrics` once `ready` holds of it (a socket's end is counted after its close frame
/// went out), or after two seconds, for the assertions to say what it holds.
async fn metrics_when(proxy: &cachet::server::ProxyHandle, ready: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        text = metrics_text(proxy).await;
        if ready(&text) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    text
}

/// Two Codex turns over one socket through cachet: the second reads the first's prefix
/// from the cache, each is one request in `/metrics` and in the session log, and the
/// tokens counted are those the events reported. The messages are the ones a direct socket
/// to a fresh emulator gets (ids and times aside, which a fresh emulator gives alike).
#[tokio::test]
async fn codex_turns_over_a_websocket_read_the_cache_and_are_exchanges() {
    let emulator = start_emulator().await;
    let traces = tempfile::tempdir().unwrap();
    let mut config = test_config(&emulator.url());
    config.record.dir = Some(traces.path().to_path_buf());
    let proxy = start_proxy(config).await;
    let (mut ws, handshake) = connect(proxy.addr, &[("session_id", "019a-codex-ws-session")])
        .await
        .unwrap();
    assert_eq!(handshake.status(), 101);
    let first = answer(&mut ws, &turn_one()).await;
    let id = completed(&first)["id"].as_str().unwrap().to_string();
    let second = answer(&mut ws, &turn_two(&id)).await;
    let usage = |events: &[Value]| completed(events)["usage"].clone();
    let (u1, u2) = (usage(&first), usage(&second));
    assert!(
        u2["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "turn 2 reads turn 1's prefix from the cache: {u2}"
    );
    assert!(
        u2["input_tokens"].as_u64() > u1["input_tokens"].as_u64(),
        "turn 2 continues turn 1"
    );
    ws.close(None).await.unwrap();

    // The same turns on a direct socket to a fresh emulator.
    let direct_emulator = start_emulator().await;
    let (mut direct, _) = connect(direct_emulator.addr, &[]).await.unwrap();
    let direct_first = answer(&mut direct, &turn_one()).await;
    let direct_second = answer(&mut direct, &turn_two(&id)).await;
    let shape = |events: &[Value]| -> Vec<Value> {
        events
            .iter()
            .map(|e| {
                let mut e = e.clone();
                if let Some(r) = e.get_mut("response") {
                    r["created_at"] = Value::Null;
                    r["completed_at"] = Value::Null;
                }
                e
            })
            .collect()
    };
    assert_eq!(
        shape(&first),
        shape(&direct_first),
        "turn 1 as a direct socket gets it"
    );
    assert_eq!(
        shape(&second),
        shape(&direct_second),
        "turn 2 as a direct socket gets it"
    );

    let log = wait_for_requests(&proxy, "019a-codex-ws-session", 2).await;
    assert_eq!(request_entries(&log).len(), 2, "{log}");
    let text = metrics_text(&proxy).await;
    let responses = [("provider", "openai"), ("endpoint", "responses")];
    assert_eq!(metric_sum(&text, "cachet_requests_total", &responses), 2.0);
    let input: u64 = [&u1, &u2]
        .iter()
        .map(|u| {
            u["input_tokens"].as_u64().unwrap()
                - u["input_tokens_details"]["cached_tokens"].as_u64().unwrap()
        })
        .sum();
    let uncached = [("provider", "openai"), ("kind", "uncached")];
    let counted = metric_sum(&text, "cachet_input_tokens_total", &uncached);
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tokens_total"))
        .collect();
    assert_eq!(counted as u64, input, "{lines:#?}");
    let read: u64 = [&u1, &u2]
        .iter()
        .map(|u| u["input_tokens_details"]["cached_tokens"].as_u64().unwrap())
        .sum();
    let cache_read = [("provider", "openai"), ("kind", "cache_read")];
    let counted = metric_sum(&text, "cachet_input_tokens_total", &cache_read);
    assert_eq!(counted as u64, read, "{lines:#?}");
    assert_eq!(
        metric_value(
            &text,
            "cachet_websocket_events_total",
            &[("event", "opened")]
        ),
        Some(1.0)
    );
    proxy.shutdown().await;
    // `--record` keeps each turn as the message the client sent.
    let records = cachet::trace::read_traces(&[traces.path().to_path_buf()]).unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    for (record, sent) in records.iter().zip([turn_one(), turn_two(&id)]) {
        assert_eq!(record.endpoint, "responses");
        assert_eq!(record.session, "019a-codex-ws-session");
        assert_eq!(record.body, sent);
    }
}

/// Codex's warmup as each socket opens (codex-rs `prepare_websocket_prewarm_request`:
/// `generate: false`, empty `input`; Codex 0.171 sends it without instructions or tools),
/// which "does not return a model output, but prepares request state so the next
/// generated turn can start faster" (OpenAI's WebSocket mode guide).
fn warmup() -> Value {
    json!({"type": "response.create", "model": "gpt-5.1-codex", "input": [],
        "tool_choice": "auto", "parallel_tool_calls": false, "store": false,
        "prompt_cache_key": "019a-codex-warm-session", "include": [], "generate": false})
}

/// Codex runs `codex exec` then `codex exec resume --last`: a socket each, a warmup first
/// on each, then the turn with the whole history (the second chained to its warmup, as
/// newer Codex does). The warmups answer with no output, are recorded as warmups on the
/// lane last active and at the turn they prepare, and are compared with nothing: the two
/// turns are one lane, turns 0 and 1, without a break.
#[tokio::test]
async fn codex_warmups_prepare_turns_and_are_not_turns() {
    let emulator = start_emulator().await;
    let proxy = proxy_to(&emulator).await;
    let session = [("session_id", "019a-codex-warm-session")];
    let mut one = turn_one();
    one["prompt_cache_key"] = json!("019a-codex-warm-session");

    let (mut ws, _) = connect(proxy.addr, &session).await.unwrap();
    let warm = answer(&mut ws, &warmup()).await;
    let warm_response = completed(&warm);
    assert_eq!(warm_response["output"], json!([]), "a warmup has no output");
    assert_eq!(warm_response["usage"]["output_tokens"], 0);
    assert!(
        !warm
            .iter()
            .any(|e| e["type"] == "response.output_item.added"),
        "{warm:?}"
    );
    let first = answer(&mut ws, &one).await;
    let output = completed(&first)["output"].clone();
    ws.close(None).await.unwrap();

    let (mut ws, _) = connect(proxy.addr, &session).await.unwrap();
    let warm = answer(&mut ws, &warmup()).await;
    let warm_id = completed(&warm)["id"].as_str().unwrap().to_string();
    let mut two = one.clone();
    let mut input = one["input"].as_array().unwrap().clone();
    input.extend(output.as_array().unwrap().iter().cloned());
    input.push(json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Now read README.md."}]}));
    two["input"] = json!(input);
    two["previous_response_id"] = json!(warm_id);
    let second = answer(&mut ws, &two).await;
    let read = completed(&second)["usage"]["input_tokens_details"]["cached_tokens"].clone();
    assert!(read.as_u64().unwrap() > 0, "turn 2 reads turn 1: {read}");
    ws.close(None).await.unwrap();

    let log = wait_for_requests(&proxy, "019a-codex-warm-session", 4).await;
    let entries = request_entries(&log);
    let warmups: Vec<bool> = entries.iter().map(|e| e["warmup"] == true).collect();
    assert_eq!(warmups, [true, false, true, false], "{log}");
    let turns: Vec<&Value> = entries.iter().map(|e| &e["turn_index"]).collect();
    assert_eq!(turns, [&json!(0), &json!(0), &json!(1), &json!(1)], "{log}");
    let lanes: Vec<&Value> = entries.iter().map(|e| &e["lane"]).collect();
    assert!(lanes.iter().all(|l| *l == lanes[0]), "one lane: {lanes:?}");
    assert!(
        entries.iter().all(|e| e.get("diagnosis").is_none()),
        "no break, and no warmup diagnosed: {log}"
    );
    let text = metrics_text(&proxy).await;
    assert_eq!(metric_sum(&text, "cachet_prefix_breaks_total", &[]), 0.0);
    let page = client()
        .get(format!(
            "http://{}/sessions/019a-codex-warm-session/timeline",
            proxy.admin_addr
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(page.matches("prepares the next turn").count(), 2, "{page}");
    proxy.shutdown().await;
}

/// With client keys, a handshake without one is refused before anything goes upstream;
/// the key is never forwarded.
#[tokio::test]
async fn a_client_key_is_checked_before_the_upgrade() {
    let emulator = start_emulator().await;
    std::env::set_var("CACHET_TEST_WS_CLIENT_KEY", "ck-ws");
    std::env::set_var("CACHET_TEST_WS_HELD", "sk-held");
    let mut config = test_config(&emulator.url());
    config.server.client_keys = vec![cachet::config::ClientKeyConfig {
        name: "team".into(),
        key_env: "CACHET_TEST_WS_CLIENT_KEY".into(),
    }];
    config.upstream.openai_api_key_env = Some("CACHET_TEST_WS_HELD".into());
    let proxy = start_proxy(config).await;
    let refused = connect(proxy.addr, &[("authorization", "Bearer sk-not-a-key")]).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 401),
        other => panic!("expected a 401, got {other:?}"),
    }
    assert!(emulator.accounted().is_empty());
    let (mut ws, _) = connect(proxy.addr, &[("x-api-key", "ck-ws")])
        .await
        .unwrap();
    let events = answer(&mut ws, &turn_one()).await;
    assert!(
        completed(&events)["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    proxy.shutdown().await;
}

/// An upstream that refuses the upgrade: the client gets a 426 in OpenAI's format, the
/// status Codex falls back to HTTP from at once (codex-rs `stream_responses_websocket`:
/// `StatusCode::UPGRADE_REQUIRED` gives `WebsocketStreamOutcome::FallbackToHttp`), counted.
#[tokio::test]
async fn an_upstream_refusing_the_upgrade_is_a_426_the_client_falls_back_from() {
    let upstream = FakeUpstream::start(Script::json(
        404,
        r#"{"error":{"message":"no such route"}}"#,
    ))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    match connect(proxy.addr, &[]).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            assert_eq!(resp.status(), 426);
            let body: Value = serde_json::from_slice(resp.body().as_deref().unwrap()).unwrap();
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("404") && message.contains("over HTTP"),
                "{message}"
            );
        }
        other => panic!("expected a 426, got {other:?}"),
    }
    assert_eq!(upstream.requests().len(), 1, "the handshake went upstream");
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &text,
            "cachet_websocket_events_total",
            &[("event", "refused")]
        ),
        Some(1.0)
    );
    proxy.shutdown().await;
}

/// A ping is answered through the relay, and a close frame's code reaches the other side.
#[tokio::test]
async fn ping_and_close_cross_with_their_codes() {
    let emulator = start_emulator().await;
    let proxy = proxy_to(&emulator).await;
    let (mut ws, _) = connect(proxy.addr, &[]).await.unwrap();
    ws.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(pong, Message::Pong(b"are you there".to_vec().into()));
    ws.send(Message::Close(Some(
        tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: CloseCode::Library(4000),
            reason: "done".into(),
        },
    )))
    .await
    .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Library(4000)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &text,
            "cachet_websocket_events_total",
            &[("event", "client_closed")]
        ),
        Some(1.0)
    );
    proxy.shutdown().await;
}

/// An upstream that breaks off mid-answer: the client's socket is closed with 1011, and
/// the turn is counted as a stream cut off, not lost.
#[tokio::test]
async fn an_upstream_that_closes_mid_answer_is_logged_and_counted() {
    let emulator = start_emulator().await;
    let proxy = proxy_to(&emulator).await;
    let (mut ws, _) = connect(proxy.addr, &[("x-cachet-emulate-fault", "cut:3")])
        .await
        .unwrap();
    ws.send(Message::Text(turn_one().to_string().into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Error));
    let cut = [("cause", "upstream_cut")];
    let text = metrics_when(&proxy, |text| {
        metric_sum(text, "cachet_stream_errors_total", &cut) > 0.0
    })
    .await;
    assert_eq!(
        metric_sum(
            &text,
            "cachet_stream_errors_total",
            &[("cause", "upstream_cut")]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric_value(
            &text,
            "cachet_websocket_events_total",
            &[("event", "upstream_gone")]
        ),
        Some(1.0)
    );
    let responses = [("provider", "openai"), ("endpoint", "responses")];
    assert_eq!(metric_sum(&text, "cachet_requests_total", &responses), 1.0);
    proxy.shutdown().await;
}

/// A message over `server.max_body_bytes` closes the socket with 1009 (message too big);
/// an idle socket is closed with 1001 after `server.websocket_idle_timeout_secs`.
#[tokio::test]
async fn oversized_messages_and_idle_sockets_are_closed() {
    let emulator = start_emulator().await;
    let mut config = test_config(&emulator.url());
    config.server.max_body_bytes = 64 * 1024;
    config.server.websocket_idle_timeout_secs = 1;
    let proxy = start_proxy(config).await;
    let (mut ws, _) = connect(proxy.addr, &[]).await.unwrap();
    let mut big = turn_one();
    big["instructions"] = json!("x".repeat(100 * 1024));
    ws.send(Message::Text(big.to_string().into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Size));
    let (mut idle, _) = connect(proxy.addr, &[]).await.unwrap();
    assert_eq!(close_code(&mut idle).await, Some(CloseCode::Away));
    let text = metrics_text(&proxy).await;
    for event in ["oversized", "idle_timeout"] {
        assert_eq!(
            metric_value(&text, "cachet_websocket_events_total", &[("event", event)]),
            Some(1.0),
            "{event}"
        );
    }
    assert!(
        emulator.accounted().is_empty(),
        "nothing oversized went upstream"
    );
    proxy.shutdown().await;
}

/// An upstream that goes silent mid-answer for longer than `upstream.idle_timeout_ms`: the
/// client's socket is closed with 1013 (try again), and the turn is finished as a stream
/// that went idle, counted, not lost.
#[tokio::test]
async fn an_upstream_that_stalls_mid_answer_is_closed_and_counted() {
    let emulator = start_emulator().await;
    let mut config = test_config(&emulator.url());
    config.upstream.idle_timeout_ms = 300;
    let proxy = start_proxy(config).await;
    let (mut ws, _) = connect(
        proxy.addr,
        &[("x-cachet-emulate-fault", "slow-events:2000")],
    )
    .await
    .unwrap();
    ws.send(Message::Text(turn_one().to_string().into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Again));
    let text = metrics_when(&proxy, |text| {
        let stalled = [("event", "upstream_stalled")];
        metric_value(text, "cachet_websocket_events_total", &stalled) == Some(1.0)
            && metric_sum(text, "cachet_requests_total", &[("endpoint", "responses")]) == 1.0
    })
    .await;
    assert_eq!(
        metric_value(
            &text,
            "cachet_websocket_events_total",
            &[("event", "upstream_stalled")]
        ),
        Some(1.0),
        "{text}"
    );
    let requests = [("endpoint", "responses")];
    assert_eq!(metric_sum(&text, "cachet_requests_total", &requests), 1.0);
    proxy.shutdown().await;
}

/// cachet shutting down with a socket open: the client gets 1001 (going away) and the
/// answer in flight is finished, not lost.
#[tokio::test]
async fn shutdown_closes_open_sockets_with_going_away() {
    let emulator = start_emulator().await;
    let proxy = proxy_to(&emulator).await;
    let (mut ws, _) = connect(proxy.addr, &[("x-cachet-emulate-fault", "slow-events:500")])
        .await
        .unwrap();
    ws.send(Message::Text(turn_one().to_string().into()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closed = tokio::spawn(async move { close_code(&mut ws).await });
    proxy.shutdown().await;
    assert_eq!(closed.await.unwrap(), Some(CloseCode::Away));
}

/// Two conversations on one socket, told apart by `stream_id` (the API answers each lane
/// FIFO and echoes it on its events), each continued by `previous_response_id` with only
/// its new input: each is a session of its own whose turns are read whole, turn 0 then
/// turn 1 on one lane, without a break.
#[tokio::test]
async fn two_conversations_on_one_socket_are_told_apart() {
    let emulator = start_emulator().await;
    let proxy = proxy_to(&emulator).await;
    let (mut ws, _) = connect(proxy.addr, &[]).await.unwrap();
    let first = |key: &str| {
        let mut body = turn_one();
        body["prompt_cache_key"] = json!(key);
        body["stream_id"] = json!(key);
        body
    };
    let a1 = answer(&mut ws, &first("conv-a")).await;
    let b1 = answer(&mut ws, &first("conv-b")).await;
    assert!(a1.iter().all(|e| e["stream_id"] == "conv-a"), "{a1:?}");
    let next = |key: &str, events: &[Value]| {
        let mut body = turn_two(completed(events)["id"].as_str().unwrap());
        body["prompt_cache_key"] = json!(key);
        body["stream_id"] = json!(key);
        body
    };
    let b2 = answer(&mut ws, &next("conv-b", &b1)).await;
    let a2 = answer(&mut ws, &next("conv-a", &a1)).await;
    for turn in [&a2, &b2] {
        let read = &completed(turn)["usage"]["input_tokens_details"]["cached_tokens"];
        assert!(read.as_u64().unwrap() > 0, "{read}");
    }
    ws.close(None).await.unwrap();
    for session in ["conv-a", "conv-b"] {
        let log = wait_for_requests(&proxy, session, 2).await;
        let entries = request_entries(&log);
        assert_eq!(entries.len(), 2, "{log}");
        let turns: Vec<&Value> = entries.iter().map(|e| &e["turn_index"]).collect();
        assert_eq!(turns, [&json!(0), &json!(1)], "{log}");
        assert_eq!(entries[0]["lane"], entries[1]["lane"], "{log}");
        assert!(
            entries.iter().all(|e| e.get("diagnosis").is_none()),
            "{log}"
        );
        // The second turn is read whole: its prompt, turn 1's answer, its new prompt.
        assert_eq!(entries[1]["sent"]["count"], 3, "{log}");
    }
    let text = metrics_text(&proxy).await;
    assert_eq!(metric_sum(&text, "cachet_prefix_breaks_total", &[]), 0.0);
    proxy.shutdown().await;
}

/// An upstream that answers the upgrade, then sends a frame no WebSocket may send (a
/// reserved opcode): the client's socket is closed with 1002 (protocol error), the turn in
/// flight is finished as cut off, and the socket's end is counted as `bad_frame`.
#[tokio::test]
async fn garbage_frames_from_the_upstream_close_the_socket_with_a_protocol_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = tcp.read(&mut buf).await.unwrap();
            head.extend_from_slice(&buf[..n]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let key = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("sec-websocket-key")
                    .then(|| value.trim().to_string())
            })
            .unwrap();
        let switching = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\nsec-websocket-accept: {}\r\n\r\n",
            tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes())
        );
        tcp.write_all(switching.as_bytes()).await.unwrap();
        // The client's first message, then a frame with the reserved opcode 0xB.
        let _ = tcp.read(&mut buf).await.unwrap();
        tcp.write_all(&[0x8B, 0x00]).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let proxy = start_proxy(test_config(&format!("http://{upstream}"))).await;
    let (mut ws, _) = connect(proxy.addr, &[]).await.unwrap();
    ws.send(Message::Text(turn_one().to_string().into()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, Some(CloseCode::Protocol));
    let text = metrics_when(&proxy, |text| {
        metric_sum(text, "cachet_requests_total", &[("endpoint", "responses")]) == 1.0
    })
    .await;
    assert_eq!(
        metric_value(
            &text,
            "cachet_websocket_events_total",
            &[("event", "bad_frame")]
        ),
        Some(1.0),
        "{text}"
    );
    let requests = [("endpoint", "responses")];
    assert_eq!(metric_sum(&text, "cachet_requests_total", &requests), 1.0);
    proxy.shutdown().await;
}
