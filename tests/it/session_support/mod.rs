//! Helpers shared by the session tests.
#![allow(dead_code)]

use cachet::patch::ops::Op;
use cachet::session::{Anchor, ContextTransform, Entry, ENTRY_VERSION};
use serde_json::{json, Value};

/// A conversation of `n` messages, alternating user and assistant.
pub fn history(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            if i.is_multiple_of(2) {
                json!({"role": "user", "content": [{"type": "text", "text": format!("request number {i}: please look at file {i}.rs")}]})
            } else {
                json!({"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}: the file looks fine")}]})
            }
        })
        .collect()
}

/// A persisted `messages_insert` made against `history`.
pub fn insert_note(history: &[Value], note: &str, request_index: u64) -> Entry {
    Entry::ContextTransform(ContextTransform {
        version: ENTRY_VERSION,
        time: 1_700_000_000_000 + request_index,
        transformer: "notes".into(),
        reason: "turn_end".into(),
        anchor: Anchor::of(history),
        patch: vec![Op::MessagesInsert {
            at: cachet::patch::Selector::End,
            messages: vec![json!({"role": "user", "content": note})],
            invalidate_cache_reason: Some("a note for later turns".into()),
        }],
        display: None,
        request_index: Some(request_index),
    })
}

/// A persisted system part, anchored at the session's first message.
pub fn system_part(history: &[Value], text: &str) -> Entry {
    Entry::ContextTransform(ContextTransform {
        version: ENTRY_VERSION,
        time: 1_700_000_000_000,
        transformer: "memory".into(),
        reason: "before_request".into(),
        anchor: Anchor::of(history),
        patch: vec![Op::SystemPartSet {
            part_name: "memory".into(),
            text: text.into(),
            before: None,
            after: None,
            invalidate_cache_reason: Some("memory loaded".into()),
        }],
        display: None,
        request_index: Some(0),
    })
}

/// Record a request that sent `messages` (Anthropic Messages) in `session`, after `prior`.
pub async fn record_sent(
    store: &dyn cachet::session::SessionStore,
    session: &str,
    prior: &cachet::session::SessionLog,
    messages: &[Value],
) -> cachet::session::RequestRecord {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64, "messages": messages});
    record_body(store, session, prior, &body, (0, 0)).await
}

/// Record turn `turn` of an agent's session that sends `sent` (with one system prompt and
/// one tool), as the pipeline does: its log loaded, the next request index taken.
pub async fn record_turn(
    store: &dyn cachet::session::SessionStore,
    session: &str,
    sent: &[Value],
    turn: u64,
) -> cachet::session::RequestRecord {
    let system = json!([{"type": "text", "text": "You are a coding agent."}]);
    let tools = json!([{"name": "read", "input_schema": {"type": "object"}}]);
    let body =
        json!({"model": "claude-sonnet-4-5", "system": system, "tools": tools, "messages": sent});
    let prior = store.load(session).await.unwrap();
    let index = store.next_request_index(session).await.unwrap();
    record_body(store, session, &prior, &body, (index, turn)).await
}

/// Record an Anthropic Messages request `body` as request `index` of turn `turn`.
async fn record_body(
    store: &dyn cachet::session::SessionStore,
    session: &str,
    prior: &cachet::session::SessionLog,
    body: &Value,
    (index, turn): (u64, u64),
) -> cachet::session::RequestRecord {
    use cachet::measure::SentRequest;
    use cachet::route::Endpoint;
    let req = SentRequest::from_json(Endpoint::Messages, body, 0).unwrap();
    let history = req.history();
    let draft = cachet::session::RequestDraft {
        time_ms: cachet::session::now_ms(),
        request_index: index,
        turn_index: Some(turn),
        provider: "anthropic",
        endpoint: "messages",
        client: Some("pi"),
        shape: &req.shape,
        history: &history,
        hashes: None,
        usage: None,
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
    cachet::session::record_request(store, session, prior, &draft)
        .await
        .unwrap()
}

/// What a store's files take on disk (the database, and its log while it is open).
pub fn files_size(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// A store's appends say where their first entry landed (the cache in front joins them to
/// its copy of the log there), and a key appended once answers the earlier entries.
pub async fn appends_say_where_they_landed(
    store: &dyn cachet::session::SessionStore,
    session: &str,
) {
    use cachet::session::Appended;
    let h = history(6);
    let notes: Vec<Entry> = (0..4)
        .map(|i| insert_note(&h[..i + 2], &format!("n{i}"), i as u64))
        .collect();
    assert_eq!(store.append(session, &[]).await.unwrap(), None);
    assert_eq!(store.append(session, &notes[..2]).await.unwrap(), Some(0));
    match store.append_once(session, "k", &notes[2..3]).await.unwrap() {
        Appended::Written { at } => assert_eq!(at, 2),
        other => panic!("appended once, answered {other:?}"),
    }
    match store.append_once(session, "k", &notes[3..]).await.unwrap() {
        Appended::Existing(earlier) => assert_eq!(earlier, notes[2..3]),
        other => panic!("a key appended twice, answered {other:?}"),
    }
    assert_eq!(store.append(session, &notes[3..]).await.unwrap(), Some(3));
    assert_eq!(store.load(session).await.unwrap(), notes);
}
