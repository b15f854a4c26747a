//! Long sessions of real agents, in the request shapes they send: two pi sessions started
//! alike in one folder, a compaction that keeps the conversation's latest messages, a
//! Claude Code `/compact` that restarts the history, and a memory part that changes.

use serde_json::{json, Value};

use crate::support::*;

/// pi on the Anthropic API, after one tool call (tests/data/clients/pi_anthropic_tool_loop.json):
/// the prompt, the model's `tool_use` and its `tool_result`. pi sends no session id: its
/// requests are told apart by fingerprint and history.
fn pi_tool_loop() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/pi_anthropic_tool_loop.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The same request as another pi session sends it: the provider gave its tool call
/// another id.
fn with_tool_id(body: &Value, id: &str) -> Value {
    let mut body = body.clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages[1]["content"][0]["id"] = json!(id);
    messages[2]["content"][0]["tool_use_id"] = json!(id);
    body
}

fn with_messages(body: &Value, messages: Vec<Value>) -> Value {
    let mut body = body.clone();
    body["messages"] = Value::Array(messages);
    body
}

fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().unwrap().clone()
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}]})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
}

async fn send(proxy: &cachet::server::ProxyHandle, body: &Value, session: Option<&str>) {
    let mut request = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01");
    if let Some(id) = session {
        request = request.header("x-claude-code-session-id", id);
    }
    let r = request.json(body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
}

/// pi's first turn as far as its first tool call: the prompt alone, then with the call and
/// its result. The request sent last, and its history.
async fn pi_first_call(proxy: &cachet::server::ProxyHandle) -> (Value, Vec<Value>) {
    let first = pi_tool_loop();
    let history = messages(&first);
    send(proxy, &with_messages(&first, history[..1].to_vec()), None).await;
    send(proxy, &first, None).await;
    (first, history)
}

/// Every request entry of every session, by session id.
async fn sessions(proxy: &cachet::server::ProxyHandle, requests: u64) -> Vec<(String, Value)> {
    let listed = wait_for_session_requests(proxy, requests).await;
    let mut out = Vec::new();
    for s in listed {
        let id = s["id"].as_str().unwrap().to_string();
        let n = s["requests"].as_u64().unwrap();
        out.push((id.clone(), wait_for_requests(proxy, &id, n).await));
    }
    out
}

/// The session list once its sessions hold `requests` requests in all.
async fn wait_for_session_requests(
    proxy: &cachet::server::ProxyHandle,
    requests: u64,
) -> Vec<Value> {
    for _ in 0..400 {
        let list: Value = client()
            .get(format!("http://{}/sessions?limit=100", proxy.admin_addr))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let listed = list["sessions"].as_array().unwrap().clone();
        if listed
            .iter()
            .map(|s| s["requests"].as_u64().unwrap())
            .sum::<u64>()
            >= requests
        {
            return listed;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("the sessions never held {requests} requests");
}

fn reasons(log: &Value) -> Vec<String> {
    request_entries(log)
        .iter()
        .filter_map(|e| e["diagnosis"]["reason"].as_str().map(str::to_owned))
        .collect()
}

/// Two pi sessions in one folder, started with the same prompt: the same system prompt,
/// tools and first message, so the same fingerprint. From their first answer on (its
/// tool-call id is each session's own) they are two conversations, each append-only:
/// two sessions, and no edit diagnosed in either.
#[tokio::test]
async fn twin_pi_sessions_with_one_first_prompt_are_two_sessions() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let loop_a = with_tool_id(&pi_tool_loop(), "toolu_01AaaaaaaaaaaaaaaaaaaaaA");
    let loop_b = with_tool_id(&pi_tool_loop(), "toolu_01BbbbbbbbbbbbbbbbbbbbbB");
    let start = with_messages(&loop_a, messages(&loop_a)[..1].to_vec());
    let go_on = |body: &Value, prompt: &str| {
        let mut m = messages(body);
        m.extend([assistant("Two files."), user(prompt)]);
        with_messages(body, m)
    };
    // Both start, then both go on, interleaved as two terminals would.
    send(&proxy, &start, None).await;
    send(&proxy, &start, None).await;
    send(&proxy, &loop_a, None).await;
    send(&proxy, &loop_b, None).await;
    send(&proxy, &go_on(&loop_a, "And the tests?"), None).await;
    send(&proxy, &go_on(&loop_b, "And the docs?"), None).await;

    let sessions = sessions(&proxy, 6).await;
    assert_eq!(
        sessions.len(),
        2,
        "{:?}",
        sessions.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    for (id, log) in &sessions {
        assert!(
            !reasons(log).contains(&"message_edited".to_string()),
            "{id}: {log:#}"
        );
    }
    proxy.shutdown().await;
}

/// Two pi sessions started at once with the same prompt send the same first request side
/// by side. The one sent first may be answered last (here its answer streams slowly): its
/// entry then follows the other's in the lane, yet it could read nothing the other one
/// wrote, since it was sent before it. It is not compared with a request sent after it:
/// no break.
#[tokio::test]
async fn a_request_is_not_compared_with_one_sent_after_it() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let first = pi_tool_loop();
    // pi marks its last message: here the prompt, long enough to be cached.
    let mut prompt = messages(&first)[0].clone();
    let text = format!(
        "Why does this fail?\n{}",
        "error[E0308]: mismatched types\n".repeat(200)
    );
    prompt["content"][0] =
        json!({"type": "text", "text": text, "cache_control": {"type": "ephemeral"}});
    let first = with_messages(&first, vec![prompt]);
    let url = format!("http://{}/v1/messages", proxy.addr);
    let slow = {
        let (url, body) = (url.clone(), first.clone());
        tokio::spawn(async move {
            let r = client()
                .post(url)
                .header("x-api-key", "k")
                .header("anthropic-version", "2023-06-01")
                .header("x-cachet-emulate-fault", "slow-events:100")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.bytes().await.unwrap();
        })
    };
    // The slow one is accounted first (it writes the prefix), then the other reads it and
    // is answered at once.
    for _ in 0..200 {
        if !emulator.accounted().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    send(&proxy, &first, None).await;
    slow.await.unwrap();

    let sessions = sessions(&proxy, 2).await;
    let entries: Vec<&Value> = sessions
        .iter()
        .flat_map(|(_, log)| request_entries(log))
        .collect();
    let reads: Vec<u64> = entries
        .iter()
        .map(|e| e["usage"]["cache_read"].as_u64().unwrap())
        .collect();
    assert_eq!(
        reads.iter().filter(|&&r| r == 0).count(),
        1,
        "one wrote, one read: {reads:?}"
    );
    assert!(
        entries.iter().all(|e| e["diagnosis"].is_null()),
        "no break: {entries:?}"
    );
    proxy.shutdown().await;
}

/// pi compacts (its `/compact`, or on a full context window): the next request sends a
/// summary as its first message, then the messages it kept, then the new prompt. It is the
/// same conversation: one session, its turns counted on from those before the compaction.
#[tokio::test]
async fn a_pi_compaction_goes_on_in_its_session_and_its_turns() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let (first, mut history) = pi_first_call(&proxy).await;
    history.extend([assistant("Two files."), user("Read the notes.")]);
    send(&proxy, &with_messages(&first, history.clone()), None).await;
    let kept_from = history.len() - 1;
    history.extend([assistant("Nothing to see."), user("Now the README.")]);
    send(&proxy, &with_messages(&first, history.clone()), None).await;

    // pi's summary message (COMPACTION_SUMMARY_PREFIX of pi's core/messages), then the
    // turns it kept, then the next prompt.
    let summary = user(
        "The conversation history before this point was compacted into the following summary:\
         \n\n<summary>\n## Goal\nList and read the files.\n</summary>",
    );
    let mut compacted = vec![summary];
    compacted.extend(history[kept_from..].iter().cloned());
    compacted.extend([
        assistant("A scratch README."),
        user("Thanks. Anything else?"),
    ]);
    send(&proxy, &with_messages(&first, compacted), None).await;

    let sessions = sessions(&proxy, 5).await;
    assert_eq!(
        sessions.len(),
        1,
        "{:?}",
        sessions.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    let entries = request_entries(&sessions[0].1)
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    let turns: Vec<u64> = entries
        .iter()
        .map(|e| e["turn_index"].as_u64().unwrap())
        .collect();
    // The kept turns were counted before: only the new prompt is a turn more.
    assert_eq!(turns[4], turns[3] + 1, "turns {turns:?}");
    proxy.shutdown().await;
}

fn tool_use(id: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "read",
        "input": {"path": "example path"}}]})
}

