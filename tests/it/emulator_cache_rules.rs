//! Probes of the emulator's cache rules over HTTP, each against the documented rule it
//! models (the source is cited on each test).

use std::process::Command;

use cachet::emulator::{spawn, EmulatorHandle, EmulatorOptions};
use serde_json::{json, Value};

async fn start() -> EmulatorHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn(listener, EmulatorOptions::default()).await.unwrap()
}

async fn post_with(
    emu: &EmulatorHandle,
    path: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(format!("{}{path}", emu.url()))
        .header("anthropic-version", "2023-06-01")
        .json(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

async fn post(emu: &EmulatorHandle, path: &str, body: &Value) -> (u16, Value) {
    post_with(emu, path, body, &[]).await
}

/// A megabyte of one character used to overflow the tokenizer's stack; the emulator then
/// answered 500 to every later request (issue 11). It must answer, and keep answering.
#[tokio::test]
async fn a_megabyte_of_one_character_is_answered_and_the_emulator_stays_up() {
    let emu = start().await;
    let long = "a".repeat(1 << 20);
    let anthropic = json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
        "messages": [{"role": "user", "content": long}]});
    let (status, body) = post(&emu, "/v1/messages", &anthropic).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["usage"]["input_tokens"].as_u64().unwrap() > 1000);
    let chat =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "!".repeat(1 << 20)}]});
    let (status, body) = post(&emu, "/v1/chat/completions", &chat).await;
    assert_eq!(status, 200, "{body}");
    let small = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(post(&emu, "/v1/chat/completions", &small).await.0, 200);
    emu.shutdown().await;
}

/// `cachet replay` on a trace holding such a request finishes (it used to exit 101).
#[test]
fn replay_of_a_megabyte_of_one_character_does_not_crash() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("long.jsonl");
    let record = json!({"v": 1, "time": "2026-01-15T09:00:00Z", "session": "s",
        "provider": "anthropic", "endpoint": "messages", "path": "/v1/messages",
        "body": {"model": "claude-sonnet-4-5", "max_tokens": 8,
            "messages": [{"role": "user", "content": " ".repeat(1 << 20)}]},
        "usage": null, "status": 200});
    std::fs::write(&trace, format!("{record}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["replay", trace.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["arms"][0]["requests"], 1);
}

fn words(tag: &str, n: usize) -> String {
    format!(
        "{tag}: {}",
        "the build step resolves every path first ".repeat(n)
    )
}

/// Claude Code's turn 1 (prompt, tool call, tool result with a reminder, answer) and the
/// first request of turn 2, the last block marked, as Claude Code marks it.
fn claude_code_request(model: &str, turn2: bool, cm: Option<Value>) -> Value {
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Fix the failing build."}]}),
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": words("plan", 60), "signature": "sig1"},
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make"}}]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": words("log", 80)},
            {"type": "text", "text": "<system-reminder>todo list is empty</system-reminder>",
             "cache_control": {"type": "ephemeral"}}]}),
    ];
    if turn2 {
        messages[2]["content"][1]
            .as_object_mut()
            .unwrap()
            .remove("cache_control");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": words("check", 60), "signature": "sig2"},
            {"type": "text", "text": "Fixed."}]}));
        messages.push(
            json!({"role": "user", "content": [{"type": "text", "text": "Run the tests.",
            "cache_control": {"type": "ephemeral"}}]}),
        );
    }
    let mut req = json!({"model": model, "max_tokens": 64, "thinking": {"type": "adaptive"},
        "system": [{"type": "text", "text": words("system", 900), "cache_control": {"type": "ephemeral"}}],
        "messages": messages});
    if let Some(cm) = cm {
        req["context_management"] = cm;
    }
    req
}

fn total_input(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ]
    .iter()
    .map(|k| usage[k].as_u64().unwrap())
    .sum()
}

/// What the first request of turn 2 reads after turn 1's last request, and turn 1's size.
async fn turn_two_read(model: &str, cm: Option<Value>) -> (u64, u64) {
    let emu = start().await;
    let (_, end_of_turn_1) = post(
        &emu,
        "/v1/messages",
        &claude_code_request(model, false, cm.clone()),
    )
    .await;
    let (status, turn2) = post(&emu, "/v1/messages", &claude_code_request(model, true, cm)).await;
    assert_eq!(status, 200, "{turn2}");
    emu.shutdown().await;
    (
        turn2["usage"]["cache_read_input_tokens"].as_u64().unwrap(),
        total_input(&end_of_turn_1["usage"]),
    )
}

