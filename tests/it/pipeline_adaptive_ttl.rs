//! `[breakpoints] ttl = "auto"` and keep-warm, live through the proxy in front of the
//! emulator: the decision in the session log, the keep-warm request after a final answer,
//! and what the next turn reads after a pause longer than 5 minutes.
//!
//! Lifetimes and prices: docs.claude.com prompt caching ("The cache has a minimum 5-minute
//! lifetime", "1-hour cache" written at 2x the base input price, reads at 0.1x).

use std::time::Duration;

use crate::support::*;
use cachet::server::ProxyHandle;
use serde_json::{json, Value};

const MINUTE: u64 = 60;

fn policy(dir: &std::path::Path, keep_warm_after: Option<u64>) -> std::path::PathBuf {
    let keep_warm = keep_warm_after
        .map(|s| format!("keep_warm = true\nkeep_warm_after_secs = {s}\n"))
        .unwrap_or_default();
    policy_file(
        dir,
        "adaptive",
        &format!(
            "name = \"adaptive\"\n[match]\nprovider = [\"anthropic\"]\n[breakpoints]\nmode = \"auto\"\nttl = \"auto\"\n{keep_warm}"
        ),
    )
}

/// How the test's client sends its requests.
#[derive(Clone, Copy)]
struct Sender<'a> {
    /// A subscription's bearer token; an API key otherwise.
    auth: Option<&'a str>,
    /// pi's extended thinking on a budget, with the interleaved-thinking beta it sends:
    /// each answer goes back with a thinking block.
    thinking: bool,
}

const API_KEY: Sender<'static> = Sender {
    auth: None,
    thinking: false,
};

fn request(history: &[Value], thinking: bool) -> Value {
    let system =
        "You are a careful coding agent. Read before you edit; run the tests. ".repeat(150);
    let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 100, "system": system,
        "tools": [{"name": "grep", "description": "Search the repository", "input_schema": {"type": "object"}}],
        "messages": history});
    if thinking {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
        body["max_tokens"] = json!(6144);
    }
    body
}

/// One turn: a prompt, `calls` tool calls answered by the test, and the emulator's final
/// text answer, appended to `history` as the client would. Returns each request's usage.
async fn turn(
    proxy: &ProxyHandle,
    session: &str,
    sender: Sender<'_>,
    history: &mut Vec<Value>,
    prompt: &str,
    calls: usize,
) -> Vec<Value> {
    history.push(json!({"role": "user", "content": [{"type": "text", "text": prompt}]}));
    let mut usage = Vec::new();
    for i in 0..=calls {
        let mut req = client()
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("anthropic-version", "2023-06-01")
            .header("x-cachet-session", session)
            .json(&request(history, sender.thinking));
        req = match sender.auth {
            Some(token) => req.header("authorization", format!("Bearer {token}")),
            None => req.header("x-api-key", "sk-ant-api03-test"),
        };
        if sender.thinking {
            req = req.header("anthropic-beta", "interleaved-thinking-2025-05-14");
        }
        let answer: Value = req.send().await.unwrap().json().await.unwrap();
        usage.push(answer["usage"].clone());
        let mut content = Vec::new();
        if sender.thinking {
            content.push(json!({"type": "thinking", "thinking": format!("Step {i}: look again."), "signature": format!("sig{i}")}));
        }
        if i < calls {
            let id = format!("toolu_{}_{i}", history.len());
            content.push(
                json!({"type": "tool_use", "id": id, "name": "grep", "input": {"pattern": "fn"}}),
            );
            history.push(json!({"role": "assistant", "content": content}));
            history.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": format!("src/lib.rs:{i}: fn main() {{}}")}]}));
        } else {
            content.extend(answer["content"].as_array().unwrap().iter().cloned());
            history.push(json!({"role": "assistant", "content": content}));
        }
    }
    usage
}