fn tool_result(id: &str) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
        "content": "line 0: the quick brown fox jumps over the lazy dog"}]})
}

/// pi compacts inside a tool loop (its context past `contextWindow - reserveTokens` once a
/// tool's result is in): the next request is the summary, the turns it kept (the current
/// turn's prompt among them) and the new tool result, and goes on in the turn it was in
/// (pi 1.6.0's request shape, keepRecentTokens reaching back into the previous turn).
#[tokio::test]
async fn a_pi_compaction_inside_a_tool_loop_stays_in_its_turn() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let (first, mut history) = pi_first_call(&proxy).await;
    history.extend([tool_use("toolu_2"), tool_result("toolu_2")]);
    send(&proxy, &with_messages(&first, history.clone()), None).await;
    let kept_from = history.len();
    history.extend([
        assistant("Hello from the cachet emulator. This reply is deterministic."),
        user("Now look at them again."),
    ]);
    send(&proxy, &with_messages(&first, history.clone()), None).await;
    history.extend([tool_use("toolu_3"), tool_result("toolu_3")]);
    send(&proxy, &with_messages(&first, history.clone()), None).await;

    let summary = user(
        "The conversation history before this point was compacted into the following summary:\
         \n\n<summary>\n## Goal\nList the files.\n</summary>",
    );
    let mut compacted = vec![summary];
    compacted.extend(history[kept_from..].iter().cloned());
    compacted.extend([tool_use("toolu_4"), tool_result("toolu_4")]);
    send(&proxy, &with_messages(&first, compacted), None).await;

    let sessions = sessions(&proxy, 6).await;
    assert_eq!(
        sessions.len(),
        1,
        "{:?}",
        sessions.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    let turns: Vec<u64> = request_entries(&sessions[0].1)
        .iter()
        .map(|e| e["turn_index"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [0, 0, 0, 1, 1, 1], "the compaction is inside turn 1");
    proxy.shutdown().await;
}

/// Claude Code after `/compact`: the same session id, and a history that starts again at
/// the summary. Its turns go on from where the session was, they do not start at 0 again.
#[tokio::test]
async fn turns_go_on_after_claude_code_compacts() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/claude_code_tool_loop.json"
    );
    let first: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut history = messages(&first);
    send(&proxy, &first, Some("cc-compact")).await;
    for prompt in ["Now the tests.", "And the docs."] {
        history.extend([assistant("Done."), user(prompt)]);
        send(
            &proxy,
            &with_messages(&first, history.clone()),
            Some("cc-compact"),
        )
        .await;
    }
    let before = wait_for_requests(&proxy, "cc-compact", 3).await;
    let last_turn = request_entries(&before)[2]["turn_index"].as_u64().unwrap();

    // Claude Code's history after `/compact`: its summary message, then the next prompt.
    let compacted = vec![
        user(
            "This session is being continued from a previous conversation that ran out of \
             context. The conversation is summarized below:\nThe user asked for the files, \
             the tests and the docs.",
        ),
        assistant("Understood."),
        user("Now the changelog."),
    ];
    send(
        &proxy,
        &with_messages(&first, compacted),
        Some("cc-compact"),
    )
    .await;
    let log = wait_for_requests(&proxy, "cc-compact", 4).await;
    let turn = request_entries(&log)[3]["turn_index"].as_u64().unwrap();
    assert!(turn > last_turn, "turn {turn} after {last_turn}");
    proxy.shutdown().await;
}

