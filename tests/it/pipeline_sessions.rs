//! Persisted patches replay on later requests of their session only, at the place they were
//! made, and never on a history they were not made for.

use crate::support::*;
use serde_json::{json, Value};

const REPLY: &str = r#"{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"Done."}],"model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":2}}"#;

fn body(history: &[Value]) -> Value {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 50, "system": "You are terse.", "messages": history})
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
}

fn hook_policy(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    policy_file(
        dir,
        "memo",
        &format!(
            r#"
name = "memo"
[[hook]]
url = "{url}"
events = ["context:before_request"]
"#
        ),
    )
}

/// A proxy in front of `upstream` with the `memo` hook policy calling `hook`, its session
/// store in `dir`.
async fn hooked_proxy(
    upstream: &str,
    dir: &std::path::Path,
    hook: &str,
) -> cachet::server::ProxyHandle {
    start_proxy(policy_config(
        upstream,
        vec![hook_policy(dir, hook)],
        &dir.join("store"),
    ))
    .await
}

#[tokio::test]
async fn a_persisted_system_part_reappears_in_its_session_only() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = start_hook_server(|e| {
        let meta = &e["state"]["envelope"]["meta"];
        (meta["session"] == "s1" && meta["request_index"] == 0).then(|| json!({
            "patch": [{"op": "system_part_set", "partName": "memo", "text": " The user prefers tabs.",
                       "invalidateCacheReason": "session memo"}],
            "transformerName": "memo-hook"}))
    })
    .await;
    let proxy = hooked_proxy(&upstream.url(), dir.path(), &hook.url).await;
    let mut history = vec![user("one")];
    for turn in 0..3 {
        assert_eq!(post_anthropic(&proxy, "s1", &body(&history)).await.0, 200);
        history.push(assistant(&format!("answer {turn}")));
        history.push(user(&format!("next {turn}")));
    }
    assert_eq!(
        post_anthropic(&proxy, "s2", &body(&[user("other")]))
            .await
            .0,
        200
    );
    let got = upstream.requests();
    for (i, r) in got.iter().enumerate().take(3) {
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(
            v["system"], "You are terse. The user prefers tabs.",
            "request {i} of s1"
        );
    }
    let v: Value = serde_json::from_slice(&got[3].body).unwrap();
    assert_eq!(
        v["system"], "You are terse.",
        "another session never gets it"
    );
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &m,
            "cachet_patches_total",
            &[("transformer", "memo-hook"), ("outcome", "replayed")]
        ),
        Some(2.0)
    );
    let log = wait_for_requests(&proxy, "s1", 3).await;
    assert_eq!(log["context_transforms"], 1, "stored once, replayed twice");
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_persisted_insert_stays_in_place_and_keeps_the_cache_warm() {
    let emulator = start_emulator().await;
    let dir = tempfile::tempdir().unwrap();
    let memory = format!(
        "<memory>\n{}\n</memory>",
        "The project uses tabs; tests run with ./scripts/test.sh. ".repeat(100)
    );
    let hook = start_hook_server(move |e| {
        (e["state"]["envelope"]["meta"]["request_index"] == 0).then(|| {
            json!({
            "patch": [{"op": "messages_insert", "at": "before_last_user_prompt",
                       "messages": [{"role": "custom", "content": memory.clone()}],
                       "invalidateCacheReason": "pin memory"}]})
        })
    })
    .await;
    let proxy = hooked_proxy(&emulator.url(), dir.path(), &hook.url).await;
    let mut history = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "Refactor the parser.", "cache_control": {"type": "ephemeral"}}]}),
    ];
    let mut reads = Vec::new();
    for turn in 0..3 {
        let (status, answer) = post_anthropic(&proxy, "pinned", &body(&history)).await;
        assert_eq!(status, 200, "{answer}");
        reads.push(answer["usage"]["cache_read_input_tokens"].as_u64().unwrap());
        for m in history.iter_mut() {
            if let Some(blocks) = m["content"].as_array_mut() {
                for b in blocks {
                    b.as_object_mut().unwrap().remove("cache_control");
                }
            }
        }
        history.push(json!({"role": "assistant", "content": answer["content"].clone()}));
        history.push(json!({"role": "user", "content": [{"type": "text", "text": format!("Now step {turn}."), "cache_control": {"type": "ephemeral"}}]}));
    }
    assert_eq!(reads[0], 0);
    // The pinned memory (about 1400 tokens) sits before the first user message on every
    // request, byte-identical, so later turns read it from cache.
    assert!(reads[1] > 1300 && reads[2] > reads[1], "{reads:?}");
    let accounted = emulator.accounted();
    assert_eq!(accounted.len(), 3);
    proxy.shutdown().await;
    emulator.shutdown().await;
}

