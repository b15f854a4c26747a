//! The prefix-break diagnosis (DESIGN §8) on live traffic through the proxy in front of
//! the emulator: each reason of the vocabulary is caused by the client (or the provider)
//! and diagnosed with the right section, position and reason; the same session replayed
//! from its trace gives the same diagnosis, request by request; the provider's own
//! diagnosis is recorded beside cachet's.

use std::path::PathBuf;
use std::time::Duration;

use cachet::emulator::EmulatorHandle;
use cachet::replay::{replay_all, ArmArg};
use cachet::server::{spawn_with, ProxyHandle, ServeOptions};
use cachet::session::SessionClock;
use cachet::trace::read_traces;
use serde_json::{json, Value};

use crate::support::*;

/// A system prompt over every Claude model's minimum cacheable length.
fn system_text() -> String {
    "You are a careful coding agent. Read before you edit; run the tests after. ".repeat(150)
}

fn tool(name: &str) -> Value {
    json!({"name": name, "description": format!("The {name} tool."),
           "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}})
}

/// A request shaped like pi's on the Anthropic API: the system block and the last block
/// of the last message carry markers.
fn pi_request(model: &str, system: &str, tools: &[&str], messages: &[Value]) -> Value {
    let mut messages = messages.to_vec();
    if let Some(last) = messages.last_mut() {
        let content = match last["content"].clone() {
            Value::String(text) => json!([{"type": "text", "text": text}]),
            other => other,
        };
        last["content"] = content;
        if let Some(block) = last["content"].as_array_mut().and_then(|b| b.last_mut()) {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
    }
    json!({"model": model, "max_tokens": 256,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "tools": tools.iter().map(|t| tool(t)).collect::<Vec<_>>(),
        "messages": messages})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
}

/// A conversation of `turns` prompts and answers, then one more prompt.
fn conversation(turns: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for i in 0..turns {
        out.push(user(&format!(
            "Task {i}: look at module {i} and tell me what it does."
        )));
        out.push(assistant(&format!(
            "Module {i} parses the configuration and hands it on."
        )));
    }
    out.push(user(&format!(
        "Task {turns}: look at module {turns} and tell me what it does."
    )));
    out
}

/// The proxy (recording traces, monitoring on) in front of the emulator, on clocks the
/// test moves together.
struct Rig {
    emulator: EmulatorHandle,
    proxy: ProxyHandle,
    clock: SessionClock,
    traces: PathBuf,
    _dir: tempfile::TempDir,
    sent: u64,
}

impl Rig {
    async fn start(policies: &[&str]) -> Rig {
        let emulator = start_emulator().await;
        let dir = tempfile::tempdir().unwrap();
        let files = policies
            .iter()
            .map(|p| PathBuf::from(format!("{}/policies/{p}.toml", env!("CARGO_MANIFEST_DIR"))))
            .collect();
        let mut config = policy_config(&emulator.url(), files, &dir.path().join("store"));
        let traces = dir.path().join("traces");
        config.record.dir = Some(traces.clone());
        let clock = SessionClock::default();
        let proxy = spawn_with(
            config,
            ServeOptions {
                clock: clock.clone(),
            },
        )
        .await
        .unwrap();
        Rig {
            emulator,
            proxy,
            clock,
            traces,
            _dir: dir,
            sent: 0,
        }
    }

    fn advance(&self, by: Duration) {
        self.emulator.advance_clock(by);
        self.clock.advance(by);
    }

    /// Send one request of session `s` and wait for its entry in the session log.
    async fn send(&mut self, s: &str, body: &Value) -> Value {
        let (status, answer) = post_anthropic(&self.proxy, s, body).await;
        assert_eq!(status, 200, "{answer}");
        self.sent += 1;
        wait_for_requests(&self.proxy, s, self.sent).await;
        answer["usage"].clone()
    }

    /// Each request's usage as the session log keeps it, in order.
    async fn logged_usages(&self) -> Vec<Value> {
        let log = wait_for_requests(&self.proxy, "s", self.sent).await;
        request_entries(&log)
            .iter()
            .map(|e| e["usage"].clone())
            .collect()
    }

    /// Each request's diagnosis, in order (`null` when nothing was lost).
    async fn diagnoses(&self, s: &str) -> Vec<Value> {
        let log = wait_for_requests(&self.proxy, s, self.sent).await;
        request_entries(&log)
            .iter()
            .map(|e| e["diagnosis"].clone())
            .collect()
    }

    /// The same session replayed from its trace, as recorded: each request's diagnosis.
    async fn replayed(self) -> Vec<Value> {
        self.replayed_with(&[]).await
    }

    /// The same session replayed from its trace by the arm of shipped `policies`.
    async fn replayed_with(self, policies: &[&str]) -> Vec<Value> {
        self.proxy.shutdown().await;
        self.emulator.shutdown().await;
        let records = read_traces(std::slice::from_ref(&self.traces)).unwrap();
        let arms = [ArmArg {
            name: "recorded".into(),
            policies: policies.iter().map(|p| shipped(p)).collect(),
        }];
        let stats = replay_all(&records, &arms, None, &indicatif::ProgressBar::hidden()).unwrap();
        stats[0]
            .diagnoses
            .iter()
            .map(|d| serde_json::to_value(d).unwrap())
            .collect()
    }
}

fn shipped(policy: &str) -> PathBuf {
    PathBuf::from(format!(
        "{}/policies/{policy}.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
}

/// A diagnosis's reason ("" when nothing was lost).
fn reason_of(d: &Value) -> &str {
    d["reason"].as_str().unwrap_or("")
}

/// What a diagnosis says, for comparisons: section, reason, position and blame.
fn said(d: &Value) -> (String, String, Value, Value, Value, Value) {
    (
        d["section"].as_str().unwrap_or("").to_string(),
        d["reason"].as_str().unwrap_or("").to_string(),
        d["message_index"].clone(),
        d["tool"].clone(),
        d["part"].clone(),
        d["blame"].clone(),
    )
}

/// Who a diagnosis blames ("" when nothing was lost).
fn blamed(d: &Value) -> &str {
    d["blame"]["who"].as_str().unwrap_or("")
}

/// Run a scripted session; every request after the first is diagnosed live, then again
/// from the recorded trace, and both must agree request by request.
async fn live_and_replayed(
    script: impl AsyncFnOnce(&mut Rig) -> (),
    policies: &[&str],
) -> Vec<Value> {
    let mut rig = Rig::start(policies).await;
    script(&mut rig).await;
    let live = rig.diagnoses("s").await;
    let replayed = rig.replayed().await;
    assert_eq!(
        live.iter().map(said).collect::<Vec<_>>(),
        replayed.iter().map(said).collect::<Vec<_>>(),
        "live {live:#?}\nreplayed {replayed:#?}"
    );
    live
}

const SONNET: &str = "claude-sonnet-4-5";

#[tokio::test]
async fn an_append_only_session_has_no_break_and_each_change_is_named() {
    let system = system_text();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let tools = ["read", "bash"];
            for turns in 0..4 {
                rig.send(
                    "s",
                    &pi_request(SONNET, &system, &tools, &conversation(turns)),
                )
                .await;
            }
            // 4: a tool added (an MCP server connected).
            rig.send(
                "s",
                &pi_request(SONNET, &system, &["read", "bash", "grep"], &conversation(4)),
            )
            .await;
            let tools = ["read", "bash", "grep"];
            // 5: the system prompt changed.
            let other = format!("{system} Be brief.");
            rig.send("s", &pi_request(SONNET, &other, &tools, &conversation(5)))
                .await;
            // 6: message 2 edited.
            let mut edited = conversation(6);
            edited[2] = user("Task 1, reworded: what does module 1 do?");
            rig.send("s", &pi_request(SONNET, &other, &tools, &edited))
                .await;
            // 7: the history shortened (the client rewound).
            rig.send("s", &pi_request(SONNET, &other, &tools, &edited[..5]))
                .await;
            // 8: another model.
            rig.send(
                "s",
                &pi_request("claude-opus-4-5", &other, &tools, &edited[..7]),
            )
            .await;
        },
        &[],
    )
    .await;
    for (i, diagnosis) in d.iter().enumerate().take(4) {
        assert!(diagnosis.is_null(), "request {i}: {diagnosis}");
    }
    assert_eq!(d[4]["section"], "tools");
    assert_eq!(d[4]["reason"], "tools_changed");
    assert_eq!(d[4]["tool"], "grep");
    assert_eq!(d[5]["section"], "system");
    assert_eq!(d[5]["reason"], "system_changed");
    assert_eq!(d[5]["part"], "base");
    assert_eq!(d[6]["reason"], "message_edited");
    assert_eq!(d[6]["message_index"], 2);
    assert_eq!(d[7]["reason"], "history_truncated");
    assert_eq!(d[7]["message_index"], 5);
    assert_eq!(d[8]["section"], "tools");
    assert_eq!(d[8]["reason"], "model_changed");
    // Each of these the client did, and the blame names what it changed.
    for (i, what) in [
        (4, "tool `grep`"),
        (5, "system part `base`"),
        (6, "message 2"),
        (8, "model claude-sonnet-4-5 to claude-opus-4-5"),
    ] {
        assert_eq!(blamed(&d[i]), "client", "{}", d[i]);
        assert_eq!(d[i]["blame"]["what"], what, "{}", d[i]);
    }
    assert_eq!(blamed(&d[7]), "client");
}

/// A break that a shipped policy's patch made names the policy and its op, live and in
/// the replay of the session's trace with that policy; the timeline says what to do, the
/// metric counts it as the policy's.
#[tokio::test]
async fn a_break_a_policys_patch_made_names_the_policy_and_its_op() {
    let system = system_text();
    for (policy, op) in [
        ("memory-system-prompt", "system_part_set"),
        ("memory-context-hook", "messages_insert"),
    ] {
        let mut rig = Rig::start(&[policy]).await;
        let mut history = vec![user("How do we roll out database migrations?")];
        rig.send("s", &pi_request(SONNET, &system, &["read"], &history))
            .await;
        history.push(assistant("In batches, each in its own transaction."));
        history.push(user("And how are release versions tagged?"));
        rig.send("s", &pi_request(SONNET, &system, &["read"], &history))
            .await;
        let live = rig.diagnoses("s").await;
        assert_eq!(blamed(&live[1]), "policy", "{policy}: {live:#?}");
        // The transformer as its patch events name it: the policy (and its inject block).
        let by = live[1]["blame"]["transformer"].as_str().unwrap_or("");
        assert!(by.starts_with(policy), "{}", live[1]);
        assert_eq!(live[1]["blame"]["op"], op, "{}", live[1]);
        let page = reqwest::get(format!(
            "http://{}/sessions/s/timeline",
            rig.proxy.admin_addr
        ))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
        assert!(page.contains(&format!("`{by}` changed the")), "{page}");
        let metrics = metrics_text(&rig.proxy).await;
        let counted =
            |blame| metric_sum(&metrics, "cachet_prefix_breaks_total", &[("blame", blame)]);
        assert_eq!(
            (counted("policy"), counted("client")),
            (1.0, 0.0),
            "{metrics}"
        );
        let replayed = rig.replayed_with(&[policy]).await;
        assert_eq!(
            live.iter().map(said).collect::<Vec<_>>(),
            replayed.iter().map(said).collect::<Vec<_>>(),
            "{policy}: live {live:#?}\nreplayed {replayed:#?}"
        );
    }
}

/// A gap longer than the marker's lifetime.
#[tokio::test]
async fn a_gap_past_the_markers_lifetime_is_an_expiry() {
    let system = system_text();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let tools = ["read"];
            rig.send("s", &pi_request(SONNET, &system, &tools, &conversation(0)))
                .await;
            rig.advance(Duration::from_secs(6 * 60));
            let usage = rig
                .send("s", &pi_request(SONNET, &system, &tools, &conversation(1)))
                .await;
            assert_eq!(usage["cache_read_input_tokens"], 0, "the 5m entry expired");
            rig.advance(Duration::from_secs(20));
            rig.send("s", &pi_request(SONNET, &system, &tools, &conversation(2)))
                .await;
        },
        &[],
    )
    .await;
    assert_eq!(d[1]["reason"], "ttl_expired", "{d:#?}");
    assert_eq!(d[1]["section"], "messages");
    assert_eq!(blamed(&d[1]), "provider");
    assert!(d[2].is_null(), "{}", d[2]);
}

/// The provider evicting its cache: live only (replay's model keeps its entries).
#[tokio::test]
async fn a_provider_that_reads_less_than_it_cached_is_unexplained() {
    let system = system_text();
    let mut rig = Rig::start(&[]).await;
    let tools = ["read"];
    let first = rig
        .send("s", &pi_request(SONNET, &system, &tools, &conversation(0)))
        .await;
    rig.emulator.clear_cache();
    rig.send("s", &pi_request(SONNET, &system, &tools, &conversation(1)))
        .await;
    let d = rig.diagnoses("s").await;
    assert_eq!(d[1]["reason"], "unexplained", "{d:#?}");
    assert_eq!(blamed(&d[1]), "unknown", "never the provider on a guess");
    assert_eq!(d[1]["read"], 0);
    assert_eq!(
        d[1]["expected_read"], first["cache_creation_input_tokens"],
        "what the first request wrote"
    );
    let metrics = metrics_text(&rig.proxy).await;
    assert_eq!(
        metric_value(
            &metrics,
            "cachet_prefix_breaks_total",
            &[("reason", "unexplained"), ("section", "messages")]
        ),
        Some(1.0)
    );
}

/// A client that marks only the start of its history: the markers' prefix is below the
/// model's minimum, so nothing is ever cached although the prompt is long.
#[tokio::test]
async fn markers_below_the_minimum_are_named() {
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let long = "Here is the file you asked about, line by line. ".repeat(400);
            let history = |n: usize| {
                let mut h = vec![json!({"role": "user", "content": [
                    {"type": "text", "text": "Hi.", "cache_control": {"type": "ephemeral"}}]})];
                for i in 0..n {
                    h.push(assistant(&format!("Reading part {i}.")));
                    h.push(user(&format!("{long} (part {i})")));
                }
                json!({"model": SONNET, "max_tokens": 64, "messages": h})
            };
            rig.send("s", &history(1)).await;
            rig.send("s", &history(2)).await;
        },
        &[],
    )
    .await;
    assert_eq!(d[1]["reason"], "below_minimum", "{d:#?}");
    assert_eq!(d[1]["message_index"], 0);
}

