//! The live what-if of `cachet serve`: a monitored session through the proxy and the
//! emulator is predicted, off the request path, under each candidate policy as `cachet
//! replay --arm` predicts it from the same session's `--record` trace; the metric, the
//! session's JSON and the overview show it.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::*;

const SESSION: &str = "whatif-live";

/// The shipped candidates `cachet serve` follows by default.
const CANDIDATES: [&str; 3] = [
    "anthropic-auto-breakpoints",
    "stabilize-volatile",
    "openai-cache-key",
];

/// Of those, the ones whose policies match an Anthropic Messages session.
const ANTHROPIC: [&str; 2] = ["anthropic-auto-breakpoints", "stabilize-volatile"];

/// Two costs equal but for the rounding of float sums.
fn same(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The session's `whatif` once it has followed `n` requests.
async fn wait_for_whatif(proxy: &cachet::server::ProxyHandle, n: u64) -> Value {
    for _ in 0..3000 {
        let r = reqwest::get(format!("http://{}/sessions/{SESSION}", proxy.admin_addr))
            .await
            .unwrap();
        if r.status() == 200 {
            let v: Value = r.json().await.unwrap();
            if v["whatif"]["requests"].as_u64() == Some(n) {
                return v["whatif"].clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the what-if never followed {n} requests of {SESSION}");
}

fn replay(traces: &std::path::Path) -> Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = vec![
        "replay".to_owned(),
        traces.display().to_string(),
        "--json".into(),
        "--arm".into(),
        "client".into(),
    ];
    for name in CANDIDATES {
        args.extend(["--arm".into(), format!("{name}=policies/{name}.toml")]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .current_dir(root)
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A Claude Code-like session that marks nothing for caching: a long system prompt and a
/// conversation that grows by a turn each request.
#[tokio::test]
async fn the_live_prediction_is_replays_arm_on_the_sessions_trace() {
    let emulator = start_emulator().await;
    let traces = tempfile::tempdir().unwrap();
    let mut config = test_config(&format!("http://{}", emulator.addr));
    config.record.dir = Some(traces.path().to_path_buf());
    config.sessions.whatif = true;
    let store = config.sessions.store.clone();
    let proxy = start_proxy(config).await;
    let system =
        "You are a careful coding agent. Read the files before you edit them. ".repeat(150);
    let mut messages = Vec::new();
    let turns = 4;
    for turn in 0..turns {
        messages.push(
            json!({"role": "user", "content": format!("Step {turn}: fix the next failing test.")}),
        );
        let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
            "system": system, "messages": messages});
        let (status, answer) = post_anthropic(&proxy, SESSION, &body).await;
        assert_eq!(status, 200, "{answer}");
        messages.push(json!({"role": "assistant", "content": answer["content"].clone()}));
    }
    let whatif = wait_for_whatif(&proxy, turns).await;
    let metrics = metrics_text(&proxy).await;
    let page = client()
        .get(format!("http://{}/sessions", proxy.admin_addr))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let timeline = client()
        .get(format!(
            "http://{}/sessions/{SESSION}/timeline",
            proxy.admin_addr
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    proxy.shutdown().await;
    emulator.shutdown().await;

    // The timeline: beside each request's real reads (none: the client marks nothing),
    // what the best candidate would have read.
    assert!(timeline.contains("could read"), "{timeline}");
    let predicted: Vec<&str> = (timeline.split("<td class=\"whatif\""))
        .skip(1)
        .map(|cell| cell.split('>').nth(1).unwrap().split('<').next().unwrap())
        .collect();
    assert_eq!(predicted.len(), turns as usize, "{timeline}");
    assert_eq!(predicted[0], "0");
    assert!(predicted[1..].iter().all(|n| *n != "0"), "{predicted:?}");

    // `cachet replay` of the session's trace, an arm per candidate.
    let recorded = cachet::trace::read_traces(&[traces.path().to_path_buf()]).unwrap();
    assert_eq!(recorded.len(), turns as usize);
    assert!(recorded.iter().all(|r| r.session == SESSION));
    let replayed = replay(traces.path());
    let arm = |name: &str| -> f64 {
        let arms = replayed["arms"].as_array().unwrap();
        let found = arms.iter().find(|a| a["arm"] == name).unwrap();
        found["cost_usd"].as_f64().unwrap()
    };
    let f = |v: &Value| v.as_f64().unwrap();
    let client_cost = f(&whatif["client_cost_usd"]);
    assert!(client_cost > 0.0, "{whatif}");
    assert!(same(client_cost, arm("client")), "{whatif} {replayed}");
    let live = whatif["candidates"].as_array().unwrap();
    let names: Vec<&str> = live
        .iter()
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    // A candidate is evaluated on the sessions of the APIs it matches only.
    assert_eq!(names, ANTHROPIC);
    // What the provider billed, from the real usage: the emulator's accounting is the
    // cache model's, so the client as sent is predicted to cost what it was billed.
    let billed = f(&whatif["billed"]["cost_usd"]);
    assert!(same(billed, client_cost), "{whatif}");
    assert!(
        f(&whatif["billed"]["hit_ratio"]) < f(&live[0]["hit_ratio"]),
        "{whatif}"
    );
    for c in live {
        let name = c["candidate"].as_str().unwrap();
        assert!(same(f(&c["cost_usd"]), arm(name)), "{name}: {c} {replayed}");
        assert!(same(f(&c["saving_usd"]), client_cost - f(&c["cost_usd"])));
        // One session followed: the fleet's counter is the session's figure.
        let counted = metric_value(
            &metrics,
            "cachet_whatif_cost_usd_total",
            &[("candidate", name)],
        );
        assert!(
            same(counted.unwrap(), f(&c["cost_usd"])),
            "{name}: {metrics}"
        );
    }
    let counted = metric_value(
        &metrics,
        "cachet_whatif_cost_usd_total",
        &[("candidate", "client")],
    );
    assert!(same(counted.unwrap(), client_cost));
    // The client marks nothing: the candidate that places markers reads the system prompt
    // from cache on every request after the first; the others change nothing here.
    let auto = &live[0];
    assert!(f(&auto["saving_usd"]) > 0.0, "{whatif}");
    for other in &live[1..] {
        assert!(same(f(&other["saving_usd"]), 0.0), "{other}");
    }
    assert_eq!(
        metric_value(
            &metrics,
            "cachet_whatif_skipped_total",
            &[("cause", "queue_full")]
        ),
        Some(0.0)
    );
    // The overview: under the session's savings, what its best candidate could save; the
    // fleet's table.
    let saving = format!("${:.4}", f(&auto["saving_usd"]));
    assert!(page.contains("could save"), "{page}");
    assert!(
        page.contains("What the candidate policies could save"),
        "{page}"
    );
    let row = page.split("<tr>").find(|r| r.contains(SESSION)).unwrap();
    assert!(row.contains(&format!("could save {saving}")), "{row}");
    assert!(row.contains("anthropic-auto-breakpoints"), "{row}");

    // `cachet advise --store`: the same figures, kept beside the embedded store.
    let kept = PathBuf::from(&store).join("sessions.whatif.json");
    for _ in 0..500 {
        let text = std::fs::read_to_string(&kept).unwrap_or_default();
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v["sessions"][SESSION]["requests"] == turns {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["advise", "--store", &store, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let advised: Value = serde_json::from_slice(&out.stdout).unwrap();
    let advised = advised["candidates"].as_array().unwrap();
    assert_eq!(advised.len(), ANTHROPIC.len(), "{advised:?}");
    for (a, c) in advised.iter().zip(live) {
        assert_eq!(a["candidate"], c["candidate"]);
        assert_eq!(a["sessions"], 1);
        assert!(same(f(&a["saving_usd"]), f(&c["saving_usd"])), "{a} {c}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["advise", "--store", &store])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("anthropic-auto-breakpoints"), "{table}");
}
/// `sessions.whatif = false` turns it off: no figures, no series, nothing on the page.
#[tokio::test]
async fn the_switch_turns_it_off() {
    let emulator = start_emulator().await;
    let mut config = test_config(&format!("http://{}", emulator.addr));
    config.sessions.whatif = false;
    let proxy = start_proxy(config).await;
    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello"}]});
    assert_eq!(post_anthropic(&proxy, SESSION, &body).await.0, 200);
    let log = wait_for_requests(&proxy, SESSION, 1).await;
    assert!(log.get("whatif").is_none(), "{log}");
    let metrics = metrics_text(&proxy).await;
    assert!(
        !metrics.contains("cachet_whatif_cost_usd_total{"),
        "{metrics}"
    );
    proxy.shutdown().await;
    emulator.shutdown().await;
}

/// An SDK program that names no session, whose system prompt carries the date: at
/// midnight the prompt changes and the session log still follows the conversation (by its
/// history). The what-if works after the answer, on the session the log gave the request,
/// so it follows both requests there; the upstream gets the client's bytes unchanged.
#[tokio::test]
async fn the_whatif_follows_the_session_the_log_identified_and_changes_no_byte() {
    let answer = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn","usage":{"input_tokens":1200,"output_tokens":3}}"#;
    let upstream = FakeUpstream::start(Script::json(200, answer)).await;
    let mut config = test_config(&upstream.url());
    config.sessions.whatif = true;
    let proxy = start_proxy(config).await;
    let system = |date: &str| {
        format!(
            "You are a careful coding agent. Today's date is {date}. {}",
            "Read the files before you edit them. ".repeat(150)
        )
    };
    let first = format!(
        "{{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":64,\"system\":{},\n \"messages\":[{{\"role\":\"user\",\"content\":\"Read the README.\"}},{{\"role\":\"assistant\",\"content\":\"Read.\"}},{{\"role\":\"user\",\"content\":\"Fix the failing test.\"}}]}}",
        json!(system("2026-03-09"))
    );
    let second = format!(
        "{{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":64,\"system\":{},\n \"messages\":[{{\"role\":\"user\",\"content\":\"Read the README.\"}},{{\"role\":\"assistant\",\"content\":\"Read.\"}},{{\"role\":\"user\",\"content\":\"Fix the failing test.\"}},{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"Done.\"}}]}},{{\"role\":\"user\",\"content\":\"Now run the suite.\"}}]}}",
        json!(system("2026-03-10"))
    );
    for (i, body) in [&first, &second].into_iter().enumerate() {
        let r = client()
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
        if i == 0 {
            wait_for_sessions(&proxy, 1).await;
        }
    }
    // Both requests written, under one session.
    let mut listed = Vec::new();
    for _ in 0..500 {
        listed = wait_for_sessions(&proxy, 1).await;
        let requests: u64 = listed.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
        if requests == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(listed.len(), 1, "{listed:?}");
    let id = listed[0]["id"].as_str().unwrap().to_owned();
    wait_for_requests(&proxy, &id, 2).await;
    let mut followed = None;
    for _ in 0..500 {
        let v: Value = reqwest::get(format!("http://{}/sessions/{id}", proxy.admin_addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        followed = v["whatif"]["requests"].as_u64();
        if followed == Some(2) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(followed, Some(2), "the what-if follows the log's session");
    let got = upstream.requests();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].body, first.as_bytes());
    assert_eq!(got[1].body, second.as_bytes());
    proxy.shutdown().await;
}

/// The `whatif` of session `id` once `ready` says it is complete.
async fn whatif_when(
    proxy: &cachet::server::ProxyHandle,
    id: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..1000 {
        let r = reqwest::get(format!("http://{}/sessions/{id}", proxy.admin_addr))
            .await
            .unwrap();
        if r.status() == 200 {
            let v: Value = r.json().await.unwrap();
            if ready(&v["whatif"]) {
                return v["whatif"].clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the what-if of {id} never got there");
}

/// An OpenAI Chat session (as the openai SDK sends it) is evaluated with the shipped
/// candidates whose policies match Chat, never with `anthropic-auto-breakpoints`.
#[tokio::test]
async fn a_chat_session_is_evaluated_with_the_candidates_of_its_api() {
    let emulator = start_emulator().await;
    let mut config = test_config(&format!("http://{}", emulator.addr));
    config.sessions.whatif = true;
    let proxy = start_proxy(config).await;
    let system = "You are a careful coding agent. Read the files before you edit them. ".repeat(80);
    let mut messages = vec![json!({"role": "system", "content": system})];
    for turn in 0..2 {
        messages.push(json!({"role": "user", "content": format!("Step {turn}: fix it.")}));
        let r = client()
            .post(format!("http://{}/v1/chat/completions", proxy.addr))
            .header("authorization", "Bearer k")
            .header("x-cachet-session", "whatif-chat")
            .json(&json!({"model": "gpt-4o", "messages": messages}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let answer: Value = r.json().await.unwrap();
        messages.push(answer["choices"][0]["message"].clone());
    }
    let whatif = whatif_when(&proxy, "whatif-chat", |w| w["requests"] == 2).await;
    proxy.shutdown().await;
    emulator.shutdown().await;
    let names: Vec<&str> = (whatif["candidates"].as_array().unwrap().iter())
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"openai-cache-key"), "{whatif}");
    assert!(!names.contains(&"anthropic-auto-breakpoints"), "{whatif}");
    assert!(
        whatif["billed"]["cost_usd"].as_f64().unwrap() > 0.0,
        "{whatif}"
    );
}

/// A session that sends a body over `sessions.whatif_max_request_bytes` is no longer
/// followed, and each of its requests is counted; the request itself goes as it came.
#[tokio::test]
async fn a_request_over_the_bound_stops_the_session_and_is_counted() {
    let emulator = start_emulator().await;
    let mut config = test_config(&format!("http://{}", emulator.addr));
    config.sessions.whatif = true;
    config.sessions.whatif_max_request_bytes = 2048;
    let proxy = start_proxy(config).await;
    let small = json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello"}]});
    let large = json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
        "messages": [{"role": "user", "content": "hello ".repeat(1000)}]});
    for body in [&small, &large, &small] {
        assert_eq!(post_anthropic(&proxy, "whatif-bound", body).await.0, 200);
    }
    let whatif = whatif_when(&proxy, "whatif-bound", |w| {
        w["skipped"] == "request_too_large"
    })
    .await;
    wait_for_requests(&proxy, "whatif-bound", 3).await;
    let mut counted = None;
    for _ in 0..500 {
        let metrics = metrics_text(&proxy).await;
        let skipped = &[("cause", "request_too_large")];
        counted = metric_value(&metrics, "cachet_whatif_skipped_total", skipped);
        if counted == Some(2.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    proxy.shutdown().await;
    emulator.shutdown().await;
    assert_eq!(whatif["requests"], 1, "{whatif}");
    assert_eq!(counted, Some(2.0));
}
