//! Session-growth benchmark: what one request costs cachet as its session grows, request 10
//! against request N of one long session.
//!
//! `cachet serve` runs as a child process in front of a fast fake upstream (in this
//! driver, answering every request with a short stream and plausible cache usage). The
//! driver plays one agent session, one request at a time as an agent does: each request is
//! the previous one plus a tool call and its result (a slice of a real source file, 1-5
//! KB), and every 13th request ends a turn (an answer and a new prompt). The bodies are
//! built from real clients' requests (Claude Code's and pi's recorded traces in
//! `tests/data/traces/`, the Codex and pi Chat fixtures in `tests/data/clients/`), with
//! their markers where each client puts them (Anthropic: on the last message's last block).
//! Every `SG_CYCLE` requests the agent compacts: its history starts again from its first
//! messages with another prompt, so request `k * SG_CYCLE + p` carries as many messages as
//! request `p`, and what differs between them is the session's length alone.
//!
//! After each answer the driver waits until cachet is idle (its session entry written), as
//! an agent's next request comes long after. Per window of 10 requests the driver reads
//! cachet's CPU time (the sum of its threads'
//! `schedstat` run time, in ns) and RSS (`VmRSS`); it reports, per sampled cycle, the CPU
//! per request around request 10 of the cycle and at the end of the cycle (the longest
//! history), and the RSS.
//!
//! Run: `cargo bench --bench session_growth` (env: `SG_CLIENT=claude-code|pi|codex|chat|all`
//! (default `claude-code`), `SG_POLICIES=off|on|both` (default `both`; `on` is full
//! shaping: anthropic-auto-breakpoints, stabilize-volatile and memory-pinned), `SG_CYCLES`
//! (100), `SG_CYCLE` (200 requests per cycle), `SG_CONFIG=FILE` (a `cachet.toml` for the
//! proxy), `SG_PERF=CYCLE` (print cachet's pid and pause 20 s at the start of that cycle,
//! for `perf record -p`), `SG_CACHET=PATH` (another `cachet` binary, e.g. a build from before
//! a change)).

use std::convert::Infallible;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::{json, Value};

#[path = "load/child.rs"]
mod child;
#[path = "load/procfs.rs"]
mod procfs;
#[path = "load/recorded.rs"]
mod recorded;

use recorded::{fixture, root, strip_markers, trace_record, Corpus};

type Body = http_body_util::Full<Bytes>;

const POLICIES: [&str; 3] = [
    "anthropic-auto-breakpoints.toml",
    "stabilize-volatile.toml",
    "memory-pinned.toml",
];
/// Requests per measured window.
const WINDOW: u64 = 10;
/// Requests of one tool loop before the turn ends.
const STEPS_PER_TURN: u64 = 13;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(drive());
}

// ---------------------------------------------------------------------------------------
// The fake upstream: reads the body, answers with a short stream. Usage says the previous
// request's prompt was read from cache and the rest written, as a provider would.

static PREVIOUS_TOKENS: AtomicU64 = AtomicU64::new(0);
static ANSWERS: AtomicU64 = AtomicU64::new(0);

