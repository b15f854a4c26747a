//! Placement of each mode by the replay's injection shaper.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::inject_shaper::InjectShaper;
use super::policy_file::InjectSpec;
use super::shaper::Shaper;
use super::trace::{Record, TRACE_VERSION};
use crate::inject::ModeChoice;
use crate::inject::{Mode, SourceSpec};

fn memory_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.md");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn shaper(path: &std::path::Path, mode: ModeChoice) -> InjectShaper {
    InjectShaper::new(vec![InjectSpec {
        id: "t#0".into(),
        source: SourceSpec::File(path.to_path_buf()),
        mode,
        part: "memory".into(),
    }])
}

fn rec(session: &str, messages: Value) -> Record {
    Record {
        v: TRACE_VERSION,
        time_ms: 0,
        session: session.into(),
        provider: "anthropic".into(),
        endpoint: "messages".into(),
        path: "/v1/messages".into(),
        headers: Default::default(),
        body: json!({"model": "claude-sonnet-4-5", "system": "base", "messages": messages}),
        usage: None,
        status: None,
    }
}

fn user(t: &str) -> Value {
    json!({"role": "user", "content": t})
}
fn assistant(t: &str) -> Value {
    json!({"role": "assistant", "content": t})
}
fn texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            c => c[0]["text"].as_str().unwrap_or("").to_string(),
        })
        .collect()
}

const MEM: &str = "<memory>\nfact\n</memory>";

#[test]
fn context_hook_sits_before_the_prompt_and_vanishes_next_turn() {
    let (_d, path) = memory_file("fact");
    let mut s = shaper(&path, ModeChoice::One(Mode::ContextHook));
    let turn2 = rec("s", json!([user("q1"), assistant("a1"), user("q2")]));
    let shaped = s.shape(&turn2).unwrap();
    assert_eq!(texts(&shaped.body), ["q1", "a1", MEM, "q2"]);
    // A breakpoint on the history message before the injection point.
    assert_eq!(
        shaped.body["messages"][1]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
    assert_eq!(shaped.variant.as_deref(), Some("context-hook"));
    let turn3 = rec(
        "s",
        json!([
            user("q1"),
            assistant("a1"),
            user("q2"),
            assistant("a2"),
            user("q3")
        ]),
    );
    assert_eq!(
        texts(&s.shape(&turn3).unwrap().body),
        ["q1", "a1", "q2", "a2", MEM, "q3"]
    );
}

#[test]
fn pinned_stays_at_its_place_until_the_history_is_edited() {
    let (_d, path) = memory_file("fact");
    let mut s = shaper(&path, ModeChoice::One(Mode::Pinned));
    s.shape(&rec("s", json!([user("q1")]))).unwrap();
    let later = s
        .shape(&rec("s", json!([user("q1"), assistant("a1"), user("q2")])))
        .unwrap();
    assert_eq!(texts(&later.body), [MEM, "q1", "a1", MEM, "q2"]);
    // Same content, same bytes: the pinned message of turn 1 is unchanged.
    assert_eq!(later.body["messages"][0], later.body["messages"][3]);
    // The client compacted its history: the turn-2 anchor no longer matches.
    let edited = s
        .shape(&rec(
            "s",
            json!([user("summary"), assistant("a1"), user("q2")]),
        ))
        .unwrap();
    assert_eq!(texts(&edited.body), [MEM, "summary", "a1", "q2"]);
}

#[test]
fn system_prompt_and_tail_placements() {
    let (_d, path) = memory_file("fact\n");
    let mut s = shaper(&path, ModeChoice::One(Mode::SystemPrompt));
    let shaped = s.shape(&rec("s", json!([user("q1")]))).unwrap();
    assert_eq!(
        shaped.body["system"],
        json!([{"type": "text", "text": "base"}, {"type": "text", "text": MEM}])
    );
    let mut s = shaper(&path, ModeChoice::One(Mode::Tail));
    let shaped = s.shape(&rec("s", json!([user("q1")]))).unwrap();
    assert_eq!(texts(&shaped.body), ["q1", MEM]);
    assert_eq!(shaped.uncached_tail, 1);
}

#[test]
fn content_is_fetched_once_per_turn() {
    let (_d, path) = memory_file("fact");
    let mut s = shaper(&path, ModeChoice::One(Mode::ContextHook));
    s.shape(&rec("s", json!([user("q1")]))).unwrap();
    std::fs::write(&path, "changed").unwrap();
    // A tool-loop call of the same turn keeps the turn's content…
    let same_turn = rec(
        "s",
        json!([
            user("q1"),
            assistant("a"),
            json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]})
        ]),
    );
    assert_eq!(texts(&s.shape(&same_turn).unwrap().body)[0], MEM);
    // …and the next user prompt reads the file again.
    let next = rec("s", json!([user("q1"), assistant("a"), user("q2")]));
    assert_eq!(
        texts(&s.shape(&next).unwrap().body)[2],
        "<memory>\nchanged\n</memory>"
    );
}

#[test]
fn ab_keeps_each_session_in_one_arm_and_failures_inject_nothing() {
    let (_d, path) = memory_file("fact");
    let arms = vec![(Mode::SystemPrompt, 1), (Mode::Pinned, 1)];
    let mut s = shaper(&path, ModeChoice::Ab(arms.clone()));
    for n in 0..20 {
        let session = format!("s{n}");
        let expected = crate::inject::choose_arm(&session, &arms).map(|m| m.label().to_string());
        for turn in [
            json!([user("q1")]),
            json!([user("q1"), assistant("a"), user("q2")]),
        ] {
            assert_eq!(s.shape(&rec(&session, turn)).unwrap().variant, expected);
        }
    }
    std::fs::remove_file(&path).unwrap();
    let mut s = shaper(&path, ModeChoice::One(Mode::ContextHook));
    let shaped = s.shape(&rec("s", json!([user("q1")]))).unwrap();
    assert_eq!(texts(&shaped.body), ["q1"]);
    assert_eq!(s.source_errors.len(), 1);
}
