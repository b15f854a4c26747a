//! Load benchmark: the latency and CPU cachet adds on the plain pass-through path, against a
//! bare pass-through hop written for this benchmark, measured in the same run.
//!
//! Four processes besides this driver: a fast fake upstream, the bare hop, `cachet serve` as
//! shipped (every generation body checked before forwarding) and `cachet serve` with
//! `server.check_body = false` (plain pass-through with the usage tap). For each Anthropic
//! request size (2 KB, 100 KB, 500 KB), streaming and not, the driver sends the same requests
//! at fixed concurrency directly to the upstream and through each hop, and reports p50/p99
//! added latency, throughput, CPU time per request of the hop process (from /proc) and its
//! peak RSS.
//!
//! Run: `cargo bench --bench proxy_load` (env: `LOAD_REQUESTS`, `LOAD_ROUNDS`,
//! `LOAD_CONCURRENCY`, `LOAD_PIN=1`, `LOAD_ONLY=2KB:false`, `LOAD_VERBOSE=1`).

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var("BENCH_ROLE").as_deref() {
        Ok("upstream") => rt.block_on(serve(None)),
        Ok("bare-hop") => rt.block_on(serve(Some(std::env::var("BENCH_UPSTREAM").unwrap()))),
        _ => {
            if std::env::args().any(|a| a == "--list") {
                return; // `cargo bench -- --list` compatibility
            }
            rt.block_on(drive())
        }
    }
}

