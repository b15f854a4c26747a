//! Retention on disk: sessions idle past `retention_days` are deleted with their content,
//! and past `max_store_bytes` the least recently active go first (never one in use). Time
//! is moved, not waited for: the sweep takes "now" as an argument, the sweeper task runs on
//! tokio's paused clock with an injected wall clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::session_support::{files_size, history, insert_note, record_sent};
use crate::support::redis::RedisServer;
use cachet::session::store::{Maintenance, Retention};
use cachet::session::SessionsConfig;
use cachet::session::{
    message_key, now_ms, open_store_with, SessionLog, SessionStore, SqliteStore, StoreOptions,
};

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// A session with one persisted patch and one recorded request of about `size` bytes.
async fn session(store: &dyn SessionStore, id: &str, size: usize) -> Value {
    let message = json!({"role": "user", "content": format!("{id}: {}", "x".repeat(size))});
    store
        .append(id, &[insert_note(&history(2), "note", 0)])
        .await
        .unwrap();
    record_sent(
        store,
        id,
        &SessionLog::new(),
        std::slice::from_ref(&message),
    )
    .await;
    message
}

fn retention(days: u64, max_bytes: u64) -> Retention {
    Retention {
        max_age_ms: (days > 0).then_some(days * DAY_MS),
        max_bytes: (max_bytes > 0).then_some(max_bytes),
    }
}

async fn ages_out(store: &dyn SessionStore) {
    let kept = session(store, "kept", 1000).await;
    let _ = session(store, "other", 1000).await;
    for index in 0..2 {
        assert_eq!(store.next_request_index("kept").await.unwrap(), index);
    }
    let now = now_ms();
    let thirty = retention(30, 0);
    let report = store.sweep(&thirty, now + 29 * DAY_MS).await.unwrap();
    assert_eq!(report.expired, 0, "not yet idle for 30 days");
    assert_eq!(store.stats().await.unwrap().sessions, 2);

    let report = store.sweep(&thirty, now + 31 * DAY_MS).await.unwrap();
    assert_eq!(report.expired, 2);
    assert!(report.bytes_freed > 2000, "{report:?}");
    let stats = store.stats().await.unwrap();
    assert_eq!((stats.sessions, stats.entries, stats.blobs), (0, 0, 0));
    assert_eq!(store.entry_count("kept").await.unwrap(), 0);
    assert_eq!(
        store
            .get_blobs("kept", &[message_key(&kept)])
            .await
            .unwrap(),
        vec![None],
        "content goes with its session"
    );
    assert!(store.list_sessions(10).await.unwrap().is_empty());
    assert_eq!(
        store.next_request_index("kept").await.unwrap(),
        0,
        "a deleted session's requests are counted from 0 again"
    );
}

async fn evicts_the_least_recently_active_over_the_size_limit(store: &dyn SessionStore) {
    for i in 0..10 {
        session(store, &format!("s{i}"), 10_000).await;
    }
    let total = {
        let s = store.stats().await.unwrap();
        s.entry_bytes + s.blob_bytes
    };
    let limit = total / 2;
    let now = now_ms();
    // All in use: nothing goes, even over the limit.
    let report = store.sweep(&retention(0, limit), now).await.unwrap();
    assert_eq!(report.evicted, 0);
    // An hour later they are idle: the oldest go until the store is under the limit.
    let report = store
        .sweep(&retention(0, limit), now + 60 * 60 * 1000)
        .await
        .unwrap();
    let stats = store.stats().await.unwrap();
    let left = stats.entry_bytes + stats.blob_bytes;
    assert!(left <= limit, "{left} > {limit}");
    assert_eq!(stats.sessions, 10 - report.evicted);
    assert!(
        left + total / 10 + 1000 > limit,
        "no more evicted than needed: {report:?} left {left}"
    );
    let listed: Vec<String> = store
        .list_sessions(10)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(
        listed.contains(&"s9".to_string()),
        "the newest stays: {listed:?}"
    );
}

#[tokio::test]
async fn sqlite_sessions_age_out_with_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
    ages_out(&store).await;
}