/// A long tool loop whose client marks only the last block: the previous request's entry
/// falls beyond the provider's 20-block lookback.
#[tokio::test]
async fn a_marker_too_far_after_the_cached_prefix_is_outside_the_lookback() {
    let system = system_text();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let loop_of = |steps: usize| {
                let mut h = vec![user("Refactor the parser.")];
                for i in 0..steps {
                    h.push(json!({"role": "assistant", "content": [
                        {"type": "tool_use", "id": format!("t{i}"), "name": "read", "input": {"path": format!("src/p{i}.rs")}}]}));
                    h.push(json!({"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("fn p{i}() {{}}")}]}));
                }
                pi_request(SONNET, &system, &["read"], &h)
            };
            rig.send("s", &loop_of(1)).await;
            rig.send("s", &loop_of(14)).await;
        },
        &[],
    )
    .await;
    assert_eq!(d[1]["reason"], "outside_lookback", "{d:#?}");
    assert_eq!(d[1]["section"], "messages");
}

/// A client that drops the thinking blocks of an earlier answer: the message differs only
/// by them.
#[tokio::test]
async fn dropped_thinking_is_named() {
    let system = system_text();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let thought = json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The module parses flags.", "signature": "sig-1"},
                {"type": "text", "text": "It parses flags."}]});
            let bare = json!({"role": "assistant", "content": [
                {"type": "text", "text": "It parses flags."}]});
            let first = vec![user("What does cli.rs do?"), thought, user("And main.rs?")];
            rig.send("s", &pi_request(SONNET, &system, &["read"], &first))
                .await;
            let mut second = vec![user("What does cli.rs do?"), bare, user("And main.rs?")];
            second.push(assistant("It starts the server."));
            second.push(user("Thanks. Now the tests?"));
            rig.send("s", &pi_request(SONNET, &system, &["read"], &second))
                .await;
        },
        &[],
    )
    .await;
    assert_eq!(d[1]["reason"], "thinking_dropped", "{d:#?}");
    assert_eq!(d[1]["message_index"], 1);
}

