//! The trace format: JSONL, one request per line, as the client sent it (see
//! the README for the field list).

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::time::{format_rfc3339, parse_rfc3339};
use crate::route::Endpoint;
use crate::usage::Usage;

/// The version written in every record's `v`.
pub const TRACE_VERSION: u32 = 1;

/// One recorded request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub v: u32,
    /// When cachet received the request, in milliseconds since the epoch. Written as
    /// RFC 3339; read from RFC 3339 or a number of seconds (fractions allowed).
    #[serde(
        rename = "time",
        serialize_with = "write_time",
        deserialize_with = "read_time"
    )]
    pub time_ms: u64,
    pub session: String,
    /// `anthropic` | `openai`.
    pub provider: String,
    /// `messages` | `chat` | `responses`.
    pub endpoint: String,
    pub path: String,
    /// Non-secret request headers (lower-case names).
    #[serde(default)]
    pub headers: Map<String, Value>,
    /// The request body as the client sent it (`null` when it is in `body_base64`, or in
    /// `body_text` until the record is written).
    #[serde(default)]
    pub body: Value,
    /// The body as its JSON text, as the recorder captures it (on one line, credentials
    /// removed), never parsed on the request path: written in `body`'s place. A record read
    /// back has its body in `body`.
    #[serde(skip)]
    pub body_text: Option<bytes::Bytes>,
    /// A body that is not a JSON value serde_json can read (invalid JSON sent unchecked, a
    /// lone surrogate escape, nesting deeper than 128), as base64 of its bytes. Replay skips
    /// such records as errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// The usage the provider returned, normalised; `null` when none was seen.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The upstream's HTTP status; `null` when the request never got one.
    #[serde(default)]
    pub status: Option<u16>,
    /// The answer's id, when the response named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// A Responses answer's output items, when a later request may read them from the
    /// provider: the answer is stored (`store` not `false`) or added to a conversation.
    /// Replay puts them before the input of the request that continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
}

/// Whether a later request may continue the answer to a request of `endpoint` with JSON
/// body `text`, from what the provider holds (read without parsing the body).
pub fn may_be_continued(endpoint: Endpoint, text: &[u8]) -> bool {
    use crate::providers::openai_responses::{conversation_id, stores_answer};
    if endpoint != Endpoint::Responses {
        return false;
    }
    let start = crate::json::scan::skip_ws(text, 0);
    let field = |name| crate::json::scan::field(text, start, name);
    stores_answer(field("store").map(|s| &text[s]))
        || field("conversation").is_some_and(|s| conversation_id(&text[s]).is_some())
}

impl Record {
    /// Whether a later request may continue this one's answer from what the provider
    /// holds: a Responses answer stored, or added to the conversation the request names.
    pub fn may_be_continued(&self) -> bool {
        use crate::providers::openai_responses::{conversation_of, stores_answer_of};
        match &self.body_text {
            Some(text) => may_be_continued(self.endpoint(), text),
            None => {
                self.endpoint() == Endpoint::Responses
                    && (stores_answer_of(&self.body) || conversation_of(&self.body).is_some())
            }
        }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::from_label(&self.endpoint)
    }

    /// The model the recorded path names, where the route names it there (Bedrock,
    /// Vertex): the body names none.
    pub fn path_model(&self) -> Option<String> {
        crate::providers::model_in_path(self.endpoint(), self.path.split('?').next()?)
    }

    pub fn provider(&self) -> crate::route::Provider {
        crate::route::Provider::ALL
            .into_iter()
            .find(|p| p.label() == self.provider)
            .unwrap_or(crate::route::Provider::OpenAi)
    }

    /// One JSONL line (without the newline).
    pub fn to_line(&self) -> String {
        // A record holds only JSON values and numbers; serialising it cannot fail.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        if let Some(text) = &self.body_text {
            crate::json_edit::set_member(&mut line, "body", text);
        }
        // Serialised JSON and a body serde_json read are UTF-8.
        String::from_utf8(line).unwrap_or_default()
    }
}

