//! Two cachet instances on one Redis: each sees the other's appends, they share the
//! request counter, and replay plans are identical on both.
//!
//! Needs `redis-server` on PATH (the test fails without it).

use std::sync::Arc;

use crate::session_support::{appends_say_where_they_landed, history, insert_note, system_part};
use crate::support::redis::RedisServer;
use cachet::session::{
    message_key, open_store, Blob, PrefixHashes, RedisStore, SessionStore, StoreError, StoreOptions,
};

#[tokio::test]
async fn two_instances_serve_one_session_interchangeably() {
    let server = RedisServer::start();
    let a: Arc<dyn SessionStore> = open_store(&server.url()).await.unwrap();
    let b: Arc<dyn SessionStore> = open_store(&server.url()).await.unwrap();
    let full = history(20);

    a.append("s", &[system_part(&full[..1], "memory")])
        .await
        .unwrap();
    // Requests alternate between the instances; each appends a note after its turn.
    let mut plans_a = Vec::new();
    let mut plans_b = Vec::new();
    for turn in 0..6usize {
        let (this, other) = if turn.is_multiple_of(2) {
            (&a, &b)
        } else {
            (&b, &a)
        };
        let index = this.next_request_index("s").await.unwrap();
        assert_eq!(index, turn as u64, "one counter for both instances");
        let sent = &full[..2 * turn + 1];
        let log = this.load("s").await.unwrap();
        assert_eq!(log.len(), turn + 1, "sees every earlier append");
        this.append("s", &[insert_note(sent, &format!("note {turn}"), index)])
            .await
            .unwrap();
        // The other instance sees the append at once and plans the same replay.
        let hashes = PrefixHashes::new(&full[..2 * turn + 3]);
        let here = this.load("s").await.unwrap();
        let there = other.load("s").await.unwrap();
        assert_eq!(here, there);
        plans_a.push(serde_json::to_string(&here.replay_plan(&hashes).apply).unwrap());
        plans_b.push(serde_json::to_string(&there.replay_plan(&hashes).apply).unwrap());
    }
    assert_eq!(plans_a, plans_b);
    let last = a
        .load("s")
        .await
        .unwrap()
        .replay_plan(&PrefixHashes::new(&full))
        .apply
        .len();
    assert_eq!(last, 7);

    // Content written by one instance is readable by the other, and stored once.
    let key = message_key(&full[0]);
    let blob = Blob::canonical(key, b"m0".to_vec());
    let before = a.load("s").await.unwrap().len() as u64;
    let at = a
        .record("s", &insert_note(&full[..1], "r0", 6), vec![blob.clone()])
        .await
        .unwrap();
    assert_eq!(at, before, "a record says where it landed");
    assert_eq!(
        b.get_blobs("s", &[key]).await.unwrap(),
        vec![Some(b"m0".to_vec())]
    );
    let at = b
        .record("s", &insert_note(&full[..1], "r1", 7), vec![blob])
        .await
        .unwrap();
    assert_eq!(at, before + 1);
    // The index taken with a record continues the one counter both instances share.
    let next = a.next_request_index("s").await.unwrap();
    let (index, at) = b
        .record_next("s", insert_note(&full[..1], "r2", 8), vec![])
        .await
        .unwrap();
    assert_eq!((index, at), (next + 1, before + 2));
    // `a` keeps its own record in its cached log; it still sees `b`'s.
    let (here, there) = (a.load("s").await.unwrap(), b.load("s").await.unwrap());
    assert_eq!(here.len() as u64, before + 3);
    assert_eq!(here, there);
    let stats = b.stats().await.unwrap();
    assert_eq!(stats.blobs, 1, "a blob is stored once");
    assert_eq!(stats.blob_bytes, 2);
    assert_eq!(stats.entries, 10);

    let sessions = b.list_sessions(10).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].id, "s");
    assert_eq!(sessions[0].entries, 10);
    assert_eq!(sessions[0].requests, 8);
    assert!(sessions[0].created <= sessions[0].updated);
}

#[tokio::test]
async fn a_store_that_goes_away_is_reported_unavailable() {
    let server = RedisServer::start();
    let store = RedisStore::connect(&server.url(), &StoreOptions::default())
        .await
        .unwrap();
    store
        .append("s", &[insert_note(&history(2), "x", 0)])
        .await
        .unwrap();
    drop(server);
    let err = store.entry_count("s").await.expect_err("redis is gone");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    let err = store.next_request_index("s").await.expect_err("still gone");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    // Nothing secret (or the URL) leaks into the message.
    assert!(!err.to_string().contains("127.0.0.1"), "{err}");
}

#[tokio::test]
async fn connecting_to_nothing_fails_cleanly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = RedisStore::connect(
        &format!("redis://127.0.0.1:{port}/0"),
        &StoreOptions::default(),
    )
    .await
    .err();
    assert!(matches!(err, Some(StoreError::Unavailable(_))));
    let err = RedisStore::connect("redis://:::bad", &StoreOptions::default())
        .await
        .err();
    assert!(matches!(
        err,
        Some(StoreError::InvalidSpec { .. }) | Some(StoreError::Unavailable(_))
    ));
}

/// `rediss://`: the store connects with TLS (rustls), trusting the CA in `redis_ca_file`,
/// and works as over plain TCP. Without that CA the server's certificate is refused.
#[tokio::test]
async fn rediss_connects_with_tls() {
    let tls = crate::support::redis::TlsRedisServer::start();
    let options = StoreOptions {
        cache_bytes: 1 << 20,
        redis_ca_file: Some(tls.ca_file.clone()),
        ..StoreOptions::default()
    };
    let store = cachet::session::open_store_with(&tls.url(), &options)
        .await
        .unwrap();
    let note = insert_note(&history(2), "over tls", 0);
    store
        .append("t", std::slice::from_ref(&note))
        .await
        .unwrap();
    assert_eq!(store.load("t").await.unwrap(), vec![note]);
    assert!(store.health().await.ok);

    let untrusted = RedisStore::connect(&tls.url(), &StoreOptions::default())
        .await
        .err();
    assert!(
        matches!(untrusted, Some(StoreError::Unavailable(_))),
        "a certificate from an unknown CA is refused"
    );
}

#[tokio::test]
async fn redis_appends_say_where_they_landed() {
    let server = RedisServer::start();
    let raw = RedisStore::connect(&server.url(), &StoreOptions::default())
        .await
        .unwrap();
    appends_say_where_they_landed(&raw, "p").await;
    // And through the cache in front, as cachet opens it.
    let cached = open_store(&server.url()).await.unwrap();
    appends_say_where_they_landed(cached.as_ref(), "q").await;
}
