//! The embedded store: durability across reopen, shared counters, content addressing and
//! the cache in front of it.

use std::sync::Arc;

use crate::session_support::{
    appends_say_where_they_landed, files_size, history, insert_note, record_turn, system_part,
};
use cachet::measure::SentRequest;
use cachet::patch::ops::Op;
use cachet::route::Endpoint;
use cachet::session::{
    message_key, open_store, record_request, sent_keys, session_json, sessions_json, Blob,
    CachedStore, Entry, PrefixHashes, RequestDraft, SessionLog, SessionStore, SqliteStore,
};
use serde_json::json;

#[tokio::test]
async fn entries_survive_closing_and_reopening_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.sqlite3");
    let h = history(4);
    let written = vec![
        system_part(&h[..1], "remember the build"),
        insert_note(&h, "n1", 1),
    ];
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.append("s1", &written[..1]).await.unwrap();
        store.append("s1", &written[1..]).await.unwrap();
        assert_eq!(store.next_request_index("s1").await.unwrap(), 0);
        assert_eq!(store.next_request_index("s1").await.unwrap(), 1);
        let blob = Blob::canonical(message_key(&h[0]), b"m0".to_vec());
        store
            .record("s1", &insert_note(&h, "r", 2), vec![blob])
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let loaded = store.load("s1").await.unwrap();
    let mut all = written.clone();
    all.push(insert_note(&h, "r", 2));
    assert_eq!(loaded, all);
    assert_eq!(store.entry_count("s1").await.unwrap(), 3);
    assert_eq!(store.load_from("s1", 1).await.unwrap(), all[1..]);
    // The counter goes on where it stopped.
    assert_eq!(store.next_request_index("s1").await.unwrap(), 2);
    let blobs = store
        .get_blobs("s1", &[message_key(&h[0]), message_key(&h[1])])
        .await
        .unwrap();
    assert_eq!(blobs, vec![Some(b"m0".to_vec()), None]);
    let other = store.get_blobs("s2", &[message_key(&h[0])]).await.unwrap();
    assert_eq!(other, vec![None], "content is kept per session");
    // Unknown sessions are empty, not errors.
    assert_eq!(store.entry_count("nope").await.unwrap(), 0);
    assert!(store.load("nope").await.unwrap().is_empty());
}

#[tokio::test]
async fn open_store_uses_a_folder_and_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("cachet-data");
    let spec = format!("{}/", folder.display());
    let store = open_store(&spec).await.unwrap();
    store
        .append("s", &[insert_note(&history(2), "x", 0)])
        .await
        .unwrap();
    assert!(folder.join("sessions.sqlite3").exists());
    // The store holds the file exclusively while open.
    store.close().await;
    let mode: String = rusqlite::Connection::open(folder.join("sessions.sqlite3"))
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn an_unusable_path_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"not a folder").unwrap();
    let spec = format!("{}/sub/", file.display());
    let err = open_store(&spec).await.err().expect("must fail");
    assert!(
        err.to_string().contains("session store unavailable"),
        "{err}"
    );
}

#[tokio::test]
async fn the_cache_sees_appends_made_around_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let writer: Arc<dyn SessionStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
    let cached = CachedStore::new(writer.clone(), 1 << 20);
    let h = history(6);
    writer
        .append("s", &[insert_note(&h[..2], "a", 0)])
        .await
        .unwrap();
    assert_eq!(cached.load("s").await.unwrap().len(), 1);
    writer
        .append("s", &[insert_note(&h[..4], "b", 1)])
        .await
        .unwrap();
    cached
        .append("s", &[insert_note(&h, "c", 2)])
        .await
        .unwrap();
    let log = cached.load("s").await.unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log, writer.load("s").await.unwrap());
    assert_eq!(cached.load_from("s", 2).await.unwrap().len(), 1);
}

