//! The emulator over HTTP: event sequences, usage, faults and the clock endpoint.

use cachet::emulator::{spawn, EmulatorHandle, EmulatorOptions};
use serde_json::{json, Value};

async fn start() -> EmulatorHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn(listener, EmulatorOptions::default()).await.unwrap()
}

/// A Messages request of about 3000 tokens with a marker on the last block.
fn cached_messages(stream: bool) -> Value {
    json!({
        "model": "claude-sonnet-4-5", "max_tokens": 64, "stream": stream,
        "system": [{"type": "text", "text": "You are a careful assistant. ".repeat(500),
                    "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is up?",
                      "cache_control": {"type": "ephemeral"}}]}]
    })
}

async fn post(
    emu: &EmulatorHandle,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", emu.url()))
        .header("anthropic-version", "2023-06-01")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// (event name, data) pairs of an SSE body.
fn events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|frame| {
            let mut name = String::new();
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = d.to_string();
                }
            }
            (name, data)
        })
        .collect()
}

#[tokio::test]
async fn messages_repeat_reads_what_the_first_call_wrote() {
    let emu = start().await;
    let first = post(&emu, "/v1/messages", &cached_messages(false), &[]).await;
    assert!(first.headers().get("request-id").is_some());
    let first: Value = first.json().await.unwrap();
    let written = first["usage"]["cache_creation_input_tokens"]
        .as_u64()
        .unwrap();
    assert!(written > 1024, "{first}");
    assert_eq!(first["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(
        first["usage"]["cache_creation"]["ephemeral_5m_input_tokens"],
        written
    );
    let second: Value = post(&emu, "/v1/messages", &cached_messages(false), &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(second["usage"]["cache_read_input_tokens"], written);
    assert_eq!(second["usage"]["cache_creation_input_tokens"], 0);
    assert_eq!(second["content"][0]["type"], "text");
    assert_eq!(second["stop_reason"], "end_turn");
    let counted: Value = post(
        &emu,
        "/v1/messages/count_tokens",
        &cached_messages(false),
        &[],
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(counted["input_tokens"], written);
    emu.shutdown().await;
}

#[tokio::test]
async fn messages_stream_has_the_api_event_sequence() {
    let emu = start().await;
    post(&emu, "/v1/messages", &cached_messages(false), &[]).await;
    let resp = post(&emu, "/v1/messages", &cached_messages(true), &[]).await;
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let evs = events(&resp.text().await.unwrap());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert!(names[3..names.len() - 3]
        .iter()
        .all(|n| *n == "content_block_delta"));
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let start: Value = serde_json::from_str(&evs[0].1).unwrap();
    assert!(
        start["message"]["usage"]["cache_read_input_tokens"]
            .as_u64()
            .unwrap()
            > 1024
    );
    let delta: Value = serde_json::from_str(&evs[evs.len() - 2].1).unwrap();
    assert_eq!(
        delta["usage"]["cache_read_input_tokens"],
        start["message"]["usage"]["cache_read_input_tokens"]
    );
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 1);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_tool_call_is_streamed_as_input_json_deltas() {
    let emu = start().await;
    let mut req = cached_messages(true);
    req["tools"] = json!([{"name": "grep", "input_schema": {"type": "object",
        "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}]);
    let text = post(
        &emu,
        "/v1/messages",
        &req,
        &[("x-cachet-emulate-reply", "tool")],
    )
    .await
    .text()
    .await
    .unwrap();
    let evs = events(&text);
    let partial: String = evs
        .iter()
        .filter(|(n, _)| n == "content_block_delta")
        .map(|(_, d)| {
            serde_json::from_str::<Value>(d).unwrap()["delta"]["partial_json"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        json!({"pattern": "example pattern"})
    );
    assert!(text.contains("\"stop_reason\":\"tool_use\""));
    emu.shutdown().await;
}

#[tokio::test]
async fn chat_stream_with_include_usage_ends_with_a_usage_chunk_and_done() {
    let emu = start().await;
    let req = json!({"model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "context ".repeat(1500)}, {"role": "user", "content": "hi"}]});
    post(&emu, "/v1/chat/completions", &req, &[])
        .await
        .text()
        .await
        .unwrap();
    let resp = post(&emu, "/v1/chat/completions", &req, &[]).await;
    assert!(resp.headers().get("x-request-id").is_some());
    let evs = events(&resp.text().await.unwrap());
    assert_eq!(evs.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = evs[..evs.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    let (usage_chunk, rest) = chunks.split_last().unwrap();
    assert!(rest
        .iter()
        .all(|c| c["usage"].is_null() && c["object"] == "chat.completion.chunk"));
    assert_eq!(rest.last().unwrap()["choices"][0]["finish_reason"], "stop");
    assert_eq!(usage_chunk["choices"], json!([]));
    let cached = usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached >= 1024 && cached % 128 == 0, "{usage_chunk}");
    emu.shutdown().await;
}

#[tokio::test]
async fn responses_stream_numbers_events_and_completes_with_usage() {
    let emu = start().await;
    let req = json!({"model": "gpt-5", "stream": true, "input": "hello"});
    let evs = events(
        &post(&emu, "/v1/responses", &req, &[])
            .await
            .text()
            .await
            .unwrap(),
    );
    for (i, (name, data)) in evs.iter().enumerate() {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["sequence_number"], i);
        assert_eq!(&v["type"], name.as_str());
    }
    assert_eq!(evs[0].0, "response.created");
    let last: Value = serde_json::from_str(&evs.last().unwrap().1).unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(
        last["response"]["usage"]["input_tokens_details"]["cached_tokens"],
        0
    );
    emu.shutdown().await;
}

#[tokio::test]
async fn faults_answer_in_the_provider_error_shape() {
    let emu = start().await;
    let r = post(
        &emu,
        "/v1/messages",
        &cached_messages(false),
        &[("x-cachet-emulate-fault", "429")],
    )
    .await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert!(body["request_id"].is_string());
    let r = post(
        &emu,
        "/v1/messages",
        &cached_messages(false),
        &[("x-cachet-emulate-fault", "529")],
    )
    .await;
    assert_eq!(r.status(), 529);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "overloaded_error"
    );
    let chat = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let r = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", emu.url()))
        .header("x-cachet-emulate-fault", "500")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.json::<Value>().await.unwrap()["error"]["type"],
        "server_error"
    );
    let r = post(
        &emu,
        "/v1/messages",
        &cached_messages(false),
        &[("x-cachet-emulate-fault", "bogus")],
    )
    .await;
    assert_eq!(r.status(), 400);
    // Faulted requests were not accounted: the next one still writes.
    let ok: Value = post(&emu, "/v1/messages", &cached_messages(false), &[])
        .await
        .json()
        .await
        .unwrap();
    assert!(ok["usage"]["cache_creation_input_tokens"].as_u64().unwrap() > 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_cut_stream_stops_after_n_events_without_message_stop() {
    let emu = start().await;
    let headers = [("x-cachet-emulate-fault", "cut:3,slow-events:1")];
    let mut resp = post(&emu, "/v1/messages", &cached_messages(true), &headers).await;
    let mut received = Vec::new();
    let mut failed = false;
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => received.extend_from_slice(&c),
            Ok(None) => break,
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(failed, "the body must end with an error, not cleanly");
    let evs = events(&String::from_utf8_lossy(&received));
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "content_block_start", "ping"]);
    emu.shutdown().await;
}

#[tokio::test]
async fn the_clock_endpoint_expires_entries_without_sleeping() {
    let emu = start().await;
    post(&emu, "/v1/messages", &cached_messages(false), &[]).await;
    let advance = |s: f64| {
        reqwest::Client::new()
            .post(format!("{}/emulator/clock/advance", emu.url()))
            .json(&json!({"seconds": s}))
            .send()
    };
    assert_eq!(advance(299.0).await.unwrap().status(), 200);
    let hit: Value = post(&emu, "/v1/messages", &cached_messages(false), &[])
        .await
        .json()
        .await
        .unwrap();
    assert!(hit["usage"]["cache_read_input_tokens"].as_u64().unwrap() > 0);
    advance(301.0).await.unwrap();
    let miss: Value = post(&emu, "/v1/messages", &cached_messages(false), &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(miss["usage"]["cache_read_input_tokens"], 0);
    // In-process too.
    emu.advance_clock(std::time::Duration::from_secs(400));
    let again: Value = post(&emu, "/v1/messages", &cached_messages(false), &[])
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(again["usage"]["cache_read_input_tokens"], 0);
    assert_eq!(emu.accounted().len(), 4);
    assert_eq!(advance(-1.0).await.unwrap().status(), 400);
    emu.shutdown().await;
}

#[tokio::test]
async fn a_fifth_marker_and_bad_bodies_are_400_invalid_request() {
    let emu = start().await;
    let block = json!({"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}});
    let req = json!({"model": "claude-sonnet-4-5", "max_tokens": 5,
        "messages": [{"role": "user", "content": [block, block, block, block, block]}]});
    let r = post(&emu, "/v1/messages", &req, &[]).await;
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("maximum of 4"));
    let r = reqwest::Client::new()
        .post(format!("{}/v1/messages", emu.url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let models: Value = reqwest::get(format!("{}/v1/models", emu.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    emu.shutdown().await;
}

/// A thinking budget is at least 1024 and below `max_tokens`, unless thinking is
/// interleaved with tools (the beta and tools in the request), where one token of
/// `max_tokens` below the budget is allowed (platform.claude.com, Extended thinking).
#[tokio::test]
async fn a_thinking_budget_above_max_tokens_needs_interleaved_thinking_with_tools() {
    let emu = start().await;
    let request = |budget: u64, max_tokens: u64, tools: bool| {
        let mut req = json!({"model": "claude-sonnet-4-5", "max_tokens": max_tokens,
            "thinking": {"type": "enabled", "budget_tokens": budget},
            "messages": [{"role": "user", "content": "hi"}]});
        if tools {
            req["tools"] = json!([{"name": "read", "input_schema": {"type": "object"}}]);
        }
        req
    };
    let interleaved = [("anthropic-beta", "interleaved-thinking-2025-05-14")];
    let status = |r: reqwest::Response| r.status().as_u16();
    let message = |r: reqwest::Response| async move {
        let body: Value = r.json().await.unwrap();
        body["error"]["message"].as_str().unwrap_or("").to_string()
    };
    assert_eq!(
        status(post(&emu, "/v1/messages", &request(2048, 4096, false), &[]).await),
        200
    );
    let over = post(&emu, "/v1/messages", &request(2048, 1, true), &[]).await;
    assert_eq!(over.status(), 400);
    assert!(message(over)
        .await
        .contains("`max_tokens` must be greater than `thinking.budget_tokens`"));
    let no_tools = post(&emu, "/v1/messages", &request(2048, 1, false), &interleaved).await;
    assert_eq!(status(no_tools), 400);
    let keep_warm = post(&emu, "/v1/messages", &request(2048, 1, true), &interleaved).await;
    assert_eq!(status(keep_warm), 200);
    let small = post(&emu, "/v1/messages", &request(512, 4096, false), &[]).await;
    assert_eq!(small.status(), 400);
    assert!(message(small)
        .await
        .contains("greater than or equal to 1024"));
    emu.shutdown().await;
}

#[tokio::test]
async fn slow_faults_still_deliver_the_whole_answer() {
    let emu = start().await;
    let headers = [("x-cachet-emulate-fault", "slow-first-byte:5,slow-events:1")];
    let text = post(&emu, "/v1/messages", &cached_messages(true), &headers)
        .await
        .text()
        .await
        .unwrap();
    let evs = events(&text);
    assert_eq!(evs.first().unwrap().0, "message_start");
    assert_eq!(evs.last().unwrap().0, "message_stop");
    let chat = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    let r = post(
        &emu,
        "/v1/chat/completions",
        &chat,
        &[("x-cachet-emulate-fault", "slow-first-byte:5")],
    )
    .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    emu.shutdown().await;
}

#[tokio::test]
async fn an_error_event_can_follow_a_200() {
    let emu = start().await;
    let headers = [("x-cachet-emulate-fault", "error-event:2")];
    let resp = post(&emu, "/v1/messages", &cached_messages(true), &headers).await;
    assert_eq!(resp.status(), 200);
    let evs = events(&resp.text().await.unwrap());
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["message_start", "content_block_start", "error"]);
    let err: Value = serde_json::from_str(&evs[2].1).unwrap();
    assert_eq!(err["error"]["type"], "overloaded_error");
    let req = json!({"model": "gpt-5", "stream": true, "input": "hello"});
    let evs = events(
        &post(&emu, "/v1/responses", &req, &headers)
            .await
            .text()
            .await
            .unwrap(),
    );
    let last: Value = serde_json::from_str(&evs.last().unwrap().1).unwrap();
    assert_eq!(
        (
            evs.len(),
            last["type"].as_str(),
            last["sequence_number"].as_u64()
        ),
        (3, Some("error"), Some(2))
    );
    emu.shutdown().await;
}

/// Codex signed in with ChatGPT asks its backend for `/models?client_version=…` and decodes
/// the answer as `{"models": [...]}` (openai/codex, `codex-rs/protocol/src/openai_models.rs`,
/// `ModelsResponse`); the API's `{"object": "list", "data": [...]}` does not decode, and Codex
/// logs "failed to refresh available models" and asks again. An API-key client still gets the
/// API's list.
#[tokio::test]
async fn a_chatgpt_sign_in_gets_the_model_list_in_the_backends_shape() {
    let emu = start().await;
    let list = |headers: &'static [(&'static str, &'static str)]| {
        let mut req =
            reqwest::Client::new().get(format!("{}/v1/models?client_version=0.171.0", emu.url()));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        async move {
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let signed_in = list(&[
        ("authorization", "Bearer eyJ.e30.sig"),
        ("chatgpt-account-id", "acc-1"),
    ])
    .await;
    let models = signed_in["models"].as_array().expect("a `models` array");
    // Empty: the client keeps the models it ships with, its prompts and tools unchanged.
    assert!(models.is_empty(), "{signed_in}");
    assert!(signed_in.get("data").is_none(), "{signed_in}");
    let api = list(&[("authorization", "Bearer sk-test")]).await;
    assert_eq!(api["object"], "list");
    assert!(api["data"].as_array().is_some_and(|d| !d.is_empty()));
    emu.shutdown().await;
}
