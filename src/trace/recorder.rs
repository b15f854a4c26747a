//! Trace recording (`cachet serve --record DIR`): records go through a bounded channel to
//! one writer task, so the request path never waits on the disk. A full channel drops the
//! record and counts it (`cachet_trace_records_dropped_total{cause="queue_full"}`), as does a
//! failed write (`cause="write_failed"`). Files are one per UTC day:
//! `DIR/YYYY-MM-DD.jsonl`, appended to.
//!
//! Every request forwarded is recorded, also one answered with an error and one whose body
//! serde_json cannot read into a value (a lone `\ud800` escape, nesting deeper than 128):
//! that one keeps its bytes in `body_base64`, and replay skips it as a counted error.

use base64::Engine;
use http::HeaderMap;
use prometheus::IntCounter;
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use super::record::{Record, TRACE_VERSION};
use super::time::date_of;
use crate::route::Route;
use crate::secret::is_secret_header;

/// Records waiting for the writer before new ones are dropped.
pub const DEFAULT_QUEUE: usize = 1024;

/// A handle to the recording task; clones share it.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Record>,
    dropped: IntCounter,
    failed: IntCounter,
}

/// The writer task, to await at shutdown so every queued record is on disk.
pub struct RecorderTask {
    task: JoinHandle<()>,
    close: Arc<Notify>,
}

impl RecorderTask {
    /// Stop taking records and wait until every record queued so far is written. Senders
    /// may still be alive (the pipeline holds one until the process ends); what they send
    /// from now on is dropped and counted.
    pub async fn finish(self) {
        self.close.notify_one();
        let _ = self.task.await;
    }
}

impl Recorder {
    /// Start recording into `dir` (created if missing), from inside a tokio runtime.
    pub fn start(dir: &Path, queue: usize) -> std::io::Result<(Recorder, RecorderTask)> {
        let detached = || IntCounter::new("detached", "not exported").expect("valid counter");
        Self::start_counted(dir, queue, detached(), detached())
    }

    /// Start recording, counting lost records in `dropped` (queue full) and `failed`
    /// (write errors): the exported `cachet_trace_records_dropped_total` series.
    pub fn start_counted(
        dir: &Path,
        queue: usize,
        dropped: IntCounter,
        failed: IntCounter,
    ) -> std::io::Result<(Recorder, RecorderTask)> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| std::io::Error::other(format!("trace recorder: {e}")))?;
        std::fs::create_dir_all(dir)?;
        let (tx, rx) = mpsc::channel(queue.max(1));
        let close = Arc::new(Notify::new());
        let task = runtime.spawn(write_loop(
            dir.to_path_buf(),
            rx,
            close.clone(),
            failed.clone(),
        ));
        let recorder = Recorder {
            tx,
            dropped,
            failed,
        };
        Ok((recorder, RecorderTask { task, close }))
    }

    /// Queue a record without waiting; dropped (counted and logged) when the queue is full.
    pub fn record(&self, record: Record) {
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped.inc();
                tracing::warn!("trace record dropped: the trace writer fell behind");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.dropped.inc();
                tracing::warn!("trace record dropped: recording has stopped for shutdown");
            }
        }
    }

    /// Records dropped because the writer fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.get()
    }

    /// Records lost to write errors.
    pub fn failed(&self) -> u64 {
        self.failed.get()
    }
}