async fn serve_upstream(listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        stream.set_nodelay(true).unwrap();
        tokio::spawn(async move {
            let svc =
                hyper::service::service_fn(
                    |req| async move { Ok::<_, Infallible>(answer(req).await) },
                );
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

async fn answer(req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let len = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().len())
        .unwrap_or(0) as u64;
    let tokens = len / 4;
    let previous = PREVIOUS_TOKENS.swap(tokens, Ordering::Relaxed);
    let read = previous.min(tokens);
    let n = ANSWERS.fetch_add(1, Ordering::Relaxed);
    let body = if path.ends_with("/messages") {
        anthropic_stream(n, read, tokens - read)
    } else if path.ends_with("/responses") {
        responses_stream(n, tokens, read / 128 * 128)
    } else {
        chat_stream(n, tokens, read / 128 * 128)
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    r
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn anthropic_stream(n: u64, read: u64, write: u64) -> String {
    let id = format!("msg_{n:08}");
    let mut s = sse(
        Some("message_start"),
        &json!({"type":"message_start","message":{"id":id,"type":"message","role":"assistant",
            "content":[],"model":"claude-sonnet-4-5","usage":{"input_tokens":3,
            "cache_creation_input_tokens":write,"cache_read_input_tokens":read,"output_tokens":1}}}),
    );
    s += &sse(
        Some("content_block_start"),
        &json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    );
    s += &sse(
        Some("content_block_delta"),
        &json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Done."}}),
    );
    s += &sse(
        Some("content_block_stop"),
        &json!({"type":"content_block_stop","index":0}),
    );
    s += &sse(
        Some("message_delta"),
        &json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}),
    );
    s += &sse(Some("message_stop"), &json!({"type":"message_stop"}));
    s
}

fn responses_stream(n: u64, input: u64, cached: u64) -> String {
    let id = format!("resp_{n:08}");
    let mut s = sse(
        Some("response.created"),
        &json!({"type":"response.created","response":{"id":id,"object":"response",
            "model":"gpt-5.1-codex","status":"in_progress","output":[]}}),
    );
    s += &sse(
        Some("response.completed"),
        &json!({"type":"response.completed","response":{"id":id,"object":"response",
            "model":"gpt-5.1-codex","status":"completed","output":[{"type":"message",
            "role":"assistant","content":[{"type":"output_text","text":"Done."}]}],
            "usage":{"input_tokens":input,"input_tokens_details":{"cached_tokens":cached},
            "output_tokens":2,"output_tokens_details":{"reasoning_tokens":0},
            "total_tokens":input + 2}}}),
    );
    s
}

fn chat_stream(n: u64, input: u64, cached: u64) -> String {
    let id = format!("chatcmpl-{n:08}");
    let mut s = sse(
        None,
        &json!({"id":id,"object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,
            "delta":{"role":"assistant","content":"Done."},"finish_reason":null}]}),
    );
    s += &sse(
        None,
        &json!({"id":id,"object":"chat.completion.chunk","model":"gpt-4.1","choices":[{"index":0,
            "delta":{},"finish_reason":"stop"}]}),
    );
    s += &sse(
        None,
        &json!({"id":id,"object":"chat.completion.chunk","model":"gpt-4.1","choices":[],
            "usage":{"prompt_tokens":input,"prompt_tokens_details":{"cached_tokens":cached},
            "completion_tokens":2,"total_tokens":input + 2}}),
    );
    s + "data: [DONE]\n\n"
}

// ---------------------------------------------------------------------------------------
// The agent: a real client's request as template, its history grown step by step.

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Client {
    ClaudeCode,
    Pi,
    Codex,
    Chat,
}

impl Client {
    fn label(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude-code",
            Client::Pi => "pi",
            Client::Codex => "codex",
            Client::Chat => "chat",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Client::ClaudeCode | Client::Pi => "/v1/messages",
            Client::Codex => "/v1/responses",
            Client::Chat => "/v1/chat/completions",
        }
    }

    /// The key of the history array in the body.
    fn history_key(self) -> &'static str {
        match self {
            Client::Codex => "input",
            _ => "messages",
        }
    }

    fn anthropic(self) -> bool {
        matches!(self, Client::ClaudeCode | Client::Pi)
    }
}

/// A client's request: the body around its history, its first messages, its headers.
struct Template {
    client: Client,
    /// The body up to the history array's first element.
    head: String,
    /// The body after the history array's last element.
    tail: String,
    start: Vec<Value>,
    headers: Vec<(String, String)>,
}

impl Template {
    fn of(client: Client) -> Template {
        let (headers, mut body) = match client {
            Client::ClaudeCode => trace_record("claude-code.jsonl.gz", 12),
            Client::Pi => trace_record("pi-anthropic.jsonl.gz", 12),
            Client::Codex => {
                let body = fixture("codex_tool_loop.json");
                let session = body["prompt_cache_key"].clone();
                (
                    json!({"session-id": session, "originator": "codex_cli_rs"}),
                    body,
                )
            }
            Client::Chat => (json!({}), fixture("pi_chat_tool_loop.json")),
        };
        let key = client.history_key();
        let history = body[key].as_array().cloned().unwrap_or_default();
        // The conversation starts with everything before the model's first message.
        let start: Vec<Value> = history
            .into_iter()
            .take_while(|m| !from_model(client, m))
            .map(|mut m| {
                strip_markers(&mut m);
                m
            })
            .collect();
        body[key] = json!(["__HISTORY__"]);
        if client == Client::Chat {
            body["stream_options"] = json!({"include_usage": true});
        }
        let text = serde_json::to_string(&body).unwrap();
        let (head, tail) = text.split_once("\"__HISTORY__\"").unwrap();
        let mut kept = Vec::new();
        for (name, value) in headers.as_object().cloned().unwrap_or_default() {
            if ["host", "content-length", "accept-encoding"].contains(&name.as_str()) {
                continue;
            }
            if let Some(v) = value.as_str() {
                kept.push((name, v.to_string()));
            }
        }
        kept.push(("content-type".into(), "application/json".into()));
        if client.anthropic() {
            kept.push(("x-api-key".into(), "sk-ant-bench-dummy".into()));
        } else {
            kept.push(("authorization".into(), "Bearer sk-bench-dummy".into()));
        }
        Template {
            client,
            head: head.to_string(),
            tail: tail.to_string(),
            start,
            headers: kept,
        }
    }
}

