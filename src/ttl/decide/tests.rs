use bytes::Bytes;
use serde_json::{json, Value};

use super::*;
use crate::route::Endpoint;
use crate::session::entry::Conversation;
use crate::session::Entry;
use crate::session::RequestRecord;
use crate::usage::Usage;

/// A session of pi-like turns: each turn is a prompt, `n - 1` tool calls and a final
/// answer (`n` requests). Returns the messages of every request, with its turn.
fn requests(turns: &[usize]) -> Vec<(Vec<Value>, u64)> {
    let mut history: Vec<Value> = Vec::new();
    let mut out = Vec::new();
    for (t, &n) in turns.iter().enumerate() {
        history.push(json!({"role": "user", "content": format!("Task {t}: look at the build.")}));
        for step in 0..n {
            out.push((history.clone(), t as u64));
            if step + 1 == n {
                history.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("Done with task {t}.")}]}));
            } else {
                let id = format!("t{t}_{step}");
                history.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "bash", "input": {"command": "ls"}}]}));
                history.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "Cargo.toml\nsrc\ntests"}]}));
            }
        }
    }
    out
}

fn envelope(messages: &[Value]) -> Envelope {
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1000,
        "system": "You are a careful coding agent. ".repeat(300), "messages": messages});
    crate::providers::parse_envelope(
        Endpoint::Messages,
        Bytes::from(serde_json::to_vec(&body).unwrap()),
    )
    .unwrap()
}

/// The session log of `reqs`, the i-th at `times[i]` (milliseconds).
fn log(reqs: &[(Vec<Value>, u64)], times: &[u64]) -> Vec<Entry> {
    reqs.iter()
        .zip(times)
        .map(|((messages, turn), &time)| {
            Entry::Request(RequestRecord {
                time,
                turn_index: Some(*turn),
                conversation: Conversation::of(&PrefixHashes::new(messages)),
                usage: Some(Usage {
                    cache_read: 2_000,
                    ..Default::default()
                }),
                ..Default::default()
            })
        })
        .collect()
}

/// Times for `turns`: 5 s between tool-loop requests, `pause` between turns.
fn times(turns: &[usize], pause: u64) -> Vec<u64> {
    let mut t = 1_000_000;
    let mut out = Vec::new();
    for (i, &n) in turns.iter().enumerate() {
        if i > 0 {
            t += pause;
        }
        for step in 0..n {
            if step > 0 {
                t += 5_000;
            }
            out.push(t);
        }
    }
    out
}

/// The decision for request `index` of a session with `turns` and `pause` between them.
fn decision(turns: &[usize], pause: u64, index: usize, keep_warm: bool) -> TtlDecision {
    let reqs = requests(turns);
    let times = times(turns, pause);
    let log = crate::session::log::SessionLog::from(log(&reqs[..index], &times[..index]));
    let (messages, _) = &reqs[index];
    let env = envelope(messages);
    let history = PrefixHashes::new(messages);
    decide(
        &env,
        &Inputs {
            log: &log,
            history: &history,
            now_ms: times[index],
            keep_warm_after_secs: keep_warm.then_some(270),
        },
    )
    .unwrap()
}

const MINUTE: u64 = 60_000;

#[test]
fn without_a_pause_seen_every_request_writes_for_five_minutes() {
    let turns = [6, 6, 6];
    for i in 0..6 {
        let d = decision(&turns, 8 * MINUTE, i, false);
        assert_eq!(d.ttl, MarkTtl::FiveMinutes, "request {i}: {d:?}");
        assert_eq!(d.late_reuse, 0.0);
    }
    // Short pauses between turns are seen, and a 5m entry survives them.
    for i in 0..18 {
        let d = decision(&turns, 2 * MINUTE, i, false);
        assert_eq!(d.ttl, MarkTtl::FiveMinutes, "request {i}: {d:?}");
    }
}

#[test]
fn after_a_long_pause_the_request_likely_to_end_its_turn_writes_for_an_hour() {
    let turns = [6, 6, 6];
    // Turn 2 (requests 6..12) after an 8-minute pause: its first request writes the whole
    // prompt again, so 1h would double a large write for a small chance; its last request
    // (the turns so far took 6 requests) writes a few new tokens for a likely late reuse.
    let first = decision(&turns, 8 * MINUTE, 6, false);
    assert_eq!(first.ttl, MarkTtl::FiveMinutes, "{first:?}");
    assert!(first.expected_saving_usd < 0.0);
    let last = decision(&turns, 8 * MINUTE, 11, false);
    assert_eq!(last.ttl, MarkTtl::OneHour, "{last:?}");
    assert!(
        last.late_reuse > 0.5 && last.expected_saving_usd > 0.0,
        "{last:?}"
    );
    // The middle of the loop is unlikely to end the turn.
    let middle = decision(&turns, 8 * MINUTE, 8, false);
    assert!(
        middle.late_reuse < last.late_reuse / 2.0,
        "{middle:?} vs {last:?}"
    );
    // A pause beyond the hour is caught by neither lifetime.
    let gone = decision(&turns, 90 * MINUTE, 11, false);
    assert_eq!(gone.ttl, MarkTtl::FiveMinutes, "{gone:?}");
}