/// Thinking retention by model and `context_management`
/// (platform.claude.com/docs/en/build-with-claude/extended-thinking: Opus 4.5+ and Sonnet
/// 4.6+ keep all prior thinking blocks, Sonnet 4.5 and earlier only the last turn's;
/// .../context-editing: `clear_thinking_20251015` with `keep`).
#[tokio::test]
async fn thinking_is_kept_or_dropped_by_model_and_context_management() {
    let keep_all = json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
    let keep_one = json!({"edits": [{"type": "clear_thinking_20251015",
        "keep": {"type": "thinking_turns", "value": 1}}]});
    // Kept: the new turn reads all of turn 1.
    for (model, cm) in [
        ("claude-opus-5-5", None),
        ("claude-sonnet-4-6", None),
        ("claude-sonnet-4-5", Some(keep_all)),
    ] {
        let (read, turn1) = turn_two_read(model, cm.clone()).await;
        assert_eq!(read, turn1, "{model} {cm:?}");
    }
    // Dropped: turn 1's thinking leaves the prompt, so only what precedes it is read.
    for (model, cm) in [
        ("claude-sonnet-4-5", None),
        ("claude-opus-5-5", Some(keep_one)),
    ] {
        let (read, turn1) = turn_two_read(model, cm.clone()).await;
        assert!(
            read > 0 && read < turn1,
            "{model} {cm:?}: read {read} of {turn1}"
        );
    }
}

