//! `cachet advise` on the repository's real-client traces, through the binary: each
//! candidate's figures are those of `cachet replay`'s arm for it on the same traces, and
//! the client's those of the arm that replays them as recorded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cachet_json(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(root())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Two costs equal but for the rounding of float sums.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn advise_agrees_with_replay_for_every_shipped_candidate() {
    let traces = "tests/data/traces";
    let advice = cachet_json(&["advise", traces, "--json"]);
    let candidates = advice["candidates"].as_array().unwrap();
    let names: Vec<&str> = candidates
        .iter()
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    // The traces are Anthropic sessions: OpenAI's candidate matches none of them.
    assert_eq!(names, ["anthropic-auto-breakpoints", "stabilize-volatile"]);
    let mut args = vec!["replay", traces, "--json", "--arm", "client"];
    let arms: Vec<String> = names
        .iter()
        .map(|n| format!("{n}=policies/{n}.toml"))
        .collect();
    for arm in &arms {
        args.extend(["--arm", arm.as_str()]);
    }
    let replay = cachet_json(&args);
    let arm = |name: &str| -> Value {
        replay["arms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["arm"] == name)
            .cloned()
            .unwrap()
    };
    let client = arm("client");
    let sessions = cachet::trace::read_traces(&[root().join(traces)])
        .unwrap()
        .iter()
        .map(|r| r.session.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    for c in candidates {
        let name = c["candidate"].as_str().unwrap();
        let replayed = arm(name);
        let f = |v: &Value| v.as_f64().unwrap();
        assert_eq!(c["sessions"], sessions, "{c}");
        assert!(
            same(f(&c["cost_usd"]), f(&replayed["cost_usd"])),
            "{name}: {c} {replayed}"
        );
        assert!(
            same(f(&c["client_cost_usd"]), f(&client["cost_usd"])),
            "{name}: {c}"
        );
        assert!(
            same(f(&c["hit_ratio"]), f(&replayed["hit_ratio"])),
            "{name}"
        );
        // Session by session, the figures add up to the whole.
        let per: Vec<&Value> = c["per_session"].as_array().unwrap().iter().collect();
        let sum = |key: &str| per.iter().map(|s| f(&s[key])).sum::<f64>();
        assert!(
            same(sum("client_cost_usd"), f(&c["client_cost_usd"])),
            "{c}"
        );
        // The sessions that cost more are listed, each with what it cost more.
        let costlier: BTreeMap<&str, f64> = per
            .iter()
            .filter(|s| f(&s["cost_usd"]) > f(&s["client_cost_usd"]) + 1e-9)
            .map(|s| (s["session"].as_str().unwrap(), f(&s["cost_usd"])))
            .collect();
        let listed: Vec<&str> = c["costlier"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session"].as_str().unwrap())
            .collect();
        assert_eq!(listed.len(), costlier.len(), "{c}");
        assert!(listed.iter().all(|s| costlier.contains_key(s)), "{c}");
        let cheaper = per
            .iter()
            .filter(|s| f(&s["cost_usd"]) + 1e-9 < f(&s["client_cost_usd"]))
            .count();
        assert_eq!(c["cheaper"], cheaper);
    }
}

#[test]
fn the_table_names_each_candidate_and_a_candidate_needs_a_policy() {
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(root())
        .args(["advise", "tests/data/sample-trace.jsonl"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("candidate"), "{text}");
    assert!(text.contains("anthropic-auto-breakpoints"), "{text}");
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(root())
        .args([
            "advise",
            "tests/data/sample-trace.jsonl",
            "--candidate",
            "x",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("names no policy file"));
}
