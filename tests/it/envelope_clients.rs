//! The envelope against payloads shaped like each real client's (synthesised content):
//! pi (Anthropic and Responses), Claude Code, Codex, the Anthropic and OpenAI SDKs.

use bytes::Bytes;
use cachet::envelope::{BreakpointMode, CompileOptions, Envelope, Ttl};
use cachet::patch::{parse_ops, Op};
use cachet::providers::anthropic::blocks::count_markers;
use cachet::route::{Endpoint, Provider};
use serde_json::{json, Value};

fn fixture(name: &str) -> Bytes {
    let path = format!("{}/tests/data/clients/{name}", env!("CARGO_MANIFEST_DIR"));
    Bytes::from(std::fs::read(path).expect("fixture exists"))
}

fn parse(endpoint: Endpoint, name: &str) -> Envelope {
    cachet::providers::parse_envelope(endpoint, fixture(name)).expect("fixture parses")
}

fn ops(v: Value) -> Vec<Op> {
    parse_ops(&v, "test").expect("valid ops")
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

const ALL: &[(Provider, Endpoint, &str)] = &[
    (Provider::Anthropic, Endpoint::Messages, "pi_anthropic.json"),
    (Provider::Anthropic, Endpoint::Messages, "claude_code.json"),
    (
        Provider::Anthropic,
        Endpoint::Messages,
        "anthropic_sdk.json",
    ),
    (
        Provider::OpenAi,
        Endpoint::Responses,
        "codex_responses.json",
    ),
    (Provider::OpenAi, Endpoint::Responses, "pi_responses.json"),
    (Provider::OpenAi, Endpoint::Chat, "openai_chat_sdk.json"),
];

#[test]
fn every_client_shape_round_trips_byte_identical() {
    for &(_, e, name) in ALL {
        let env = parse(e, name);
        assert_eq!(
            env.compile(&CompileOptions::default()),
            fixture(name),
            "{name}"
        );
        let view = env.to_json();
        assert!(
            view["messages"]["cached"]
                .as_array()
                .is_some_and(|m| !m.is_empty()),
            "{name}"
        );
        assert!(view["system"]["compiled"].is_string(), "{name}");
    }
}

#[test]
fn an_injection_patch_keeps_every_untouched_element_for_every_client() {
    for &(_, e, name) in ALL {
        let mut env = parse(e, name);
        let history: Vec<Vec<u8>> = env.history_raw().map(<[u8]>::to_vec).collect();
        let tools: Vec<Vec<u8>> = env.tools_raw().map(<[u8]>::to_vec).collect();
        let prompt = env.last_user_prompt_index().expect("a user prompt");
        env.apply(
            &ops(json!([
                {"op": "messages_insert", "at": "before_last_user_prompt",
                 "messages": [{"role": "custom", "content": "Notes: the user prefers small diffs."}],
                 "invalidateCacheReason": "memory injection"},
                {"op": "messages_uncached_append",
                 "messages": [{"role": "user", "content": "Current time: 10:42"}]}
            ])),
            "memory",
        )
        .unwrap_or_else(|r| panic!("{name}: {r}"));
        let out = env.compile(&CompileOptions::default());
        let parsed: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, m) in history.iter().enumerate() {
            assert!(contains(&out, m), "{name}: message {i} lost its bytes");
        }
        for t in &tools {
            assert!(contains(&out, t), "{name}: a tool lost its bytes");
        }
        let list = match e {
            Endpoint::Responses => parsed["input"].as_array().cloned().unwrap_or_default(),
            _ => parsed["messages"].as_array().cloned().unwrap_or_default(),
        };
        // Chat's system message, and pi's leading developer item on Responses, are system
        // parts ahead of the history.
        let system_msgs = match (e, name) {
            (Endpoint::Chat, _) | (_, "pi_responses.json") => 1,
            _ => 0,
        };
        let injected = &list[system_msgs + prompt];
        assert!(
            injected.to_string().contains("small diffs"),
            "{name}: {injected}"
        );
        assert!(
            list.last().is_some_and(|m| m.to_string().contains("10:42")),
            "{name}"
        );
    }
}

