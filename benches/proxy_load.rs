//! Load benchmark: the CPU, throughput and latency cachet adds, against two bare
//! pass-through hops measured in the same run.
//!
//! Processes besides this driver: a fast fake Anthropic upstream; the **hyper hop** (hyper
//! server + hyper-util's pooled client, both bodies streamed: the physical limit); the
//! **reqwest hop** (hyper server + reqwest, the baseline of earlier runs); and `cachet serve`
//! in the configuration each scenario names, at its shipped log level (`info`: one line per
//! request) with its own temporary session store. Every round runs direct, then each hop in
//! an order that rotates from round to round; ratios are taken within a round, and tables
//! give their median with the range over rounds.
//!
//! Scenarios (`LOAD_SCENARIOS`, comma-separated, default all):
//! - `pass`: no policy, body check on, monitoring off (`sessions.monitor = false`); the
//!   same 2 KB, 100 KB or 500 KB body again and again, streamed and not, at each
//!   concurrency of `LOAD_CONCURRENCY`.
//! - `session`: no policy as shipped (monitoring on) and, beside it, with monitoring off,
//!   on growing Claude Code–shaped sessions (20 KB → 500 KB, 4 KB a request, 120 requests
//!   each) at concurrency 1; the difference between the two is the monitoring cost (the
//!   session record and diagnosis, written after the response), reported as its own row.
//! - `shaping`: `anthropic-auto-breakpoints` + `stabilize-volatile` + `memory-pinned` on
//!   growing 60-request sessions (100 KB → 500 KB), concurrency 1.
//! - `growing`: growing 100 KB → 500 KB Claude Code sessions (built from a request Claude
//!   Code sent: its system blocks, tools and settings as recorded, then a `Read` call and its
//!   5 KB result appended per request, the marker on the last block), concurrency 1, through
//!   three cachets in the same rounds: as shipped (no policy, monitoring on), with
//!   monitoring off (`sessions.monitor = false`; on − off is the monitoring cost, on its own
//!   line as a ratio of the hyper hop's CPU per request), and with full shaping
//!   (`anthropic-auto-breakpoints` + `stabilize-volatile` + `memory-pinned`); and two
//!   more whatever the defaults: monitoring alone (`sessions.whatif = false`) and
//!   monitoring with the live what-if (`sessions.whatif = true`): the difference is the
//!   what-if's cost, as a ratio of the hyper hop's CPU and of monitoring's own, with the
//!   requests it skipped (its metrics). Its A/B variant (`LOAD_B_*`, below) runs as
//!   shipped.
//! - `large`: a 30 MB body through a fresh `cachet serve` with every shipped policy
//!   (`--policies policies/`) and with none: wall time and peak memory above the idle
//!   process, for five shapes: an agent's long history (large tool results), one pasted
//!   prompt, and a history of many small steps in Anthropic Messages, OpenAI Chat and
//!   OpenAI Responses.
//!
//! The run ends with a table of issue 12's targets: each figure against the **hyper hop**
//! measured in the same rounds (median and range over rounds), its limit, and MET or NOT
//! MET judged on the median. (a) no policy, check on, monitoring off: CPU ≤ 1.2×,
//! throughput ≥ 0.9×, p50 at c=1 ≤ hyper hop + 0.05 ms; (b) no policy as shipped on the
//! growing session: CPU ≤ 1.3×, p50 ≤ + 0.05 ms, and the monitoring cost beside it; (c) full
//! shaping: CPU ≤ 2×, p50 ≤ + 0.2 ms; (d) streaming first byte ≤ + 0.5 ms; (e) the large
//! body with every shipped policy: under 1 s, extra peak memory under 3× the body; and
//! issue 62's on the growing 100–500 KB session: as shipped CPU ≤ 1.5×, the monitoring
//! cost ≤ 0.3× the hyper hop's CPU, full shaping CPU ≤ 2×.
//!
//! CPU per request is the hop process's on-CPU time (per-thread `schedstat`, nanoseconds)
//! from the first measured request until the process is idle again after the last one, so
//! work a hop does after its responses (cachet's session log) is counted. TTFB is the time
//! to the first byte of the response body.
//!
//! Run: `cargo bench --bench proxy_load` (a few minutes with the defaults). Env:
//! `LOAD_SCENARIOS` (default `pass,session,shaping,growing,large`), `LOAD_REQUESTS` (per
//! round, pass scenario, default 2000; 500 KB cases send a quarter), `LOAD_ROUNDS` (default
//! 3), `LOAD_CONCURRENCY` (list, default `1,8`), `LOAD_SESSIONS` (sessions per round:
//! default 4 in `session`, 3 in `shaping`, 6 in `growing`), `LOAD_SHAPING_POLICY` (policy
//! files added to the three of `shaping` and `growing`, comma-separated),
//! `LOAD_CACHET_CONFIG` (TOML dotted keys added to every cachet's configuration,
//! `;`-separated), `LOAD_PIN=1` (driver and upstream on CPU 0, each hop on CPU 1),
//! `LOAD_ONLY=2KB:false` (one pass case), `LOAD_VERBOSE=1` (every round),
//! `LOAD_BUFFERED_HOP=1` (a third bare hop in `pass`: the hyper client with the request body
//! read whole first), `LOAD_LARGE_MB` (default 30), `BENCH_CACHET_RUST_LOG` (cachet's
//! `RUST_LOG`; unset: the shipped level), and an A/B variant of cachet measured beside the
//! scenario's own: `LOAD_B_CONFIG` (TOML dotted keys added to its configuration, e.g.
//! `log.level = "warn"`), `LOAD_B_LOG` (its `RUST_LOG`), `LOAD_B_ENV` (its environment:
//! space-separated `NAME=value`) and `LOAD_B_BIN` (another build of cachet to run as B, e.g.
//! a copy of `target/release/cachet` from before a change); `LOAD_A_BIN` runs another build
//! in cachet's own place (a scenario's figures from before a change).

