//! `cachet replay --ideal`: the JSON contract of issue 15 and the table row, on the shipped
//! sample trace, through the binary.

use std::process::Command;

use serde_json::Value;

fn replay(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn json_has_the_ideal_and_each_arms_share_of_it() {
    let out = replay(&[
        "tests/data/sample-trace.jsonl",
        "--arm",
        "recorded",
        "--arm",
        "system-prompt=policies/memory-system-prompt.toml",
        "--ideal",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ideal = &doc["ideal"];
    let read = ideal["cache_read_tokens"].as_u64().unwrap();
    let input = ideal["input_tokens"].as_u64().unwrap();
    assert!(read > 0 && read <= input);
    assert!((ideal["share"].as_f64().unwrap() - read as f64 / input as f64).abs() < 1e-9);
    let marked = &ideal["marked"];
    for key in ["cache_read_tokens", "input_tokens", "share"] {
        assert!(marked.get(key).is_some(), "marked.{key} missing");
    }
    assert!(marked["cache_read_tokens"].as_u64().unwrap() <= read);
    for arm in doc["arms"].as_array().unwrap() {
        let share = arm["share_of_ideal"].as_f64().unwrap();
        let expected = arm["cache_read_tokens"].as_u64().unwrap() as f64 / read as f64;
        assert!((share - expected).abs() < 1e-9, "{arm}");
    }
    // The client's markers already reach the ideal on this trace; the policy arm reads less.
    let arms = doc["arms"].as_array().unwrap();
    assert!(
        arms[0]["share_of_ideal"].as_f64().unwrap() > arms[1]["share_of_ideal"].as_f64().unwrap()
    );
}

#[test]
fn the_table_states_the_ideal_and_without_the_flag_nothing_changes() {
    let out = replay(&["tests/data/sample-trace.jsonl", "--ideal"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ideal cache reads:") && text.contains("share of ideal"),
        "{text}"
    );
    let plain = replay(&["tests/data/sample-trace.jsonl", "--json"]);
    let doc: Value = serde_json::from_slice(&plain.stdout).unwrap();
    assert!(doc.get("ideal").is_none());
    assert!(doc["arms"][0].get("share_of_ideal").is_none());
}