fn from_model(client: Client, m: &Value) -> bool {
    match client {
        Client::Codex => {
            let ty = m["type"].as_str().unwrap_or("");
            ty != "message" || m["role"] == "assistant"
        }
        _ => m["role"] == "assistant",
    }
}

/// A tool result's length, 1-5 KB, set by `at` (the request's place in its cycle, so that
/// the same place in every cycle carries as many bytes).
fn result_bytes(at: u64) -> usize {
    1_000 + (recorded::mix(at) >> 8) as usize % 4_000
}

/// The messages of one step (`n` counts steps over the whole session).
fn tool_step(client: Client, n: u64, result: &str) -> [Value; 2] {
    let id = format!("toolu_bench{n:012}");
    match client {
        Client::ClaudeCode => [
            json!({"role":"assistant","content":[{"type":"tool_use","id":id,"name":"Read",
                "input":{"file_path":format!("/home/dev/project/src/file_{}.rs", n % 97)}}]}),
            json!({"role":"user","content":[{"tool_use_id":id,"type":"tool_result",
                "content":result}]}),
        ],
        Client::Pi => [
            json!({"role":"assistant","content":[{"type":"tool_use","id":id,"name":"read",
                "input":{"path":format!("src/file_{}.rs", n % 97)}}]}),
            json!({"role":"user","content":[{"type":"tool_result","tool_use_id":id,
                "content":[{"type":"text","text":result}],"is_error":false}]}),
        ],
        Client::Codex => [
            json!({"type":"function_call","status":"completed","id":format!("fc_{n:012}"),
                "name":"exec_command","arguments":format!("{{\"cmd\":\"cat src/file_{}.rs\"}}", n % 97),
                "call_id":format!("call_{n:012}")}),
            json!({"type":"function_call_output","id":format!("fco_{n:012}"),
                "call_id":format!("call_{n:012}"),"output":result}),
        ],
        Client::Chat => [
            json!({"role":"assistant","content":null,"tool_calls":[{"id":format!("call_{n:012}"),
                "type":"function","function":{"name":"read",
                "arguments":format!("{{\"path\":\"src/file_{}.rs\"}}", n % 97)}}]}),
            json!({"role":"tool","content":result,"tool_call_id":format!("call_{n:012}")}),
        ],
    }
}

/// The messages that end a turn: the model's answer and the user's next prompt.
fn turn_end(client: Client, n: u64) -> [Value; 2] {
    let answer =
        format!("I read the files; the change for step {n} is in place and the tests pass.");
    let prompt =
        format!("Good. Now look at the next module (step {n}) and tighten its error handling.");
    match client {
        Client::Codex => [
            json!({"type":"message","role":"assistant","content":[{"type":"output_text","text":answer}]}),
            json!({"type":"message","role":"user","content":[{"type":"input_text","text":prompt}]}),
        ],
        Client::Chat => [
            json!({"role":"assistant","content":answer}),
            json!({"role":"user","content":[{"type":"text","text":prompt}]}),
        ],
        _ => [
            json!({"role":"assistant","content":[{"type":"text","text":answer}]}),
            json!({"role":"user","content":[{"type":"text","text":prompt}]}),
        ],
    }
}

/// A message with the client's cache marker on its last block (Anthropic clients).
fn marked(message: &str) -> String {
    match message.strip_suffix("}]}") {
        Some(open) => format!("{open},\"cache_control\":{{\"type\":\"ephemeral\"}}}}]}}"),
        None => message.to_string(),
    }
}

/// The history as JSON text: every message but the last joined, and the last apart (it
/// carries the marker).
struct History {
    joined: String,
    last: Option<String>,
    messages: usize,
}

impl History {
    fn new() -> History {
        History {
            joined: String::new(),
            last: None,
            messages: 0,
        }
    }

    fn push(&mut self, message: &Value) {
        if let Some(last) = self.last.take() {
            if !self.joined.is_empty() {
                self.joined.push(',');
            }
            self.joined.push_str(&last);
        }
        self.last = Some(serde_json::to_string(message).unwrap());
        self.messages += 1;
    }

