//! The emulator's scripted tool loop, on request bodies recorded from real agents (pi 0.73.1
//! on its three APIs, Claude Code 2.1.330, Codex 0.169.0; see tests/e2e/make_samples.py):
//! a bounded number of tool steps per user prompt, tools from an allow-list only, and a
//! tool-loop continuation recognised the way the provider does.
//!
//! Provider facts relied on:
//! - Anthropic merges consecutive user messages into one turn, and in a user message that
//!   answers tool calls, text may follow the `tool_result` blocks
//!   (https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls:
//!   tool results come first in the content array, any text after them). Such a turn is
//!   still the answer to the tool call, not a new prompt.
//! - Chat Completions answers tool calls with `role: "tool"` messages and Responses with
//!   `function_call_output` items; a user message after them belongs to the same turn.

use cachet::emulator::{spawn, EmulatorHandle, EmulatorOptions, ReplyScript, ToolCalls};
use serde_json::{json, Value};

use crate::support::*;

fn sample(name: &str) -> Value {
    let path = format!("{}/tests/data/clients/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn emulator(tool_calls: ToolCalls, max_tool_steps: u32) -> EmulatorHandle {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reply = ReplyScript {
        tool_calls,
        max_tool_steps,
        ..Default::default()
    };
    spawn(
        listener,
        EmulatorOptions {
            reply,
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Api {
    Messages,
    Chat,
    Responses,
}

impl Api {
    fn path(self) -> &'static str {
        match self {
            Api::Messages => "/v1/messages",
            Api::Chat => "/v1/chat/completions",
            Api::Responses => "/v1/responses",
        }
    }

    fn list(self) -> &'static str {
        match self {
            Api::Responses => "input",
            _ => "messages",
        }
    }
}

/// The sample as a non-streaming request, so the answer is one JSON document.
fn unstreamed(mut body: Value) -> Value {
    body["stream"] = json!(false);
    if let Some(obj) = body.as_object_mut() {
        obj.remove("stream_options");
    }
    body
}

/// POST `body` to `base` (the emulator or a proxy); the answer's JSON.
async fn ask(base: &str, api: Api, body: &Value) -> Value {
    let r = client()
        .post(format!("{base}{}", api.path()))
        .header("x-api-key", "sk-ant-dummy")
        .header("anthropic-version", "2023-06-01")
        .header("authorization", "Bearer sk-dummy")
        .json(&unstreamed(body.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// The tool the answer calls and its arguments, if it calls one.
fn call(api: Api, answer: &Value) -> Option<(String, Value)> {
    let (name, input) = match api {
        Api::Messages => {
            let block = answer["content"]
                .as_array()?
                .iter()
                .find(|b| b["type"] == "tool_use")?;
            (block["name"].as_str()?, block["input"].clone())
        }
        Api::Chat => {
            let f = answer.pointer("/choices/0/message/tool_calls/0/function")?;
            (
                f["name"].as_str()?,
                serde_json::from_str(f["arguments"].as_str()?).ok()?,
            )
        }
        Api::Responses => {
            let item = answer["output"]
                .as_array()?
                .iter()
                .find(|i| i["type"] == "function_call")?;
            (
                item["name"].as_str()?,
                serde_json::from_str(item["arguments"].as_str()?).ok()?,
            )
        }
    };
    Some((name.to_string(), input))
}

fn called_tool(api: Api, answer: &Value) -> Option<String> {
    call(api, answer).map(|(name, _)| name)
}

/// The sample cut back to its user prompt: without the last tool call and its result.
fn prompt_only(api: Api, body: &Value) -> Value {
    let mut body = body.clone();
    let items = body[api.list()].as_array_mut().unwrap();
    let len = items.len();
    items.truncate(len - 2);
    body
}

/// Real tool-loop requests: each has exactly one tool call answered.
fn clients() -> Vec<(&'static str, Api, Value)> {
    vec![
        (
            "pi anthropic-messages",
            Api::Messages,
            sample("pi_anthropic_tool_loop.json"),
        ),
        (
            "pi openai-completions",
            Api::Chat,
            sample("pi_chat_tool_loop.json"),
        ),
        (
            "pi openai-responses",
            Api::Responses,
            sample("pi_responses_tool_loop.json"),
        ),
        (
            "Claude Code",
            Api::Messages,
            sample("claude_code_tool_loop.json"),
        ),
        ("Codex", Api::Responses, sample("codex_tool_loop.json")),
    ]
}

#[tokio::test]
async fn tool_steps_are_bounded_per_user_prompt() {
    for steps in [1, 2] {
        let emu = emulator(ToolCalls::FirstAllowed, steps).await;
        for (client, api, body) in clients() {
            let first = ask(&emu.url(), api, &prompt_only(api, &body)).await;
            assert!(
                called_tool(api, &first).is_some(),
                "{client}: a new prompt gets a tool call: {first}"
            );
            let after_one = ask(&emu.url(), api, &body).await;
            assert_eq!(
                called_tool(api, &after_one).is_some(),
                steps > 1,
                "{client}, {steps} steps allowed: after one tool step: {after_one}"
            );
        }
        emu.shutdown().await;
    }
}

#[tokio::test]
async fn only_allow_listed_tools_are_called_with_harmless_inputs() {
    let emu = emulator(ToolCalls::FirstAllowed, 1).await;
    for (client, api, body) in clients() {
        let answer = ask(&emu.url(), api, &prompt_only(api, &body)).await;
        let (name, input) = call(api, &answer).unwrap_or_default();
        assert!(
            cachet::emulator::tool_loop::ALLOWED_TOOLS
                .iter()
                .any(|t| t.eq_ignore_ascii_case(&name)),
            "{client}: `{name}` is on the allow-list"
        );
        assert!(
            !["agent", "task"].contains(&name.to_ascii_lowercase().as_str()),
            "{client}: never a subagent tool"
        );
        // Every argument is a placeholder (no such file) or the listing command.
        for (key, value) in input.as_object().unwrap() {
            let value = value.as_str().unwrap_or_default();
            assert!(
                value == "ls" || value == format!("example {key}"),
                "{client}: `{key}` = `{value}` is harmless in a scratch folder"
            );
        }
    }
    emu.shutdown().await;
}

#[tokio::test]
async fn claude_code_never_gets_its_agent_tool() {
    // Claude Code offers `Agent` first; a subagent offers it again, so calling it never ends.
    let body = sample("claude_code_tool_loop.json");
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(
        tools.first(),
        Some(&"Agent"),
        "the sample offers Agent first"
    );
    let emu = emulator(ToolCalls::FirstAllowed, 3).await;
    let answer = ask(
        &emu.url(),
        Api::Messages,
        &prompt_only(Api::Messages, &body),
    )
    .await;
    let name = called_tool(Api::Messages, &answer).unwrap();
    assert_ne!(name, "Agent");
    assert_eq!(name, "Read", "the first read-only tool Claude Code offers");
    emu.shutdown().await;
}

#[tokio::test]
async fn text_after_a_tool_result_is_still_the_tool_loop() {
    let emu = emulator(ToolCalls::FirstAllowed, 1).await;
    let body = sample("claude_code_tool_loop.json");
    let reminder = "<system-reminder>\nThe task list is empty.\n</system-reminder>";

    // Claude Code's system reminder as a text block after the tool_result.
    let mut same_message = body.clone();
    let last = same_message["messages"]
        .as_array_mut()
        .unwrap()
        .last_mut()
        .unwrap();
    last["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text": reminder}));
    // A policy's message after the tool_result message: one user turn for the provider.
    let mut next_message = body.clone();
    next_message["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": [{"type": "text", "text": reminder}]}));
    let mut chat = sample("pi_chat_tool_loop.json");
    chat["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "user", "content": "Current date: 2026-11-23"}));
    let mut responses = sample("pi_responses_tool_loop.json");
    responses["input"].as_array_mut().unwrap().push(
        json!({"role": "user", "content": [{"type": "input_text", "text": "Current date: 2026-11-23"}]}),
    );

    for (what, api, body) in [
        ("reminder block", Api::Messages, same_message),
        (
            "user message after tool_result",
            Api::Messages,
            next_message,
        ),
        ("user message after role tool", Api::Chat, chat),
        (
            "user message after function_call_output",
            Api::Responses,
            responses,
        ),
    ] {
        let answer = ask(&emu.url(), api, &body).await;
        assert_eq!(
            called_tool(api, &answer),
            None,
            "{what}: one step was allowed and taken, so the reply is text: {answer}"
        );
    }
    emu.shutdown().await;
}

/// A real pi tool loop through cachet with `stabilize-volatile`, which moves pi's date line
/// into a message after the tool result: the loop still ends after the allowed steps.
#[tokio::test]
async fn stabilize_volatile_tail_does_not_extend_a_tool_loop() {
    let emu = emulator(ToolCalls::FirstAllowed, 1).await;
    let dir = tempfile::tempdir().unwrap();
    let policy = format!(
        "{}/policies/stabilize-volatile.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let proxy = start_proxy(policy_config(
        &emu.url(),
        vec![policy.into()],
        &dir.path().join("store"),
    ))
    .await;
    let base = format!("http://{}", proxy.addr);
    for (client, api, body) in clients() {
        let answer = ask(&base, api, &body).await;
        assert_eq!(
            called_tool(api, &answer),
            None,
            "{client}: after its one allowed step the loop ends: {answer}"
        );
    }
    proxy.shutdown().await;
    emu.shutdown().await;
}
