use super::*;
use crate::session::normalize::message_key;
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

fn draft<'a>(index: u64, sent: &'a [Value], system: Option<&'a Value>) -> RequestDraft<'a> {
    RequestDraft {
        request_index: index,
        turn_index: None,
        model: "claude-sonnet-4-5",
        provider: "anthropic",
        endpoint: "messages",
        client: Some("pi"),
        sent,
        system,
        tools: None,
        usage: None,
        status: Some(200),
        breaks: None,
        variant: None,
    }
}

#[test]
fn later_requests_store_only_new_messages() {
    let system = json!("You are a coding agent.");
    let first = history(1);
    let (r0, blobs0) = compact_request(&SessionLog::new(), &draft(0, &first, Some(&system)));
    assert_eq!(r0.sent.extends, None);
    assert_eq!(r0.sent.keys.len(), 1);
    assert_eq!(blobs0.len(), 2, "one message and the system prompt");

    let log = SessionLog::from(vec![Entry::Request(r0.clone())]);
    let second = history(3);
    let (r1, blobs1) = compact_request(&log, &draft(1, &second, Some(&system)));
    assert_eq!(r1.sent.extends, Some(0));
    assert_eq!(r1.sent.base, 1);
    assert_eq!(r1.sent.count, 3);
    assert_eq!(r1.sent.keys.len(), 2);
    assert_eq!(r1.system_key, r0.system_key);
    let expected: Vec<MessageKey> = second[1..].iter().map(message_key).collect();
    let mut got: Vec<MessageKey> = blobs1.iter().map(|b| b.key).collect();
    got.retain(|k| expected.contains(k));
    assert_eq!(got, expected);

    let log = SessionLog::from(vec![Entry::Request(r0), Entry::Request(r1)]);
    let all: Vec<MessageKey> = second.iter().map(message_key).collect();
    assert_eq!(sent_keys(&log, 1), Some(all));
}

#[test]
fn a_fork_starts_from_the_newest_request_it_still_extends() {
    let (r0, _) = compact_request(&SessionLog::new(), &draft(0, &history(2), None));
    let log = SessionLog::from(vec![Entry::Request(r0.clone())]);
    let (r1, _) = compact_request(&log, &draft(1, &history(6), None));
    let log = SessionLog::from(vec![Entry::Request(r0), Entry::Request(r1)]);

    let mut forked = history(2);
    forked.push(json!({"role": "user", "content": "something else"}));
    let (r2, blobs) = compact_request(&log, &draft(2, &forked, None));
    assert_eq!(r2.sent.extends, Some(0));
    assert_eq!(r2.sent.base, 2);
    assert_eq!(blobs.len(), 1);

    let log = log.extended(vec![Entry::Request(r2)]);
    let keys: Vec<MessageKey> = forked.iter().map(message_key).collect();
    assert_eq!(sent_keys(&log, 2), Some(keys));
}

#[test]
fn an_unrelated_history_is_recorded_whole() {
    let (r0, _) = compact_request(&SessionLog::new(), &draft(0, &history(4), None));
    let other = vec![json!({"role": "user", "content": "compacted summary"})];
    let (r1, blobs) = compact_request(
        &SessionLog::from(vec![Entry::Request(r0)]),
        &draft(1, &other, None),
    );
    assert_eq!(r1.sent.extends, None);
    assert_eq!(r1.sent.base, 0);
    assert_eq!(blobs.len(), 1);
}

#[test]
fn missing_base_gives_none() {
    let (r0, _) = compact_request(&SessionLog::new(), &draft(0, &history(2), None));
    let (r1, _) = compact_request(
        &SessionLog::from(vec![Entry::Request(r0)]),
        &draft(1, &history(4), None),
    );
    assert_eq!(
        sent_keys(&SessionLog::from(vec![Entry::Request(r1)]), 1),
        None
    );
    assert_eq!(sent_keys(&SessionLog::new(), 1), None);
}
