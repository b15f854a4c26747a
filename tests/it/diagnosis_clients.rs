//! Append-only agent sessions in each real client's shape (pi on its three APIs, Claude
//! Code, Codex, an SDK app that sets no marker), 20 requests each over three turns of tool
//! loops, through the proxy in front of the emulator with every shipped shaping policy
//! that matches the client active: the diagnosis reports no break, the agent's steps are
//! unchanged, and the session log grows with new messages only.
//!
//! The two memory modes that pay for fresh memory with cache (context-hook, system-prompt)
//! are left out: their breaks are their documented cost, checked by the agents' run.

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::*;

const POLICIES: &[&str] = &[
    "anthropic-auto-breakpoints",
    "stabilize-volatile",
    "memory-pinned",
    "openai-cache-key",
];

#[derive(Clone, Copy, Debug)]
enum Shape {
    PiAnthropic,
    PiChat,
    PiResponses,
    ClaudeCode,
    Codex,
    SdkUnmarked,
}

impl Shape {
    fn path(self) -> &'static str {
        match self {
            Shape::PiChat => "/v1/chat/completions",
            Shape::PiResponses | Shape::Codex => "/v1/responses",
            _ => "/v1/messages",
        }
    }
}

const RULES: &str = "Read files before editing them. Keep changes small. Run the tests. ";

/// One step of the scripted agent: turn `turn`, tool step `step` (0 = the prompt).
struct Step {
    turn: usize,
    step: usize,
}

/// The 20 requests: three prompts, each followed by a tool loop.
fn script() -> Vec<Step> {
    let mut out = Vec::new();
    for (turn, steps) in [7, 6, 7].into_iter().enumerate() {
        for step in 0..steps {
            out.push(Step { turn, step });
        }
    }
    assert_eq!(out.len(), 20);
    out
}

/// The history an agent sends at `upto` (every step before it, append-only), as neutral
/// items: prompts, tool calls and tool results.
fn items(steps: &[Step], upto: usize) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate().take(upto + 1) {
        if s.step == 0 {
            if s.turn > 0 {
                out.push(("answer", format!("Turn {} is done.", s.turn - 1)));
            }
            out.push((
                "prompt",
                format!("Task {}: look into module {}.", s.turn, s.turn),
            ));
        } else {
            out.push(("call", format!("c{i}")));
            out.push(("result", format!("c{i}")));
        }
    }
    out
}

fn anthropic_messages(items: &[(&str, String)], claude_code: bool) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for (kind, text) in items {
        match *kind {
            "prompt" if claude_code => {
                out.push(json!({"role": "user", "content": [
                    {"type": "text", "text": "<system-reminder>Keep the todo list current.</system-reminder>"},
                    {"type": "text", "text": text}]}));
                out.push(json!({"role": "system", "content": "Today's date is 2026-11-23."}));
            }
            "prompt" => {
                out.push(json!({"role": "user", "content": [{"type": "text", "text": text}]}))
            }
            "answer" => {
                out.push(json!({"role": "assistant", "content": [{"type": "text", "text": text}]}))
            }
            "call" => out.push(json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": text, "name": if claude_code { "Read" } else { "read" },
                 "input": {"path": format!("src/{text}.rs")}}]})),
            _ => {
                let mut content = vec![json!({"type": "tool_result", "tool_use_id": text,
                    "content": format!("fn {text}() {{}}\n").repeat(40)})];
                if claude_code {
                    content.push(json!({"type": "text", "text": "<system-reminder>The file is unchanged.</system-reminder>"}));
                }
                out.push(json!({"role": "user", "content": content}));
            }
        }
    }
    out
}

/// pi and Claude Code mark the last block of the last user message.
fn mark_last(messages: &mut [Value]) {
    if let Some(block) = messages
        .iter_mut()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|b| b.last_mut())
    {
        block["cache_control"] = json!({"type": "ephemeral"});
    }
}

fn anthropic_tools(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|n| json!({"name": n, "description": format!("{n} a file. {}", RULES.repeat(3)),
                        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}))
        .collect()
}

