//! Memory stays bounded: the cache in front of the store keeps at most `sessions.cache_bytes`
//! however large and unique the messages clients send, and a `cachet serve` fed unique
//! large messages does not keep them.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::session_support::{history, record_sent, record_turn};
use crate::support::*;
use cachet::session::{message_key, sent_keys, CachedStore, SessionStore, SqliteStore};

const MIB: usize = 1024 * 1024;

/// A user message of about `size` bytes, different for every `seed`.
fn unique_message(seed: usize, size: usize) -> Value {
    let line = format!("log line {seed}: request handled, nothing to report\n");
    json!({"role": "user", "content": [{"type": "text", "text": line.repeat(size / line.len())}]})
}

#[tokio::test]
async fn the_cache_stays_within_its_byte_budget_under_unique_large_messages() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn SessionStore> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let budget = 4 * MIB as u64;
    let cache = CachedStore::new(inner, budget);
    for i in 0..24 {
        let session = format!("s{i}");
        let sent = [unique_message(i, MIB)];
        let log = cache.load(&session).await.unwrap();
        record_sent(&cache, &session, &log, &sent).await;
        // Reading content back caches it too.
        let read = cache
            .get_blobs(&session, &[message_key(&sent[0])])
            .await
            .unwrap();
        assert!(read[0].as_ref().is_some_and(|b| b.len() > MIB / 2));
        assert_eq!(cache.load(&session).await.unwrap().len(), 1);
        let held = cache.weighted_size().await;
        assert!(held <= budget, "request {i}: the cache holds {held} bytes");
    }
    assert!(
        cache.weighted_size().await > 0,
        "it still caches within the budget"
    );
}

/// A session's place in the cache follows what its requests read, not its age: 450 more
/// requests of a growing history add a slot each to its log, not their records or a mark
/// per message they stored (about 400 and 150 bytes a request before), and the latest
/// request's whole history still reads back.
#[tokio::test]
async fn a_long_session_weighs_in_the_cache_about_what_a_short_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn SessionStore> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let cache = CachedStore::new(inner, 64 * MIB as u64);
    let full = history(1200);
    let mut weights = Vec::new();
    for i in 0..600u64 {
        record_turn(&cache, "long", &full[..(2 * i as usize + 1)], i).await;
        if i == 149 || i == 599 {
            weights.push(cache.weighted_size().await);
        }
    }
    let grown = weights[1] - weights[0];
    assert!(
        grown < 450 * 64,
        "450 requests added {grown} bytes: {weights:?}"
    );
    let log = cache.load("long").await.unwrap();
    let keys = sent_keys(&log, 599).expect("the latest request's keys");
    assert_eq!(keys.len(), 1199);
    assert_eq!(keys[1198], message_key(&full[1198]));
}

fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split(' ').nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// 64 requests, each with a unique 2 MiB message, to one policy-shaped `cachet serve`: once
/// warm, its resident memory stops growing (the unbounded cache kept every message: 36
/// such 20 MB requests took it to 1.1 GB). Measured from `/proc`, not timed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_large_messages_do_not_stay_in_memory() {
    const REQUESTS: usize = 64;
    const SIZE: usize = 2 * MIB;
    /// Requests after which resident memory has reached its working size.
    const WARM_UP: usize = 8;
    let reply = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}"#;
    let upstream = FakeUpstream::start(Script::json(200, reply)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cachet.toml");
    std::fs::write(
        &config,
        "[sessions]\ncache_bytes = 8388608\n[server]\nmax_body_bytes = 67108864\n",
    )
    .unwrap();
    let mut serve = serve_process(|cmd| {
        cmd.arg("--config")
            .arg(&config)
            .args(["--anthropic-upstream", &upstream.url(), "--policy"])
            .arg(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("policies/stabilize-volatile.toml"),
            )
            .arg("--store")
            .arg(dir.path().join("store"))
            .env("RUST_LOG", "error");
    });
    let c = client();
    let mut warm = 0;
    for i in 0..REQUESTS {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "messages": [unique_message(i, SIZE)]});
        let r = c
            .post(format!("http://{}/v1/messages", serve.addr))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .header("x-cachet-session", format!("big-{i}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        if i + 1 == WARM_UP {
            warm = rss_bytes(serve.child.id());
        }
    }
    // The session records are written after the responses; wait until all are in.
    let admin = format!("http://{}/sessions?limit=100", serve.admin);
    for _ in 0..200 {
        let list: Value = c.get(&admin).send().await.unwrap().json().await.unwrap();
        let recorded = list["sessions"].as_array().map_or(0, |s| {
            s.iter()
                .filter(|s| s["entries"].as_u64() >= Some(1))
                .count()
        });
        if recorded == REQUESTS {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let rss = rss_bytes(serve.child.id());
    let _ = serve.child.kill();
    let _ = serve.child.wait();
    // The last 56 requests brought 112 MiB of new content; less than 8 of them stays.
    let grown = rss.saturating_sub(warm);
    assert!(
        grown < (WARM_UP * SIZE) as u64,
        "resident memory grew by {} MiB (from {} MiB) over {} MiB of unique messages",
        grown / MIB as u64,
        warm / MIB as u64,
        ((REQUESTS - WARM_UP) * SIZE) / MIB
    );
}
