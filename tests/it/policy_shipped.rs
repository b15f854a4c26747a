//! The policies shipped in `policies/`: they load, and they do what their header says.

use std::path::{Path, PathBuf};

use serde_json::json;

use cachet::patch::Op;
use cachet::policy::{
    load_policies, parse_policy, BreakpointMode, CacheTtl, ContextReason, Policy, PromptCacheKey,
    TemplateVars,
};

fn shipped(name: &str) -> Policy {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("policies")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    parse_policy(&path, &text).unwrap_or_else(|e| panic!("{e:?}"))
}

/// Run every ephemeral handler of `policy` over one system part, as the engine would:
/// each handler sees the previous one's output.
fn stabilize(policy: &Policy, system: &str) -> (String, Vec<String>) {
    let mut text = system.to_string();
    let mut tail = Vec::new();
    for handler in policy.context_for(ContextReason::Ephemeral) {
        let parts = vec![("base".to_string(), text.clone())];
        let result = handler.result(&parts, &TemplateVars::default());
        for op in &result.patch {
            assert!(op.check_reason().is_ok(), "{op:?}");
            match op {
                Op::SystemPartSet {
                    part_name, text: t, ..
                } => {
                    assert_eq!(part_name, "base");
                    text = t.clone();
                }
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
        !b.keep_warm,
        "keep-warm sends requests of its own: off unless asked for"
    );
    assert_eq!((b.mode, b.ttl), (BreakpointMode::Auto, CacheTtl::Auto));
    let p = shipped("openai-cache-key.toml");
    assert_eq!(p.prompt_cache_key, Some(PromptCacheKey::Session));
}

#[test]
fn pi_date_and_time_leave_the_system_prompt() {
    let p = shipped("stabilize-volatile.toml");
    let request = |time: &str| {
        format!(
            "You are an expert coding assistant.\n\nGuidelines:\n- Be concise\n\n\
             Current date and time: Sunday, November 22, 2026 at {time} AM UTC\n\
             Current working directory: /home/me/project"
        )
    };
    let (first, tail1) = stabilize(&p, &request("12:17:20"));
    let (second, tail2) = stabilize(&p, &request("12:18:05"));
    assert_eq!(first, second, "the cached system prompt must not change");
    assert_eq!(
        first,
        "You are an expert coding assistant.\n\nGuidelines:\n- Be concise\n\n\
         Current working directory: /home/me/project"
    );
    assert_eq!(
        tail1,
        vec!["Current date and time: Sunday, November 22, 2026 at 12:17:20 AM UTC"]
    );
    assert_ne!(tail1, tail2);
}

#[test]
fn claude_code_env_date_and_git_status_leave_the_system_prompt() {
    let p = shipped("stabilize-volatile.toml");
    let system = "You are Claude Code, Anthropic's official CLI for Claude.\n\n\
        Here is useful information about the environment you are running in:\n<env>\n\
        Working directory: /home/me/project\nIs directory a git repo: Yes\nPlatform: linux\n\
        Today's date: 2026-11-22\n</env>\nYou are powered by the model claude-sonnet-4-5.\n\n\
        gitStatus: This is the git status at the start of the conversation.\n\
        Current branch: main\n\nStatus:\nM src/lib.rs\n\nRecent commits:\nabc1234 Fix tap\n";
    let (kept, tail) = stabilize(&p, system);
    assert_eq!(
        kept,
        "You are Claude Code, Anthropic's official CLI for Claude.\n\n\
         Here is useful information about the environment you are running in:\n<env>\n\
         Working directory: /home/me/project\nIs directory a git repo: Yes\nPlatform: linux\n\
         </env>\nYou are powered by the model claude-sonnet-4-5.\n"
    );
    assert_eq!(tail.len(), 2);
    assert_eq!(tail[0], "Today's date: 2026-11-22");
    assert!(
        tail[1].starts_with("gitStatus: This is the git status"),
        "{}",
        tail[1]
    );
    assert!(tail[1].ends_with("abc1234 Fix tap"), "{}", tail[1]);
}

#[test]
fn iso_timestamps_move_and_stable_prompts_are_untouched() {
    let p = shipped("stabilize-volatile.toml");
    let (kept, tail) = stabilize(
        &p,
        "Rules.\nSnapshot taken 2026-11-22T00:17:20Z by ci\nEnd.",
    );
    assert_eq!(kept, "Rules.\nEnd.");
    assert_eq!(tail, vec!["Snapshot taken 2026-11-22T00:17:20Z by ci"]);
    let stable = "You are a helpful assistant.\nAlways answer in English.";
    assert_eq!(stabilize(&p, stable), (stable.to_string(), vec![]));
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
