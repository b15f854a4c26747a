//! Each hook point end to end: the upstream body shows the intended change and nothing else.

use crate::support::*;
use serde_json::{json, Value};

const REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Done."}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":10,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}"#;

/// A client body with formatting serde_json would not reproduce.
const BODY: &str = "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":100,\"system\":\"You are terse.\",\n  \"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\",  \"cache_control\":{\"type\":\"ephemeral\"}}]}],\"temperature\":0.50}";

async fn send(proxy: &cachet::server::ProxyHandle, session: &str, body: &str) -> u16 {
    client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("x-cachet-session", session)
        .body(body.to_string())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn context_patches_change_only_their_part_and_keep_bytes() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let (proxy, _dir) = with_policy(&upstream, "shape", r#"
name = "shape"
[[context]]
reason = "before_request"
patch = [{ op = "system_part_set", partName = "rules", text = " Never print secrets.", invalidateCacheReason = "add rules" }]
[[context]]
reason = "ephemeral"
patch = [{ op = "messages_uncached_append", messages = [{ role = "user", content = "request {{request_index}}" }] }]
"#).await;
    assert_eq!(send(&proxy, "s1", BODY).await, 200);
    let got = upstream.requests()[0].body.clone();
    let text = String::from_utf8(got.to_vec()).unwrap();
    // The untouched message keeps its exact bytes (spacing included).
    assert!(text.contains("{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\",  \"cache_control\":{\"type\":\"ephemeral\"}}]}"), "{text}");
    assert!(
        text.contains("\"temperature\":0.50"),
        "options keep their number format"
    );
    let v: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(v["system"], "You are terse. Never print secrets.");
    let messages = v["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "the ephemeral tail comes last: {v}");
    assert_eq!(messages[1]["role"], "user");
    assert!(messages[1].to_string().contains("request 0"));
    let mut expected: Value = serde_json::from_str(BODY).unwrap();
    expected["system"] = v["system"].clone();
    expected["messages"] = json!([expected["messages"][0].clone(), messages[1].clone()]);
    assert_eq!(v, expected, "nothing else changed");
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &m,
            "cachet_patches_total",
            &[
                ("transformer", "shape"),
                ("op", "system_part_set"),
                ("outcome", "applied")
            ]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric_value(
            &m,
            "cachet_cache_invalidations_total",
            &[("transformer", "shape"), ("reason", "add rules")]
        ),
        Some(1.0)
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn payload_edits_apply_json_patch_and_merge_patch() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let (proxy, _dir) = with_policy(
        &upstream,
        "payload",
        r#"
name = "payload"
[[payload]]
merge_patch = { temperature = 0 }
[[payload]]
json_patch = [ { op = "add", path = "/metadata", value = { user_id = "{{session}}" } } ]
"#,
    )
    .await;
    assert_eq!(send(&proxy, "team-7", BODY).await, 200);
    let v: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    let mut expected: Value = serde_json::from_str(BODY).unwrap();
    expected["temperature"] = json!(0);
    expected["metadata"] = json!({"user_id": "team-7"});
    assert_eq!(v, expected);
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_patch_without_invalidate_reason_is_refused_and_strict_mode_fails() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = start_hook_server(|_| Some(json!({"patch": [{"op": "system_part_set", "partName": "x", "text": "y"}], "transformerName": "careless"}))).await;
    let policy = policy_file(
        dir.path(),
        "hooked",
        &format!(
            r#"
name = "hooked"
[[hook]]
url = "{}"
events = ["context:before_request"]
"#,
            hook.url
        ),
    );
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        vec![policy.clone()],
        &dir.path().join("store"),
    ))
    .await;
    assert_eq!(send(&proxy, "s", BODY).await, 200);
    assert_eq!(
        upstream.requests()[0].body,
        BODY.as_bytes(),
        "the request went on unpatched"
    );
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &m,
            "cachet_patches_total",
            &[("transformer", "careless"), ("outcome", "refused")]
        ),
        Some(1.0)
    );
    proxy.shutdown().await;

    let mut config = policy_config(&upstream.url(), vec![policy], &dir.path().join("store2"));
    config.policies.strict = true;
    let proxy = start_proxy(config).await;
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .body(BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "api_error");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("careless") && msg.contains("invalidateCacheReason"),
        "{msg}"
    );
    assert_eq!(
        upstream.requests().len(),
        1,
        "strict refusal is not forwarded"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn hook_failures_continue_or_fail_per_on_error() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let dead = "http://127.0.0.1:1/hook";
    for (on_error, status) in [("continue", 200), ("fail", 500)] {
        let policy = policy_file(
            dir.path(),
            on_error,
            &format!(
                r#"
name = "p-{on_error}"
[[hook]]
name = "memory"
url = "{dead}"
events = ["context:ephemeral", "before_provider_request"]
on_error = "{on_error}"
"#
            ),
        );
        let proxy = start_proxy(policy_config(
            &upstream.url(),
            vec![policy],
            &dir.path().join(on_error),
        ))
        .await;
        assert_eq!(
            send(&proxy, "s", BODY).await,
            status,
            "on_error = {on_error}"
        );
        let m = metrics_text(&proxy).await;
        assert!(
            metric_value(&m, "cachet_hook_failures_total", &[("hook", "memory")]).unwrap() >= 1.0
        );
        proxy.shutdown().await;
    }
}