fn openai_tools(names: &[&str], chat: bool) -> Vec<Value> {
    names
        .iter()
        .map(|n| {
            let f = json!({"name": n, "description": format!("{n} a file."),
                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}});
            if chat {
                json!({"type": "function", "function": f})
            } else {
                let mut f = f;
                f["type"] = json!("function");
                f
            }
        })
        .collect()
}

/// The request body of step `upto`. With `volatile`, pi's system prompt carries a time
/// of day that moves with every request (as pi's does); without, it stays put.
fn body(shape: Shape, steps: &[Step], upto: usize, volatile: bool) -> Value {
    let items = items(steps, upto);
    let second = if volatile { upto * 5 } else { 0 };
    let system = format!(
        "You are pi, a coding agent.\n{}\nCurrent date and time: 2026-11-23 10:{:02}:{:02}\n",
        RULES.repeat(60),
        second / 60,
        second % 60
    );
    match shape {
        Shape::PiAnthropic | Shape::SdkUnmarked | Shape::ClaudeCode => {
            let claude_code = matches!(shape, Shape::ClaudeCode);
            let mut messages = anthropic_messages(&items, claude_code);
            let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024,
                "tools": anthropic_tools(&["read", "bash"]), "messages": []});
            match shape {
                Shape::PiAnthropic => {
                    mark_last(&mut messages);
                    body["system"] = json!([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]);
                }
                Shape::ClaudeCode => {
                    mark_last(&mut messages);
                    body["model"] = json!("claude-opus-5-5");
                    body["system"] = json!([
                        {"type": "text", "text": format!("x-anthropic-billing-header: cc_version=2.1.330; cch={upto:05};")},
                        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
                        {"type": "text", "text": RULES.repeat(60), "cache_control": {"type": "ephemeral"}}]);
                    body["tools"] = json!(anthropic_tools(&["Read", "Bash"]));
                    body["context_management"] =
                        json!({"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]});
                    body["metadata"] = json!({"user_id": "{\"device_id\":\"d\",\"account_uuid\":\"\",\"session_id\":\"cc-1\"}"});
                }
                _ => body["system"] = json!(RULES.repeat(60)),
            }
            body["messages"] = json!(messages);
            body
        }
        Shape::PiChat => {
            let mut messages = vec![json!({"role": "system", "content": system})];
            for (kind, text) in &items {
                messages.push(match *kind {
                    "prompt" => json!({"role": "user", "content": text}),
                    "answer" => json!({"role": "assistant", "content": text}),
                    "call" => json!({"role": "assistant", "content": null, "tool_calls": [
                        {"id": text, "type": "function", "function": {"name": "read", "arguments": format!("{{\"path\":\"src/{text}.rs\"}}")}}]}),
                    _ => json!({"role": "tool", "tool_call_id": text, "content": format!("fn {text}() {{}}\n").repeat(40)}),
                });
            }
            json!({"model": "gpt-4.1", "messages": messages, "tools": openai_tools(&["read", "bash"], true),
                   "stream": false})
        }
        Shape::PiResponses | Shape::Codex => {
            let codex = matches!(shape, Shape::Codex);
            let mut input = Vec::new();
            if codex {
                input.push(json!({"type": "message", "role": "developer", "content": [
                    {"type": "input_text", "text": "<permissions>workspace-write</permissions>"}]}));
                input.push(json!({"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "<environment_context><date>2026-11-23</date></environment_context>"}]}));
            } else {
                input.push(json!({"role": "developer", "content": system}));
            }
            for (kind, text) in &items {
                input.push(match *kind {
                    "prompt" => json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}),
                    "answer" => json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}),
                    "call" => json!({"type": "function_call", "call_id": text, "name": "read", "arguments": format!("{{\"path\":\"src/{text}.rs\"}}")}),
                    _ => json!({"type": "function_call_output", "call_id": text, "output": format!("fn {text}() {{}}\n").repeat(40)}),
                });
            }
            let mut body = json!({"model": "gpt-5", "input": input, "tools": openai_tools(&["read", "shell"], false),
                "store": false, "stream": false, "prompt_cache_key": format!("{shape:?}-session")});
            if codex {
                body["instructions"] = json!(format!("You are Codex.\n{}", RULES.repeat(60)));
                body["client_metadata"] = json!({"b": upto, "a": 1});
            }
            body
        }
    }
}