/// Wait until the emulator has answered one more request (the keep-warm), up to a
/// generous deadline.
async fn keep_warm_seen(emulator: &cachet::emulator::EmulatorHandle, before: usize) -> bool {
    for _ in 0..600 {
        if emulator.accounted().len() > before {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The emulator, and the proxy in front of it with `ttl = "auto"` and a keep-warm one
/// second after a final request (the folder holds its store).
async fn keep_warm_after_a_second() -> (
    cachet::emulator::EmulatorHandle,
    ProxyHandle,
    tempfile::TempDir,
) {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let config = policy_config(
        &emulator.url(),
        vec![policy(dir.path(), Some(1))],
        &dir.path().join("s"),
    );
    (emulator, start_proxy(config).await, dir)
}

#[tokio::test]
async fn a_keep_warm_after_the_final_answer_lets_the_next_turn_read_after_a_long_pause() {
    let (emulator, proxy, _dir) = keep_warm_after_a_second().await;
    let mut history = Vec::new();
    turn(&proxy, "kw", API_KEY, &mut history, "Find the handlers.", 3).await;
    let before = emulator.accounted().len();
    assert!(
        keep_warm_seen(&emulator, before).await,
        "no keep-warm request"
    );
    let kw = emulator.accounted()[before].clone();
    let last = kw.accounting.detail.markers.last().unwrap();
    assert_eq!(last.ttl, "1h");
    assert!(kw.accounting.detail.markers.iter().all(|m| m.ttl == "1h"));
    // It read the final request's prefix and wrote the answer for an hour.
    assert!(
        kw.accounting.cache_read > 0 && kw.accounting.cache_write_1h > 0,
        "{kw:?}"
    );

    // Exactly one keep-warm for the first turn, counted once its answer is read. Counted
    // here, not at the end: the second turn's answer arms its own, a second later, which
    // a loaded machine may have sent by then.
    let sent = |m: &str| metric_value(m, "cachet_keep_warm_total", &[("outcome", "sent")]);
    let mut metrics = metrics_text(&proxy).await;
    for _ in 0..600 {
        if sent(&metrics).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        metrics = metrics_text(&proxy).await;
    }
    assert_eq!(sent(&metrics), Some(1.0));

    // The person comes back after 12 minutes: every 5m entry has expired, the keep-warm's
    // 1h entry holds everything up to the answer.
    emulator.advance_clock(Duration::from_secs(12 * MINUTE));
    let next = turn(&proxy, "kw", API_KEY, &mut history, "Now fix them.", 0).await;
    let read = next[0]["cache_read_input_tokens"].as_u64().unwrap();
    assert!(
        read >= last.prefix_tokens,
        "read {read}, keep-warm prefix {}",
        last.prefix_tokens
    );

    // The decisions are in the session log, with their expected saving.
    let log = wait_for_requests(&proxy, "kw", 5).await;
    let decisions: Vec<&Value> = request_entries(&log)
        .into_iter()
        .map(|e| &e["ttl_decision"])
        .collect();
    assert_eq!(decisions.len(), 5);
    for d in &decisions {
        assert!(d["ttl"] == "5m" || d["ttl"] == "1h", "{d}");
        assert!(
            d["late_reuse"].as_f64().is_some() && d["expected_saving_usd"].as_f64().is_some(),
            "{d}"
        );
        assert_eq!(d["keep_warm_after_secs"], 1, "{d}");
    }
    let metrics = metrics_text(&proxy).await;
    assert!(
        metric_sum(
            &metrics,
            "cachet_input_tokens_total",
            &[("variant", "keep-warm"), ("kind", "cache_read")]
        ) > 0.0,
        "the keep-warm's tokens are counted"
    );
    proxy.shutdown().await;
    emulator.shutdown().await;
}

/// pi with extended thinking on a budget and the interleaved-thinking beta it sends: the
/// keep-warm keeps the thinking settings (part of the messages' cache key), asks for one
/// token below the budget, which the emulator accepts as the API does with tools, and
/// holds the prefix up to the turn's prompt (Sonnet 4.5 drops the turn's thinking at the
/// next turn): the next turn, 12 minutes later, reads it.
#[tokio::test]
async fn with_thinking_on_a_budget_the_keep_warm_holds_what_the_next_turn_reads() {
    let (emulator, proxy, _dir) = keep_warm_after_a_second().await;
    let pi = Sender {
        auth: None,
        thinking: true,
    };
    let mut history = Vec::new();
    turn(
        &proxy,
        "thinking",
        pi,
        &mut history,
        "Find the handlers.",
        3,
    )
    .await;
    let before = emulator.accounted().len();
    assert!(
        keep_warm_seen(&emulator, before).await,
        "no keep-warm request"
    );
    let kw = emulator.accounted()[before].clone();
    assert!(kw.accounting.cache_read > 0, "it read the prefix: {kw:?}");
    let held = kw.accounting.detail.markers.last().unwrap().prefix_tokens;
    emulator.advance_clock(Duration::from_secs(12 * MINUTE));
    let next = turn(&proxy, "thinking", pi, &mut history, "Now fix them.", 0).await;
    let read = next[0]["cache_read_input_tokens"].as_u64().unwrap();
    assert!(read + 50 >= held, "read {read}, the keep-warm held {held}");
    // Each request of the session planned one.
    let log = wait_for_requests(&proxy, "thinking", 5).await;
    assert!(request_entries(&log)
        .iter()
        .all(|e| e["ttl_decision"]["keep_warm_after_secs"] == 1));
    proxy.shutdown().await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn no_keep_warm_when_the_session_goes_on_or_for_a_subscription() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    // Long enough that a loaded machine still sends the next turn before the first turn's
    // timers fire: this test is about which timers stand down, not about the delay.
    let config = policy_config(
        &emulator.url(),
        vec![policy(dir.path(), Some(15))],
        &dir.path().join("s"),
    );
    let proxy = start_proxy(config).await;
    // The person answers at once.
    let mut history = Vec::new();
    turn(
        &proxy,
        "busy",
        API_KEY,
        &mut history,
        "Find the handlers.",
        1,
    )
    .await;
    turn(&proxy, "busy", API_KEY, &mut history, "Now fix them.", 0).await;
    // A subscription token never gets one.
    let mut other = Vec::new();
    turn(
        &proxy,
        "oauth",
        Sender {
            auth: Some("sk-ant-oat01-test"),
            thinking: false,
        },
        &mut other,
        "Find the handlers.",
        1,
    )
    .await;
    let log = wait_for_requests(&proxy, "oauth", 2).await;
    for e in request_entries(&log) {
        assert!(
            e["ttl_decision"].get("keep_warm_after_secs").is_none(),
            "{e}"
        );
    }
    // Every answer of the busy session was text (the emulator's), so each armed a timer:
    // the two of the first turn find a newer request and stand down, the last one goes.
    let count = |m: &str, outcome: &str| {
        metric_value(m, "cachet_keep_warm_total", &[("outcome", outcome)]).unwrap_or(0.0)
    };
    let mut m = String::new();
    for _ in 0..1200 {
        m = metrics_text(&proxy).await;
        if count(&m, "skipped") + count(&m, "sent") >= 3.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!((count(&m, "skipped"), count(&m, "sent")), (2.0, 1.0), "{m}");
    proxy.shutdown().await;
    emulator.shutdown().await;
}

/// An agent sends the next request of its tool loop the moment an answer ends, before
/// the proxy has read that answer: the keep-warm is armed after the response, off the
/// request path, here behind a `context(turn_end)` hook that takes 300 ms. Every answer is
/// text, so each arms a timer; only the last may fire, however late the others were armed.
/// (Three seconds, so that a loaded machine still sends each next request in time.)
#[tokio::test]
async fn a_tool_loop_sent_back_to_back_leaves_one_keep_warm() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let hook = start_slow_hook_server(Duration::from_millis(300), |_| None).await;
    let with_hook = policy_file(
        dir.path(),
        "adaptive",
        &format!(
            "name = \"adaptive\"\n[match]\nprovider = [\"anthropic\"]\n[breakpoints]\nmode = \"auto\"\nttl = \"auto\"\nkeep_warm = true\nkeep_warm_after_secs = 3\n[[hook]]\nurl = \"{}\"\nevents = [\"context:turn_end\"]\n",
            hook.url
        ),
    );
    let config = policy_config(&emulator.url(), vec![with_hook], &dir.path().join("s"));
    let proxy = start_proxy(config).await;
    let mut history = Vec::new();
    let calls = 5;
    turn(
        &proxy,
        "loop",
        API_KEY,
        &mut history,
        "Find the handlers.",
        calls,
    )
    .await;
    let count = |m: &str, outcome: &str| {
        metric_value(m, "cachet_keep_warm_total", &[("outcome", outcome)]).unwrap_or(0.0)
    };
    let answers = (calls + 1) as f64;
    let mut m = String::new();
    for _ in 0..600 {
        m = metrics_text(&proxy).await;
        if count(&m, "skipped") + count(&m, "sent") >= answers {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        (count(&m, "skipped"), count(&m, "sent")),
        (answers - 1.0, 1.0),
        "{m}"
    );
    assert!(
        hook.events.lock().unwrap().len() >= calls,
        "the hook saw the answers"
    );
    proxy.shutdown().await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn without_a_long_pause_seen_auto_writes_five_minute_markers_like_the_client() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let config = policy_config(
        &emulator.url(),
        vec![policy(dir.path(), None)],
        &dir.path().join("s"),
    );
    let proxy = start_proxy(config).await;
    let mut history = Vec::new();
    let mut usage = turn(
        &proxy,
        "quick",
        API_KEY,
        &mut history,
        "Find the handlers.",
        3,
    )
    .await;
    emulator.advance_clock(Duration::from_secs(2 * MINUTE));
    usage.extend(turn(&proxy, "quick", API_KEY, &mut history, "Now fix them.", 3).await);
    for u in &usage {
        assert_eq!(u["cache_creation"]["ephemeral_1h_input_tokens"], 0, "{u}");
    }
    let log = wait_for_requests(&proxy, "quick", 8).await;
    for e in request_entries(&log) {
        assert_eq!(e["ttl_decision"]["ttl"], "5m", "{e}");
    }
    proxy.shutdown().await;
    emulator.shutdown().await;
}
