//! Memory sources: a file (read on every fetch, so edits show up), a notes folder ranked
//! against the latest user prompt, or an HTTP memory service.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{json, Value};

use super::notes::NotesIndex;

/// Default `top_k` of a notes source.
pub const DEFAULT_TOP_K: usize = 3;
/// Default time-out of a memory service.
pub const DEFAULT_URL_TIMEOUT_MS: u64 = 2000;

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
    notes: Mutex<Option<NotesIndex>>,
}

impl Source {
    pub fn new(spec: SourceSpec) -> Self {
        Source {
            spec,
            notes: Mutex::new(None),
        }
    }

    pub fn spec(&self) -> &SourceSpec {
        &self.spec
    }

    /// The content for `prompt` from a file or notes source, without I/O beyond the local
    /// disk. A `url` source answers [`SourceError::UrlOffline`].
    pub fn fetch_local(&self, prompt: &str) -> Result<String, SourceError> {
        match &self.spec {
            SourceSpec::File(path) => {
                std::fs::read_to_string(path).map_err(|error| SourceError::File {
                    path: path.clone(),
                    error,
                })
            }
            SourceSpec::Notes { dir, top_k } => {
                let mut guard = self.notes.lock().unwrap_or_else(|p| p.into_inner());
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

    /// The content for `prompt` in `session`. A memory service receives
    /// `POST {"prompt": ..., "session": ...}` and answers a text body or `{"text": ...}`.
    pub async fn fetch(
        &self,
        prompt: &str,
        session: &str,
        client: &reqwest::Client,
    ) -> Result<String, SourceError> {
        let SourceSpec::Url { url, timeout_ms } = &self.spec else {
            return self.fetch_local(prompt);
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

    #[test]
    fn answers_are_text_or_json_text() {
        assert_eq!(text_of_answer(r#"{"text":"remember"}"#), "remember");
        assert_eq!(text_of_answer("plain words"), "plain words");
        assert_eq!(text_of_answer(r#"{"other":1}"#), r#"{"other":1}"#);
    }
}