    fn body(&self, t: &Template, volatile: u64) -> Bytes {
        let last = self.last.as_deref().unwrap_or("");
        let last = if t.client.anthropic() {
            marked(last)
        } else {
            last.to_string()
        };
        let mut out =
            String::with_capacity(t.head.len() + self.joined.len() + last.len() + t.tail.len() + 1);
        out.push_str(&t.head);
        out.push_str(&self.joined);
        if !self.joined.is_empty() {
            out.push(',');
        }
        out.push_str(&last);
        if t.client == Client::ClaudeCode {
            // Claude Code's billing block differs on every request.
            out.push_str(&t.tail.replacen(
                "cc_version=2.1.330.5e7",
                &format!("cc_version=2.1.330.{:03x}", volatile % 4096),
                1,
            ));
        } else {
            out.push_str(&t.tail);
        }
        Bytes::from(out)
    }
}

/// The first messages of cycle `cycle`: the template's, its last prompt marked with the
/// cycle (after compaction the agent starts again from a summary).
fn cycle_start(t: &Template, cycle: u64) -> History {
    let mut h = History::new();
    let n = t.start.len();
    for (i, m) in t.start.iter().enumerate() {
        let mut m = m.clone();
        if i + 1 == n && cycle > 0 {
            append_text(
                &mut m,
                &format!(" (Summary of the earlier conversation, part {cycle}.)"),
            );
        }
        h.push(&m);
    }
    h
}

