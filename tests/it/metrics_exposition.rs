//! The metrics cachet exports under varied traffic: clean for `promtool check metrics`,
//! bounded (no all-zero series for requests without usage), the cache-write TTL split
//! adding up, and the in-flight gauge following each response body to its end.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::traffic::{drive, observed_cachet};
use crate::support::{
    chunk, client, metric_sum, metric_value, metrics_text, start_proxy, test_config,
    wait_for_requests, FakeUpstream, Script, Step,
};

/// `promtool` from Debian's `prometheus` package (scripts/test.sh installs it).
pub fn promtool() -> &'static str {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "promtool not found: install Debian's `prometheus` package (scripts/test.sh does)"
    );
    "promtool"
}

#[tokio::test]
async fn exposition_is_clean_for_promtool_and_series_stay_meaningful() {
    let o = observed_cachet().await;
    drive(&o, 0).await;
    // Breaks are diagnosed once each response has ended, in the background.
    wait_for_requests(&o.proxy, "obs-sonnet", 3).await;
    let text = metrics_text(&o.proxy).await;

    let mut check = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {said}"
    );

    // The 1h write of the system block, and the split adding up to all cache writes.
    assert!(
        metric_sum(&text, "cachet_cache_write_tokens_total", &[("ttl", "1h")]) > 0.0,
        "{text}"
    );
    assert_eq!(
        metric_sum(&text, "cachet_cache_write_tokens_total", &[]),
        metric_sum(
            &text,
            "cachet_input_tokens_total",
            &[("kind", "cache_write")]
        )
    );
    // The changed system prompt, with its section and reason.
    assert!(
        metric_value(
            &text,
            "cachet_prefix_breaks_total",
            &[("section", "system"), ("reason", "system_changed")]
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    // The answers without usage (a Chat stream without `include_usage`, a stream cut before
    // its first event) are counted as such.
    for (provider, outcome) in [("openai", "complete"), ("anthropic", "upstream_cut")] {
        assert!(
            metric_sum(
                &text,
                "cachet_usage_missing_total",
                &[("provider", provider), ("outcome", outcome)]
            ) >= 1.0,
            "{provider} {outcome}: {text}"
        );
    }
    // The model list and the refused or token-less requests made no token series.
    for line in text.lines().filter(|l| l.contains("model=\"unknown\"")) {
        assert!(line.starts_with("cachet_requests_total{"), "{line}");
    }
    assert!(text.contains("cachet_build_info{version="), "{text}");
    assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
    assert_eq!(
        metric_value_plain(&text, "cachet_requests_in_flight"),
        Some(0.0)
    );
    o.proxy.shutdown().await;
}

/// A sample without labels.
fn metric_value_plain(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

async fn in_flight(proxy: &cachet::server::ProxyHandle) -> f64 {
    metric_value_plain(&metrics_text(proxy).await, "cachet_requests_in_flight").unwrap()
}

#[tokio::test]
async fn in_flight_follows_the_body_and_the_client_that_leaves() {
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    // An Anthropic stream that stops after its first event until the test opens the gate.
    let upstream = FakeUpstream::start(Script::sse(vec![
        chunk("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n"),
        Step::Wait(gate.clone()),
        chunk("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
    ]))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let send = || {
        client()
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "k")
            .header("anthropic-version", "2023-06-01")
            .body(r#"{"model":"claude-sonnet-4-5","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#)
            .send()
    };
    // Headers are back, the body is not: the request is still in flight.
    let held = send().await.unwrap();
    assert_eq!(held.status(), 200);
    assert_eq!(in_flight(&proxy).await, 1.0);
    // The client goes away mid-stream: the count drops with the body.
    drop(held);
    let mut now = 1.0;
    for _ in 0..500 {
        now = in_flight(&proxy).await;
        if now == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(now, 0.0, "a client that left is no longer in flight");
    // A stream read to its end also ends it.
    let second = send().await.unwrap();
    assert_eq!(in_flight(&proxy).await, 1.0);
    gate.notify_one();
    second.bytes().await.unwrap();
    let mut now = 1.0;
    for _ in 0..500 {
        now = in_flight(&proxy).await;
        if now == 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(now, 0.0);
    proxy.shutdown().await;
}

#[tokio::test]
async fn labels_a_hook_chooses_stay_bounded() {
    // A hook that names a new transformer and reason on every call, as a buggy memory
    // service might (its answer shape is the context-hook protocol's).
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls.clone();
    let hook = crate::support::start_hook_server(move |_| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some(
            serde_json::json!({"patch": [{"op": "system_part_set", "partName": "notes",
            "text": format!("note {n}"), "invalidateCacheReason": format!("refresh {n}")}],
            "transformerName": format!("memory-{n}")}),
        )
    })
    .await;
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":1,"output_tokens":1}}"#,
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let policy = crate::support::policy_file(
        dir.path(),
        "hooked",
        &format!(
            "name = \"hooked\"\n[[hook]]\nurl = \"{}\"\nevents = [\"context:ephemeral\"]\n",
            hook.url
        ),
    );
    let proxy = start_proxy(crate::support::policy_config(
        &upstream.url(),
        vec![policy],
        &dir.path().join("store"),
    ))
    .await;
    let requests = 80;
    for i in 0..requests {
        let body = serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 8,
            "system": "You are terse.", "messages": [{"role": "user", "content": format!("q{i}")}]});
        let (status, _) = crate::support::post_anthropic(&proxy, &format!("s{i}"), &body).await;
        assert_eq!(status, 200);
    }
    let text = metrics_text(&proxy).await;
    let values = |name: &str, label: &str| -> std::collections::BTreeSet<String> {
        let re = regex::Regex::new(&format!(r#"^{name}\{{.*\b{label}="([^"]*)""#)).unwrap();
        text.lines()
            .filter_map(|l| re.captures(l).map(|c| c[1].to_string()))
            .collect()
    };
    let transformers = values("cachet_patches_total", "transformer");
    let reasons = values("cachet_cache_invalidations_total", "reason");
    // 64 names of their own, then `other`; every operation still counted.
    assert_eq!(transformers.len(), 65, "{transformers:?}");
    assert!(transformers.contains("other"));
    assert_eq!(reasons.len(), 65, "{reasons:?}");
    assert_eq!(
        metric_sum(&text, "cachet_patches_total", &[("outcome", "applied")]),
        f64::from(requests)
    );
    proxy.shutdown().await;
}

/// An OpenAI Chat stream carries usage only when the request asks for it: "If set, an
/// additional chunk will be streamed before the `data: [DONE]` message. The `usage` field
/// on this chunk shows the token usage statistics for the entire request" (OpenAI's API
/// spec, `ChatCompletionStreamOptions.include_usage`). openai-python's
/// `chat.completions.create(stream=True)` leaves it out by default. cachet never adds it
/// (observation changes no bytes), so such a request's tokens and cost are unknown: it is
/// counted as such, by provider, endpoint and how the answer ended, where a request that
/// asked for usage, or a non-streamed one, is not.
#[tokio::test]
async fn an_answer_without_usage_is_counted_as_missing_its_usage() {
    let emulator = crate::support::start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let c = client();
    let chat = |stream: bool, usage: bool| {
        let mut body = serde_json::json!({"model": "gpt-5.1", "stream": stream,
            "messages": [{"role": "user", "content": "hello there"}]});
        if usage {
            body["stream_options"] = serde_json::json!({"include_usage": true});
        }
        c.post(format!("http://{}/v1/chat/completions", proxy.addr))
            .header("authorization", "Bearer sk-test")
            .json(&body)
            .send()
    };
    for (stream, usage) in [(true, false), (true, true), (false, false), (true, false)] {
        let answer = chat(stream, usage).await.unwrap();
        assert_eq!(answer.status(), 200);
        answer.bytes().await.unwrap();
    }
    let mut text = String::new();
    for _ in 0..100 {
        text = metrics_text(&proxy).await;
        if metric_sum(&text, "cachet_requests_total", &[("endpoint", "chat")]) >= 4.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let missing = [
        ("provider", "openai"),
        ("endpoint", "chat"),
        ("outcome", "complete"),
    ];
    assert_eq!(
        metric_value(&text, "cachet_usage_missing_total", &missing),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        metric_sum(&text, "cachet_usage_missing_total", &[]),
        2.0,
        "{text}"
    );
    // The two that carried usage are in the token counters.
    assert!(metric_sum(&text, "cachet_input_tokens_total", &[("model", "gpt-5.1")]) > 0.0);
    proxy.shutdown().await;
}

/// One prompt on a fresh emulator, through cachet, twice, in session `s` (Messages by its
/// session header, Chat by its `prompt_cache_key`): the answers, the session log's request
/// entries and the run's `cachet_cost_usd_total` for the body's model.
async fn prompt_twice(
    path: &str,
    body: &serde_json::Value,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>, f64) {
    let emulator = crate::support::start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let mut answers = Vec::new();
    for _ in 0..2 {
        let answer = if path == "/v1/messages" {
            let (status, answer) = crate::support::post_anthropic(&proxy, "s", body).await;
            assert_eq!(status, 200, "{answer}");
            answer
        } else {
            crate::support::answer_of(
                client()
                    .post(format!("http://{}{path}", proxy.addr))
                    .header("authorization", "Bearer k")
                    .json(body),
            )
            .await
        };
        answers.push(answer);
    }
    let log = wait_for_requests(&proxy, "s", 2).await;
    let entries: Vec<serde_json::Value> = crate::support::request_entries(&log)
        .into_iter()
        .cloned()
        .collect();
    let model = body["model"].as_str().unwrap();
    let cost = metric_sum(
        &metrics_text(&proxy).await,
        "cachet_cost_usd_total",
        &[("model", model)],
    );
    proxy.shutdown().await;
    emulator.shutdown().await;
    (answers, entries, cost)
}

/// [`prompt_twice`] of a Claude Opus 5.5 prompt with `options` added to its body (a speed,
/// an inference geo): the answers' usages, the request entries and the cost.
async fn opus_prompt_twice(
    options: serde_json::Value,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>, f64) {
    let mut body = serde_json::json!({"model": "claude-opus-5-5", "max_tokens": 64,
        "system": [{"type": "text", "text": "You are a careful coding agent. ".repeat(300),
            "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Rename the loader."}]});
    for (k, v) in options.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let (answers, entries, cost) = prompt_twice("/v1/messages", &body).await;
    let usages = answers.iter().map(|a| a["usage"].clone()).collect();
    (usages, entries, cost)
}

/// Two runs of [`opus_prompt_twice`] read and wrote the same tokens, and the second cost
/// `factor` times the first.
fn same_tokens_at_a_factor(
    (a, standard): (&[serde_json::Value], f64),
    (b, priced): (&[serde_json::Value], f64),
    factor: f64,
) {
    for (x, y) in a.iter().zip(b) {
        for k in [
            "input_tokens",
            "cache_read_input_tokens",
            "cache_creation_input_tokens",
        ] {
            assert_eq!(x[k], y[k], "{k}");
        }
    }
    assert!(a[1]["cache_read_input_tokens"].as_u64().unwrap() > 0);
    assert!(standard > 0.0);
    assert!(
        (priced - factor * standard).abs() < 1e-9,
        "{priced} against {standard}"
    );
}

/// Claude Code's `/fast` sends `speed: "fast"`; the answer says which speed served it
/// (`usage.speed`), and fast mode "is priced at a multiplier on standard rates across the
/// full context window" (platform.claude.com, Fast mode): 2x on Opus 5.5. The same two
/// prompts, standard on one emulator and fast on another, read and write the same tokens
/// and cost twice as much in fast mode; the session log keeps which answers were fast.
#[tokio::test]
async fn a_fast_mode_answer_is_priced_at_the_fast_rate() {
    let mut runs = Vec::new();
    for speed in ["standard", "fast"] {
        let (usages, entries, cost) = opus_prompt_twice(serde_json::json!({"speed": speed})).await;
        assert!(usages.iter().all(|u| u["speed"] == speed), "{usages:#?}");
        let logged: Vec<bool> = entries.iter().map(|e| e["usage"]["fast"] == true).collect();
        assert_eq!(logged, vec![speed == "fast"; 2], "{entries:#?}");
        runs.push((usages, cost));
    }
    same_tokens_at_a_factor((&runs[0].0, runs[0].1), (&runs[1].0, runs[1].1), 2.0);
}

/// An organisation or request on US-only inference (`inference_geo: "us"`; Claude Code
/// users' organisations can turn it on for every request) gets answers that say so in
/// `usage.inference_geo`, billed at 1.1x every price ("A 1.1x pricing multiplier
/// applies", Claude Platform on AWS, Data residency). The same two prompts, global on one
/// emulator and US-only on another, read and write the same tokens and cost 1.1 times as
/// much; the session log marks the US-only answers.
#[tokio::test]
async fn a_us_only_answer_is_priced_at_its_multiplier() {
    let mut runs = Vec::new();
    for geo in ["global", "us"] {
        let (usages, entries, cost) =
            opus_prompt_twice(serde_json::json!({"inference_geo": geo})).await;
        assert!(
            usages.iter().all(|u| u["inference_geo"] == geo),
            "{usages:#?}"
        );
        let logged: Vec<bool> = entries
            .iter()
            .map(|e| e["usage"]["us_only"] == true)
            .collect();
        assert_eq!(logged, vec![geo == "us"; 2], "{entries:#?}");
        runs.push((usages, cost));
    }
    same_tokens_at_a_factor((&runs[0].0, runs[0].1), (&runs[1].0, runs[1].1), 1.1);
}

/// The OpenAI SDKs ask for fast mode with `service_tier: "fast"` (or `"priority"`), and the
/// answer says `priority` when fast mode served it; OpenAI bills it at a multiplier on every
/// rate, 2x on GPT-6.2 Sol ("Fast mode costs twice the Standard rate", its model page). Flex
/// processing (`service_tier: "flex"`, answered `flex`) is billed at half: "Tokens are priced
/// at Batch API rates" (developers.openai.com, Flex processing), 50% of the standard ones.
/// The same two Chat Completions requests, on the standard tier, in fast mode and on flex,
/// each on an emulator of its own, read and write the same tokens and cost 1, 2 and 0.5
/// times as much.
#[tokio::test]
async fn openai_answers_are_priced_at_the_rate_of_their_tier() {
    let body = |tier: Option<&str>| {
        let mut b = serde_json::json!({"model": "gpt-6.2-sol", "prompt_cache_key": "s",
            "messages": [
                {"role": "system", "content": "You are a careful coding agent. ".repeat(300)},
                {"role": "user", "content": "Rename the loader."}]});
        if let Some(tier) = tier {
            b["service_tier"] = serde_json::json!(tier);
        }
        b
    };
    let mut runs = Vec::new();
    for (tier, answered, logged_as) in [
        (None, "default", None),
        (Some("fast"), "priority", Some("fast")),
        (Some("flex"), "flex", Some("flex")),
    ] {
        let (answers, entries, cost) = prompt_twice("/v1/chat/completions", &body(tier)).await;
        let served: Vec<&serde_json::Value> = answers.iter().map(|a| &a["service_tier"]).collect();
        assert_eq!(served, [answered, answered], "{answers:#?}");
        for entry in &entries {
            for flag in ["fast", "flex"] {
                let expected = logged_as == Some(flag);
                assert_eq!(
                    entry["usage"][flag] == true,
                    expected,
                    "{flag}: {entries:#?}"
                );
            }
        }
        runs.push((cost, answers));
    }
    let (standard, a) = &runs[0];
    for (_, b) in &runs[1..] {
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x["usage"], y["usage"]);
        }
    }
    assert!(
        a[1]["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(*standard > 0.0);
    let (fast, flex) = (runs[1].0, runs[2].0);
    assert!(
        (fast - 2.0 * standard).abs() < 1e-9,
        "{fast} against {standard}"
    );
    assert!(
        (flex - 0.5 * standard).abs() < 1e-9,
        "{flex} against {standard}"
    );
}
