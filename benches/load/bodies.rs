//! Request bodies the load driver sends.
//!
//! - [`plain_body`]: one Anthropic request of a given size (system, one tool, a history of
//!   text turns), sent again and again: the pass-through cases.
//! - [`AgentSession`]: a growing Claude Code–shaped session. Each request is the previous
//!   one plus a small tail (the assistant's tool call and its result, or now and then a new
//!   prompt), with `cache_control` on the system prompt and on the last block of the last
//!   message, and the session id in `metadata.user_id`, as Claude Code sends them. Each
//!   session's tool results are its own (they start with its id), as real agents' are.
//! - [`ClaudeCodeSession`]: a growing session built from a request Claude Code sent
//!   ([`ClaudeCodeTemplate`]: its system blocks, tools and settings as recorded), each
//!   request the previous one plus a `Read` call and its result.
//! - [`chat_body`], [`responses_body`]: one large request of an agent's many small steps,
//!   in OpenAI Chat and Responses.

#[path = "recorded.rs"]
mod recorded;

use bytes::Bytes;
use serde_json::{json, Value};

/// A request of about `size` bytes whose history is plain text turns.
pub fn plain_body(size: usize) -> Bytes {
    let mut messages = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < size {
        let text = format!("Turn {i}: please look at src/module_{i}.rs and explain the control flow around line {}. ", i * 7).repeat(4);
        total += text.len() + 40;
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": text}));
        i += 1;
    }
    if messages.len() % 2 == 0 {
        messages.push(json!({"role": "user", "content": "continue"}));
    }
    Bytes::from(
        json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
            "messages": messages,
        })
        .to_string(),
    )
}

/// A body of about `size` bytes that is one user prompt: a pasted file (code, with the
/// escapes code has) and a question after it, the agent's system prompt and tools before.
pub fn pasted_prompt_body(size: usize) -> Bytes {
    let line = "    let path = format!(\"src/{name}.rs\"); // \"quoted\" \\ path\n";
    let escaped = serde_json::to_string(line).map_or(line.len(), |l| l.len() - 2);
    let text = format!(
        "{}\nWhy does this fail to compile?",
        line.repeat(size.saturating_sub(1024) / escaped)
    );
    Bytes::from(
        json!({
            "model": "claude-sonnet-4-5", "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
            "messages": [{"role": "user", "content": text}],
        })
        .to_string(),
    )
}

/// A history of about `size` bytes: `first`, then the two items of each step (`step(n)`,
/// about 700 bytes) until it is long enough.
fn small_steps(size: usize, first: Vec<Value>, step: impl Fn(usize) -> [Value; 2]) -> Vec<Value> {
    let (mut items, mut total) = (first, 600);
    for n in 0.. {
        if total >= size {
            break;
        }
        let pair = step(n);
        total += pair.iter().map(|v| v.to_string().len() + 1).sum::<usize>();
        items.extend(pair);
    }
    items
}