fn write_time<S: Serializer>(ms: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_rfc3339(*ms))
}

fn read_time<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::String(s) => {
            parse_rfc3339(&s).ok_or_else(|| D::Error::custom(format!("time `{s}` is not RFC 3339")))
        }
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            .map(|f| (f * 1000.0).round() as u64)
            .ok_or_else(|| D::Error::custom("time must be a non-negative number of seconds")),
        _ => Err(D::Error::custom(
            "time must be RFC 3339 or seconds since the epoch",
        )),
    }
}

/// Parse one JSONL text; blank lines are skipped, a bad line is an error naming it.
pub fn parse_jsonl(text: &str, origin: &str) -> anyhow::Result<Vec<Record>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(line)
            .with_context(|| format!("{origin}:{}: not a trace record", n + 1))?;
        if record.v != TRACE_VERSION {
            anyhow::bail!(
                "{origin}:{}: trace version {} is not supported (expected {TRACE_VERSION})",
                n + 1,
                record.v
            );
        }
        out.push(record);
    }
    Ok(out)
}

/// Every record of `paths` (files, or folders whose `*.jsonl` and `*.jsonl.gz` files are
/// read), sorted by time; records with the same time keep their file order. A file whose
/// name ends in `.gz` is gzip-compressed.
pub fn read_traces(paths: &[PathBuf]) -> anyhow::Result<Vec<Record>> {
    let mut out = Vec::new();
    for path in paths {
        for file in expand(path)? {
            let text =
                read_text(&file).with_context(|| format!("reading trace {}", file.display()))?;
            out.extend(parse_jsonl(&text, &file.display().to_string())?);
        }
    }
    out.sort_by_key(|r| r.time_ms);
    Ok(out)
}

fn read_text(file: &Path) -> std::io::Result<String> {
    if file.extension().is_some_and(|e| e == "gz") {
        use std::io::Read;
        let mut text = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(file)?).read_to_string(&mut text)?;
        return Ok(text);
    }
    std::fs::read_to_string(file)
}

fn expand(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading trace folder {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default();
            name.ends_with(".jsonl") || name.ends_with(".jsonl.gz")
        })
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_time_forms_and_sorts() {
        let text = concat!(
            r#"{"v":1,"time":"2026-01-15T09:00:01Z","session":"s","provider":"anthropic","endpoint":"messages","path":"/v1/messages","body":{},"usage":null,"status":200}"#,
            "\n\n",
            r#"{"v":1,"time":1768467600.5,"session":"s","provider":"anthropic","endpoint":"messages","path":"/v1/messages","body":{}}"#,
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, text).unwrap();
        let records = read_traces(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(
            records.iter().map(|r| r.time_ms).collect::<Vec<_>>(),
            [1_768_467_600_500, 1_768_467_601_000]
        );
        assert_eq!(records[0].endpoint(), Endpoint::Messages);
        let back = parse_jsonl(&records[1].to_line(), "x").unwrap();
        assert_eq!(back[0], records[1]);
    }

    #[test]
    fn gzip_traces_are_read_like_plain_ones() {
        use std::io::Write;
        let line = r#"{"v":1,"time":"2026-01-15T09:00:01Z","session":"s","provider":"anthropic","endpoint":"messages","path":"/v1/messages","body":{}}"#;
        let dir = tempfile::tempdir().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(line.as_bytes()).unwrap();
        std::fs::write(dir.path().join("a.jsonl.gz"), gz.finish().unwrap()).unwrap();
        std::fs::write(dir.path().join("b.jsonl"), line).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a trace").unwrap();
        let records = read_traces(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0], records[1]);
    }

    #[test]
    fn bad_lines_are_named() {
        let err = parse_jsonl("{}\n", "trace.jsonl").unwrap_err().to_string();
        assert!(err.contains("trace.jsonl:1"), "{err}");
        let err = parse_jsonl(
            r#"{"v":2,"time":0,"session":"s","provider":"p","endpoint":"e","path":"/","body":{}}"#,
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("version 2"), "{err}");
    }
}
