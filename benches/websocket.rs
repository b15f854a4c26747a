//! WebSocket benchmark: a Codex-shaped session of 20 tool calls over the Responses API's
//! WebSocket mode through cachet, against the same session over HTTP through cachet and
//! over a bare WebSocket hop, in the same run, all in front of `cachet emulate`.
//!
//! The session is Codex's: long instructions and nine tools, a prompt, then 20 rounds of a
//! function call answered by its output. Over the socket each round is a `response.create`
//! naming the previous answer in `previous_response_id` with only the new item (as Codex
//! sends it); over HTTP each is a streamed `POST /v1/responses` with the whole input. The
//! **bare WebSocket hop** is tokio-tungstenite relaying messages between two sockets,
//! nothing else: what any WebSocket proxy on this stack costs at least.
//!
//! Figures per case, the median of the rounds: time to the last event of the session
//! (`ms/session`), and the hop's on-CPU time per message (per-thread `schedstat`, read after
//! the hop settled, so cachet's session log written after each answer is counted), with its
//! ratio to the bare hop's. cachet runs as shipped: monitoring on, its own session store.
//!
//! Run: `cargo bench --bench websocket` (`WS_ROUNDS`, default 7; `WS_TOOL_CALLS`, default
//! 20; `WS_PIN=1` runs the driver and the emulator on CPU 0, each hop on CPU 1).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::Message;

#[path = "load/child.rs"]
mod child;
#[path = "load/procfs.rs"]
mod procfs;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("BENCH_ROLE").as_deref() {
        Ok("ws-hop") => rt.block_on(bare_hop(std::env::var("BENCH_UPSTREAM").unwrap())),
        _ => {
            if std::env::args().any(|a| a == "--list") {
                return; // `cargo bench -- --list` compatibility
            }
            rt.block_on(drive())
        }
    }
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The bare hop: each socket accepted is relayed to the upstream's `/v1/responses` with the
/// client's headers, message for message, both ways.
async fn bare_hop(upstream: String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    loop {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = tcp.set_nodelay(true);
        let upstream = upstream.clone();
        tokio::spawn(async move {
            let mut headers = http::HeaderMap::new();
            // The handshake callback's error type is tungstenite's own.
            #[allow(clippy::result_large_err)]
            let keep = |req: &Request, resp: Response| -> Result<Response, ErrorResponse> {
                headers = req.headers().clone();
                Ok(resp)
            };
            let client = tokio_tungstenite::accept_hdr_async(tcp, keep).await;
            let Ok(client) = client else { return };
            let mut request = format!("ws://{upstream}/v1/responses")
                .into_client_request()
                .unwrap();
            for name in ["authorization", "openai-beta", "x-cachet-emulate-reply"] {
                if let Some(v) = headers.get(name) {
                    request.headers_mut().insert(name, v.clone());
                }
            }
            let Ok((server, _)) = connect(&upstream, request).await else {
                return;
            };
            let (mut client_tx, mut client_rx) = client.split();
            let (mut server_tx, mut server_rx) = server.split();
            let up = async {
                while let Some(Ok(m)) = client_rx.next().await {
                    if server_tx.send(m).await.is_err() {
                        break;
                    }
                }
            };
            let down = async {
                while let Some(Ok(m)) = server_rx.next().await {
                    if client_tx.send(m).await.is_err() {
                        break;
                    }
                }
            };
            tokio::select! { () = up => {}, () = down => {} }
        });
    }
}

type Socket = tokio_tungstenite::WebSocketStream<TcpStream>;

/// A client socket to `addr` asking `request`.
async fn connect(
    addr: &str,
    request: http::Request<()>,
) -> Result<(Socket, http::Response<Option<Vec<u8>>>), tokio_tungstenite::tungstenite::Error> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    tokio_tungstenite::client_async(request, tcp).await
}

