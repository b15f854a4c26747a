//! `cachet replay` on the shipped sample trace and policies, through the binary.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn cachet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(root())
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn json_output_has_every_arm_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("chart.svg");
    let out = cachet(&[
        "replay",
        "tests/data/sample-trace.jsonl",
        "--arm",
        "recorded",
        "--arm",
        "system-prompt=policies/memory-system-prompt.toml",
        "--arm",
        "pinned=policies/memory-pinned.toml",
        "--json",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arms = doc["arms"].as_array().unwrap();
    let names: Vec<&str> = arms.iter().map(|a| a["arm"].as_str().unwrap()).collect();
    assert_eq!(names, ["recorded", "system-prompt", "pinned"]);
    for a in arms {
        for key in [
            "requests",
            "cache_read_tokens",
            "cache_write_tokens",
            "uncached_tokens",
            "output_tokens",
            "hit_ratio",
            "cost_usd",
            "breaks",
        ] {
            assert!(a.get(key).is_some(), "{key} missing in {a}");
        }
        assert_eq!(a["requests"], 47);
    }
    // Replayed as recorded, the trace reads what it read live.
    let recorded: u64 = cachet::trace::read_traces(&["tests/data/sample-trace.jsonl".into()])
        .unwrap()
        .iter()
        .map(|r| r.usage.map_or(0, |u| u.cache_read))
        .sum();
    assert_eq!(arms[0]["cache_read_tokens"], recorded);
    assert!(
        arms[1]["breaks"]["system"].as_u64().unwrap() > 0,
        "system-prompt memory breaks"
    );
    assert_eq!(
        arms[2]["breaks"]["messages"], 0,
        "pinned memory keeps the prefix"
    );
    assert!(arms[2]["break_reasons"].is_object());
    // The guard: each request a shaping arm paid more for than the recorded arm did.
    assert!(arms[0].get("losses").is_none(), "the client alone has none");
    for arm in &arms[1..] {
        let losses = arm["losses"].as_array().unwrap();
        assert!(!losses.is_empty(), "the notes cost more: {arm}");
        for loss in losses {
            assert!(loss["cost_usd"].as_f64() > loss["client_cost_usd"].as_f64());
        }
    }
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 6);
}

/// The guard under the table names the requests an arm paid more for than the client
/// alone, with the client alone replayed for it when no arm is.
#[test]
fn the_guard_lists_the_requests_that_cost_more_than_the_client_alone() {
    let out = cachet(&[
        "replay",
        "tests/data/traces/pi-anthropic.jsonl.gz",
        "--arm",
        "1h=tests/data/traces/arms/ttl-1h.toml",
        "--arm",
        "5m=tests/data/traces/arms/ttl-5m.toml",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    let guard = table
        .split_once("requests that cost more than the client alone (the requests as recorded):\n")
        .expect("the guard")
        .1;
    let line = |arm: &str| {
        guard
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{arm} ")))
            .unwrap_or_else(|| panic!("no line for {arm}: {table}"))
            .to_string()
    };
    // Every 1h write costs more than the client's 5m one; pi's own markers are 5m, so the
    // 5m arm pays what the client paid.
    assert!(line("1h").contains(" of 39, +$"), "{table}");
    assert!(line("5m").ends_with("none"), "{table}");
}

#[test]
fn table_output_and_model_override() {
    let out = cachet(&[
        "replay",
        "tests/data/sample-trace.jsonl",
        "--arm",
        "as-recorded",
        "--model",
        "claude-opus-4-5",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("as-recorded"), "{table}");
    assert!(table.contains("breaks: system"), "{table}");
    // Opus 4.5 needs 4096 tokens before anything is cached, so early requests write nothing
    // and the hit ratio is below the Sonnet figure of 96.9%.
    assert!(!table.contains("96.9%"), "{table}");
}

#[test]
fn bad_input_is_a_clear_error() {
    let out = cachet(&[
        "replay",
        "tests/data/sample-trace.jsonl",
        "--arm",
        "x=no/such/policy.toml",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no/such/policy.toml"), "{err}");
    let out = cachet(&["replay", "Cargo.toml"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Cargo.toml:1"));
}
