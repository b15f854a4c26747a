//! Anthropic cache-marker shaping: preserve, auto and strip (DESIGN §7).

use bytes::Bytes;
use cachet::envelope::{count_markers, reshape, BreakpointMode, CompileOptions, Envelope, Ttl};
use cachet::patch::parse_ops;
use cachet::providers::{Endpoint, Provider};
use serde_json::{json, Value};

const AUTO: BreakpointMode = BreakpointMode::Auto {
    ttl: Ttl::FiveMinutes,
};

fn opts(mode: BreakpointMode) -> CompileOptions {
    CompileOptions {
        breakpoints: mode,
        ..Default::default()
    }
}

/// A long agent session: a big system prompt, a user prompt, `rounds` tool calls and a
/// final user prompt. `mark` lets a test place client markers.
fn session(rounds: usize, mark: impl Fn(&mut Vec<Value>)) -> Bytes {
    let system = "You are a careful coding assistant. Follow the house rules below.\n".to_string()
        + &"Rule: prefer small, reviewable changes and explain every edit briefly. ".repeat(120);
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Refactor the parser module."}]}),
    ];
    for i in 0..rounds {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}.")},
            {"type": "tool_use", "id": format!("t{i}"), "name": "bash", "input": {"command": format!("cat part{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("fn part{i}() {{}}")}]}));
    }
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Done with the refactor."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Now add tests."}]}));
    mark(&mut messages);
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 4096, "system": system,
        "tools": [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}],
        "messages": messages,
    });
    Bytes::from(serde_json::to_vec(&body).unwrap())
}

/// Every marker in prompt order: (where, ttl).
fn markers(payload: &[u8]) -> Vec<(String, String)> {
    let v: Value = serde_json::from_slice(payload).unwrap();
    let mut out = Vec::new();
    let mut visit = |place: String, block: &Value| {
        if let Some(cc) = block.get("cache_control") {
            out.push((
                place,
                cc.get("ttl")
                    .and_then(Value::as_str)
                    .unwrap_or("5m")
                    .to_owned(),
            ));
        }
    };
    for (i, t) in v["tools"].as_array().into_iter().flatten().enumerate() {
        visit(format!("tool {i}"), t);
    }
    for (i, b) in v["system"].as_array().into_iter().flatten().enumerate() {
        visit(format!("system {i}"), b);
    }
    let mut block = 0;
    for (i, m) in v["messages"].as_array().into_iter().flatten().enumerate() {
        for b in m["content"].as_array().into_iter().flatten() {
            visit(format!("message {i} block {block}"), b);
            block += 1;
        }
        if m["content"].is_string() {
            block += 1;
        }
    }
    out
}

fn block_of(place: &str) -> Option<usize> {
    place
        .rsplit("block ")
        .next()
        .and_then(|n| n.parse().ok())
        .filter(|_| place.contains("block"))
}

#[test]
fn auto_marks_system_and_last_message_and_bridges_long_tool_loops() {
    let body = session(40, |_| {});
    let out = reshape(Provider::Anthropic, Endpoint::Messages, body, &opts(AUTO)).unwrap();
    let m = markers(&out);
    assert_eq!(m.len(), 4, "{m:?}");
    assert_eq!(m[0].0, "system 0");
    let last_msg = serde_json::from_slice::<Value>(&out).unwrap()["messages"]
        .as_array()
        .unwrap()
        .len()
        - 1;
    assert!(m[3].0.starts_with(&format!("message {last_msg} ")), "{m:?}");
    let blocks: Vec<usize> = m.iter().filter_map(|(p, _)| block_of(p)).collect();
    for pair in blocks.windows(2) {
        assert!(
            pair[1] - pair[0] <= 18,
            "markers {pair:?} are beyond the lookback"
        );
    }
}

#[test]
fn client_markers_are_reused_and_their_messages_keep_their_bytes() {
    // The client marks the system prompt and the user prompt that started the tool loop.
    let body = session(3, |msgs| {
        msgs[0]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    });
    let env = Envelope::parse(Provider::Anthropic, Endpoint::Messages, body).unwrap();
    let first: Vec<u8> = env.history_raw().next().unwrap().to_vec();
    let out = env.compile(&opts(AUTO));
    assert!(
        memchr::memmem::find(&out, &first).is_some(),
        "the client's marked message is untouched"
    );
    let m = markers(&out);
    assert_eq!(
        m.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        ["system 0", "message 0 block 0", "message 8 block 11"]
    );
}

/// A request the provider would reject (more than 4 markers; a marker on an empty text
/// block) is not silently repaired by `auto`: it goes as the client sent it and gets the
/// provider's own error. `strip`, asked for explicitly, still removes the markers.
#[test]
fn invalid_client_markers_are_not_repaired_by_auto() {
    let body = session(6, |msgs| {
        for m in msgs.iter_mut() {
            if let Some(blocks) = m["content"].as_array_mut() {
                blocks[0]["cache_control"] = json!({"type": "ephemeral"});
            }
        }
    });
    assert!(count_markers(&body) > 4);
    let out = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body.clone(),
        &opts(AUTO),
    )
    .unwrap();
    assert_eq!(out, body, "five markers go as sent");
    let stripped = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body,
        &opts(BreakpointMode::Strip),
    )
    .unwrap();
    assert_eq!(count_markers(&stripped), 0);

    let empty_marked = session(2, |msgs| {
        msgs.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}]}));
        msgs.push(json!({"role": "user", "content": "go on"}));
    });
    let out = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        empty_marked.clone(),
        &opts(AUTO),
    )
    .unwrap();
    assert_eq!(
        out, empty_marked,
        "a marker on an empty text block goes as sent"
    );
}