#[path = "load/bodies.rs"]
mod bodies;
#[path = "load/child.rs"]
mod child;
#[path = "load/procfs.rs"]
mod procfs;
#[path = "load/roles.rs"]
mod roles;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

use bodies::{
    chat_body, pasted_prompt_body, plain_body, responses_body, session_id, AgentSession,
    ClaudeCodeSession, ClaudeCodeTemplate,
};
use procfs::{cpu_between, cpu_reading, minor_faults, peak_rss_mib, rss_mib};

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("BENCH_ROLE") {
        Ok(role) => rt.block_on(roles::serve(&role, std::env::var("BENCH_UPSTREAM").ok())),
        Err(_) => {
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

/// A process the driver measures, killed when dropped (before its directory goes).
struct Hop {
    name: String,
    process: child::Proc,
    _dir: Option<tempfile::TempDir>,
}

impl Hop {
    fn pid(&self) -> u32 {
        self.process.child.id()
    }

    fn addr(&self) -> &str {
        &self.process.addr
    }
}

/// How processes are started: pinned to a CPU or not.
#[derive(Clone, Copy)]
struct Launcher {
    pin: bool,
}

impl Launcher {
    fn command(&self, cpu: &str, program: &Path) -> Command {
        if self.pin {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn role(&self, cpu: &str, role: &str, upstream: Option<&str>) -> Hop {
        let me = std::env::current_exe().unwrap();
        let mut cmd = self.command(cpu, &me);
        cmd.env("BENCH_ROLE", role);
        if let Some(u) = upstream {
            cmd.env("BENCH_UPSTREAM", u);
        }
        Hop {
            name: role.to_string(),
            process: child::spawn(cmd.stderr(Stdio::null())),
            _dir: None,
        }
    }

    /// `cachet serve` with `config` (TOML dotted keys), `args` and its own session store.
    fn cachet(
        &self,
        name: &str,
        upstream: &str,
        config: &[String],
        args: &[&str],
        log: Option<String>,
        env: &[(String, String)],
    ) -> Hop {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("cachet.toml");
        let mut text = config.join("\n");
        // Configuration every cachet of the run gets (`LOAD_CACHET_CONFIG`, TOML dotted keys
        // separated by `;`), e.g. `record.dir = "/tmp/traces"` to measure recording.
        for line in std::env::var("LOAD_CACHET_CONFIG")
            .unwrap_or_default()
            .split(';')
        {
            text.push('\n');
            text.push_str(line);
        }
        text.push_str(&format!(
            "\nsessions.store = \"{}/\"\n",
            dir.path().join("store").display()
        ));
        std::fs::write(&file, text).unwrap();
        // The A/B variant may be another build of cachet (`LOAD_B_BIN`), and so may the
        // build measured as cachet (`LOAD_A_BIN`: figures from before a change).
        let bin = match (std::env::var("LOAD_B_BIN"), std::env::var("LOAD_A_BIN")) {
            (Ok(other), _) if name == VARIANT_B => PathBuf::from(other),
            (_, Ok(other)) if name != VARIANT_B => PathBuf::from(other),
            _ => PathBuf::from(env!("CARGO_BIN_EXE_cachet")),
        };
        let mut cmd = self.command("1", &bin);
        cmd.args(["serve", "--listen", "127.0.0.1:0"]);
        // A hop whose admin listener is read (its metrics) names it in `args`.
        if !args.contains(&"--admin-listen") {
            cmd.args(["--admin-listen", "127.0.0.1:0"]);
        }
        cmd.args([
            "--anthropic-upstream",
            upstream,
            "--openai-upstream",
            upstream,
            "--config",
        ])
        .arg(&file)
        .args(args);
        match log.or_else(|| std::env::var("BENCH_CACHET_RUST_LOG").ok()) {
            Some(level) => cmd.env("RUST_LOG", level),
            None => cmd.env_remove("RUST_LOG"),
        };
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        Hop {
            name: name.to_string(),
            process: child::spawn(cmd.stderr(Stdio::null())),
            _dir: Some(dir),
        }
    }
}

/// The processes every scenario shares: the launcher, the fake upstream and the two bare
/// hops (`bare[0]` the hyper hop, `bare[1]` the reqwest hop).
struct Rig<'a> {
    launch: Launcher,
    up_url: String,
    up_addr: String,
    bare: [&'a Hop; 2],
}

/// What one measured run sends.
struct Work {
    /// Sent first, unmeasured (connections, caches).
    warm: Vec<Bytes>,
    /// Request `i` sends `bodies[i % len]`.
    bodies: Vec<Bytes>,
    requests: usize,
    stream: bool,
    /// The route every request goes to.
    path: &'static str,
}

/// Anthropic Messages: every scenario's route but two of the large bodies'.
const MESSAGES: &str = "/v1/messages";
const CHAT: &str = "/v1/chat/completions";
const RESPONSES: &str = "/v1/responses";

#[derive(Clone, Default)]
struct RunResult {
    p50_ms: f64,
    p99_ms: f64,
    ttfb_p50_ms: f64,
    wall_s: f64,
    rps: f64,
    /// Until the process is idle after the last response.
    cpu_ms_per_req: f64,
    /// Until the last response ended.
    cpu_in_run_ms_per_req: f64,
    faults_per_req: f64,
}

async fn send(
    client: &reqwest::Client,
    url: &str,
    body: Bytes,
    stream: bool,
) -> (Duration, Duration) {
    let t = Instant::now();
    let mut rb = client
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    rb = match url.ends_with(MESSAGES) {
        true => rb
            .header("x-api-key", "bench")
            .header("anthropic-version", "2023-06-01"),
        false => rb.header("authorization", "Bearer bench"),
    };
    if stream {
        rb = rb.header("x-bench-stream", "1");
    }
    let resp = rb.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut s = resp.bytes_stream();
    let mut first = None;
    while let Some(c) = s.next().await {
        c.unwrap();
        first.get_or_insert_with(|| t.elapsed());
    }
    let total = t.elapsed();
    (total, first.unwrap_or(total))
}

/// Wait until a process has used less than 1 ms of CPU in 100 ms (at most 10 s).
async fn settle(pid: u32) {
    let mut before = cpu_reading(pid);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = cpu_reading(pid);
        if cpu_between(&before, &now) < 0.001 {
            return;
        }
        before = now;
    }
}

async fn run(addr: &str, work: &Work, concurrency: usize, pid: Option<u32>) -> RunResult {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let url = format!("http://{addr}{}", work.path);
    futures_util::stream::iter(work.warm.iter().cloned())
        .map(|b| send(&client, &url, b, work.stream))
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    if let Some(pid) = pid {
        settle(pid).await;
    }
    let cpu0 = pid.map(cpu_reading);
    let faults0 = pid.map(minor_faults).unwrap_or(0.0);
    let t0 = Instant::now();
    let n = work.bodies.len();
    let mut lat: Vec<(Duration, Duration)> = futures_util::stream::iter(0..work.requests)
        .map(|i| send(&client, &url, work.bodies[i % n].clone(), work.stream))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = t0.elapsed().as_secs_f64();
    let cpu_run = pid.map(cpu_reading);
    if let Some(pid) = pid {
        settle(pid).await;
    }
    let cpu_end = pid.map(cpu_reading);
    let faults = pid.map(minor_faults).unwrap_or(0.0) - faults0;
    let per_req = |a: &Option<procfs::CpuReading>, b: &Option<procfs::CpuReading>| match (a, b) {
        (Some(a), Some(b)) => cpu_between(a, b) * 1000.0 / work.requests as f64,
        _ => 0.0,
    };
    lat.sort();
    let pct = |v: &[Duration], p: f64| {
        v[((v.len() as f64 * p) as usize).min(v.len() - 1)].as_secs_f64() * 1000.0
    };
    let totals: Vec<Duration> = lat.iter().map(|l| l.0).collect();
    let mut firsts: Vec<Duration> = lat.iter().map(|l| l.1).collect();
    firsts.sort();
    RunResult {
        p50_ms: pct(&totals, 0.50),
        p99_ms: pct(&totals, 0.99),
        ttfb_p50_ms: pct(&firsts, 0.50),
        wall_s: wall,
        rps: work.requests as f64 / wall,
        cpu_ms_per_req: per_req(&cpu0, &cpu_end),
        cpu_in_run_ms_per_req: per_req(&cpu0, &cpu_run),
        faults_per_req: faults / work.requests as f64,
    }
}

/// One round per entry: the direct run, then each hop's.
type Rounds = Vec<(RunResult, Vec<RunResult>)>;

/// Run `rounds` rounds of `work(round)` direct and through every hop, rotating the order.
async fn measure(
    upstream: &str,
    hops: &[&Hop],
    rounds: usize,
    concurrency: usize,
    work: &dyn Fn(usize) -> Work,
) -> Rounds {
    let mut out = Vec::new();
    for round in 0..rounds {
        let w = work(round);
        let direct = run(upstream, &w, concurrency, None).await;
        let mut results = vec![RunResult::default(); hops.len()];
        for k in 0..hops.len() {
            let i = (round + k) % hops.len();
            results[i] = run(hops[i].addr(), &w, concurrency, Some(hops[i].pid())).await;
        }
        if std::env::var("LOAD_VERBOSE").is_ok() {
            for (hop, r) in hops.iter().zip(&results) {
                eprintln!(
                    "round {round}: {}: {:.0} req/s, p50 {:.3} ms, {:.3} ms CPU/req ({:.3} until the last response), {:.1} faults/req",
                    hop.name, r.rps, r.p50_ms, r.cpu_ms_per_req, r.cpu_in_run_ms_per_req, r.faults_per_req
                );
            }
        }
        out.push((direct, results));
    }
    out
}

/// Median and range of a per-round value.
#[derive(Clone)]
struct Spread {
    median: f64,
    low: f64,
    high: f64,
}

impl Spread {
    fn of(mut v: Vec<f64>) -> Spread {
        v.sort_by(|a, b| a.total_cmp(b));
        Spread {
            median: v[v.len() / 2],
            low: v[0],
            high: v[v.len() - 1],
        }
    }
}

impl std::fmt::Display for Spread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.median.abs() < 10.0 {
            write!(f, "{:.2} ({:.2}–{:.2})", self.median, self.low, self.high)
        } else {
            write!(f, "{:.0} ({:.0}–{:.0})", self.median, self.low, self.high)
        }
    }
}

/// A target of issue 12, judged on the median over rounds.
#[derive(Clone, Copy)]
enum Limit {
    AtMost(f64),
    AtLeast(f64),
    Below(f64),
    /// A figure reported beside the targets, with no limit of its own.
    Info,
}

impl Limit {
    fn verdict(self, median: f64) -> &'static str {
        let met = match self {
            Limit::AtMost(l) => median <= l,
            Limit::AtLeast(l) => median >= l,
            Limit::Below(l) => median < l,
            Limit::Info => return "",
        };
        if met {
            "MET"
        } else {
            "NOT MET"
        }
    }
}