#[tokio::test]
async fn before_provider_request_hook_replaces_the_payload_and_turn_end_sees_the_reply() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let hook = start_hook_server(|event| match event["type"].as_str() {
        Some("before_provider_request") => {
            Some(json!({"json_patch": [{"op": "replace", "path": "/max_tokens", "value": 7}]}))
        }
        _ => None,
    })
    .await;
    let policy = format!(
        r#"
name = "hooks"
[[hook]]
url = "{}"
events = ["before_provider_request", "context:turn_end"]
"#,
        hook.url
    );
    let (proxy, _dir) = with_policy(&upstream, "hooks", &policy).await;
    assert_eq!(send(&proxy, "s", BODY).await, 200);
    let v: Value = serde_json::from_slice(&upstream.requests()[0].body).unwrap();
    assert_eq!(v["max_tokens"], 7);
    wait_for_requests(&proxy, "s", 1).await;
    let events = hook.events.lock().unwrap().clone();
    let turn_end = events
        .iter()
        .find(|e| e["reason"] == "turn_end")
        .expect("turn_end event sent");
    assert_eq!(turn_end["assistant"]["content"][0]["text"], "Done.");
    assert_eq!(turn_end["usage"]["uncached"], 10);
    assert_eq!(turn_end["state"]["envelope"]["meta"]["session"], "s");
    proxy.shutdown().await;
}

#[tokio::test]
async fn shipped_breakpoint_and_cache_key_policies_shape_the_payload() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let root = env!("CARGO_MANIFEST_DIR");
    let policies = vec![
        format!("{root}/policies/anthropic-auto-breakpoints.toml").into(),
        format!("{root}/policies/openai-cache-key.toml").into(),
    ];
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        policies,
        &dir.path().join("store"),
    ))
    .await;
    // Anthropic: a long system prompt and history without any client marker get markers.
    let long = "Follow the repository conventions carefully. ".repeat(300);
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10, "system": [{"type": "text", "text": long}],
        "messages": [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}]});
    let (s, _) = post_anthropic(&proxy, "a", &body).await;
    assert_eq!(s, 200);
    let sent = String::from_utf8(upstream.requests()[0].body.to_vec()).unwrap();
    let markers = sent.matches("\"cache_control\"").count();
    assert!((1..=4).contains(&markers), "{sent}");
    let v: Value = serde_json::from_str(&sent).unwrap();
    assert!(
        v["system"][0]["cache_control"].is_object(),
        "marker at the end of the system prompt"
    );
    assert!(
        v["messages"][2]["content"]
            .to_string()
            .contains("cache_control"),
        "marker on the last message"
    );
    // OpenAI: prompt_cache_key from the session.
    let r = client()
        .post(format!("http://{}/v1/chat/completions", proxy.addr))
        .header("x-cachet-session", "sess-42")
        .body(r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = serde_json::from_slice(&upstream.requests()[1].body).unwrap();
    assert_eq!(v["prompt_cache_key"], "sess-42");
    proxy.shutdown().await;
}

#[tokio::test]
async fn turn_end_gets_the_assistant_message_assembled_from_a_stream() {
    let events = [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":4,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Streamed "}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"answer."}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let steps = events
        .iter()
        .map(|e| {
            let name = serde_json::from_str::<Value>(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string();
            chunk(&format!("event: {name}\ndata: {e}\n\n"))
        })
        .collect();
    let upstream = FakeUpstream::start(Script::sse(steps)).await;
    let hook = start_hook_server(|_| None).await;
    let (proxy, _dir) = with_hook(&upstream, "te", &hook, "context:turn_end").await;
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("x-cachet-session", "st")
        .body(BODY)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r
        .text()
        .await
        .unwrap()
        .ends_with("data: {\"type\":\"message_stop\"}\n\n"));
    wait_for_requests(&proxy, "st", 1).await;
    let events = hook.events.lock().unwrap().clone();
    let turn_end = events
        .iter()
        .find(|e| e["reason"] == "turn_end")
        .expect("turn_end sent");
    assert_eq!(
        turn_end["assistant"]["content"][0]["text"],
        "Streamed answer."
    );
    assert_eq!(turn_end["usage"]["output"], 3);
    proxy.shutdown().await;
}

