use super::*;
use crate::route::Endpoint;
use crate::route::Provider;

/// Identify a request given as a JSON value (through its envelope, as the pipeline does).
fn identify_value(h: &HeaderMap, body: &Value, _p: Provider, e: Endpoint) -> SessionId {
    let env = crate::providers::parse_envelope(e, bytes::Bytes::from(body.to_string())).unwrap();
    identify(h, &env)
}
use http::HeaderValue;
use serde_json::json;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.insert(*name, HeaderValue::from_str(value).unwrap());
    }
    map
}

fn anthropic_body() -> Value {
    json!({
        "model": "claude-sonnet-4-5",
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=1; nonce=aaaa"},
            {"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "fix the bug"}]}
        ],
        "metadata": {"user_id": "{\"device_id\":\"d1\",\"session_id\":\"sess-json-1\"}"}
    })
}

fn anth(h: &HeaderMap, body: &Value) -> SessionId {
    identify_value(h, body, Provider::Anthropic, Endpoint::Messages)
}

#[test]
fn cachet_header_wins_over_everything() {
    let h = headers(&[
        ("x-cachet-session", "mine"),
        ("x-claude-code-session-id", "cc-1"),
        ("session_id", "codex-1"),
    ]);
    let id = anth(&h, &anthropic_body());
    assert_eq!(
        id,
        SessionId {
            id: "mine".into(),
            source: IdSource::Header
        }
    );
}

#[test]
fn claude_code_header_comes_before_metadata() {
    let h = headers(&[("x-claude-code-session-id", "cc-1")]);
    let id = anth(&h, &anthropic_body());
    assert_eq!(id.id, "cc-1");
    assert_eq!(id.source, IdSource::ClaudeCodeHeader);
}

#[test]
fn claude_code_metadata_json_form() {
    let id = anth(&HeaderMap::new(), &anthropic_body());
    assert_eq!(id.id, "sess-json-1");
    assert_eq!(id.source, IdSource::ClaudeCodeMetadata);
}

#[test]
fn claude_code_metadata_older_form() {
    let mut body = anthropic_body();
    body["metadata"]["user_id"] = json!(
        "user_0a1b2c_account_5f2e8c1a-0000-4000-8000-000000000001_session_9d1c7e2a-1111-4222-8333-444455556666"
    );
    let id = anth(&HeaderMap::new(), &body);
    assert_eq!(id.id, "9d1c7e2a-1111-4222-8333-444455556666");
    assert_eq!(id.source, IdSource::ClaudeCodeMetadata);
}

#[test]
fn metadata_without_a_session_falls_through_to_fingerprint() {
    let mut body = anthropic_body();
    body["metadata"]["user_id"] = json!("user_plain");
    let id = anth(&HeaderMap::new(), &body);
    assert_eq!(id.source, IdSource::Fingerprint);
    assert!(id.id.starts_with("fp-") && id.id.len() == 35, "{}", id.id);
}

#[test]
fn prompt_cache_key_for_chat_and_responses() {
    let chat = json!({"model": "gpt-5", "prompt_cache_key": "pck-1", "messages": []});
    let id = identify_value(&HeaderMap::new(), &chat, Provider::OpenAi, Endpoint::Chat);
    assert_eq!(
        id,
        SessionId {
            id: "pck-1".into(),
            source: IdSource::PromptCacheKey
        }
    );
    let responses = json!({"model": "gpt-5", "prompt_cache_key": "conv-9", "input": "hi"});
    let h = headers(&[("session_id", "codex-1")]);
    let id = identify_value(&h, &responses, Provider::OpenAi, Endpoint::Responses);
    assert_eq!(
        id,
        SessionId {
            id: "conv-9".into(),
            source: IdSource::PromptCacheKey
        }
    );
}

