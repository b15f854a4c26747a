//! Memory injection in the live proxy, trace recording, and replay of a recorded live
//! session giving exactly the token counts the live run reported.

use crate::support::*;
use serde_json::{json, Value};

use cachet::providers::usage::merge_anthropic;
use cachet::replay::{replay_arm, AsRecorded};
use cachet::trace::read_traces;
use cachet::usage::Usage;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn body(history: &[Value]) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "system": "You are terse.", "messages": history})
}

/// The emulator, and cachet in front of it recording traces into `traces/` of the folder.
async fn recording_proxy() -> (
    cachet::emulator::EmulatorHandle,
    cachet::server::ProxyHandle,
    tempfile::TempDir,
) {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&emulator.url());
    config.record.dir = Some(dir.path().join("traces"));
    let proxy = start_proxy(config).await;
    (emulator, proxy, dir)
}

/// Every request recorded in the traces of `dir`, in time order.
fn traces_in(dir: &std::path::Path) -> Vec<cachet::trace::Record> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    read_traces(&files).unwrap()
}

/// Each replayed request read from the cache, wrote to it and left uncached what its live
/// run did.
fn assert_replayed_as_live(stats: &cachet::replay::ArmStats, live: &[Usage]) {
    assert_eq!(stats.per_request.len(), live.len());
    for (i, (replayed, live)) in stats.per_request.iter().zip(live).enumerate() {
        assert_eq!(
            (replayed.cache_read, replayed.cache_write, replayed.uncached),
            (live.cache_read, live.cache_write, live.uncached),
            "request {i}"
        );
    }
}