/// A payload edit re-serialises only what it changed: the history the cache keys on keeps
/// the client's bytes (Claude Code's tool inputs in its own key order, its numbers as
/// written). Before, the whole body was re-serialised.
#[tokio::test]
async fn payload_edits_keep_the_bytes_they_do_not_touch() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let (proxy, _dir) = with_policy(
        &upstream,
        "payload",
        r#"
name = "payload"
[[payload]]
json_patch = [ { op = "add", path = "/metadata", value = { user_id = "{{session}}" } } ]
"#,
    )
    .await;
    let messages = r#"[{"role":"user","content":"run it"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"timeout":120000,"command":"ls -la",  "description":"List files"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"total 0","is_error":false}]}]"#;
    let body = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":32000,"temperature":1.0,"messages":{messages},"stream":false}}"#
    );
    assert_eq!(send(&proxy, "cc-1", &body).await, 200);
    let sent = String::from_utf8(upstream.requests()[0].body.to_vec()).unwrap();
    assert!(sent.contains(messages), "{sent}");
    assert!(sent.contains(r#""temperature":1.0"#), "{sent}");
    let v: Value = serde_json::from_str(&sent).unwrap();
    assert_eq!(v["metadata"]["user_id"], "cc-1");
    proxy.shutdown().await;
}

/// `turn_end` handlers see only a complete answer: a stream cut halfway, or one the
/// provider ends with an `error` event after its 200, hands them nothing and persists
/// nothing.
#[tokio::test]
async fn turn_end_does_not_run_on_cut_or_failed_streams() {
    let head = [
        r#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","content":[],"usage":{"input_tokens":4,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Half an ans"}}"#,
    ];
    let event = |e: &str| {
        let name = serde_json::from_str::<Value>(e).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string();
        chunk(&format!("event: {name}\ndata: {e}\n\n"))
    };
    let cut: Vec<Step> = head.iter().map(|e| event(e)).chain([Step::Cut]).collect();
    let failed: Vec<Step> = head
        .iter()
        .map(|e| event(e))
        .chain([event(
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )])
        .collect();
    for (name, steps) in [("cut", cut), ("failed", failed)] {
        let upstream = FakeUpstream::start(Script::sse(steps)).await;
        let policy = r#"
name = "notes"
[[context]]
reason = "turn_end"
patch = [ { op = "messages_insert", at = "end", messages = [ { role = "user", content = "NOTE" } ],
            invalidateCacheReason = "a note for later turns" } ]
"#;
        let (proxy, _dir) = with_policy(&upstream, "notes", policy).await;
        let r = client()
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "k")
            .header("x-cachet-session", name)
            .body(BODY)
            .send()
            .await
            .unwrap();
        let _ = r.text().await;
        let log = wait_for_requests(&proxy, name, 1).await;
        assert_eq!(
            log["context_transforms"], 0,
            "{name}: no turn_end patch persisted: {log}"
        );
        proxy.shutdown().await;
    }
}

/// A stateful Responses conversation (openai-python's `responses.create` with
/// `previous_response_id`) sends one question a request; the provider holds the rest. Each
/// question is a turn of its own, so `{{turn_index}}` counts 0, 1, 2, 3 (the session log
/// too), not 0 each time as the carried input alone would say.
#[tokio::test]
async fn a_stateful_responses_chain_counts_the_turns_the_provider_holds() {
    let (proxy, _upstream, _dir) = held_turns_counted(|body, i| {
        if i > 0 {
            body["previous_response_id"] = json!(format!("resp_{}", i - 1));
        }
    })
    .await;
    proxy.shutdown().await;
}

/// The same with the Conversations API (`responses.create(conversation=…)`): each request
/// names the conversation, whose items the provider reads before its one question. After a
/// restart, with nothing remembered, the turn is counted on from the session's log.
#[tokio::test]
async fn a_conversations_api_conversation_counts_the_turns_the_provider_holds() {
    let on_conversation = |body: &mut Value, _: usize| body["conversation"] = json!("conv_7f3a");
    let (proxy, upstream, dir) = held_turns_counted(on_conversation).await;
    proxy.shutdown().await;
    let policy = dir.path().join("turns.toml");
    let config = policy_config(&upstream.url(), vec![policy], &dir.path().join("store"));
    let restarted = start_proxy(config).await;
    let mut body = json!({"model": "gpt-4.1", "instructions": "Be brief.", "input": "question 4"});
    on_conversation(&mut body, 4);
    upstream.set_script(Script::json(200, &held_turn_reply("resp_4")));
    answer_of(
        client()
            .post(format!("http://{}/v1/responses", restarted.addr))
            .header("authorization", "Bearer sk-test")
            .json(&body),
    )
    .await;
    let sent = String::from_utf8(upstream.requests()[4].body.to_vec()).unwrap();
    assert!(sent.contains("turn 4"), "after a restart: {sent}");
    restarted.shutdown().await;
}