/// With `[diagnostics] provider = true`, cachet names the previous answer in the request
/// (Anthropic's cache diagnostics) and records the provider's reason beside its own.
#[tokio::test]
async fn the_providers_own_diagnosis_is_recorded_beside_cachets() {
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
    let system = system_text();
    let mut sent = 0;
    for body in [
        pi_request(SONNET, &system, &["read"], &conversation(0)),
        pi_request(SONNET, &system, &["read"], &conversation(1)),
        pi_request(
            SONNET,
            &format!("{system} Be brief."),
            &["read"],
            &conversation(2),
        ),
    ] {
        let (status, answer) = post_anthropic(&proxy, "d", &body).await;
        assert_eq!(status, 200, "{answer}");
        sent += 1;
        wait_for_requests(&proxy, "d", sent).await;
    }
    let log = wait_for_requests(&proxy, "d", 3).await;
    let requests = request_entries(&log);
    assert!(
        requests[0].get("provider_diagnosis").is_none(),
        "no previous answer to name"
    );
    assert_eq!(
        requests[1]["provider_diagnosis"]["cache_miss_reason"],
        Value::Null,
        "nothing changed: {}",
        requests[1]
    );
    assert_eq!(
        requests[2]["provider_diagnosis"]["cache_miss_reason"]["type"],
        "system_changed"
    );
    assert_eq!(requests[2]["diagnosis"]["reason"], "system_changed");
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(&metrics, "cachet_diagnosis_disagreements_total", &[]),
        0.0
    );
    proxy.shutdown().await;
    emulator.shutdown().await;
}

