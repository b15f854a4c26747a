//! The built-in retriever: a folder of markdown notes, cut into chunks at headings and
//! ranked with BM25 against the latest user prompt.
//!
//! Results are deterministic: ties in score are broken by chunk id (file path, then the
//! chunk's position), so the same prompt over the same notes always yields the same bytes —
//! which is what keeps a pinned injection byte-identical and a cache prefix stable.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bm25::{Document, Language, SearchEngine, SearchEngineBuilder};

/// One retrievable piece of a note: a heading and the text under it (or a whole file
/// without headings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// `relative/path.md#N`, N counting chunks of the file from 0.
    pub id: String,
    pub text: String,
}

/// An index over a notes folder, with the fingerprint of the files it was built from.
pub struct NotesIndex {
    dir: PathBuf,
    fingerprint: Vec<(PathBuf, u64, Option<SystemTime>)>,
    chunks: Vec<Chunk>,
    engine: SearchEngine<usize>,
}

impl NotesIndex {
    /// Read every `*.md` file under `dir` (recursively) and index its chunks.
    pub fn build(dir: &Path) -> std::io::Result<Self> {
        let fingerprint = fingerprint(dir)?;
        let mut chunks = Vec::new();
        for (path, _, _) in &fingerprint {
            let text = std::fs::read_to_string(path)?;
            let rel = path.strip_prefix(dir).unwrap_or(path).to_string_lossy();
            for (n, piece) in split_at_headings(&text).into_iter().enumerate() {
                chunks.push(Chunk {
                    id: format!("{rel}#{n}"),
                    text: piece,
                });
            }
        }
        let docs = chunks.iter().enumerate().map(|(i, c)| Document {
            id: i,
            contents: c.text.clone(),
        });
        let engine = SearchEngineBuilder::<usize>::with_documents(Language::English, docs).build();
        Ok(NotesIndex {
            dir: dir.to_path_buf(),
            fingerprint,
            chunks,
            engine,
        })
    }

    /// Whether the folder changed (files added, removed, resized or touched) since `build`.
    pub fn is_stale(&self) -> bool {
        fingerprint(&self.dir).map_or(true, |f| f != self.fingerprint)
    }

    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// The `top_k` best chunks for `query`, best first; chunks that share no term with the
    /// query are never returned.
    pub fn search(&self, query: &str, top_k: usize) -> Vec<&Chunk> {
        let mut hits: Vec<(f32, usize)> = self
            .engine
            .search(query, None)
            .into_iter()
            .filter(|r| r.score > 0.0)
            .map(|r| (r.score, r.document.id))
            .collect();
        hits.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        hits.into_iter()
            .take(top_k)
            .filter_map(|(_, i)| self.chunks.get(i))
            .collect()
    }

    /// The retrieved chunks joined into the text to inject ("" when nothing matched).
    pub fn retrieve(&self, query: &str, top_k: usize) -> String {
        self.search(query, top_k)
            .iter()
            .map(|c| c.text.trim_end())
            .collect::<Vec<_>>()
            .join("\n\n")
    }
}

/// Markdown files under `dir`, sorted, with size and modification time.
fn fingerprint(dir: &Path) -> std::io::Result<Vec<(PathBuf, u64, Option<SystemTime>)>> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let path = entry.path();
            let meta = entry.metadata()?;
            if meta.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push((path, meta.len(), meta.modified().ok()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Cut a note at lines starting with `#`; text before the first heading is its own chunk.
fn split_at_headings(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if !in_fence && line.starts_with('#') && !current.trim().is_empty() {
            pieces.push(std::mem::take(&mut current));
        }
        current.push_str(line);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        pieces.push(current);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("db.md"),
            "# Migrations\nRun sqlx migrate before tests.\n\n# Pooling\nThe pool holds 16 connections.\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("retry.md"),
            "Retries use exponential backoff with jitter.\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("ignored.txt"), "backoff backoff").unwrap();
        dir
    }

    #[test]
    fn chunks_by_heading_and_ranks_by_bm25() {
        let dir = folder();
        let index = NotesIndex::build(dir.path()).unwrap();
        let ids: Vec<_> = index.chunks().iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["db.md#0", "db.md#1", "retry.md#0"]);
        let hits = index.search("how many connections does the pool hold", 2);
        assert_eq!(hits[0].id, "db.md#1");
        assert_eq!(
            index.retrieve("backoff for retries", 3),
            "Retries use exponential backoff with jitter."
        );
        assert_eq!(index.retrieve("zebra", 3), "");
    }

    #[test]
    fn notices_edits() {
        let dir = folder();
        let index = NotesIndex::build(dir.path()).unwrap();
        assert!(!index.is_stale());
        std::fs::write(dir.path().join("new.md"), "# New\nfresh note\n").unwrap();
        assert!(index.is_stale());
    }

    #[test]
    fn headings_inside_code_fences_do_not_split() {
        let pieces = split_at_headings("# A\n```sh\n# comment\n```\n# B\nb\n");
        assert_eq!(pieces.len(), 2);
        assert!(pieces[0].contains("# comment"));
    }
}