async fn write_loop(
    dir: PathBuf,
    mut rx: mpsc::Receiver<Record>,
    close: Arc<Notify>,
    failed: IntCounter,
) {
    let mut open: Option<(String, tokio::fs::File)> = None;
    let mut closing = false;
    loop {
        let record = tokio::select! {
            record = rx.recv() => record,
            // At shutdown: no new records, and the ones queued are still received below.
            _ = close.notified(), if !closing => {
                closing = true;
                rx.close();
                continue;
            }
        };
        let Some(record) = record else { break };
        let date = date_of(record.time_ms);
        if open.as_ref().is_none_or(|(d, _)| *d != date) {
            let path = dir.join(format!("{date}.jsonl"));
            match tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .await
            {
                Ok(file) => open = Some((date, file)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot open trace file");
                    failed.inc();
                    open = None;
                    continue;
                }
            }
        }
        let mut line = record.to_line();
        line.push('\n');
        if let Some((_, file)) = open.as_mut() {
            if let Err(e) = file.write_all(line.as_bytes()).await {
                tracing::warn!(error = %e, "cannot write trace record");
                failed.inc();
            }
        }
    }
    if let Some((_, mut file)) = open {
        let _ = file.flush().await;
    }
}

/// A record of one request as the client sent it, credentials removed; the pipeline sets
/// `usage` and `status` when the answer is in, then hands it to [`Recorder::record`].
/// `path` is the request path without its query (which may carry a key).
pub fn capture(
    time_ms: u64,
    session: &str,
    route: Route,
    path: &str,
    headers: &HeaderMap,
    body: &Value,
) -> Record {
    let mut body = body.clone();
    redact_body(&mut body);
    Record {
        v: TRACE_VERSION,
        time_ms,
        session: session.to_string(),
        provider: route.provider.label().to_string(),
        endpoint: route.endpoint.label().to_string(),
        path: path.split('?').next().unwrap_or("").to_string(),
        headers: recordable_headers(headers),
        body,
        body_text: None,
        body_base64: None,
        usage: None,
        status: None,
        response_id: None,
        output: None,
    }
}

/// Whether serde_json reads `body` as a value, as replay will read the trace: every string
/// decoded (a lone surrogate escape fails), nesting within its limit, but nothing kept, so
/// no `Value` of the body is built.
pub fn readable(body: &[u8]) -> bool {
    serde_json::from_slice::<Readable>(body).is_ok()
}

/// A JSON value read and let go of.
struct Readable;

impl<'de> serde::Deserialize<'de> for Readable {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Readable)
    }
}

