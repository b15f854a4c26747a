use super::*;
use crate::providers::cache_key::message_key;
use crate::session::log::sent_keys;
use serde_json::json;

fn history(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let role = if i.is_multiple_of(2) {
                "user"
            } else {
                "assistant"
            };
            json!({"role": role, "content": format!("message {i}")})
        })
        .collect()
}

/// Record a request with `messages` (the last `tail` of them request-only) after `prior`.
fn record(
    prior: &[Entry],
    index: u64,
    messages: &[Value],
    system: Option<&str>,
    tail: usize,
) -> (RequestRecord, Vec<Blob>) {
    let mut body = json!({"model": "claude-sonnet-4-5", "messages": messages});
    if let Some(system) = system {
        body["system"] = json!(system);
    }
    record_body(prior, index, &body, tail)
}

/// Record the request of `body` after `prior`.
fn record_body(
    prior: &[Entry],
    index: u64,
    body: &Value,
    tail: usize,
) -> (RequestRecord, Vec<Blob>) {
    let env = crate::providers::parse_envelope(
        crate::route::Endpoint::Messages,
        bytes::Bytes::from(body.to_string()),
    )
    .unwrap();
    let shape = PromptShape::of(&env, tail);
    let raw: Vec<bytes::Bytes> = env.history_shared().take(shape.messages.len()).collect();
    let draft = RequestDraft {
        request_index: index,
        turn_index: None,
        time_ms: 0,
        provider: "anthropic",
        endpoint: "messages",
        client: Some("pi"),
        shape: &shape,
        history: &raw,
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
    compact_request(prior, &draft)
}

#[test]
fn later_requests_store_only_new_messages() {
    let system = "You are a coding agent.";
    let first = history(1);
    let (r0, blobs0) = record(&[], 0, &first, Some(system), 0);
    assert_eq!(r0.sent.extends, None);
    assert_eq!(r0.sent.keys.len(), 1);
    assert_eq!(blobs0.len(), 2, "one message and the system prompt's list");

    let log = vec![Entry::Request(r0.clone())];
    let second = history(3);
    let (r1, blobs1) = record(&log, 1, &second, Some(system), 0);
    assert_eq!(r1.sent.extends, Some(0));
    assert_eq!(r1.sent.base, 1);
    assert_eq!(r1.sent.count, 3);
    assert_eq!(r1.sent.keys.len(), 2);
    assert_eq!(r1.system_key, r0.system_key);
    let expected: Vec<MessageKey> = second[1..].iter().map(message_key).collect();
    let mut got: Vec<MessageKey> = blobs1.iter().map(|b| b.key).collect();
    got.retain(|k| expected.contains(k));
    assert_eq!(got, expected);

    let log = vec![Entry::Request(r0), Entry::Request(r1)];
    let all: Vec<MessageKey> = second.iter().map(message_key).collect();
    assert_eq!(sent_keys(&log, 1), Some(all));
}

/// Claude Code and pi send the same tools and system prompt on every request of a session:
/// the latest request's record already stored their lists, so a record carries their keys
/// and no second copy of the lists (each a hex key and a JSON array per tool to build).
#[test]
fn lists_the_latest_request_stored_are_not_built_again() {
    let tools = json!([
        {"name": "read", "description": "Read a file", "input_schema": {"type": "object"}},
        {"name": "bash", "description": "Run a command", "input_schema": {"type": "object"}}
    ]);
    let body = |messages: &[Value], system: &str| {
        json!({
            "model": "claude-sonnet-4-5",
            "system": [{"type": "text", "text": system}],
            "tools": tools,
            "messages": messages,
        })
    };
    let is_list = |r: &RequestRecord, b: &Blob| {
        [&r.tools_key, &r.system_key]
            .into_iter()
            .any(|k| k.as_deref() == Some(hex::encode(b.key).as_str()))
    };
    let (r0, blobs0) = record_body(&[], 0, &body(&history(1), "You are pi."), 0);
    assert_eq!(blobs0.iter().filter(|b| is_list(&r0, b)).count(), 2);

    let mut log = vec![Entry::Request(r0.clone())];
    let (r1, blobs1) = record_body(&log, 1, &body(&history(3), "You are pi."), 0);
    assert_eq!(
        (&r1.tools_key, &r1.system_key),
        (&r0.tools_key, &r0.system_key)
    );
    assert!(r1.tools_key.is_some() && r1.system_key.is_some());
    assert_eq!(blobs1.iter().filter(|b| is_list(&r1, b)).count(), 0);
    assert_eq!(blobs1.len(), 2, "the two new messages only");

    // A changed system prompt is a new list; the tools are still the latest request's.
    log.push(Entry::Request(r1.clone()));
    let (r2, blobs2) = record_body(&log, 2, &body(&history(5), "You are pi. Be brief."), 0);
    assert_eq!(r2.tools_key, r0.tools_key);
    assert_ne!(r2.system_key, r0.system_key);
    let lists: Vec<&Blob> = blobs2.iter().filter(|b| is_list(&r2, b)).collect();
    assert_eq!(lists.len(), 1);
    assert_eq!(Some(hex::encode(lists[0].key)), r2.system_key);
    let named = named_list(&lists[0].stored_bytes().unwrap()).unwrap();
    assert_eq!(named.len(), 1);
}

#[test]
fn a_fork_starts_from_the_newest_request_it_still_extends() {
    let (r0, _) = record(&[], 0, &history(2), None, 0);
    let log = vec![Entry::Request(r0.clone())];
    let (r1, _) = record(&log, 1, &history(6), None, 0);
    let log = vec![Entry::Request(r0), Entry::Request(r1)];

    let mut forked = history(2);
    forked.push(json!({"role": "user", "content": "something else"}));
    let (r2, blobs) = record(&log, 2, &forked, None, 0);
    assert_eq!(r2.sent.extends, Some(0));
    assert_eq!(r2.sent.base, 2);
    assert_eq!(blobs.len(), 1);

    let mut log = log;
    log.push(Entry::Request(r2));
    let keys: Vec<MessageKey> = forked.iter().map(message_key).collect();
    assert_eq!(sent_keys(&log, 2), Some(keys));
}

#[test]
fn an_unrelated_history_is_recorded_whole() {
    let (r0, _) = record(&[], 0, &history(4), None, 0);
    let other = vec![json!({"role": "user", "content": "compacted summary"})];
    let (r1, blobs) = record(&[Entry::Request(r0)], 1, &other, None, 0);
    assert_eq!(r1.sent.extends, None);
    assert_eq!(r1.sent.base, 0);
    assert_eq!(blobs.len(), 1);
}

/// A policy's request-only tail (a date line after the history) must not stop the next
/// request from extending this one: otherwise every request stores its whole history.
#[test]
fn a_request_only_tail_does_not_break_the_delta() {
    let mut sent = history(3);
    sent.push(json!({"role": "user", "content": "Current date and time: 12:00"}));
    let (r0, _) = record(&[], 0, &sent, None, 1);
    assert_eq!((r0.sent.count, r0.tail.len()), (3, 1));
    let mut next = history(5);
    next.push(json!({"role": "user", "content": "Current date and time: 12:01"}));
    let (r1, blobs) = record(&[Entry::Request(r0)], 1, &next, None, 1);
    assert_eq!(r1.sent.extends, Some(0));
    assert_eq!((r1.sent.base, r1.sent.keys.len()), (3, 2));
    assert_eq!(blobs.len(), 2, "only the two new history messages");
}

#[test]
fn missing_base_gives_none() {
    let (r0, _) = record(&[], 0, &history(2), None, 0);
    let (r1, _) = record(&[Entry::Request(r0)], 1, &history(4), None, 0);
    assert_eq!(sent_keys(&[Entry::Request(r1)], 1), None);
    assert_eq!(sent_keys(&[], 1), None);
}

/// A record of a long history (an agent's many small steps) is built and encoded without
/// growing copies: its blob list is allocated at its size, and its JSON in one buffer
/// sized for its keys, not doubled into.
#[test]
fn a_long_history_is_recorded_without_growing_copies() {
    let messages = history(50_000);
    let (record, blobs) = record(&[], 0, &messages, Some("You are a coding agent."), 0);
    assert_eq!(
        blobs.len(),
        50_001,
        "every message and the system prompt's list"
    );
    assert!(
        blobs.capacity() <= blobs.len() + 2,
        "{} blobs held room for {}",
        blobs.len(),
        blobs.capacity()
    );
    let entry = Entry::Request(record);
    let (text, peak) = crate::alloc_meter::peak_during(|| entry.encode());
    assert_eq!(Entry::decode(&text), entry);
    assert!(
        peak <= text.len() + text.len() / 16,
        "{peak} bytes held at once for {} of JSON",
        text.len()
    );
}

/// A repeated message's blob is stored once: the first stays, in order. Finding repeats
/// among a long history's blobs holds less than its keys: a reference to each, not a
/// copy of its 32 bytes (a set of 111,000 keys held 6 MiB at a recorded request's peak).
#[test]
fn repeated_blobs_are_dropped_without_copying_their_keys() {
    let n = 40_000u32;
    let key = |i: u32| crate::providers::cache_key::key_of_bytes(&i.to_le_bytes());
    let mut blobs: Vec<Blob> = (0..n)
        .chain([7, 11, 7])
        .map(|i| Blob::sent(key(i), bytes::Bytes::new()))
        .collect();
    let ((), peak) = crate::alloc_meter::peak_during(|| dedup(&mut blobs));
    let kept: Vec<MessageKey> = blobs.iter().map(|b| b.key).collect();
    assert_eq!(kept, (0..n).map(key).collect::<Vec<_>>());
    let keys = n as usize * std::mem::size_of::<MessageKey>();
    assert!(
        peak < keys,
        "{peak} bytes held to find repeats among {keys} of keys"
    );
}

/// A warmup (a Responses `generate: false`, Codex's first message on each socket) sends no
/// history: the request after it extends the one before it, and its record names only its
/// new messages, not its whole history again.
#[test]
fn a_warmup_between_two_requests_is_no_base() {
    let (r0, _) = record(&[], 0, &history(1), None, 0);
    let (mut warm, _) = record(&[Entry::Request(r0.clone())], 1, &[], None, 0);
    warm.warmup = true;
    let log = vec![Entry::Request(r0), Entry::Request(warm)];
    let (r2, _) = record(&log, 2, &history(3), None, 0);
    assert_eq!(r2.sent.extends, Some(0));
    assert_eq!(r2.sent.keys.len(), 2);
}