impl std::fmt::Display for Limit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Limit::AtMost(l) => write!(f, "≤ {l}"),
            Limit::AtLeast(l) => write!(f, "≥ {l}"),
            Limit::Below(l) => write!(f, "< {l}"),
            Limit::Info => write!(f, "–"),
        }
    }
}

/// Every target figure of the run, printed as one table at the end.
static TARGETS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

fn target(group: &str, case: &str, figure: &str, value: Spread, limit: Limit) {
    let row = format!(
        "| {group} | {case} | {figure} | {:.3} ({:.3}–{:.3}) | {limit} | {} |",
        value.median,
        value.low,
        value.high,
        limit.verdict(value.median)
    );
    TARGETS.lock().unwrap().push(row);
}

fn print_targets() {
    let rows = TARGETS.lock().unwrap();
    if rows.is_empty() {
        return;
    }
    println!("\n### targets (median over rounds, range in brackets; judged on the median)\n");
    println!(
        "| target | case | figure | value (range) | limit | verdict |\n|---|---|---|---|---|---|"
    );
    for row in rows.iter() {
        println!("{row}");
    }
}

/// Per round, hop `h`'s CPU per request over the hyper hop's (index 0).
fn cpu_ratio(rounds: &Rounds, h: usize) -> Spread {
    Spread::of(
        rounds
            .iter()
            .map(|(_, r)| r[h].cpu_ms_per_req / r[0].cpu_ms_per_req)
            .collect(),
    )
}

