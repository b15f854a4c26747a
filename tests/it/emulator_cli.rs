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

/// `cachet emulate` with its stdout's first line read: the base URL.
fn start(args: &[&str]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .arg("emulate")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("cachet emulate listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    (child, url)
}

/// Started with `--api-key`, the emulator is as strict as the providers: pi sending the
/// variable's name (`x-api-key: ANTHROPIC_API_KEY`, `authorization: Bearer OPENAI_API_KEY`)
/// or nothing gets each provider's 401 (Anthropic `authentication_error`, "invalid
/// x-api-key"; OpenAI `invalid_api_key`), and the message never repeats what was sent; the
/// key itself, and a subscription token given beside it, are served.
#[tokio::test]
async fn emulate_with_api_keys_refuses_any_other_credential_as_the_provider_does() {
    let (mut child, url) = start(&["--api-key", "sk-ant-test", "--api-key", "sk-openai-test"]);
    let client = reqwest::Client::new();
    let messages = serde_json::json!({"model": "claude-haiku-4-5", "max_tokens": 8,
        "messages": [{"role": "user", "content": "ping"}]});
    let chat = serde_json::json!({"model": "gpt-4.1",
        "messages": [{"role": "user", "content": "ping"}]});
    let anthropic = |key: Option<(&'static str, &'static str)>| {
        let mut r = client.post(format!("{url}/v1/messages")).json(&messages);
        if let Some((name, value)) = key {
            r = r.header(name, value);
        }
        r.header("anthropic-version", "2023-06-01").send()
    };
    let openai = |bearer: Option<&'static str>| {
        let mut r = client
            .post(format!("{url}/v1/chat/completions"))
            .json(&chat);
        if let Some(b) = bearer {
            r = r.bearer_auth(b);
        }
        r.send()
    };
    let status_and_body = async |r: reqwest::Response| {
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        (status, body)
    };
    let results = async {
        let wrong_anthropic =
            status_and_body(anthropic(Some(("x-api-key", "ANTHROPIC_API_KEY"))).await?).await;
        let none_anthropic = status_and_body(anthropic(None).await?).await;
        let right_anthropic = anthropic(Some(("x-api-key", "sk-ant-test")))
            .await?
            .status();
        let wrong_openai = status_and_body(openai(Some("OPENAI_API_KEY")).await?).await;
        let right_openai = openai(Some("sk-openai-test")).await?.status();
        let clock = async || -> Result<u64, reqwest::Error> {
            let v: serde_json::Value = client
                .get(format!("{url}/emulator/clock"))
                .send()
                .await?
                .json()
                .await?;
            Ok(v["now_ms"].as_u64().unwrap())
        };
        let before = clock().await?;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let after = clock().await?;
        Ok::<_, reqwest::Error>((
            wrong_anthropic,
            none_anthropic,
            right_anthropic,
            wrong_openai,
            right_openai,
            (before, after),
        ))
    }
    .await;
    let _ = child.kill();
    let _ = child.wait();
    let (wrong_a, none_a, right_a, wrong_o, right_o, (before, after)) = results.unwrap();
    assert_eq!(wrong_a.0, 401, "{:?}", wrong_a.1);
    assert_eq!(wrong_a.1["type"], "error");
    assert_eq!(wrong_a.1["error"]["type"], "authentication_error");
    assert_eq!(wrong_a.1["error"]["message"], "invalid x-api-key");
    assert_eq!(none_a.0, 401);
    assert_eq!(right_a, 200);
    assert_eq!(wrong_o.0, 401, "{:?}", wrong_o.1);
    assert_eq!(wrong_o.1["error"]["code"], "invalid_api_key");
    assert!(!wrong_o.1.to_string().contains("OPENAI_API_KEY"));
    assert_eq!(right_o, 200);
    // The clock of `cachet emulate` runs: an agent pacing its requests is seen at its pace,
    // so a slow session never reaches OpenAI's routing rate.
    assert!(after >= before + 50, "{before} -> {after}");
}
