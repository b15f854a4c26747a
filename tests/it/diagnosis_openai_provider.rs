//! OpenAI's own cache diagnosis beside cachet's. With `[diagnostics] provider = true`, a
//! Responses request on a model that has prompt cache diagnostics ("GPT-5.6 and later
//! supported models") names its lane's previous answer in
//! `prompt_cache_options.comparison_response_id`, and the `prompt_cache_diagnostics` of its
//! answer (`cache_hit`, or `cache_miss` with a `reason` such as `tools_changed`:
//! developers.openai.com/api/docs/guides/prompt-caching/diagnostics) is recorded as the
//! request's `provider_diagnosis`; a disagreement with cachet's own is counted.

use serde_json::{json, Value};

use crate::support::*;

/// A Codex-shaped request of `steps` tool calls, with instructions `rules` times long.
fn request(model: &str, steps: usize, rules: usize) -> Value {
    let tool = "shell";
    let mut input = vec![json!({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Rename the config loader and fix its callers."}]})];
    for i in 0..steps {
        input.push(
            json!({"type": "function_call", "name": tool, "call_id": format!("call_{i}"),
            "arguments": format!("{{\"command\":[\"rg\",\"load_config\",\"src/m{i}\"]}}")}),
        );
        input.push(
            json!({"type": "function_call_output", "call_id": format!("call_{i}"),
            "output": format!("src/m{i}/lib.rs:12: let c = load_config(path)?;")}),
        );
    }
    json!({"model": model, "instructions": "You are a coding agent. Follow the repository's conventions. ".repeat(rules),
        "input": input,
        "tools": [{"type": "function", "name": tool, "description": "Runs a command.",
            "parameters": {"type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}],
        "tool_choice": "auto", "parallel_tool_calls": false, "store": false, "stream": true,
        "prompt_cache_key": "o"})
}

#[tokio::test]
async fn openai_prompt_cache_diagnostics_are_recorded_beside_cachets() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(
        dir.path(),
        "diagnostics",
        "name = \"diagnostics\"\n[diagnostics]\nprovider = true\n",
    );
    let emulator = start_emulator().await;
    let proxy = start_proxy(policy_config(
        &emulator.url(),
        vec![policy],
        &dir.path().join("store"),
    ))
    .await;
    let mut sent = 0;
    for body in [
        request("gpt-5.6", 1, 120),
        request("gpt-5.6", 2, 120),
        // The instructions change: OpenAI names it `input_changed`, cachet
        // `system_changed`, which is the same break.
        request("gpt-5.6", 3, 121),
    ] {
        let resp = client()
            .post(format!("http://{}/v1/responses", proxy.addr))
            .header("authorization", "Bearer k")
            .header("session-id", "o")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        sent += 1;
        wait_for_requests(&proxy, "o", sent).await;
    }
    let log = wait_for_requests(&proxy, "o", 3).await;
    let requests = request_entries(&log);
    assert!(
        requests[0].get("provider_diagnosis").is_none(),
        "no previous answer to compare with"
    );
    assert_eq!(
        requests[1]["provider_diagnosis"]["type"], "cache_hit",
        "{}",
        requests[1]
    );
    let changed = &requests[2]["provider_diagnosis"];
    assert_eq!(changed["type"], "cache_miss", "{}", requests[2]);
    assert_eq!(changed["reason"], "input_changed");
    assert_eq!(requests[2]["diagnosis"]["reason"], "system_changed");
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&metrics, "cachet_diagnosis_disagreements_total", &[]),
        0.0
    );
    proxy.shutdown().await;
}

/// A model without diagnostics is sent as the client sent it: nothing is asked.
#[tokio::test]
async fn an_older_model_is_not_asked_for_openai_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(
        dir.path(),
        "diagnostics",
        "name = \"diagnostics\"\n[diagnostics]\nprovider = true\n",
    );
    let emulator = start_emulator().await;
    let proxy = start_proxy(policy_config(
        &emulator.url(),
        vec![policy],
        &dir.path().join("store"),
    ))
    .await;
    for steps in [1, 2] {
        let resp = client()
            .post(format!("http://{}/v1/responses", proxy.addr))
            .header("authorization", "Bearer k")
            .header("session-id", "o")
            .json(&request("gpt-5.1-codex", steps, 120))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        wait_for_requests(&proxy, "o", steps as u64).await;
    }
    let log = wait_for_requests(&proxy, "o", 2).await;
    for r in request_entries(&log) {
        assert!(r.get("provider_diagnosis").is_none(), "{r}");
    }
    proxy.shutdown().await;
}
