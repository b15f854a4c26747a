//! Anthropic cache-marker shaping: preserve, auto and strip (DESIGN §7).

use bytes::Bytes;
use cachet::envelope::{BreakpointMode, CompileOptions, Ttl};
use cachet::patch::parse_ops;
use cachet::providers::anthropic::blocks::count_markers;
use cachet::providers::reshape;
use cachet::route::Endpoint;
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

/// A long tool loop adds two blocks per request: the marker on the last block reaches the
/// previous request's entry, so `auto` needs no intermediate marker (one would read
/// nothing more).
#[test]
fn auto_marks_system_and_last_message_and_no_marker_that_reads_nothing_more() {
    let body = session(40, |_| {});
    let out = reshape(Endpoint::Messages, body, &opts(AUTO)).unwrap();
    let m = markers(&out);
    let last_msg = serde_json::from_slice::<Value>(&out).unwrap()["messages"]
        .as_array()
        .unwrap()
        .len()
        - 1;
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(m[0].0, "system 0");
    assert!(m[1].0.starts_with(&format!("message {last_msg} ")), "{m:?}");
}

/// A request that adds more blocks than the provider's 20-block lookback (a step with
/// twelve parallel tool calls: 12 tool_use and 12 tool_result blocks) gets a marker where
/// the previous request ended, and reads that request's entry again; without it only the
/// system prompt would be read. Lookback of 20 blocks: docs.claude.com prompt caching,
/// "the system automatically checks for cache hits at all previous content block
/// boundaries (up to approximately 20 blocks before your explicit breakpoint)".
#[test]
fn a_step_beyond_the_lookback_gets_a_marker_where_the_previous_request_ended() {
    use cachet::cache_model::{CacheModel, CacheModelConfig};
    let step = |parallel: usize| -> Vec<Value> {
        let calls: Vec<Value> = (0..parallel)
            .map(|i| json!({"type": "tool_use", "id": format!("p{i}"), "name": "bash", "input": {"command": format!("cat f{i}.rs")}}))
            .collect();
        let results: Vec<Value> = (0..parallel)
            .map(|i| json!({"type": "tool_result", "tool_use_id": format!("p{i}"), "content": format!("fn f{i}() {{ /* body {i} */ }}")}))
            .collect();
        vec![
            json!({"role": "assistant", "content": calls}),
            json!({"role": "user", "content": results}),
        ]
    };
    let request = |messages: &[Value]| -> Bytes {
        let system = "You are a careful coding assistant. ".repeat(200);
        Bytes::from(serde_json::to_vec(&json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": system, "tools": [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}],
            "messages": messages})).unwrap())
    };
    let mut history = vec![json!({"role": "user", "content": "Read every file of the crate."})];
    history.extend(step(1));
    let first = reshape(Endpoint::Messages, request(&history), &opts(AUTO)).unwrap();
    history.extend(step(12));
    let second = reshape(Endpoint::Messages, request(&history), &opts(AUTO)).unwrap();
    let m = markers(&second);
    // Blocks: message 0 (1), message 1 (1), message 2 (1): the previous request ended at block 2.
    assert!(m.iter().any(|(p, _)| p == "message 2 block 2"), "{m:?}");
    assert_eq!(m.len(), 3, "{m:?}");

    let account = |bodies: &[&Bytes]| {
        let mut cache = CacheModel::new(CacheModelConfig::default());
        let mut last = None;
        for (i, b) in bodies.iter().enumerate() {
            let v: Value = serde_json::from_slice(b).unwrap();
            last = Some(
                cache
                    .account(Endpoint::Messages, &v, 1_000 + i as u64 * 1_000)
                    .unwrap(),
            );
        }
        last.unwrap()
    };
    let previous = account(&[&first]);
    let bridged = account(&[&first, &second]);
    assert_eq!(
        bridged.cache_read,
        previous.input_tokens - previous.uncached()
    );
    // The same request without that marker reads only the system prompt.
    let mut unbridged: Value = serde_json::from_slice(&second).unwrap();
    unbridged["messages"][2]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    let unbridged = Bytes::from(serde_json::to_vec(&unbridged).unwrap());
    let without = account(&[&first, &unbridged]);
    assert!(
        without.cache_read < bridged.cache_read,
        "{without:?} vs {bridged:?}"
    );
}