/// A request shaped like Codex's on the Responses API: instructions, the tools, and the
/// conversation as input items (reasoning kept encrypted, tool calls and their outputs),
/// with the conversation id as `prompt_cache_key`.
fn codex_request(steps: usize) -> Value {
    let mut input = vec![json!({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Rename the config loader and fix its callers."}]})];
    for i in 0..steps {
        input.push(
            json!({"type": "reasoning", "summary": [], "encrypted_content": format!("gAAAAB{i}")}),
        );
        input.push(
            json!({"type": "function_call", "name": "shell", "call_id": format!("call_{i}"),
            "arguments": format!("{{\"command\":[\"rg\",\"load_config\",\"src/m{i}\"]}}")}),
        );
        input.push(
            json!({"type": "function_call_output", "call_id": format!("call_{i}"),
            "output": format!("src/m{i}/lib.rs:12: let c = load_config(path)?;")}),
        );
    }
    json!({"model": "gpt-5.1-codex", "instructions": system_text(), "input": input,
        "tools": [{"type": "function", "name": "shell", "description": "Runs a command.",
            "strict": false, "parameters": {"type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}}}}],
        "tool_choice": "auto", "parallel_tool_calls": false, "store": false, "stream": true,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "s"})
}

impl Rig {
    /// Send one Responses request of session `s` as Codex does, and wait for its entry.
    async fn send_codex(&mut self, body: &Value) {
        let r = client()
            .post(format!("http://{}/v1/responses", self.proxy.addr))
            .header("authorization", "Bearer k")
            .header("session-id", "s")
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
        self.sent += 1;
        wait_for_requests(&self.proxy, "s", self.sent).await;
    }
}

/// An agent's tool loop sends more than about 15 requests a minute with one prefix and
/// `prompt_cache_key`; OpenAI then routes some to machines that have not cached the
/// prefix ("If requests for the same prefix and prompt_cache_key combination exceed a
/// certain rate (approximately 15 requests per minute), some may overflow and get routed to
/// additional machines, reducing cache effectiveness": developers.openai.com, the
/// prompt-caching guide). Such a miss is named for what it is, not `unexplained`; after a
/// quiet minute the same session reads its prefix again, with nothing to diagnose.
#[tokio::test]
async fn an_openai_miss_past_the_routing_rate_is_an_overflow() {
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            for steps in 0..18 {
                rig.send_codex(&codex_request(steps)).await;
                rig.advance(Duration::from_secs(2));
            }
            rig.advance(Duration::from_secs(61));
            rig.send_codex(&codex_request(18)).await;
        },
        &[],
    )
    .await;
    let missed: Vec<usize> = (0..d.len()).filter(|&i| !d[i].is_null()).collect();
    assert!(!missed.is_empty(), "18 requests in 36 s overflow: {d:#?}");
    for &i in &missed {
        assert!(i >= 15, "request {i} is within the rate: {d:#?}");
        assert_eq!(d[i]["reason"], "rate_overflow", "request {i}: {d:#?}");
        assert_eq!(d[i]["section"], "messages");
        assert_eq!(d[i]["read"], 0);
    }
    assert!(d[18].is_null(), "a quiet minute later: {}", d[18]);
}

/// The rate is the provider's per prompt start and `prompt_cache_key`, not per lane: pi on
/// the Responses API compacts mid-loop, and the requests after the compaction start a second
/// lane with the same instructions, tools and key. The 16th to 18th requests on that route
/// within a minute overflow although their lane has sent only a few: each is named
/// `rate_overflow`, none `unexplained`.
#[tokio::test]
async fn an_overflow_is_counted_over_the_lanes_that_share_a_route() {
    let compacted = |steps: usize| {
        let mut body = codex_request(steps);
        body["input"][0]["content"][0]["text"] =
            json!("Summary of the earlier conversation: the loader is renamed; fix its callers.");
        body
    };
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            for steps in 0..9 {
                rig.send_codex(&codex_request(steps)).await;
                rig.advance(Duration::from_secs(2));
            }
            for steps in 0..9 {
                rig.send_codex(&compacted(steps)).await;
                rig.advance(Duration::from_secs(2));
            }
        },
        &[],
    )
    .await;
    let reasons: Vec<&Value> = d.iter().map(|d| &d["reason"]).collect();
    assert!(
        reasons.iter().all(|r| *r != "unexplained"),
        "{reasons:?}\n{d:#?}"
    );
    let overflowed = reasons.iter().filter(|r| **r == "rate_overflow").count();
    assert!(overflowed >= 2, "requests 16-18 overflow: {reasons:?}");
}

/// GPT-5.6 and later on Responses take `prompt_cache_options.ttl: "12h"`: "The minimum
/// lifetime applied to every implicit and explicit cache breakpoint written by the request.
/// Supported values are `30m` (the default) and `12h`" (openai-python 3.57, Responses
/// `PromptCacheOptions`). Three idle hours later the session reads its prefix and nothing is
/// diagnosed; thirteen idle hours later it has expired. The writes are counted and priced as
/// 12-hour ones ($5 a million on GPT-6.2 Sol, developers.openai.com/api/docs/models/
/// gpt-6.2-sol, against $2.50 for 30 minutes).
#[tokio::test]
async fn a_twelve_hour_ttl_is_read_hours_later_and_counted_apart() {
    let request = |steps: usize| {
        let mut body = codex_request(steps);
        body["model"] = json!("gpt-6.2-sol");
        body["prompt_cache_options"] = json!({"ttl": "12h"});
        body
    };
    let mut metrics = String::new();
    let mut usages = Vec::new();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            rig.send_codex(&request(0)).await;
            rig.advance(Duration::from_secs(3 * 3600));
            rig.send_codex(&request(1)).await;
            rig.advance(Duration::from_secs(13 * 3600));
            rig.send_codex(&request(2)).await;
            metrics = metrics_text(&rig.proxy).await;
            usages = rig.logged_usages().await;
        },
        &[],
    )
    .await;
    assert!(d[0].is_null() && d[1].is_null(), "{d:#?}");
    assert_eq!(d[2]["reason"], "ttl_expired", "{d:#?}");
    assert!(
        usages[1]["cache_read"].as_u64().unwrap() >= 1024,
        "{usages:#?}"
    );
    for u in &usages {
        assert!(u["cache_write"].as_u64().unwrap() > 0, "{usages:#?}");
        assert_eq!(u["cache_write_12h"], u["cache_write"], "{usages:#?}");
    }
    let twelve: u64 = usages
        .iter()
        .map(|u| u["cache_write_12h"].as_u64().unwrap())
        .sum();
    let series = metrics
        .lines()
        .find(|l| {
            l.starts_with("cachet_cache_write_tokens_total{")
                && l.contains("ttl=\"12h\"")
                && l.contains("gpt-6.2-sol")
        })
        .unwrap_or_else(|| panic!("no 12h series: {metrics}"));
    assert!(series.ends_with(&format!(" {twelve}")), "{series}");
}

