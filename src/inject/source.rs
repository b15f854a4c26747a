//! Memory sources: a file (read on every fetch, so edits show up), a notes folder ranked
//! against the latest user prompt, or an HTTP memory service.
//!
//! File and notes fetches read the disk (and may rebuild the notes index), so on the proxy
//! they run on the blocking pool, never on a worker thread that serves other requests.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::notes::NotesIndex;

/// Default `top_k` of a notes source.
pub const DEFAULT_TOP_K: usize = 3;
/// Default time-out of a memory service.
pub const DEFAULT_URL_TIMEOUT_MS: u64 = 2000;
/// The most of a prompt a source is asked about; see [`query_of`].
pub const QUERY_MAX_BYTES: usize = 16 * 1024;

/// Where injected content comes from, as a policy's `[[inject]] source` declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    File(PathBuf),
    Notes { dir: PathBuf, top_k: usize },
    Url { url: String, timeout_ms: u64 },
}

/// Why a source gave nothing; the request then goes out without the injection.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("memory file {path}: {error}")]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("notes folder {dir}: {error}")]
    Notes { dir: PathBuf, error: std::io::Error },
    #[error("memory service {url}: {message}")]
    Url { url: String, message: String },
    #[error(
        "memory service sources need the live proxy; offline replay reads only files and notes"
    )]
    UrlOffline,
}

/// A source with the state it keeps between fetches (the notes index).
pub struct Source {
    spec: SourceSpec,
    notes: Arc<Mutex<Option<NotesIndex>>>,
}

impl Source {
    pub fn new(spec: SourceSpec) -> Self {
        Source {
            spec,
            notes: Arc::default(),
        }
    }

    pub fn spec(&self) -> &SourceSpec {
        &self.spec
    }

    /// The content for `prompt` from a file or notes source, without I/O beyond the local
    /// disk. A `url` source answers [`SourceError::UrlOffline`].
    pub fn fetch_local(&self, prompt: &str) -> Result<String, SourceError> {
        fetch_local(&self.spec, &self.notes, &query_of(prompt))
    }

    /// [`Source::fetch_local`] on the blocking pool (a runtime's worker thread stays free
    /// while the disk is read or the index rebuilt).
    async fn fetch_local_blocking(&self, prompt: &str) -> Result<String, SourceError> {
        let (spec, notes, prompt) = (self.spec.clone(), self.notes.clone(), prompt.to_string());
        match tokio::task::spawn_blocking(move || fetch_local(&spec, &notes, &prompt)).await {
            Ok(result) => result,
            // The task panicked or the runtime is shutting down: the turn goes without.
            Err(e) => Err(match &self.spec {
                SourceSpec::File(path) => SourceError::File {
                    path: path.clone(),
                    error: std::io::Error::other(e.to_string()),
                },
                SourceSpec::Notes { dir, .. } => SourceError::Notes {
                    dir: dir.clone(),
                    error: std::io::Error::other(e.to_string()),
                },
                SourceSpec::Url { .. } => SourceError::UrlOffline,
            }),
        }
    }

    /// The content for `prompt` in `session`. A memory service receives
    /// `POST {"prompt": ..., "session": ...}` and answers a text body or `{"text": ...}`.
    pub async fn fetch(
        &self,
        prompt: &str,
        session: &str,
        client: &reqwest::Client,
    ) -> Result<String, SourceError> {
        let query = query_of(prompt);
        let prompt: &str = &query;
        let SourceSpec::Url { url, timeout_ms } = &self.spec else {
            return self.fetch_local_blocking(prompt).await;
        };
        let fail = |message: String| SourceError::Url {
            url: url.clone(),
            message,
        };
        let response = client
            .post(url)
            .timeout(Duration::from_millis(*timeout_ms))
            .json(&json!({"prompt": prompt, "session": session}))
            .send()
            .await
            .map_err(|e| fail(describe(e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(fail(format!("answered {status}")));
        }
        let body = response.text().await.map_err(|e| fail(describe(e)))?;
        Ok(text_of_answer(&body))
    }
}

/// What a source is asked about: the prompt, or for one longer than [`QUERY_MAX_BYTES`]
/// (a pasted file or log) its first and last halves of that, joined by a line `…`. The
/// question is usually at one end of such a prompt; ranking notes against all of it costs
/// time in proportion to its length (3.5 s for a 28 MB prompt), and a memory service has no
/// use for megabytes of pasted log either.
pub fn query_of(prompt: &str) -> std::borrow::Cow<'_, str> {
    if prompt.len() <= QUERY_MAX_BYTES {
        return prompt.into();
    }
    let half = QUERY_MAX_BYTES / 2;
    let mut head = half;
    while !prompt.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = prompt.len() - half;
    while !prompt.is_char_boundary(tail) {
        tail += 1;
    }
    let elided = crate::json::scan::ELIDED;
    format!("{}{elided}{}", &prompt[..head], &prompt[tail..]).into()
}

/// A file or notes fetch (a `url` source answers [`SourceError::UrlOffline`]).
fn fetch_local(
    spec: &SourceSpec,
    notes: &Mutex<Option<NotesIndex>>,
    prompt: &str,
) -> Result<String, SourceError> {
    match spec {
        SourceSpec::File(path) => {
            std::fs::read_to_string(path).map_err(|error| SourceError::File {
                path: path.clone(),
                error,
            })
        }
        SourceSpec::Notes { dir, top_k } => {
            let mut guard = notes.lock().unwrap_or_else(|p| p.into_inner());
            if guard.as_ref().is_none_or(NotesIndex::is_stale) {
                let index = NotesIndex::build(dir).map_err(|error| SourceError::Notes {
                    dir: dir.clone(),
                    error,
                })?;
                *guard = Some(index);
            }
            Ok(guard
                .as_ref()
                .map(|index| index.retrieve(prompt, *top_k))
                .unwrap_or_default())
        }
        SourceSpec::Url { .. } => Err(SourceError::UrlOffline),
    }
}

/// `{"text": ...}` gives its text; anything else is the text itself.
fn text_of_answer(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(o)) => match o.get("text") {
            Some(Value::String(s)) => s.clone(),
            _ => body.to_string(),
        },
        _ => body.to_string(),
    }
}

