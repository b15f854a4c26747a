//! Monitoring without a policy (DESIGN §4): sessions, the request log and the diagnosis
//! are kept for every generation request, computed after the response, and the bytes go
//! out as the client sent them. A request with no session id continues the session its
//! history extends, so a tool list that changes mid-session is a diagnosed break there.

use serde_json::{json, Value};

use crate::support::*;

fn system() -> String {
    "You are pi, a coding agent. Read before you edit. ".repeat(120)
}

/// pi on the Anthropic API sends no session id: the session is its conversation.
fn pi_body(tools: &[&str], turns: usize) -> Value {
    let mut messages = Vec::new();
    for i in 0..=turns {
        messages.push(json!({"role": "user", "content": format!("Step {i}: go on.")}));
        if i < turns {
            messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("Did step {i}.")}]}));
        }
    }
    json!({"model": "claude-sonnet-4-5", "max_tokens": 64,
        "system": [{"type": "text", "text": system(), "cache_control": {"type": "ephemeral"}}],
        "tools": tools.iter().map(|t| json!({"name": t, "input_schema": {"type": "object"}})).collect::<Vec<_>>(),
        "messages": messages})
}

async fn post(proxy: &cachet::server::ProxyHandle, body: &Value) -> reqwest::Response {
    client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("user-agent", "pi-coding-agent")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn with_no_policy_sessions_are_kept_and_bytes_go_as_sent() {
    let emulator = start_emulator().await;
    let upstream = FakeUpstream::start(Script::json(
        200,
        r#"{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":5,"output_tokens":1}}"#,
    ))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    // Formatting a proxy that re-serialised would lose.
    let body = format!(
        "{{ \"model\":\"claude-sonnet-4-5\",  \"max_tokens\":64,\n \"system\":{},\"messages\":[{{\"role\":\"user\",\"content\":\"hi\",\"n\":1.50}}]}}",
        serde_json::to_string(&system()).unwrap()
    );
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("x-cachet-session", "mon")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(upstream.requests()[0].body, body.as_bytes());
    let log = wait_for_requests(&proxy, "mon", 1).await;
    assert_eq!(log["entries"][0]["type"], "request");
    let list: Value = reqwest::get(format!("http://{}/sessions", proxy.admin_addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["id"] == "mon"));
    let page = reqwest::get(format!("http://{}/sessions/mon/timeline", proxy.admin_addr))
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    proxy.shutdown().await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn monitoring_can_be_turned_off() {
    let upstream = FakeUpstream::start(Script::json(200, r#"{"content":[],"usage":{}}"#)).await;
    let mut config = test_config(&upstream.url());
    config.sessions.monitor = false;
    let proxy = start_proxy(config).await;
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("x-cachet-session", "off")
        .body(r#"{"model":"m","messages":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = reqwest::get(format!("http://{}/sessions", proxy.admin_addr))
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "no sessions are kept");
    proxy.shutdown().await;
}

/// pi (no session id) gets a new tool mid-session: the request continues the session its
/// history extends, and the change is a `tools_changed` break there, not a new session.
#[tokio::test]
async fn a_request_without_an_id_continues_the_session_it_extends() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    for (tools, turns) in [
        (&["read"][..], 0),
        (&["read"][..], 1),
        (&["read", "mcp_search"][..], 2),
    ] {
        let r = post(&proxy, &pi_body(tools, turns)).await;
        assert_eq!(r.status(), 200);
        let _ = r.text().await;
        // Each answer is in the log before the next request, as for an agent.
        for _ in 0..200 {
            let list: Value = reqwest::get(format!("http://{}/sessions", proxy.admin_addr))
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let total: u64 = list["sessions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["requests"].as_u64().unwrap())
                .sum();
            if total as usize > turns {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    let list: Value = reqwest::get(format!("http://{}/sessions", proxy.admin_addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sessions = list["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1, "one session: {list}");
    let id = sessions[0]["id"].as_str().unwrap();
    let log = wait_for_requests(&proxy, id, 3).await;
    let last = (*request_entries(&log).last().unwrap()).clone();
    assert_eq!(last["diagnosis"]["reason"], "tools_changed", "{last}");
    assert_eq!(last["diagnosis"]["tool"], "mcp_search");
    proxy.shutdown().await;
    emulator.shutdown().await;
}

/// A stateful Responses conversation (openai-python's `responses.create` with
/// `previous_response_id`, the default `store: true`) sends only its new input on each
/// request: the provider holds the rest. Each request names the answer it continues, so
/// it continues that answer's session and lane, not a session of its own per request
/// (client keys: `security_client_keys`).
#[tokio::test]
async fn a_chain_of_previous_response_ids_is_one_session() {
    let emulator = start_emulator().await;
    let traces = tempfile::tempdir().unwrap();
    let mut config = test_config(&format!("http://{}", emulator.addr));
    config.record.dir = Some(traces.path().to_path_buf());
    let proxy = start_proxy(config).await;
    let instructions = "You are a careful assistant. ".repeat(300);
    let mut previous: Option<String> = None;
    let mut first_session = None;
    for (i, question) in ["first question", "second", "third", "fourth"]
        .iter()
        .enumerate()
    {
        let mut body = json!({"model": "gpt-4.1", "instructions": instructions, "input": question});
        if let Some(id) = &previous {
            body["previous_response_id"] = json!(id);
        }
        let answer = answer_of(
            client()
                .post(format!("http://{}/v1/responses", proxy.addr))
                .header("authorization", "Bearer sk-test")
                .json(&body),
        )
        .await;
        previous = Some(answer["id"].as_str().unwrap().to_string());
        if i == 0 {
            // The first request is a new conversation: its session is its fingerprint.
            let listed = wait_for_sessions(&proxy, 1).await;
            first_session = Some(listed[0]["id"].as_str().unwrap().to_string());
        }
    }
    let session = first_session.unwrap();
    let log = wait_for_requests(&proxy, &session, 4).await;
    assert_eq!(log["requests"], 4, "{log}");
    let listed = wait_for_sessions(&proxy, 1).await;
    assert_eq!(listed.len(), 1, "one conversation, one session: {listed:?}");
    // One lane: each request goes on the answer it names. Its history is only its new
    // input, so it is not compared with the previous one (no `message_edited` alarm).
    let requests = request_entries(&log);
    assert_eq!(requests.len(), 4);
    for entry in &requests {
        assert_eq!(entry["lane"], requests[0]["lane"], "{log}");
        assert!(entry["diagnosis"].is_null(), "{entry}");
    }
    // Each asks a new question after the answers it continues: turns 0 to 3, although each
    // carries one prompt only.
    let turns: Vec<&Value> = requests.iter().map(|e| &e["turn_index"]).collect();
    assert_eq!(turns, [&json!(0), &json!(1), &json!(2), &json!(3)], "{log}");
    // `--record` writes the same session for each, so `cachet replay` groups them as one.
    proxy.shutdown().await;
    let files: Vec<_> = std::fs::read_dir(traces.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let recorded = cachet::trace::read_traces(&files).unwrap();
    let sessions: Vec<&str> = recorded.iter().map(|r| r.session.as_str()).collect();
    assert_eq!(sessions, vec![session.as_str(); 4], "as recorded");
}

/// Two conversations of the Conversations API in one session (named by `x-cachet-session`),
/// their requests interleaved: each conversation keeps a lane of its own and counts its own
/// turns, from its own latest request.
#[tokio::test]
async fn two_conversations_in_one_session_keep_their_own_lanes_and_turns() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&format!("http://{}", emulator.addr))).await;
    let post = |path: &str, body: Value| {
        client()
            .post(format!("http://{}{path}", proxy.addr))
            .header("authorization", "Bearer sk-test")
            .header("x-cachet-session", "support-desk")
            .json(&body)
    };
    let a = answer_of(post("/v1/conversations", json!({}))).await["id"].clone();
    let b = answer_of(post("/v1/conversations", json!({}))).await["id"].clone();
    for (i, conversation) in [&a, &b, &a, &b, &a].iter().enumerate() {
        let body = json!({"model": "gpt-4.1", "instructions": "Answer briefly.",
                          "input": format!("question {i}"), "conversation": conversation});
        answer_of(post("/v1/responses", body)).await;
    }
    let log = wait_for_requests(&proxy, "support-desk", 5).await;
    let requests = request_entries(&log);
    let lanes: Vec<&Value> = requests.iter().map(|e| &e["lane"]).collect();
    assert_eq!(lanes[0], lanes[2], "{log}");
    assert_eq!(lanes[2], lanes[4], "{log}");
    assert_eq!(lanes[1], lanes[3], "{log}");
    assert_ne!(lanes[0], lanes[1], "{log}");
    let turns: Vec<u64> = requests
        .iter()
        .map(|e| e["turn_index"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [0, 0, 1, 1, 2], "{log}");
    assert!(requests.iter().all(|e| e["diagnosis"].is_null()), "{log}");
}

/// The Conversations API names its conversation (`conversation: "conv_…"` or
/// `{"id": "conv_…"}`): that is the session, as `prompt_cache_key` is.
#[tokio::test]
async fn a_responses_conversation_names_its_session() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&format!("http://{}", emulator.addr))).await;
    let created = answer_of(
        client()
            .post(format!("http://{}/v1/conversations", proxy.addr))
            .header("authorization", "Bearer sk-test"),
    )
    .await;
    let id = created["id"].as_str().unwrap();
    for conversation in [json!(id), json!({ "id": id })] {
        let body = json!({"model": "gpt-4.1", "input": "hello", "conversation": conversation});
        let status = client()
            .post(format!("http://{}/v1/responses", proxy.addr))
            .header("authorization", "Bearer sk-test")
            .json(&body)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
    }
    let log = wait_for_requests(&proxy, id, 2).await;
    assert_eq!(log["requests"], 2, "{log}");
}

/// A request on a conversation of the Conversations API carries only its new input: the
/// provider adds the conversation's items before it (and the answer after it). So, like a
/// `previous_response_id` chain, each request goes on the conversation's lane without a
/// comparison of histories (no `message_edited` alarm), and counts the turns the
/// conversation holds. The shape is the OpenAI SDK's `responses.create(conversation=…)`.
#[tokio::test]
async fn a_conversation_of_the_conversations_api_is_one_lane_with_its_turns() {
    let emulator = start_emulator().await;
    let config = test_config(&format!("http://{}", emulator.addr));
    let proxy = start_proxy(config.clone()).await;
    let created = answer_of(
        client()
            .post(format!("http://{}/v1/conversations", proxy.addr))
            .header("authorization", "Bearer sk-test")
            .json(&json!({"metadata": {"topic": "demo"}})),
    )
    .await;
    let conversation = created["id"].as_str().unwrap().to_string();
    let instructions = "You are a careful assistant. ".repeat(300);
    let ask = |proxy: &cachet::server::ProxyHandle, question: &str| {
        // Each question long enough that the conversation grows by cached blocks.
        let question = format!("{question}: {}", "explain the parser. ".repeat(60));
        let body = json!({"model": "gpt-4.1", "instructions": instructions,
            "input": [{"role": "user", "content": question}], "conversation": conversation});
        client()
            .post(format!("http://{}/v1/responses", proxy.addr))
            .header("authorization", "Bearer sk-test")
            .json(&body)
    };
    for question in ["first question", "second", "third", "fourth"] {
        let answer = answer_of(ask(&proxy, question)).await;
        assert_eq!(
            answer["conversation"]["id"],
            json!(conversation),
            "{answer}"
        );
    }
    wait_for_requests(&proxy, &conversation, 4).await;
    // After a restart nothing is remembered: the fifth question's turn is counted on from
    // the session's log, on the same lane.
    proxy.shutdown().await;
    let proxy = start_proxy(config).await;
    answer_of(ask(&proxy, "fifth")).await;
    let log = wait_for_requests(&proxy, &conversation, 5).await;
    let requests = request_entries(&log);
    assert_eq!(requests.len(), 5, "{log}");
    for entry in &requests {
        assert_eq!(entry["lane"], requests[0]["lane"], "{log}");
        assert!(entry["diagnosis"].is_null(), "{entry}");
    }
    let turns: Vec<u64> = requests
        .iter()
        .map(|e| e["turn_index"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [0, 1, 2, 3, 4], "{log}");
    // The provider reads the conversation before each new input: the later requests read
    // the earlier ones' prompts from its cache.
    let reads: Vec<u64> = requests
        .iter()
        .map(|e| e["usage"]["cache_read"].as_u64().unwrap_or(0))
        .collect();
    assert!(reads[1] > 0 && reads[3] > reads[1], "{reads:?}");
}