/// A memory part that changes between prompts breaks the cache at the system prompt; the
/// diagnosis names the policy's part (`memory`), not the position it went out at.
#[tokio::test]
async fn a_memory_break_names_the_memory_part() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let notes = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/notes/");
    let policy = policy_file(
        dir.path(),
        "memory",
        &format!(
            "name = \"memory\"\n[[inject]]\nsource = {{ notes = \"{notes}\", top_k = 1 }}\n\
             mode = \"system-prompt\"\npart = \"memory\"\n"
        ),
    );
    let proxy = start_proxy(policy_config(&emulator.url(), vec![policy], dir.path())).await;
    let base = json!({"model": "claude-sonnet-4-5", "max_tokens": 50,
        "system": [{"type": "text", "text": "You are terse."},
                   {"type": "text", "text": "Answer in English."}]});
    let mut history = vec![user("How do refresh tokens expire?")];
    send(&proxy, &with_messages(&base, history.clone()), Some("mem")).await;
    history.extend([
        assistant("After 30 days."),
        user("How do database migrations run?"),
    ]);
    send(&proxy, &with_messages(&base, history), Some("mem")).await;
    let log = wait_for_requests(&proxy, "mem", 2).await;
    let entries = request_entries(&log);
    assert_eq!(
        entries[1]["diagnosis"]["reason"], "system_changed",
        "{:#}",
        entries[1]
    );
    assert_eq!(
        entries[1]["diagnosis"]["part"], "memory",
        "{:#}",
        entries[1]
    );
    proxy.shutdown().await;
}