/// The README's promise: what a sweep deletes leaves the file, over more than one of the
/// store's writes (2,048 pages, 8 MB, each). `PRAGMA incremental_vacuum` gives back one
/// page each time it is stepped.
#[tokio::test]
async fn sqlite_gives_the_pages_of_swept_sessions_back_to_the_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = SqliteStore::open(&path).await.unwrap();
    for i in 0..20 {
        session(&store, &format!("s{i}"), 600_000).await;
    }
    store.close().await;
    drop(store);
    let full = files_size(dir.path());
    assert!(full > 2048 * 4096, "{full}");
    let store = SqliteStore::open(&path).await.unwrap();
    let report = store
        .sweep(&retention(30, 0), now_ms() + 31 * DAY_MS)
        .await
        .unwrap();
    assert_eq!(report.expired, 20);
    store.close().await;
    drop(store);
    let swept = files_size(dir.path());
    assert!(swept < full / 10, "{swept} bytes left of {full}");
}

#[tokio::test]
async fn sqlite_evicts_the_least_recently_active_over_the_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
    evicts_the_least_recently_active_over_the_size_limit(&store).await;
}

#[tokio::test]
async fn redis_sessions_age_out_and_carry_a_ttl() {
    let server = RedisServer::start();
    let options = StoreOptions {
        cache_bytes: 1 << 20,
        retention: retention(30, 0),
        ..StoreOptions::default()
    };
    let store = open_store_with(&server.url(), &options).await.unwrap();
    session(store.as_ref(), "ttl", 10).await;
    // Every key of the session expires by itself after the age limit.
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for part in ["log", "meta", "blobs"] {
        let ttl: i64 = redis::cmd("TTL")
            .arg(format!("cachet:s:ttl:{part}"))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            ttl > 29 * 24 * 3600 && ttl <= 30 * 24 * 3600,
            "{part}: ttl {ttl}"
        );
    }
    redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    ages_out(store.as_ref()).await;
}

#[tokio::test]
async fn redis_evicts_the_least_recently_active_over_the_size_limit() {
    let server = RedisServer::start();
    let store = open_store_with(&server.url(), &StoreOptions::default())
        .await
        .unwrap();
    evicts_the_least_recently_active_over_the_size_limit(store.as_ref()).await;
}

/// The sweeper runs at start and then every interval, on a moved clock.
#[tokio::test(start_paused = true)]
async fn the_sweeper_enforces_retention_at_start_and_every_interval() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn SessionStore> =
        Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    session(store.as_ref(), "early", 100).await;
    let now = Arc::new(AtomicU64::new(now_ms() + 31 * DAY_MS));
    let clock = {
        let now = now.clone();
        Arc::new(move || now.load(Ordering::SeqCst))
    };
    let config = SessionsConfig {
        retention_days: 30,
        max_store_bytes: 0,
        sweep_interval_secs: 600,
        ..SessionsConfig::default()
    };
    let errors = cachet::metrics::Metrics::new().store_errors;
    let maintenance = Maintenance::start_with_clock(Some(store.clone()), &config, errors, clock);
    // At start: the session idle for 31 days goes.
    wait_until(|| async { store.entry_count("early").await.unwrap() == 0 }).await;

    now.store(now_ms() + 10 * DAY_MS, Ordering::SeqCst);
    session(store.as_ref(), "later", 100).await;
    tokio::time::advance(Duration::from_secs(600)).await;
    tokio::task::yield_now().await;
    assert_eq!(
        store.entry_count("later").await.unwrap(),
        2,
        "not idle long enough"
    );

    now.store(now_ms() + 40 * DAY_MS, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(600)).await;
    wait_until(|| async { store.entry_count("later").await.unwrap() == 0 }).await;
    maintenance.stop().await;
    assert!(
        store.entry_count("later").await.is_err(),
        "stopping closes the store"
    );
}

/// Give the sweeper task turns until `done` holds (bounded: at most about a second).
async fn wait_until<F, Fut>(done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..1000 {
        if done().await {
            return;
        }
        tokio::task::yield_now().await;
        // Real time for the store's thread to run the sweeper's writes: a log's length is
        // answered from memory, without a trip to that thread.
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the sweeper did not run");
}
