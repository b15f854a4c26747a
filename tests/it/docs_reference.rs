//! The book's reference tables held to the code: every field of `cachet.toml` (found from
//! the configuration's own types) in the configuration reference, with its true default;
//! every prefix-break reason in the diagnosis table; every metric cachet exports in the
//! metrics page; every module of `src/lib.rs` in the architecture page's map.

use std::collections::BTreeSet;
use std::path::Path;

use clap::CommandFactory;

use cachet::config::Config;

use crate::support::docs;

/// The fields of the table at `path` (`[]` is the top level), as the configuration's own
/// deserializer lists them when it refuses an unknown one; `None` when `path` is no table.
fn fields_of(path: &[String], array: bool) -> Option<Vec<String>> {
    let header = match (path.is_empty(), array) {
        (true, _) => String::new(),
        (false, false) => format!("[{}]\n", path.join(".")),
        (false, true) => format!("[[{}]]\n", path.join(".")),
    };
    let text = format!("{header}docs_probe_field = 1\n");
    let err = toml::from_str::<Config>(&text).err()?.message().to_string();
    let rest = err.strip_prefix("unknown field `docs_probe_field`, expected ")?;
    let rest = rest.strip_prefix("one of ").unwrap_or(rest);
    Some(
        rest.split(", ")
            .flat_map(|f| f.split(" or "))
            .map(|f| f.trim().trim_matches('`').to_string())
            .collect(),
    )
}

/// Every field of `cachet.toml`, as dotted paths (`server.client_keys.name`).
fn config_fields() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let fields = fields_of(&path, false)
            .or_else(|| fields_of(&path, true))
            .unwrap_or_default();
        for f in fields {
            let mut child = path.clone();
            child.push(f);
            let is_table = fields_of(&child, false).is_some() || fields_of(&child, true).is_some();
            if is_table {
                todo.push(child);
            } else {
                out.insert(child.join("."));
            }
        }
    }
    out
}

/// The fields the reference block names, commented or not, by the table they are under.
fn documented_fields(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut table = String::new();
    for line in text.lines() {
        let line = line.trim_start_matches('#').trim();
        let line = line.split(" #").next().unwrap_or(line).trim();
        if let Some(h) = line.strip_prefix('[') {
            table = h.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        } else if let Some((key, _)) = line.split_once(" = ") {
            let key = key.trim();
            if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                out.insert(if table.is_empty() {
                    key.to_string()
                } else {
                    format!("{table}.{key}")
                });
            }
        }
    }
    out
}

#[test]
fn the_configuration_reference_names_every_field_with_its_default() {
    let blocks = docs::blocks_checked("config-reference");
    assert_eq!(blocks.len(), 1, "one configuration reference");
    let b = &blocks[0];
    let fields = config_fields();
    assert!(
        fields.contains("server.listen") && fields.contains("telemetry.otlp.endpoint"),
        "{fields:?}"
    );
    assert!(fields.len() > 40, "{fields:?}");
    let documented = documented_fields(&b.text);
    let missing: Vec<_> = fields.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&fields).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "{}: fields of cachet.toml missing from the reference: {missing:?}; named there but not fields: {unknown:?}",
        b.at()
    );
    // The uncommented lines are the defaults: the block reads as the default configuration.
    let parsed = Config::parse(Path::new(&b.at()), &b.text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        format!("{parsed:?}"),
        format!("{:?}", Config::default()),
        "{}: a value shown is not the default",
        b.at()
    );
    // `(flag --x)` in a comment names a flag of `cachet serve`.
    let serve = cachet::cli::Cli::command();
    let serve = serve.find_subcommand("serve").unwrap();
    let flags: BTreeSet<String> = serve
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    for flag in b.text.split("flag ").skip(1) {
        let flag = flag.split([')', ' ', ':', ';', '\n']).next().unwrap();
        assert!(
            flags.contains(flag),
            "{}: `cachet serve` has no {flag}",
            b.at()
        );
    }
}

