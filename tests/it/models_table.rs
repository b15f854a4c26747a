//! The model table extended without a release: `--models PATH` rows are tried before the
//! shipped ones, and a model no row knows is reported as unpriced, never priced as another.

use std::process::Command;

use serde_json::{json, Value};

fn trace(dir: &std::path::Path, model: &str) -> std::path::PathBuf {
    let path = dir.join("trace.jsonl");
    let system = "Follow the house style. ".repeat(400);
    let lines: Vec<String> = (0..3)
        .map(|i| {
            json!({"v": 1, "time": format!("2026-01-15T09:00:0{i}Z"), "session": "s",
                "provider": "anthropic", "endpoint": "messages", "path": "/v1/messages",
                "body": {"model": model, "max_tokens": 8,
                    "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                    "messages": [{"role": "user", "content": format!("question {i}")}]},
                "usage": {"cache_read": 0, "cache_write": 0, "cache_write_5m": 0,
                    "cache_write_1h": 0, "uncached": 0, "output": 10},
                "status": 200})
            .to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn replay(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .arg("replay")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let doc = serde_json::from_str(&stdout).unwrap_or(Value::String(stdout));
    (
        out.status.success(),
        doc,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn an_unknown_model_is_unpriced_until_a_user_row_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path(), "claude-opus-9-test");
    let t = trace.to_str().unwrap();
    let (ok, doc, stderr) = replay(&[t, "--json"]);
    assert!(ok, "{stderr}");
    let arm = &doc["arms"][0];
    assert_eq!(arm["unpriced_requests"], 3);
    assert_eq!(arm["cost_usd"], 0.0);
    assert!(stderr.contains("claude-opus-9-test"), "{stderr}");
    let (ok, table, _) = replay(&[t]);
    assert!(ok);
    assert!(table.as_str().unwrap().contains("unknown"), "{table}");

    let models = dir.path().join("models.toml");
    std::fs::write(
        &models,
        r#"[[model]]
match = "claude-opus-9-test"
provider = "anthropic"
min_cacheable_tokens = 1024
context_window = 1000000
input = 10.0
output = 50.0
cache_read = 1.0
cache_write_5m = 12.5
cache_write_1h = 20.0
"#,
    )
    .unwrap();
    let (ok, doc, stderr) = replay(&[t, "--json", "--models", models.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let arm = &doc["arms"][0];
    assert_eq!(arm["unpriced_requests"], 0);
    assert!(arm["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(arm["cache_read_tokens"].as_u64().unwrap() > 0);
    assert!(!stderr.contains("not in the model table"), "{stderr}");
}

#[test]
fn a_bad_models_file_is_refused_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let trace = trace(dir.path(), "claude-sonnet-4-5");
    let models = dir.path().join("bad-models.toml");
    std::fs::write(&models, "[[model]]\nmatch = \"x\"\n").unwrap();
    let (ok, _, stderr) = replay(&[
        trace.to_str().unwrap(),
        "--models",
        models.to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("bad-models.toml"), "{stderr}");
}