#[tokio::test]
async fn forked_or_compacted_histories_get_no_stale_patch() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    // The hook pins a note during the third turn only.
    let hook = start_hook_server(|e| {
        (e["state"]["envelope"]["meta"]["request_index"] == 2).then(|| json!({
            "patch": [{"op": "messages_insert", "at": "end", "messages": [{"role": "user", "content": "NOTE from turn 3"}],
                       "invalidateCacheReason": "note"}]}))
    })
    .await;
    let proxy = hooked_proxy(&upstream.url(), dir.path(), &hook.url).await;
    let turns = [
        user("u1"),
        assistant("a1"),
        user("u2"),
        assistant("a2"),
        user("u3"),
        assistant("a3"),
        user("u4"),
    ];
    for n in [1, 3, 5, 7] {
        assert_eq!(post_anthropic(&proxy, "f", &body(&turns[..n])).await.0, 200);
    }
    let sent = |i: usize| -> Vec<Value> {
        let v: Value = serde_json::from_slice(&upstream.requests()[i].body).unwrap();
        v["messages"].as_array().unwrap().clone()
    };
    assert!(sent(2).iter().any(|m| m["content"] == "NOTE from turn 3"));
    let later = sent(3);
    assert_eq!(
        later[5]["content"], "NOTE from turn 3",
        "replayed after the anchored prefix: {later:?}"
    );
    assert_eq!(later.len(), 8);
    // Fork: the client drops the last two turns and continues differently.
    assert_eq!(
        post_anthropic(
            &proxy,
            "f",
            &body(&[user("u1"), assistant("a1"), user("u2 but different")])
        )
        .await
        .0,
        200
    );
    assert!(
        !sent(4).iter().any(|m| m["content"] == "NOTE from turn 3"),
        "no stale patch on a fork"
    );
    // Compaction: a shorter, summarised history.
    assert_eq!(
        post_anthropic(
            &proxy,
            "f",
            &body(&[user("summary of u1..u3"), assistant("ok"), user("u5")])
        )
        .await
        .0,
        200
    );
    assert!(
        !sent(5).iter().any(|m| m["content"] == "NOTE from turn 3"),
        "no stale patch after compaction"
    );
    let m = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &m,
            "cachet_patches_total",
            &[("op", "messages_insert"), ("outcome", "stale")]
        ),
        Some(2.0)
    );
    // The session log and its timeline page show the requests, the patch and the break.
    // The compacted history shares no message with the conversation: it starts a lane of
    // its own rather than being compared with it.
    let log = wait_for_requests(&proxy, "f", 6).await;
    let requests = request_entries(&log);
    let breaks: Vec<Value> = requests
        .iter()
        .filter_map(|e| e.get("diagnosis").cloned())
        .collect();
    assert_eq!(breaks.len(), 1, "the fork breaks the prefix: {breaks:?}");
    assert_eq!(breaks[0]["reason"], "message_edited");
    assert_eq!(breaks[0]["section"], "messages");
    assert_eq!(breaks[0]["message_index"], 2, "{breaks:?}");
    assert_eq!(requests[4]["lane"], 0);
    assert_eq!(requests[5]["lane"], 1, "compaction starts a new lane");
    let page = client()
        .get(format!("http://{}/sessions/f/timeline", proxy.admin_addr))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("<svg") && html.contains("6 requests"),
        "{html}"
    );
    assert!(html.contains("(before_request): messages_insert"), "{html}");
    assert!(html.contains("message 2 edited"), "{html}");
    proxy.shutdown().await;
}

