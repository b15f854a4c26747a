//! Thinking retention on Claude Code's conversation shape. Sources:
//! - platform.claude.com/docs/en/build-with-claude/extended-thinking: by default "Claude
//!   Opus 4.5 and later Opus models keep all prior thinking blocks; Claude Opus 4.1 and
//!   earlier keep only the last assistant turn's thinking. Claude Sonnet 4.6 and later keep
//!   all; Claude Sonnet 4.5 and earlier keep only the last turn. All Haiku models through
//!   Claude Haiku 4.5 keep only the last turn."
//! - platform.claude.com/docs/en/build-with-claude/context-editing: the
//!   `clear_thinking_20251015` edit takes `keep: "all"` or
//!   `keep: {"type": "thinking_turns", "value": N}`; "when thinking blocks are cleared, the
//!   cache is invalidated at the point where clearing occurs".

use serde_json::{json, Value};

use super::{Accounting, CacheModel};
use crate::route::Endpoint;

fn words(tag: &str, n: usize) -> String {
    format!(
        "{tag}: {}",
        "the build step resolves every path first ".repeat(n)
    )
}

fn marked(mut block: Value) -> Value {
    block["cache_control"] = json!({"type": "ephemeral"});
    block
}

/// Claude Code's two-turn session, one tool call per turn; the turn-1 tool result comes
/// with an appended reminder text, as Claude Code sends it.
fn messages() -> Vec<Value> {
    vec![
        json!({"role": "user", "content": [{"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
            {"type": "text", "text": "Fix the failing build."}]}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": words("t1", 40), "signature": "s1"},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": words("out", 60)},
            {"type": "text", "text": "<system-reminder>todo list is empty</system-reminder>"}]}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": words("t2", 40), "signature": "s2"},
            {"type": "text", "text": "Fixed: the path was relative."}]}),
        json!({"role": "user", "content": [{"type": "text", "text": "Now run the tests."}]}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": words("t3", 40), "signature": "s3"},
            {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "make test"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": words("tests", 60)}]}),
    ]
}

/// The request sending the first `n` messages, the last block of the last one marked.
fn request(model: &str, n: usize, context_management: Option<Value>) -> Value {
    let mut history: Vec<Value> = messages()[..n].to_vec();
    if let Some(Value::Array(blocks)) = history.last_mut().and_then(|m| m.get_mut("content")) {
        if let Some(last) = blocks.last_mut() {
            *last = marked(last.clone());
        }
    }
    let mut req = json!({
        "model": model, "max_tokens": 32000, "thinking": {"type": "adaptive"},
        "system": [marked(json!({"type": "text", "text": words("system", 700)}))],
        "messages": history,
    });
    if let Some(cm) = context_management {
        req["context_management"] = cm;
    }
    req
}

/// The four requests of the session (turn 1: 1 and 3 messages; turn 2: 5 and 7).
fn session(model: &str, cm: Option<Value>) -> Vec<Accounting> {
    let mut cache = CacheModel::default();
    [1, 3, 5, 7]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            cache
                .account(
                    Endpoint::Messages,
                    &request(model, n, cm.clone()),
                    i as u64 * 10_000,
                )
                .unwrap()
        })
        .collect()
}

const OPUS_5_5: &str = "claude-opus-5-5";
const SONNET_4_5: &str = "claude-sonnet-4-5";

fn keep_all() -> Option<Value> {
    Some(json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}))
}

fn keep_turns(n: u64) -> Option<Value> {
    Some(json!({"edits": [{"type": "clear_thinking_20251015",
        "keep": {"type": "thinking_turns", "value": n}}]}))
}

/// A model that keeps earlier thinking reads all of turn 1 on the first request of turn
/// 2; one that keeps only the current turn's drops turn 1's thinking, so only the system
/// prompt and the first user message still match.
#[test]
fn the_first_request_of_a_new_turn_reads_turn_one_only_where_thinking_is_kept() {
    let opus = session(OPUS_5_5, None);
    let sonnet = session(SONNET_4_5, None);
    assert_eq!(
        opus[2].cache_read, opus[1].input_tokens,
        "Opus 5.5 reads all of turn 1"
    );
    assert_eq!(
        sonnet[2].cache_read, sonnet[0].input_tokens,
        "Sonnet 4.5 reads up to the first prompt"
    );
    assert!(opus[2].cache_read > sonnet[2].cache_read);
}

/// In turn 2's tool loop, turn 1's thinking stays dropped: it is not put back, so the
/// request reads what the first request of turn 2 wrote.
#[test]
fn a_tool_loop_does_not_put_earlier_turns_thinking_back() {
    let sonnet = session(SONNET_4_5, None);
    assert_eq!(sonnet[3].cache_read, sonnet[2].input_tokens);
    let opus = session(OPUS_5_5, None);
    assert_eq!(opus[3].cache_read, opus[2].input_tokens);
    assert!(
        opus[3].input_tokens > sonnet[3].input_tokens,
        "turn 1's thinking is only in Opus's prompt"
    );
}

/// Claude Code's `[tool_result, text]` message is still the tool loop: the current turn's
/// thinking is kept on every model.
#[test]
fn a_tool_result_with_appended_text_is_not_a_new_turn() {
    let opus = session(OPUS_5_5, None);
    let sonnet = session(SONNET_4_5, None);
    assert_eq!(sonnet[1].input_tokens, opus[1].input_tokens);
    assert_eq!(sonnet[1].cache_read, sonnet[0].input_tokens);
}

/// `context_management` decides over the model's default, both ways.
#[test]
fn context_management_overrides_the_model_default() {
    let opus_default = session(OPUS_5_5, None);
    let sonnet_all = session(SONNET_4_5, keep_all());
    assert_eq!(sonnet_all[2].cache_read, sonnet_all[1].input_tokens);
    assert_eq!(sonnet_all[3].input_tokens, opus_default[3].input_tokens);

    let opus_one = session(OPUS_5_5, keep_turns(1));
    let sonnet_default = session(SONNET_4_5, None);
    assert_eq!(opus_one[2].cache_read, opus_one[0].input_tokens);
    assert_eq!(opus_one[3].input_tokens, sonnet_default[3].input_tokens);

    // Two turns: turn 1's thinking survives into turn 2.
    let sonnet_two = session(SONNET_4_5, keep_turns(2));
    assert_eq!(sonnet_two[2].cache_read, sonnet_two[1].input_tokens);
}

#[test]
fn retention_follows_the_documented_defaults() {
    use super::thinking::{retention, Keep};
    let req = |model: &str, thinking: Value| {
        json!({"model": model, "thinking": thinking})
            .as_object()
            .unwrap()
            .clone()
    };
    let on = json!({"type": "adaptive"});
    for model in [
        "claude-opus-4-5",
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "claude-opus-5",
        "claude-opus-5-5",
        "claude-sonnet-5-5",
    ] {
        assert_eq!(
            retention(&req(model, on.clone()), model),
            Some(Keep::All),
            "{model}"
        );
    }
    for model in [
        "claude-opus-4-1",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "claude-3-7-sonnet-20250219",
    ] {
        assert_eq!(
            retention(&req(model, on.clone()), model),
            Some(Keep::Turns(1)),
            "{model}"
        );
    }
    assert_eq!(
        retention(&req(SONNET_4_5, json!({"type": "disabled"})), SONNET_4_5),
        None
    );
    assert_eq!(retention(&req(SONNET_4_5, Value::Null), SONNET_4_5), None);
}