/// Each request's session load used to ask the store's thread how long the log was, then
/// read back what the previous request had just written: its record (written after the
/// response) and any patch it persisted (written before forwarding). Both now join the
/// cached log at the position the store gives them, and the store's thread remembers each
/// log's length, so loads after them ask the thread nothing.
#[tokio::test]
async fn records_and_persisted_patches_are_not_read_back_by_the_next_load() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let cached = CachedStore::new(sqlite.clone(), 1 << 20);
    let h = history(12);
    cached
        .append("s", &[system_part(&h[..1], "pinned")])
        .await
        .unwrap();
    assert_eq!(cached.load("s").await.unwrap().len(), 1);
    let reads = sqlite.reads();
    let mut written = 1;
    for i in 0..6 {
        let entry = insert_note(&h[..i + 2], &format!("entry {i}"), i as u64);
        let one = std::slice::from_ref(&entry);
        match i % 3 {
            0 => {
                let at = cached.record("s", &entry, vec![]).await.unwrap();
                assert_eq!(at, written, "the record's position in the log");
            }
            1 => assert_eq!(cached.append("s", one).await.unwrap(), Some(written)),
            _ => {
                let key = format!("once {i}");
                assert_eq!(
                    cached.append_once("s", &key, one).await.unwrap(),
                    cachet::session::Appended::Written { at: written }
                );
            }
        }
        written += 1;
        let log = cached.load("s").await.unwrap();
        assert_eq!(log.len() as u64, written);
        assert_eq!(log.iter().last(), Some(&entry));
    }
    assert_eq!(
        sqlite.reads(),
        reads,
        "loads after writes went to the store"
    );
    assert_eq!(
        cached.load("s").await.unwrap(),
        sqlite.load("s").await.unwrap()
    );
}

/// A persisted patch is replayed into the bytes cachet forwards, so the cache must hold it
/// as the store gives it back: as every other instance, and this one once the cache lets it
/// go, will replay it. Without serde_json's `float_roundtrip` feature the two differed: a
/// float read back one unit in the last place off (`9.797527801591091` as
/// `9.797527801591093`).
#[tokio::test]
async fn a_persisted_patch_is_cached_as_the_store_reads_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let cached = CachedStore::new(sqlite.clone(), 1 << 20);
    let h = history(4);
    assert!(cached.load("s").await.unwrap().is_empty());
    // A patch that inserts a tool call (as a hook may return one), its input a float.
    let with_float = |index: u64, threshold: f64| {
        let mut entry = insert_note(&h, "unused", index);
        if let Entry::ContextTransform(t) = &mut entry {
            t.patch = vec![Op::MessagesInsert {
                at: cachet::patch::Selector::End,
                messages: vec![json!({"role": "assistant", "content": [{
                    "type": "tool_use", "id": "toolu_01", "name": "set_threshold",
                    "input": {"threshold": threshold}
                }]})],
                invalidate_cache_reason: Some("a tool call for later turns".into()),
            }];
        }
        entry
    };
    let patch = with_float(0, 9.797527801591091);
    cached
        .append("s", std::slice::from_ref(&patch))
        .await
        .unwrap();
    cached
        .append_once("s", "k", &[with_float(1, 9.944424804330529)])
        .await
        .unwrap();
    let stored = sqlite.load("s").await.unwrap();
    assert_eq!(
        stored.iter().next(),
        Some(&patch),
        "the float reads back as written (serde_json's default parsing made it ...093)"
    );
    assert_eq!(cached.load("s").await.unwrap(), stored);
}

#[tokio::test]
async fn embedded_appends_say_where_they_landed() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    appends_say_where_they_landed(sqlite.as_ref(), "p").await;
    let other = dir.path().join("cached.db");
    let cached = CachedStore::new(Arc::new(SqliteStore::open(&other).await.unwrap()), 1 << 20);
    appends_say_where_they_landed(&cached, "p").await;
}

/// An observed request's index is taken in the same write as its record: the indices
/// continue the session's one counter (shared with requests that took theirs before
/// forwarding), each record carries its own, and the cache holds what the store holds.
#[tokio::test]
async fn a_record_takes_its_request_index_in_the_same_write() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let cached = CachedStore::new(sqlite.clone(), 1 << 20);
    let placeholder = Entry::Request(cachet::session::RequestRecord::default());
    assert_eq!(cached.next_request_index("s").await.unwrap(), 0);
    let (index, at) = cached
        .record_next("s", placeholder.clone(), vec![])
        .await
        .unwrap();
    assert_eq!((index, at), (1, 0));
    assert_eq!(cached.next_request_index("s").await.unwrap(), 2);
    let (index, at) = cached.record_next("s", placeholder, vec![]).await.unwrap();
    assert_eq!((index, at), (3, 1));
    let log = cached.load("s").await.unwrap();
    let indices: Vec<u64> = log
        .iter()
        .map(|e| match e {
            Entry::Request(r) => r.request_index,
            _ => u64::MAX,
        })
        .collect();
    assert_eq!(indices, [1, 3]);
    assert_eq!(log, sqlite.load("s").await.unwrap());
}