/// A reqwest error without its URL's query (which could carry a token).
fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "timed out".into()
    } else if e.is_connect() {
        "connection failed".into()
    } else {
        e.without_url().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_query_is_cut_on_character_boundaries() {
        // One ASCII byte, then two-byte characters: both cuts fall inside a character.
        let prompt = format!("a{}z", "é".repeat(QUERY_MAX_BYTES));
        let query = query_of(&prompt);
        assert!(query.len() <= QUERY_MAX_BYTES + "\n…\n".len());
        assert!(query.starts_with("aé") && query.ends_with("éz"));
        assert!(query.contains("\n…\n"));
        let short = "é".repeat(QUERY_MAX_BYTES / 2);
        assert!(matches!(query_of(&short), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn file_is_read_on_every_fetch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memory.md");
        std::fs::write(&path, "v1").unwrap();
        let source = Source::new(SourceSpec::File(path.clone()));
        assert_eq!(source.fetch_local("anything").unwrap(), "v1");
        std::fs::write(&path, "v2").unwrap();
        assert_eq!(source.fetch_local("anything").unwrap(), "v2");
        std::fs::remove_file(&path).unwrap();
        let err = source.fetch_local("x").unwrap_err().to_string();
        assert!(err.contains("memory.md"), "{err}");
    }

    #[test]
    fn notes_reindex_when_the_folder_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.md"),
            "# Pool\nthe pool holds 16 connections\n",
        )
        .unwrap();
        let source = Source::new(SourceSpec::Notes {
            dir: dir.path().to_path_buf(),
            top_k: 1,
        });
        assert!(source.fetch_local("pool size").unwrap().contains("16"));
        std::fs::write(
            dir.path().join("b.md"),
            "# Flags\nfeature flags live in flags.toml\n",
        )
        .unwrap();
        assert!(source
            .fetch_local("feature flags")
            .unwrap()
            .contains("flags.toml"));
    }

    /// A memory file whose read blocks (a FIFO nobody has opened for writing yet) must
    /// leave the runtime's thread free: here the writer is a task on the same
    /// single-threaded runtime, and it runs only if the read went to the blocking pool.
    #[test]
    fn a_blocked_file_read_leaves_the_runtime_thread_free() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("memory.fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the file.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let source = Source::new(SourceSpec::File(fifo.clone()));
        let (tx, rx) = std::sync::mpsc::channel();
        let writer_path = fifo.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let client = reqwest::Client::new();
            let text = rt.block_on(async {
                let write = async {
                    tokio::task::yield_now().await;
                    // Opening the write end waits for the reader: on the blocking pool.
                    let _ = tokio::task::spawn_blocking(move || {
                        std::fs::write(writer_path, "remember the pool size")
                    })
                    .await;
                };
                tokio::join!(source.fetch("pool", "s1", &client), write).0
            });
            let _ = tx.send(text.map_err(|e| e.to_string()));
        });
        // Not a speed bound: only a guard so that the old behaviour fails instead of hanging.
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(text) => assert_eq!(text.unwrap(), "remember the pool size"),
            Err(_) => {
                let _ = std::fs::write(&fifo, "unblock");
                panic!("reading the memory file held the runtime's only thread");
            }
        }
    }

    #[test]
    fn answers_are_text_or_json_text() {
        assert_eq!(text_of_answer(r#"{"text":"remember"}"#), "remember");
        assert_eq!(text_of_answer("plain words"), "plain words");
        assert_eq!(text_of_answer(r#"{"other":1}"#), r#"{"other":1}"#);
    }
}