/// How processes are started: pinned to a CPU or not.
fn command(pin: bool, cpu: &str, program: &Path) -> Command {
    if pin {
        let mut c = Command::new("taskset");
        c.args(["-c", cpu]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Codex's instructions and tools: about 8,000 tokens before the first prompt.
fn prefix() -> (String, Value) {
    let instructions = "You are a coding agent running in the Codex CLI, a terminal-based coding \
        assistant. Follow the repository's conventions, keep changes small, run the tests. "
        .repeat(200);
    let names = [
        "shell",
        "read",
        "list",
        "search",
        "apply_patch",
        "update_plan",
        "view_image",
        "web_search",
        "write_stdin",
    ];
    let tools: Vec<Value> = names
        .iter()
        .map(|name| {
            json!({"type": "function", "name": name,
                "description": "Runs a command in the workspace and returns its output. ".repeat(8),
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                               "required": ["command"]}})
        })
        .collect();
    (instructions, json!(tools))
}

/// A tool's output, about 2 KB, different each round.
fn tool_output(round: usize) -> String {
    format!("round {round}: ") + &"src/main.rs src/lib.rs README.md Cargo.toml ".repeat(45)
}

fn request(model: &str, input: Value) -> Value {
    let (instructions, tools) = prefix();
    json!({"model": model, "instructions": instructions, "tools": tools, "input": input,
        "tool_choice": "auto", "parallel_tool_calls": false, "store": false,
        "prompt_cache_key": "bench-ws-session", "include": []})
}

fn prompt() -> Value {
    json!({"type": "message", "role": "user",
           "content": [{"type": "input_text", "text": "Look around the repository."}]})
}

/// What follows an answer: its function call's output, or a prompt to go on.
fn next_item(output: &[Value], round: usize) -> Value {
    match output.iter().find(|i| i["type"] == "function_call") {
        Some(call) => json!({"type": "function_call_output", "call_id": call["call_id"],
                             "output": tool_output(round)}),
        None => json!({"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": tool_output(round)}]}),
    }
}

/// The session over a socket to `addr`; returns the time to its last event and the
/// messages sent.
async fn over_socket(addr: &str, calls: usize) -> (Duration, usize) {
    let mut req = format!("ws://{addr}/v1/responses")
        .into_client_request()
        .unwrap();
    let h = req.headers_mut();
    h.insert("authorization", "Bearer sk-bench".parse().unwrap());
    h.insert(
        "openai-beta",
        "responses_websockets=2026-02-06".parse().unwrap(),
    );
    h.insert("x-cachet-emulate-reply", "tool".parse().unwrap());
    let start = Instant::now();
    let (mut ws, _) = connect(addr, req).await.unwrap();
    let mut body = request("gpt-5.1-codex", json!([prompt()]));
    body["type"] = json!("response.create");
    for round in 0..=calls {
        ws.send(Message::Text(body.to_string().into()))
            .await
            .unwrap();
        let completed = loop {
            let Some(Ok(Message::Text(text))) = ws.next().await else {
                panic!("the socket ended mid-answer");
            };
            let event: Value = serde_json::from_str(&text).unwrap();
            match event["type"].as_str() {
                Some("response.completed") => break event["response"].clone(),
                Some("error" | "response.failed") => panic!("{event}"),
                _ => {}
            }
        };
        let output = completed["output"].as_array().cloned().unwrap_or_default();
        assert!(
            output.iter().any(|i| i["type"] == "function_call"),
            "a tool call each round: {output:?}"
        );
        body = json!({"type": "response.create", "model": "gpt-5.1-codex",
            "previous_response_id": completed["id"], "input": [next_item(&output, round)],
            "store": false, "prompt_cache_key": "bench-ws-session"});
        let (instructions, tools) = prefix();
        body["instructions"] = json!(instructions);
        body["tools"] = tools;
    }
    let elapsed = start.elapsed();
    let _ = ws.close(None).await;
    (elapsed, calls + 1)
}

/// The same session over HTTP to `addr`: each round a streamed request with the whole input.
async fn over_http(client: &reqwest::Client, addr: &str, calls: usize) -> (Duration, usize) {
    let start = Instant::now();
    let mut input = vec![prompt()];
    for round in 0..=calls {
        let mut body = request("gpt-5.1-codex", json!(input));
        body["stream"] = json!(true);
        let text = client
            .post(format!("http://{addr}/v1/responses"))
            .bearer_auth("sk-bench")
            .header("x-cachet-emulate-reply", "tool")
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let completed = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|e| e["type"] == "response.completed")
            .expect("a completed response");
        let output = completed["response"]["output"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        input.extend(output.iter().cloned());
        input.push(next_item(&output, round));
    }
    (start.elapsed(), calls + 1)
}

