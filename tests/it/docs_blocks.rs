//! Every fenced block of the README, BENCHMARKS.md and the book says how it is checked
//! (`check=...` in its info string, or `env=`/`file=` for the client configurations the
//! agents' end-to-end run uses), and the checks that need no server run here: commands
//! parsed by cachet's own command line, configurations and policies parsed by cachet,
//! code regions held to the tests that run them, outputs compared with what cachet prints.
//! docs/src/testing.md lists the tags.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use clap::Parser;

use crate::support::docs::{self, Block};

/// Every `check=` kind a block may carry.
const KINDS: &[&str] = &[
    "cli",
    "run",
    "output",
    "region",
    "test",
    "config",
    "config-reference",
    "policy",
    "policy-fragment",
    "models",
    "excerpt",
    "json",
    "json-member",
    "patch",
    "message",
    "log-line",
    "prometheus-config",
    "none",
];

/// The repository's folders: a path under one of these that a command names must exist.
const REPO_DIRS: &[&str] = &[
    "policies/",
    "tests/",
    "data/",
    "benches/",
    "examples/",
    "docs/",
    "scripts/",
    "grafana/",
    "fuzz/",
];

#[test]
fn every_block_says_how_it_is_checked() {
    let mut wrong = Vec::new();
    let all = docs::all_blocks();
    assert!(all.len() > 40, "only {} blocks found", all.len());
    for b in &all {
        let client = b.tag("env").is_some() || b.tag("file").is_some();
        match b.check() {
            None if client => {}
            None => wrong.push(format!("{}: no `check=` tag", b.at())),
            Some((kind, _)) if !KINDS.contains(&kind) => {
                wrong.push(format!("{}: unknown check `{kind}`", b.at()))
            }
            Some(("none", _)) if b.lang != "text" => {
                wrong.push(format!("{}: `check=none` is for text blocks only", b.at()))
            }
            Some(_) => {}
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The client configurations: the agents page holds every one `tests/e2e/run.py` reads,
/// each parses, and a copy elsewhere (the README) is the same bytes.
#[test]
fn client_blocks_parse_and_their_copies_are_the_same_bytes() {
    let mut seen: BTreeMap<(String, String), Block> = BTreeMap::new();
    for b in docs::all_blocks() {
        let key = match (b.tag("env"), b.tag("file")) {
            (Some(name), _) => ("env".to_string(), name.to_string()),
            (_, Some(path)) => ("file".to_string(), path.to_string()),
            _ => continue,
        };
        match key.0.as_str() {
            "env" => {
                let mut points_at_cachet = false;
                for line in b.text.lines() {
                    let (name, value) = line
                        .strip_prefix("export ")
                        .and_then(|l| l.split_once('='))
                        .unwrap_or_else(|| {
                            panic!("{}: `{line}` is not `export NAME=VALUE`", b.at())
                        });
                    assert!(name.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
                    // One word, or one double-quoted string (run.py reads both).
                    let quoted = value.len() >= 2 && value.starts_with('"') && value.ends_with('"');
                    assert!(
                        quoted || !value.contains([' ', '"', '\'']),
                        "{}: `{value}` is neither one word nor one quoted string",
                        b.at()
                    );
                    points_at_cachet |= value.starts_with("http://127.0.0.1:8787");
                }
                assert!(points_at_cachet, "{}: no variable points at cachet", b.at());
            }
            _ if key.1.contains(".json") => {
                serde_json::from_str::<serde_json::Value>(&b.text)
                    .unwrap_or_else(|e| panic!("{}: {e}", b.at()));
            }
            _ => {
                toml::from_str::<toml::Value>(&b.text)
                    .unwrap_or_else(|e| panic!("{}: {e}", b.at()));
            }
        }
        match seen.get(&key) {
            Some(first) => assert_eq!(
                first.text,
                b.text,
                "{} differs from {}: the end-to-end run uses the agents page's",
                b.at(),
                first.at()
            ),
            None => {
                seen.insert(key, b);
            }
        }
    }
    let agents: Vec<(String, String)> = docs::blocks("docs/src/agents.md")
        .iter()
        .filter_map(|b| match (b.tag("env"), b.tag("file")) {
            (Some(n), _) => Some(("env".into(), n.into())),
            (_, Some(p)) => Some(("file".into(), p.into())),
            _ => None,
        })
        .collect();
    // The blocks tests/e2e/run.py asks for (CLIENT_BLOCKS there).
    let e2e = std::fs::read_to_string(docs::root().join("tests/e2e/run.py")).unwrap();
    assert!(e2e.contains("\"docs\", \"src\", \"agents.md\""));
    for (kind, name) in &agents {
        assert!(
            e2e.contains(&format!("(\"{kind}\", \"{name}\")")),
            "{kind}={name} is on the agents page but not in run.py's CLIENT_BLOCKS"
        );
    }
    assert_eq!(agents.len(), 13, "{agents:?}");
    for key in seen.keys() {
        assert!(agents.contains(key), "{key:?} is not on the agents page");
    }
}

/// Files a page defines: a block whose first line is `# PATH` or `# PATH: ...`.
fn defined_files(file: &str) -> Vec<String> {
    docs::blocks(file)
        .iter()
        .filter_map(|b| {
            b.text
                .lines()
                .next()?
                .strip_prefix("# ")
                .map(str::to_string)
        })
        .map(|l| l.split(':').next().unwrap_or("").trim().to_string())
        .collect()
}

/// Check one word a command names: a path under the repository's folders exists or is
/// defined on the page.
fn check_path(word: &str, page_files: &[String], at: &str, wrong: &mut Vec<String>) {
    for part in word.split([',', '=']) {
        if REPO_DIRS.iter().any(|d| part.starts_with(d))
            && !docs::root().join(part).exists()
            && !page_files.iter().any(|f| f == part)
        {
            wrong.push(format!("{at}: `{part}` does not exist"));
        }
    }
}

fn check_cachet_args(args: &[String], at: &str, wrong: &mut Vec<String>) {
    let argv = std::iter::once("cachet".to_string()).chain(args.iter().cloned());
    if let Err(e) = cachet::cli::Cli::try_parse_from(argv) {
        use clap::error::ErrorKind;
        if !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
            wrong.push(format!("{at}: `cachet {}`: {}", args.join(" "), e.kind()));
        }
    }
}

/// Check one command of a `check=cli` block.
fn check_command(
    command: &str,
    vars: &mut BTreeMap<String, String>,
    page: &[String],
    at: &str,
    wrong: &mut Vec<String>,
) {
    let Some(mut words) = docs::shell_words(command) else {
        wrong.push(format!("{at}: unbalanced quotes in `{command}`"));
        return;
    };
    for w in &mut words {
        for (name, value) in vars.iter() {
            *w = w.replace(&format!("${name}"), value);
        }
    }
    // Leading assignments: alone they set a variable, before a command they are its env.
    let mut i = 0;
    while i < words.len()
        && words[i].contains('=')
        && words[i].split('=').next().is_some_and(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        })
    {
        if words.len() == 1 {
            let (n, v) = words[0].split_once('=').unwrap();
            vars.insert(n.to_string(), v.to_string());
        }
        i += 1;
    }
    let words = &words[i..];
    let Some(program) = words.first() else {
        return;
    };
    let args = &words[1..];
    for w in args {
        check_path(w, page, at, wrong);
    }
    match program.as_str() {
        "cachet" | "./target/release/cachet" => check_cachet_args(args, at, wrong),
        "cargo" => match args.first().map(String::as_str) {
            Some("build" | "test" | "install") => {}
            Some("run") => {
                if let Some(p) = args.iter().position(|a| a == "--example") {
                    let name = args.get(p + 1).map_or("", String::as_str);
                    let path = docs::root().join("examples");
                    if !path.join(format!("{name}.rs")).exists() && !path.join(name).is_dir() {
                        wrong.push(format!("{at}: no example `{name}`"));
                    }
                } else if let Some(p) = args.iter().position(|a| a == "--") {
                    check_cachet_args(&args[p + 1..], at, wrong);
                } else {
                    wrong.push(format!(
                        "{at}: `{command}`: not a command the docs test knows"
                    ));
                }
            }
            Some("bench") => check_bench(args, &[], at, wrong),
            _ => wrong.push(format!(
                "{at}: `{command}`: not a command the docs test knows"
            )),
        },
        "export" => {
            if !args.iter().all(|a| a.contains('=')) {
                wrong.push(format!("{at}: `{command}` exports nothing"));
            }
        }
        "python3" => {
            let script = &args[0];
            if !docs::root().join(script).exists() && !page.iter().any(|f| f == script) {
                wrong.push(format!("{at}: no script `{script}`"));
            }
        }
        p if p.starts_with("./scripts/") => {
            let path = docs::root().join(p.trim_start_matches("./"));
            let executable = std::fs::metadata(&path)
                .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0)
                .unwrap_or(false);
            if !executable {
                wrong.push(format!("{at}: `{p}` is not an executable script"));
            }
        }
        _ => wrong.push(format!(
            "{at}: `{command}`: not a command the docs test knows"
        )),
    }
}

/// `cargo bench --bench NAME`: the benchmark exists, and every `NAME=` variable set before it
/// is one the benchmarks read.
fn check_bench(args: &[String], env: &[String], at: &str, wrong: &mut Vec<String>) {
    let Some(p) = args.iter().position(|a| a == "--bench") else {
        wrong.push(format!("{at}: `cargo bench` without `--bench NAME`"));
        return;
    };
    let Some(name) = args.get(p + 1) else {
        wrong.push(format!(
            "{at}: `--bench` without a name (an inline command cut by a line break?)"
        ));
        return;
    };
    if !docs::root().join(format!("benches/{name}.rs")).exists() {
        wrong.push(format!("{at}: no benchmark `{name}`"));
    }
    let mut sources = String::new();
    for dir in ["benches", "benches/load"] {
        for e in std::fs::read_dir(docs::root().join(dir)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "rs") {
                sources.push_str(&std::fs::read_to_string(path).unwrap());
            }
        }
    }
    for var in env {
        if !sources.contains(&format!("\"{var}\"")) {
            wrong.push(format!("{at}: no benchmark reads `{var}`"));
        }
    }
}

