//! OpenAI's compaction call, `POST /v1/responses/compact` (the SDKs' `responses.compact`,
//! Codex's remote compaction): the model reads the whole conversation and answers with its
//! user messages and one opaque `compaction` item. It is billed like a generation, with
//! the same `usage` object as a response ("usage: Token accounting for the compaction pass,
//! including cached, reasoning, and total tokens", openai-python `CompactedResponse`), and
//! its prompt is the conversation's, so it reads the conversation's cache. cachet counts it
//! as it counts a generation, and never reshapes it.

use serde_json::{json, Value};

use crate::support::*;

/// A compaction request as openai-python sends it: the conversation so far as `input`.
fn compact_request() -> Value {
    let mut input = vec![json!({"role": "user", "content": "fix the failing build"})];
    for i in 0..12 {
        input.push(
            json!({"type": "function_call", "call_id": format!("call_{i}"),
            "name": "shell", "arguments": "{\"cmd\":\"cargo build\"}"}),
        );
        input.push(
            json!({"type": "function_call_output", "call_id": format!("call_{i}"),
            "output": "error[E0308]: mismatched types ".repeat(30)}),
        );
    }
    json!({"model": "gpt-5.5", "instructions": "You are a coding agent.", "input": input,
        "prompt_cache_key": "thread-7"})
}

/// The compacted response as the API answers it (`object: response.compaction`).
const COMPACTED: &str = r#"{"id":"cmp_01","object":"response.compaction","created_at":1764300000,"output":[{"id":"msg_1","type":"message","status":"completed","role":"user","content":[{"type":"input_text","text":"fix the failing build"}]},{"id":"cmp_item_1","type":"compaction","encrypted_content":"gAAAAABpQ2x1c3Rlcg"}],"usage":{"input_tokens":52000,"input_tokens_details":{"cached_tokens":48000},"output_tokens":900,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":52900}}"#;

#[tokio::test]
async fn a_compaction_is_counted_like_a_generation_and_goes_through_as_sent() {
    let upstream = FakeUpstream::start(Script::json(200, COMPACTED)).await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let sent = serde_json::to_vec(&compact_request()).unwrap();
    let answer = client()
        .post(format!("http://{}/v1/responses/compact", proxy.addr))
        .header("authorization", "Bearer sk-test")
        .header("content-type", "application/json")
        .body(sent.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), COMPACTED, "answered as sent");
    let received = upstream.requests();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].body, sent, "forwarded byte for byte");

    let text = metrics_text(&proxy).await;
    let model = ("model", "gpt-5.5");
    assert_eq!(
        metric_value(
            &text,
            "cachet_requests_total",
            &[("endpoint", "responses_compact"), model, ("status", "200")]
        ),
        Some(1.0),
        "{text}"
    );
    let input = |kind| metric_value(&text, "cachet_input_tokens_total", &[model, ("kind", kind)]);
    assert_eq!(input("cache_read"), Some(48_000.0), "{text}");
    assert_eq!(input("uncached"), Some(4_000.0), "{text}");
    assert_eq!(
        metric_value(&text, "cachet_output_tokens_total", &[model]),
        Some(900.0)
    );
    let cost = metric_sum(&text, "cachet_cost_usd_total", &[model]);
    assert!(cost > 0.0, "the compaction's bill is counted: {text}");
}

