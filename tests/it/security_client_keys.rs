//! Client keys: with `[[server.client_keys]]` set, a request without one of them gets a
//! provider-format 401 before its body is read and is never forwarded; the client's cachet
//! key never goes upstream, the held key does; the key's name labels the metrics and
//! namespaces the sessions; and cachet refuses to hold a key as an open relay.

use cachet::config::{ClientKeyConfig, Config};

use crate::support::*;

const TEAM_A: &str = "ck-team-a-0123456789";
const TEAM_B: &str = "ck-team-b-9876543210";
const HELD_ANTHROPIC: &str = "sk-ant-api03-HELD-by-cachet";
const HELD_OPENAI: &str = "sk-proj-HELD-by-cachet";

/// A config holding both upstream keys, with clients `team-a` and `team-b`. Each test uses
/// its own variable names (tests run in parallel in one process).
fn keyed_config(upstream: &str, tag: &str) -> Config {
    let var = |what: &str| format!("CACHET_IT_{tag}_{what}");
    for (what, value) in [
        ("A", TEAM_A),
        ("B", TEAM_B),
        ("HELD_ANTHROPIC", HELD_ANTHROPIC),
        ("HELD_OPENAI", HELD_OPENAI),
    ] {
        std::env::set_var(var(what), value);
    }
    let mut config = test_config(upstream);
    config.upstream.anthropic_api_key_env = Some(var("HELD_ANTHROPIC"));
    config.upstream.openai_api_key_env = Some(var("HELD_OPENAI"));
    for (name, what) in [("team-a", "A"), ("team-b", "B")] {
        config.server.client_keys.push(ClientKeyConfig {
            name: name.into(),
            key_env: var(what),
        });
    }
    config
}

const MESSAGES: &str =
    r#"{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}}"#;

