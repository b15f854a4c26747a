//! Nothing lost silently: an embedded store whose file is deleted or replaced under a
//! running cachet is detected, counted (`cachet_store_errors_total`), logged and shown by
//! `GET /readyz`, and later writes fail loudly instead of going to a file that is gone.
//! Shutting down on a broken store exits cleanly (it ended in SIGBUS), and shutting down on
//! a healthy one commits the records still waiting for their commit.

use std::path::Path;

use serde_json::{json, Value};

use crate::support::*;
use cachet::server::ProxyHandle;

const REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#;

/// A persisted system part per request, so every request writes to the store.
const POLICY: &str = r#"
name = "marks"
[[context]]
reason = "before_request"
patch = [{ op = "system_part_set", partName = "mark{{request_index}}", text = " mark-{{request_index}}", invalidateCacheReason = "test mark" }]
"#;

/// Claude Code's request shape, reduced: a system prompt and one user prompt.
fn body(text: &str) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": false,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]})
}

async fn readyz(proxy: &ProxyHandle) -> (u16, Value) {
    let r = client()
        .get(format!("http://{}/readyz", proxy.admin_addr))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn proxy_on(upstream: &FakeUpstream, dir: &Path) -> ProxyHandle {
    let policy = policy_file(dir, "marks", POLICY);
    start_proxy(policy_config(
        &upstream.url(),
        vec![policy],
        &dir.join("store"),
    ))
    .await
}

async fn lost_store_is_reported(break_it: impl FnOnce(&Path), expected: &str) {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = proxy_on(&upstream, dir.path()).await;
    assert_eq!(post_anthropic(&proxy, "s", &body("first")).await.0, 200);
    let (status, ready) = readyz(&proxy).await;
    assert_eq!(
        (status, ready["store"].as_str()),
        (200, Some("sqlite")),
        "{ready}"
    );

    break_it(&dir.path().join("store").join("sessions.sqlite3"));

    let (status, ready) = readyz(&proxy).await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "unavailable");
    assert!(
        ready["reason"]
            .as_str()
            .unwrap_or_default()
            .contains(expected),
        "{ready}"
    );
    // Requests still go through (fail-open), and each lost write is counted.
    assert_eq!(post_anthropic(&proxy, "s", &body("second")).await.0, 200);
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_store_errors_total",
            &[("operation", "file_check")]
        ),
        1.0,
        "detected once"
    );
    assert!(
        metric_sum(
            &metrics,
            "cachet_store_errors_total",
            &[("operation", "load")]
        ) >= 1.0,
        "{metrics}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_deleted_store_file_is_detected_counted_and_not_ready() {
    lost_store_is_reported(
        |db| {
            std::fs::remove_file(db).unwrap();
        },
        "was deleted",
    )
    .await;
}

#[tokio::test]
async fn a_replaced_store_file_is_detected_counted_and_not_ready() {
    lost_store_is_reported(
        |db| {
            // A restore from backup: another file renamed over the open one.
            let other = db.with_file_name("restored.sqlite3");
            std::fs::write(&other, b"").unwrap();
            std::fs::rename(&other, db).unwrap();
        },
        "was replaced",
    )
    .await;
}

#[tokio::test]
async fn readyz_is_ok_without_a_store() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let mut config = test_config(&upstream.url());
    config.sessions.monitor = false;
    let proxy = start_proxy(config).await;
    let (status, ready) = readyz(&proxy).await;
    assert_eq!((status, ready["store"].as_str()), (200, Some("none")));
    proxy.shutdown().await;
}

/// SIGTERM to a `cachet serve` whose store files were truncated under it (a broken file
/// system, or a tool resetting them): the process exits 0. With a memory-mapped WAL index
/// this ended in SIGBUS.
#[tokio::test]
async fn shutdown_with_a_broken_store_exits_cleanly() {
    use std::os::unix::process::ExitStatusExt;
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path(), "marks", POLICY);
    let store = dir.path().join("store");
    let mut serve = serve_process(|cmd| {
        cmd.args(["--anthropic-upstream", &upstream.url(), "--policy"])
            .arg(&policy)
            .arg("--store")
            .arg(&store)
            .env("RUST_LOG", "error");
    });
    for i in 0..3 {
        let r = client()
            .post(format!("http://{}/v1/messages", serve.addr))
            .header("x-api-key", "k")
            .header("x-cachet-session", format!("s{i}"))
            .json(&body("hello"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    for file in std::fs::read_dir(&store).unwrap() {
        let file = file.unwrap().path();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&file)
            .unwrap()
            .set_len(0)
            .unwrap();
    }
    assert!(terminate(&serve.child).success());
    let status = serve.child.wait().unwrap();
    assert_eq!(status.signal(), None, "ended by signal: {status:?}");
    assert!(status.success(), "{status:?}");
}

/// Request records wait in an open transaction for up to 10 ms before they commit: a
/// SIGTERM right after the last answer still finds every record of every request in the
/// store, with its request index.
#[tokio::test]
async fn records_in_the_open_transaction_survive_a_stop() {
    const REQUESTS: u64 = 12;
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let mut serve = serve_process(|cmd| {
        cmd.args(["--anthropic-upstream", &upstream.url(), "--store"])
            .arg(&store)
            .env("RUST_LOG", "error");
    });
    for i in 0..REQUESTS {
        let r = client()
            .post(format!("http://{}/v1/messages", serve.addr))
            .header("x-api-key", "k")
            .header("x-cachet-session", "stopped")
            .json(&body(&format!("prompt {i}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
    }
    assert!(terminate(&serve.child).success());
    assert!(serve.child.wait().unwrap().success());
    let reopened = cachet::session::store::open_store(store.to_str().unwrap())
        .await
        .unwrap();
    let sessions = reopened.list_sessions(10).await.unwrap();
    assert_eq!(
        sessions.len(),
        1,
        "{:?}",
        sessions.iter().map(|s| &s.id).collect::<Vec<_>>()
    );
    assert_eq!(sessions[0].requests, REQUESTS);
    assert_eq!(sessions[0].entries, REQUESTS);
}
