//! The repository's documentation as the docs tests read it: the Markdown files (README.md,
//! BENCHMARKS.md, the book under docs/src/) and their fenced blocks, each with the tags of
//! its info string (```` ```sh check=cli ````).

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One fenced block: where it is, its language, the tags after the language, its text.
#[derive(Debug, Clone)]
pub struct Block {
    /// Relative to the repository, e.g. `docs/src/agents.md`.
    pub file: String,
    /// 1-based line of the opening fence.
    pub line: usize,
    pub lang: String,
    pub tags: Vec<String>,
    /// The lines between the fences, each ending with `\n`.
    pub text: String,
}

impl Block {
    /// The value of a `key=value` tag.
    pub fn tag(&self, key: &str) -> Option<&str> {
        self.tags
            .iter()
            .find_map(|t| t.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    }

    /// `check=KIND[:ARG]` as (KIND, ARG).
    pub fn check(&self) -> Option<(&str, Option<&str>)> {
        let value = self.tag("check")?;
        Some(match value.split_once(':') {
            Some((kind, arg)) => (kind, Some(arg)),
            None => (value, None),
        })
    }

    /// `file:line` for messages.
    pub fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// Every documentation file: the README, BENCHMARKS.md and each page of the book.
pub fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_string(), "BENCHMARKS.md".to_string()];
    let mut pages = Vec::new();
    collect_md(&root().join("docs/src"), &mut pages);
    pages.sort();
    files.extend(pages.iter().map(|p| relative(p)));
    files
}

/// The pages of the book only.
pub fn book_pages() -> Vec<String> {
    doc_files()
        .into_iter()
        .filter(|f| f.starts_with("docs/src/"))
        .collect()
}

fn collect_md(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_md(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

pub fn read(file: &str) -> String {
    std::fs::read_to_string(root().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The rows of the Markdown table under the header line `header` in `file`: the name in
/// backticks of each row's first cell, and its other cells, trimmed.
pub fn table(file: &str, header: &str) -> Vec<(String, Vec<String>)> {
    let page = read(file);
    let start = page
        .find(header)
        .unwrap_or_else(|| panic!("{file}: no table `{header}`"));
    page[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|line| {
            let cells: Vec<String> = line.split('|').map(|c| c.trim().to_string()).collect();
            let name = cells[1]
                .split('`')
                .nth(1)
                .unwrap_or_else(|| panic!("{file}: no name in `{line}`"))
                .to_string();
            (name, cells[2..cells.len() - 1].to_vec())
        })
        .collect()
}

/// The fenced blocks of one file.
pub fn blocks(file: &str) -> Vec<Block> {
    let text = read(file);
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        match open.as_mut() {
            None => {
                if let Some(info) = line.strip_prefix("```") {
                    let mut words = info.split_whitespace();
                    open = Some(Block {
                        file: file.to_string(),
                        line: i + 1,
                        lang: words.next().unwrap_or("").to_string(),
                        tags: words.map(str::to_string).collect(),
                        text: String::new(),
                    });
                }
            }
            Some(block) => {
                if line == "```" {
                    out.push(open.take().unwrap());
                } else {
                    block.text.push_str(line);
                    block.text.push('\n');
                }
            }
        }
    }
    assert!(open.is_none(), "{file}: a fenced block is never closed");
    out
}

/// Every fenced block of every documentation file.
pub fn all_blocks() -> Vec<Block> {
    doc_files().iter().flat_map(|f| blocks(f)).collect()
}

/// The blocks whose `check` is `kind`.
pub fn blocks_checked(kind: &str) -> Vec<Block> {
    all_blocks()
        .into_iter()
        .filter(|b| b.check().is_some_and(|(k, _)| k == kind))
        .collect()
}

/// A file's text outside fenced blocks, line by line (1-based numbers).
pub fn prose(file: &str) -> Vec<(usize, String)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (i, line) in read(file).lines().enumerate() {
        if line.starts_with("```") {
            fence = !fence;
            continue;
        }
        if !fence {
            out.push((i + 1, line.to_string()));
        }
    }
    out
}

/// The region of `file` between a `docs: NAME` marker line and the next `docs: end`,
/// with the marker's own indentation taken off every line.
pub fn region(file: &str, name: &str) -> String {
    let text = read(file);
    let mut lines = text.lines();
    let marker = lines
        .by_ref()
        .find(|l| l.trim_end().ends_with(&format!("docs: {name}")))
        .unwrap_or_else(|| panic!("{file}: no region `docs: {name}`"));
    let indent = marker.len() - marker.trim_start().len();
    let mut out = String::new();
    for line in lines {
        if line.trim_end().ends_with("docs: end") {
            return out;
        }
        let pad = &marker[..indent];
        out.push_str(line.strip_prefix(pad).unwrap_or(line));
        out.push('\n');
    }
    panic!("{file}: region `docs: {name}` has no `docs: end`")
}

/// Split a command line as a POSIX shell would into words (quotes and backslashes; no
/// expansion). `None` for an unbalanced quote.
pub fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next()?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Some(words)
}

/// The commands of a shell block: continuation lines joined, comments and blank lines
/// dropped, and each line cut at `&&`, `;`, `|` and a trailing `&`.
pub fn shell_commands(text: &str) -> Vec<String> {
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim_end();
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                joined.push(std::mem::take(&mut current));
            }
        }
    }
    let mut out = Vec::new();
    for line in joined {
        let line = strip_comment(&line);
        for part in split_top_level(&line) {
            let part = part.trim().trim_end_matches('&').trim();
            if !part.is_empty() {
                out.push(part.to_string());
            }
        }
    }
    out
}

/// A line without its `#` comment (a `#` that starts a word, outside quotes).
fn strip_comment(line: &str) -> String {
    let (mut single, mut double, mut prev) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev.is_whitespace() => return line[..i].to_string(),
            _ => {}
        }
        prev = c;
    }
    line.to_string()
}

fn split_top_level(line: &str) -> Vec<String> {
    let (mut single, mut double) = (false, false);
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            ';' | '|' if !single && !double => {
                if c == '|' && chars.peek() == Some(&'|') {
                    chars.next();
                }
                parts.push(std::mem::take(&mut current));
                continue;
            }
            '&' if !single && !double && chars.peek() == Some(&'&') => {
                chars.next();
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
}

/// Does `actual` match the documented `expected` line, where `...` stands for any text?
pub fn line_matches(expected: &str, actual: &str) -> bool {
    let pieces: Vec<&str> = expected.split("...").collect();
    if pieces.len() == 1 {
        return expected == actual;
    }
    let mut rest = actual;
    for (i, piece) in pieces.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(piece) else {
                return false;
            };
            rest = r;
        } else if i == pieces.len() - 1 {
            return rest.ends_with(piece);
        } else {
            let Some(at) = rest.find(piece) else {
                return false;
            };
            rest = &rest[at + piece.len()..];
        }
    }
    true
}

/// The headings of a Markdown file, without their `#`s.
pub fn headings(file: &str) -> Vec<String> {
    prose(file)
        .into_iter()
        .filter_map(|(_, l)| {
            let t = l.trim_start_matches('#');
            (t.len() < l.len() && t.starts_with(' ')).then(|| t.trim().to_string())
        })
        .collect()
}
