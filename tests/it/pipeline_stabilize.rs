//! `stabilize-volatile` turns a session whose system prompt carries a changing timestamp
//! from a cache miss on every request into cache reads (figures from the emulator).

use crate::support::*;
use serde_json::{json, Value};

fn system(second: usize) -> String {
    let rules = "Work in small steps, run the tests, never print secrets. ".repeat(120);
    format!("You are pi, a coding agent.\n{rules}\nCurrent date and time: 2026-11-22 00:17:{second:02}\nCurrent working directory: /work/app\n")
}

/// Four requests of one session, the history growing, the time line changing every time.
async fn run(policies: Vec<std::path::PathBuf>) -> Vec<(u64, u64, u64)> {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(policy_config(
        &emulator.url(),
        policies,
        &dir.path().join("store"),
    ))
    .await;
    let mut history: Vec<Value> = Vec::new();
    let mut usage = Vec::new();
    for i in 0..4 {
        history.push(json!({"role": "user", "content": [{"type": "text", "text": format!("Step {i}: continue with the refactoring of module {i}.")}]}));
        let mut messages = history.clone();
        messages.last_mut().unwrap()["content"][0]["cache_control"] = json!({"type": "ephemeral"});
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
            "system": [{"type": "text", "text": system(i * 7), "cache_control": {"type": "ephemeral"}}],
            "messages": messages});
        let (status, answer) = post_anthropic(&proxy, "pi-session", &body).await;
        assert_eq!(status, 200, "{answer}");
        let u = &answer["usage"];
        usage.push((
            u["cache_read_input_tokens"].as_u64().unwrap(),
            u["cache_creation_input_tokens"].as_u64().unwrap(),
            u["input_tokens"].as_u64().unwrap(),
        ));
        history.push(json!({"role": "assistant", "content": answer["content"].clone()}));
    }
    proxy.shutdown().await;
    emulator.shutdown().await;
    usage
}

#[tokio::test]
async fn stabilize_volatile_turns_misses_into_reads() {
    let without = run(vec![]).await;
    for (i, (read, write, _)) in without.iter().enumerate() {
        assert_eq!(
            *read, 0,
            "request {i} misses: the time line changed ({without:?})"
        );
        assert!(*write > 1024, "and rewrites the whole prefix ({without:?})");
    }
    let policy = format!(
        "{}/policies/stabilize-volatile.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let with = run(vec![policy.into()]).await;
    assert_eq!(with[0].0, 0, "the first request writes");
    for i in 1..4 {
        let (read, write, _) = with[i];
        assert!(
            read >= with[0].1,
            "request {i} reads at least the first request's prefix ({with:?})"
        );
        assert!(write < 100, "and writes only the new turn ({with:?})");
    }
    eprintln!("(cache read, cache write, uncached) per request without the policy: {without:?}; with it: {with:?}");
    let read_without: u64 = without.iter().map(|u| u.0).sum();
    let read_with: u64 = with.iter().map(|u| u.0).sum();
    assert!(
        read_with > 3 * 1500,
        "{read_with} tokens read from cache with the policy, {read_without} without"
    );
}

/// pi and Claude Code mark their system block. Moving the date line out of it must keep
/// that marker: a second conversation with the same system prompt then reads the prompt
/// from cache (it shares nothing else with the first).
#[tokio::test]
async fn a_rewritten_system_block_keeps_the_clients_marker() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let policy = format!(
        "{}/policies/stabilize-volatile.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let proxy = start_proxy(policy_config(
        &emulator.url(),
        vec![policy.into()],
        &dir.path().join("store"),
    ))
    .await;
    let mut reads = Vec::new();
    for (i, task) in ["Fix the flaky retry test.", "Rename the config loader."]
        .iter()
        .enumerate()
    {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
            "system": [{"type": "text", "text": system(i * 20), "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": task}]});
        let (status, answer) = post_anthropic(&proxy, &format!("conversation-{i}"), &body).await;
        assert_eq!(status, 200, "{answer}");
        reads.push(answer["usage"]["cache_read_input_tokens"].as_u64().unwrap());
        emulator.advance_clock(std::time::Duration::from_secs(20));
    }
    assert!(
        reads[1] > 1024,
        "the second conversation reads the shared system prompt: {reads:?}"
    );
    proxy.shutdown().await;
    emulator.shutdown().await;

    // On the wire: the block keeps its marker and every other byte but its text.
    let upstream = FakeUpstream::start(Script::json(200, r#"{"content":[],"usage":{}}"#)).await;
    let policy = format!(
        "{}/policies/stabilize-volatile.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        vec![policy.into()],
        &dir.path().join("store2"),
    ))
    .await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "system": [{"type": "text", "text": system(3), "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": [{"role": "user", "content": "hi"}]});
    post_anthropic(&proxy, "wire", &body).await;
    let sent: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    let block = &sent["system"][0];
    assert_eq!(
        block["cache_control"],
        json!({"type": "ephemeral", "ttl": "1h"}),
        "{block}"
    );
    assert!(!block["text"].as_str().unwrap().contains("Current date"));
    proxy.shutdown().await;
}
