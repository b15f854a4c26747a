//! Claude Code switching models mid-session (`/model`, or `claude -c --model …`): its next
//! request rewrites message 0 (the attribution reminder names the model) and changes
//! `thinking` and `max_tokens`, and goes on with the same tools and the rest of the history.
//! It is the same conversation: it stays on its lane, and its miss (a model's cache is its
//! own) is diagnosed `model_changed`, not left as a silent new lane.

use serde_json::{json, Value};

use crate::support::*;

fn claude_code_request() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/clients/claude_code_tool_loop.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn send(proxy: &cachet::server::ProxyHandle, body: &Value) {
    let r = client()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "k")
        .header("anthropic-version", "2023-06-01")
        .header("x-claude-code-session-id", "cc-switch")
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
}

#[tokio::test]
async fn a_model_switch_stays_on_its_lane_and_is_diagnosed() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let before = claude_code_request();
    send(&proxy, &before).await;
    wait_for_requests(&proxy, "cc-switch", 1).await;

    let mut after = before.clone();
    after["model"] = json!("claude-sonnet-4-5");
    after["max_tokens"] = json!(64000);
    after["thinking"] = json!({"type": "enabled", "budget_tokens": 31999});
    let reminder = after["messages"][0]["content"][0]["text"].as_str().unwrap();
    after["messages"][0]["content"][0]["text"] = json!(format!(
        "{reminder}\nCo-Authored-By: Claude Sonnet 4.5 <noreply@anthropic.com>"
    ));
    let messages = after["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Now the tests."}]}));
    send(&proxy, &after).await;

    let log = wait_for_requests(&proxy, "cc-switch", 2).await;
    let entries = request_entries(&log);
    assert_eq!(entries[1]["lane"], entries[0]["lane"], "{:#}", entries[1]);
    assert_eq!(
        entries[1]["diagnosis"]["reason"], "model_changed",
        "{:#}",
        entries[1]
    );
    proxy.shutdown().await;
}

/// A conversation whose first message alone was edited with the model unchanged is the
/// same lane too, and the edit is named where it is.
#[tokio::test]
async fn an_edited_first_message_stays_on_its_lane_and_is_diagnosed() {
    let emulator = start_emulator().await;
    let proxy = start_proxy(test_config(&emulator.url())).await;
    let before = claude_code_request();
    send(&proxy, &before).await;
    wait_for_requests(&proxy, "cc-switch", 1).await;
    let mut after = before.clone();
    after["messages"][0]["content"][1]["text"] = json!("List the files, then the tests");
    send(&proxy, &after).await;
    let log = wait_for_requests(&proxy, "cc-switch", 2).await;
    let entries = request_entries(&log);
    assert_eq!(entries[1]["lane"], entries[0]["lane"], "{:#}", entries[1]);
    assert_eq!(entries[1]["diagnosis"]["reason"], "message_edited");
    assert_eq!(entries[1]["diagnosis"]["message_index"], 0);
    proxy.shutdown().await;
}