/// Records, patches and loads of the same sessions from concurrent tasks: whatever order
/// the store takes them in, every load is a prefix of the log the store ends with, and the
/// cache ends equal to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_records_and_patches_leave_the_cache_equal_to_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
    let cached = Arc::new(CachedStore::new(sqlite.clone(), 1 << 20));
    let h = history(4);
    let mut tasks = Vec::new();
    for task in 0..6u64 {
        let (cached, h) = (cached.clone(), h.clone());
        tasks.push(tokio::spawn(async move {
            let session = format!("s{}", task % 2);
            let mut seen = Vec::new();
            for i in 0..25u64 {
                let entry = insert_note(&h, &format!("t{task} {i}"), i);
                match (task + i) % 3 {
                    0 => drop(cached.append(&session, &[entry]).await.unwrap()),
                    1 => {
                        let once = format!("t{task} {}", i / 2);
                        cached.append_once(&session, &once, &[entry]).await.unwrap();
                    }
                    _ => drop(cached.record(&session, &entry, vec![]).await.unwrap()),
                }
                seen.push((session.clone(), cached.load(&session).await.unwrap()));
            }
            seen
        }));
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.unwrap());
    }
    for session in ["s0", "s1"] {
        let stored = sqlite.load(session).await.unwrap();
        assert_eq!(cached.load(session).await.unwrap(), stored);
        for (_, log) in seen.iter().filter(|(s, _)| s == session) {
            let prefix: Vec<_> = stored.iter().take(log.len()).collect();
            assert_eq!(log.iter().collect::<Vec<_>>(), prefix, "a load is a prefix");
        }
    }
}

#[tokio::test]
async fn a_second_process_on_the_same_embedded_store_is_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let _first = SqliteStore::open(&path).await.unwrap();
    let err = SqliteStore::open(&path)
        .await
        .err()
        .expect("held exclusively");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
}

#[tokio::test]
async fn replay_after_reopen_applies_only_to_the_same_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let h = history(8);
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .append("a", &[system_part(&h[..1], "project memory")])
            .await
            .unwrap();
        store
            .append("a", &[insert_note(&h[..4], "note", 1)])
            .await
            .unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let log = store.load("a").await.unwrap();
    let plan = log.replay_plan(&PrefixHashes::new(&h));
    assert_eq!(plan.apply.len(), 2);
    assert!(plan.stale.is_empty());
    // The replayed messages are byte-identical to the ones persisted, so the provider sees
    // the same prefix on every later request.
    let inserted = |e: &Entry| match e {
        Entry::ContextTransform(t) => serde_json::to_string(&t.patch).unwrap(),
        _ => String::new(),
    };
    let persisted = insert_note(&h[..4], "note", 1);
    assert_eq!(
        serde_json::to_string(&plan.apply[1].patch).unwrap(),
        inserted(&persisted)
    );
    // Another session has nothing to replay.
    assert!(store.load("b").await.unwrap().is_empty());
    // A fork that drops the last two turns of the anchored prefix: the note is stale.
    let mut forked = h[..2].to_vec();
    forked.push(json!({"role": "user", "content": "go another way"}));
    let plan = log.replay_plan(&PrefixHashes::new(&forked));
    assert_eq!(plan.apply.len(), 1);
    assert_eq!(plan.apply[0].transformer, "memory");
    assert_eq!(plan.stale.len(), 1);
}