/// A Chat Completions request of about `size` bytes, as an agent on the OpenAI SDK sends
/// it: a system message, the task, then steps of one tool call and its result, the tool
/// defined once. `seed` makes the bodies of different calls differ.
pub fn chat_body(size: usize, seed: usize) -> Bytes {
    let first = vec![
        json!({"role": "system", "content": "You are a coding agent. Use the tools to read and change the code base."}),
        json!({"role": "user", "content": format!("[{seed}] The test `parses_nested_fields` fails. Find out why and fix it.")}),
    ];
    let messages = small_steps(size, first, |n| {
        let id = format!("call_{seed}_{n:08}");
        [
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function": {"name": "read_file", "arguments": format!("{{\"path\":\"src/module_{n}.rs\"}}")}}]}),
            json!({"role": "tool", "tool_call_id": id, "content": code(n, 500)}),
        ]
    });
    Bytes::from(
        json!({
            "model": "gpt-4.1",
            "messages": messages,
            "tools": [{"type": "function", "function": {"name": "read_file", "description": "Read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],
            "stream": false,
        })
        .to_string(),
    )
}

/// A Responses request of about `size` bytes, as Codex sends one: `instructions`, then the
/// task and steps of a `function_call` and its `function_call_output` as input items.
pub fn responses_body(size: usize, seed: usize) -> Bytes {
    let first = vec![json!({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": format!("[{seed}] The test `parses_nested_fields` fails. Find out why and fix it.")},
    ]})];
    let input = small_steps(size, first, |n| {
        let id = format!("call_{seed}_{n:08}");
        [
            json!({"type": "function_call", "name": "shell", "arguments": format!("{{\"command\":[\"cat\",\"src/module_{n}.rs\"]}}"), "call_id": id}),
            json!({"type": "function_call_output", "call_id": id, "output": code(n, 500)}),
        ]
    });
    Bytes::from(
        json!({
            "model": "gpt-5-codex",
            "instructions": "You are Codex, a coding agent.",
            "input": input,
            "tools": [{"type": "function", "name": "shell", "description": "Run a command", "parameters": {"type": "object", "properties": {"command": {"type": "array", "items": {"type": "string"}}}, "required": ["command"]}}],
            "store": false,
            "stream": false,
        })
        .to_string(),
    )
}

/// Claude Code's system prompt: its identity block, then the long instructions with the
/// `<env>` block (today's date) and the git status at the end.
fn system_prompt() -> Value {
    let mut long = String::from("You are an interactive CLI tool that helps users with software engineering tasks. Use the instructions below and the tools available to you to assist the user.\n\n");
    for i in 0..60 {
        long.push_str(&format!("# Section {i}\n- Follow the conventions of the code base; read surrounding code before editing (rule {i}).\n- Prefer small, verifiable changes and run the tests after each one.\n\n"));
    }
    long.push_str("<env>\nWorking directory: /home/dev/project\nIs directory a git repo: Yes\nPlatform: linux\nToday's date: 2025-06-01\n</env>\n");
    long.push_str("gitStatus: This is the git status at the start of the conversation.\nCurrent branch: main\nStatus:\nM src/lib.rs\n?? notes.txt\n");
    json!([
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": long, "cache_control": {"type": "ephemeral"}},
    ])
}

/// A dozen tools with JSON-schema inputs, as Claude Code declares them.
fn tools() -> Value {
    let names = [
        "Task",
        "Bash",
        "Glob",
        "Grep",
        "LS",
        "Read",
        "Edit",
        "MultiEdit",
        "Write",
        "NotebookEdit",
        "WebFetch",
        "TodoWrite",
    ];
    Value::Array(
        names
            .iter()
            .map(|name| {
                json!({
                    "name": name,
                    "description": format!("{name}: ").to_string() + &"Performs the operation the name says, with the parameters below; read the usage notes before calling it. ".repeat(8),
                    "input_schema": {
                        "type": "object",
                        "properties": {
                            "file_path": {"type": "string", "description": "The absolute path to the file"},
                            "command": {"type": "string", "description": "The command to run"},
                            "limit": {"type": "number", "description": "How many lines to read"},
                        },
                        "required": ["file_path"],
                        "additionalProperties": false,
                        "$schema": "http://json-schema.org/draft-07/schema#",
                    }
                })
            })
            .collect(),
    )
}

/// A tool result of about `bytes` bytes: source code, dense with `\n` and `\"` escapes.
fn code(step: usize, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 80);
    let mut line = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "{:>5}\tlet value_{step}_{line} = parse(\"field_{line}\", &input)?; // step {step}\n",
            line + 1
        ));
        line += 1;
    }
    s
}

/// One agent session that grows request by request.
pub struct AgentSession {
    session: String,
    system: Value,
    tools: Value,
    messages: Vec<Value>,
    step: usize,
    /// Bytes each step adds, about.
    tail: usize,
    stream: bool,
}

impl AgentSession {
    /// A session `id` (distinct per session: fresh state in cachet) whose first request is
    /// about `start` bytes and whose every next request adds about `tail` bytes.
    pub fn new(id: &str, start: usize, tail: usize, stream: bool) -> AgentSession {
        let mut s = AgentSession {
            session: id.to_string(),
            system: system_prompt(),
            tools: tools(),
            messages: vec![json!({"role": "user", "content": [
                {"type": "text", "text": "<system-reminder>\nAs you answer the user's questions, you can use the following context: the code base is a Rust proxy.\n</system-reminder>"},
                {"type": "text", "text": "The test `parses_nested_fields` fails after the last refactor. Find out why and fix it, then run the whole suite."},
            ]})],
            step: 0,
            tail,
            stream,
        };
        let base = s.body().len();
        // Earlier exchanges, without a request of their own, up to `start`.
        if start > base {
            let steps = (start - base) / tail.max(1);
            for _ in 0..steps {
                s.grow();
            }
        }
        s
    }

