//! Persisted patches survive a SIGKILL of cachet, and several instances on one Redis serve
//! one session interchangeably.

use std::process::Child;

use crate::support::redis::RedisServer;
use crate::support::*;
use serde_json::{json, Value};

const REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#;

/// One persisted system part per request: `mark-<session>-<request index>`.
const POLICY: &str = r#"
name = "marks"
[[context]]
reason = "before_request"
patch = [{ op = "system_part_set", partName = "mark{{request_index}}", text = " mark-{{session}}-{{request_index}}", invalidateCacheReason = "test mark" }]
"#;

fn serve(upstream: &str, policy: &std::path::Path, store: &str) -> (Child, String) {
    let p = serve_process(|cmd| {
        cmd.args([
            "--anthropic-upstream",
            upstream,
            "--store",
            store,
            "--policy",
        ])
        .arg(policy)
        .env("RUST_LOG", "warn");
    });
    (p.child, p.addr)
}

fn body(text: &str) -> String {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "system": "base.", "messages": [{"role": "user", "content": text}]}).to_string()
}

fn system_of(received: &Received) -> String {
    let v: Value = serde_json::from_slice(&received.body).unwrap();
    v["system"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn patches_whose_request_reached_the_upstream_survive_sigkill() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path(), "marks", POLICY);
    let store = dir.path().join("store").to_string_lossy().into_owned();
    let (mut child, addr) = serve(&upstream.url(), &policy, &store);

    // A burst of first requests from 200 sessions; cachet is killed while it is under way.
    let c = client();
    let burst: Vec<_> = (0..200)
        .map(|i| {
            let (c, addr) = (c.clone(), addr.clone());
            tokio::spawn(async move {
                let _ = c
                    .post(format!("http://{addr}/v1/messages"))
                    .header("x-api-key", "k")
                    .header("x-cachet-session", format!("s{i}"))
                    .body(body("hello"))
                    .send()
                    .await;
            })
        })
        .collect();
    while upstream.requests().len() < 40 {
        tokio::task::yield_now().await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    for task in burst {
        let _ = task.await;
    }
    let reached: Vec<String> = upstream
        .requests()
        .iter()
        .map(system_of)
        .filter_map(|s| {
            s.split("mark-")
                .nth(1)
                .map(|m| m.trim_end_matches("-0").to_string())
        })
        .collect();
    assert!(
        reached.len() >= 40,
        "{} requests reached the upstream",
        reached.len()
    );

    // After a restart on the same store, each of those sessions replays its patch.
    let before = upstream.requests().len();
    let (mut child, addr) = serve(&upstream.url(), &policy, &store);
    for session in &reached {
        let r = c
            .post(format!("http://{addr}/v1/messages"))
            .header("x-api-key", "k")
            .header("x-cachet-session", session)
            .body(body("hello"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let after = upstream.requests();
    for (session, received) in reached.iter().zip(&after[before..]) {
        let system = system_of(received);
        assert!(
            system.contains(&format!("mark-{session}-0")),
            "{session}: the patch from before the crash replays: {system}"
        );
        assert!(
            system.contains(&format!("mark-{session}-1")),
            "{session}: the new request counts on from the store"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn two_instances_on_one_redis_serve_a_session_interchangeably() {
    let redis = RedisServer::start();
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path(), "marks", POLICY);
    let on_redis = || {
        let mut config = policy_config(&upstream.url(), vec![policy.clone()], dir.path());
        config.sessions.store = redis.url();
        config
    };
    let a = start_proxy(on_redis()).await;
    let b = start_proxy(on_redis()).await;

    let mut history = vec![json!({"role": "user", "content": "q0"})];
    for i in 0..6 {
        let proxy = if i % 2 == 0 { &a } else { &b };
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "system": "base.", "messages": history});
        assert_eq!(post_anthropic(proxy, "shared", &body).await.0, 200);
        history.push(
            json!({"role": "assistant", "content": [{"type": "text", "text": format!("a{i}")}]}),
        );
        history.push(json!({"role": "user", "content": format!("q{}", i + 1)}));
    }
    let systems: Vec<String> = upstream.requests().iter().map(system_of).collect();
    for (i, system) in systems.iter().enumerate() {
        let expected: String = std::iter::once("base.".to_string())
            .chain((0..=i).map(|k| format!(" mark-shared-{k}")))
            .collect();
        assert_eq!(
            system,
            &expected,
            "request {i} (instance {}) replays every earlier patch, whichever instance made it",
            if i % 2 == 0 { "a" } else { "b" }
        );
    }
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn store_down_fails_open_or_closed_and_recovers() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path(), "marks", POLICY);
    let config = |mode| {
        let mut c = policy_config(&upstream.url(), vec![policy.clone()], dir.path());
        c.sessions.store = format!("redis://127.0.0.1:{port}/0");
        c.sessions.on_store_error = mode;
        c
    };
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 5, "system": "base.", "messages": [{"role": "user", "content": "q"}]});

    let open = start_proxy(config(cachet::session::StoreFailure::FailOpen)).await;
    assert_eq!(
        post_anthropic(&open, "s", &body).await.0,
        200,
        "fail-open forwards without replay"
    );
    assert!(metric_sum(&metrics_text(&open).await, "cachet_store_errors_total", &[]) >= 1.0);

    let closed = start_proxy(config(cachet::session::StoreFailure::FailClosed)).await;
    let (status, answer) = post_anthropic(&closed, "s", &body).await;
    assert_eq!(status, 503);
    assert_eq!(answer["type"], "error");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("session store unavailable"),
        "{answer}"
    );
    assert!(
        !answer.to_string().contains(&port.to_string()),
        "no store address in client errors"
    );

    // The store comes up: the same instance recovers.
    let _redis = RedisServer::start_on(port);
    assert_eq!(post_anthropic(&closed, "s", &body).await.0, 200);
    open.shutdown().await;
    closed.shutdown().await;
}