/// Claude Code's `/compact` asks for its summary in the last message: the summary prompt
/// is appended to the last tool result's message as a text block of its own, and the
/// marker moves back to the message before (captured from Claude Code 2.1.332). The
/// provider keys its cache on blocks, so the prompt still extends the previous one and
/// reads what it cached: no break.
#[tokio::test]
async fn claude_codes_summary_request_is_no_break() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/claude_code_tool_loop.json"
    );
    let first: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    send(&proxy, &first, Some("cc-summary")).await;

    let mut history = messages(&first);
    let last = history.len() - 1;
    for block in history[last]["content"].as_array_mut().unwrap() {
        block.as_object_mut().unwrap().remove("cache_control");
    }
    history[last]["content"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "text", "text":
        "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a \
         detailed summary of the conversation so far, paying close attention to the user's \
         explicit requests and your previous actions."}));
    let before = history[last - 1]["content"].as_array_mut().unwrap();
    before.last_mut().unwrap()["cache_control"] = json!({"type": "ephemeral"});
    send(
        &proxy,
        &with_messages(&first, history.clone()),
        Some("cc-summary"),
    )
    .await;
    // An answer without `<summary>` tags is asked again, the prompt's text edited: after
    // the marker, so nothing cached is lost.
    let prompt = history[last]["content"]
        .as_array_mut()
        .unwrap()
        .last_mut()
        .unwrap();
    let asked = format!(
        "{}\n\nFor this reply only: write the summary inside <summary></summary> tags.",
        prompt["text"].as_str().unwrap()
    );
    prompt["text"] = json!(asked);
    send(&proxy, &with_messages(&first, history), Some("cc-summary")).await;

    let log = wait_for_requests(&proxy, "cc-summary", 3).await;
    let entries = request_entries(&log);
    for entry in &entries[1..] {
        assert!(
            entry["usage"]["cache_read"].as_u64().unwrap() > 0,
            "{entry:#}"
        );
        assert!(entry["diagnosis"].is_null(), "{entry:#}");
    }
    proxy.shutdown().await;
}

/// Codex signed in with ChatGPT, through an inline compaction and a switch of model
/// (requests as Codex 0.171.0 sent them): one session; the compaction request, which
/// extends the turn it compacts, is no break; the turn after it is the next turn (its
/// history keeps the user messages, then the compaction item, then the new prompt); and
/// the switch is diagnosed `model_changed` on the lane the compacted history started.
#[tokio::test]
async fn codex_with_chatgpt_goes_on_after_an_inline_compaction() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let requests = codex_chatgpt_compaction();
    for body in &requests {
        let (status, events) = post_codex_chatgpt(&proxy, body).await;
        assert_eq!(status, 200, "{events:?}");
    }
    let listed = sessions(&proxy, requests.len() as u64).await;
    assert_eq!(listed.len(), 1, "one session: {listed:?}");
    let (id, log) = &listed[0];
    assert_eq!(id, requests[0]["prompt_cache_key"].as_str().unwrap());
    let entries = request_entries(log);
    let turns: Vec<u64> = entries
        .iter()
        .map(|e| e["turn_index"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, [0, 0, 1, 2], "{entries:?}");
    let diagnosed: Vec<&str> = entries
        .iter()
        .map(|e| e["diagnosis"]["reason"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(diagnosed, ["-", "-", "-", "model_changed"], "{entries:?}");
    assert_eq!(
        entries[1]["lane"], entries[0]["lane"],
        "the compaction extends its turn"
    );
    assert_eq!(entries[3]["lane"], entries[2]["lane"], "{entries:?}");
    proxy.shutdown().await;
}
