//! `cachet demo`: the proxy on the embedded emulator, with a scripted multi-turn agent session
//! driven through it, so a new user sees cache reads, writes, a prefix break and the savings in
//! one command. Then the proxy stays up for a real agent.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;

use crate::cli::DemoArgs;
use crate::config::Config;
use crate::emulator::{self, EmulatorOptions};
use crate::providers::usage as read_usage;
use crate::usage::Usage;

const MODEL: &str = "claude-sonnet-4-5";
/// The turn at which the scripted session's date changes.
const MIDNIGHT_TURN: usize = 5;

/// One request of the scripted session.
struct Row {
    turn: usize,
    step: String,
    usage: Usage,
}

/// The scripted agent: a coding agent's system prompt, four tools, and a conversation.
struct Agent {
    client: reqwest::Client,
    url: String,
    date: &'static str,
    messages: Vec<Value>,
    rows: Vec<Row>,
}

fn system_prompt(date: &str) -> String {
    let mut s = String::from(
        "You are a careful coding agent working in a Rust repository. Follow these rules.\n",
    );
    for (i, rule) in [
        "Read the relevant files before you change them, and keep changes small.",
        "Run the tests after every change and report failures with the command you ran.",
        "Never print secrets, tokens or keys, even when a file contains them.",
        "Prefer the project's existing helpers over writing new ones.",
        "Explain why in commit messages, not what; the diff shows what.",
        "When a command fails, read its output before trying again.",
        "Keep functions short and names precise; comment the why, not the how.",
        "Ask before deleting files or rewriting history.",
    ]
    .iter()
    .cycle()
    .take(96)
    .enumerate()
    {
        s.push_str(&format!("{}. {rule} (guideline {})\n", i + 1, i % 8 + 1));
    }
    s.push_str(&format!("Current date: {date}\n"));
    s
}

fn tools() -> Value {
    let tool = |name: &str, description: &str, param: &str| {
        json!({"name": name, "description": description,
               "input_schema": {"type": "object", "properties": {param: {"type": "string"}}, "required": [param]}})
    };
    json!([
        tool(
            "bash",
            "Run a shell command in the repository and return its output.",
            "command"
        ),
        tool("read_file", "Read a file of the repository.", "path"),
        tool(
            "grep",
            "Search the repository for a regular expression.",
            "pattern"
        ),
        tool("edit_file", "Replace the content of a file.", "path"),
    ])
}

impl Agent {
    /// One request: the history so far, the client's markers on the system prompt and on the
    /// last block of the last message (as pi and Claude Code place them).
    async fn call(&mut self, turn: usize, step: &str, reply: &str) -> anyhow::Result<Value> {
        let mut messages = self.messages.clone();
        if let Some(last) = messages.last_mut() {
            mark_last_block(last);
        }
        let body = json!({
            "model": MODEL, "max_tokens": 1024,
            "system": [{"type": "text", "text": system_prompt(self.date), "cache_control": {"type": "ephemeral"}}],
            "tools": tools(),
            "messages": messages,
        });
        let resp = self
            .client
            .post(format!("{}/v1/messages", self.url))
            .header("x-api-key", "demo-key")
            .header("anthropic-version", "2023-06-01")
            .header("x-cachet-session", "demo")
            .header("x-cachet-emulate-reply", reply)
            .json(&body)
            .send()
            .await?;
        let status = resp.status();
        let answer: Value = resp.json().await?;
        if !status.is_success() {
            anyhow::bail!("demo request failed with {status}: {answer}");
        }
        let mut u = Usage::default();
        if let Some(usage) = answer.get("usage") {
            read_usage::merge_anthropic(&mut u, usage);
        }
        self.rows.push(Row {
            turn,
            step: step.to_string(),
            usage: u,
        });
        let content = answer.get("content").cloned().unwrap_or(json!([]));
        self.messages
            .push(json!({"role": "assistant", "content": content.clone()}));
        Ok(content)
    }

    /// A user prompt, answered through one tool call (when `tool` is given) and a final text.
    async fn turn(
        &mut self,
        turn: usize,
        prompt: &str,
        tool: Option<(&str, String)>,
    ) -> anyhow::Result<()> {
        self.messages
            .push(json!({"role": "user", "content": [{"type": "text", "text": prompt}]}));
        let Some((tool, output)) = tool else {
            self.call(turn, "answer", "text").await?;
            return Ok(());
        };
        let content = self
            .call(turn, &format!("tool call: {tool}"), &format!("tool:{tool}"))
            .await?;
        let id = content
            .as_array()
            .and_then(|blocks| blocks.iter().find(|b| b["type"] == "tool_use"))
            .and_then(|b| b["id"].as_str())
            .unwrap_or("toolu_demo")
            .to_string();
        self.messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": output}]}));
        self.call(turn, "answer after tool result", "text").await?;
        Ok(())
    }
}