impl<'de> serde::de::Visitor<'de> for Readable {
    type Value = Readable;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Readable, E> {
        Ok(Readable)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Readable, E> {
        Ok(Readable)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Readable, E> {
        Ok(Readable)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Readable, E> {
        Ok(Readable)
    }

    fn visit_str<E>(self, _: &str) -> Result<Readable, E> {
        Ok(Readable)
    }

    fn visit_unit<E>(self) -> Result<Readable, E> {
        Ok(Readable)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Readable, A::Error> {
        while seq.next_element::<Readable>()?.is_some() {}
        Ok(Readable)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Readable, A::Error> {
        while map.next_entry::<Readable, Readable>()?.is_some() {}
        Ok(Readable)
    }
}

/// [`capture`] of a body serde_json reads, kept as its JSON text rather than parsed: made
/// one line (its line breaks can only be white space between tokens), without the members
/// [`redact_body`] removes.
pub fn capture_text(
    time_ms: u64,
    session: &str,
    route: Route,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Record {
    let mut record = capture(time_ms, session, route, path, headers, &Value::Null);
    let mut text: Vec<u8> = body
        .iter()
        .map(|&c| if matches!(c, b'\n' | b'\r') { b' ' } else { c })
        .collect();
    crate::json_edit::retain_members(&mut text, |name| !is_secret_field(name));
    record.body_text = Some(bytes::Bytes::from(text));
    record
}

/// A record of a request whose body is not a JSON value serde_json can read: its bytes,
/// base64-encoded, in `body_base64` (`body` is null).
pub fn capture_raw(
    time_ms: u64,
    session: &str,
    route: Route,
    path: &str,
    headers: &HeaderMap,
    raw: &[u8],
) -> Record {
    let mut record = capture(time_ms, session, route, path, headers, &Value::Null);
    record.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(raw));
    record
}

/// Header names that look like credentials even if not in the known list.
fn looks_secret(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    is_secret_header(&n)
        || ["key", "token", "secret", "auth", "cookie", "password"]
            .iter()
            .any(|w| n.contains(w))
}

/// The headers a trace may keep: every header whose name is not a credential, values as
/// text (repeated headers joined by `, `).
pub fn recordable_headers(headers: &HeaderMap) -> Map<String, Value> {
    let mut out = Map::new();
    for name in headers.keys() {
        if looks_secret(name.as_str()) {
            continue;
        }
        let values: Vec<&str> = headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        out.insert(name.as_str().to_string(), Value::String(values.join(", ")));
    }
    out
}

/// Top-level body fields that carry credentials in some SDKs' requests.
const SECRET_BODY_FIELDS: &[&str] = &[
    "api_key",
    "apikey",
    "access_token",
    "authorization",
    "password",
    "secret",
];

/// Drop credential fields from a body before it is recorded, should a client send one.
pub fn redact_body(body: &mut Value) {
    if let Some(obj) = body.as_object_mut() {
        obj.retain(|k, _| !is_secret_field(k));
    }
}

/// A top-level body field a trace never keeps.
fn is_secret_field(name: &str) -> bool {
    SECRET_BODY_FIELDS.contains(&name.to_ascii_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shutdown finishes the writer while senders are still alive (the pipeline holds
    /// one until the process ends), and every record queued before is on disk. The guard
    /// is not a speed bound: it makes a writer that waits for the last sender fail
    /// instead of hanging.
    #[test]
    fn finish_writes_what_was_queued_without_waiting_for_every_sender() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async {
                let (recorder, task) = Recorder::start(&path, 8).unwrap();
                let route = Route {
                    provider: crate::route::Provider::Anthropic,
                    endpoint: crate::route::Endpoint::Messages,
                };
                let body = serde_json::json!({"model": "m", "max_tokens": 5});
                for i in 0..3 {
                    let record = capture(i, "s", route, "/v1/messages", &HeaderMap::new(), &body);
                    recorder.record(record);
                }
                task.finish().await;
                let _ = tx.send(());
                drop(recorder);
            });
        });
        if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
            panic!("the trace writer waited for a sender that lives until the process ends");
        }
        let written: usize = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|f| {
                std::fs::read_to_string(f.unwrap().path())
                    .unwrap()
                    .lines()
                    .count()
            })
            .sum();
        assert_eq!(written, 3);
    }

    /// `readable` answers as a parse into a `Value` does, on what serde_json refuses only
    /// once it decodes a string or counts the nesting.
    #[test]
    fn readable_is_what_a_value_reads() {
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        let cases: [&[u8]; 11] = [
            br#"{"a":"\ud800"}"#,
            br#"{"a":"\ud83d\ude00","b":[1,2.5e3,null,true]}"#,
            br#"{"\ud800":1}"#,
            br#"{"a":"\x"}"#,
            b"{\"a\":\"\xff\"}",
            br#"{"a":1} x"#,
            br#"{"a":1,"a":2}"#,
            deep.as_bytes(),
            b"[1e400]",
            b"",
            b"  {\n\"a\" :\t[ ]}  ",
        ];
        for case in cases {
            assert_eq!(
                readable(case),
                serde_json::from_slice::<Value>(case).is_ok(),
                "{}",
                String::from_utf8_lossy(case)
            );
        }
    }

    /// A recorded body is held as its text, about its own size, where a `Value` of a long
    /// history (what the recorder held before) is several times the body.
    #[test]
    fn a_captured_body_is_held_as_its_text() {
        let route = Route {
            provider: crate::route::Provider::Anthropic,
            endpoint: crate::route::Endpoint::Messages,
        };
        let messages: Vec<Value> = (0..2_000)
            .map(|i| serde_json::json!({"role": "user", "content": [{"type": "text", "text": format!("step {i}")}]}))
            .collect();
        let body =
            serde_json::to_vec(&serde_json::json!({"model": "m", "messages": messages})).unwrap();
        let h = HeaderMap::new();
        let (text, held) =
            crate::alloc_meter::kept_by(|| capture_text(0, "s", route, "/v1/messages", &h, &body));
        let (value, held_as_value) = crate::alloc_meter::kept_by(|| {
            let parsed: Value = serde_json::from_slice(&body).unwrap();
            capture(0, "s", route, "/v1/messages", &h, &parsed)
        });
        assert!(
            held < body.len() + 4096,
            "{held} bytes for a {}-byte body",
            body.len()
        );
        assert!(held_as_value > 3 * held, "{held_as_value} against {held}");
        let (a, b): (Record, Record) = (
            serde_json::from_str(&text.to_line()).unwrap(),
            serde_json::from_str(&value.to_line()).unwrap(),
        );
        assert_eq!(a, b, "the same record either way");
    }

    /// Whether a stored answer's output is kept reads the same from the body's text as from a
    /// `Value` of it.
    #[test]
    fn a_continued_answer_is_told_from_the_text_as_from_a_value() {
        let responses = Route {
            provider: crate::route::Provider::OpenAi,
            endpoint: crate::route::Endpoint::Responses,
        };
        let h = HeaderMap::new();
        for body in [
            r#"{"model":"gpt-5","input":"hi"}"#,
            r#"{"model":"gpt-5","input":"hi","store":false}"#,
            r#"{"model":"gpt-5","input":"hi", "store" : true}"#,
            r#"{"model":"gpt-5","input":"hi","store":false,"conversation":"conv_1"}"#,
            r#"{"model":"gpt-5","input":"hi","store":false,"conversation":{"id":"conv_2"}}"#,
            r#"{"model":"gpt-5","input":"hi","store":false,"conversation":{"id":" "}}"#,
        ] {
            let text = capture_text(0, "s", responses, "/v1/responses", &h, body.as_bytes());
            let value: Value = serde_json::from_str(body).unwrap();
            let parsed = capture(0, "s", responses, "/v1/responses", &h, &value);
            assert_eq!(text.may_be_continued(), parsed.may_be_continued(), "{body}");
        }
    }

    #[test]
    fn starting_outside_a_runtime_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = Recorder::start(dir.path(), 4).err().unwrap();
        assert!(err.to_string().contains("trace recorder"), "{err}");
    }

