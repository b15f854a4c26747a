//! Secrets never reach logs, metrics or error messages — checked on the real binary's output
//! at the most verbose log level.

use std::io::Read;
use std::process::Stdio;

use crate::support::*;

const CLIENT_KEY: &str = "sk-ant-client-SECRET-1111";
const OPENAI_KEY: &str = "sk-openai-SECRET-2222";
const HELD_KEY: &str = "sk-held-by-cachet-SECRET-3333";

#[tokio::test]
async fn secrets_never_appear_in_logs_metrics_or_errors() {
    // The unreachable upstream's 502 goes through the upstream client's error mapping.
    let upstream = FakeUpstream::start(Script::json(
    401,
    "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}",
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cachet.toml");
    std::fs::write(
    &config,
    format!(
        "[server]\nallow_open_relay = true\n\n[upstream]\nanthropic = \"{}\"\nopenai = \"http://127.0.0.1:1\"\nanthropic_api_key_env = \"CACHET_TEST_HELD_KEY\"\n",
        upstream.url(),
    ),
    )
    .unwrap();
    let ServeProcess {
        mut child,
        addr,
        admin,
    } = serve_process(|cmd| {
        cmd.arg("--config")
            .arg(&config)
            .env("RUST_LOG", "trace")
            .env("CACHET_TEST_HELD_KEY", HELD_KEY)
            .stderr(Stdio::piped());
    });

    let c = client();
    let mut bodies = Vec::new();
    // Upstream 401, passed through; the upstream must have received cachet's held key.
    let r = c
        .post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", CLIENT_KEY)
        .header("anthropic-version", "2023-06-01")
        .body("{\"model\":\"m\",\"messages\":[]}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    bodies.push(r.text().await.unwrap());
    // Malformed JSON (400), unreachable upstream (502).
    let r = c
        .post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", CLIENT_KEY)
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    bodies.push(r.text().await.unwrap());
    let r = c
        .post(format!(
            "http://{addr}/v1/chat/completions?key={OPENAI_KEY}"
        ))
        .header("authorization", format!("Bearer {OPENAI_KEY}"))
        .body("{\"model\":\"gpt-4o\",\"messages\":[]}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    bodies.push(r.text().await.unwrap());
    let metrics = c
        .get(format!("http://{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();

    let got = upstream.requests();
    assert_eq!(
        got[0].headers["x-api-key"], HELD_KEY,
        "the held key replaces the client's"
    );

    // Stopped as a service manager stops it, so that the lines it batches are written.
    terminate(&child);
    let _ = child.wait();
    let mut logs = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut logs)
        .unwrap();
    assert!(logs.contains("request done"), "logs were captured: {logs}");
    for secret in [CLIENT_KEY, OPENAI_KEY, HELD_KEY, "SECRET"] {
        assert!(!logs.contains(secret), "secret in logs");
        assert!(!metrics.contains(secret), "secret in metrics");
        for b in &bodies {
            assert!(!b.contains(secret), "secret in error body: {b}");
        }
    }
}