#[test]
fn no_marker_below_the_minimum_prefix() {
    let body = Bytes::from_static(br#"{"model":"claude-opus-4-6","max_tokens":10,"system":[{"type":"text","text":"short","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#);
    let out = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body.clone(),
        &opts(AUTO),
    )
    .unwrap();
    assert_eq!(count_markers(&out), 0);
    let kept = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body.clone(),
        &opts(BreakpointMode::Preserve),
    )
    .unwrap();
    assert_eq!(kept, body);
}

#[test]
fn a_marker_sits_before_the_injection_point() {
    let mut env =
        Envelope::parse(Provider::Anthropic, Endpoint::Messages, session(4, |_| {})).unwrap();
    let prompt = env.last_user_prompt_index().unwrap();
    let ops = parse_ops(
        &json!([{"op": "messages_insert", "at": "before_last_user_prompt",
                 "messages": [{"role": "custom", "content": "Memory: tabs."}], "invalidateCacheReason": "inject"},
                {"op": "messages_uncached_append", "messages": [{"role": "user", "content": "Time: 10:00"}]}]),
        "memory",
    )
    .unwrap();
    env.apply(&ops, "memory").unwrap();
    let out = env.compile(&opts(AUTO));
    let m = markers(&out);
    assert!(
        m.iter()
            .any(|(p, _)| p.starts_with(&format!("message {} ", prompt - 1))),
        "{m:?}"
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    let msgs = v["messages"].as_array().unwrap();
    assert_eq!(msgs[prompt]["content"], "Memory: tabs.");
    assert_eq!(
        msgs.last().unwrap()["content"],
        "Time: 10:00",
        "the uncached tail stays unmarked"
    );
    assert!(!m
        .iter()
        .any(|(p, _)| p.starts_with(&format!("message {} ", msgs.len() - 1))));
}

#[test]
fn one_hour_markers_never_follow_five_minute_ones() {
    let body = session(2, |msgs| {
        let last = msgs.len() - 1;
        msgs[last]["content"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    });
    let out = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body.clone(),
        &opts(AUTO),
    )
    .unwrap();
    let ttls: Vec<String> = markers(&out).into_iter().map(|(_, t)| t).collect();
    assert!(ttls.iter().all(|t| t == "5m"), "{ttls:?}");
    let out = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body,
        &opts(BreakpointMode::Auto { ttl: Ttl::OneHour }),
    )
    .unwrap();
    let ttls: Vec<String> = markers(&out).into_iter().map(|(_, t)| t).collect();
    assert_eq!(ttls, ["1h", "1h"]);
}

#[test]
fn strip_removes_every_marker_and_touches_only_marked_blocks() {
    let body = session(2, |msgs| {
        msgs[1]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    });
    let env = Envelope::parse(Provider::Anthropic, Endpoint::Messages, body).unwrap();
    let untouched: Vec<Vec<u8>> = env
        .history_raw()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, m)| m.to_vec())
        .collect();
    let out = env.compile(&opts(BreakpointMode::Strip));
    assert_eq!(count_markers(&out), 0);
    for m in untouched {
        assert!(memchr::memmem::find(&out, &m).is_some());
    }
    // The tool_use block next to the stripped one keeps its bytes.
    assert!(memchr::memmem::find(
        &out,
        br#"{"type":"tool_use","id":"t0","name":"bash","input":{"command":"cat part0.rs"}}"#
    )
    .is_some());
}

#[test]
fn thinking_blocks_are_never_marked() {
    let body = session(1, |msgs| {
        let last = msgs.len() - 2;
        msgs[last]["content"] = json!([{"type": "text", "text": "answer"}, {"type": "thinking", "thinking": "t", "signature": "s"}]);
        msgs.pop();
    });
    let out = reshape(Provider::Anthropic, Endpoint::Messages, body, &opts(AUTO)).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let last = v["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(last["content"][1].get("cache_control").is_none());
    assert!(last["content"][0].get("cache_control").is_some());
}

#[test]
fn openai_payloads_are_never_given_markers() {
    let body =
        Bytes::from_static(br#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#);
    let out = reshape(Provider::OpenAi, Endpoint::Chat, body.clone(), &opts(AUTO)).unwrap();
    assert_eq!(out, body);
}

#[test]
fn prefixes_between_the_byte_bounds_are_counted_with_the_tokenizer() {
    // claude-opus-4-6 needs 4096 tokens; both systems are 4096..24576 bytes long, so the
    // tokenizer decides: 1 500 six-byte words are too few tokens, 5 000 three-byte ones pass.
    let body = |word: &str, n: usize| {
        let system = word.repeat(n);
        Bytes::from(
            serde_json::to_vec(
                &json!({"model": "claude-opus-4-6", "max_tokens": 10, "system": system,
                "messages": [{"role": "user", "content": "hi"}]}),
            )
            .unwrap(),
        )
    };
    let short = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body("cache ", 1_500),
        &opts(AUTO),
    )
    .unwrap();
    assert_eq!(count_markers(&short), 0);
    let long = reshape(
        Provider::Anthropic,
        Endpoint::Messages,
        body("ab ", 5_000),
        &opts(AUTO),
    )
    .unwrap();
    assert_eq!(
        markers(&long).first().map(|(p, _)| p.as_str()),
        Some("system 0")
    );
}