#[test]
fn commands_are_cachets_and_name_what_exists() {
    let mut wrong = Vec::new();
    let blocks = docs::blocks_checked("cli");
    assert!(blocks.len() > 10);
    for b in blocks {
        let page = defined_files(&b.file);
        let mut vars = BTreeMap::new();
        for command in docs::shell_commands(&b.text) {
            check_command(&command, &mut vars, &page, &b.at(), &mut wrong);
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// `cargo bench` and `cargo run --example` commands quoted in the prose (BENCHMARKS.md
/// names one in every row of its table): the target exists, and the variables set before
/// the command are ones the benchmarks read.
#[test]
fn benchmark_commands_in_the_prose_name_what_exists() {
    let mut wrong = Vec::new();
    let mut checked = 0;
    for file in docs::doc_files() {
        for (line, text) in docs::prose(&file) {
            for span in text.split('`').skip(1).step_by(2) {
                let Some(words) = docs::shell_words(span) else {
                    continue;
                };
                let env: Vec<String> = words
                    .iter()
                    .take_while(|w| {
                        w.contains('=') && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    })
                    .map(|w| w.split('=').next().unwrap().to_string())
                    .collect();
                let rest = &words[env.len()..];
                let at = format!("{file}:{line}");
                match rest {
                    [cargo, bench, args @ ..]
                        if cargo == "cargo"
                            && bench == "bench"
                            && args.iter().any(|a| a == "--bench") =>
                    {
                        checked += 1;
                        check_bench(args, &env, &at, &mut wrong);
                    }
                    [cargo, run, args @ ..]
                        if cargo == "cargo"
                            && run == "run"
                            && args.iter().any(|a| a == "--example") =>
                    {
                        checked += 1;
                        let p = args.iter().position(|a| a == "--example").unwrap();
                        let Some(name) = args.get(p + 1) else {
                            wrong.push(format!("{at}: `--example` without a name"));
                            continue;
                        };
                        let dir = docs::root().join("examples");
                        if !dir.join(format!("{name}.rs")).exists() && !dir.join(name).is_dir() {
                            wrong.push(format!("{at}: no example `{name}`"));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    assert!(checked >= 10, "only {checked} commands found");
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// A reference to a section of BENCHMARKS.md (`BENCHMARKS.md, "Session length"`) names one
/// of its headings.
#[test]
fn references_to_benchmarks_name_its_sections() {
    let sections = docs::headings("BENCHMARKS.md");
    let mut wrong = Vec::new();
    for file in docs::doc_files() {
        let text = docs::prose(&file)
            .into_iter()
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
            .join("\n");
        for (at, _) in text.match_indices("BENCHMARKS.md") {
            let after = &text[at..];
            let clause = &after[..after.find(')').unwrap_or(after.len()).min(200)];
            for name in clause.split('"').skip(1).step_by(2) {
                if !sections.iter().any(|s| s == name) {
                    wrong.push(format!("{file}: BENCHMARKS.md has no section \"{name}\""));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn configurations_policies_and_model_tables_parse() {
    let mut checked = 0;
    for b in docs::all_blocks() {
        let Some((kind, arg)) = b.check() else {
            continue;
        };
        let at = b.at();
        checked += 1;
        match kind {
            "config" => {
                cachet::config::Config::parse(Path::new(&at), &b.text)
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            "policy" | "policy-fragment" => {
                let text = match kind {
                    "policy" => b.text.clone(),
                    _ => format!("name = \"fragment\"\n{}", b.text),
                };
                // Relative paths in a policy are its folder's: one holding what the
                // documented policies name (a `notes/` folder, a `memory.md`).
                let dir = tempfile::tempdir().unwrap();
                std::fs::create_dir(dir.path().join("notes")).unwrap();
                std::fs::write(dir.path().join("memory.md"), "notes\n").unwrap();
                let path = dir.path().join("docs-block.toml");
                if let Err(errors) = cachet::policy::parse_policy(&path, &text) {
                    panic!("{at}: {}", cachet::policy::render_errors(&errors));
                }
            }
            "models" => {
                cachet::models::ModelTable::parse(&b.text).unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            "json" => {
                serde_json::from_str::<serde_json::Value>(&b.text)
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            "json-member" => {
                serde_json::from_str::<serde_json::Value>(&format!("{{{}}}", b.text))
                    .unwrap_or_else(|e| panic!("{at}: {e}"));
            }
            "patch" => {
                let v: serde_json::Value =
                    serde_json::from_str(&b.text).unwrap_or_else(|e| panic!("{at}: {e}"));
                let name = v["transformerName"].as_str().expect("transformerName");
                cachet::patch::parse_ops(&v["patch"], name)
                    .unwrap_or_else(|e| panic!("{at}: {e:?}"));
            }
            "excerpt" => {
                let file = arg.expect("check=excerpt:FILE");
                assert!(
                    docs::read(file).contains(&b.text),
                    "{at}: these lines are not in {file} as shown"
                );
            }
            "region" => {
                let (file, name) = arg
                    .and_then(|a| a.split_once('#'))
                    .expect("check=region:FILE#NAME");
                assert_eq!(
                    b.text,
                    docs::region(file, name),
                    "{at}: not the code of {file} region `{name}`"
                );
            }
            "test" => {
                let file = arg.expect("check=test:FILE");
                assert!(
                    docs::read(file).contains(&b.file),
                    "{at}: {file} does not read {}",
                    b.file
                );
            }
            "message" => {
                let produced = message(arg.expect("check=message:NAME"));
                assert_eq!(b.text.trim_end(), produced, "{at}");
            }
            _ => checked -= 1,
        }
    }
    assert!(checked > 15, "{checked}");
}

/// What the code answers for the errors the FAQ quotes.
fn message(name: &str) -> String {
    use cachet::route::Provider;
    match name {
        "body-late" => {
            let err = cachet::transport::http::body_late(std::time::Duration::from_millis(30_000));
            String::from_utf8(
                cachet::providers::error_body(Provider::Anthropic, err.kind, &err.message).to_vec(),
            )
            .unwrap()
        }
        "open-relay" => {
            let server = cachet::config::ServerConfig::default();
            let upstream = cachet::config::UpstreamConfig {
                anthropic_api_key_env: Some("ANTHROPIC_API_KEY".into()),
                ..Default::default()
            };
            match cachet::server::client_auth::ClientKeys::from_config(&server, &upstream) {
                Ok(_) => panic!("an open relay was accepted"),
                Err(e) => e.to_string(),
            }
        }
        other => panic!("no message `{other}`"),
    }
}

/// `check=output:NAME`: the block is exactly what the command prints.
#[test]
fn outputs_are_what_cachet_prints() {
    let mut outputs: BTreeMap<String, String> = BTreeMap::new();
    let blocks = docs::blocks_checked("output");
    assert!(blocks.len() >= 3);
    for b in blocks {
        let name = b
            .check()
            .and_then(|(_, a)| a)
            .expect("check=output:NAME")
            .to_string();
        let printed = outputs.entry(name.clone()).or_insert_with(|| output(&name));
        assert_eq!(
            b.text.trim_end(),
            printed.trim_end(),
            "{}: not what `{name}` prints",
            b.at()
        );
    }
}

fn output(name: &str) -> String {
    let args: Vec<&str> = match name {
        "demo" => vec!["demo", "--once", "--listen", "127.0.0.1:0"],
        "advise-traces" => vec!["advise", "tests/data/traces"],
        "replay-memory" => vec![
            "replay",
            "tests/data/sample-trace.jsonl",
            "--arm",
            "recorded",
            "--arm",
            "system-prompt=policies/memory-system-prompt.toml",
            "--arm",
            "context-hook=policies/memory-context-hook.toml",
            "--arm",
            "pinned=policies/memory-pinned.toml",
        ],
        other => panic!("no output `{other}`"),
    };
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(&args)
        .current_dir(docs::root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim_start_matches('\n')
        .to_string()
}

/// `check=prometheus-config`: Prometheus's own checker accepts the block.
#[test]
fn prometheus_configurations_pass_promtool() {
    for b in docs::blocks_checked("prometheus-config") {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prometheus.yml");
        std::fs::write(&file, &b.text).unwrap();
        let out = Command::new("promtool")
            .args(["check", "config"])
            .arg(&file)
            .output()
            .expect("promtool must be installed (scripts/test.sh installs prometheus)");
        assert!(
            out.status.success(),
            "{}: {}{}",
            b.at(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
