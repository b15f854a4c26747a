//! The policies shipped in `policies/`: they load, and they do what their header says.

use std::path::{Path, PathBuf};

use serde_json::json;

use cachet::patch::Op;
use cachet::policy::{
    load_policies, parse_policy, BreakpointMode, CacheTtl, ContextReason, Held, Policy,
    PromptCacheKey,
};

fn shipped(name: &str) -> Policy {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("policies")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    parse_policy(&path, &text).unwrap_or_else(|e| panic!("{e:?}"))
}

/// One session's requests through the `before_request` handlers of a policy, as the engine
/// runs them: what each holding handler holds is kept between requests, as the session
/// log keeps it.
#[derive(Default)]
struct Session {
    held: std::collections::HashMap<String, Vec<(String, String)>>,
}

impl Session {
    /// One request whose system prompt is `system`: the system prompt sent and the tail's
    /// messages. `warm`: the cached prefix can still be read.
    fn send(&mut self, policy: &Policy, system: &str, warm: bool) -> (String, Vec<String>) {
        let mut text = system.to_string();
        let mut tail = Vec::new();
        for handler in policy.context_for(ContextReason::BeforeRequest) {
            let lines = handler.holding().expect("every handler holds");
            let parts = vec![("base".to_string(), text.clone())];
            let held = self.held.entry(handler.transformer.clone()).or_default();
            let ops = lines.hold_ops(&parts, Held { parts: held, warm });
            for op in ops.persist.iter().chain(&ops.now) {
                assert!(op.check_reason().is_ok(), "{op:?}");
            }
            for op in &ops.persist {
                let Op::SystemPartSet {
                    part_name, text: t, ..
                } = op
                else {
                    panic!("unexpected op {op:?}")
                };
                assert_eq!(t, &text, "what is held went as it is");
                held.retain(|(n, _)| n != part_name);
                held.push((part_name.clone(), t.clone()));
            }
            for op in &ops.now {
                match op {
                    Op::SystemPartSet { text: t, .. } => text = t.clone(),
                    Op::MessagesUncachedAppend { messages, .. } => {
                        for m in messages {
                            assert_eq!(m["role"], json!("user"));
                            tail.push(m["content"].as_str().unwrap().to_string());
                        }
                    }
                    other => panic!("unexpected op {other:?}"),
                }
            }
        }
        (text, tail)
    }
}

#[test]
fn every_shipped_policy_loads() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("policies");
    let set = load_policies(&[], &[dir]).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<_> = set.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "anthropic-auto-breakpoints",
            "openai-cache-key",
            "stabilize-volatile",
            "memory-context-hook",
            "memory-pinned",
            "memory-system-prompt",
        ]
    );
    for p in set.iter() {
        assert!(!p.description.is_empty(), "{}", p.name);
        let text = std::fs::read_to_string(&p.source_file).unwrap();
        assert!(text.starts_with(&format!("# {} — ", p.name)), "{}", p.name);
    }
}

#[test]
fn auto_breakpoints_and_cache_key() {
    let p = shipped("anthropic-auto-breakpoints.toml");
    let b = p.breakpoints.unwrap();
    assert!(
        b.keep_warm,
        "without it, the first long pause of every session is written again"
    );
    assert_eq!((b.mode, b.ttl), (BreakpointMode::Auto, CacheTtl::Auto));
    let p = shipped("openai-cache-key.toml");
    assert_eq!(p.prompt_cache_key, Some(PromptCacheKey::Session));
}

/// pi up to 0.73.1 wrote the time of day: the session's first request goes as sent, the
/// next ones keep its line and tell theirs in the tail.
#[test]
fn pi_time_line_is_held_and_the_new_one_told_in_the_tail() {
    let p = shipped("stabilize-volatile.toml");
    let request = |time: &str| {
        format!(
            "You are an expert coding assistant.\n\nGuidelines:\n- Be concise\n\n\
             Current date and time: Sunday, November 22, 2026 at {time} AM UTC\n\
             Current working directory: /home/me/project"
        )
    };
    let mut session = Session::default();
    let first = session.send(&p, &request("12:17:20"), false);
    assert_eq!(first, (request("12:17:20"), vec![]), "goes as sent");
    let (second, tail) = session.send(&p, &request("12:18:05"), true);
    assert_eq!(
        second,
        request("12:17:20"),
        "the cached system prompt holds"
    );
    assert_eq!(
        tail,
        vec!["Current date and time: Sunday, November 22, 2026 at 12:18:05 AM UTC"]
    );
    // Once the prefix went cold, the client's line is sent, and held from then on.
    let cold = session.send(&p, &request("12:48:05"), false);
    assert_eq!(cold, (request("12:48:05"), vec![]));
    assert_eq!(
        session.send(&p, &request("12:48:05"), true).1,
        Vec::<String>::new()
    );
}

