//! `--record` loses nothing silently: requests answered 502 and bodies serde_json cannot
//! read into a value (a lone `\ud800` escape, nesting deeper than 128) are recorded, the
//! latter as their bytes; replay skips those with a counted error; and the records dropped
//! are exported as a metric.

use base64::Engine;

use cachet::trace::read_traces;

use crate::support::*;

const ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#;

#[tokio::test]
async fn every_forwarded_request_is_recorded() {
    let upstream = FakeUpstream::start(Script::json(200, ANSWER)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = test_config(&upstream.url());
    // OpenAI requests go nowhere: answered 502.
    config.upstream.openai = "http://127.0.0.1:1".into();
    config.record.dir = Some(dir.path().to_path_buf());
    let proxy = start_proxy(config).await;

    let lone_surrogate = r#"{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"half a pair: \ud800"}]}"#.to_string();
    let deep = format!(
        r#"{{"model":"claude-sonnet-4-5","max_tokens":8,"metadata":{{"x":{}1{}}},"messages":[{{"role":"user","content":"deep"}}]}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    assert!(serde_json::from_str::<serde_json::Value>(&lone_surrogate).is_err());
    assert!(serde_json::from_str::<serde_json::Value>(&deep).is_err());
    let c = client();
    for body in [&lone_surrogate, &deep] {
        let r = c
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "sk-ant-api03-SECRET")
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "forwarded and answered");
    }
    let r = c
        .post(format!("http://{}/v1/chat/completions", proxy.addr))
        .header("authorization", "Bearer sk-SECRET")
        .header("x-cachet-session", "unreachable")
        .body(r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let metrics = metrics_text(&proxy).await;
    for cause in ["queue_full", "write_failed"] {
        assert_eq!(
            metric_value(
                &metrics,
                "cachet_trace_records_dropped_total",
                &[("cause", cause)]
            ),
            Some(0.0),
            "{cause}"
        );
    }
    proxy.shutdown().await;

    let records = read_traces(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
    let raw: Vec<Vec<u8>> = records
        .iter()
        .filter_map(|r| r.body_base64.as_ref())
        .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
        .collect();
    assert_eq!(raw, vec![lone_surrogate.into_bytes(), deep.into_bytes()]);
    let failed = records.iter().find(|r| r.endpoint == "chat").unwrap();
    assert_eq!(failed.status, Some(502));
    assert_eq!(failed.session, "unreachable");
    let text = std::fs::read_to_string(
        std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(!text.contains("SECRET"));

    // Replay skips the raw records and says so.
    let stats = cachet::replay::run::replay_arm(
        "as-recorded",
        &records,
        &mut cachet::replay::shaper::AsRecorded,
        None,
        &mut || {},
    );
    assert_eq!((stats.requests, stats.errors), (1, 2), "{stats:?}");
    assert!(stats.error_messages.iter().all(|m| m.contains("raw bytes")));
}