#[test]
fn claude_code_shape_is_carried_through_and_auto_markers_stay_within_limits() {
    let mut env = parse(Endpoint::Messages, "claude_code.json");
    let parts: Vec<&str> = env.system_parts().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(parts, ["base", "base.1", "base.2"]);
    assert!(env.system_parts()[0]
        .text
        .starts_with("x-anthropic-billing-header:"));
    let options = env.options();
    for key in [
        "metadata",
        "context_management",
        "output_config",
        "thinking",
        "temperature",
    ] {
        assert!(options.contains_key(key), "{key}");
    }
    // `role: "system"` inside messages is history like any other message.
    assert_eq!(env.history_len(), 6);
    assert_eq!(env.last_user_prompt_index(), Some(5));
    env.apply(
        &ops(
            json!([{"op": "system_part_set", "partName": "memory", "text": "Prefers tabs.",
                     "after": "base.2", "invalidateCacheReason": "memory"}]),
        ),
        "memory",
    )
    .unwrap();
    let out = env.compile(&CompileOptions {
        breakpoints: BreakpointMode::Auto {
            ttl: Ttl::FiveMinutes,
        },
        ..Default::default()
    });
    assert!(count_markers(&out) <= 4);
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["system"][3]["text"], "Prefers tabs.");
    // Thinking blocks keep their signature and never receive a marker.
    let thinking = &v["messages"][1]["content"][0];
    assert!(thinking["signature"].is_string() && thinking.get("cache_control").is_none());
    let raw = fixture("claude_code.json");
    assert!(contains(
        &out,
        &raw[memchr::memmem::find(&raw, b"\"context_management\"").unwrap()..][..80]
    ));
}

#[test]
fn codex_shape_keeps_reasoning_items_and_namespace_tools() {
    let mut env = parse(Endpoint::Responses, "codex_responses.json");
    assert_eq!(env.system_parts()[0].name, "base");
    assert_eq!(env.tools_raw().count(), 2);
    // The last user prompt is "Go ahead.", after the reasoning and tool items.
    assert_eq!(env.last_user_prompt_index(), Some(8));
    // Inserting between a function call and its output is refused.
    let refused = env
        .apply(
            &ops(json!([{"op": "messages_insert", "at": "index:5",
                          "messages": [{"role": "user", "content": "x"}],
                          "invalidateCacheReason": "test"}])),
            "t",
        )
        .unwrap_err();
    assert_eq!(refused.reason.label(), "provider_rule");
    let opts = CompileOptions {
        prompt_cache_key: Some("cachet-session".into()),
        ..Default::default()
    };
    // The client's own prompt_cache_key is kept.
    assert_eq!(env.compile(&opts), fixture("codex_responses.json"));
    env.apply(&ops(json!([{"op": "tools_remove", "names": ["mcp__files"], "invalidateCacheReason": "trim"}])), "t")
        .unwrap();
    let v: Value = serde_json::from_slice(&env.compile(&opts)).unwrap();
    assert_eq!(v["tools"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        v["input"][3]["encrypted_content"],
        "gAAAAABpZmFrZS1lbmNyeXB0ZWQtcmVhc29uaW5nLWNvbnRlbnQ="
    );
    assert_eq!(v["client_metadata"]["originator"], "codex_cli_rs");
}

#[test]
fn chat_system_messages_are_parts_and_new_parts_become_messages() {
    let mut env = parse(Endpoint::Chat, "openai_chat_sdk.json");
    assert_eq!(env.system_parts().len(), 1);
    assert_eq!(env.history_len(), 6);
    env.apply(
        &ops(
            json!([{"op": "system_part_set", "partName": "policy", "text": "Never guess.",
                     "invalidateCacheReason": "policy"}]),
        ),
        "policy",
    )
    .unwrap();
    assert_eq!(
        env.system_compiled(),
        "You answer questions about the weather. Use tools when needed.Never guess."
    );
    let out = env.compile(&CompileOptions::default());
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["messages"][1],
        json!({"role": "developer", "content": "Never guess."})
    );
    assert!(contains(
        &out,
        br#"{"role": "tool", "tool_call_id": "call_a", "content": "18\u00b0C, cloudy"}"#
    ));
    // Separating the assistant's tool calls from their results is refused.
    let refused = env
        .apply(
            &ops(json!([{"op": "messages_insert", "at": "index:2",
                          "messages": [{"role": "user", "content": "x"}],
                          "invalidateCacheReason": "t"}])),
            "t",
        )
        .unwrap_err();
    assert!(refused.message.contains("separated"), "{}", refused.message);
}

#[test]
fn sdk_string_system_gets_a_part_and_stays_a_string() {
    let mut env = parse(Endpoint::Messages, "anthropic_sdk.json");
    env.apply(
        &ops(
            json!([{"op": "system_part_set", "partName": "style", "text": " Answer in one line.",
                     "invalidateCacheReason": "style"}]),
        ),
        "style",
    )
    .unwrap();
    let v: Value = serde_json::from_slice(&env.compile(&CompileOptions::default())).unwrap();
    assert_eq!(
        v["system"],
        "You are a concise assistant. Answer in one line."
    );
    assert_eq!(v["top_k"], 5);
}