fn held_turn_reply(id: &str) -> String {
    json!({"id": id, "object": "response", "status": "completed", "model": "gpt-4.1",
        "output": [{"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Done."}]}],
        "usage": {"input_tokens": 10, "output_tokens": 2,
                  "input_tokens_details": {"cached_tokens": 0}}})
    .to_string()
}

/// Four questions, one a request, each made stateful by `stateful` (given the body and
/// its number), through a policy appending `turn {{turn_index}}`: each request carries its
/// own turn, and so does the session log.
async fn held_turns_counted(
    stateful: impl Fn(&mut Value, usize),
) -> (cachet::server::ProxyHandle, FakeUpstream, tempfile::TempDir) {
    let upstream = FakeUpstream::start(Script::json(200, &held_turn_reply("resp_0"))).await;
    let policy = r#"
name = "turns"
[[context]]
reason = "ephemeral"
patch = [{ op = "messages_uncached_append", messages = [{ role = "user", content = "turn {{turn_index}}" }] }]
"#;
    let (proxy, dir) = with_policy(&upstream, "turns", policy).await;
    for i in 0..4 {
        upstream.set_script(Script::json(200, &held_turn_reply(&format!("resp_{i}"))));
        let mut body = json!({"model": "gpt-4.1", "instructions": "Be brief.",
                              "input": format!("question {i}")});
        stateful(&mut body, i);
        let answer: Value = answer_of(
            client()
                .post(format!("http://{}/v1/responses", proxy.addr))
                .header("authorization", "Bearer sk-test")
                .json(&body),
        )
        .await;
        assert_eq!(answer["id"], format!("resp_{i}"));
        let sent = String::from_utf8(upstream.requests()[i].body.to_vec()).unwrap();
        assert!(sent.contains(&format!("turn {i}")), "request {i}: {sent}");
    }
    let listed = wait_for_sessions(&proxy, 1).await;
    assert_eq!(listed.len(), 1, "one conversation: {listed:?}");
    let log = wait_for_requests(&proxy, listed[0]["id"].as_str().unwrap(), 4).await;
    let entries = request_entries(&log);
    let turns: Vec<Value> = entries.iter().map(|e| e["turn_index"].clone()).collect();
    assert_eq!(turns, [json!(0), json!(1), json!(2), json!(3)], "{log}");
    assert!(
        entries.iter().all(|e| e["lane"] == entries[0]["lane"]),
        "{log}"
    );
    (proxy, upstream, dir)
}

/// Claude Code's body, as it would send it without white space.
fn claude_code_compact() -> (Value, String) {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/claude_code.json"
    ))
    .unwrap();
    let body: Value = serde_json::from_str(&text).unwrap();
    let compact = serde_json::to_string(&body).unwrap();
    (body, compact)
}

/// A policy that drops the client's `metadata` (its user id) before the provider sees it
/// takes out that member and nothing else: the members after it stay where they were.
/// Before, the edit ran on a `Value`, whose removal swaps the last member into the gap, so
/// Claude Code's `stream` moved in front of `max_tokens`, `thinking` and the rest.
#[tokio::test]
async fn a_removed_member_leaves_the_others_in_the_clients_order() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let policy = r#"
name = "private"
[[payload]]
json_patch = [ { op = "remove", path = "/metadata" } ]
"#;
    let (proxy, _dir) = with_policy(&upstream, "private", policy).await;
    let (mut body, compact) = claude_code_compact();
    assert_eq!(send(&proxy, "cc", &compact).await, 200);
    body.as_object_mut().unwrap().shift_remove("metadata");
    let expected = serde_json::to_string(&body).unwrap();
    let sent = String::from_utf8(upstream.requests()[0].body.to_vec()).unwrap();
    assert_eq!(sent, expected);
    proxy.shutdown().await;
}