#[tokio::test]
async fn without_a_client_key_the_answer_is_401_before_the_body_and_nothing_is_forwarded() {
    let upstream = FakeUpstream::start(Script::json(200, ANSWER)).await;
    let proxy = start_proxy(keyed_config(&upstream.url(), "NOKEY")).await;
    // The head announces 1000 bytes that never come: the 401 must not wait for them.
    for (auth, path, anthropic) in [
        ("", "/v1/messages", true),
        ("x-api-key: ck-team-a-wrong\r\n", "/v1/messages", true),
        ("x-api-key: sk-ant-api03-someone\r\n", "/v1/messages", true),
        (
            "authorization: Bearer ck-team-a-01234567890\r\n",
            "/v1/chat/completions",
            false,
        ),
        (
            "authorization: Basic ck-team-a-0123456789\r\n",
            "/v1/chat/completions",
            false,
        ),
    ] {
        let answer = raw_exchange(
            proxy.addr,
            &format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\n{auth}anthropic-version: 2023-06-01\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n"
            ),
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 401"), "{auth}: {answer}");
        if anthropic {
            assert!(
                answer.contains(r#""type":"authentication_error""#),
                "{answer}"
            );
        } else {
            assert!(answer.contains(r#""code":"invalid_api_key""#), "{answer}");
        }
        assert!(
            !answer.contains("ck-team"),
            "the presented key is echoed: {answer}"
        );
    }
    let r = client()
        .get(format!("http://{}/v1/models", proxy.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(
        upstream.requests().is_empty(),
        "a request without a key was forwarded"
    );
    let metrics = metrics_text(&proxy).await;
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[("status", "401"), ("key", "none")]
        ),
        6.0
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_cachet_key_stays_here_and_the_held_key_goes_upstream() {
    let upstream = FakeUpstream::start(Script::json(200, ANSWER)).await;
    let proxy = start_proxy(keyed_config(&upstream.url(), "FORWARD")).await;
    let c = client();
    let r = c
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", TEAM_A)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(MESSAGES)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = c
        .post(format!("http://{}/v1/chat/completions", proxy.addr))
        .header("authorization", format!("Bearer {TEAM_B}"))
        .header("content-type", "application/json")
        .body(r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2);
    for r in &seen {
        for (name, value) in r.headers.iter() {
            let value = value.to_str().unwrap_or_default();
            assert!(
                !value.contains("ck-team"),
                "the client's cachet key went upstream in {name}"
            );
        }
    }
    assert_eq!(seen[0].headers["x-api-key"], HELD_ANTHROPIC);
    assert!(seen[0].headers.get("authorization").is_none());
    assert_eq!(
        seen[1].headers["authorization"],
        format!("Bearer {HELD_OPENAI}").as_str()
    );
    proxy.shutdown().await;
}

/// Claude Code signed in to a Claude plan sends its own OAuth token (`authorization: Bearer
/// sk-ant-oat01-…` with the `oauth-2025-04-20` beta; captured Claude Code traffic, as in
/// `providers::auth`). That token is the user's plan: the key cachet holds must not take its
/// place and move the request onto the team's API bill. Presenting the cachet key beside it
/// (`x-api-key`, e.g. through `ANTHROPIC_CUSTOM_HEADERS`) authenticates the request, and the
/// subscription token goes upstream as the client sent it, as a ChatGPT sign-in's does.
#[tokio::test]
async fn a_subscription_token_goes_upstream_in_place_of_the_held_key() {
    let upstream = FakeUpstream::start(Script::json(200, ANSWER)).await;
    let proxy = start_proxy(keyed_config(&upstream.url(), "OAUTH")).await;
    let own = "Bearer sk-ant-oat01-the-users-own-plan";
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", TEAM_A)
        .header("authorization", own)
        .header("anthropic-beta", "claude-code-20250219,oauth-2025-04-20")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(MESSAGES)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Without a token of its own, the same team's request goes with the held key.
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", TEAM_A)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(MESSAGES)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let seen = upstream.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].headers["authorization"], own);
    assert!(
        seen[0].headers.get("x-api-key").is_none(),
        "the held key went with a subscription token: {:?}",
        seen[0].headers.get("x-api-key")
    );
    assert_eq!(seen[1].headers["x-api-key"], HELD_ANTHROPIC);
    assert!(seen[1].headers.get("authorization").is_none());
    proxy.shutdown().await;
}

#[tokio::test]
async fn key_names_label_the_metrics_and_namespace_the_sessions() {
    let upstream = FakeUpstream::start(Script::json(200, ANSWER)).await;
    let proxy = start_proxy(keyed_config(&upstream.url(), "LABELS")).await;
    let c = client();
    // Both teams name the same session; team b also names team a's namespaced id.
    for (key, session) in [
        (TEAM_A, "s1"),
        (TEAM_B, "s1"),
        (TEAM_A, "s1"),
        (TEAM_B, "team-a:s1"),
    ] {
        let r = c
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("x-cachet-session", session)
            .header("content-type", "application/json")
            .body(MESSAGES)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let team_a = wait_for_requests(&proxy, "team-a:s1", 2).await;
    let team_b = wait_for_requests(&proxy, "team-b:s1", 1).await;
    wait_for_requests(&proxy, "team-b:team-a:s1", 1).await;
    assert_eq!(team_a["requests"], 2, "team b wrote into team a's session");
    assert_eq!(team_b["requests"], 1);
    let r = reqwest::get(format!("http://{}/sessions/s1", proxy.admin_addr))
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a session outside every namespace");
    // A browser or a link sends the namespaced id percent-encoded; it names the same session.
    for path in ["team-a%3As1", "team-a%3as1/timeline"] {
        let r = reqwest::get(format!("http://{}/sessions/{path}", proxy.admin_addr))
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "/sessions/{path}");
    }
    let encoded: serde_json::Value =
        reqwest::get(format!("http://{}/sessions/team-a%3As1", proxy.admin_addr))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(encoded["requests"], 2);

    let metrics = metrics_text(&proxy).await;
    let requests = |key: &str| {
        metric_sum(
            &metrics,
            "cachet_requests_total",
            &[("status", "200"), ("key", key)],
        )
    };
    assert_eq!((requests("team-a"), requests("team-b")), (2.0, 2.0));
    assert!(
        metric_sum(&metrics, "cachet_input_tokens_total", &[("key", "team-a")]) > 0.0,
        "token counters carry the key"
    );
    // The label's values are the configured names and `none`, nothing a client chose.
    for line in metrics.lines().filter(|l| l.contains("key=\"")) {
        let value = line
            .split("key=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(["team-a", "team-b", "none"].contains(&value), "{line}");
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn holding_a_key_without_client_keys_is_refused_unless_open_relay_is_allowed() {
    std::env::set_var("CACHET_IT_RELAY_HELD", HELD_ANTHROPIC);
    let mut config = test_config("http://127.0.0.1:1");
    config.upstream.anthropic_api_key_env = Some("CACHET_IT_RELAY_HELD".into());
    let err = cachet::server::spawn(config.clone())
        .await
        .err()
        .expect("an open relay was started");
    assert!(err.to_string().contains("allow_open_relay"), "{err}");
    config.server.allow_open_relay = true;
    let proxy = start_proxy(config).await;
    proxy.shutdown().await;

    // The binary exits with the error instead of serving.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cachet.toml");
    std::fs::write(
        &file,
        "[upstream]\nanthropic_api_key_env = \"CACHET_IT_RELAY_HELD\"\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&file)
        .current_dir(dir.path())
        .env("CACHET_IT_RELAY_HELD", HELD_ANTHROPIC)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut waited = 0;
    while child.try_wait().unwrap().is_none() {
        if waited > 600 {
            let _ = child.kill();
            panic!("cachet serve kept running as an open relay");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        waited += 1;
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allow_open_relay"), "{stderr}");
    assert!(!stderr.contains(HELD_ANTHROPIC));
}

/// An answer id is looked up in the asking key's namespace: team b naming team a's answer in
/// `previous_response_id` does not join team a's session (it starts one of its own), while
/// team a's next request does.
#[tokio::test]
async fn a_previous_response_id_continues_a_session_only_inside_its_key() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(keyed_config(
        &format!("http://{}", emulator.addr),
        "PREVRESP",
    ))
    .await;
    let instructions = "You are a careful assistant. ".repeat(300);
    let ask = |key: &'static str, input: &'static str, previous: Option<String>| {
        let mut body = serde_json::json!({"model": "gpt-4.1", "instructions": instructions,
            "input": input});
        if let Some(id) = previous {
            body["previous_response_id"] = serde_json::json!(id);
        }
        let url = format!("http://{}/v1/responses", proxy.addr);
        async move {
            let answer = answer_of(
                client()
                    .post(url)
                    .header("authorization", format!("Bearer {key}"))
                    .json(&body),
            )
            .await;
            answer["id"].as_str().unwrap().to_string()
        }
    };
    let first = ask(TEAM_A, "first question", None).await;
    // Team a's session, found by listing (its id is its fingerprint, in team a's namespace).
    let session = wait_for_sessions(&proxy, 1).await[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(session.starts_with("team-a:"), "{session}");
    ask(TEAM_B, "second question", Some(first.clone())).await;
    ask(TEAM_A, "second question", Some(first)).await;
    let log = wait_for_requests(&proxy, &session, 2).await;
    assert_eq!(
        log["requests"], 2,
        "team b's request is not in team a's session: {log}"
    );
    let listed = wait_for_sessions(&proxy, 2).await;
    let ids: Vec<&str> = listed.iter().filter_map(|s| s["id"].as_str()).collect();
    assert!(
        ids.iter().any(|id| id.starts_with("team-b:fp-")),
        "team b's request starts its own session: {ids:?}"
    );
}