/// A title request on the user's prompt as it stands: a small model, no tools, a system
/// prompt of its own, and the same one message as the main loop's first request. Whether
/// it arrives before or after that request (agents send them side by side), it is a lane
/// of its own: nothing is reported as a model, tools or system change.
#[tokio::test]
async fn a_title_request_on_the_first_prompt_is_not_a_break() {
    let system = system_text();
    let title = |prompt: &Value| {
        json!({"model": "claude-haiku-4-5", "max_tokens": 32,
            "system": [{"type": "text", "text": "Write a title of at most six words for this conversation."}],
            "messages": [prompt]})
    };
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let tools = ["read", "bash"];
            let first = conversation(0);
            rig.send("s", &title(&first[0])).await;
            for turns in 0..3 {
                rig.send(
                    "s",
                    &pi_request(SONNET, &system, &tools, &conversation(turns)),
                )
                .await;
            }
            // A second conversation in the same session, the title request after it.
            let other = vec![user("Now a new task: write the changelog.")];
            rig.send("s", &pi_request(SONNET, &system, &tools, &other))
                .await;
            rig.send("s", &title(&other[0])).await;
            let mut next = other.clone();
            next.push(assistant("The changelog lists the fixes."));
            next.push(user("Add the date."));
            rig.send("s", &pi_request(SONNET, &system, &tools, &next))
                .await;
        },
        &[],
    )
    .await;
    for (i, diagnosis) in d.iter().enumerate() {
        assert!(diagnosis.is_null(), "request {i}: {d:#?}");
    }
}