async fn send(proxy: &cachet::server::ProxyHandle, shape: Shape, body: &Value) -> Value {
    let mut req = client()
        .post(format!("http://{}{}", proxy.addr, shape.path()))
        .header("x-cachet-session", format!("{shape:?}"));
    req = match shape {
        Shape::PiChat | Shape::PiResponses | Shape::Codex => {
            req.header("authorization", "Bearer sk-test")
        }
        _ => req
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01"),
    };
    let r = req.json(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

async fn run(shape: Shape, policies: &[&str]) -> Value {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = policies
        .iter()
        .map(|p| PathBuf::from(format!("{}/policies/{p}.toml", env!("CARGO_MANIFEST_DIR"))))
        .collect();
    let clock = cachet::session::SessionClock::default();
    let proxy = cachet::server::spawn_with(
        policy_config(&emulator.url(), files, &dir.path().join("store")),
        cachet::server::ServeOptions {
            clock: clock.clone(),
        },
    )
    .await
    .unwrap();
    let steps = script();
    for upto in 0..steps.len() {
        let volatile = !policies.is_empty();
        send(&proxy, shape, &body(shape, &steps, upto, volatile)).await;
        wait_for_requests(&proxy, &format!("{shape:?}"), upto as u64 + 1).await;
        // An agent's step takes seconds (the model writes its answer): OpenAI's routing
        // sees a few requests a minute per prefix, not hundreds.
        let step = std::time::Duration::from_secs(5);
        emulator.advance_clock(step);
        clock.advance(step);
    }
    let log = wait_for_requests(&proxy, &format!("{shape:?}"), 20).await;
    let metrics = metrics_text(&proxy).await;
    proxy.shutdown().await;
    emulator.shutdown().await;
    json!({"log": log, "breaks": metric_sum(&metrics, "cachet_prefix_breaks_total", &[])})
}

fn requests(run: &Value) -> Vec<Value> {
    request_entries(&run["log"]).into_iter().cloned().collect()
}

async fn append_only_session_has_no_break(shape: Shape) {
    for policies in [&[][..], POLICIES] {
        let run = run(shape, policies).await;
        let requests = requests(&run);
        assert_eq!(requests.len(), 20);
        let breaks: Vec<&Value> = requests
            .iter()
            .filter(|r| !r["diagnosis"].is_null())
            .collect();
        let said: Vec<String> = breaks
            .iter()
            .map(|r| format!("request {}: {}", r["request_index"], r["diagnosis"]))
            .collect();
        assert!(
            breaks.is_empty() && run["breaks"] == 0.0,
            "{shape:?} with {policies:?}: {said:#?}"
        );
        // One lane, and the log names each request's new messages only.
        assert!(requests.iter().all(|r| r["lane"] == 0), "{shape:?}");
        let named: usize = requests
            .iter()
            .map(|r| r["sent"]["keys"].as_array().unwrap().len())
            .sum();
        let last = requests.last().unwrap()["sent"]["count"].as_u64().unwrap() as usize;
        assert!(
            named <= last + requests.len(),
            "{shape:?} with {policies:?}: entries name {named} messages for a history of {last}"
        );
    }
}

#[tokio::test]
async fn pi_on_anthropic() {
    append_only_session_has_no_break(Shape::PiAnthropic).await;
}

#[tokio::test]
async fn pi_on_chat() {
    append_only_session_has_no_break(Shape::PiChat).await;
}

#[tokio::test]
async fn pi_on_responses() {
    append_only_session_has_no_break(Shape::PiResponses).await;
}

#[tokio::test]
async fn claude_code() {
    append_only_session_has_no_break(Shape::ClaudeCode).await;
}

#[tokio::test]
async fn codex() {
    append_only_session_has_no_break(Shape::Codex).await;
}

#[tokio::test]
async fn an_sdk_app_without_markers() {
    append_only_session_has_no_break(Shape::SdkUnmarked).await;
}