fn rps_ratio(rounds: &Rounds, h: usize) -> Spread {
    Spread::of(rounds.iter().map(|(_, r)| r[h].rps / r[0].rps).collect())
}

/// Per round, hop `h`'s p50 minus the hyper hop's: what it adds beyond the bare hop.
fn p50_delta(rounds: &Rounds, h: usize) -> Spread {
    Spread::of(
        rounds
            .iter()
            .map(|(_, r)| r[h].p50_ms - r[0].p50_ms)
            .collect(),
    )
}

fn ttfb_delta(rounds: &Rounds, h: usize) -> Spread {
    Spread::of(
        rounds
            .iter()
            .map(|(_, r)| r[h].ttfb_p50_ms - r[0].ttfb_p50_ms)
            .collect(),
    )
}

const HEADER: &str = "| case | hop | direct p50 ms | +p50 ms | p50 − hyper p50 ms (range) | +p99 ms | +TTFB p50 ms | req/s | CPU ms/req | CPU × hyper (range) | req/s × hyper (range) | CPU × reqwest (range) | req/s × reqwest (range) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";

/// Table rows for one case: every hop, with ratios against the hyper hop (index 0) and the
/// reqwest hop (index 1).
fn report(case: &str, hops: &[&Hop], rounds: &Rounds) {
    let spread = |f: &dyn Fn(&RunResult, &[RunResult]) -> f64| {
        Spread::of(rounds.iter().map(|(d, r)| f(d, r)).collect())
    };
    for (h, hop) in hops.iter().enumerate() {
        let ratio = |base: usize, f: fn(&RunResult) -> f64| {
            if base == h {
                "1".to_string()
            } else {
                spread(&|_, r| f(&r[h]) / f(&r[base])).to_string()
            }
        };
        println!(
            "| {case} | {} | {:.3} | {:.3} | {} | {:.3} | {:.3} | {:.0} | {:.3} | {} | {} | {} | {} |",
            hop.name,
            spread(&|d, _| d.p50_ms).median,
            spread(&|d, r| r[h].p50_ms - d.p50_ms).median,
            if h == 0 {
                "0".to_string()
            } else {
                let s = spread(&|_, r| r[h].p50_ms - r[0].p50_ms);
                format!("{:+.3} ({:+.3}–{:+.3})", s.median, s.low, s.high)
            },
            spread(&|d, r| r[h].p99_ms - d.p99_ms).median,
            spread(&|d, r| r[h].ttfb_p50_ms - d.ttfb_p50_ms).median,
            spread(&|_, r| r[h].rps).median,
            spread(&|_, r| r[h].cpu_ms_per_req).median,
            ratio(0, |r| r.cpu_ms_per_req),
            ratio(0, |r| r.rps),
            ratio(1, |r| r.cpu_ms_per_req),
            ratio(1, |r| r.rps),
        );
    }
}

const VARIANT_B: &str = "cachet B";

/// The A/B variant of cachet (`LOAD_B_CONFIG`, `LOAD_B_LOG`, `LOAD_B_ENV`, `LOAD_B_BIN`),
/// started with the scenario's own configuration plus its keys.
fn variant_b(launch: Launcher, upstream: &str, config: &[String], args: &[&str]) -> Option<Hop> {
    let extra = std::env::var("LOAD_B_CONFIG").ok();
    let log = std::env::var("LOAD_B_LOG").ok();
    // `NAME=value` pairs, space-separated (e.g. glibc's `MALLOC_TRIM_THRESHOLD_=...`).
    let env: Vec<(String, String)> = std::env::var("LOAD_B_ENV")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let other_build = std::env::var("LOAD_B_BIN").is_ok();
    if extra.is_none() && log.is_none() && env.is_empty() && !other_build {
        return None;
    }
    let mut config = config.to_vec();
    config.extend(extra);
    Some(launch.cachet(VARIANT_B, upstream, &config, args, log, &env))
}