#[test]
fn with_keep_warm_the_late_turns_are_left_to_it() {
    let turns = [6, 6, 6];
    let d = decision(&turns, 8 * MINUTE, 11, true);
    assert_eq!(d.ttl, MarkTtl::FiveMinutes, "{d:?}");
    assert_eq!(d.keep_warm_after_secs, Some(270), "{d:?}");
    // Pause after pause of several hours: a keep-warm would expire unused.
    let d = decision(&[1; 12], 4 * 60 * MINUTE, 11, true);
    assert_eq!(d.keep_warm_after_secs, None, "{d:?}");
}

#[test]
fn the_chance_of_ending_a_turn_follows_the_earlier_turns() {
    let kinds = |turns: &[usize], index: usize| {
        envelope(&requests(turns)[index].0)
            .history_kinds()
            .into_owned()
    };
    // First turn: nothing learned yet.
    assert_eq!(end_chance(&kinds(&[4, 4], 2)), DEFAULT_END_CHANCE);
    // Second turn of 4-request turns: request 4 of 4 very likely ends it, request 2 not.
    let at_end = end_chance(&kinds(&[4, 4], 7));
    let inside = end_chance(&kinds(&[4, 4], 5));
    assert!(at_end > 0.5 && inside < 0.2, "{at_end} {inside}");
}

/// A session of a short first turn and longer ones, with long tool results, on Haiku 4.5
/// (4096 tokens at least are cached) with thinking on a budget when `thinking`: each
/// assistant message carries a thinking block.
fn decision_with(thinking: bool, index: usize) -> TtlDecision {
    let turns = [2, 6, 6];
    let reqs: Vec<(Vec<Value>, u64)> = requests(&turns)
        .into_iter()
        .map(|(messages, turn)| {
            let messages = messages
                .into_iter()
                .map(|mut m| {
                    let from_model = m["role"] == "assistant";
                    if let Some(Value::Array(blocks)) = m.get_mut("content") {
                        for b in blocks.iter_mut() {
                            if b["type"] == "tool_result" {
                                b["content"] = json!("fn main() { run(); }\n".repeat(200));
                            }
                        }
                        if thinking && from_model {
                            blocks.insert(0, json!({"type": "thinking", "thinking": "Next.", "signature": "sig"}));
                        }
                    }
                    m
                })
                .collect();
            (messages, turn)
        })
        .collect();
    let times = times(&turns, 8 * MINUTE);
    // No usage recorded: sizes at the default bytes per token.
    let entries = log(&reqs[..index], &times[..index])
        .into_iter()
        .map(|e| match e {
            Entry::Request(r) => Entry::Request(RequestRecord { usage: None, ..r }),
            other => other,
        })
        .collect::<Vec<_>>();
    let log = crate::session::log::SessionLog::from(entries);
    let (messages, _) = &reqs[index];
    let mut body = json!({"model": "claude-haiku-4-5", "max_tokens": 9000,
        "system": "Be brief.", "messages": messages});
    if thinking {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 4096});
    }
    let env = crate::providers::parse_envelope(
        Endpoint::Messages,
        Bytes::from(serde_json::to_vec(&body).unwrap()),
    )
    .unwrap();
    decide(
        &env,
        &Inputs {
            log: &log,
            history: &PrefixHashes::new(messages),
            now_ms: times[index],
            keep_warm_after_secs: None,
        },
    )
    .unwrap()
}

/// A 1h write at a turn's end is read by the next turn only as far as that turn keeps the
/// prefix: on a model that drops the turn's thinking, the history before the turn's
/// prompt. Here that is below the model's minimum, so nothing a 1h write holds can be read
/// and the request writes for 5 minutes; without thinking the whole prefix is read.
#[test]
fn a_one_hour_write_is_chosen_only_where_the_next_turn_can_read_it() {
    // The last request of the second turn, after an 8-minute pause.
    let plain = decision_with(false, 7);
    assert_eq!(plain.ttl, MarkTtl::OneHour, "{plain:?}");
    let thinking = decision_with(true, 7);
    assert_eq!(thinking.ttl, MarkTtl::FiveMinutes, "{thinking:?}");
    assert!(
        thinking.late_reuse >= 0.5,
        "a late reuse is as likely: {thinking:?}"
    );
}