    /// Add one exchange: the assistant's tool call and its result, or every tenth step the
    /// assistant's answer and a new prompt from the user.
    pub fn grow(&mut self) {
        let step = self.step;
        self.step += 1;
        let id = format!("toolu_{:024x}", step as u128 * 7919 + 17);
        if step % 10 == 9 {
            self.messages.push(json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("Step {step} is done: the parser now keeps nested fields. {}", "The change is small and the tests pass. ".repeat(self.tail / 200))},
            ]}));
            self.messages.push(json!({"role": "user", "content": [
                {"type": "text", "text": format!("Good. Now look at module {step} and check the error handling there; also logging and retry.")},
            ]}));
        } else {
            self.messages.push(json!({"role": "assistant", "content": [
                {"type": "text", "text": format!("Let me read src/module_{step}.rs.")},
                {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": format!("/home/dev/project/src/module_{step}.rs")}},
            ]}));
            self.messages.push(json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": format!("// {}\n{}", self.session, code(step, self.tail.saturating_sub(300)))},
            ]}));
        }
    }

    /// The request as Claude Code sends it now: its fields in Claude Code's order (the
    /// history before the system prompt and the tools), a marker on the last block of the
    /// last message only.
    pub fn body(&self) -> Bytes {
        let mut messages = self.messages.clone();
        if let Some(Value::Array(blocks)) = messages.last_mut().and_then(|m| m.get_mut("content")) {
            if let Some(Value::Object(last)) = blocks.last_mut() {
                last.insert("cache_control".into(), json!({"type": "ephemeral"}));
            }
        }
        Bytes::from(
            json!({
                "model": "claude-sonnet-4-5",
                "messages": messages,
                "system": self.system,
                "tools": self.tools,
                "metadata": {"user_id": format!("user_{:064x}_account__session_{}", 42, self.session)},
                "max_tokens": 32000,
                "stream": self.stream,
            })
            .to_string(),
        )
    }

    /// The next `n` requests, each the previous one plus a step.
    pub fn requests(&mut self, n: usize) -> Vec<Bytes> {
        (0..n)
            .map(|_| {
                let body = self.body();
                self.grow();
                body
            })
            .collect()
    }

    /// A request of at least `size` bytes, grown step by step.
    pub fn grown_to(mut self, size: usize) -> Bytes {
        loop {
            let body = self.body();
            if body.len() >= size {
                return body;
            }
            let per = self.tail.max(1);
            for _ in 0..((size - body.len()) / per).max(1) {
                self.grow();
            }
        }
    }
}

/// A UUID-shaped session id, distinct per `(round, n)` and per run.
pub fn session_id(tag: &str, round: usize, n: usize) -> String {
    let pid = std::process::id();
    format!(
        "{pid:08x}-{round:04x}-4{n:03x}-8000-{:012x}",
        tag.len() as u64 * 1_000_003 + tag.bytes().map(u64::from).sum::<u64>()
    )
}

/// The request a growing Claude Code session is built from: Claude Code 2.1.330's 13th
/// request of `tests/data/traces/claude-code.jsonl.gz` (its system blocks with the billing
/// header, its tools, metadata, thinking, context management and effort, as recorded).
pub struct ClaudeCodeTemplate {
    /// The body up to the history's first message.
    head: String,
    /// The body after the history's last message.
    tail: String,
    /// The history before the model's first message (the prompt and the environment), its
    /// markers removed.
    start: Vec<Value>,
    /// The recorded session id, replaced by each session's own.
    session: String,
    corpus: recorded::Corpus,
}

/// The billing block's version, as recorded; Claude Code changes its suffix every request.
const CC_VERSION: &str = "cc_version=2.1.330.5e7";

impl ClaudeCodeTemplate {
    pub fn load() -> ClaudeCodeTemplate {
        let (headers, mut body) = recorded::trace_record("claude-code.jsonl.gz", 12);
        let session = headers["x-claude-code-session-id"]
            .as_str()
            .unwrap()
            .to_string();
        let start = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .take_while(|m| m["role"] != "assistant")
            .map(|m| {
                let mut m = m.clone();
                recorded::strip_markers(&mut m);
                m
            })
            .collect();
        body["messages"] = json!(["__HISTORY__"]);
        let text = serde_json::to_string(&body).unwrap();
        let (head, tail) = text.split_once("\"__HISTORY__\"").unwrap();
        assert!(tail.contains(CC_VERSION) && tail.contains(&session));
        ClaudeCodeTemplate {
            head: head.to_string(),
            tail: tail.to_string(),
            start,
            session,
            corpus: recorded::Corpus::load(),
        }
    }
}

