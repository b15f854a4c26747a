//! The layout holds: no import cycle among `src/`'s top-level modules, and no source file
//! over [`MAX_CODE_LINES`] lines of non-test code (docs/src/architecture.md). A module's
//! imports are read as text: every `crate::NAME` path and every `use crate::{NAME, ...}`
//! group outside `#[cfg(test)]` items and comments is an arrow from the file's top-level
//! module to `NAME`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lines of non-test code a source file may hold (blank and comment-only lines not counted).
const MAX_CODE_LINES: usize = 500;

/// One source file of the crate, with its test parts cut out.
struct Source {
    path: PathBuf,
    /// The top-level module it belongs to (`pipeline` for `src/pipeline/finish.rs`).
    module: String,
    code: String,
}

/// Every arrow between two top-level modules, with the files that draw it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>;

#[test]
fn top_level_modules_import_each_other_in_one_direction() {
    let sources = read_crate(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let cycles = cycles(&graph(&sources));
    assert!(cycles.is_empty(), "import cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_source_file_is_over_the_limit() {
    let sources = read_crate(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    let over: Vec<String> = sources
        .iter()
        .map(|s| (code_lines(&s.code), &s.path))
        .filter(|(n, _)| *n > MAX_CODE_LINES)
        .map(|(n, p)| format!("{}: {n} lines of code", p.display()))
        .collect();
    assert!(
        over.is_empty(),
        "over {MAX_CODE_LINES}:\n{}",
        over.join("\n")
    );
}

/// The check finds a cycle planted in a crate of three modules, and only that one.
#[test]
fn a_planted_cycle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write("a/mod.rs", "mod inner;\nuse crate::b::Thing;\n");
    write("a/inner.rs", "// crate::c in a comment is no import\n");
    write("b.rs", "pub struct Thing;\nfn f() { crate::c::g(); }\n");
    write(
        "c.rs",
        "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n",
    );
    assert!(cycles(&graph(&read_crate(src))).is_empty());
    write("c.rs", "use crate::{a::inner, b};\npub fn g() {}\n");
    let found = cycles(&graph(&read_crate(src)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("a -> b"), "{}", found[0]);
    assert!(found[0].contains("c -> a"), "{}", found[0]);
}

fn read_crate(src: &Path) -> Vec<Source> {
    let test_files = test_only_files(src);
    let mut sources = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || test_files.contains(&path) {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let first = rel.components().next().unwrap().as_os_str();
            let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
            if module == "lib" || module == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            sources.push(Source {
                path: rel.to_path_buf(),
                module,
                code: without_tests(&without_comments(&text)),
            });
        }
    }
    sources.sort_by(|a, b| a.path.cmp(&b.path));
    sources
}

/// Files declared only under `#[cfg(test)]` (`#[cfg(test)] mod tests_openai;`).
fn test_only_files(src: &Path) -> BTreeSet<PathBuf> {
    let declared = regex::Regex::new(
        r#"#\[cfg\(test\)\]\s*(?:#\[path\s*=\s*"([^"]+)"\]\s*)?(?:pub(?:\([a-z]+\))?\s+)?mod\s+(\w+)\s*;"#,
    )
    .unwrap();
    let mut found = BTreeSet::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            // `a/mod.rs` and `lib.rs` declare children beside them; `a.rs` in `a/`.
            let stem = path.file_stem().unwrap().to_string_lossy();
            let base = match stem.as_ref() {
                "mod" | "lib" | "main" => dir.clone(),
                other => dir.join(other),
            };
            for c in declared.captures_iter(&text) {
                if let Some(path) = c.get(1) {
                    // `#[path]` is relative to the declaring file's folder.
                    found.insert(dir.join(path.as_str()));
                    continue;
                }
                found.insert(base.join(format!("{}.rs", &c[2])));
                found.insert(base.join(&c[2]).join("mod.rs"));
            }
        }
    }
    found
}

/// The text without `//` and `/* */` comments (string contents are kept: a path inside a
/// string literal is rare enough to be read as an import, and then shows in the failure).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b = text.as_bytes();
    let mut i = 0;
    let mut in_str = false;
    while i < b.len() {
        if in_str {
            if b[i] == b'\\' {
                out.push_str(&text[i..(i + 2).min(b.len())]);
                i += 2;
                continue;
            }
            if b[i] == b'"' {
                in_str = false;
            }
            out.push(b[i] as char);
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.extend(text[i..end].chars().filter(|&c| c == '\n'));
            i = end;
        } else {
            // Multi-byte characters outside strings and comments are copied whole.
            let c = text[i..].chars().next().unwrap();
            if c == '"' && !(i > 0 && b[i - 1] == b'\'') {
                in_str = true;
            }
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// The text without items marked `#[cfg(test)]` (a `mod tests { … }` or a test helper).
fn without_tests(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its `;` (a declaration) or the brace that closes its body.
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

fn code_lines(code: &str) -> usize {
    code.lines().filter(|l| !l.trim().is_empty()).count()
}

fn graph(sources: &[Source]) -> Graph {
    let modules: BTreeSet<&str> = sources.iter().map(|s| s.module.as_str()).collect();
    let path = regex::Regex::new(r"\bcrate::([a-z_][a-z0-9_]*)").unwrap();
    let group = regex::Regex::new(r"\bcrate::\{([^;]*)\}").unwrap();
    let mut graph = Graph::new();
    for s in sources {
        let mut named: Vec<String> = path.captures_iter(&s.code).map(|c| c[1].into()).collect();
        for g in group.captures_iter(&s.code) {
            named.extend(top_names(&g[1]));
        }
        for name in named {
            if name != s.module && modules.contains(name.as_str()) {
                let to = graph.entry(s.module.clone()).or_default();
                to.entry(name).or_default().insert(s.path.clone());
            }
        }
    }
    graph
}

/// The first name of each path in a `use` group's top level (`a::b, c, d::{e, f}`).
fn top_names(group: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for part in group.split_inclusive([',', '{', '}']) {
        if start && depth == 0 {
            let name: String = part
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
        match part.chars().last() {
            Some('{') => {
                depth += 1;
                start = false;
            }
            Some('}') => depth -= 1,
            Some(',') => start = true,
            _ => start = false,
        }
    }
    names
}

/// Each strongly connected set of two modules or more, with the arrows inside it and the
/// files that draw them.
fn cycles(graph: &Graph) -> Vec<String> {
    let nodes: BTreeSet<&String> = graph
        .keys()
        .chain(graph.values().flat_map(|to| to.keys()))
        .collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for next in graph.get(&n).into_iter().flat_map(|to| to.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in &nodes {
        if done.contains(*n) {
            continue;
        }
        let set: BTreeSet<&String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[**m].contains(*n))
            .copied()
            .collect();
        if set.len() < 2 {
            continue;
        }
        let mut text = format!("cycle among {:?}:", set);
        for a in &set {
            for (b, files) in graph.get(*a).into_iter().flatten() {
                if set.contains(b) {
                    let files: Vec<String> =
                        files.iter().map(|f| f.display().to_string()).collect();
                    text.push_str(&format!("\n  {a} -> {b} ({})", files.join(", ")));
                }
            }
        }
        done.extend(set.iter().map(|s| (*s).clone()));
        out.push(text);
    }
    out
}