#[derive(Clone, Copy)]
enum Case {
    SocketThroughCachet,
    HttpThroughCachet,
    SocketThroughBareHop,
}

impl Case {
    fn label(self) -> &'static str {
        match self {
            Case::SocketThroughCachet => "WebSocket through cachet",
            Case::HttpThroughCachet => "HTTP through cachet",
            Case::SocketThroughBareHop => "WebSocket through the bare hop",
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn drive() {
    let rounds: usize = env_or("WS_ROUNDS", 7);
    let calls: usize = env_or("WS_TOOL_CALLS", 20);
    let pin = std::env::var("WS_PIN").is_ok_and(|v| v == "1");
    let bin = std::path::PathBuf::from(child::cachet_binary("WS_CACHET_BIN"));
    let dir = tempfile::tempdir().unwrap();
    let mut emulate = command(pin, "0", &bin);
    emulate
        .args(["emulate", "--listen", "127.0.0.1:0", "--tool-steps", "1000"])
        .env("RUST_LOG", "warn")
        .stderr(Stdio::null());
    let emulator = child::spawn(&mut emulate);
    let config = dir.path().join("cachet.toml");
    std::fs::write(
        &config,
        format!(
            "sessions.store = \"{}/\"\n",
            dir.path().join("store").display()
        ),
    )
    .unwrap();
    let upstream = format!("http://{}", emulator.addr);
    let mut serve = command(pin, "1", &bin);
    serve
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--openai-upstream", &upstream, "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stderr(Stdio::null());
    let cachet = child::spawn(&mut serve);
    let me = std::env::current_exe().unwrap();
    let mut hop = command(pin, "1", &me);
    hop.env("BENCH_ROLE", "ws-hop")
        .env("BENCH_UPSTREAM", &emulator.addr)
        .stderr(Stdio::null());
    let bare = child::spawn(&mut hop);
    let client = reqwest::Client::new();
    let cases = [
        Case::SocketThroughCachet,
        Case::HttpThroughCachet,
        Case::SocketThroughBareHop,
    ];
    // Warm each path once.
    over_socket(&cachet.addr, 2).await;
    over_http(&client, &cachet.addr, 2).await;
    over_socket(&bare.addr, 2).await;
    let mut figures: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        for k in 0..cases.len() {
            let i = (round + k) % cases.len();
            let (addr, pid) = match cases[i] {
                Case::SocketThroughBareHop => (&bare.addr, bare.child.id()),
                _ => (&cachet.addr, cachet.child.id()),
            };
            let before = procfs::cpu_reading(pid);
            let (elapsed, messages) = match cases[i] {
                Case::HttpThroughCachet => over_http(&client, addr, calls).await,
                _ => over_socket(addr, calls).await,
            };
            // What cachet writes after each answer (its session log) is its cost too.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let cpu = procfs::cpu_between(&before, &procfs::cpu_reading(pid));
            figures[i].push((elapsed.as_secs_f64() * 1e3, cpu * 1e3 / messages as f64));
        }
    }
    let bare_cpu = median(figures[2].iter().map(|f| f.1).collect());
    let bare_ms = median(figures[2].iter().map(|f| f.0).collect());
    println!(
        "\nCodex-shaped session, {calls} tool calls, {rounds} rounds (medians)\n\n| case | ms/session | × bare hop | CPU ms/message | × bare hop |\n|---|---|---|---|---|"
    );
    for (case, f) in cases.iter().zip(&figures) {
        let ms = median(f.iter().map(|f| f.0).collect());
        let cpu = median(f.iter().map(|f| f.1).collect());
        println!(
            "| {} | {ms:.1} | {:.2} | {cpu:.3} | {:.2} |",
            case.label(),
            ms / bare_ms,
            cpu / bare_cpu
        );
    }
}
