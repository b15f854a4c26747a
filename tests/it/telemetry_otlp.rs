//! OTLP export: one span per generation request, named and attributed after the GenAI
//! semantic conventions, received and decoded by a real OTLP/HTTP endpoint; a collector
//! that does not answer never holds a request up, and what cannot be queued is counted.
//!
//! Attribute names checked against the OpenTelemetry semantic conventions registry
//! (`gen_ai.provider.name`, which replaces `gen_ai.system`; `gen_ai.usage.cache_read.input_tokens`
//! and `gen_ai.usage.cache_creation.input_tokens`, both "SHOULD be included in
//! gen_ai.usage.input_tokens"), as published in @opentelemetry/semantic-conventions.

use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde_json::json;

use crate::support::otlp::{start_receiver, Received};
use crate::support::traffic::{drive, observed_cachet_with};
use crate::support::{client, metric_value, metrics_text, start_emulator, test_config};
use cachet::telemetry::OtlpConfig;

fn otlp(url: &str, queue_size: usize, timeout_ms: u64) -> OtlpConfig {
    let text = format!(
        "[telemetry.otlp]\nendpoint = \"{url}\"\nservice_name = \"cachet-test\"\nqueue_size = {queue_size}\ntimeout_ms = {timeout_ms}\n"
    );
    cachet::config::Config::parse(std::path::Path::new("cachet.toml"), &text)
        .unwrap()
        .telemetry
        .otlp
        .unwrap()
}

#[tokio::test]
async fn each_generation_request_is_one_genai_span() {
    let receiver = start_receiver(false).await;
    let o =
        observed_cachet_with(|c| c.telemetry.otlp = Some(otlp(&receiver.url, 2048, 10_000))).await;
    drive(&o, 0).await;
    // A client already tracing its work: cachet's span joins the client's trace.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let r = client()
        .post(format!("http://{}/v1/chat/completions", o.proxy.addr))
        .header("authorization", "Bearer sk-test")
        .header("traceparent", format!("00-{trace_id}-{parent_id}-01"))
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let chat_request_id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    r.bytes().await.unwrap();
    let metrics_before = metrics_text(&o.proxy).await;
    let generation_requests = metric_sum_generation(&metrics_before);
    let metrics = o.proxy.metrics.clone();
    // Shutting down sends what is queued.
    o.proxy.shutdown().await;
    let metrics_after = String::from_utf8(metrics.render()).unwrap();

    // A request's prefix break, diagnosed after its answer, is a span of its own under
    // the request's: its reason and who can fix it.
    let (breaks, spans): (Vec<Received>, Vec<Received>) = receiver
        .spans()
        .into_iter()
        .partition(|s| s.span.name == "cachet.prefix_break");
    let counted = crate::support::metric_sum(&metrics_after, "cachet_prefix_breaks_total", &[]);
    assert!(counted > 0.0, "the traffic has prefix breaks");
    assert_eq!(breaks.len() as f64, counted, "{breaks:#?}");
    for b in &breaks {
        assert_eq!(b.span.kind, SpanKind::Internal as i32);
        assert!(
            spans
                .iter()
                .any(|s| s.span.span_id == b.span.parent_span_id
                    && s.span.trace_id == b.span.trace_id)
        );
        let blame = b.str("cachet.break.blame").unwrap_or_default();
        assert!(
            ["client", "policy", "provider", "unknown"].contains(&blame),
            "{b:#?}"
        );
        assert!(b.str("cachet.break.reason").is_some(), "{b:#?}");
    }
    assert!(receiver
        .content_types
        .lock()
        .unwrap()
        .iter()
        .all(|t| t == "application/x-protobuf"));
    assert_eq!(
        spans.len() as f64,
        generation_requests,
        "one span per generation request: {spans:#?}"
    );
    for s in &spans {
        assert_eq!(s.service, "cachet-test");
        assert_eq!(s.span.kind, SpanKind::Client as i32);
        assert_eq!(s.str("gen_ai.operation.name"), Some("chat"));
        assert_eq!(s.str("gen_ai.provider.name"), s.str("gen_ai.system"));
        assert!(s.span.end_time_unix_nano >= s.span.start_time_unix_nano);
        // Every input token counted once, cached ones included.
        if let Some(input) = s.int("gen_ai.usage.input_tokens") {
            let read = s.int("gen_ai.usage.cache_read.input_tokens").unwrap();
            let written = s.int("gen_ai.usage.cache_creation.input_tokens").unwrap();
            assert!(input >= read + written, "{s:#?}");
            assert!(s.int("gen_ai.usage.output_tokens").is_some());
        }
    }
    // The first Sonnet request wrote the system prompt to the 1h cache.
    let sonnet: Vec<&Received> = spans
        .iter()
        .filter(|s| s.str("gen_ai.request.model") == Some("claude-sonnet-4-5"))
        .collect();
    let writer = sonnet
        .iter()
        .find(|s| s.int("cachet.usage.cache_creation_1h.input_tokens") > Some(0))
        .unwrap_or_else(|| panic!("no 1h write: {sonnet:#?}"));
    assert_eq!(writer.span.name, "chat claude-sonnet-4-5");
    assert_eq!(writer.str("gen_ai.conversation.id"), Some("obs-sonnet"));
    assert_eq!(
        writer.str("gen_ai.response.model"),
        Some("claude-sonnet-4-5")
    );
    assert_eq!(writer.str("gen_ai.provider.name"), Some("anthropic"));
    assert!(writer.double("cachet.cost_usd").is_some_and(|c| c > 0.0));
    assert!(writer
        .str("cachet.upstream.request_id")
        .is_some_and(|id| id.starts_with("req_")));
    // A variant from the A/B injection.
    assert!(spans.iter().any(|s| matches!(
        s.str("cachet.variant"),
        Some("system-prompt" | "context-hook")
    )));
    // The upstream's 429 and the cut stream are errors.
    let rate_limited = spans
        .iter()
        .find(|s| s.int("http.response.status_code") == Some(429))
        .expect("the 429");
    assert_eq!(rate_limited.str("error.type"), Some("429"));
    assert_eq!(
        rate_limited.span.status.as_ref().map(|s| s.code),
        Some(StatusCode::Error as i32)
    );
    assert!(spans
        .iter()
        .any(|s| s.str("error.type") == Some("upstream_cut")));
    // The span of the traced client is a child of the client's span.
    let child = spans
        .iter()
        .find(|s| s.str("cachet.upstream.request_id") == Some(chat_request_id.as_str()))
        .expect("the traced request");
    assert_eq!(hex::encode(&child.span.trace_id), trace_id);
    assert_eq!(hex::encode(&child.span.parent_span_id), parent_id);
    assert_eq!(child.str("gen_ai.provider.name"), Some("openai"));
    assert_eq!(
        metric_value(
            &metrics_before,
            "cachet_otlp_spans_total",
            &[("outcome", "dropped")]
        ),
        Some(0.0)
    );
}