async fn drive() {
    let requests: usize = env_or("LOAD_REQUESTS", 2000);
    let rounds: usize = env_or("LOAD_ROUNDS", 3).max(1);
    let concurrencies: Vec<usize> = std::env::var("LOAD_CONCURRENCY")
        .unwrap_or_else(|_| "1,8".into())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let scenarios = std::env::var("LOAD_SCENARIOS")
        .unwrap_or_else(|_| "pass,session,shaping,growing,large".into());
    let wants = |s: &str| scenarios.split(',').any(|x| x.trim() == s);
    let launch = Launcher {
        pin: std::env::var("LOAD_PIN").is_ok_and(|v| v == "1"),
    };
    if launch.pin {
        let status = Command::new("taskset")
            .args(["-a", "-cp", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .expect("LOAD_PIN=1 needs taskset");
        assert!(status.success(), "taskset could not pin the driver");
    }
    let upstream = launch.role("0", "upstream", None);
    let up_url = format!("http://{}", upstream.addr());
    let hyper = launch.role("1", "hyper-hop", Some(&up_url));
    let reqwest = launch.role("1", "reqwest-hop", Some(&up_url));
    let buffered = std::env::var("LOAD_BUFFERED_HOP")
        .is_ok_and(|v| v == "1")
        .then(|| launch.role("1", "hyper-buffered-hop", Some(&up_url)));
    println!(
        "rounds: {rounds}, pinned: {}, concurrency: {concurrencies:?}; medians over rounds, ratios within each round, range in brackets",
        launch.pin
    );

    let rig = Rig {
        launch,
        up_url,
        up_addr: upstream.addr().to_string(),
        bare: [&hyper, &reqwest],
    };
    if wants("pass") {
        pass(&rig, buffered.as_ref(), requests, rounds, &concurrencies).await;
    }
    if wants("session") {
        session(&rig, rounds).await;
    }
    if wants("shaping") {
        shaping(&rig, rounds).await;
    }
    if wants("growing") {
        growing(&rig, rounds).await;
    }
    if wants("large") {
        large(&rig, rounds).await;
    }
    print_targets();
}

/// No policy, body check on, monitoring off: the same body again and again.
async fn pass(
    rig: &Rig<'_>,
    buffered: Option<&Hop>,
    requests: usize,
    rounds: usize,
    concurrencies: &[usize],
) {
    let (launch, up_url, up_addr, bare) = (
        rig.launch,
        rig.up_url.as_str(),
        rig.up_addr.as_str(),
        rig.bare,
    );
    let config = vec!["sessions.monitor = false".to_string()];
    let cachet = launch.cachet("cachet", up_url, &config, &[], None, &[]);
    let b = variant_b(launch, up_url, &config, &[]);
    let mut hops = vec![bare[0], bare[1], &cachet];
    hops.extend(b.as_ref());
    hops.extend(buffered);
    println!("\n### pass: no policy, body check on, monitoring off\n\n{HEADER}");
    for (label, size) in [
        ("2 KB", 2 * 1024),
        ("100 KB", 100 * 1024),
        ("500 KB", 500 * 1024),
    ] {
        let body = plain_body(size);
        let n = if size > 200 * 1024 {
            requests / 4
        } else {
            requests
        };
        for stream in [false, true] {
            if let Ok(only) = std::env::var("LOAD_ONLY") {
                if only != format!("{}:{stream}", label.replace(' ', "")) {
                    continue;
                }
            }
            for &c in concurrencies {
                let work = |_| Work {
                    warm: vec![body.clone(); c * 4],
                    bodies: vec![body.clone()],
                    requests: n,
                    stream,
                    path: MESSAGES,
                };
                let r = measure(up_addr, &hops, rounds, c, &work).await;
                let mode = if stream { "stream" } else { "non-stream" };
                let case = format!("{label} {mode} c={c}");
                report(&case, &hops, &r);
                const T: &str = "(a) no policy, check on, monitoring off";
                target(
                    T,
                    &case,
                    "CPU/req × hyper hop",
                    cpu_ratio(&r, 2),
                    Limit::AtMost(1.2),
                );
                target(
                    T,
                    &case,
                    "req/s × hyper hop",
                    rps_ratio(&r, 2),
                    Limit::AtLeast(0.9),
                );
                if c == 1 {
                    target(
                        T,
                        &case,
                        "p50 − hyper hop p50 (ms)",
                        p50_delta(&r, 2),
                        Limit::AtMost(0.05),
                    );
                }
                if stream {
                    target(
                        "(d) streaming first byte",
                        &case,
                        "TTFB p50 − hyper hop TTFB p50 (ms)",
                        ttfb_delta(&r, 2),
                        Limit::AtMost(0.5),
                    );
                }
            }
        }
    }
    for hop in &hops {
        println!("peak RSS {}: {:.1} MiB", hop.name, peak_rss_mib(hop.pid()));
    }
}

/// Requests of `sessions` growing agent sessions, one after the other, fresh ids per round.
fn agent_work(
    tag: &str,
    round: usize,
    sessions: usize,
    start: usize,
    tail: usize,
    steps: usize,
) -> Work {
    let mut bodies = Vec::new();
    for n in 0..sessions {
        bodies.extend(
            AgentSession::new(&session_id(tag, round, n + 1), start, tail, false).requests(steps),
        );
    }
    let warm = AgentSession::new(&session_id(tag, round, 0), 20 * 1024, tail, false).requests(4);
    Work {
        warm,
        requests: bodies.len(),
        bodies,
        stream: false,
        path: MESSAGES,
    }
}

/// cachet as shipped but for monitoring (`sessions.monitor = false`).
fn monitoring_off(launch: Launcher, upstream: &str) -> Hop {
    let config = ["sessions.monitor = false".to_string()];
    launch.cachet("cachet, monitor = false", upstream, &config, &[], None, &[])
}

/// Monitoring's own cost per round, cachet as shipped (hop 2) less cachet with monitoring
/// off (hop 3): CPU ms a request, and that over the hyper hop's CPU a request.
fn monitoring_cost(rounds: &Rounds) -> (Spread, Spread) {
    let cost = |x: &[RunResult]| x[2].cpu_ms_per_req - x[3].cpu_ms_per_req;
    (
        Spread::of(rounds.iter().map(|(_, x)| cost(x)).collect()),
        Spread::of(
            rounds
                .iter()
                .map(|(_, x)| cost(x) / x[0].cpu_ms_per_req)
                .collect(),
        ),
    )
}

/// The live what-if's own cost per round in `growing`: monitoring + what-if (hop 6) less
/// monitoring alone (hop 5), CPU ms a request; that over the hyper hop's CPU a request, and
/// over monitoring's own (monitoring alone less monitoring off, hop 3).
fn whatif_cost(rounds: &Rounds) -> (Spread, Spread, Spread) {
    let cost = |x: &[RunResult]| x[6].cpu_ms_per_req - x[5].cpu_ms_per_req;
    let spread =
        |f: &dyn Fn(&[RunResult]) -> f64| Spread::of(rounds.iter().map(|(_, x)| f(x)).collect());
    (
        spread(&|x| cost(x)),
        spread(&|x| cost(x) / x[0].cpu_ms_per_req),
        spread(&|x| cost(x) / (x[5].cpu_ms_per_req - x[3].cpu_ms_per_req)),
    )
}

/// The `cachet_whatif_skipped_total` series of the cachet whose admin listener is `admin`:
/// a what-if that fell behind (`queue_full`) did less than it was given.
async fn whatif_skips(admin: &str) -> String {
    let text = match reqwest::get(format!("http://{admin}/metrics")).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => return format!("metrics not read ({e})"),
    };
    (text.lines())
        .filter(|l| l.starts_with("cachet_whatif_skipped_total{"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// No policy as shipped (monitoring on) on growing agent sessions, beside monitoring off.
async fn session(rig: &Rig<'_>, rounds: usize) {
    let (launch, up_url, up_addr, bare) = (
        rig.launch,
        rig.up_url.as_str(),
        rig.up_addr.as_str(),
        rig.bare,
    );
    let on = launch.cachet("cachet", up_url, &[], &[], None, &[]);
    let off = monitoring_off(launch, up_url);
    let b = variant_b(launch, up_url, &[], &[]);
    let mut hops = vec![bare[0], bare[1], &on, &off];
    hops.extend(b.as_ref());
    let sessions = env_or("LOAD_SESSIONS", 4);
    let work = |round| agent_work("session", round, sessions, 20 * 1024, 4 * 1024, 120);
    let sizes = {
        let w = work(0);
        (
            w.bodies[0].len(),
            w.bodies[119.min(w.bodies.len() - 1)].len(),
            w.requests,
        )
    };
    println!(
        "\n### session: no policy, monitoring on (as shipped) and off, growing agent sessions ({} → {} bytes, {} requests a round), c=1\n\n{HEADER}",
        sizes.0, sizes.1, sizes.2
    );
    let r = measure(up_addr, &hops, rounds, 1, &work).await;
    report("agent session c=1", &hops, &r);
    let (cost, share) = monitoring_cost(&r);
    let after = Spread::of(
        r.iter()
            .map(|(_, x)| x[2].cpu_ms_per_req - x[2].cpu_in_run_ms_per_req)
            .collect(),
    );
    println!("\n| monitoring cost (record + diagnosis) | CPU ms/req, monitor on − off (range) | × hyper hop CPU (range) | CPU ms/req used after the last response ended (range) |\n|---|---|---|---|");
    println!("| agent session c=1 | {cost} | {share} | {after} |");
    const T: &str = "(b) no policy as shipped (monitoring on)";
    let case = "growing agent session c=1";
    target(
        T,
        case,
        "CPU/req × hyper hop",
        cpu_ratio(&r, 2),
        Limit::AtMost(1.3),
    );
    target(
        T,
        case,
        "p50 − hyper hop p50 (ms)",
        p50_delta(&r, 2),
        Limit::AtMost(0.05),
    );
    target(
        T,
        case,
        "monitoring cost: CPU ms/req on − off",
        cost,
        Limit::Info,
    );
    target(
        T,
        case,
        "monitoring cost × hyper hop CPU/req",
        share,
        Limit::Info,
    );
}

/// cachet's arguments for full shaping: the three policies, and `LOAD_SHAPING_POLICY`'s.
fn shaping_args() -> Vec<String> {
    let mut args = vec![
        "--policy".to_string(),
        "policies/anthropic-auto-breakpoints.toml".into(),
        "--policy".into(),
        "policies/stabilize-volatile.toml".into(),
        "--policy".into(),
        "policies/memory-pinned.toml".into(),
    ];
    // More policies beside the three (`LOAD_SHAPING_POLICY`, comma-separated files), e.g. a
    // `[[payload]]` edit, measured on the same sessions.
    for extra in std::env::var("LOAD_SHAPING_POLICY")
        .unwrap_or_default()
        .split(',')
    {
        if !extra.is_empty() {
            args.extend(["--policy".to_string(), extra.to_string()]);
        }
    }
    args
}

/// Full shaping on growing 60-request agent sessions (100 KB → 500 KB).
async fn shaping(rig: &Rig<'_>, rounds: usize) {
    let (launch, up_url, up_addr, bare) = (
        rig.launch,
        rig.up_url.as_str(),
        rig.up_addr.as_str(),
        rig.bare,
    );
    let args = shaping_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cachet = launch.cachet("cachet, full shaping", up_url, &[], &args, None, &[]);
    let b = variant_b(launch, up_url, &[], &args);
    let mut hops = vec![bare[0], bare[1], &cachet];
    hops.extend(b.as_ref());
    let sessions = env_or("LOAD_SESSIONS", 3);
    let work = |round| agent_work("shaping", round, sessions, 100 * 1024, 6800, 60);
    let sizes = {
        let w = work(0);
        (
            w.bodies[0].len(),
            w.bodies[59.min(w.bodies.len() - 1)].len(),
            w.requests,
        )
    };
    println!(
        "\n### shaping: anthropic-auto-breakpoints + stabilize-volatile + memory-pinned, growing agent sessions ({} → {} bytes, {} requests a round), c=1\n\n{HEADER}",
        sizes.0, sizes.1, sizes.2
    );
    let r = measure(up_addr, &hops, rounds, 1, &work).await;
    report("agent session c=1", &hops, &r);
    const T: &str = "(c) full shaping";
    let case = "growing 60-request agent sessions c=1";
    target(
        T,
        case,
        "CPU/req × hyper hop",
        cpu_ratio(&r, 2),
        Limit::AtMost(2.0),
    );
    target(
        T,
        case,
        "p50 − hyper hop p50 (ms)",
        p50_delta(&r, 2),
        Limit::AtMost(0.2),
    );
    for hop in &hops {
        println!("peak RSS {}: {:.1} MiB", hop.name, peak_rss_mib(hop.pid()));
    }
}

/// Growing 100 KB → 500 KB Claude Code sessions, a 5 KB tool result appended per request:
/// as shipped (no policy, monitoring on), with monitoring off, and with full shaping, in
/// the same rounds.
async fn growing(rig: &Rig<'_>, rounds: usize) {
    let (launch, up_url, up_addr, bare) = (
        rig.launch,
        rig.up_url.as_str(),
        rig.up_addr.as_str(),
        rig.bare,
    );
    let shipped = launch.cachet("cachet", up_url, &[], &[], None, &[]);
    let off = monitoring_off(launch, up_url);
    let args = shaping_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let shaping = launch.cachet("cachet, full shaping", up_url, &[], &args, None, &[]);
    // Monitoring alone and monitoring with the live what-if, whatever the default: on − off
    // is the what-if's cost. Its skips are read from its metrics after the run.
    let alone = ["sessions.whatif = false".to_string()];
    let monitoring = launch.cachet("cachet, monitoring", up_url, &alone, &[], None, &[]);
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .to_string();
    let whatif_args = ["--admin-listen", admin.as_str()];
    let on = ["sessions.whatif = true".to_string()];
    let whatif = launch.cachet(
        "cachet, monitoring + what-if",
        up_url,
        &on,
        &whatif_args,
        None,
        &[],
    );
    // The A/B variant runs as shipped, with its own keys.
    let b = variant_b(launch, up_url, &[], &[]);
    let mut hops = vec![
        bare[0],
        bare[1],
        &shipped,
        &off,
        &shaping,
        &monitoring,
        &whatif,
    ];
    hops.extend(b.as_ref());
    let sessions = env_or("LOAD_SESSIONS", 6);
    let template = ClaudeCodeTemplate::load();
    let (start, end, result) = (100 * 1024, 500 * 1024, 5 * 1024);
    let work = |round| {
        let mut bodies = Vec::new();
        for n in 0..sessions {
            let id = session_id("growing", round, n + 1);
            bodies.extend(ClaudeCodeSession::new(&template, &id, start, result).requests_to(end));
        }
        let warm = ClaudeCodeSession::new(&template, &session_id("growing", round, 0), 0, result)
            .requests_to(start / 4);
        Work {
            warm,
            requests: bodies.len(),
            bodies,
            stream: true,
            path: MESSAGES,
        }
    };
    let (first, last, per_round) = {
        let w = work(0);
        let per_session = w.requests / sessions.max(1);
        (
            w.bodies[0].len(),
            w.bodies[per_session.saturating_sub(1)].len(),
            w.requests,
        )
    };
    println!(
        "\n### growing: Claude Code sessions of {first} → {last} bytes, a {result}-byte tool result a request ({per_round} requests a round), streamed, c=1: as shipped, monitoring off, full shaping, monitoring alone, monitoring + what-if\n\n{HEADER}"
    );
    let r = measure(up_addr, &hops, rounds, 1, &work).await;
    report("growing session c=1", &hops, &r);
    // Monitoring's own cost: as shipped − monitoring off, per request, over the hyper hop's.
    let (cost, share) = monitoring_cost(&r);
    let hop = Spread::of(r.iter().map(|(_, x)| x[0].cpu_ms_per_req).collect());
    println!("\n| growing session c=1 | hyper hop CPU ms/req (range) | monitoring: CPU ms/req on − off (range) | monitoring × hyper hop CPU (range) |\n|---|---|---|---|");
    println!("| as shipped − monitoring off | {hop} | {cost} | {share} |");
    let (whatif_cost, whatif_hop, whatif_monitoring) = whatif_cost(&r);
    println!("\n| growing session c=1 | what-if: CPU ms/req (monitoring + what-if) − monitoring (range) | × hyper hop CPU (range) | × monitoring's own cost (range) |\n|---|---|---|---|");
    println!("| monitoring + what-if − monitoring | {whatif_cost} | {whatif_hop} | {whatif_monitoring} |");
    println!("\nwhat-if's skips: {}", whatif_skips(&admin).await);
    const T: &str = "growing 100–500 KB session";
    let case = "Claude Code, 5 KB a request, c=1";
    target(
        T,
        "as shipped (no policy, monitoring on)",
        "CPU/req × hyper hop",
        cpu_ratio(&r, 2),
        Limit::AtMost(1.5),
    );
    target(
        T,
        "monitoring: as shipped − monitoring off",
        "CPU/req × hyper hop CPU/req",
        share,
        Limit::AtMost(0.3),
    );
    target(
        T,
        "full shaping",
        "CPU/req × hyper hop",
        cpu_ratio(&r, 4),
        Limit::AtMost(2.0),
    );
    target(
        T,
        "what-if: monitoring + what-if − monitoring",
        "CPU/req × hyper hop CPU/req",
        whatif_hop,
        Limit::Info,
    );
    target(
        T,
        "what-if: monitoring + what-if − monitoring",
        "CPU/req × monitoring's own CPU/req",
        whatif_monitoring,
        Limit::AtMost(1.0),
    );
    target(
        T,
        "monitoring off",
        "CPU/req × hyper hop",
        cpu_ratio(&r, 3),
        Limit::Info,
    );
    target(T, case, "hyper hop CPU ms/req", hop, Limit::Info);
    target(
        T,
        "as shipped (no policy, monitoring on)",
        "p50 − hyper hop p50 (ms)",
        p50_delta(&r, 2),
        Limit::Info,
    );
    target(
        T,
        "full shaping",
        "p50 − hyper hop p50 (ms)",
        p50_delta(&r, 4),
        Limit::Info,
    );
    for hop in &hops {
        println!("peak RSS {}: {:.1} MiB", hop.name, peak_rss_mib(hop.pid()));
    }
}

/// A 30 MB body through a fresh cachet with every shipped policy, and without policies
/// (monitoring on) to tell the policies' share, in the shapes agents send one in: a long
/// history of large tool results, one pasted prompt, and a long history of small steps in
/// each API (what costs memory per message, not per byte, shows there).
async fn large(rig: &Rig<'_>, rounds: usize) {
    let mb: usize = env_or("LOAD_LARGE_MB", 30);
    let size = mb * 1000 * 1000;
    // An Anthropic agent session of `tail`-byte steps: its body grown to `size`, and two
    // small requests of another session to warm the process with.
    let agent = |round: usize, tail: usize| {
        let session =
            |tag: &str| AgentSession::new(&session_id(tag, round, 0), 20 * 1024, tail, false);
        (
            session("large").grown_to(size),
            session("large-warm").requests(2),
        )
    };
    let (history, history_warm) = agent(0, 6800);
    let (steps, steps_warm) = agent(2, 700);
    let shapes: [(&str, &str, Bytes, Vec<Bytes>); 5] = [
        (
            "an agent's history",
            MESSAGES,
            history,
            history_warm.clone(),
        ),
        (
            "one pasted prompt",
            MESSAGES,
            pasted_prompt_body(size),
            history_warm,
        ),
        (
            "an agent's history of small steps",
            MESSAGES,
            steps,
            steps_warm,
        ),
        (
            "Chat, a history of small steps",
            CHAT,
            chat_body(size, 0),
            vec![chat_body(20 * 1024, 1), chat_body(24 * 1024, 1)],
        ),
        (
            "Responses, a history of small steps",
            RESPONSES,
            responses_body(size, 0),
            vec![responses_body(20 * 1024, 1), responses_body(24 * 1024, 1)],
        ),
    ];
    for (shape, path, body, warm) in shapes {
        large_body(rig, rounds, shape, (path, body, warm)).await;
    }
}

/// Once `pid` has used (almost) no CPU for 300 ms, at most 10 s: the work a request leaves
/// after its response (its record) is done.
async fn after_work_done(pid: u32) {
    let (quiet, limit) = (Duration::from_millis(300), Duration::from_secs(10));
    let start = Instant::now();
    let (mut last, mut since) = (procfs::cpu_ns(pid), Instant::now());
    while start.elapsed() < limit {
        tokio::time::sleep(Duration::from_millis(25)).await;
        let now = procfs::cpu_ns(pid);
        // An idle cachet's timers take microseconds a tick.
        if now.saturating_sub(last) > 2_000_000 {
            (last, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            return;
        }
    }
}

/// (e) for one body sent to `path` after `warm` (small requests that load the tokenizer
/// and notes index and open connections): wall time and the extra peak RSS of a fresh
/// cachet, every shipped policy and none.
async fn large_body(
    rig: &Rig<'_>,
    rounds: usize,
    shape: &str,
    (path, body, warm): (&'static str, Bytes, Vec<Bytes>),
) {
    let (launch, up_url, up_addr, hyper) = (
        rig.launch,
        rig.up_url.as_str(),
        rig.up_addr.as_str(),
        rig.bare[0],
    );
    let body_mib = body.len() as f64 / (1024.0 * 1024.0);
    let policies: PathBuf = ["policies"].iter().collect();
    let policies = policies.to_str().unwrap().to_string();
    let history = serde_json::from_slice::<serde_json::Value>(&body).map_or(0, |v| {
        let items = v.get("messages").or_else(|| v.get("input"));
        items.and_then(|m| m.as_array()).map_or(0, Vec::len)
    });
    println!(
        "\n### large: one {:.1} MB body, {shape} ({history} {}), fresh process each round\n",
        body.len() as f64 / 1e6,
        if history == 1 { "message" } else { "messages" },
    );
    println!("| cachet | direct s | hyper hop s | cachet s (range) | cachet CPU s (range) | extra peak MiB (range) | × body size |\n|---|---|---|---|---|---|---|");
    let configs: [(&str, Vec<&str>); 2] = [
        (
            "every shipped policy (`--policies policies/`)",
            vec!["--policies", &policies],
        ),
        ("no policy (monitoring on)", vec![]),
    ];
    for (label, args) in configs {
        let (mut direct, mut bare, mut walls, mut cpu, mut extra) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let cachet = launch.cachet("cachet", up_url, &[], &args, None, &[]);
            let once = |body: Bytes, warm: Vec<Bytes>| Work {
                warm,
                bodies: vec![body],
                requests: 1,
                stream: false,
                path,
            };
            direct.push(
                run(up_addr, &once(body.clone(), vec![]), 1, None)
                    .await
                    .wall_s,
            );
            bare.push(
                run(
                    hyper.addr(),
                    &once(body.clone(), vec![]),
                    1,
                    Some(hyper.pid()),
                )
                .await
                .wall_s,
            );
            run(
                cachet.addr(),
                &once(warm[1].clone(), warm[..1].to_vec()),
                1,
                Some(cachet.pid()),
            )
            .await;
            let idle = rss_mib(cachet.pid());
            let r = run(
                cachet.addr(),
                &once(body.clone(), vec![]),
                1,
                Some(cachet.pid()),
            )
            .await;
            // The record is made after the response: its memory counts too.
            after_work_done(cachet.pid()).await;
            let peak = peak_rss_mib(cachet.pid());
            walls.push(r.wall_s);
            cpu.push(r.cpu_ms_per_req / 1000.0);
            extra.push(peak - idle);
            if std::env::var("LOAD_VERBOSE").is_ok() {
                eprintln!(
                    "round {round}: {label}: {:.3} s, idle {idle:.1} MiB, peak {peak:.1} MiB",
                    r.wall_s
                );
            }
        }
        let extra = Spread::of(extra);
        let walls = Spread::of(walls);
        let group = format!("(e) {:.0} MB body, {shape}", body.len() as f64 / 1e6);
        let times = Spread {
            median: extra.median / body_mib,
            low: extra.low / body_mib,
            high: extra.high / body_mib,
        };
        if args.is_empty() {
            target(&group, label, "wall s", walls.clone(), Limit::Info);
            target(
                &group,
                label,
                "extra peak RSS × body size",
                times,
                Limit::Info,
            );
        } else {
            target(&group, label, "wall s", walls.clone(), Limit::Below(1.0));
            target(
                &group,
                label,
                "extra peak RSS × body size",
                times,
                Limit::Below(3.0),
            );
        }
        println!(
            "| {label} | {:.3} | {:.3} | {} | {} | {} | {:.2} |",
            Spread::of(direct).median,
            Spread::of(bare).median,
            walls,
            Spread::of(cpu),
            extra,
            extra.median / body_mib,
        );
    }
}
