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
//! With extended thinking on a budget (`thinking: {type: "enabled", budget_tokens}`, as pi
//! sends it), the keep-warm keeps the request's thinking settings, which are part of the
//! cache key of the messages ("changes to thinking budgets invalidate cached prompt
//! prefixes containing messages", platform.claude.com, Extended thinking), so the next
//! turn reads what it writes. `max_tokens: 1` is then below the budget, which the API
//! allows only when thinking is interleaved with tools (the interleaved-thinking beta and
//! tools in the request, [`crate::providers::anthropic::budget_may_exceed_max_tokens`]);
//! without them no keep-warm can keep the budget and ask for one token, and none is sent.
//! A model that drops earlier turns' thinking (Sonnet 4.5 and older) drops the turn's own
//! at the next turn, and what follows it changes: the next turn reads only the prefix up
//! to the turn's first thinking block, and writes the turn's messages again in any case.
//! The keep-warm then keeps just that prefix warm: it sends the messages before that
//! block and its short user message under the 1h marker, which reads the prefix and
//! writes an entry holding it for an hour at the cost of a read.
//!
//! Never for subscription (OAuth) traffic.

use http::HeaderMap;
use serde_json::{json, Map, Value};

use crate::cache_model::thinking;
use crate::envelope::Envelope;
use crate::providers::anthropic;

/// The user message after the answer: the keep-warm asks for one token.
const NUDGE: &str = "ok";

/// A request on a subscription (OAuth) credential: never followed by a keep-warm.
fn is_subscription(headers: &HeaderMap) -> bool {
    crate::providers::auth::credential(headers) == crate::providers::auth::Credential::OAuth
}

/// Whether a keep-warm may follow this request at all: not for subscription traffic, and
/// with thinking on a budget only where one token may be asked below it.
pub fn allowed(env: &Envelope, headers: &HeaderMap) -> bool {
    let budgeted_thinking = env
        .option_raw("thinking")
        .and_then(|raw| serde_json::from_slice::<Value>(raw).ok())
        .is_some_and(|t| anthropic::thinking_budget(&json!({ "thinking": t })).is_some());
    let betas = headers.get("anthropic-beta").and_then(|v| v.to_str().ok());
    let one_token = !budgeted_thinking
        || anthropic::budget_may_exceed_max_tokens(betas, env.tools_raw().next().is_some());
    // A keep-warm goes to Anthropic's own API: never for a request another route carried.
    let anthropic = env.provider() == crate::route::Provider::Anthropic;
    anthropic && !is_subscription(headers) && one_token
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
/// short user message follows, so the request is an ordinary turn. When the next turn
/// drops thinking the final request kept (see the module), the keep-warm keeps only the
/// messages before it, then the short message under the 1h marker: the entry it writes
/// holds what the next turn can read, for an hour, and nothing it cannot.
pub fn request_body(sent: &Value, tail: usize, assistant: &Value) -> Option<Value> {
    let mut body = sent.as_object()?.clone();
    let mut messages = body.get("messages")?.as_array()?.clone();
    messages.truncate(messages.len().checked_sub(tail)?);
    for m in &mut messages {
        strip_markers(m);
    }
    let mut nudge = json!({"role": "user", "content": [{"type": "text", "text": NUDGE}]});
    let model = body.get("model").and_then(Value::as_str).unwrap_or("");
    match thinking::dropped_at_next_turn_of(&body, &messages, model) {
        Some(first) => {
            messages.truncate(first);
            nudge["content"][0]
                .as_object_mut()?
                .insert("cache_control".into(), one_hour());
        }
        None => messages.push(marked_answer(assistant)?),
    }
    messages.push(nudge);
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

/// The answer as the keep-warm sends it back: role and content, a 1h marker on its last
/// block that takes one.
fn marked_answer(assistant: &Value) -> Option<Value> {
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
    Some(Value::Object(answer))
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
    use crate::route::Endpoint;

    /// Subscription traffic is told by the one rule of `providers::auth`: an OAuth token
    /// in the bearer credential (not in `x-api-key`), or the OAuth beta Claude Code sends.
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
        h.insert("anthropic-beta", "oauth-2025-04-20".parse().unwrap());
        assert!(is_subscription(&h));
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

    /// pi on Sonnet 4.5 with thinking on a budget: a turn's prompt, a tool call with its
    /// thinking, the result (the final request), and the thinking answer.
    fn thinking_turn() -> (Value, Value) {
        let sent = json!({"model": "claude-sonnet-4-5", "max_tokens": 24576, "stream": true,
            "thinking": {"type": "enabled", "budget_tokens": 8192},
            "tools": [{"name": "read", "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Read it."}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "look", "signature": "s1"},
                    {"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "x",
                    "cache_control": {"type": "ephemeral"}}]}]});
        let answer = json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "done", "signature": "s2"}, {"type": "text", "text": "It reads."}]});
        (sent, answer)
    }

    /// The next turn drops the turn's thinking (Sonnet 4.5), so what follows the prompt
    /// changes: the keep-warm keeps the thinking settings (part of the messages' cache
    /// key), holds the prefix up to the prompt for an hour under its short message, and
    /// asks for one token.
    #[test]
    fn with_thinking_the_next_turn_drops_the_keep_warm_holds_the_prefix_before_it() {
        let (sent, answer) = thinking_turn();
        let body = request_body(&sent, 0, &answer).unwrap();
        assert_eq!(body["thinking"], sent["thinking"]);
        assert_eq!(body["max_tokens"], 1);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(
            messages.len(),
            2,
            "the prompt, then the short message: {messages:?}"
        );
        assert_eq!(messages[0]["content"][0]["text"], "Read it.");
        assert!(messages[0]["content"][0].get("cache_control").is_none());
        assert_eq!(messages[1]["content"][0]["cache_control"]["ttl"], "1h");
        // A model that keeps its thinking gets the whole turn and the answer, as before.
        let mut keeps = sent.clone();
        keeps["model"] = json!("claude-opus-4-5");
        let body = request_body(&keeps, 0, &answer).unwrap();
        assert_eq!(body["messages"].as_array().unwrap().len(), 5);
        assert_eq!(
            body["messages"][3]["content"][1]["cache_control"]["ttl"],
            "1h"
        );
    }

    /// One token below a thinking budget is allowed only with thinking interleaved with
    /// tools; a keep-warm follows such a request, not one without the beta or the tools.
    #[test]
    fn a_keep_warm_follows_thinking_on_a_budget_only_when_interleaved_with_tools() {
        let envelope = |body: &Value| {
            crate::providers::parse_envelope(
                Endpoint::Messages,
                bytes::Bytes::from(serde_json::to_vec(body).unwrap()),
            )
            .unwrap()
        };
        let (sent, _) = thinking_turn();
        let mut pi = HeaderMap::new();
        pi.insert(
            "anthropic-beta",
            "interleaved-thinking-2025-05-14".parse().unwrap(),
        );
        assert!(allowed(&envelope(&sent), &pi));
        assert!(!allowed(&envelope(&sent), &HeaderMap::new()), "no beta");
        let mut no_tools = sent.clone();
        no_tools.as_object_mut().unwrap().remove("tools");
        assert!(!allowed(&envelope(&no_tools), &pi), "no tools");
        let mut adaptive = sent.clone();
        adaptive["thinking"] = json!({"type": "adaptive"});
        assert!(allowed(&envelope(&adaptive), &HeaderMap::new()));
        pi.insert("authorization", "Bearer sk-ant-oat01-abc".parse().unwrap());
        assert!(!allowed(&envelope(&sent), &pi), "never for a subscription");
    }
}
