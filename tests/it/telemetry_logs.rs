//! Logs written to a file: plain text (no colour codes), and one `request` span per request
//! whose fields name the route, the model, the session, the variant and the upstream's
//! request id on the request's last line.

use serde_json::json;

use crate::support::{client, serve_process, start_emulator};

#[tokio::test]
async fn log_file_has_no_colour_codes_and_the_request_line_names_the_request() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("cachet.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut serve = serve_process(|cmd| {
        cmd.args(["--anthropic-upstream", &emulator.url()])
            .env_remove("RUST_LOG")
            .stderr(log);
    });
    // Claude Code's shape: its session header, a system prompt, one user turn.
    let r = client()
        .post(format!("http://{}/v1/messages", serve.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-claude-code-session-id", "3f1c2a9e-log-test")
        .json(&json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "system": [{"type": "text", "text": "You are terse."}],
            "messages": [{"role": "user", "content": "hello"}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The Anthropic API names each response in `request-id` (PROVIDERS.md); the emulator too.
    let request_id = r.headers()["request-id"].to_str().unwrap().to_string();
    r.bytes().await.unwrap();
    let text = request_log(&log_path, &mut serve).await;
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file:\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("request done"))
        .unwrap_or_else(|| panic!("no request line:\n{text}"));
    for field in [
        "route=anthropic/messages",
        "model=claude-sonnet-4-5",
        "session=3f1c2a9e-log-test",
        "variant=none",
        &format!("request_id={request_id}"),
        "status=200",
    ] {
        assert!(line.contains(field), "`{field}` missing from: {line}");
    }
}

/// The log once its `request done` line is written (when the body ends), then stops the server.
async fn request_log(
    log_path: &std::path::Path,
    serve: &mut crate::support::ServeProcess,
) -> String {
    let mut text = String::new();
    for _ in 0..200 {
        text = std::fs::read_to_string(log_path).unwrap();
        if text.contains("request done") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let _ = serve.child.kill();
    let _ = serve.child.wait();
    text
}

/// With client keys, sessions live in the key's namespace (`team-a:ID`); the request line
/// names the session as the session log and `/sessions` do, so one can be found from the other.
#[tokio::test]
async fn the_request_line_names_the_session_in_its_key_namespace() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("cachet.log");
    let config = dir.path().join("cachet.toml");
    std::fs::write(
        &config,
        "[[server.client_keys]]\nname = \"team-a\"\nkey_env = \"CACHET_IT_LOG_TEAM_A\"\n",
    )
    .unwrap();
    let log = std::fs::File::create(&log_path).unwrap();
    let mut serve = serve_process(|cmd| {
        cmd.args(["--anthropic-upstream", &emulator.url()])
            .arg("--config")
            .arg(&config)
            .env("CACHET_IT_LOG_TEAM_A", "ck-log-team-a")
            .env_remove("RUST_LOG")
            .stderr(log);
    });
    let r = client()
        .post(format!("http://{}/v1/messages", serve.addr))
        .header("x-api-key", "ck-log-team-a")
        .header("anthropic-version", "2023-06-01")
        .header("x-claude-code-session-id", "5d2e-keyed")
        .json(&json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 20,
            "messages": [{"role": "user", "content": "hello"}]
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    let text = request_log(&log_path, &mut serve).await;
    let line = text
        .lines()
        .find(|l| l.contains("request done"))
        .unwrap_or_else(|| panic!("no request line:\n{text}"));
    assert!(line.contains("session=team-a:5d2e-keyed"), "{line}");
    assert!(
        !text.contains("ck-log-team-a"),
        "the client key in the log:\n{text}"
    );
}