/// A user message of about 6,000 tokens: a file the agent read.
fn big_user(i: usize) -> Value {
    user(&format!(
        "Task {i}: here is src/module_{i}.rs, explain it.\n{}",
        format!("fn step_{i}(input: &str) -> usize {{ input.len() }}\n").repeat(400)
    ))
}

/// Send `body` to the proxy streamed, and rebuild the answer's content from the events
/// (the compaction block from its one `compaction_delta`).
async fn streamed_content(proxy: &ProxyHandle, session: &str, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-cachet-session", session)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let mut blocks: Vec<Value> = Vec::new();
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let event: Value = serde_json::from_str(data).unwrap();
        match event["type"].as_str() {
            Some("content_block_start") => blocks.push(event["content_block"].clone()),
            Some("content_block_delta") => {
                let block = blocks.last_mut().unwrap();
                let delta = &event["delta"];
                match delta["type"].as_str() {
                    Some("compaction_delta") => block["content"] = delta["content"].clone(),
                    Some("text_delta") => {
                        let text = format!(
                            "{}{}",
                            block["text"].as_str().unwrap_or(""),
                            delta["text"].as_str().unwrap_or("")
                        );
                        block["text"] = json!(text);
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    blocks
}

/// Anthropic's server-side compaction (`compact_20260112`, platform.claude.com,
/// Compaction) in a pi-shaped session at the minimum trigger: the request whose prompt
/// reaches it is answered with a summary block, after two samplings; the client sends the
/// block back and goes on, keeping its earlier messages (the documented simplest way) or
/// dropping them, the answer streamed or not. The compaction is billed in the session log
/// (the top-level usage leaves it out), and no request is a break, live or replayed: the
/// compaction read the prompt as sent, and each later request reads what the summary's
/// prompt left cached.
#[tokio::test]
async fn a_server_side_compaction_is_billed_and_not_a_break() {
    for (keep, stream) in [(true, false), (false, true)] {
        let system = system_text();
        let request = |messages: &[Value]| {
            let mut body = pi_request(SONNET, &system, &["read"], messages);
            body["context_management"] = json!({"edits": [{"type": "compact_20260112",
                "trigger": {"type": "input_tokens", "value": 50_000}}]});
            body
        };
        let mut compacted_at = None;
        // Per request: the answer's usage (when not streamed) and the session log's.
        let mut usages = Vec::new();
        let d = live_and_replayed(
            async |rig: &mut Rig| {
                let mut history = vec![big_user(0)];
                for i in 1..14 {
                    let body = request(&history);
                    let (content, answered) = if stream && compacted_at.is_none() {
                        (streamed_content(&rig.proxy, "s", &body).await, Value::Null)
                    } else {
                        let (status, answer) = post_anthropic(&rig.proxy, "s", &body).await;
                        assert_eq!(status, 200, "{answer}");
                        let content = answer["content"].as_array().unwrap().clone();
                        (content, answer["usage"].clone())
                    };
                    rig.sent += 1;
                    let log = wait_for_requests(&rig.proxy, "s", rig.sent).await;
                    let entry = *request_entries(&log).last().unwrap();
                    usages.push((answered, entry["usage"].clone()));
                    if content[0]["type"] == "compaction" {
                        assert!(
                            compacted_at.is_none(),
                            "one compaction: the summary is short"
                        );
                        compacted_at = Some(i - 1);
                        if !keep {
                            history.clear();
                        }
                    }
                    history.push(json!({"role": "assistant", "content": content}));
                    history.push(big_user(i));
                }
                let metrics = metrics_text(&rig.proxy).await;
                let edits = |edit| {
                    metric_value(
                        &metrics,
                        "cachet_provider_context_edits_total",
                        &[("provider", "anthropic"), ("edit", edit)],
                    )
                };
                assert_eq!(edits("compaction"), Some(1.0), "{metrics}");
                assert_eq!(edits("clear_tool_uses"), None);
            },
            &[],
        )
        .await;
        let at = compacted_at.expect("the prompt reached the trigger");
        for (i, diagnosis) in d.iter().enumerate() {
            assert!(
                diagnosis.is_null(),
                "keep {keep}, request {i} (compaction at {at}): {d:#?}"
            );
        }
        // What the session log bills for the compaction, streamed or not: both samplings,
        // the first over the whole prompt (at least the trigger), the second over the
        // summary's.
        let (answered, billed) = &usages[at];
        let count = |k: &str| billed[k].as_u64().unwrap();
        let input = count("cache_read") + count("cache_write") + count("uncached");
        let iterations = &billed["iterations"];
        let answer_prompt =
            iterations["last_read"].as_u64().unwrap() + iterations["last_write"].as_u64().unwrap();
        assert!(input >= answer_prompt + 50_000, "{billed}");
        assert_eq!(iterations["compactions"], 1, "{billed}");
        if !answered.is_null() {
            assert_eq!(
                answered["iterations"][0]["type"], "compaction",
                "{answered}"
            );
            assert!(answered["cache_read_input_tokens"].as_u64().unwrap() < 50_000);
        }
        // The requests after it read the summary's prompt.
        for (answered, billed) in &usages[at + 1..] {
            assert!(billed["cache_read"].as_u64().unwrap() > 0, "{billed}");
            assert!(answered["iterations"].is_null());
        }
    }
}

/// Anthropic's tool-result clearing (`clear_tool_uses_20250919`, platform.claude.com,
/// Context editing) in a pi-shaped tool loop: past the trigger, each request's answer says
/// the provider cleared the oldest results, and each reads only up to the first result
/// cleared since the previous request. Those misses are `context_edited`, live and
/// replayed alike; before the trigger nothing is lost.
#[tokio::test]
async fn a_miss_where_the_provider_cleared_tool_results_is_a_context_edit() {
    let system = system_text();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            let mut messages = vec![user("Read every module and summarise them.")];
            for i in 0..7 {
                let id = format!("toolu_{i:04}");
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": "read", "input": {"path": format!("src/m{i}.rs")}}]}));
                messages.push(json!({"role": "user", "content": [{"type": "tool_result",
                    "tool_use_id": id, "content": format!("// module {i}\n{}", "pub fn step() {}\n".repeat(150))}]}));
                let mut body = pi_request(SONNET, &system, &["read"], &messages);
                body["context_management"] = json!({"edits": [{"type": "clear_tool_uses_20250919",
                    "trigger": {"type": "tool_uses", "value": 3},
                    "keep": {"type": "tool_uses", "value": 2}}]});
                rig.send("s", &body).await;
            }
            let metrics = metrics_text(&rig.proxy).await;
            assert_eq!(
                metric_value(
                    &metrics,
                    "cachet_provider_context_edits_total",
                    &[("provider", "anthropic"), ("edit", "clear_tool_uses")]
                ),
                Some(4.0),
                "requests 3 to 6"
            );
        },
        &[],
    )
    .await;
    // Requests 0-2 hold at most 3 tool uses; from request 3 on, older results are cleared.
    for (i, diagnosis) in d.iter().enumerate() {
        if i < 3 {
            assert!(diagnosis.is_null(), "request {i}: {d:#?}");
        } else {
            assert_eq!(diagnosis["reason"], "context_edited", "request {i}: {d:#?}");
            assert!(
                diagnosis["read"].as_u64().unwrap() < diagnosis["expected_read"].as_u64().unwrap()
            );
        }
    }
}

/// Claude Code's `/fast` asks `speed: "fast"`; when fast mode is rate-limited it goes on at
/// standard speed. Each speed caches apart ("switching between fast and standard speed
/// invalidates the prompt cache"; octavus.ai: "falling back to standard speed is a
/// prompt-cache miss"), so the first standard request reads nothing the fast ones cached.
/// That miss is named `speed_changed`, live and replayed; the next standard request reads
/// what the first one cached, with nothing to diagnose.
#[tokio::test]
async fn a_fall_back_from_fast_mode_reads_nothing_and_is_named() {
    let system = system_text();
    let body = |turns: usize, speed: &str| {
        let mut b = pi_request("claude-opus-5-5", &system, &["read"], &conversation(turns));
        b["speed"] = json!(speed);
        b
    };
    let mut usages = Vec::new();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            for (turns, speed) in [(1, "fast"), (2, "fast"), (3, "standard"), (4, "standard")] {
                usages.push(rig.send("s", &body(turns, speed)).await);
            }
        },
        &[],
    )
    .await;
    let reasons: Vec<&str> = d.iter().map(reason_of).collect();
    assert_eq!(reasons, ["", "", "speed_changed", ""], "{d:#?}");
    assert_eq!(d[2]["section"], "tools", "{d:#?}");
    assert!(d[2]["expected_read"].as_u64().unwrap() > 0, "{d:#?}");
    let read = |u: &Value| u["cache_read_input_tokens"].as_u64().unwrap();
    assert!(read(&usages[1]) > 0 && read(&usages[3]) > 0, "{usages:#?}");
    assert_eq!(read(&usages[2]), 0, "{usages:#?}");
    let speeds: Vec<&Value> = usages.iter().map(|u| &u["speed"]).collect();
    assert_eq!(speeds, ["fast", "fast", "standard", "standard"]);
}