/// A turn's first request on a model that drops the previous turn's thinking (Sonnet 4.5
/// with thinking on): that turn's requests stored its messages with their thinking, so
/// only the history before its first thinking block still matches. `kept_history` says
/// how much; `auto` marks the end of it, past the lookback from the new prompt, and the
/// request reads the previous turn's prompt and what came before instead of the system
/// prompt alone.
#[test]
fn after_a_turn_whose_thinking_is_dropped_the_marker_goes_where_the_kept_history_ends() {
    use cachet::cache_model::{CacheModel, CacheModelConfig};
    let system = "You are a careful coding assistant. ".repeat(200);
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Explain the parser. ".repeat(60)}]}),
    ];
    for i in 0..12 {
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": format!("Read part {i}."), "signature": format!("s{i}")},
            {"type": "tool_use", "id": format!("t{i}"), "name": "bash", "input": {"command": format!("cat part{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("fn part{i}() {{}}")}]}));
    }
    let body = |messages: &[Value]| {
        json!({"model": "claude-sonnet-4-5", "max_tokens": 8192,
            "thinking": {"type": "enabled", "budget_tokens": 4096}, "system": system,
            "tools": [{"name": "bash", "description": "Run a command.", "input_schema": {"type": "object"}}],
            "messages": messages})
    };
    let last_of_turn = reshape(
        Endpoint::Messages,
        Bytes::from(serde_json::to_vec(&body(&messages)).unwrap()),
        &opts(AUTO),
    )
    .unwrap();
    messages.push(json!({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Done.", "signature": "s"}, {"type": "text", "text": "It parses."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Now add tests."}]}));
    let next = Bytes::from(serde_json::to_vec(&body(&messages)).unwrap());
    let with = |kept_history| {
        reshape(
            Endpoint::Messages,
            next.clone(),
            &CompileOptions {
                kept_history,
                ..opts(AUTO)
            },
        )
        .unwrap()
    };
    let bridged = with(Some(1));
    assert!(
        markers(&bridged)
            .iter()
            .any(|(p, _)| p == "message 0 block 0"),
        "{:?}",
        markers(&bridged)
    );
    let read = |second: &Bytes| {
        let mut cache = CacheModel::new(CacheModelConfig::default());
        for (i, b) in [&last_of_turn, second].iter().enumerate() {
            let v: Value = serde_json::from_slice(b).unwrap();
            let a = cache
                .account(Endpoint::Messages, &v, 1_000 + i as u64 * 1_000)
                .unwrap();
            if i == 1 {
                return a.cache_read;
            }
        }
        unreachable!()
    };
    let system_only = read(&with(None));
    assert!(
        read(&bridged) > system_only + 200,
        "{} vs {system_only}",
        read(&bridged)
    );
}

#[test]
fn client_markers_are_reused_and_their_messages_keep_their_bytes() {
    // The client marks the system prompt and the user prompt that started the tool loop.
    let body = session(3, |msgs| {
        msgs[0]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    });
    let env = cachet::providers::parse_envelope(Endpoint::Messages, body).unwrap();
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
    let out = reshape(Endpoint::Messages, body.clone(), &opts(AUTO)).unwrap();
    assert_eq!(out, body, "five markers go as sent");
    let stripped = reshape(Endpoint::Messages, body, &opts(BreakpointMode::Strip)).unwrap();
    assert_eq!(count_markers(&stripped), 0);

    let empty_marked = session(2, |msgs| {
        msgs.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}]}));
        msgs.push(json!({"role": "user", "content": "go on"}));
    });
    let out = reshape(Endpoint::Messages, empty_marked.clone(), &opts(AUTO)).unwrap();
    assert_eq!(
        out, empty_marked,
        "a marker on an empty text block goes as sent"
    );
}