#[tokio::test]
async fn admin_json_lists_entries_and_recent_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
    let h = history(2);
    store
        .append("older", &[insert_note(&h, "x", 0)])
        .await
        .unwrap();
    let index = store.next_request_index("newer").await.unwrap();
    let usage = cachet::usage::Usage {
        cache_read: 100,
        uncached: 5,
        output: 7,
        ..Default::default()
    };
    let req = SentRequest::from_json(
        Endpoint::Messages,
        &json!({"model": "claude-sonnet-4-5", "messages": h}),
        0,
    )
    .unwrap();
    let history = req.history();
    let draft = RequestDraft {
        request_index: index,
        turn_index: Some(1),
        time_ms: cachet::session::now_ms(),
        provider: "anthropic",
        endpoint: "messages",
        client: Some("claude-code"),
        shape: &req.shape,
        history: &history,
        hashes: None,
        usage: Some(usage),
        status: Some(200),
        outcome: None,
        lane: 0,
        conversation: Default::default(),
        diagnosis: None,
        patches: Vec::new(),
        variant: None,
        response_id: None,
        conversation_id: None,
    };
    record_request(&store, "newer", &SessionLog::new(), &draft)
        .await
        .unwrap();

    let one = session_json(&store, "newer")
        .await
        .unwrap()
        .expect("known session");
    assert_eq!(one["requests"], 1);
    assert_eq!(one["usage"]["cache_read"], 100);
    assert_eq!(one["entries"][0]["type"], "request");
    assert_eq!(one["entries"][0]["usage"]["output"], 7);
    assert_eq!(one["entries"][0]["sent"]["count"], 2);
    assert!(session_json(&store, "missing").await.unwrap().is_none());

    let list = sessions_json(&store, 10).await.unwrap();
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&"older") && ids.contains(&"newer"));
    let newer = &list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "newer")
        .unwrap();
    assert_eq!(newer["requests"], 1);
    assert_eq!(newer["entries"], 1);
    assert_eq!(
        sessions_json(&store, 1).await.unwrap()["sessions"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// 500 requests whose history grows by two messages each: every message is stored once and
/// the log grows with the new messages only.
#[tokio::test]
async fn a_500_request_session_stores_each_message_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path().to_str().unwrap()).await.unwrap();
    let full = history(1000);
    for i in 0..500u64 {
        record_turn(store.as_ref(), "long", &full[..(2 * i as usize + 1)], i).await;
    }
    let stats = store.stats().await.unwrap();
    // 999 distinct messages sent, plus the system prompt and the tools.
    assert_eq!(stats.blobs, 999 + 2);
    let message_bytes: u64 = full[..999]
        .iter()
        .map(|m| {
            serde_json::to_vec(&cachet::providers::cache_key::canonical(m))
                .unwrap()
                .len() as u64
        })
        .sum();
    assert!(stats.blob_bytes < message_bytes + 1000, "{stats:?}");
    assert_eq!(stats.entries, 500);
    // Each entry names at most its two new messages: linear, not quadratic, growth.
    assert!(stats.entry_bytes < 500 * 900, "{stats:?}");

    let log = store.load("long").await.unwrap();
    let keys = sent_keys(&log, 499).expect("chain resolves");
    let expected: Vec<_> = full[..999].iter().map(message_key).collect();
    assert_eq!(keys, expected);
    let Some(Entry::Request(last)) = log.get(499) else {
        panic!("expected a request")
    };
    assert_eq!(last.sent.extends, Some(498));
    assert_eq!(last.sent.keys.len(), 2);
    // Requests read the log through its indexes: it holds the latest records whole, not
    // all 500. The admin API reads every entry from the store.
    assert_eq!(log.len(), 500);
    assert_eq!(log.held(), cachet::session::log::KEPT_REQUESTS);
    assert_eq!(log.get(0), None);
    let json = session_json(store.as_ref(), "long").await.unwrap().unwrap();
    assert_eq!(json["entries"].as_array().unwrap().len(), 500);
    assert_eq!(json["entries"][0]["request_index"], 0);
}

