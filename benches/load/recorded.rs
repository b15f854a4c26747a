//! What the drivers build agent sessions from: real clients' requests (the recorded traces
//! of `tests/data/traces/`, the fixtures of `tests/data/clients/`) and this repository's
//! source files (what the agents' tools read). Each benchmark uses a part of it.
#![allow(dead_code)]

use std::io::Read;

use serde_json::Value;

pub fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Record `index` of a recorded trace: (headers, body).
pub fn trace_record(file: &str, index: usize) -> (Value, Value) {
    let raw = std::fs::File::open(root().join("tests/data/traces").join(file)).unwrap();
    let mut text = String::new();
    flate2::read::GzDecoder::new(raw)
        .read_to_string(&mut text)
        .unwrap();
    let line = text.lines().nth(index).unwrap();
    let mut record: Value = serde_json::from_str(line).unwrap();
    (record["headers"].take(), record["body"].take())
}

/// A client request fixture of `tests/data/clients/`.
pub fn fixture(file: &str) -> Value {
    let text = std::fs::read_to_string(root().join("tests/data/clients").join(file)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `cache_control` removed everywhere in `v`.
pub fn strip_markers(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.shift_remove("cache_control");
            map.values_mut().for_each(strip_markers);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_markers),
        _ => {}
    }
}

/// This repository's source files: what the agents' tools read.
pub struct Corpus {
    files: Vec<String>,
}

impl Corpus {
    pub fn load() -> Corpus {
        let mut files = Vec::new();
        let mut dirs = vec![root().join("src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        files.sort();
        Corpus { files }
    }

    /// A slice of about `want` bytes (less when the file is shorter) for step `n`: which
    /// file and where in it are set by `n`.
    pub fn slice(&self, n: u64, want: usize) -> String {
        let x = mix(n);
        let file = &self.files[(x % self.files.len() as u64) as usize];
        let start = (x >> 20) as usize % file.len().max(1);
        let mut start = start.min(file.len().saturating_sub(want));
        while !file.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (start + want).min(file.len());
        while !file.is_char_boundary(end) {
            end -= 1;
        }
        file[start..end].to_string()
    }

    /// Exactly `bytes` bytes of source for step `n`: slices of files one after the other.
    pub fn text(&self, n: u64, bytes: usize) -> String {
        let mut out = String::with_capacity(bytes + 8);
        let mut k = 0;
        while out.len() < bytes {
            let piece = self.slice(n.wrapping_mul(31).wrapping_add(k), bytes - out.len());
            // A piece cut to nothing at a character's boundary: a space instead.
            out.push_str(if piece.is_empty() { " " } else { &piece });
            k += 1;
        }
        let mut end = bytes.min(out.len());
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out
    }
}

/// A well-spread hash of `v`.
pub fn mix(v: u64) -> u64 {
    let x = v.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ 0x5851_F42D;
    x ^ (x >> 29)
}