/// The first cell of each row of the first table after `heading` in `file`.
fn table_keys(file: &str, heading: &str) -> Vec<String> {
    let prose = docs::prose(file);
    let start = prose
        .iter()
        .position(|(_, l)| l.contains(heading))
        .unwrap_or_else(|| panic!("{file}: no `{heading}`"));
    prose[start..]
        .iter()
        .map(|(_, l)| l)
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| l.split('|').nth(1).unwrap().trim().to_string())
        .collect()
}

#[test]
fn the_diagnosis_table_has_every_break_reason() {
    let rows: BTreeSet<String> = table_keys("docs/src/diagnosis.md", "## The diagnosis")
        .into_iter()
        .map(|r| r.trim_matches('`').to_string())
        .collect();
    let reasons: BTreeSet<String> = cachet::measure::breaks::BreakReason::ALL
        .iter()
        .map(|r| r.label().to_string())
        .collect();
    assert_eq!(rows, reasons, "docs/src/diagnosis.md");
    // The metrics page lists the same vocabulary.
    let metrics = docs::read("docs/src/operations/metrics.md");
    for r in &reasons {
        assert!(metrics.contains(&format!("`{r}`")), "metrics.md lacks {r}");
    }
}

#[test]
fn the_metrics_page_names_every_metric() {
    let mut exported = BTreeSet::new();
    let mut sources = Vec::new();
    for dir in ["src", "src/metrics", "src/telemetry"] {
        for e in std::fs::read_dir(docs::root().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "rs") {
                sources.push(std::fs::read_to_string(p).unwrap());
            }
        }
    }
    for text in &sources {
        for piece in text.split("\"cachet_").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if piece[name.len()..].starts_with('"') {
                exported.insert(format!("cachet_{name}"));
            }
        }
    }
    assert!(exported.len() > 20, "{exported:?}");
    let page = docs::read("docs/src/operations/metrics.md");
    let documented: BTreeSet<String> = table_keys("docs/src/operations/metrics.md", "| metric |")
        .iter()
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .filter(|n| n.starts_with("cachet_"))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(documented, exported, "docs/src/operations/metrics.md");
    assert!(page.contains("process_cpu_seconds_total"));
}

#[test]
fn the_module_map_names_every_module() {
    let lib = docs::read("src/lib.rs");
    let modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    let mapped: BTreeSet<String> = table_keys("docs/src/architecture.md", "## Module map")
        .iter()
        .flat_map(|cell| {
            cell.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(mapped, modules, "docs/src/architecture.md's module map");
}

#[test]
fn the_trace_format_names_every_field_of_a_record() {
    let documented: BTreeSet<String> = table_keys("docs/src/trace-format.md", "| field |")
        .into_iter()
        .map(|f| f.trim_matches('`').to_string())
        .collect();
    let source = docs::read("src/trace/record.rs");
    let start = source.find("pub struct Record {").unwrap();
    let body = &source[start..start + source[start..].find("\n}").unwrap()];
    let mut fields = BTreeSet::new();
    let mut rename: Option<String> = None;
    for line in body.lines().skip(1).map(str::trim) {
        if let Some(r) = line.split("rename = \"").nth(1) {
            rename = Some(r.split('"').next().unwrap().to_string());
        }
        if let Some(f) = line.strip_prefix("pub ") {
            let name = f.split(':').next().unwrap().to_string();
            if !line.contains("skip") {
                fields.insert(rename.take().unwrap_or(name));
            }
            rename = None;
        }
    }
    // `body_text` is how a record holds `body`'s text; `body_base64` its bytes when
    // serde_json cannot read them (both described beside `body`).
    for f in &fields {
        assert!(
            documented.contains(f) || f.starts_with("body"),
            "docs/src/trace-format.md lacks the record field `{f}`"
        );
    }
    for f in &documented {
        assert!(
            fields.contains(f) || source.contains(&format!("\"{f}\"")),
            "docs/src/trace-format.md names `{f}`, which no record has"
        );
    }
}