/// A handler that persists a patch on every turn (pinned memory does) has all of them
/// replayed on every later request. The request entry says so in one event per
/// transformer with a count, so that an entry does not grow with the session's age and the
/// log does not grow with the square of its turns.
#[tokio::test]
async fn replays_are_one_event_per_transformer_whatever_the_session_age() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    // The first request of each turn (an odd-length history ends with the turn's prompt,
    // and the first request of a turn is the only one of it here) pins a note of its own.
    let hook = start_hook_server(|e| {
        let turn = e["state"]["envelope"]["meta"]["turn_index"].as_u64()?;
        Some(json!({
            "patch": [{"op": "messages_insert", "at": "before_last_user_prompt",
                       "messages": [{"role": "user", "content": format!("note {turn}")}],
                       "invalidateCacheReason": "pin a note"}],
            "transformerName": "notes"}))
    })
    .await;
    let proxy = hooked_proxy(&upstream.url(), dir.path(), &hook.url).await;
    const TURNS: usize = 6;
    let mut history = vec![user("one")];
    for turn in 0..TURNS {
        assert_eq!(post_anthropic(&proxy, "aged", &body(&history)).await.0, 200);
        history.push(assistant(&format!("answer {turn}")));
        history.push(user(&format!("next {turn}")));
        wait_for_requests(&proxy, "aged", turn as u64 + 1).await;
    }
    let log = wait_for_requests(&proxy, "aged", TURNS as u64).await;
    let requests = request_entries(&log);
    assert_eq!(requests.len(), TURNS);
    let last = requests.last().unwrap();
    let replays: Vec<&Value> = last["patches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["outcome"] == "replayed")
        .collect();
    assert_eq!(replays.len(), 1, "one event for the transformer: {last:#}");
    assert_eq!(
        replays[0]["count"],
        (TURNS - 1) as u64,
        "it counts every earlier turn's note: {last:#}"
    );
    // The upstream got every note, in place.
    let sent: Value = serde_json::from_slice(&upstream.requests().last().unwrap().body).unwrap();
    let notes = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("note "))
        })
        .count();
    assert_eq!(notes, TURNS);
    // The agent compacts: a new history, on which none of the notes applies. They are all
    // stale now, and on every request from here on: still one event.
    let compacted = vec![
        user("summary of the work so far"),
        assistant("ok"),
        user("go on"),
    ];
    for k in 0..2u64 {
        let mut history = compacted.clone();
        if k == 1 {
            history.push(assistant("went on"));
            history.push(user("and now?"));
        }
        assert_eq!(post_anthropic(&proxy, "aged", &body(&history)).await.0, 200);
        wait_for_requests(&proxy, "aged", TURNS as u64 + 1 + k).await;
    }
    let log = wait_for_requests(&proxy, "aged", TURNS as u64 + 2).await;
    let last = *request_entries(&log).last().unwrap();
    let stale: Vec<&Value> = last["patches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["outcome"] == "stale")
        .collect();
    assert_eq!(stale.len(), 1, "one stale event: {last:#}");
    assert_eq!(stale[0]["count"], TURNS as u64, "{last:#}");
    // The metric still counts every stale op of both compacted requests, one by one.
    let text = metrics_text(&proxy).await;
    let stale_ops = metric_sum(
        &text,
        "cachet_patches_total",
        &[("transformer", "notes"), ("outcome", "stale")],
    );
    assert_eq!(stale_ops, 2.0 * TURNS as f64, "{text}");
    proxy.shutdown().await;
}

/// A hook's numbers reach the provider as the hook wrote them, on the request that persists
/// them and on every replay. serde_json's default float parsing reads some literals one
/// unit in the last place off (`9.797527801591091` became `9.797527801591093`), which both
/// changed what the hook asked for and, for a float parsed exactly elsewhere (a policy's
/// TOML), changed the replayed bytes after the first request: a prefix break of cachet's
/// own making.
#[tokio::test]
async fn a_persisted_float_is_forwarded_as_written_on_every_request() {
    const FLOATS: [&str; 2] = ["9.797527801591091", "9.944424804330529"];
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = start_hook_server(|e| {
        (e["state"]["envelope"]["meta"]["request_index"] == 0).then(|| {
            // Rust reads its literals exactly, and the hook server writes them back as they
            // are here.
            let input = json!({"threshold": 9.797527801591091, "ratio": 9.944424804330529});
            json!({
                "patch": [{"op": "messages_insert", "at": "before_last_user_prompt",
                           "messages": [
                               {"role": "assistant", "content": [{"type": "tool_use",
                                "id": "toolu_01", "name": "set_threshold", "input": input}]},
                               {"role": "user", "content": [{"type": "tool_result",
                                "tool_use_id": "toolu_01", "content": "set"}]}],
                           "invalidateCacheReason": "pin the threshold"}],
                "transformerName": "threshold"})
        })
    })
    .await;
    let proxy = hooked_proxy(&upstream.url(), dir.path(), &hook.url).await;
    let mut history = vec![user("one")];
    for turn in 0..3 {
        assert_eq!(
            post_anthropic(&proxy, "floats", &body(&history)).await.0,
            200
        );
        history.push(assistant(&format!("answer {turn}")));
        history.push(user(&format!("next {turn}")));
        wait_for_requests(&proxy, "floats", turn as u64 + 1).await;
    }
    let sent = upstream.requests();
    assert_eq!(sent.len(), 3);
    for (i, r) in sent.iter().enumerate() {
        let text = String::from_utf8_lossy(&r.body);
        for float in FLOATS {
            assert!(text.contains(float), "request {i} lost {float}: {text}");
        }
    }
    proxy.shutdown().await;
}