    #[test]
    fn credentials_are_never_kept() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer sk-secret".parse().unwrap());
        h.insert("x-api-key", "sk-ant-secret".parse().unwrap());
        h.insert("x-custom-token", "t0k".parse().unwrap());
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let kept = recordable_headers(&h);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(kept["anthropic-version"], "2023-06-01");
        let body = serde_json::json!({"model": "m", "api_key": "sk", "max_tokens": 5});
        let route = Route {
            provider: crate::route::Provider::Anthropic,
            endpoint: crate::route::Endpoint::Messages,
        };
        let r = capture(0, "s", route, "/v1/messages?key=sk-123", &h, &body);
        assert_eq!(r.body, serde_json::json!({"model": "m", "max_tokens": 5}));
        assert_eq!(
            (r.provider.as_str(), r.endpoint.as_str()),
            ("anthropic", "messages")
        );
        assert_eq!(r.path, "/v1/messages");
        assert!(!r.to_line().contains("sk-"));
        let text = "{\"model\": \"m\",\n \"API_KEY\": \"sk\", \"max_tokens\": 5}";
        let r = capture_text(0, "s", route, "/v1/messages", &h, text.as_bytes());
        let line = r.to_line();
        assert!(!line.contains("sk") && !line.contains('\n'), "{line}");
        let read: Record = serde_json::from_str(&line).unwrap();
        assert_eq!(
            read.body,
            serde_json::json!({"model": "m", "max_tokens": 5})
        );
        assert!(
            line.contains(r#""body":{"model": "m",  "max_tokens": 5}"#),
            "{line}"
        );
    }
}