#[test]
fn codex_session_header_when_no_cache_key() {
    let responses = json!({"model": "gpt-5", "input": "hi"});
    let h = headers(&[("session_id", "codex-1")]);
    let id = identify_value(&h, &responses, Provider::OpenAi, Endpoint::Responses);
    assert_eq!(
        id,
        SessionId {
            id: "codex-1".into(),
            source: IdSource::CodexHeader
        }
    );
}

/// Codex 0.169.0 names the header `session-id` (recorded: `session-id`, `thread-id` and
/// `x-client-request-id` all carry the thread id; older versions sent `session_id`).
#[test]
fn codex_session_header_with_a_hyphen() {
    let responses = json!({"model": "gpt-5", "input": "hi"});
    let h = headers(&[("session-id", "01a2085f-d8e9-7c01-be88-77b1a559770f")]);
    let id = identify_value(&h, &responses, Provider::OpenAi, Endpoint::Responses);
    assert_eq!(id.source, IdSource::CodexHeader);
    assert_eq!(id.id, "01a2085f-d8e9-7c01-be88-77b1a559770f");
}

#[test]
fn empty_header_values_are_ignored() {
    let h = headers(&[("x-cachet-session", "  "), ("session_id", "codex-2")]);
    let body = json!({"input": "hi"});
    let id = identify_value(&h, &body, Provider::OpenAi, Endpoint::Responses);
    assert_eq!(id.id, "codex-2");
}

#[test]
fn unusual_ids_are_hashed_into_a_safe_form() {
    let h = headers(&[("x-cachet-session", "has spaces/and slashes")]);
    let id = anth(&h, &json!({"messages": []}));
    assert!(id.id.starts_with("h-") && id.id.len() == 34, "{}", id.id);
    assert_eq!(id.source, IdSource::Header);
    let again = anth(&h, &json!({"messages": []}));
    assert_eq!(id, again);
}

fn no_session(body: &Value) -> String {
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut() {
        obj.remove("metadata");
    }
    let id = anth(&HeaderMap::new(), &body);
    assert_eq!(id.source, IdSource::Fingerprint);
    id.id
}

#[test]
fn fingerprint_ignores_billing_nonce_cache_control_and_string_form() {
    let base = no_session(&anthropic_body());

    let mut nonce = anthropic_body();
    nonce["system"][0]["text"] = json!("x-anthropic-billing-header: cc_version=1; nonce=bbbb");
    assert_eq!(no_session(&nonce), base);

    let mut markers = anthropic_body();
    markers["system"][1]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    markers["messages"][0]["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    assert_eq!(no_session(&markers), base);

    let mut string_form = anthropic_body();
    string_form["messages"][0]["content"] = json!("fix the bug");
    assert_eq!(no_session(&string_form), base);

    // Later turns do not change the session.
    let mut later = anthropic_body();
    later["messages"].as_array_mut().unwrap().extend([
        json!({"role": "assistant", "content": "done"}),
        json!({"role": "user", "content": "thanks"}),
    ]);
    assert_eq!(no_session(&later), base);
}

#[test]
fn fingerprint_changes_with_system_tools_or_first_message() {
    let base = no_session(&anthropic_body());
    let mut system = anthropic_body();
    system["system"][1]["text"] = json!("You are a different agent.");
    assert_ne!(no_session(&system), base);
    let mut tools = anthropic_body();
    tools["tools"][0]["name"] = json!("write");
    assert_ne!(no_session(&tools), base);
    let mut first = anthropic_body();
    first["messages"][0]["content"] = json!("another task");
    assert_ne!(no_session(&first), base);
}

#[test]
fn chat_fingerprint_uses_leading_system_and_developer_messages() {
    let body = json!({"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
        {"role": "user", "content": "hello"}
    ]});
    let fp = |b: &Value| identify_value(&HeaderMap::new(), b, Provider::OpenAi, Endpoint::Chat).id;
    let base = fp(&body);
    let mut changed = body.clone();
    changed["messages"][1]["content"] = json!("Use no tools.");
    assert_ne!(fp(&changed), base);
    let mut string_form = body.clone();
    string_form["messages"][2]["content"] = json!([{"type": "text", "text": "hello"}]);
    assert_eq!(fp(&string_form), base);
}