/// One Claude Code session that grows request by request: each request is the previous
/// one plus the model's tool call (`Read` of a file) and its result, up to `result` bytes
/// of this repository's source in numbered lines as Read returns them; the marker on the
/// last block of the last message, the billing block's version different every request,
/// as Claude Code sends them.
pub struct ClaudeCodeSession<'a> {
    template: &'a ClaudeCodeTemplate,
    /// The template's text after the history, with this session's id.
    tail: String,
    /// Every message but the last, as JSON text joined by commas.
    joined: String,
    last: Value,
    /// Distinct per session: its tool ids and which source each result holds.
    seed: u64,
    step: u64,
    result: usize,
}

impl<'a> ClaudeCodeSession<'a> {
    /// Session `id`, grown (without requests of its own) to at least `start` bytes.
    pub fn new(
        template: &'a ClaudeCodeTemplate,
        id: &str,
        start: usize,
        result: usize,
    ) -> ClaudeCodeSession<'a> {
        let seed = id
            .bytes()
            .fold(0u64, |h, b| recorded::mix(h ^ u64::from(b)));
        let mut s = ClaudeCodeSession {
            template,
            tail: template.tail.replace(&template.session, id),
            joined: String::new(),
            last: Value::Null,
            seed,
            step: 0,
            result,
        };
        for m in &template.start {
            s.push(m.clone());
        }
        while s.body().len() < start {
            s.grow();
        }
        s
    }

    fn push(&mut self, message: Value) {
        let previous = std::mem::replace(&mut self.last, message);
        if !previous.is_null() {
            if !self.joined.is_empty() {
                self.joined.push(',');
            }
            self.joined
                .push_str(&serde_json::to_string(&previous).unwrap());
        }
    }

    /// One step: the model's tool call and its result.
    pub fn grow(&mut self) {
        let n = self.seed.wrapping_add(self.step);
        self.step += 1;
        let id = format!("toolu_{n:024x}");
        let path = format!("/home/dev/project/src/module_{}.rs", self.step);
        self.push(json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": path}},
        ]}));
        // Read's answer: the file's lines, numbered, up to `result` bytes.
        let mut text = String::with_capacity(self.result);
        for (i, line) in self
            .template
            .corpus
            .text(n, self.result)
            .lines()
            .enumerate()
        {
            let line = format!("{}\t{line}\n", i + 1);
            if text.len() + line.len() > self.result {
                break;
            }
            text.push_str(&line);
        }
        self.push(json!({"role": "user", "content": [
            {"tool_use_id": id, "type": "tool_result", "content": text},
        ]}));
    }

    /// The request as Claude Code sends it now.
    pub fn body(&self) -> Bytes {
        let mut last = self.last.clone();
        if let Some(Value::Object(block)) = last
            .get_mut("content")
            .and_then(Value::as_array_mut)
            .and_then(|blocks| blocks.last_mut())
        {
            block.insert("cache_control".into(), json!({"type": "ephemeral"}));
        }
        let last = serde_json::to_string(&last).unwrap();
        let version = format!("cc_version=2.1.330.{:03x}", self.step % 4096);
        let tail = self.tail.replacen(CC_VERSION, &version, 1);
        let mut out = String::with_capacity(
            self.template.head.len() + self.joined.len() + last.len() + tail.len() + 1,
        );
        out.push_str(&self.template.head);
        out.push_str(&self.joined);
        if !self.joined.is_empty() {
            out.push(',');
        }
        out.push_str(&last);
        out.push_str(&tail);
        Bytes::from(out)
    }

    /// Requests, each the previous one plus a step, until one would pass `end` bytes.
    pub fn requests_to(&mut self, end: usize) -> Vec<Bytes> {
        let mut out = Vec::new();
        loop {
            let body = self.body();
            if body.len() > end {
                return out;
            }
            out.push(body);
            self.grow();
        }
    }
}
