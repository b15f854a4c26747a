//! Patch operations of DESIGN §3 on the envelope: effects, all-or-nothing refusals, and
//! parse errors.

use bytes::Bytes;
use cachet::envelope::{CompileOptions, Envelope};
use cachet::patch::{parse_ops, HandlerResult, Op, RefusalReason};
use cachet::route::{Endpoint, Provider};
use serde_json::{json, Value};

const ANTHROPIC: &str = r#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"Base prompt."}],"tools":[{"name":"read","input_schema":{"type":"object"}},{"name":"bash","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"first"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"read","input":{"b":1,"a":2}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"data"}]},{"role":"assistant","content":"done"},{"role":"user","content":"second"}],"max_tokens":100}"#;

fn anthropic() -> Envelope {
    cachet::providers::parse_envelope(Endpoint::Messages, Bytes::from_static(ANTHROPIC.as_bytes()))
        .unwrap()
}

fn ops(v: Value) -> Vec<Op> {
    parse_ops(&v, "t").unwrap()
}

fn compiled(env: &Envelope) -> Value {
    serde_json::from_slice(&env.compile(&CompileOptions::default())).unwrap()
}

#[test]
fn a_refused_patch_changes_nothing() {
    let mut env = anthropic();
    let r = env
        .apply(
            &ops(json!([
                {"op": "system_part_set", "partName": "x", "text": "y", "invalidateCacheReason": "ok"},
                {"op": "tools_remove", "names": ["bash"]}
            ])),
            "memory",
        )
        .unwrap_err();
    assert_eq!(r.reason, RefusalReason::MissingInvalidateReason);
    assert_eq!(r.op_index, Some(1));
    assert_eq!(r.op, Some("tools_remove"));
    assert!(r.to_string().contains("memory") && r.to_string().contains("invalidateCacheReason"));
    assert!(!env.is_patched());
    assert_eq!(
        &env.compile(&CompileOptions::default())[..],
        ANTHROPIC.as_bytes()
    );
    let body = {
        let e = r.to_api_error();
        cachet::providers::error_body(Provider::Anthropic, e.kind, &e.message)
    };
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["type"], "api_error");
    assert!(v["error"]["message"].as_str().unwrap().contains("`memory`"));
}

/// A selector is parsed once, with the op: a bad one never reaches the envelope.
#[test]
fn an_unknown_selector_is_a_parse_error() {
    let err = parse_ops(
        &json!([{"op": "messages_insert", "at": "middle", "messages": [], "invalidateCacheReason": "r"}]),
        "t",
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("`middle` is not before_last_user_prompt, index:N or end"),
        "{err}"
    );
}

#[test]
fn specific_refusals() {
    let cases = [
        (
            json!({"op": "tools_remove", "names": ["nope"], "invalidateCacheReason": "r"}),
            "unknown_tool",
        ),
        (
            json!({"op": "messages_insert", "at": "index:99", "messages": [], "invalidateCacheReason": "r"}),
            "bad_selector",
        ),
        (
            json!({"op": "messages_insert", "at": "index:2", "messages": [{"role": "custom", "content": "x"}],
                "invalidateCacheReason": "r"}),
            "provider_rule",
        ),
        (
            json!({"op": "system_part_set", "partName": "n", "text": "x", "before": "ghost",
                "invalidateCacheReason": "r"}),
            "unknown_part",
        ),
        (
            json!({"op": "options_set", "options": {"messages": []}}),
            "not_an_option",
        ),
        (
            json!({"op": "messages_uncached_append", "messages": [{"content": "no role"}]}),
            "bad_element",
        ),
        (
            json!({"op": "messages_cached_replace", "messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t9", "content": "x"}]}], "invalidateCacheReason": "r"}),
            "provider_rule",
        ),
    ];
    for (op, label) in cases {
        let mut env = anthropic();
        let r = env.apply(&ops(json!([op])), "t").unwrap_err();
        assert_eq!(r.reason.label(), label, "{op}: {}", r.message);
        assert!(!env.is_patched());
    }
    assert_eq!(
        parse_ops(&json!([{"op": "explode"}]), "t")
            .unwrap_err()
            .reason
            .label(),
        "invalid_op"
    );
}