fn append_text(m: &mut Value, extra: &str) {
    match m.get_mut("content") {
        Some(Value::String(s)) => s.push_str(extra),
        Some(Value::Array(blocks)) => {
            if let Some(Value::String(s)) = blocks.last_mut().and_then(|b| b.get_mut("text")) {
                s.push_str(extra);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------
// cachet as a child process, and what it costs.

/// Wait until cachet is idle again (its threads ran less than 20 µs in the last ms): an
/// agent's next request comes seconds after an answer, when the answer's session entry is
/// long written. Sending it at once would measure a queue that only grows.
async fn settle(pid: u32) {
    let mut last = procfs::cpu_ns(pid);
    for _ in 0..5_000 {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let now = procfs::cpu_ns(pid);
        if now - last < 20_000 {
            return;
        }
        last = now;
    }
}

/// One measured window.
#[derive(Clone, Copy, Default)]
struct Window {
    cpu_ms_per_req: f64,
    /// Of which until the answer had ended (the request path; the rest is the session
    /// entry and diagnosis, written after the answer).
    answered_ms_per_req: f64,
    messages: usize,
    body_kb: f64,
}

struct CycleRow {
    cycle: u64,
    early: Window,
    late: Window,
    rss: f64,
}

async fn run(client: Client, shaping: bool, corpus: &Corpus, upstream: &str) {
    let cycles = env_num("SG_CYCLES", 100);
    let per_cycle = env_num("SG_CYCLE", 200).max(2 * WINDOW + 10);
    let perf_cycle = std::env::var("SG_PERF")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let store = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--anthropic-upstream",
        upstream,
        "--openai-upstream",
        upstream,
        "--store",
        &store.path().to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(config) = std::env::var("SG_CONFIG") {
        args.push("--config".into());
        args.push(config);
    }
    if shaping {
        for p in POLICIES {
            args.push("--policy".into());
            args.push(root().join("policies").join(p).to_string_lossy().into());
        }
    }
    let proxy = child::spawn_cachet(
        &child::cachet_binary("SG_CACHET"),
        &args,
        store.path(),
        Stdio::inherit(),
    );
    let pid = proxy.child.id();
    let template = Template::of(client);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let url = format!("http://{}{}", proxy.addr, client.path());
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in &template.headers {
        if let (Ok(k), Ok(v)) = (
            reqwest::header::HeaderName::from_bytes(k.as_bytes()),
            reqwest::header::HeaderValue::from_str(v),
        ) {
            headers.insert(k, v);
        }
    }
    println!(
        "\n### {} · {}\n",
        client.label(),
        if shaping {
            "full shaping"
        } else {
            "no policy, monitoring on"
        },
    );
    println!("| cycle | requests | at request 10: messages · body KB · CPU ms/req (until answered) | at request {per_cycle}: messages · body KB · CPU ms/req (until answered) | RSS MiB |");
    println!("| ---: | --- | --- | --- | ---: |");
    let mut step = 0u64;
    let mut errors = 0u64;
    let started = Instant::now();
    // Windows: around request 10 of the cycle, and its last 10 requests.
    let early = 6..6 + WINDOW;
    let late = per_cycle - WINDOW + 1..per_cycle + 1;
    let sampled = |cycle: u64| {
        cycle < 3 || cycle + 1 == cycles || [5, 10, 20, 50, 100, 200, 500].contains(&(cycle + 1))
    };
    for cycle in 0..cycles {
        if perf_cycle == Some(cycle + 1) {
            eprintln!(
                "session_growth: cachet pid {pid}; cycle {} starts in 20 s",
                cycle + 1
            );
            tokio::time::sleep(Duration::from_secs(20)).await;
        }
        let mut history = cycle_start(&template, cycle);
        let mut row = CycleRow {
            cycle: cycle + 1,
            early: Window::default(),
            late: Window::default(),
            rss: 0.0,
        };
        let mut mark = 0u64;
        let mut answered = 0u64;
        for r in 1..=per_cycle {
            if r > 1 {
                step += 1;
                let pair = if (r - 1) % STEPS_PER_TURN == 0 {
                    turn_end(client, step)
                } else {
                    tool_step(client, step, &corpus.slice(step, result_bytes(r)))
                };
                history.push(&pair[0]);
                history.push(&pair[1]);
            }
            let body = history.body(&template, step);
            let body_kb = body.len() as f64 / 1024.0;
            let measured = sampled(cycle);
            if measured && (r == early.start || r == late.start) {
                mark = procfs::cpu_ns(pid);
                answered = 0;
            }
            let before = procfs::cpu_ns(pid);
            let resp = http
                .post(&url)
                .headers(headers.clone())
                .body(body)
                .send()
                .await;
            let ok = match resp {
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.bytes().await.unwrap_or_default();
                    if !status.is_success() && errors < 3 {
                        eprintln!("status {status}: {}", String::from_utf8_lossy(&text));
                    }
                    status.is_success()
                }
                Err(e) => {
                    if errors < 3 {
                        eprintln!("request failed: {e}");
                    }
                    false
                }
            };
            errors += u64::from(!ok);
            answered += procfs::cpu_ns(pid) - before;
            settle(pid).await;
            if measured && (r + 1 == early.end || r + 1 == late.end) {
                let w = Window {
                    cpu_ms_per_req: (procfs::cpu_ns(pid) - mark) as f64 / 1e6 / WINDOW as f64,
                    answered_ms_per_req: answered as f64 / 1e6 / WINDOW as f64,
                    messages: history.messages,
                    body_kb,
                };
                if r + 1 == early.end {
                    row.early = w;
                } else {
                    row.late = w;
                }
            }
        }
        if sampled(cycle) {
            row.rss = procfs::rss_mib(pid);
            print_row(&row, per_cycle);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = cycles * per_cycle;
    let peak = procfs::peak_rss_mib(pid);
    println!(
        "\n{total} requests in {cycles} cycles of {per_cycle}: {elapsed:.0} s, {errors} errors, peak RSS {peak:.0} MiB"
    );
}

/// A sampled cycle's row, printed as soon as it is measured (a long run cut short still
/// reports the cycles it reached).
fn print_row(row: &CycleRow, per_cycle: u64) {
    let base = (row.cycle - 1) * per_cycle;
    println!(
        "| {} | {}–{} | {} · {:.0} · {:.3} ({:.3}) | {} · {:.0} · {:.3} ({:.3}) | {:.0} |",
        row.cycle,
        base + 1,
        base + per_cycle,
        row.early.messages,
        row.early.body_kb,
        row.early.cpu_ms_per_req,
        row.early.answered_ms_per_req,
        row.late.messages,
        row.late.body_kb,
        row.late.cpu_ms_per_req,
        row.late.answered_ms_per_req,
        row.rss,
    );
}

async fn drive() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve_upstream(listener));
    let corpus = Corpus::load();
    let clients = match std::env::var("SG_CLIENT").as_deref() {
        Ok("all") => vec![Client::ClaudeCode, Client::Pi, Client::Codex, Client::Chat],
        Ok("pi") => vec![Client::Pi],
        Ok("codex") => vec![Client::Codex],
        Ok("chat") => vec![Client::Chat],
        _ => vec![Client::ClaudeCode],
    };
    let modes = match std::env::var("SG_POLICIES").as_deref() {
        Ok("off") => vec![false],
        Ok("on") => vec![true],
        _ => vec![false, true],
    };
    println!("session_growth: one session per run; CPU is cachet's (all its threads), per request, over windows of {WINDOW}");
    for client in clients {
        for &shaping in &modes {
            PREVIOUS_TOKENS.store(0, Ordering::Relaxed);
            run(client, shaping, &corpus, &upstream).await;
        }
    }
}