#[test]
fn responses_fingerprint_uses_instructions_and_first_input() {
    let fp =
        |b: &Value| identify_value(&HeaderMap::new(), b, Provider::OpenAi, Endpoint::Responses).id;
    let a = json!({"instructions": "Be brief.", "input": [{"role": "user", "content": "hi"}]});
    let b = json!({"instructions": "Be brief.", "input": [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "x", "arguments": "{}"}
    ]});
    let c = json!({"instructions": "Be verbose.", "input": [{"role": "user", "content": "hi"}]});
    assert_eq!(fp(&a), fp(&b));
    assert_ne!(fp(&a), fp(&c));
}

/// Bodies without a session id as each client sends them (the recorded fixtures), and
/// variants that only change what does not key the cache or only later turns.
fn fingerprint_cases() -> Vec<(Provider, Endpoint, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/clients/");
    let load = |name: &str| -> Value {
        let mut v: Value =
            serde_json::from_slice(&std::fs::read(format!("{dir}{name}")).unwrap()).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.remove("metadata");
        obj.remove("prompt_cache_key");
        v
    };
    let mut cases = Vec::new();
    for name in [
        "claude_code.json",
        "claude_code_tool_loop.json",
        "anthropic_sdk.json",
        "pi_anthropic.json",
        "pi_anthropic_tool_loop.json",
    ] {
        let body = load(name);
        // Claude Code's billing header changes on every request and never keys the cache.
        let mut billing = body.clone();
        if let Some(Value::Array(system)) = billing.get_mut("system") {
            system.insert(
                0,
                json!({"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.330.bbb; cc_entrypoint=cli;"}),
            );
        }
        let mut later = body.clone();
        later["messages"].as_array_mut().unwrap().extend([
            json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]}),
            json!({"role": "user", "content": [{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}]}),
        ]);
        let mut tool_added = body.clone();
        let tools = tool_added
            .as_object_mut()
            .unwrap()
            .entry("tools")
            .or_insert_with(|| json!([]));
        tools.as_array_mut().unwrap().push(
            json!({"name": "grep", "description": "Search", "input_schema": {"type": "object"}}),
        );
        for v in [body, billing, later, tool_added] {
            cases.push((Provider::Anthropic, Endpoint::Messages, v));
        }
    }
    for (name, endpoint) in [
        ("openai_chat_sdk.json", Endpoint::Chat),
        ("pi_chat_tool_loop.json", Endpoint::Chat),
        ("codex_responses.json", Endpoint::Responses),
        ("codex_tool_loop.json", Endpoint::Responses),
        ("pi_responses.json", Endpoint::Responses),
        ("pi_responses_tool_loop.json", Endpoint::Responses),
    ] {
        cases.push((Provider::OpenAi, endpoint, load(name)));
    }
    cases
}

/// The memo answers what the canonical path computes, on first sight and when remembered,
/// and cache-neutral variants (Claude Code's billing header, later turns, markers) get the
/// base request's id while one more tool does not.
#[test]
fn remembered_fingerprint_equals_the_canonical_one() {
    let cases = fingerprint_cases();
    let mut ids = Vec::new();
    for (_, endpoint, body) in &cases {
        let env = crate::providers::parse_envelope(*endpoint, bytes::Bytes::from(body.to_string()))
            .unwrap();
        let canonical = canonical_fingerprint(&env);
        assert_eq!(fingerprint(&env), canonical);
        assert_eq!(fingerprint(&env), canonical, "remembered");
        ids.push(canonical);
    }
    for group in ids[..20].chunks(4) {
        let [base, billing, later, more_tools] = group else {
            unreachable!()
        };
        assert_eq!(billing, base);
        assert_eq!(later, base);
        assert_ne!(more_tools, base);
    }
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert!(distinct.len() >= 12, "{ids:?}");
}