#[test]
fn system_part_ops_place_and_keep_parts() {
    let mut env = anthropic();
    let report = env
        .apply(
            &ops(json!([
                {"op": "system_part_set", "partName": "tail", "text": " T", "invalidateCacheReason": "a"},
                {"op": "system_part_set", "partName": "head", "text": "H ", "before": "base", "invalidateCacheReason": "b"},
                {"op": "system_part_set", "partName": "mid", "text": "M", "after": "base", "invalidateCacheReason": "c"},
                {"op": "system_part_remove", "partName": "tail", "invalidateCacheReason": "d"}
            ])),
            "parts",
        )
        .unwrap();
    assert_eq!(report.ops.len(), 4);
    assert_eq!(report.ops[1].invalidate_reason.as_deref(), Some("b"));
    assert_eq!(env.system_compiled(), "H Base prompt.M");
    let out = env.compile(&CompileOptions::default());
    assert!(memchr::memmem::find(&out, br#"{"type":"text","text":"Base prompt."}"#).is_some());
    env.apply(
        &ops(json!([{"op": "system_parts_replace", "parts": [{"name": "base", "text": "Base prompt."}],
                     "invalidateCacheReason": "reset"}])),
        "parts",
    )
    .unwrap();
    assert_eq!(
        &env.compile(&CompileOptions::default())[..],
        ANTHROPIC.as_bytes(),
        "unchanged part keeps its bytes"
    );
}

#[test]
fn tool_ops_convert_neutral_tools_per_provider() {
    let mut env = anthropic();
    env.apply(
        &ops(json!([{"op": "tools_remove", "names": ["read"], "invalidateCacheReason": "r"}])),
        "t",
    )
    .unwrap();
    assert_eq!(
        compiled(&env)["tools"],
        json!([{"name": "bash", "input_schema": {"type": "object"}}])
    );
    env.apply(
        &ops(json!([{"op": "tools_replace", "tools": [{"name": "grep", "description": "d", "parameters": {"type": "object"}}],
                     "invalidateCacheReason": "r"}])),
        "t",
    )
    .unwrap();
    assert_eq!(
        compiled(&env)["tools"][0]["input_schema"],
        json!({"type": "object"})
    );
    let body =
        Bytes::from_static(br#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#);
    let mut chat = cachet::providers::parse_envelope(Endpoint::Chat, body).unwrap();
    chat.apply(
        &ops(json!([{"op": "tools_replace", "tools": [{"name": "grep", "parameters": {"type": "object"}}],
                     "invalidateCacheReason": "r"}])),
        "t",
    )
    .unwrap();
    let v = compiled(&chat);
    assert_eq!(v["tools"][0]["function"]["name"], "grep");
}

#[test]
fn message_ops_insert_replace_and_tail() {
    let mut env = anthropic();
    let result: HandlerResult = serde_json::from_value(json!({
        "transformerName": "memory",
        "patch": [
            {"op": "messages_insert", "at": "before_last_user_prompt", "messages": [{"role": "custom", "content": "mem"}],
             "invalidateCacheReason": "inject"},
            {"op": "messages_insert", "at": "index:0", "messages": [{"role": "user", "content": "zero"}],
             "invalidateCacheReason": "inject"},
            {"op": "messages_insert", "at": "end", "messages": [{"role": "assistant", "content": "ack"}],
             "invalidateCacheReason": "inject"},
            {"op": "messages_uncached_append", "messages": [{"role": "user", "content": [{"type": "text", "text": "now",
              "cache_control": {"type": "ephemeral"}}]}]}
        ]
    }))
    .unwrap();
    let report = env.apply_result(&result, "fallback").unwrap();
    assert_eq!(report.transformer, "memory");
    let v = compiled(&env);
    let texts: Vec<String> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(texts[0], "\"zero\"");
    assert_eq!(texts[5], "\"mem\"");
    assert_eq!(texts[6], "\"second\"");
    assert_eq!(texts[7], "\"ack\"");
    assert_eq!(
        v["messages"][8]["content"][0],
        json!({"type": "text", "text": "now"}),
        "the tail never carries a marker"
    );
    assert_eq!(
        v["messages"][2]["content"][0]["input"].to_string(),
        r#"{"b":1,"a":2}"#
    );
    env.apply(
        &ops(json!([{"op": "messages_cached_replace", "messages": [{"role": "user", "content": "only"}],
                     "invalidateCacheReason": "compact"}])),
        "t",
    )
    .unwrap();
    assert_eq!(env.history_len(), 1);
    assert_eq!(compiled(&env)["messages"].as_array().unwrap().len(), 2);
}

#[test]
fn options_merge_and_remove() {
    let mut env = anthropic();
    env.apply(
        &ops(json!([{"op": "options_set", "options": {"temperature": 0.5, "max_tokens": null}}])),
        "t",
    )
    .unwrap();
    let v = compiled(&env);
    assert_eq!(v["temperature"], 0.5);
    assert!(v.get("max_tokens").is_none());
    let r = env.apply(
        &ops(json!([{"op": "options_set", "options": {"thinking": {"type": "enabled"}}}])),
        "t",
    );
    assert_eq!(
        r.unwrap_err().reason,
        RefusalReason::MissingInvalidateReason
    );
}

#[test]
fn parse_errors_say_what_is_wrong() {
    let cases: [(&[u8], &str); 6] = [
        (
            br#"{"model":"m","messages":{}}"#,
            "messages must be an array",
        ),
        (br#"{"model":"m"}"#, "messages is required"),
        (
            br#"{"model":"m","messages":[],"system":5}"#,
            "system must be a string",
        ),
        (
            br#"{"model":"m","messages":[1]}"#,
            "messages[0] must be an object",
        ),
        (br#"{"model":"m","messages":[}"#, "not valid JSON"),
        (br#"[]"#, "must be a JSON object"),
    ];
    for (body, want) in cases {
        let e = cachet::providers::parse_envelope(Endpoint::Messages, Bytes::copy_from_slice(body))
            .unwrap_err();
        assert!(e.message.contains(want), "{} vs {want}", e.message);
        assert_eq!(e.status().as_u16(), 400);
    }
    assert!(
        cachet::providers::parse_envelope(Endpoint::Models, Bytes::from_static(b"{}")).is_err()
    );
}

/// The library example of the book (docs/src/envelope.md shows the region between the
/// `docs:` markers, and the docs test holds the page to it).
#[test]
fn docs_example_works() -> Result<(), Box<dyn std::error::Error>> {
    // docs: library-envelope
    use bytes::Bytes;
    use cachet::envelope::{BreakpointMode, CompileOptions, Ttl};
    use cachet::patch::parse_ops;
    use cachet::providers::parse_envelope;
    use cachet::route::Endpoint;

    let body = Bytes::from_static(
        br#"{"model":"claude-sonnet-4-5","max_tokens":64,
  "messages":[{"role":"user","content":"hi"}]}"#,
    );
    let mut env = parse_envelope(Endpoint::Messages, body.clone())?;
    assert_eq!(env.compile(&CompileOptions::default()), body); // byte-identical

    let ops = parse_ops(
        &serde_json::json!([{"op": "messages_uncached_append",
                 "messages": [{"role": "custom", "content": "Time: 10:42"}]}]),
        "clock",
    )?;
    let report = env.apply(&ops, "clock")?; // Err(PatchRefusal) leaves env unchanged
    let payload = env.compile(&CompileOptions {
        breakpoints: BreakpointMode::Auto {
            ttl: Ttl::FiveMinutes,
        },
        ..Default::default()
    });
    // docs: end
    assert_eq!(report.ops[0].op, "messages_uncached_append");
    let v: Value = serde_json::from_slice(&payload)?;
    assert_eq!(
        v["messages"][1],
        json!({"role": "user", "content": "Time: 10:42"})
    );
    Ok(())
}

#[test]
fn responses_string_input_and_chat_without_system_take_patches() {
    let body = Bytes::from_static(br#"{"model":"gpt-5","input":"What is 2+2?","store":false}"#);
    let mut env = cachet::providers::parse_envelope(Endpoint::Responses, body).unwrap();
    env.apply(
        &ops(json!([
            {"op": "messages_insert", "at": "before_last_user_prompt",
             "messages": [{"role": "custom", "content": "Answer tersely."}], "invalidateCacheReason": "style"},
            {"op": "system_part_set", "partName": "base", "text": "Be exact.", "invalidateCacheReason": "style"}
        ])),
        "style",
    )
    .unwrap();
    let v = compiled(&env);
    assert_eq!(v["instructions"], "Be exact.");
    assert_eq!(
        v["input"][0]["content"][0],
        json!({"type": "input_text", "text": "Answer tersely."})
    );
    assert_eq!(
        v["input"][1],
        json!({"type": "message", "role": "user", "content": "What is 2+2?"})
    );

    let body =
        Bytes::from_static(br#"{"model":"gpt-4.1","messages":[{"role":"user","content":"hi"}]}"#);
    let mut chat = cachet::providers::parse_envelope(Endpoint::Chat, body).unwrap();
    chat.apply(
        &ops(
            json!([{"op": "system_part_set", "partName": "policy", "text": "No secrets.",
                     "invalidateCacheReason": "policy"}]),
        ),
        "policy",
    )
    .unwrap();
    let out = chat.compile(&CompileOptions::default());
    assert_eq!(
        &out[..],
        br#"{"model":"gpt-4.1","messages":[{"role":"system","content":"No secrets."},{"role":"user","content":"hi"}]}"#
    );
}