#[test]
fn a_tool_result_with_an_appended_reminder_is_not_a_new_turn() {
    let body = Bytes::from_static(
        br#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[
        {"role":"user","content":"Start."},
        {"role":"assistant","content":[{"type":"tool_use","id":"a","name":"Read","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"ok"},
                                  {"type":"text","text":"<reminder>keep going</reminder>"}]}]}"#,
    );
    let mut env = cachet::providers::parse_envelope(Endpoint::Messages, body).unwrap();
    assert_eq!(env.last_user_prompt_index(), Some(0));
    assert_eq!(env.turn_index(), 0);
    let report = env.apply(
        &ops(json!([{"op": "messages_insert", "at": "before_last_user_prompt",
                     "messages": [{"role": "custom", "content": "memo"}], "invalidateCacheReason": "inject"}])),
        "memory",
    );
    assert!(report.is_ok());
    assert_eq!(env.history_len(), 4);
}

/// pi on the Responses API sends its system prompt as a leading `developer` (or `system`)
/// input item, with no `instructions`: that item is the system prompt, so policies that
/// target the system prompt act on pi's traffic too.
#[test]
fn pi_responses_developer_item_is_the_system_prompt() {
    let original = fixture("pi_responses.json");
    let mut env = parse(Endpoint::Responses, "pi_responses.json");
    assert_eq!(env.system_parts().len(), 1);
    assert!(env
        .system_compiled()
        .starts_with("You are a coding assistant"));
    let input_len = serde_json::from_slice::<Value>(&original).unwrap()["input"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        env.history_len(),
        input_len - 1,
        "the item left the history"
    );
    assert_eq!(env.compile(&CompileOptions::default()), original);
    env.apply(
        &ops(json!([
            {"op": "system_part_set", "partName": "base",
             "text": "You are a coding assistant in a terminal.", "invalidateCacheReason": "date out"},
            {"op": "system_part_set", "partName": "memory", "text": "Prefer small diffs.",
             "invalidateCacheReason": "memory"}
        ])),
        "policy",
    )
    .unwrap();
    let out = env.compile(&CompileOptions::default());
    let v: Value = serde_json::from_slice(&out).unwrap();
    assert!(v.get("instructions").is_none());
    assert_eq!(
        v["input"][0],
        json!({"role": "developer", "content": "You are a coding assistant in a terminal."})
    );
    assert_eq!(
        v["input"][1],
        json!({"role": "developer", "content": "Prefer small diffs."})
    );
    assert!(contains(
        &out,
        br#"{"role":"user","content":[{"type":"input_text","text":"What does main.rs do?"}]}"#
    ));
}

/// The envelope a hook receives is written from the body's bytes; it reads as the envelope
/// built of values (each tool and message parsed, the options a map of the top-level fields
/// the envelope does not own, with their edits) did, for every client's shape, as sent and
/// after a patch that touches each section.
#[test]
fn the_hook_envelope_reads_as_the_one_built_of_values() {
    fn of_values(env: &Envelope) -> Value {
        let parse = |raw: &[u8]| serde_json::from_slice::<Value>(raw).unwrap();
        let parts: Vec<Value> = env
            .system_parts()
            .iter()
            .map(|p| json!({"name": p.name, "text": p.text}))
            .collect();
        json!({
            "system": {"parts": parts, "compiled": env.system_compiled()},
            "tools": env.tools_raw().map(parse).collect::<Vec<_>>(),
            "messages": {
                "cached": env.history_raw().map(parse).collect::<Vec<_>>(),
                "uncached": env.uncached_raw().map(parse).collect::<Vec<_>>(),
            },
            "options": Value::Object(env.options()),
            "meta": env.meta.to_json(),
        })
    }
    for &(_, e, name) in ALL {
        let mut env = parse(e, name);
        for patched in [false, true] {
            if patched {
                env.apply(
                    &ops(json!([
                        {"op": "system_part_set", "partName": "rules", "text": "Be brief.",
                         "invalidateCacheReason": "rules"},
                        {"op": "messages_insert", "at": "before_last_user_prompt",
                         "messages": [{"role": "custom", "content": "Notes: tabs."}],
                         "invalidateCacheReason": "memory"},
                        {"op": "messages_uncached_append",
                         "messages": [{"role": "user", "content": "Now: 10:42"}]},
                        {"op": "options_set", "options": {"temperature": 0, "top_k": null}}
                    ])),
                    "test",
                )
                .unwrap_or_else(|r| panic!("{name}: {r}"));
            }
            let bytes = env.to_json_bytes();
            let read: Value = serde_json::from_slice(&bytes)
                .unwrap_or_else(|err| panic!("{name}: {err}: {}", String::from_utf8_lossy(&bytes)));
            assert_eq!(read, of_values(&env), "{name}, patched: {patched}");
        }
    }
}
