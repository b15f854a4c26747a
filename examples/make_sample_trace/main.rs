//! Writes `tests/data/sample-trace.jsonl`: a synthetic but realistic coding-agent session
//! (Anthropic Messages, a pi-style client) for `cachet replay` to work out of the box.
//!
//! Eight user turns over one repository, with tool loops of several calls and topic shifts
//! (retries, database migrations, CI, logging, auth tokens, release) that the notes in
//! `tests/data/notes/` follow. The client marks its system prompt and its last message with
//! `cache_control`, as pi does. Usage is what cachet's cache model reports for the requests
//! as sent, so the trace is consistent with `cachet emulate`.
//!
//! Run: `cargo run --example make_sample_trace [OUT.jsonl]`

use cachet::cache_model::{CacheModel, CacheModelConfig};
use cachet::route::Endpoint;
use cachet::trace::{Record, TRACE_VERSION};
use serde_json::{json, Map, Value};

const MODEL: &str = "claude-sonnet-4-5-20250929";
const SESSION: &str = "pi-5f2c9e1a-tidewater";
/// 2026-01-15T09:00:00Z.
const START_MS: u64 = 1_768_467_600_000;

/// One tool call of a turn: what the assistant says, the tool, its input and the result.
struct Call {
    say: &'static str,
    tool: &'static str,
    input: Value,
    result: String,
}

struct Turn {
    prompt: &'static str,
    /// Seconds the user took before sending the prompt.
    think_secs: u64,
    calls: Vec<Call>,
    answer: &'static str,
}

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tests/data/sample-trace.jsonl".into());
    let records = build();
    let mut text = String::new();
    for r in &records {
        text.push_str(&r.to_line());
        text.push('\n');
    }
    std::fs::write(&out, text)?;
    eprintln!("wrote {} records to {out}", records.len());
    Ok(())
}

fn build() -> Vec<Record> {
    let tools = tools();
    let system = system_prompt();
    let mut cache = CacheModel::new(CacheModelConfig::default());
    let mut history: Vec<Value> = Vec::new();
    let mut now = START_MS;
    let mut records = Vec::new();
    let mut tool_n = 0;
    for (t, turn) in turns().into_iter().enumerate() {
        now += turn.think_secs * 1000;
        history.push(json!({"role": "user", "content": [{"type": "text", "text": turn.prompt}]}));
        for (c, call) in turn.calls.iter().enumerate() {
            tool_n += 1;
            let id = format!(
                "toolu_01{:02}{:02}{:016x}",
                t + 1,
                c + 1,
                0x9e37_79b9_u64 * tool_n
            );
            let reply = json!({"role": "assistant", "content": [
                {"type": "text", "text": call.say},
                {"type": "tool_use", "id": id, "name": call.tool, "input": call.input}]});
            records.push(record(&mut cache, now, &system, &tools, &history, &reply));
            history.push(reply);
            history.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": call.result}]}));
            // Model latency plus the tool run.
            now += 6_000 + 1_500 * ((t as u64 * 7 + c as u64 * 3) % 5);
        }
        let answer =
            json!({"role": "assistant", "content": [{"type": "text", "text": turn.answer}]});
        records.push(record(&mut cache, now, &system, &tools, &history, &answer));
        history.push(answer);
        now += 9_000;
    }
    records
}

/// The request a pi-style client sends with `history`, and the usage it got back.
fn record(
    cache: &mut CacheModel,
    now: u64,
    system: &str,
    tools: &[Value],
    history: &[Value],
    reply: &Value,
) -> Record {
    let mut messages = history.to_vec();
    if let Some(last) = messages
        .last_mut()
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|c| c.last_mut())
    {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let body = json!({
        "model": MODEL,
        "max_tokens": 16384,
        "stream": true,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "tools": tools,
        "messages": messages,
    });
    let output = reply["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .map(|b| match b["type"].as_str() {
                    Some("text") => cachet::tokens::count(b["text"].as_str().unwrap_or("")),
                    _ => cachet::tokens::count(&b["input"].to_string()) + 12,
                })
                .sum()
        })
        .unwrap_or(0);
    let usage = cache
        .account(Endpoint::Messages, &body, now)
        .map(|a| a.usage(output))
        .ok();
    let mut headers = Map::new();
    headers.insert("anthropic-version".into(), "2023-06-01".into());
    headers.insert("content-type".into(), "application/json".into());
    headers.insert("user-agent".into(), "pi-coding-agent/0.31.0".into());
    headers.insert(
        "anthropic-beta".into(),
        "fine-grained-tool-streaming-2025-05-14".into(),
    );
    Record {
        v: TRACE_VERSION,
        time_ms: now,
        session: SESSION.into(),
        provider: "anthropic".into(),
        endpoint: "messages".into(),
        path: "/v1/messages".into(),
        headers,
        body,
        body_text: None,
        body_base64: None,
        usage,
        status: Some(200),
        response_id: None,
        output: None,
    }
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({"name": name, "description": description, "input_schema": {
        "type": "object", "properties": properties, "required": required}})
}

fn tools() -> Vec<Value> {
    vec![
        tool("read", "Read the contents of a file. Supports text files and images (jpg, png, gif, webp). Images are sent as attachments. For text files, output is truncated to 2000 lines or 50KB (whichever is hit first). Use offset/limit for large files.",
            json!({"path": {"type": "string", "description": "Path to the file to read (relative or absolute)"},
                   "offset": {"type": "number", "description": "Line number to start reading from (1-indexed)"},
                   "limit": {"type": "number", "description": "Maximum number of lines to read"}}), &["path"]),
        tool("bash", "Execute a bash command in the current working directory. Returns stdout and stderr. Output is truncated to last 2000 lines or 50KB (whichever is hit first). Optionally provide a timeout in seconds.",
            json!({"command": {"type": "string", "description": "Bash command to execute"},
                   "timeout": {"type": "number", "description": "Timeout in seconds (optional, no default timeout)"}}), &["command"]),
        tool("edit", "Edit a file by replacing exact text. The oldText must match exactly (including whitespace). Use this for precise, surgical edits.",
            json!({"path": {"type": "string", "description": "Path to the file to edit (relative or absolute)"},
                   "oldText": {"type": "string", "description": "Exact text to find and replace (must match exactly)"},
                   "newText": {"type": "string", "description": "New text to replace the old text with"}}), &["path", "oldText", "newText"]),
        tool("write", "Write content to a file. Creates the file if it doesn't exist, overwrites if it does. Automatically creates parent directories.",
            json!({"path": {"type": "string", "description": "Path to the file to write (relative or absolute)"},
                   "content": {"type": "string", "description": "Content to write to the file"}}), &["path", "content"]),
        tool("grep", "Search file contents for a regex pattern. Returns matching lines with file paths and line numbers. Respects .gitignore.",
            json!({"pattern": {"type": "string", "description": "Regex pattern to search for"},
                   "path": {"type": "string", "description": "Directory or file to search (default: current directory)"},
                   "glob": {"type": "string", "description": "Filter files by glob pattern, e.g. '*.rs'"}}), &["pattern"]),
        tool("ls", "List directory contents, with a trailing / on directories. Includes dotfiles.",
            json!({"path": {"type": "string", "description": "Directory to list (default: current directory)"}}), &[]),
    ]
}

mod content;
use content::{system_prompt, turns};