/// A session that gathered a persisted patch on each of its first requests replays them
/// all, in order, on every later one; when one of them no longer applies (the tool it
/// removes is gone), only it is refused and the others still replay in place.
#[tokio::test]
async fn replayed_patches_apply_together_and_a_refused_one_spares_the_others() {
    let upstream = FakeUpstream::start(Script::json(200, REPLY)).await;
    let dir = tempfile::tempdir().unwrap();
    let hook = start_hook_server(|e| {
        let pin = |text: &str| {
            json!({"patch": [{"op": "messages_insert", "at": "before_last_user_prompt",
                              "messages": [{"role": "user", "content": text}],
                              "invalidateCacheReason": "pin"}],
                   "transformerName": "pin"})
        };
        match e["state"]["envelope"]["meta"]["request_index"].as_u64() {
            Some(0) => Some(json!({
                "patch": [{"op": "tools_remove", "names": ["bash"], "invalidateCacheReason": "no shell"}],
                "transformerName": "strip"})),
            Some(1) => Some(pin("note one")),
            Some(2) => Some(pin("note two")),
            _ => None,
        }
    })
    .await;
    let proxy = hooked_proxy(&upstream.url(), dir.path(), &hook.url).await;
    let tool = |name: &str| json!({"name": name, "input_schema": {"type": "object"}});
    let mut history = vec![user("one")];
    for turn in 0..5 {
        let mut request = body(&history);
        // The client drops `bash` itself from its fifth request on.
        request["tools"] = match turn {
            0..=3 => json!([tool("bash"), tool("read")]),
            _ => json!([tool("read")]),
        };
        assert_eq!(post_anthropic(&proxy, "pins", &request).await.0, 200);
        history.push(assistant(&format!("answer {turn}")));
        history.push(user(&format!("next {turn}")));
    }
    let sent: Vec<Value> = upstream
        .requests()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let texts = |v: &Value| -> Vec<String> {
        v["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| match &m["content"] {
                Value::String(s) => s.clone(),
                blocks => blocks[0]["text"].as_str().unwrap_or_default().to_owned(),
            })
            .collect()
    };
    let tools = |v: &Value| -> Vec<String> {
        v["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // Request 3 replays all three: each note where it was made, before the prompt of its
    // request, and no `bash`.
    assert_eq!(tools(&sent[3]), ["read"]);
    let at = |v: &Value, text: &str| texts(v).iter().position(|t| t == text);
    let third = texts(&sent[3]);
    assert_eq!(at(&sent[3], "note one"), Some(2), "{third:?}");
    assert_eq!(at(&sent[3], "note two"), Some(5), "{third:?}");
    assert_eq!(third.len(), 9, "{third:?}");
    // Request 4: the strip no longer applies, the notes do, in the same places.
    let fourth = texts(&sent[4]);
    assert_eq!(tools(&sent[4]), ["read"]);
    assert_eq!(at(&sent[4], "note one"), Some(2), "{fourth:?}");
    assert_eq!(at(&sent[4], "note two"), Some(5), "{fourth:?}");
    assert_eq!(fourth.len(), 11, "{fourth:?}");
    let m = metrics_text(&proxy).await;
    let count = |transformer: &str, outcome: &str| {
        metric_value(
            &m,
            "cachet_patches_total",
            &[("transformer", transformer), ("outcome", outcome)],
        )
    };
    assert_eq!(count("strip", "replayed"), Some(3.0), "requests 1 to 3");
    assert_eq!(count("strip", "refused"), Some(1.0), "request 4");
    assert_eq!(
        count("pin", "replayed"),
        Some(5.0),
        "note one on 3 requests, note two on 2"
    );
    assert_eq!(count("pin", "refused"), None);
    proxy.shutdown().await;
}