/// The steps the pipeline takes, across three requests of one session and one of another.
#[tokio::test]
async fn prepare_plan_persist_across_requests() {
    use cachet::session::{identify, prepare, IdSource};
    use http::HeaderMap;

    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path().to_str().unwrap()).await.unwrap();
    let h = history(6);
    let mut headers = HeaderMap::new();
    headers.insert("x-cachet-session", "flow".parse().unwrap());
    let body = json!({"messages": h[..1]});
    let endpoint = cachet::route::Endpoint::Messages;

    // Request 0: nothing to replay; a before_request patch is persisted, an ephemeral one not.
    let env =
        cachet::providers::parse_envelope(endpoint, bytes::Bytes::from(body.to_string())).unwrap();
    let id = identify(&headers, &env);
    assert_eq!(id.source, IdSource::Header);
    let ctx = prepare(store.as_ref(), id.clone(), PrefixHashes::new(&h[..1]))
        .await
        .unwrap();
    assert_eq!(ctx.request_index, 0);
    assert!(ctx.plan().apply.is_empty());
    let part = Op::SystemPartSet {
        part_name: "memory".into(),
        text: "remember".into(),
        before: None,
        after: None,
        invalidate_cache_reason: Some("memory".into()),
    };
    let persisted = ctx.transform("memory", "before_request", vec![part.clone()], None);
    assert!(ctx
        .transform("memory", "ephemeral", vec![part], None)
        .is_none());
    ctx.persist(store.as_ref(), persisted.into_iter().collect())
        .await
        .unwrap();

    // Request 1 of the same session replays it; the counter moved on.
    let ctx = prepare(store.as_ref(), id.clone(), PrefixHashes::new(&h[..3]))
        .await
        .unwrap();
    assert_eq!(ctx.request_index, 1);
    let plan = ctx.plan();
    assert_eq!(plan.apply.len(), 1);
    assert_eq!(plan.apply[0].transformer, "memory");

    // Another session (fingerprinted) replays nothing.
    let other = identify(&HeaderMap::new(), &env);
    assert_eq!(other.source, IdSource::Fingerprint);
    let ctx = prepare(store.as_ref(), other, PrefixHashes::new(&h[..3]))
        .await
        .unwrap();
    assert_eq!(ctx.request_index, 0);
    assert!(ctx.plan().apply.is_empty());
    assert!(ctx.plan().stale.is_empty());
}

#[tokio::test]
async fn admin_routes_answer_with_status_and_json() {
    use cachet::session::admin_route;
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
    store
        .append("known", &[insert_note(&history(2), "x", 0)])
        .await
        .unwrap();

    let (status, body) = admin_route(&store, "/sessions", Some("limit=5"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["sessions"][0]["id"], "known");
    let (status, body) = admin_route(&store, "/sessions/known", None).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["context_transforms"], 1);
    let (status, _) = admin_route(&store, "/sessions/unknown", None)
        .await
        .unwrap();
    assert_eq!(status, 404);
    assert!(admin_route(&store, "/metrics", None).await.is_none());
    assert!(admin_route(&store, "/sessions/a/b", None).await.is_none());
}

/// Messages of agent sessions (a tool result, an answer: a few hundred bytes to a few KB
/// each) are most of what the store holds. Once closed, its files take little more than
/// the log and content they hold (1.42 times here): when both were `WITHOUT ROWID` tables,
/// most such rows spilled into overflow pages and the files took 1.86 times as much.
#[tokio::test]
async fn stored_content_takes_little_more_than_its_size_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
    let h = history(2);
    let mut n = 0u64;
    for request in 0..60u64 {
        for session in 0..6 {
            let blobs = (0..3)
                .map(|_| {
                    n += 1;
                    let len = 300 + (n * 7919 % 3700) as usize;
                    // Keys are hashes: each message lands anywhere in its table.
                    let key = message_key(&json!({"role": "user", "content": n}));
                    Blob::canonical(key, vec![b'a' + (n % 26) as u8; len])
                })
                .collect();
            let id = format!("session-{session}");
            store
                .record_next(&id, insert_note(&h, "r", request), blobs)
                .await
                .unwrap();
        }
    }
    let stats = store.stats().await.unwrap();
    assert_eq!(stats.blobs, n);
    store.close().await;
    drop(store);
    let held = stats.entry_bytes + stats.blob_bytes;
    let on_disk = files_size(dir.path());
    assert!(
        (on_disk as f64) < 1.6 * held as f64,
        "{on_disk} bytes on disk for {held} bytes of log and content"
    );
}