/// The fake upstream (no `upstream`) or the bare hop (forwarding to `upstream`).
async fn serve(upstream: Option<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    println!("{}", listener.local_addr().unwrap());
    let client = reqwest::Client::builder().build().unwrap();
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        stream.set_nodelay(true).unwrap();
        let (client, upstream) = (client.clone(), upstream.clone());
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let (client, upstream) = (client.clone(), upstream.clone());
                async move {
                    Ok::<_, Infallible>(match upstream {
                        None => answer(req).await,
                        Some(u) => hop(&client, &u, req).await,
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

const JSON_REPLY: &str = "{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Done.\"}],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":\"end_turn\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4000,\"output_tokens\":3}}";

fn sse_reply() -> String {
    let mut s = String::from("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":4000,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    for i in 0..10 {
        s.push_str(&format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"word{i} \"}}}}\n\n"));
    }
    s.push_str("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":11}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s
}

async fn answer(req: Request<Incoming>) -> Response<Body> {
    let stream = req.headers().contains_key("x-bench-stream");
    let _ = req.into_body().collect().await;
    if stream {
        // One chunk per event, as a provider sends them.
        let events: Vec<Result<Frame<Bytes>, std::io::Error>> = sse_reply()
            .split_inclusive("\n\n")
            .map(|e| Ok(Frame::data(Bytes::from(e.to_string()))))
            .collect();
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(futures_util::stream::iter(
            events,
        ))));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        r
    } else {
        let mut r = Response::new(
            Full::new(Bytes::from_static(JSON_REPLY.as_bytes()))
                .map_err(|e| match e {})
                .boxed(),
        );
        r.headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        r
    }
}

/// The bare hop: forward method, path, headers and body; stream the answer back.
async fn hop(client: &reqwest::Client, upstream: &str, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let mut headers = parts.headers.clone();
    for h in ["host", "connection", "content-length", "transfer-encoding"] {
        headers.remove(h);
    }
    let url = format!("{upstream}{}", parts.uri.path());
    let resp = client
        .request(parts.method, url)
        .headers(headers)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let stream = resp
        .bytes_stream()
        .map_ok(Frame::data)
        .map_err(std::io::Error::other);
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *r.status_mut() = status;
    for (k, v) in headers.iter() {
        if k != "transfer-encoding" && k != "connection" && k != "content-length" {
            r.headers_mut().append(k.clone(), v.clone());
        }
    }
    r
}

fn spawn_role(cmd: &mut Command) -> (Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .map(|s| s.split(' ').next().unwrap().to_string())
        .unwrap_or_else(|| line.trim().to_string());
    (child, addr)
}

/// Fields of `/proc/{pid}/stat` after the command name (field 3 of proc(5) is index 0).
fn proc_stat(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Minor page faults so far (each one a page the kernel had to map, usually zeroed).
fn minor_faults(pid: u32) -> f64 {
    proc_stat(pid)
        .get(7)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// CPU seconds (user + system) used so far by a process.
fn cpu_seconds(pid: u32) -> f64 {
    let fields = proc_stat(pid);
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    ticks / 100.0 // USER_HZ is 100 on Linux
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn request_body(size: usize) -> String {
    // A realistic Anthropic agent request: system, tools, and a history filling up `size`.
    let mut messages = Vec::new();
    let mut total = 0;
    let mut i = 0;
    while total < size {
        let text = format!("Turn {i}: please look at src/module_{i}.rs and explain the control flow around line {}. ", i * 7).repeat(4);
        total += text.len() + 40;
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        messages.push(serde_json::json!({"role": role, "content": text}));
        i += 1;
    }
    if messages.len() % 2 == 0 {
        messages.push(serde_json::json!({"role": "user", "content": "continue"}));
    }
    serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "bash", "description": "Run a command", "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}}}],
        "messages": messages,
    })
    .to_string()
}

#[derive(Clone)]
struct RunResult {
    p50_ms: f64,
    p99_ms: f64,
    rps: f64,
    cpu_ms_per_req: f64,
    faults_per_req: f64,
}

async fn run(
    addr: &str,
    body: &Bytes,
    stream: bool,
    requests: usize,
    concurrency: usize,
    pid: Option<u32>,
) -> RunResult {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()
        .unwrap();
    let url = format!("http://{addr}/v1/messages");
    let send = |client: reqwest::Client, url: String, body: Bytes| async move {
        let t = Instant::now();
        let mut rb = client
            .post(url)
            .header("x-api-key", "bench")
            .header("anthropic-version", "2023-06-01")
            .body(body);
        if stream {
            rb = rb.header("x-bench-stream", "1");
        }
        let resp = rb.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut s = resp.bytes_stream();
        while let Some(c) = s.next().await {
            c.unwrap();
        }
        t.elapsed()
    };
    // Warm up connections and caches.
    futures_util::stream::iter(0..concurrency * 4)
        .map(|_| send(client.clone(), url.clone(), body.clone()))
        .buffer_unordered(concurrency)
        .collect::<Vec<_>>()
        .await;
    let cpu0 = pid.map(cpu_seconds).unwrap_or(0.0);
    let faults0 = pid.map(minor_faults).unwrap_or(0.0);
    let t0 = Instant::now();
    let mut lat: Vec<Duration> = futures_util::stream::iter(0..requests)
        .map(|_| send(client.clone(), url.clone(), body.clone()))
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = pid.map(cpu_seconds).unwrap_or(0.0) - cpu0;
    let faults = pid.map(minor_faults).unwrap_or(0.0) - faults0;
    lat.sort();
    let pct =
        |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)].as_secs_f64() * 1000.0;
    RunResult {
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        rps: requests as f64 / wall,
        cpu_ms_per_req: cpu * 1000.0 / requests as f64,
        faults_per_req: faults / requests as f64,
    }
}

async fn drive() {
    let requests: usize = std::env::var("LOAD_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let rounds_per_case: usize = std::env::var("LOAD_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let concurrency: usize = std::env::var("LOAD_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let me = std::env::current_exe().unwrap();
    // `LOAD_PIN=1`: the driver and the fake upstream share CPU 0 and each hop runs alone on
    // CPU 1, so a hop's CPU time is not inflated by contention with the load it is measured
    // under (and each hop's runtime sizes itself to that one CPU).
    let pin = std::env::var("LOAD_PIN").is_ok_and(|v| v == "1");
    let on_cpu = |cpu: &str, program: &std::path::Path| {
        if pin {
            let mut c = Command::new("taskset");
            c.args(["-c", cpu]).arg(program);
            c
        } else {
            Command::new(program)
        }
    };
    if pin {
        let status = Command::new("taskset")
            .args(["-a", "-cp", "0", &std::process::id().to_string()])
            .stdout(Stdio::null())
            .status()
            .expect("LOAD_PIN=1 needs taskset");
        assert!(status.success(), "taskset could not pin the driver");
    }
    let (mut up, up_addr) = spawn_role(on_cpu("0", &me).env("BENCH_ROLE", "upstream"));
    let up_url = format!("http://{up_addr}");
    let (mut bare, bare_addr) = spawn_role(
        on_cpu("1", &me)
            .env("BENCH_ROLE", "bare-hop")
            .env("BENCH_UPSTREAM", &up_url),
    );
    let cachet_role = |config: Option<&std::path::Path>| {
        let mut cmd = on_cpu("1", std::path::Path::new(env!("CARGO_BIN_EXE_cachet")));
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--anthropic-upstream",
            &up_url,
        ])
        .env(
            "RUST_LOG",
            std::env::var("BENCH_CACHET_RUST_LOG").unwrap_or_else(|_| "warn".into()),
        );
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        spawn_role(&mut cmd)
    };
    // The default (every generation body checked before it is forwarded), and the plain
    // pass-through with the usage tap (`server.check_body = false`).
    let (mut cachet, cachet_addr) = cachet_role(None);
    let unchecked_dir = tempfile::tempdir().unwrap();
    let unchecked_config = unchecked_dir.path().join("cachet.toml");
    std::fs::write(&unchecked_config, "[server]\ncheck_body = false\n").unwrap();
    let (mut unchecked, unchecked_addr) = cachet_role(Some(&unchecked_config));
    let hops: [(&str, &str, u32); 3] = [
        ("bare", &bare_addr, bare.id()),
        ("cachet", &cachet_addr, cachet.id()),
        (
            "cachet, check_body = false",
            &unchecked_addr,
            unchecked.id(),
        ),
    ];
    println!("requests per round: {requests}, rounds per case: {rounds_per_case} (medians; ratios within each round), concurrency: {concurrency}, pinned: {pin}");
    println!("| body | stream | cachet | direct p50 ms | bare +p50 ms | cachet +p50 ms | bare +p99 ms | cachet +p99 ms | bare req/s | cachet req/s | throughput ratio (range) | bare CPU ms/req | cachet CPU ms/req | CPU ratio (range) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for (label, size) in [
        ("2 KB", 2 * 1024),
        ("100 KB", 100 * 1024),
        ("500 KB", 500 * 1024),
    ] {
        let body = Bytes::from(request_body(size));
        let n = if size > 200 * 1024 {
            requests / 4
        } else {
            requests
        };
        for stream in [false, true] {
            // `LOAD_ONLY=2KB:false` runs one case (for profiling).
            if let Ok(only) = std::env::var("LOAD_ONLY") {
                if only != format!("{}:{stream}", label.replace(' ', "")) {
                    continue;
                }
            }
            // Each round runs direct, then the three hops back to back in an order that
            // rotates from round to round, so that drifting load from the rest of the machine
            // falls on all alike. Ratios are taken within a round and the table gives their
            // median; latencies are medians over rounds.
            let mut rounds: Vec<(RunResult, [Option<RunResult>; 3])> = Vec::new();
            for round in 0..rounds_per_case {
                let direct = run(&up_addr, &body, stream, n, concurrency, None).await;
                let mut results: [Option<RunResult>; 3] = [None, None, None];
                for k in 0..hops.len() {
                    let i = (round + k) % hops.len();
                    let (_, addr, pid) = hops[i];
                    results[i] = Some(run(addr, &body, stream, n, concurrency, Some(pid)).await);
                }
                if std::env::var("LOAD_VERBOSE").is_ok() {
                    for ((name, _, _), r) in hops.iter().zip(&results) {
                        let r = r.as_ref().expect("every hop ran");
                        eprintln!(
                            "round {round}: {name}: {:.0} req/s, {:.3} ms CPU/req, {:.1} faults/req",
                            r.rps, r.cpu_ms_per_req, r.faults_per_req
                        );
                    }
                }
                rounds.push((direct, results));
            }
            for (hop, (name, _, _)) in hops.iter().enumerate().skip(1) {
                let pick = |r: &(RunResult, [Option<RunResult>; 3]), i: usize| {
                    r.1[i].clone().expect("every hop ran")
                };
                let values = |f: &dyn Fn(&RunResult, &RunResult, &RunResult) -> f64| {
                    let mut v: Vec<f64> = rounds
                        .iter()
                        .map(|r| f(&r.0, &pick(r, 0), &pick(r, hop)))
                        .collect();
                    v.sort_by(|a, b| a.total_cmp(b));
                    v
                };
                let median = |f: &dyn Fn(&RunResult, &RunResult, &RunResult) -> f64| {
                    let v = values(f);
                    v[v.len() / 2]
                };
                let cpu_ratios = values(&|_, b, c| c.cpu_ms_per_req / b.cpu_ms_per_req);
                let rps_ratios = values(&|_, b, c| c.rps / b.rps);
                let variant = name.strip_prefix("cachet, ").unwrap_or("default");
                println!(
                    "| {label} | {stream} | {variant} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {:.2} ({:.2}–{:.2}) | {:.3} | {:.3} | {:.2} ({:.2}–{:.2}) |",
                    median(&|d, _, _| d.p50_ms),
                    median(&|d, b, _| b.p50_ms - d.p50_ms),
                    median(&|d, _, c| c.p50_ms - d.p50_ms),
                    median(&|d, b, _| b.p99_ms - d.p99_ms),
                    median(&|d, _, c| c.p99_ms - d.p99_ms),
                    median(&|_, b, _| b.rps),
                    median(&|_, _, c| c.rps),
                    rps_ratios[rps_ratios.len() / 2],
                    rps_ratios[0],
                    rps_ratios[rps_ratios.len() - 1],
                    median(&|_, b, _| b.cpu_ms_per_req),
                    median(&|_, _, c| c.cpu_ms_per_req),
                    cpu_ratios[cpu_ratios.len() / 2],
                    cpu_ratios[0],
                    cpu_ratios[cpu_ratios.len() - 1],
                );
            }
        }
    }
    println!(
        "peak RSS: bare hop {:.1} MiB, cachet {:.1} MiB, cachet with check_body = false {:.1} MiB",
        peak_rss_mib(bare.id()),
        peak_rss_mib(cachet.id()),
        peak_rss_mib(unchecked.id())
    );
    for child in [&mut up, &mut bare, &mut cachet, &mut unchecked] {
        let _ = child.kill();
        let _ = child.wait();
    }
}
