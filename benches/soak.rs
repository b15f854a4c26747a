//! Soak benchmark (not a test): `cachet serve` in front of `cachet emulate`, both as child
//! processes, under two loads, without and with four shipped policies:
//!
//! - **streams**: `SOAK_STREAMS` (1,000) clients each holding a slow Anthropic stream open
//!   (the emulator paces its events with `slow-events`), back to back, for `SOAK_SECS` (60 s);
//! - **mixed**: `SOAK_MIXED` (64) clients sending a sustained mix of Anthropic Messages,
//!   Chat and Responses requests, streamed and not, growing conversations over many
//!   sessions, for `SOAK_SECS`.
//!
//! Reports requests, errors (any status but 200, or a stream without its terminal event),
//! and cachet's RSS: sampled every second (last, and the peak the kernel saw: VmHWM).
//! Targets: ≤ 64 MiB without policies, ≤ 128 MiB with them (BENCHMARKS.md).
//!
//! The streams load also runs once through the load benchmark's bare hyper hop
//! (`benches/load/roles.rs`, this binary started again as that role) in place of cachet:
//! what holding the same streams costs a hop that does nothing but forward them. The driver,
//! and so the hop, use cachet's allocator (jemalloc), so the two RSS figures compare.
//!
//! Run: `cargo bench --bench soak` (env: `SOAK_SECS`, `SOAK_STREAMS`, `SOAK_MIXED`,
//! `SOAK_ONLY=streams|mixed`, `SOAK_POLICIES=off|on`, `SOAK_CONFIG=FILE` for a
//! `cachet.toml` of the proxy, e.g. `[sessions] monitor = false`; `SOAK_HOP=off` leaves
//! out the bare hop's run, `SOAK_HOP=only` runs nothing else).

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

#[path = "load/child.rs"]
mod child;
#[path = "load/procfs.rs"]
mod procfs;
#[path = "load/roles.rs"]
mod roles;

/// The same allocator as cachet's binary, for the bare hop's RSS to compare with cachet's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// `cachet ARGS` as a child process, its stderr discarded.
fn spawn(args: &[String], dir: &std::path::Path) -> child::Proc {
    child::spawn_cachet(
        &child::cachet_binary("SOAK_CACHET"),
        args,
        dir,
        Stdio::null(),
    )
}

/// Four shipped policies: markers, volatile-line stabilising, pinned memory, OpenAI key.
const POLICIES: [&str; 4] = [
    "anthropic-auto-breakpoints.toml",
    "stabilize-volatile.toml",
    "memory-pinned.toml",
    "openai-cache-key.toml",
];

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let Ok(role) = std::env::var("BENCH_ROLE") {
        rt.block_on(roles::serve(&role, std::env::var("BENCH_UPSTREAM").ok()));
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    rt.block_on(drive());
}

/// The load benchmark's bare hyper hop in front of `upstream`: this binary as that role.
fn spawn_hyper_hop(upstream: &str) -> child::Proc {
    child::spawn(
        std::process::Command::new(std::env::current_exe().unwrap())
            .env("BENCH_ROLE", "hyper-hop")
            .env("BENCH_UPSTREAM", upstream)
            .stderr(Stdio::null()),
    )
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    errors: AtomicU64,
}