/// A body that is not a compaction request (no JSON) is still the provider's to refuse:
/// cachet reads the model for its counts and never answers in its place.
#[tokio::test]
async fn an_unreadable_compaction_body_goes_upstream_and_is_counted_as_unknown() {
    let upstream = FakeUpstream::start(Script::json(
        400,
        r#"{"error":{"message":"We could not parse the JSON body of your request.","type":"invalid_request_error","param":null,"code":null}}"#,
    ))
    .await;
    let proxy = start_proxy(test_config(&upstream.url())).await;
    let answer = client()
        .post(format!("http://{}/v1/responses/compact", proxy.addr))
        .header("authorization", "Bearer sk-test")
        .header("content-type", "application/json")
        .body("{\"model\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    assert!(answer.headers().get("x-cachet-error").is_none());
    assert_eq!(upstream.requests().len(), 1);
    let text = metrics_text(&proxy).await;
    assert_eq!(
        metric_value(
            &text,
            "cachet_requests_total",
            &[("endpoint", "responses_compact"), ("model", "unknown")]
        ),
        Some(1.0),
        "{text}"
    );
}

/// Through cachet to the emulator: a conversation's compaction reads the conversation's
/// cached prefix (its prompt is the same instructions and input), answers with the user
/// messages and one `compaction` item, and its tokens join the model's counts.
#[tokio::test]
async fn a_compaction_after_a_conversation_reads_its_cache_through_cachet() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&format!("http://{}", emulator.addr))).await;
    let url = |path: &str| format!("http://{}{path}", proxy.addr);
    let mut conversation = compact_request();
    let turn = client()
        .post(url("/v1/responses"))
        .header("authorization", "Bearer sk-test")
        .json(&conversation)
        .send()
        .await
        .unwrap();
    assert_eq!(turn.status(), 200);
    let turn: Value = turn.json().await.unwrap();
    let input = conversation["input"].as_array_mut().unwrap();
    input.extend(turn["output"].as_array().unwrap().iter().cloned());
    let compacted = client()
        .post(url("/v1/responses/compact"))
        .header("authorization", "Bearer sk-test")
        .json(&conversation)
        .send()
        .await
        .unwrap();
    assert_eq!(compacted.status(), 200);
    let compacted: Value = compacted.json().await.unwrap();
    assert_eq!(compacted["object"], "response.compaction", "{compacted}");
    let output = compacted["output"].as_array().unwrap();
    assert_eq!(output.last().unwrap()["type"], "compaction", "{compacted}");
    assert!(output[..output.len() - 1]
        .iter()
        .all(|item| item["role"] == "user"));
    let usage = &compacted["usage"];
    let cached = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    let input_tokens = usage["input_tokens"].as_u64().unwrap();
    assert!(
        cached > 0 && cached < input_tokens,
        "the conversation's prefix is read from cache: {usage}"
    );

    let text = metrics_text(&proxy).await;
    let model = ("model", "gpt-5.5");
    let read = metric_value(
        &text,
        "cachet_input_tokens_total",
        &[model, ("kind", "cache_read")],
    );
    assert_eq!(
        read,
        Some(cached as f64),
        "only the compaction read: {text}"
    );
    for endpoint in ["responses", "responses_compact"] {
        assert_eq!(
            metric_value(
                &text,
                "cachet_requests_total",
                &[("endpoint", endpoint), model]
            ),
            Some(1.0),
            "{endpoint}: {text}"
        );
    }
    proxy.shutdown().await;
}

/// Codex 0.171.0 signed in with ChatGPT compacts inline: an ordinary streamed Responses
/// request whose input ends with `{"type": "compaction_trigger"}`, whose answer must hold
/// exactly one `compaction` item and end with `response.completed` (codex-rs
/// `compact_remote_v2.rs`: "remote compaction v2 expected exactly one compaction output
/// item"). Through cachet, the emulator answers it so, and the request reads the cache of
/// the conversation it ends.
#[tokio::test]
async fn an_inline_compaction_is_answered_with_one_compaction_item() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&format!("http://{}", emulator.addr))).await;
    let session = codex_chatgpt_compaction();
    let (status, _) = post_codex_chatgpt(&proxy, &session[0]).await;
    assert_eq!(status, 200);
    let compaction = &session[1];
    let trigger = compaction["input"].as_array().unwrap().last().unwrap();
    assert_eq!(trigger["type"], "compaction_trigger", "the captured shape");
    let (status, events) = post_codex_chatgpt(&proxy, compaction).await;
    assert_eq!(status, 200, "{events:?}");
    let done: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done")
        .map(|e| &e["item"])
        .collect();
    assert_eq!(done.len(), 1, "{events:?}");
    assert_eq!(done[0]["type"], "compaction", "{events:?}");
    assert!(
        !done[0]["encrypted_content"].as_str().unwrap().is_empty(),
        "{events:?}"
    );
    let completed = events.last().unwrap();
    assert_eq!(completed["type"], "response.completed", "{events:?}");
    assert_eq!(completed["response"]["output"], json!([done[0]]));
    let usage = &completed["response"]["usage"];
    assert!(
        usage["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0,
        "it extends the turn it compacts: {usage}"
    );
    proxy.shutdown().await;
}
