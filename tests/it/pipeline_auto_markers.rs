//! `auto` cache markers against a client that places its own poorly: the client marks its
//! system prompt and the prompt that starts the turn, so a long tool loop after it is never
//! cached. Figures from the emulator.

use crate::support::*;
use serde_json::json;

fn tool_result(i: usize) -> String {
    (0..40)
        .map(|l| {
            format!(
                "src/module_{i}/file_{l}.rs:{}: fn handler_{l}() -> Result<(), Error>",
                l * 3
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// One turn with a tool loop of `calls` calls; returns (cache read, cache write, uncached) per request.
async fn session(policies: Vec<std::path::PathBuf>, calls: usize) -> Vec<(u64, u64, u64)> {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let proxy = start_proxy(policy_config(
        &emulator.url(),
        policies,
        &dir.path().join("s"),
    ))
    .await;
    let system =
        "You are a careful coding agent. Read before you edit; run the tests. ".repeat(150);
    let mut history = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Find every handler that can fail and list them.",
        "cache_control": {"type": "ephemeral"}}]}),
    ];
    let mut usage = Vec::new();
    for i in 0..=calls {
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "grep", "description": "Search the repository", "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}}}],
            "messages": history});
        let (status, answer) = post_anthropic(&proxy, "loop", &body).await;
        assert_eq!(status, 200, "{answer}");
        let u = &answer["usage"];
        usage.push((
            u["cache_read_input_tokens"].as_u64().unwrap(),
            u["cache_creation_input_tokens"].as_u64().unwrap(),
            u["input_tokens"].as_u64().unwrap(),
        ));
        let id = format!("toolu_{i}");
        history.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "grep", "input": {"pattern": format!("fn handler_{i}")}}]}));
        history.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": tool_result(i)}]}));
    }
    proxy.shutdown().await;
    emulator.shutdown().await;
    usage
}

#[tokio::test]
async fn auto_markers_read_more_than_the_clients_own_in_a_long_tool_loop() {
    let client_markers = session(vec![], 14).await;
    let policy = format!(
        "{}/policies/anthropic-auto-breakpoints.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let auto = session(vec![policy.into()], 14).await;
    let total = |u: &[(u64, u64, u64)]| {
        u.iter()
            .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    };
    let (client_read, _, client_uncached) = total(&client_markers);
    let (auto_read, _, auto_uncached) = total(&auto);
    eprintln!("client markers: read {client_read}, uncached {client_uncached}; auto: read {auto_read}, uncached {auto_uncached}");
    // With the client's markers every tool result is sent uncached again on each call.
    assert!(client_uncached > 50_000, "{client_markers:?}");
    // cachet's markers follow the loop: each call reads everything before its new blocks.
    assert!(
        auto_read > 2 * client_read,
        "auto {auto_read} vs client {client_read}"
    );
    assert!(auto_uncached < client_uncached / 10, "{auto:?}");
    let (last_read, last_write, _) = *auto.last().unwrap();
    assert!(
        last_read > 10 * last_write,
        "the last call reads the loop so far and writes only its new blocks: {auto:?}"
    );
}

/// A GPT-5.6 request in `explicit` caching mode with no breakpoint caches nothing (openai-
/// python `PromptCacheOptions`: "If there are no explicit breakpoints, the request does not
/// use prompt caching"); through a policy with `mode = "auto"` it gets breakpoints and the
/// next request of the conversation reads.
#[tokio::test]
async fn gpt_5_6_explicit_mode_gets_breakpoints_from_an_auto_policy() {
    let reads = |policies: Vec<std::path::PathBuf>| async move {
        let emulator = start_emulator().await;
        let dir = tempfile::tempdir().unwrap();
        let proxy = start_proxy(policy_config(
            &emulator.url(),
            policies,
            &dir.path().join("s"),
        ))
        .await;
        let system = "You are a careful coding agent. Read before you edit. ".repeat(150);
        let mut messages = vec![
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": "Find the handlers."}),
        ];
        let mut out = Vec::new();
        for i in 0..2 {
            let body = json!({"model": "gpt-5.6", "prompt_cache_options": {"mode": "explicit"}, "messages": messages});
            let answer: serde_json::Value = client()
                .post(format!("http://{}/v1/chat/completions", proxy.addr))
                .header("authorization", "Bearer sk-test")
                .header("x-cachet-session", "gpt")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            out.push(
                answer["usage"]["prompt_tokens_details"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0),
            );
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
            messages.push(json!({"role": "user", "content": "Go on."}));
        }
        proxy.shutdown().await;
        emulator.shutdown().await;
        out
    };
    assert_eq!(reads(vec![]).await, [0, 0]);
    let dir = tempfile::tempdir().unwrap();
    let policy = policy_file(
        dir.path(),
        "auto",
        "name = \"auto\"\n[match]\nprovider = [\"openai\"]\n[breakpoints]\nmode = \"auto\"\n",
    );
    let shaped = reads(vec![policy]).await;
    assert!(shaped[1] > 0, "{shaped:?}");
}
