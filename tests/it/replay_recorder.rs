//! Trace recording: secrets never written, valid JSONL, read back equal, bounded queue.

use http::HeaderMap;
use serde_json::json;

use cachet::trace::{read_traces, recordable_headers, Record, Recorder, TRACE_VERSION};
use cachet::usage::Usage;

fn record(n: u64, headers: &HeaderMap) -> Record {
    Record {
        v: TRACE_VERSION,
        time_ms: 1_768_467_600_000 + n * 1500,
        session: format!("s{}", n % 2),
        provider: "anthropic".into(),
        endpoint: "messages".into(),
        path: "/v1/messages".into(),
        headers: recordable_headers(headers),
        body: json!({"model": "claude-sonnet-4-5", "max_tokens": 1024,
            "messages": [{"role": "user", "content": format!("prompt {n}")}]}),
        body_text: None,
        body_base64: None,
        usage: Some(Usage {
            cache_read: n,
            uncached: 10,
            output: 5,
            ..Default::default()
        }),
        status: Some(200),
        response_id: None,
        output: None,
    }
}

fn client_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("x-api-key", "sk-ant-api03-SECRETSECRET".parse().unwrap());
    h.insert("authorization", "Bearer sk-SECRETSECRET".parse().unwrap());
    h.insert("anthropic-version", "2023-06-01".parse().unwrap());
    h.insert("user-agent", "pi-coding-agent/0.31.0".parse().unwrap());
    h
}

#[tokio::test]
async fn records_round_trip_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let (recorder, task) = Recorder::start(dir.path(), 64).unwrap();
    let written: Vec<Record> = (0..5).map(|n| record(n, &client_headers())).collect();
    for r in &written {
        recorder.record(r.clone());
    }
    drop(recorder);
    task.finish().await;

    let file = dir.path().join("2026-01-15.jsonl");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("SECRET"), "a credential reached the trace");
    assert!(!text.contains("x-api-key") && !text.contains("authorization"));
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["v"], 1);
        assert!(v["time"]
            .as_str()
            .unwrap()
            .starts_with("2026-01-15T09:00:0"));
    }
    assert_eq!(text.lines().count(), 5);
    let back = read_traces(&[dir.path().to_path_buf()]).unwrap();
    assert_eq!(back, written);
    assert_eq!(back[0].headers["user-agent"], "pi-coding-agent/0.31.0");
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    // On the current-thread runtime the writer cannot run before this test yields, so a
    // queue of 2 takes two records and must drop the third without blocking.
    let (recorder, task) = Recorder::start(dir.path(), 2).unwrap();
    for n in 0..3 {
        recorder.record(record(n, &HeaderMap::new()));
    }
    assert_eq!(recorder.dropped(), 1);
    drop(recorder);
    task.finish().await;
    let back = read_traces(&[dir.path().join("2026-01-15.jsonl")]).unwrap();
    assert_eq!(back.len(), 2);
}

#[tokio::test]
async fn records_go_to_one_file_per_utc_day() {
    let dir = tempfile::tempdir().unwrap();
    let (recorder, task) = Recorder::start(dir.path(), 8).unwrap();
    let mut late = record(0, &HeaderMap::new());
    late.time_ms += 86_400_000;
    recorder.record(record(0, &HeaderMap::new()));
    recorder.record(late);
    drop(recorder);
    task.finish().await;
    assert!(dir.path().join("2026-01-15.jsonl").exists());
    assert!(dir.path().join("2026-01-16.jsonl").exists());
    assert_eq!(read_traces(&[dir.path().to_path_buf()]).unwrap().len(), 2);
}