/// Requests to the generation endpoints (messages, chat, responses) the proxy counted.
fn metric_sum_generation(text: &str) -> f64 {
    ["messages", "chat", "responses"]
        .iter()
        .map(|e| crate::support::metric_sum(text, "cachet_requests_total", &[("endpoint", e)]))
        .sum()
}

#[tokio::test]
async fn a_stuck_collector_never_holds_a_request_and_drops_are_counted() {
    let receiver = start_receiver(true).await;
    let emulator = start_emulator().await;
    let mut config = test_config(&emulator.url());
    config.telemetry.otlp = Some(otlp(&receiver.url, 2, 60_000));
    let proxy = cachet::server::spawn(config).await.unwrap();
    let requests = 10;
    // While the collector holds its first export, every request still answers at once.
    let sent = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        for i in 0..requests {
            let r = client()
                .post(format!("http://{}/v1/messages", proxy.addr))
                .header("x-api-key", "k")
                .header("anthropic-version", "2023-06-01")
                .json(&json!({"model": "claude-haiku-4-5", "max_tokens": 8,
                    "messages": [{"role": "user", "content": format!("ping {i}")}]}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        }
    })
    .await;
    assert!(sent.is_ok(), "requests waited on the exporter");
    // The queue holds 2; the spans of the other requests were dropped and counted.
    let m = metrics_text(&proxy).await;
    let dropped = metric_value(&m, "cachet_otlp_spans_total", &[("outcome", "dropped")]);
    assert_eq!(dropped, Some(f64::from(requests - 2)), "{m}");
    receiver.release();
    let metrics = proxy.metrics.clone();
    proxy.shutdown().await;
    let m = String::from_utf8(metrics.render()).unwrap();
    assert_eq!(
        metric_value(&m, "cachet_otlp_spans_total", &[("outcome", "exported")]),
        Some(2.0),
        "{m}"
    );
    assert_eq!(receiver.spans().len(), 2);
}