async fn drive() {
    let secs = env_num("SOAK_SECS", 60);
    let streams = env_num("SOAK_STREAMS", 1000);
    let mixed = env_num("SOAK_MIXED", 64);
    let only = std::env::var("SOAK_ONLY").unwrap_or_default();
    let policies_only = std::env::var("SOAK_POLICIES").unwrap_or_default();
    let hop = std::env::var("SOAK_HOP").unwrap_or_default();
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let emulator = spawn(
        &["emulate".into(), "--listen".into(), "127.0.0.1:0".into()],
        work.path(),
    );
    let upstream = format!("http://{}", emulator.addr);
    println!("soak: {secs} s per run; streams: {streams} concurrent; mixed: {mixed} clients\n");
    println!("| proxy | load | policies | requests | errors | RSS last (MiB) | RSS peak (MiB) |");
    println!("| --- | --- | --- | ---: | ---: | ---: | ---: |");
    if hop != "off" && (only.is_empty() || only == "streams") {
        let bare = spawn_hyper_hop(&upstream);
        let row = soak("streams", &bare, streams, secs).await;
        println!("| bare hyper hop | streams | – | {row}");
    }
    if hop == "only" {
        return;
    }
    for with_policies in [false, true] {
        let label = if with_policies { "on" } else { "off" };
        if !policies_only.is_empty() && policies_only != label {
            continue;
        }
        for load in ["streams", "mixed"] {
            if !only.is_empty() && only != load {
                continue;
            }
            let store = tempfile::tempdir().unwrap();
            let mut args: Vec<String> = [
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--admin-listen",
                "127.0.0.1:0",
                "--anthropic-upstream",
                &upstream,
                "--openai-upstream",
                &upstream,
                "--store",
                &store.path().to_string_lossy(),
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if let Ok(config) = std::env::var("SOAK_CONFIG") {
                args.push("--config".into());
                args.push(config);
            }
            if with_policies {
                for p in POLICIES {
                    args.push("--policy".into());
                    args.push(root.join("policies").join(p).to_string_lossy().into());
                }
            }
            let proxy = spawn(&args, store.path());
            let clients = if load == "streams" { streams } else { mixed };
            let row = soak(load, &proxy, clients, secs).await;
            println!("| cachet | {load} | {label} | {row}");
        }
    }
}

/// `clients` clients of `load` through `proxy` for `secs`; the table's last four cells:
/// requests, errors, the proxy's last RSS sample and its peak.
async fn soak(load: &str, proxy: &child::Proc, clients: u64, secs: u64) -> String {
    let pid = proxy.child.id();
    let counts = Arc::new(Counts::default());
    let deadline = Instant::now() + Duration::from_secs(secs);
    let sampler = tokio::spawn(async move {
        let mut last = 0.0;
        while Instant::now() < deadline {
            last = procfs::rss_mib(pid);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        last
    });
    let mut tasks = Vec::new();
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(clients as usize)
        .build()
        .unwrap();
    for worker in 0..clients {
        let (http, counts, addr) = (http.clone(), counts.clone(), proxy.addr.clone());
        let stream_load = load == "streams";
        tasks.push(tokio::spawn(async move {
            let mut turn = 0u64;
            while Instant::now() < deadline {
                let ok = if stream_load {
                    slow_stream(&http, &addr, worker, turn).await
                } else {
                    mixed_request(&http, &addr, worker, turn).await
                };
                counts.requests.fetch_add(1, Ordering::Relaxed);
                if !ok {
                    counts.errors.fetch_add(1, Ordering::Relaxed);
                }
                turn += 1;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let last = sampler.await.unwrap();
    let peak = procfs::peak_rss_mib(pid);
    format!(
        "{} | {} | {:.1} | {:.1} |",
        counts.requests.load(Ordering::Relaxed),
        counts.errors.load(Ordering::Relaxed),
        last,
        peak
    )
}

/// A growing Anthropic conversation of `turn` exchanges, about 2 KB of history per turn.
fn anthropic_body(worker: u64, turn: u64, stream: bool) -> serde_json::Value {
    let mut messages = Vec::new();
    for t in 0..=(turn % 12) {
        messages.push(serde_json::json!({"role": "user", "content": format!("worker {worker} question {t}: {}", "context ".repeat(200))}));
        if t < turn % 12 {
            messages
                .push(serde_json::json!({"role": "assistant", "content": format!("answer {t}")}));
        }
    }
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 256,
        "stream": stream,
        "system": [{"type": "text", "text": format!("You are a coding agent. Today's date: 2026-01-15. {}", "Rules. ".repeat(400))}],
        "messages": messages,
    })
}

/// One slow Anthropic stream (events paced by the emulator); `true` when it ended with its
/// terminal event.
async fn slow_stream(http: &reqwest::Client, addr: &str, worker: u64, turn: u64) -> bool {
    let r = http
        .post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-cachet-session", format!("soak-{worker}"))
        .header("x-cachet-emulate-fault", "slow-events:250")
        .json(&anthropic_body(worker, turn, true))
        .send()
        .await;
    let Ok(r) = r else { return false };
    if r.status() != 200 {
        return false;
    }
    let mut body = r.bytes_stream();
    let mut tail = Vec::new();
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else { return false };
        tail.extend_from_slice(&chunk);
        if tail.len() > 4096 {
            tail.drain(..tail.len() - 4096);
        }
    }
    String::from_utf8_lossy(&tail).contains("message_stop")
}

/// One request of the mixed load: the API and streaming chosen by worker and turn.
async fn mixed_request(http: &reqwest::Client, addr: &str, worker: u64, turn: u64) -> bool {
    let stream = turn.is_multiple_of(2);
    let session = format!("mixed-{worker}-{}", turn / 12);
    let (path, body, anthropic) = match (worker + turn) % 3 {
        0 => ("/v1/messages", anthropic_body(worker, turn, stream), true),
        1 => (
            "/v1/chat/completions",
            serde_json::json!({"model": "gpt-4o", "stream": stream,
                "messages": [{"role": "system", "content": "You are helpful. ".repeat(300)},
                    {"role": "user", "content": format!("question {turn}")}]}),
            false,
        ),
        _ => (
            "/v1/responses",
            serde_json::json!({"model": "gpt-5", "stream": stream,
                "instructions": "You are helpful. ".repeat(300),
                "input": format!("question {turn}")}),
            false,
        ),
    };
    let mut req = http
        .post(format!("http://{addr}{path}"))
        .header("x-cachet-session", session)
        .json(&body);
    req = if anthropic {
        req.header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
    } else {
        req.header("authorization", "Bearer k")
    };
    match req.send().await {
        Ok(r) if r.status() == 200 => r.bytes().await.is_ok(),
        _ => false,
    }
}
