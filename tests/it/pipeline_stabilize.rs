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

fn shipped() -> std::path::PathBuf {
    format!(
        "{}/policies/stabilize-volatile.toml",
        env!("CARGO_MANIFEST_DIR")
    )
    .into()
}

/// Requests of one session through a proxy with `policies` in front of a fake upstream;
/// the bodies the upstream received.
async fn sent_upstream(
    policies: Vec<std::path::PathBuf>,
    store: &std::path::Path,
    bodies: &[Value],
) -> Vec<Value> {
    let upstream = FakeUpstream::start(Script::json(200, r#"{"content":[],"usage":{}}"#)).await;
    let proxy = start_proxy(policy_config(&upstream.url(), policies, store)).await;
    for body in bodies {
        let (status, answer) = post_anthropic(&proxy, "held", body).await;
        assert_eq!(status, 200, "{answer}");
    }
    proxy.shutdown().await;
    upstream
        .requests()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect()
}

/// A request of the session at second `second`, after `turns` earlier exchanges, its
/// system block marked for an hour.
fn request(second: usize, turns: usize) -> Value {
    let mut messages = Vec::new();
    for i in 0..=turns {
        if i > 0 {
            messages.push(json!({"role": "assistant", "content": format!("done {i}")}));
        }
        messages.push(json!({"role": "user", "content": format!("step {i}")}));
    }
    json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "system": [{"type": "text", "text": system(second), "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "messages": messages})
}

/// The first request goes as the client sent it, byte for byte; the next one, whose time
/// line changed, keeps the first one's system block (marker and all) and tells the new
/// time in a message after the conversation.
#[tokio::test]
async fn the_first_request_goes_as_sent_and_a_changed_line_keeps_the_held_one() {
    let dir = tempfile::tempdir().unwrap();
    let bodies = [request(3, 0), request(9, 1)];
    let sent = sent_upstream(vec![shipped()], &dir.path().join("store"), &bodies).await;
    assert_eq!(
        sent[0], bodies[0],
        "nothing held yet: the request goes as sent"
    );
    assert_eq!(
        sent[1]["system"], bodies[0]["system"],
        "the held time line stays"
    );
    let messages = sent[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "the history and one tail message");
    assert_eq!(
        messages[3]["content"],
        json!("Current date and time: 2026-11-22 00:17:09")
    );
}

/// What the prefix holds is in the session log: a proxy started again on the same store
/// goes on holding it. A hold is not a patch to replay: without the policy, the client's
/// system prompt goes as sent.
#[tokio::test]
async fn a_restart_keeps_what_is_held_and_no_policy_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    sent_upstream(vec![shipped()], &store, &[request(3, 0)]).await;
    let again = sent_upstream(vec![shipped()], &store, &[request(30, 1)]).await;
    assert_eq!(again[0]["system"], request(3, 0)["system"]);
    let auto = format!(
        "{}/policies/anthropic-auto-breakpoints.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let without = sent_upstream(vec![auto.into()], &store, &[request(50, 2)]).await;
    assert_eq!(
        without[0]["system"][0]["text"],
        json!(system(50)),
        "the held line is not replayed as a patch"
    );
}