#[test]
fn no_marker_below_the_minimum_prefix() {
    let body = Bytes::from_static(br#"{"model":"claude-opus-4-6","max_tokens":10,"system":[{"type":"text","text":"short","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#);
    let out = reshape(Endpoint::Messages, body.clone(), &opts(AUTO)).unwrap();
    assert_eq!(count_markers(&out), 0);
    let kept = reshape(
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
        cachet::providers::parse_envelope(Endpoint::Messages, session(4, |_| {})).unwrap();
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
    let out = reshape(Endpoint::Messages, body.clone(), &opts(AUTO)).unwrap();
    let ttls: Vec<String> = markers(&out).into_iter().map(|(_, t)| t).collect();
    assert!(ttls.iter().all(|t| t == "5m"), "{ttls:?}");
    let out = reshape(
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
    let env = cachet::providers::parse_envelope(Endpoint::Messages, body).unwrap();
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
    let out = reshape(Endpoint::Messages, body, &opts(AUTO)).unwrap();
    let v: Value = serde_json::from_slice(&out).unwrap();
    let last = v["messages"].as_array().unwrap().last().unwrap().clone();
    assert!(last["content"][1].get("cache_control").is_none());
    assert!(last["content"][0].get("cache_control").is_some());
}

#[test]
fn openai_payloads_before_gpt_5_6_are_never_given_markers() {
    let body =
        Bytes::from_static(br#"{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}"#);
    let out = reshape(Endpoint::Chat, body.clone(), &opts(AUTO)).unwrap();
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
    let short = reshape(Endpoint::Messages, body("cache ", 1_500), &opts(AUTO)).unwrap();
    assert_eq!(count_markers(&short), 0);
    let long = reshape(Endpoint::Messages, body("ab ", 5_000), &opts(AUTO)).unwrap();
    assert_eq!(
        markers(&long).first().map(|(p, _)| p.as_str()),
        Some("system 0")
    );
}

/// Claude Code marks `system[1]`, `system[2]` and its last message with 5m markers. A 1h
/// request lifts them to 1h, editing only their `ttl` (so the 1h marker on the last block
/// is valid: "cache entries with longer TTL must appear before shorter TTLs", docs.claude.com
/// prompt caching, mixing TTLs); everything else keeps its bytes.
#[test]
fn a_one_hour_request_lifts_claude_codes_own_markers() {
    let body = json!({"model": "claude-opus-5-5", "max_tokens": 32000, "stream": true,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.330.c4f; cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK.", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "You are an agent working with the user. ".repeat(400), "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "Read", "description": "Reads a file from the local filesystem. ".repeat(200), "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "List the files in this folder."}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "a"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no such file", "cache_control": {"type": "ephemeral"}},
                                         {"type": "text", "text": "<system-reminder>todo list empty</system-reminder>"}]}]});
    let body = Bytes::from(serde_json::to_vec(&body).unwrap());
    let five = reshape(Endpoint::Messages, body.clone(), &opts(AUTO)).unwrap();
    assert!(
        markers(&five).iter().all(|(_, t)| t == "5m"),
        "{:?}",
        markers(&five)
    );
    let hour = reshape(
        Endpoint::Messages,
        body.clone(),
        &opts(BreakpointMode::Auto { ttl: Ttl::OneHour }),
    )
    .unwrap();
    let m = markers(&hour);
    assert!(m.len() >= 3 && m.iter().all(|(_, t)| t == "1h"), "{m:?}");
    assert!(m.iter().any(|(p, _)| p == "system 1"), "{m:?}");
    // Only the markers changed: removing every `"ttl":"1h"` and the markers cachet added
    // gives back the client's bytes.
    let text = String::from_utf8(hour.to_vec()).unwrap();
    assert!(text.contains(r#"{"type":"text","text":"You are a Claude agent, built on Anthropic's Claude Agent SDK.","cache_control":{"type":"ephemeral","ttl":"1h"}}"#));
    let original = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(
        text.replace(r#","ttl":"1h""#, "")
            .replace(r#","cache_control":{"type":"ephemeral"}}]}]"#, "}]}]"),
        original.replace(r#","cache_control":{"type":"ephemeral"}}]}]"#, "}]}]")
    );
}

/// GPT-5.6 and later write at the end of the prompt and at explicit breakpoints
/// (openai-python `PromptCacheOptions`: "implicit: one implicit breakpoint ... and up to
/// three explicit ones"; "explicit: OpenAI does not create an implicit breakpoint and
/// writes up to the latest four explicit breakpoints. If there are no explicit
/// breakpoints, the request does not use prompt caching"). `auto` adds breakpoints where
/// the end of the prompt is not what the next request reuses: before a request-only tail,
/// in explicit mode, and at the end of the system prompt that other conversations share.
#[test]
fn gpt_5_6_auto_breakpoints_read_what_the_end_of_the_prompt_alone_does_not() {
    use cachet::cache_model::{CacheModel, CacheModelConfig};
    let system = "You are a coding agent. Follow the project's rules. ".repeat(200);
    let chat = |history: &[Value], extra: Value| -> Value {
        let mut messages = vec![json!({"role": "system", "content": system})];
        messages.extend(history.iter().cloned());
        let mut body = json!({"model": "gpt-5.6", "messages": messages});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    // A policy's request-only tail: the time, different on every request.
    let shape = |body: &Value, tail: Option<&str>, mode: BreakpointMode| -> Value {
        let mut env = cachet::providers::parse_envelope(
            Endpoint::Chat,
            Bytes::from(serde_json::to_vec(body).unwrap()),
        )
        .unwrap();
        if let Some(t) = tail {
            let ops = parse_ops(
                &json!([{"op": "messages_uncached_append", "messages": [{"role": "user", "content": t}]}]),
                "clock",
            )
            .unwrap();
            env.apply(&ops, "clock").unwrap();
        }
        serde_json::from_slice(&env.compile_with_markers(&opts(mode)).to_bytes()).unwrap()
    };
    let reads = |bodies: &[Value]| -> Vec<u64> {
        let mut cache = CacheModel::new(CacheModelConfig::default());
        bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                cache
                    .account(Endpoint::Chat, b, 1_000 * i as u64)
                    .unwrap()
                    .cache_read
            })
            .collect()
    };
    let first = vec![json!({"role": "user", "content": "Read the parser. ".repeat(100)})];
    let mut second = first.clone();
    second.push(json!({"role": "assistant", "content": "It reads tokens."}));
    second.push(json!({"role": "user", "content": "And the lexer?"}));

    // A tail after the history: the implicit end includes it, so nothing is read again.
    for (mode, expect_read) in [(BreakpointMode::Preserve, false), (AUTO, true)] {
        let a = shape(&chat(&first, json!({})), Some("Time: 10:00"), mode);
        let b = shape(&chat(&second, json!({})), Some("Time: 10:01"), mode);
        let r = reads(&[a, b]);
        assert_eq!(r[1] > 0, expect_read, "{mode:?}: {r:?}");
    }
    // Explicit mode without breakpoints caches nothing; `auto` gives it breakpoints.
    let explicit = json!({"prompt_cache_options": {"mode": "explicit"}});
    let plain = reads(&[
        chat(&first, explicit.clone()),
        chat(&second, explicit.clone()),
    ]);
    assert_eq!(plain, [0, 0]);
    let auto = reads(&[
        shape(&chat(&first, explicit.clone()), None, AUTO),
        shape(&chat(&second, explicit), None, AUTO),
    ]);
    assert!(auto[1] > 0, "{auto:?}");
    // Another conversation with the same system prompt reads it.
    let other = vec![json!({"role": "user", "content": "Something else entirely."})];
    let r = reads(&[
        shape(&chat(&first, json!({})), None, AUTO),
        shape(&chat(&other, json!({})), None, AUTO),
    ]);
    let r_plain = reads(&[chat(&first, json!({})), chat(&other, json!({}))]);
    assert!(r[1] > 0 && r_plain[1] == 0, "auto {r:?}, plain {r_plain:?}");
}

/// `session`'s messages, continued as a client that keeps its messages after a server-side
/// compaction sends them (the provider's "simplest approach": append the whole answer,
/// compaction block and all), with `summary` as the compaction's summary. With `calls`, the
/// compacting answer also asks for that many tools at once, and the request ends with their
/// results.
fn compacted(rounds: usize, system: &str, summary: &str, calls: usize) -> Value {
    let mut body: Value = serde_json::from_slice(&session(rounds, |_| {})).unwrap();
    body["system"] = json!(system);
    let messages = body["messages"].as_array_mut().unwrap();
    let prompt = messages.pop().unwrap();
    messages.push(json!({"role": "user", "content": "Keep going."}));
    let mut answer = vec![
        json!({"type": "compaction", "content": summary}),
        json!({"type": "text", "text": "Continuing from the summary."}),
    ];
    let mut results = Vec::new();
    for i in 0..calls {
        answer.push(
            json!({"type": "tool_use", "id": format!("c{i}"), "name": "bash",
                           "input": {"command": format!("wc -l part{i}.rs")}}),
        );
        results.push(
            json!({"type": "tool_result", "tool_use_id": format!("c{i}"),
                            "content": format!("{i} part{i}.rs")}),
        );
    }
    messages.push(json!({"role": "assistant", "content": answer}));
    if calls == 0 {
        messages.push(prompt);
    } else {
        messages.push(json!({"role": "user", "content": results}));
    }
    body
}

/// `body` as `auto` breakpoints send it.
fn auto_reshaped(body: &Value) -> Bytes {
    let bytes = Bytes::from(serde_json::to_vec(body).unwrap());
    reshape(Endpoint::Messages, bytes, &opts(AUTO)).unwrap()
}

/// Where each marker sits, as (message, block), and the compaction block's place.
fn message_markers(out: &[u8]) -> (Vec<(usize, usize)>, (usize, usize)) {
    let v: Value = serde_json::from_slice(out).unwrap();
    let mut marks = Vec::new();
    let mut compaction = None;
    for (i, m) in v["messages"].as_array().unwrap().iter().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            if b.get("cache_control").is_some() {
                marks.push((i, j));
            }
            if b["type"] == "compaction" {
                compaction = Some((i, j));
            }
        }
    }
    (marks, compaction.expect("a compaction block"))
}

/// "When the API receives a `compaction` block, all content blocks before it are ignored"
/// (platform.claude.com, Compaction, "Passing compaction blocks back"; the rule is
/// `providers::anthropic::compaction_start`). A marker there reads and writes nothing and
/// takes one of the four. The compacting answer here asks for twelve tools at once, so the
/// request adds more blocks than the 20-block lookback: `auto` would mark where the previous
/// request ended, which is now history the provider ignores.
#[test]
fn auto_places_no_marker_on_history_a_compaction_left_behind() {
    let system = "You are a careful coding assistant. ".repeat(300);
    let summary = "Summary: the parser was refactored. ".repeat(40);
    let body = compacted(30, &system, &summary, 12);
    let out = auto_reshaped(&body);
    let (marks, compaction) = message_markers(&out);
    assert!(
        !marks.is_empty(),
        "the prompt read after the compaction is marked"
    );
    assert!(
        marks.iter().all(|m| *m >= compaction),
        "a marker on a block the provider ignores: {marks:?}, compaction at {compaction:?}"
    );
}

/// The minimum cacheable prefix is judged on what the provider reads: a short system prompt
/// and a short summary stay below it however long the ignored history before them is.
#[test]
fn the_minimum_prefix_after_a_compaction_counts_only_what_the_provider_reads() {
    let body = compacted(60, "Be brief.", "Summary: a parser.", 0);
    let out = auto_reshaped(&body);
    assert_eq!(
        count_markers(&out),
        0,
        "markers on a prompt below the minimum: {:?}",
        message_markers(&out).0
    );
    // The same history without the compaction is long enough to mark.
    let whole = session(60, |_| {});
    let out = reshape(Endpoint::Messages, whole, &opts(AUTO)).unwrap();
    assert!(count_markers(&out) > 0);
}
