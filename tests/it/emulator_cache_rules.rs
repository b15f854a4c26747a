//! Probes of the emulator's cache rules over HTTP, each against the documented rule it
//! models (the source is cited on each test).

use std::process::Command;

use cachet::emulator::{spawn, EmulatorHandle, EmulatorOptions};
use serde_json::{json, Value};

async fn start() -> EmulatorHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn(listener, EmulatorOptions::default()).await.unwrap()
}

async fn post_with(
    emu: &EmulatorHandle,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", emu.url()))
        .header("anthropic-version", "2023-06-01")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post(emu: &EmulatorHandle, path: &str, body: &Value) -> (u16, Value) {
    post_with(emu, path, body, &[]).await
}

/// A megabyte of one character used to overflow the tokenizer's stack; the emulator then
/// answered 500 to every later request (issue 11). It must answer, and keep answering.
#[tokio::test]
async fn a_megabyte_of_one_character_is_answered_and_the_emulator_stays_up() {
    let emu = start().await;
    let long = "a".repeat(1 << 20);
    let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
        "messages": [{"role": "user", "content": long}]});
    let (status, body) = post(&emu, "/v1/messages", &anthropic).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["usage"]["input_tokens"].as_u64().unwrap() > 1000);
    let chat =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "!".repeat(1 << 20)}]});
    let (status, body) = post(&emu, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{body}");
    let small = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post(&emu, "/v1/chat/completions", &small).await.0, 200);
    emu.shutdown().await;
}

/// `cachet replay` on a trace holding such a request finishes (it used to exit 101).
#[test]
fn replay_of_a_megabyte_of_one_character_does_not_crash() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("long.jsonl");
    let record = json!({"v": 1, "time": "2026-01-15T09:00:00Z", "session": "s",
        "provider": "anthropic", "endpoint": "messages", "path": "/v1/messages",
        "body": {"model": "claude-sonnet-4-5", "max_tokens": 8,
            "messages": [{"role": "user", "content": " ".repeat(1 << 20)}]},
        "usage": null, "status": 200});
    std::fs::write(&trace, format!("{record}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["replay", trace.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["arms"][0]["requests"], 1);
}