#[tokio::test]
async fn context_hook_and_pinned_memory_in_the_live_proxy() {
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":1,"output_tokens":1}}"#,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let policies = vec![root().join("policies/memory-context-hook.toml")];
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        policies,
        &dir.path().join("a"),
    ))
    .await;
    let turn1 = vec![json!({"role": "user", "content": "How do we roll out database migrations?"})];
    assert_eq!(post_anthropic(&proxy, "ch", &body(&turn1)).await.0, 200);
    let mut turn2 = turn1.clone();
    turn2.push(json!({"role": "assistant", "content": [{"type": "text", "text": "ok"}]}));
    turn2.push(json!({"role": "user", "content": "And how are release versions tagged?"}));
    assert_eq!(post_anthropic(&proxy, "ch", &body(&turn2)).await.0, 200);
    let sent = |i: usize| -> Vec<Value> {
        let v: Value = serde_json::from_slice(&upstream.requests()[i].body).unwrap();
        v["messages"].as_array().unwrap().clone()
    };
    let first = sent(0);
    assert_eq!(
        first.len(),
        2,
        "memory inserted before the prompt: {first:?}"
    );
    assert!(first[0].to_string().contains("<memory>"));
    assert!(
        first[0].to_string().to_lowercase().contains("migration"),
        "retrieved for the prompt: {}",
        first[0]
    );
    let second = sent(1);
    assert_eq!(second.len(), 4, "{second:?}");
    assert!(
        !second[0].to_string().contains("<memory>"),
        "context-hook memory does not stay in the history"
    );
    assert!(
        second[2].to_string().contains("<memory>")
            && second[3]["content"] == "And how are release versions tagged?"
    );
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&m, "cachet_requests_total", &[("variant", "context-hook")]),
        2.0
    );
    proxy.shutdown().await;

    // Pinned: the first turn's memory stays at its place in the next turn, byte-identical.
    let policies = vec![root().join("policies/memory-pinned.toml")];
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        policies,
        &dir.path().join("b"),
    ))
    .await;
    assert_eq!(post_anthropic(&proxy, "pin", &body(&turn1)).await.0, 200);
    assert_eq!(post_anthropic(&proxy, "pin", &body(&turn2)).await.0, 200);
    let raw = |i: usize| String::from_utf8(upstream.requests()[i].body.to_vec()).unwrap();
    let (a, b) = (sent(2), sent(3));
    assert_eq!(b.len(), 5, "{b:?}");
    assert_eq!(a[0], b[0], "pinned memory kept at its original place");
    let first_raw = raw(2);
    let start = first_raw.find("<memory>").unwrap();
    let end = first_raw[start..].find("</memory>").unwrap() + start;
    assert!(
        raw(3).contains(&first_raw[start..end]),
        "byte-identical in the next turn"
    );
    assert!(
        b[3].to_string().contains("<memory>"),
        "the new turn gets its own pinned memory"
    );
    assert_eq!(
        metric_sum(
            &metrics_text(&proxy).await,
            "cachet_requests_total",
            &[("variant", "pinned")]
        ),
        2.0
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_live_session_replays_to_the_same_token_counts() {
    let sample = read_traces(&[root().join("tests/data/sample-trace.jsonl")]).unwrap();
    let (emulator, proxy, dir) = recording_proxy().await;
    let trace_dir = dir.path().join("traces");
    let mut live = Vec::new();
    for record in &sample {
        let mut request = record.body.clone();
        request["stream"] = json!(false);
        let (status, answer) = post_anthropic(&proxy, &record.session, &request).await;
        assert_eq!(status, 200, "{answer}");
        let mut u = Usage::default();
        merge_anthropic(&mut u, &answer["usage"]);
        live.push(u);
    }
    proxy.shutdown().await; // flushes the recorder
    emulator.shutdown().await;

    let recorded = traces_in(&trace_dir);
    assert_eq!(recorded.len(), sample.len());
    for (r, u) in recorded.iter().zip(&live) {
        assert_eq!(
            r.usage.as_ref(),
            Some(u),
            "the trace holds the usage the client saw"
        );
        assert!(
            r.headers.get("x-api-key").is_none(),
            "no credentials in traces"
        );
    }
    let stats = replay_arm("as-recorded", &recorded, &mut AsRecorded, None, &mut || {});
    assert_replayed_as_live(&stats, &live);
    assert!(
        stats.cache_read_tokens > 100_000,
        "{}",
        stats.cache_read_tokens
    );
}

/// A stateful Responses app (openai-python's `responses.create` with `previous_response_id`,
/// and on a Conversations API conversation) sends only its new input: the provider reads the
/// earlier turns it holds before it, and bills them. Replayed from the traces, each request
/// is accounted on the same prompt the live one was, so the token counts are the live ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_stateful_responses_session_replays_to_the_same_token_counts() {
    let (emulator, proxy, dir) = recording_proxy().await;
    let trace_dir = dir.path().join("traces");
    let post = |path: &str, body: &Value| {
        client()
            .post(format!("http://{}{path}", proxy.addr))
            .header("authorization", "Bearer sk-test")
            .json(body)
    };
    let conversation = answer_of(post("/v1/conversations", &json!({}))).await["id"].clone();
    let instructions = "You answer questions about the parser, briefly. ".repeat(150);
    let question = |i: usize| format!("Question {i}: {}", "what does this branch do? ".repeat(40));
    let mut live = Vec::new();
    let mut previous: Option<Value> = None;
    for i in 0..6 {
        let mut body = json!({"model": "gpt-4.1", "instructions": instructions,
                              "input": question(i), "stream": i % 2 == 1});
        if i < 3 {
            if let Some(id) = &previous {
                body["previous_response_id"] = id.clone();
            }
        } else {
            body["conversation"] = conversation.clone();
        }
        let response = post("/v1/responses", &body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        // The response object: the body, or the `response.completed` event's.
        let answer: Value = match text.strip_prefix('{') {
            Some(_) => serde_json::from_str(&text).unwrap(),
            None => text
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                .find(|e| e["type"] == "response.completed")
                .unwrap()["response"]
                .clone(),
        };
        previous = Some(answer["id"].clone());
        live.push(cachet::providers::usage::from_openai_responses(
            &answer["usage"],
        ));
    }
    assert!(live[2].cache_read > live[1].cache_read && live[5].cache_read > live[4].cache_read);
    proxy.shutdown().await; // flushes the recorder
    emulator.shutdown().await;

    let mut responses = traces_in(&trace_dir);
    responses.retain(|r| r.endpoint == "responses");
    assert_eq!(responses.len(), 6);
    let stats = replay_arm("as-recorded", &responses, &mut AsRecorded, None, &mut || {});
    assert_replayed_as_live(&stats, &live);
    // Each continues what the provider holds: no history to compare, so no break alarm.
    assert_eq!(stats.breaks.values().sum::<u64>(), 0, "{:?}", stats.breaks);
    assert_eq!(stats.stateful_unknown, 0);
}

#[tokio::test]
async fn ab_split_is_per_session_and_labels_metrics() {
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":1,"output_tokens":1}}"#,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let notes = root().join("tests/data/notes");
    let policy = policy_file(
        dir.path(),
        "ab",
        &format!(
            r#"
name = "memory-ab"
[[inject]]
source = {{ notes = "{}", top_k = 1 }}
mode = "ab"
ab = {{ "system-prompt" = 50, "context-hook" = 50 }}
"#,
            notes.display()
        ),
    );
    let proxy = start_proxy(policy_config(
        &upstream.url(),
        vec![policy],
        &dir.path().join("s"),
    ))
    .await;
    let arms = [
        (cachet::inject::Mode::SystemPrompt, 50),
        (cachet::inject::Mode::ContextHook, 50),
    ];
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..20 {
        let session = format!("user-{i}");
        let history =
            vec![json!({"role": "user", "content": "How are database migrations rolled out?"})];
        for _ in 0..2 {
            assert_eq!(
                post_anthropic(&proxy, &session, &body(&history)).await.0,
                200
            );
        }
        let arm = cachet::inject::choose_arm(&session, &arms).unwrap();
        *expected.entry(arm.label()).or_insert(0.0) += 2.0;
        let sent: Value =
            serde_json::from_slice(&upstream.requests().last().unwrap().body).unwrap();
        let in_system = sent["system"].to_string().contains("<memory>");
        assert_eq!(
            in_system,
            arm == cachet::inject::Mode::SystemPrompt,
            "{session} placed as its arm says: {sent}"
        );
    }
    assert_eq!(expected.len(), 2, "20 sessions fall in both arms");
    let m = metrics_text(&proxy).await;
    for (variant, n) in &expected {
        assert_eq!(
            metric_sum(&m, "cachet_requests_total", &[("variant", variant)]),
            *n,
            "{variant}"
        );
    }
    // The sessions overview shows each session's arm in its own column.
    wait_for_requests(&proxy, "user-19", 2).await;
    let page = client()
        .get(format!("http://{}/sessions", proxy.admin_addr))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let arm19 = cachet::inject::choose_arm("user-19", &arms)
        .unwrap()
        .label();
    let row = page
        .split("<tr>")
        .find(|r| r.contains(">user-19<"))
        .unwrap_or_else(|| panic!("no row for user-19: {page}"));
    assert!(
        row.contains(&format!("title=\"A/B variant\">variant {arm19}</span>")),
        "{row}"
    );
    proxy.shutdown().await;
}
