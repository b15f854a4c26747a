//! `cachet emulate` as a program: prints its address on stdout and serves on it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[tokio::test]
async fn emulate_prints_its_address_and_serves_requests() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args(["emulate", "--listen", "127.0.0.1:0", "--reply", "pong"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("cachet emulate listening on ")
        .map(str::to_string);
    let result = async {
        let url = url.ok_or_else(|| format!("unexpected first line: {line:?}"))?;
        let body = serde_json::json!({"model": "claude-haiku-4-5", "max_tokens": 8,
            "messages": [{"role": "user", "content": "ping"}]});
        let reply: serde_json::Value = reqwest::Client::new()
            .post(format!("{url}/v1/messages"))
            .json(&body)
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(reply)
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let reply = result.unwrap();
    assert_eq!(reply["content"][0]["text"], "pong");
    assert_eq!(reply["usage"]["output_tokens"], 1);
}