/// Only the bytes that reach the canonical form key the memo: a billing header alone
/// changing hits the same entry, and many distinct inputs never grow it past its bound.
#[test]
fn fingerprint_memo_is_bounded() {
    for i in 0..FINGERPRINTS_KEPT + 100 {
        let body = json!({"system": format!("agent {i}"), "messages": [{"role": "user", "content": "hi"}]});
        let env = crate::providers::parse_envelope(
            Endpoint::Messages,
            bytes::Bytes::from(body.to_string()),
        )
        .unwrap();
        assert_eq!(fingerprint(&env), canonical_fingerprint(&env));
        assert!(
            FINGERPRINTS.len() <= FINGERPRINTS_KEPT,
            "{}",
            FINGERPRINTS.len()
        );
    }
}

/// A first prompt of megabytes (a pasted file) is fingerprinted without holding a copy of
/// it: its canonical form is hashed as it is made (the `Value` path held 5× the prompt).
#[test]
fn a_huge_first_prompt_is_fingerprinted_in_bounded_memory() {
    let text = format!("{}\n", "log line with a pasted file in it ".repeat(120_000));
    let body = json!({"system": "agent", "messages": [{"role": "user", "content": text}]});
    let env =
        crate::providers::parse_envelope(Endpoint::Messages, bytes::Bytes::from(body.to_string()))
            .unwrap();
    let (id, peak) = crate::alloc_meter::peak_during(|| canonical_fingerprint(&env));
    assert!(id.starts_with("fp-"));
    assert!(
        peak < text.len() / 4,
        "{peak} bytes held at once for a prompt of {}",
        text.len()
    );
}

/// The fingerprint as first defined: the first prompt's content parsed into a `Value`, the
/// material made canonical as a whole.
fn fingerprint_by_value(env: &Envelope) -> String {
    let (system, tools) = system_and_tools(env);
    let first_user = first_user_message(env)
        .and_then(|m| serde_json::from_slice::<Value>(m).ok())
        .and_then(|m| m.get("content").cloned())
        .unwrap_or(Value::Null);
    let material = json!({"system": system, "tools": tools, "first_user": {"content": first_user}});
    let digest = Sha256::digest(crate::providers::cache_key::canonical_bytes(&material));
    format!("fp-{}", &hex::encode(digest)[..32])
}

/// Copying the first prompt's content from its bytes gives the fingerprint parsing it gave,
/// on every recorded client's shape and on the spellings a copy must refuse or get right.
#[test]
fn the_copied_fingerprint_is_the_parsed_one() {
    let mut envs: Vec<Envelope> = fingerprint_cases()
        .into_iter()
        .map(|(_, e, body)| {
            crate::providers::parse_envelope(e, bytes::Bytes::from(body.to_string())).unwrap()
        })
        .collect();
    for message in [
        r#"{"role":"user","content":"plain"}"#,
        r#"{"role":"user","content":"esc \u00e9 \/ \"q\" \n"}"#,
        r#"{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}"#,
        r#"{"role":"user","content":"first","content":"last"}"#,
        r#"{"role":"user"}"#,
        r#"{"role":"user","content":null}"#,
        r#"{"role":"user","cont\u0065nt":"escaped key"}"#,
        r#"{ "role" : "user" , "content" : [ { "text" : "spaced" , "type" : "text" } ] }"#,
        r#"{"role":"user","content":[{"type":"image","source":{"data":"x","n":1.50}}]}"#,
    ] {
        let body = format!(r#"{{"system":"agent","messages":[{message}]}}"#);
        envs.push(
            crate::providers::parse_envelope(Endpoint::Messages, bytes::Bytes::from(body)).unwrap(),
        );
    }
    for env in &envs {
        assert_eq!(canonical_fingerprint(env), fingerprint_by_value(env));
    }
}
