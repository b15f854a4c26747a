//! Test support: a scriptable fake upstream and a proxy started on port 0.
#![allow(dead_code)]

pub mod agent_sessions;
pub mod browser;
pub mod docs;
pub mod otlp;
pub mod prometheus;
pub mod redis;
pub mod sessions;
pub mod traffic;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

use cachet::config::Config;
use cachet::server::{self, ProxyHandle};
use cachet::transport::ProxyBody;

/// One request the fake upstream received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A step of a scripted response body.
#[derive(Clone)]
pub enum Step {
    Chunk(Bytes),
    /// Wait until the test releases this gate.
    Wait(Arc<Notify>),
    /// Drop the connection without finishing the body.
    Cut,
}

#[derive(Clone)]
pub struct Script {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub steps: Vec<Step>,
    /// Never answer (for time-out tests).
    pub hang: bool,
}

impl Script {
    pub fn json(status: u16, body: &str) -> Self {
        Script {
            status,
            headers: vec![("content-type".into(), "application/json".into())],
            steps: vec![Step::Chunk(Bytes::from(body.to_string()))],
            hang: false,
        }
    }

    pub fn sse(steps: Vec<Step>) -> Self {
        Script {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            steps,
            hang: false,
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Self {
        self.headers.push((k.into(), v.into()));
        self
    }
}

pub fn chunk(s: &str) -> Step {
    Step::Chunk(Bytes::from(s.to_string()))
}

/// A fake upstream on 127.0.0.1:0 answering every request with the current script.
pub struct FakeUpstream {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
    pub script: Arc<Mutex<Script>>,
    /// Notified when a streamed body could not be delivered (the proxy dropped it).
    pub cancelled: Arc<Notify>,
}

impl FakeUpstream {
    pub async fn start(script: Script) -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script));
        let cancelled = Arc::new(Notify::new());
        let (r, s, c) = (received.clone(), script.clone(), cancelled.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (r, s, c) = (r.clone(), s.clone(), c.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let (r, s, c) = (r.clone(), s.clone(), c.clone());
                        async move { Ok::<_, Infallible>(answer(req, r, s, c).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FakeUpstream {
            addr,
            received,
            script,
            cancelled,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn set_script(&self, script: Script) {
        *self.script.lock().unwrap() = script;
    }
}

type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

async fn answer(
    req: Request<Incoming>,
    received: Arc<Mutex<Vec<Received>>>,
    script: Arc<Mutex<Script>>,
    cancelled: Arc<Notify>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    received.lock().unwrap().push(Received {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        headers: parts.headers,
        body,
    });
    let script = script.lock().unwrap().clone();
    if script.hang {
        std::future::pending::<()>().await;
    }
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(1);
    tokio::spawn(async move {
        for step in script.steps {
            match step {
                Step::Chunk(b) => {
                    if tx.send(Ok(Frame::data(b))).await.is_err() {
                        cancelled.notify_one();
                        return;
                    }
                }
                Step::Wait(gate) => {
                    tokio::select! {
                        _ = gate.notified() => {}
                        _ = tx.closed() => { cancelled.notify_one(); return; }
                    }
                }
                Step::Cut => {
                    let _ = tx.send(Err(std::io::Error::other("cut"))).await;
                    return;
                }
            }
        }
    });
    let stream = tokio_stream_from(rx);
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    *resp.status_mut() = StatusCode::from_u16(script.status).unwrap();
    for (k, v) in script.headers {
        resp.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    resp
}

fn tokio_stream_from<T: Send + 'static>(
    mut rx: mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A config for tests: both listeners on port 0, both upstreams at `upstream`.
pub fn test_config(upstream: &str) -> Config {
    let mut config = Config::default();
    config.server.listen = "127.0.0.1:0".parse().unwrap();
    config.server.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.upstream.anthropic = upstream.to_string();
    config.upstream.openai = upstream.to_string();
    config.upstream.chatgpt = upstream.to_string();
    config.upstream.gemini = upstream.to_string();
    config.server.shutdown_grace_secs = 10;
    // Monitoring keeps sessions by default: each proxy gets a store of its own, kept
    // until the test process ends.
    let store = tempfile::tempdir().unwrap().keep();
    config.sessions.store = store.to_string_lossy().into_owned();
    config
}

pub async fn start_proxy(config: Config) -> ProxyHandle {
    server::spawn(config).await.unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

pub async fn metrics_text(proxy: &ProxyHandle) -> String {
    reqwest::get(format!("http://{}/metrics", proxy.admin_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of one sample line in Prometheus text, matched by metric name and label pairs.
pub fn metric_value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

pub fn _unused(_: ProxyBody) {}

/// The sum over every sample line of a metric whose labels include `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Write a policy file into `dir`.
pub fn policy_file(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

/// A proxy config with policies and an embedded store in `store_dir`.
pub fn policy_config(
    upstream: &str,
    policies: Vec<std::path::PathBuf>,
    store_dir: &std::path::Path,
) -> Config {
    let mut config = test_config(upstream);
    config.policies.files = policies;
    config.sessions.store = store_dir.to_string_lossy().into_owned();
    config
}

pub async fn start_emulator() -> cachet::emulator::EmulatorHandle {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    cachet::emulator::spawn(listener, Default::default())
        .await
        .unwrap()
}

/// The Responses requests Codex 0.171.0 signed in with ChatGPT sent in a session with an
/// inline compaction, decoded (it sends them zstd-compressed), in order: its first turn,
/// the compaction (`compaction_trigger` pushed last), the next turn on the compacted
/// history (its user messages, the compaction item, the new prompt), and a turn after
/// `codex exec resume ID -m gpt-6-sol`. The emulator ids in their histories are those a
/// fresh emulator gives its answers to these four requests alone.
pub fn codex_chatgpt_compaction() -> Vec<serde_json::Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/codex_chatgpt_compaction.json.zst"
    );
    let text = zstd::decode_all(std::fs::File::open(path).unwrap()).unwrap();
    serde_json::from_slice(&text).unwrap()
}

/// POST a Responses request to the proxy as Codex signed in with ChatGPT sends it (its
/// token and account header, a streamed answer); returns the status and the answer's
/// SSE events' JSON data.
pub async fn post_codex_chatgpt(
    proxy: &ProxyHandle,
    body: &serde_json::Value,
) -> (u16, Vec<serde_json::Value>) {
    let r = client()
        .post(format!("http://{}/v1/responses", proxy.addr))
        .header("authorization", "Bearer eyJhbGciOiJub25lIn0.e30.c2ln")
        .header("chatgpt-account-id", "acc-test")
        .header("originator", "codex_exec")
        .header("accept", "text/event-stream")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let events = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    (status, events)
}

/// POST JSON to the proxy with Anthropic headers and a session; returns status and body.
pub async fn post_anthropic(
    proxy: &ProxyHandle,
    session: &str,
    body: &serde_json::Value,
) -> (u16, serde_json::Value) {
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-cachet-session", session)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// A hook server whose answer to each event is computed by `answer` (`None` → 204).
pub struct HookServer {
    pub url: String,
    pub events: Arc<Mutex<Vec<serde_json::Value>>>,
}

pub async fn start_hook_server<F>(answer: F) -> HookServer
where
    F: Fn(&serde_json::Value) -> Option<serde_json::Value> + Send + Sync + 'static,
{
    start_slow_hook_server(std::time::Duration::ZERO, answer).await
}

/// A hook server that takes `delay` to answer each event.
pub async fn start_slow_hook_server<F>(delay: std::time::Duration, answer: F) -> HookServer
where
    F: Fn(&serde_json::Value) -> Option<serde_json::Value> + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let events = Arc::new(Mutex::new(Vec::new()));
    let answer = Arc::new(answer);
    let seen = events.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (answer, seen) = (answer.clone(), seen.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let (answer, seen) = (answer.clone(), seen.clone());
                    async move {
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let event: serde_json::Value =
                            serde_json::from_slice(&body).unwrap_or_default();
                        seen.lock().unwrap().push(event.clone());
                        tokio::time::sleep(delay).await;
                        let resp = match answer(&event) {
                            Some(v) => {
                                Response::new(http_body_util::Full::new(Bytes::from(v.to_string())))
                            }
                            None => {
                                let mut r = Response::new(http_body_util::Full::new(Bytes::new()));
                                *r.status_mut() = StatusCode::NO_CONTENT;
                                r
                            }
                        };
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    HookServer { url, events }
}

/// Wait until the proxy's session log has `n` request entries (written after responses).
pub async fn wait_for_requests(proxy: &ProxyHandle, session: &str, n: u64) -> serde_json::Value {
    for _ in 0..500 {
        let r = reqwest::get(format!("http://{}/sessions/{session}", proxy.admin_addr))
            .await
            .unwrap();
        if r.status() == 200 {
            let v: serde_json::Value = r.json().await.unwrap();
            if v["requests"].as_u64().unwrap_or(0) >= n {
                return v;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("session {session} never reached {n} requests");
}

/// The request entries of a session log (`GET /sessions/{id}`), in order.
pub fn request_entries(log: &serde_json::Value) -> Vec<&serde_json::Value> {
    log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "request")
        .collect()
}

/// The JSON answer to `request`.
pub async fn answer_of(request: reqwest::RequestBuilder) -> serde_json::Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// The sessions listed, once there are at least `n` (a second after, whatever there are).
pub async fn wait_for_sessions(proxy: &ProxyHandle, n: usize) -> Vec<serde_json::Value> {
    let mut listed = Vec::new();
    for _ in 0..100 {
        let v: serde_json::Value = reqwest::get(format!("http://{}/sessions", proxy.admin_addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        listed = v["sessions"].as_array().cloned().unwrap_or_default();
        if listed.len() >= n {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    listed
}

/// Send SIGTERM to a child, as a service manager stops cachet; the status of `kill`.
pub fn terminate(child: &std::process::Child) -> std::process::ExitStatus {
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
}

/// A `cachet serve` child process on port 0: its proxy and admin addresses, read from the
/// line it prints. `cmd` gets `serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0` first.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub addr: String,
    pub admin: String,
}

pub fn serve_process(configure: impl FnOnce(&mut std::process::Command)) -> ServeProcess {
    use std::io::BufRead;
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_cachet"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    // The default session store is relative (`./cachet-data/`): keep it out of the tree.
    .current_dir(tempfile::tempdir().unwrap().keep());
    configure(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "cachet listening on http://ADDR (admin: http://ADMIN/metrics)"
    let mut urls = line.split("http://").skip(1);
    let addr = urls
        .next()
        .unwrap_or_default()
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let admin = urls
        .next()
        .unwrap_or_default()
        .split('/')
        .next()
        .unwrap_or_default()
        .to_string();
    ServeProcess { child, addr, admin }
}

/// Write `request` as raw bytes (no client normalises the path, as `curl --path-as-is`)
/// and read the answer until the server closes the connection. Panics if that takes longer
/// than a generous bound.
pub async fn raw_exchange(addr: SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), exchange)
        .await
        .expect("the server answered and closed the connection")
}
