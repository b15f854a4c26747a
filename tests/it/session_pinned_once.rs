//! A pinned memory placement is persisted once per session and turn, whatever the
//! concurrency: many requests of a new session in flight together (pi on Anthropic, as its
//! first turn), through the real proxy, on the embedded store, on Redis, and on two cachet
//! instances sharing one Redis. Every forwarded body carries the memory exactly once, and
//! so does the next turn's, which replays it from the log.

use futures_util::future::join_all;
use serde_json::{json, Value};

use crate::support::redis::RedisServer;
use crate::support::*;
use cachet::server::ProxyHandle;

const REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Run them in a transaction."}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":7}}"#;
const CONCURRENT: usize = 16;
const FIRST_PROMPT: &str = "How do we roll out database migrations?";
const SECOND_PROMPT: &str = "And how are release versions tagged?";

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// pi's Anthropic request (tests/data/clients/pi_anthropic.json) with this history.
fn pi_body(history: &[Value]) -> Value {
    let path = root().join("tests/data/clients/pi_anthropic.json");
    let mut body: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    body["stream"] = json!(false);
    body["messages"] = json!(history);
    body
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

fn memories(body: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(body);
    text.match_indices("<memory>")
        .map(|(start, _)| {
            let end = text[start..]
                .find("</memory>")
                .map_or(text.len(), |e| start + e);
            text[start..end].to_string()
        })
        .collect()
}

async fn post(proxy: &ProxyHandle, body: &Value) -> u16 {
    client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-cachet-session", "race")
        .json(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn context_transforms(proxy: &ProxyHandle) -> Vec<Value> {
    let session: Value = client()
        .get(format!("http://{}/sessions/race", proxy.admin_addr))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    session["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "context_transform")
        .cloned()
        .collect()
}

/// `CONCURRENT` first requests spread over `proxies`, then the second turn on the first.
async fn race_then_next_turn(upstream: &FakeUpstream, proxies: &[ProxyHandle]) {
    let first = vec![user(FIRST_PROMPT)];
    let body = pi_body(&first);
    let statuses =
        join_all((0..CONCURRENT).map(|i| post(&proxies[i % proxies.len()], &body))).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");

    let sent = upstream.requests();
    assert_eq!(sent.len(), CONCURRENT);
    let placed: Vec<Vec<String>> = sent.iter().map(|r| memories(&r.body)).collect();
    for (i, m) in placed.iter().enumerate() {
        assert_eq!(
            m.len(),
            1,
            "request {i} carries the memory exactly once: {m:?}"
        );
    }
    assert!(
        placed.iter().all(|m| m == &placed[0]),
        "every request of the turn carries the same bytes"
    );

    let persisted = context_transforms(&proxies[0]).await;
    assert_eq!(persisted.len(), 1, "one persisted copy: {persisted:#?}");

    let mut second = first.clone();
    second.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Run them in a transaction."}]}));
    second.push(user(SECOND_PROMPT));
    assert_eq!(
        post(&proxies[proxies.len() - 1], &pi_body(&second)).await,
        200
    );
    let next = upstream.requests().pop().unwrap();
    let carried = memories(&next.body);
    assert_eq!(
        carried.iter().filter(|m| **m == placed[0][0]).count(),
        1,
        "the next turn replays the first turn's memory once: {carried:#?}"
    );
    assert_eq!(carried.len(), 2, "and adds its own: {carried:#?}");
    assert_eq!(context_transforms(&proxies[0]).await.len(), 2);
}

fn pinned_config(upstream: &FakeUpstream, store: &str) -> cachet::config::Config {
    let mut config = policy_config(
        &upstream.url(),
        vec![root().join("policies/memory-pinned.toml")],
        std::path::Path::new(store),
    );
    config.sessions.store = store.to_string();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_pin_memory_once_on_the_embedded_store() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(pinned_config(&upstream, dir.path().to_str().unwrap())).await;
    race_then_next_turn(&upstream, std::slice::from_ref(&proxy)).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_pin_memory_once_on_redis() {
    let redis = RedisServer::start();
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let proxy = start_proxy(pinned_config(&upstream, &redis.url())).await;
    race_then_next_turn(&upstream, std::slice::from_ref(&proxy)).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_pin_memory_once() {
    let redis = RedisServer::start();
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let a = start_proxy(pinned_config(&upstream, &redis.url())).await;
    let b = start_proxy(pinned_config(&upstream, &redis.url())).await;
    let proxies = [a, b];
    race_then_next_turn(&upstream, &proxies).await;
    for proxy in proxies {
        proxy.shutdown().await;
    }
}