/// Four streamed Codex-shaped requests on `model`, each step asking the tier beside it,
/// live and replayed: the diagnosis reasons and the logged usages.
async fn codex_at_tiers(model: &str, tiers: [Option<&str>; 4]) -> (Vec<String>, Vec<Value>) {
    let request = |steps: usize, tier: Option<&str>| {
        let mut body = codex_request(steps);
        body["model"] = json!(model);
        if let Some(tier) = tier {
            body["service_tier"] = json!(tier);
        }
        body
    };
    let mut usages = Vec::new();
    let d = live_and_replayed(
        async |rig: &mut Rig| {
            for (steps, tier) in tiers.iter().enumerate() {
                rig.send_codex(&request(steps, *tier)).await;
            }
            usages = rig.logged_usages().await;
        },
        &[],
    )
    .await;
    let read = |u: &Value| u["cache_read"].as_u64().unwrap();
    assert!(
        read(&usages[1]) >= 1024 && read(&usages[3]) >= 1024,
        "{usages:#?}"
    );
    assert_eq!(read(&usages[2]), 0, "{usages:#?}");
    (d.iter().map(|d| reason_of(d).to_string()).collect(), usages)
}

/// Codex's "Fast" speed asks `service_tier: "priority"` (its model catalog: `"id":
/// "priority", "name": "Fast"`), and the answer says `priority` when fast mode served it
/// (openai-python 3.57, `Response.service_tier`). The streamed answer's tier is read into the
/// request's usage (so it is priced at the model's fast rate), and a switch back to the
/// standard tier, which caches apart (`service_tier_changed`), is named `speed_changed`.
#[tokio::test]
async fn codex_in_fast_mode_is_read_and_a_switch_of_tier_is_named() {
    let tiers = [Some("priority"), Some("priority"), None, None];
    let (reasons, usages) = codex_at_tiers("gpt-6.2-sol", tiers).await;
    assert_eq!(reasons, ["", "", "speed_changed", ""], "{usages:#?}");
    let fast: Vec<bool> = usages.iter().map(|u| u["fast"] == true).collect();
    assert_eq!(fast, [true, true, false, false], "{usages:#?}");
}

/// Flex processing (`service_tier: "flex"`, as pi-ai's `serviceTier` option or the OpenAI SDKs
/// send it) is answered `flex` and is a tier of its own (`service_tier_changed`): streamed
/// Codex-shaped requests on o3, standard, standard, flex, flex. The flex answers are logged
/// as such (so they are priced at half), the switch reads nothing and is named
/// `speed_changed`, and the second flex request reads what the first one cached.
#[tokio::test]
async fn a_switch_to_flex_processing_is_read_and_named() {
    let (reasons, usages) = codex_at_tiers("o3", [None, None, Some("flex"), Some("flex")]).await;
    assert_eq!(reasons, ["", "", "speed_changed", ""], "{usages:#?}");
    let flex: Vec<bool> = usages.iter().map(|u| u["flex"] == true).collect();
    assert_eq!(flex, [false, false, true, true], "{usages:#?}");
    assert!(usages.iter().all(|u| u["fast"] != true), "{usages:#?}");
}