/// Claude Code's `Today's date` and `gitStatus:` section: the same day and status change
/// nothing; a new day and status keep the held ones and are told in the tail.
#[test]
fn claude_code_env_date_and_git_status_are_held() {
    let p = shipped("stabilize-volatile.toml");
    let system = |day: u32, status: &str| {
        format!(
            "You are Claude Code, Anthropic's official CLI for Claude.\n\n\
        Here is useful information about the environment you are running in:\n<env>\n\
        Working directory: /home/me/project\nIs directory a git repo: Yes\nPlatform: linux\n\
        Today's date: 2026-11-{day}\n</env>\nYou are powered by the model claude-sonnet-4-5.\n\n\
        gitStatus: This is the git status at the start of the conversation.\n\
        Current branch: main\n\nStatus:\n{status}\n\nRecent commits:\nabc1234 Fix tap\n"
        )
    };
    let mut session = Session::default();
    let monday = system(22, "M src/lib.rs");
    assert_eq!(session.send(&p, &monday, false), (monday.clone(), vec![]));
    assert_eq!(session.send(&p, &monday, true), (monday.clone(), vec![]));
    let (kept, tail) = session.send(&p, &system(23, "M src/main.rs"), true);
    assert_eq!(kept, monday);
    assert_eq!(tail.len(), 2);
    assert_eq!(tail[0], "Today's date: 2026-11-23");
    assert!(
        tail[1].starts_with("gitStatus: This is the git status")
            && tail[1].contains("M src/main.rs"),
        "{}",
        tail[1]
    );
}

#[test]
fn iso_timestamps_are_held_and_stable_prompts_are_untouched() {
    let p = shipped("stabilize-volatile.toml");
    let mut session = Session::default();
    let first = "Rules.\nSnapshot taken 2026-11-22T00:17:20Z by ci\nEnd.";
    assert_eq!(session.send(&p, first, false), (first.to_string(), vec![]));
    let (kept, tail) = session.send(
        &p,
        "Rules.\nSnapshot taken 2026-11-22T00:19:02Z by ci\nEnd.",
        true,
    );
    assert_eq!(kept, first);
    assert_eq!(tail, vec!["Snapshot taken 2026-11-22T00:19:02Z by ci"]);
    let stable = "You are a helpful assistant.\nAlways answer in English.";
    let mut session = Session::default();
    for warm in [false, true] {
        assert_eq!(session.send(&p, stable, warm), (stable.to_string(), vec![]));
    }
    assert!(session.held.values().all(Vec::is_empty), "nothing to hold");
    assert!(Path::new(&p.source_file).exists());
}

/// Every TOML example in `policies/README.md` is valid: configuration blocks parse as
/// `cachet.toml`, the others as (part of) a policy.
#[test]
fn readme_examples_pass_check() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("policies/README.md")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("notes")).unwrap();
    std::fs::write(dir.path().join("memory.md"), "remember").unwrap();
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    assert!(blocks.len() >= 13, "{}", blocks.len());
    // The op table's examples, each as a one-op patch.
    let op_examples: Vec<String> = readme
        .lines()
        .filter(|l| l.starts_with("| `") && l.contains("`{ op = "))
        .filter_map(|l| l.rsplit("| `").next())
        .map(|cell| {
            let op = cell.trim_end_matches(" |").trim_end_matches('`');
            format!("[[context]]\nreason = \"ephemeral\"\npatch = [ {op} ]\n")
        })
        .collect();
    assert_eq!(op_examples.len(), 9);
    let blocks = blocks.into_iter().map(str::to_string).chain(op_examples);
    for block in blocks {
        let block = block.as_str();
        if block.contains("[policies]") {
            cachet::config::Config::parse(Path::new("cachet.toml"), block)
                .unwrap_or_else(|e| panic!("{e}\n{block}"));
            continue;
        }
        let named = toml::from_str::<toml::Table>(block).is_ok_and(|t| t.contains_key("name"));
        let text = if named {
            block.to_string()
        } else {
            format!("name = \"example\"\n{block}")
        };
        let path = dir.path().join("example.toml");
        parse_policy(&path, &text).unwrap_or_else(|e| {
            panic!(
                "{}\n{text}",
                e.iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
    }
}