/// Opus 5's minimum cacheable length is 512 tokens ("lower than Claude Opus 4.8's 1,024",
/// platform.claude.com whats-new-opus-5); Opus 4.6 needs 4096 and Sonnet 4.5 1024.
#[tokio::test]
async fn the_opus_5_minimum_is_512_tokens() {
    let emu = start().await;
    let body = |model: &str| {
        json!({"model": model, "max_tokens": 8,
            "system": [{"type": "text", "text": words("rules", 95), "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}]})
    };
    let (_, opus5) = post(&emu, "/v1/messages", &body("claude-opus-5")).await;
    let written = opus5["usage"]["cache_creation_input_tokens"]
        .as_u64()
        .unwrap();
    assert!((512..1024).contains(&written), "{opus5}");
    for model in ["claude-opus-4-6", "claude-sonnet-4-5"] {
        let (_, other) = post(&emu, "/v1/messages", &body(model)).await;
        assert_eq!(other["usage"]["cache_creation_input_tokens"], 0, "{model}");
    }
    emu.shutdown().await;
}

/// The prompt-caching guide: hits come in 128-token steps of the longest matching prefix,
/// token by token: a long message whose last tenth changed is read up to about 90%.
#[tokio::test]
async fn openai_reads_most_of_a_message_whose_end_changed() {
    let emu = start().await;
    let head: String = (0..360)
        .map(|i| format!("Line {i} of the design document explains one module. "))
        .collect();
    let body = |tail: &str| {
        json!({"model": "gpt-4o", "prompt_cache_key": "doc",
            "messages": [{"role": "user", "content": format!("{head}{tail}")}]})
    };
    let (_, first) = post(
        &emu,
        "/v1/chat/completions",
        &body(&"Original ending. ".repeat(120)),
    )
    .await;
    let (_, second) = post(
        &emu,
        "/v1/chat/completions",
        &body(&"A rewritten ending. ".repeat(100)),
    )
    .await;
    let total = first["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(cached % 128, 0);
    let share = cached as f64 / total as f64;
    assert!((0.8..0.95).contains(&share), "{cached} of {total}");
    emu.shutdown().await;
}

/// GPT-5.6 explicit caching: `prompt_cache_options {mode, ttl}`, a `prompt_cache_breakpoint`
/// on a content part, and `cache_write_tokens` in the usage (openai-python
/// `PromptCacheOptions`, `ResponseUsage.InputTokensDetails`), streaming and not.
#[tokio::test]
async fn explicit_caching_reports_cache_write_tokens() {
    let emu = start().await;
    let body = |question: &str, stream: bool| {
        json!({"model": "gpt-5.6", "stream": stream, "prompt_cache_key": "s",
            "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
            "input": [
                {"type": "message", "role": "developer", "content": [
                    {"type": "input_text", "text": words("rules", 200),
                     "prompt_cache_breakpoint": {"mode": "explicit"}}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}]})
    };
    let (_, first) = post(&emu, "/v1/responses", &body("first?", false)).await;
    let details = &first["usage"]["input_tokens_details"];
    let written = details["cache_write_tokens"].as_u64().unwrap();
    assert!(written > 1024 && written < first["usage"]["input_tokens"].as_u64().unwrap());
    assert_eq!(details["cached_tokens"], 0);

    let text = reqwest::Client::new()
        .post(format!("{}/v1/responses", emu.url()))
        .json(&body("second?", true))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let completed = text
        .split("\n\n")
        .find_map(|frame| {
            frame
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .and_then(|d| serde_json::from_str::<Value>(d).ok())
                .filter(|v| v["type"] == "response.completed")
        })
        .unwrap();
    let details = &completed["response"]["usage"]["input_tokens_details"];
    assert_eq!(details["cached_tokens"], written);
    assert_eq!(details["cache_write_tokens"], 0);

    let (status, bad) = post(
        &emu,
        "/v1/responses",
        &json!({"model": "gpt-5.6", "prompt_cache_options": {"ttl": "2h"}, "input": "x"}),
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    emu.shutdown().await;
}

const DIAGNOSIS_BETA: (&str, &str) = ("anthropic-beta", "cache-diagnosis-2026-04-07");

fn diagnosed(
    model: &str,
    tools: &str,
    system: &str,
    turns: usize,
    previous: Option<&str>,
) -> Value {
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(json!({"role": "user", "content": words(&format!("question {i}"), 30)}));
        messages.push(json!({"role": "assistant", "content": words(&format!("answer {i}"), 30)}));
    }
    // The newest question, marked; the next request keeps it and appends (append-only).
    messages.push(json!({"role": "user", "content": [{"type": "text",
        "text": words(&format!("question {turns}"), 30), "cache_control": {"type": "ephemeral"}}]}));
    json!({"model": model, "max_tokens": 8,
        "tools": [{"name": "Read", "description": tools, "input_schema": {"type": "object"}}],
        "system": [{"type": "text", "text": words(system, 300), "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "diagnostics": {"previous_message_id": previous}})
}

fn reason(response: &Value) -> &Value {
    &response["diagnostics"]["cache_miss_reason"]
}

/// Anthropic's cache diagnostics beta (platform.claude.com/docs/en/build-with-claude/
/// cache-diagnostics; anthropic-sdk-python `BetaDiagnostics`, `BetaCacheMiss*`): with the
/// beta header, a request naming the previous response id in
/// `diagnostics.previous_message_id` gets `diagnostics.cache_miss_reason`, null when the
/// prefix still matches. Without the header the response is unchanged.
#[tokio::test]
async fn cache_diagnostics_name_the_first_divergence() {
    let emu = start().await;
    let beta = [DIAGNOSIS_BETA];
    let (_, first) = post_with(
        &emu,
        "/v1/messages",
        &diagnosed("claude-opus-5-5", "t", "s", 1, None),
        &beta,
    )
    .await;
    assert!(
        first["diagnostics"].is_object() && reason(&first).is_null(),
        "{first}"
    );
    let id1 = first["id"].as_str().unwrap().to_string();
    let (_, grown) = post_with(
        &emu,
        "/v1/messages",
        &diagnosed("claude-opus-5-5", "t", "s", 2, Some(&id1)),
        &beta,
    )
    .await;
    assert!(reason(&grown).is_null(), "{grown}");
    let id2 = grown["id"].as_str().unwrap().to_string();

    let cases = [
        (
            diagnosed("claude-sonnet-4-6", "t", "s", 2, Some(&id2)),
            "model_changed",
        ),
        (
            diagnosed("claude-opus-5-5", "T", "s", 2, Some(&id2)),
            "tools_changed",
        ),
        (
            diagnosed("claude-opus-5-5", "t", "S", 2, Some(&id2)),
            "system_changed",
        ),
    ];
    for (body, kind) in cases {
        let (status, resp) = post_with(&emu, "/v1/messages", &body, &beta).await;
        assert_eq!(status, 200, "{resp}");
        assert_eq!(reason(&resp)["type"], kind, "{resp}");
        assert!(reason(&resp)["cache_missed_input_tokens"].as_u64().unwrap() > 0);
    }
    let mut edited = diagnosed("claude-opus-5-5", "t", "s", 2, Some(&id2));
    edited["messages"][2]["content"] = json!("an edited question");
    let (_, resp) = post_with(&emu, "/v1/messages", &edited, &beta).await;
    assert_eq!(reason(&resp)["type"], "messages_changed", "{resp}");
    let missed = reason(&resp)["cache_missed_input_tokens"].as_u64().unwrap();
    let (_, model_changed) = post_with(
        &emu,
        "/v1/messages",
        &diagnosed("claude-sonnet-4-6", "t", "s", 2, Some(&id2)),
        &beta,
    )
    .await;
    assert!(
        missed
            < reason(&model_changed)["cache_missed_input_tokens"]
                .as_u64()
                .unwrap()
    );

    let (_, lost) = post_with(
        &emu,
        "/v1/messages",
        &diagnosed("claude-opus-5-5", "t", "s", 2, Some("msg_gone")),
        &beta,
    )
    .await;
    assert_eq!(
        reason(&lost),
        &json!({"type": "previous_message_not_found"})
    );
    let (_, down) = post_with(
        &emu,
        "/v1/messages",
        &diagnosed("claude-opus-5-5", "t", "s", 2, Some(&id2)),
        &[
            DIAGNOSIS_BETA,
            ("x-cachet-emulate-fault", "diagnostics-unavailable"),
        ],
    )
    .await;
    assert_eq!(reason(&down), &json!({"type": "unavailable"}));

    // Without the beta header: no diagnostics field at all.
    let (_, plain) = post(
        &emu,
        "/v1/messages",
        &diagnosed("claude-opus-5-5", "T", "s", 2, Some(&id2)),
    )
    .await;
    assert!(plain.get("diagnostics").is_none(), "{plain}");

    // Streaming: the object rides on message_start's message.
    let mut streamed = diagnosed("claude-opus-5-5", "t", "S", 2, Some(&id2));
    streamed["stream"] = json!(true);
    let text = reqwest::Client::new()
        .post(format!("{}/v1/messages", emu.url()))
        .header(DIAGNOSIS_BETA.0, DIAGNOSIS_BETA.1)
        .json(&streamed)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let start = text
        .split("\n\n")
        .find(|f| f.starts_with("event: message_start"))
        .and_then(|f| f.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .unwrap();
    assert_eq!(reason(&start["message"])["type"], "system_changed");
    emu.shutdown().await;
}

/// A stored response (`store`, on by default) is continued by `previous_response_id`: the
/// model sees the earlier input and output before the new input, and every earlier input
/// token is billed again as input (developers.openai.com, Conversation state, "Passing
/// context from the previous response"); "the instructions from a previous response will
/// not be carried over to the next response" (openai-python, `responses.create`,
/// `instructions`). So the next request's prompt holds the whole conversation, and reads the
/// earlier part from cache. An answer not stored cannot be continued: a 400.
#[tokio::test]
async fn a_previous_response_id_puts_the_stored_conversation_before_the_input() {
    let emu = start().await;
    let instructions = "You are a careful assistant. ".repeat(200);
    let first = json!({"model": "gpt-4.1", "instructions": instructions,
        "input": "Summarise the design document. ".repeat(100)});
    let (status, one) = post(&emu, "/v1/responses", &first).await;
    assert_eq!(status, 200, "{one}");
    let asked = one["usage"]["input_tokens"].as_u64().unwrap();
    let next = json!({"model": "gpt-4.1", "instructions": instructions, "input": "And shorter?",
        "previous_response_id": one["id"]});
    let (status, two) = post(&emu, "/v1/responses", &next).await;
    assert_eq!(status, 200, "{two}");
    let usage = &two["usage"];
    let input = usage["input_tokens"].as_u64().unwrap();
    let cached = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        input > asked,
        "the earlier conversation is in the prompt: {input} <= {asked}"
    );
    assert!(
        cached >= asked - 128 && cached < input,
        "the earlier prompt is read from cache: {cached} of {input} (first asked {asked})"
    );
    // Not stored: it cannot be continued.
    let unstored = json!({"model": "gpt-4.1", "input": "hi", "store": false});
    let (_, gone) = post(&emu, "/v1/responses", &unstored).await;
    let (status, err) = post(
        &emu,
        "/v1/responses",
        &json!({"model": "gpt-4.1", "input": "and?", "previous_response_id": gone["id"]}),
    )
    .await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not found"),
        "{err}"
    );
}