/// A proxy whose one policy (`hooks`) sends `before_provider_request` to a hook answering
/// `answer(event)`.
async fn with_payload_hook(
    upstream: &FakeUpstream,
    answer: impl Fn(&Value) -> Value + Send + Sync + 'static,
) -> (cachet::server::ProxyHandle, HookServer, tempfile::TempDir) {
    let hook = start_hook_server(move |event| {
        (event["type"] == "before_provider_request").then(|| answer(event))
    })
    .await;
    let (proxy, dir) = with_hook(upstream, "hooks", &hook, "before_provider_request").await;
    (proxy, hook, dir)
}

/// A proxy whose one policy, `name`, sends `event` to `hook`.
async fn with_hook(
    upstream: &FakeUpstream,
    name: &str,
    hook: &HookServer,
    event: &str,
) -> (cachet::server::ProxyHandle, tempfile::TempDir) {
    let text = format!(
        "name = \"{name}\"\n[[hook]]\nurl = \"{}\"\nevents = [\"{event}\"]\n",
        hook.url
    );
    with_policy(upstream, name, &text).await
}

/// A proxy with one policy, `name`, of `text`, and its embedded store in the folder.
async fn with_policy(
    upstream: &FakeUpstream,
    name: &str,
    text: &str,
) -> (cachet::server::ProxyHandle, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(dir.path(), name, text);
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        vec![policy],
        &dir.path().join("store"),
    ))
    .await;
    (proxy, dir)
}

/// A hook's JSON Patch that moves a value up into its parent and then fails a `test` is
/// refused as a whole, and the request goes on unchanged. Before, the `json-patch` crate
/// undid the move with the inverse move, which it refuses ("cannot move the value inside
/// itself"), and panicked: the request's task died and the client's connection was cut.
#[tokio::test]
async fn a_hook_patch_that_fails_after_a_move_is_refused_not_a_crash() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let (proxy, _hook, _dir) = with_payload_hook(&upstream, |_| {
        json!({"json_patch": [
            {"op": "move", "from": "/metadata/user_id", "path": "/metadata"},
            {"op": "test", "path": "/model", "value": "claude-haiku-4-5"},
        ]})
    })
    .await;
    let (_, compact) = claude_code_compact();
    let status = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("x-cachet-session", "cc")
        .body(compact.clone())
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(status.ok(), Some(200), "the request is answered");
    assert_eq!(
        upstream.requests()[0].body,
        compact.as_bytes(),
        "sent unchanged"
    );
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(&m, "cachet_hook_failures_total", &[("hook", "hooks#0")]),
        Some(1.0)
    );
    proxy.shutdown().await;
}

/// A hook that answers with the whole payload, parsed and written again (numbers and white
/// space its own way) with one field changed: what it did not change goes upstream in the
/// client's bytes.
#[tokio::test]
async fn a_replaced_payload_keeps_the_clients_bytes_where_it_agrees() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let (proxy, hook, _dir) = with_payload_hook(&upstream, |event| {
        let mut payload = event["payload"].clone();
        payload["max_tokens"] = json!(64);
        json!({ "payload": payload })
    })
    .await;
    assert_eq!(send(&proxy, "s", BODY).await, 200);
    let sent = String::from_utf8(upstream.requests()[0].body.to_vec()).unwrap();
    assert_eq!(
        sent,
        BODY.replace("\"max_tokens\":100", "\"max_tokens\":64")
    );
    // The hook saw the payload as it goes upstream, white space and all.
    let events = hook.events.lock().unwrap().clone();
    assert_eq!(
        events[0]["payload"],
        serde_json::from_str::<Value>(BODY).unwrap()
    );
    proxy.shutdown().await;
}

/// A `[[payload]]` edit that fails is left out, logged and counted, and the next edit still
/// applies. Before, the first failure stopped every edit after it, and nothing counted it.
#[tokio::test]
async fn a_failing_payload_edit_is_counted_and_the_next_one_applies() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let policy = r#"
name = "edits"
[[payload]]
json_patch = [ { op = "remove", path = "/top_k" } ]
[[payload]]
merge_patch = { temperature = 0 }
"#;
    let (proxy, _dir) = with_policy(&upstream, "edits", policy).await;
    assert_eq!(send(&proxy, "s", BODY).await, 200);
    let sent = String::from_utf8(upstream.requests()[0].body.to_vec()).unwrap();
    assert_eq!(
        sent,
        BODY.replace("\"temperature\":0.50", "\"temperature\":0")
    );
    let m = metrics_text(&proxy).await;
    let count = |op, outcome| {
        metric_value(
            &m,
            "cachet_patches_total",
            &[("transformer", "edits"), ("op", op), ("outcome", outcome)],
        )
    };
    assert_eq!(count("json_patch", "refused"), Some(1.0));
    assert_eq!(count("merge_patch", "applied"), Some(1.0));
    proxy.shutdown().await;
}