fn mark_last_block(message: &mut Value) {
    if let Some(Value::Array(blocks)) = message.get_mut("content") {
        if let Some(last) = blocks.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
    }
}

fn fake_output(lines: usize, what: &str) -> String {
    (0..lines)
        .map(|i| {
            format!(
                "src/{what}_{i}.rs:{}: let value_{i} = parse_field(&table, \"{what}_{i}\")?;",
                i * 3 + 1
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Drive the scripted session through the proxy at `url`; returns the rows.
async fn drive(url: &str) -> anyhow::Result<Vec<Row>> {
    let mut agent = Agent {
        client: reqwest::Client::new(),
        url: url.to_string(),
        date: "2026-11-21",
        messages: Vec::new(),
        rows: Vec::new(),
    };
    agent
        .turn(
            1,
            "Where is the configuration file parsed?",
            Some(("grep", fake_output(40, "config"))),
        )
        .await?;
    agent
        .turn(
            2,
            "Add an idle time-out field to the upstream section.",
            Some(("read_file", fake_output(60, "upstream"))),
        )
        .await?;
    agent
        .turn(3, "Run the tests.", Some(("bash", fake_output(30, "test"))))
        .await?;
    // A topic shift: the history stays a stable prefix, so the cache still hits.
    agent
        .turn(
            4,
            "Unrelated: summarise how prompt caching works in two sentences.",
            None,
        )
        .await?;
    // Midnight: the date line in the system prompt changes and everything after it misses.
    agent.date = "2026-11-22";
    agent
        .turn(
            MIDNIGHT_TURN,
            "Back to the code: where is the idle time-out enforced?",
            Some(("grep", fake_output(20, "idle"))),
        )
        .await?;
    Ok(agent.rows)
}

fn print_rows(rows: &[Row]) {
    println!("\nScripted agent session through cachet (model {MODEL}, emulated provider):\n");
    println!(
        "{:>3} {:>4}  {:<26} {:>10} {:>11} {:>9} {:>7} {:>6}",
        "req", "turn", "step", "cache_read", "cache_write", "uncached", "output", "hit"
    );
    let mut total = Usage::default();
    for (i, r) in rows.iter().enumerate() {
        let u = &r.usage;
        total.add(u);
        let hit = if u.total_input() > 0 {
            100.0 * u.cache_read as f64 / u.total_input() as f64
        } else {
            0.0
        };
        println!(
            "{:>3} {:>4}  {:<26} {:>10} {:>11} {:>9} {:>7} {:>5.0}%",
            i + 1,
            r.turn,
            r.step,
            u.cache_read,
            u.cache_write,
            u.uncached,
            u.output,
            hit
        );
    }
    let hit = 100.0 * total.cache_read as f64 / total.total_input().max(1) as f64;
    println!(
        "{:>3} {:>4}  {:<26} {:>10} {:>11} {:>9} {:>7} {:>5.0}%",
        "", "", "total", total.cache_read, total.cache_write, total.uncached, total.output, hit
    );
    if let Some(info) = crate::models::lookup(MODEL) {
        let cost = info.cost_usd(&total);
        let without = cost + info.savings_usd(&total);
        println!(
            "\ncost ${cost:.4} with caching, ${without:.4} without: caching saved ${:.4} ({:.0}%).",
            without - cost,
            100.0 * (without - cost) / without.max(f64::MIN_POSITIVE)
        );
    }
    let break_row = rows
        .iter()
        .position(|r| r.turn == MIDNIGHT_TURN)
        .map_or(0, |i| i + 1);
    println!("Request {break_row} shows a prefix break: the system prompt's date line changed at midnight, so");
    println!(
        "everything after it was written to the cache again (the `stabilize-volatile` policy keeps"
    );
    println!("the line the cached prefix holds and tells the new date after the conversation).");
}

/// The shipped policy that moves date lines out of the cached prefix, embedded so the demo
/// runs from any folder.
const STABILIZE_VOLATILE: &str = include_str!("../../policies/stabilize-volatile.toml");

/// The same session through a second proxy with `stabilize-volatile` active, in front of an
/// emulator of its own: the policy sends the session's first requests as the client wrote
/// them, and on a shared emulator they would read what the other run cached.
async fn stabilized_run(base: &Config) -> anyhow::Result<Vec<Row>> {
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("stabilize-volatile.toml");
    std::fs::write(&policy, STABILIZE_VOLATILE)?;
    let emulator = spawn_emulator().await?;
    let mut config = base.clone();
    config.server.listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.policies.files = vec![policy];
    config.sessions.store = dir.path().join("store").to_string_lossy().into_owned();
    config.upstream.anthropic = emulator.url();
    config.upstream.openai = emulator.url();
    let proxy = crate::server::spawn(config).await?;
    let rows = drive(&format!("http://{}", proxy.addr)).await;
    proxy.shutdown().await;
    emulator.shutdown().await;
    rows
}

async fn spawn_emulator() -> anyhow::Result<crate::emulator::EmulatorHandle> {
    emulator::spawn(
        TcpListener::bind("127.0.0.1:0").await?,
        // The demo stays up for agents, which pace their own requests.
        EmulatorOptions {
            clock: Some(crate::cache_model::Clock::running()),
            ..EmulatorOptions::default()
        },
    )
    .await
    .map_err(Into::into)
}

fn print_stabilized(plain: &[Row], stable: &[Row]) {
    let at = plain
        .iter()
        .position(|r| r.turn == MIDNIGHT_TURN)
        .unwrap_or(0);
    let hit = |rows: &[Row]| {
        let mut t = Usage::default();
        rows.iter().for_each(|r| t.add(&r.usage));
        100.0 * t.cache_read as f64 / t.total_input().max(1) as f64
    };
    if let Some(row) = stable.get(at) {
        println!(
            "
The same session with policies/stabilize-volatile.toml: request {} reads {} tokens from
cache instead of {}; hit ratio over the session {:.0}% instead of {:.0}%.",
            at + 1,
            row.usage.cache_read,
            plain[at].usage.cache_read,
            hit(stable),
            hit(plain)
        );
    }
}

async fn bind_proxy(preferred: Option<SocketAddr>) -> SocketAddr {
    let default: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8787));
    let want = preferred.unwrap_or(default);
    match TcpListener::bind(want).await {
        Ok(l) => l.local_addr().unwrap_or(want),
        Err(_) if preferred.is_none() => SocketAddr::from(([127, 0, 0, 1], 0)),
        Err(_) => want, // report the bind error from spawn
    }
}

pub async fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    crate::models::install_user_table(args.models.models.as_deref()).map_err(anyhow::Error::msg)?;
    let emulator = spawn_emulator().await?;
    let mut config = Config::default();
    // The demo's sessions live as long as the demo does.
    let store = tempfile::tempdir()?;
    config.sessions.store = store.path().to_string_lossy().into_owned();
    config.upstream.anthropic = emulator.url();
    config.upstream.openai = emulator.url();
    config.server.listen = bind_proxy(args.listen).await;
    config.server.admin_listen = SocketAddr::from(([127, 0, 0, 1], 0));
    config.server.shutdown_grace_secs = 5;
    let _logs = (!args.once).then(|| crate::telemetry::init_logging(&config.log));
    let stable = stabilized_run(&config).await?;
    let proxy = crate::server::spawn(config).await?;
    let url = format!("http://{}", proxy.addr);
    let rows = drive(&url).await?;
    print_rows(&rows);
    print_stabilized(&rows, &stable);
    if args.once {
        proxy.shutdown().await;
        emulator.shutdown().await;
        return Ok(());
    }
    println!("\ncachet is running on its embedded emulator:");
    println!("  proxy    {url}");
    println!("  metrics  http://{}/metrics", proxy.admin_addr);
    println!(
        "  sessions http://{}/sessions (open in a browser)",
        proxy.admin_addr
    );
    println!("Point an agent at it (any API key works against the emulator):");
    println!("  ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=demo claude");
    println!("  OPENAI_BASE_URL={url}/v1 OPENAI_API_KEY=demo python your_agent.py");
    println!("Ctrl-C to stop.");
    crate::commands::serve::shutdown_signal().await;
    tokio::time::timeout(Duration::from_secs(6), proxy.shutdown())
        .await
        .ok();
    emulator.shutdown().await;
    Ok(())
}
