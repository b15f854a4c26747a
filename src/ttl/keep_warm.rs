//! Keep-warm (`[breakpoints] keep_warm = true`, off by default): cachet cannot know before
//! the answer which request ends a turn, so a 1h marker cannot be placed on it for sure.
//! Instead, once a turn's final answer is in and the session has sent nothing more for
//! `keep_warm_after_secs` (270 s by default: 30 s before the final request's 5-minute
//! entry expires) after the final request, cachet sends one
//! request of its own: the final request's prefix, the answer under a 1h marker, and
//! `max_tokens: 1`. It reads the prefix (still alive), writes the answer for an hour, and
//! the next turn reads everything up to its new prompt. Its whole cost is counted: the
//! read, the write and the one output token, live in the metrics and in `cachet replay`.
//!
//! Never for subscription (OAuth) traffic, never with extended thinking on a token budget
//! (`max_tokens` must exceed the budget, so one token is refused).

use http::HeaderMap;
use serde_json::{json, Map, Value};

use crate::envelope::Envelope;

/// The user message after the answer: the keep-warm asks for one token.
const NUDGE: &str = "ok";

/// A request carrying a subscription token (`authorization: Bearer sk-ant-oat…`).
pub fn is_subscription(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.get(..7)
                .is_some_and(|p| p.eq_ignore_ascii_case("bearer "))
                && v[7..].trim_start().starts_with("sk-ant-oat")
        })
}

/// Whether a keep-warm may follow this request at all.
pub fn allowed(env: &Envelope, headers: &HeaderMap) -> bool {
    let budgeted_thinking = env
        .option_raw("thinking")
        .and_then(|raw| serde_json::from_slice::<Value>(raw).ok())
        .is_some_and(|t| t.get("type").and_then(Value::as_str) == Some("enabled"));
    // A keep-warm goes to Anthropic's own API: never for a request another route carried.
    let anthropic = env.provider() == crate::route::Provider::Anthropic;
    anthropic && !is_subscription(headers) && !budgeted_thinking
}

/// Whether an Anthropic assistant message ends the turn (it calls no tool).
pub fn ends_turn(assistant: &Value) -> bool {
    match assistant.get("content") {
        Some(Value::Array(blocks)) => !blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use")),
        Some(Value::String(_)) => true,
        _ => false,
    }
}

/// An answer of `tokens` output tokens, for replay where the answer itself is not known.
pub fn placeholder_answer(tokens: u64) -> Value {
    let text = "ok ".repeat(tokens.clamp(1, 4096) as usize);
    json!({"role": "assistant", "content": [{"type": "text", "text": text.trim_end()}]})
}

/// The keep-warm request for a final request `sent` (the body as forwarded, whose last
/// `tail` messages were its request-only tail) and its answer `assistant`. Every marker
/// of the prefix becomes 1h (they are read, not written: 1h markers must come first),
/// the history's own markers give way to one 1h marker on the answer's last block, and a
/// short user message follows, so the request is an ordinary turn.
pub fn request_body(sent: &Value, tail: usize, assistant: &Value) -> Option<Value> {
    let mut body = sent.as_object()?.clone();
    let mut messages = body.get("messages")?.as_array()?.clone();
    messages.truncate(messages.len().checked_sub(tail)?);
    for m in &mut messages {
        strip_markers(m);
    }
    let mut answer = assistant.as_object()?.clone();
    answer.retain(|k, _| k == "role" || k == "content");
    let mut content = match answer.remove("content")? {
        Value::String(text) => vec![json!({"type": "text", "text": text})],
        Value::Array(blocks) => blocks,
        _ => return None,
    };
    let last = content.iter().rposition(|block| {
        serde_json::to_vec(block)
            .is_ok_and(|b| crate::providers::anthropic::blocks::is_markable(&b))
    })?;
    content[last]
        .as_object_mut()?
        .insert("cache_control".into(), one_hour());
    answer.insert("content".into(), Value::Array(content));
    messages.push(Value::Object(answer));
    messages.push(json!({"role": "user", "content": [{"type": "text", "text": NUDGE}]}));
    let mut head_markers = 0;
    for key in ["tools", "system"] {
        if let Some(Value::Array(items)) = body.get_mut(key) {
            for item in items.iter_mut() {
                if let Some(cc) = item.get_mut("cache_control").filter(|c| c.is_object()) {
                    head_markers += 1;
                    if head_markers > crate::providers::anthropic::markers::MAX_MARKERS - 1 {
                        item.as_object_mut()?.remove("cache_control");
                    } else {
                        cc.as_object_mut()?.insert("ttl".into(), "1h".into());
                    }
                }
            }
        }
    }
    body.insert("messages".into(), Value::Array(messages));
    body.insert("max_tokens".into(), 1.into());
    body.insert("stream".into(), false.into());
    body.remove("cache_control");
    Some(Value::Object(body))
}

fn one_hour() -> Value {
    let mut m = Map::new();
    m.insert("type".into(), "ephemeral".into());
    m.insert("ttl".into(), "1h".into());
    Value::Object(m)
}

fn strip_markers(message: &mut Value) {
    if let Some(Value::Array(blocks)) = message.get_mut("content") {
        for b in blocks {
            if let Some(obj) = b.as_object_mut() {
                obj.remove("cache_control");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_tokens_are_recognised() {
        let mut h = HeaderMap::new();
        h.insert("authorization", "Bearer sk-ant-oat01-abc".parse().unwrap());
        assert!(is_subscription(&h));
        h.insert("authorization", "Bearer sk-ant-api03-abc".parse().unwrap());
        assert!(!is_subscription(&h));
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "sk-ant-oat01-abc".parse().unwrap());
        assert!(
            !is_subscription(&h),
            "only the bearer credential says subscription"
        );
    }

    #[test]
    fn the_keep_warm_marks_the_answer_for_an_hour_and_asks_for_one_token() {
        let sent = json!({"model": "claude-sonnet-4-5", "max_tokens": 4096, "stream": true,
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
                {"role": "user", "content": "Current time: 10:42"}]});
        let answer = json!({"role": "assistant", "id": "msg_1", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "Hello."}]});
        let body = request_body(&sent, 1, &answer).unwrap();
        assert_eq!(body["max_tokens"], 1);
        assert_eq!(body["stream"], false);
        assert_eq!(body["system"][0]["cache_control"]["ttl"], "1h");
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(
            messages.len(),
            3,
            "the tail is gone, the answer and a nudge follow"
        );
        assert!(messages[0]["content"][0].get("cache_control").is_none());
        assert_eq!(messages[1]["content"][1]["cache_control"]["ttl"], "1h");
        assert!(messages[1]["content"][0].get("cache_control").is_none());
        assert!(messages[1].get("id").is_none());
        assert_eq!(messages[2]["role"], "user");
        assert!(ends_turn(&answer));
        assert!(!ends_turn(
            &json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]})
        ));
    }
}
