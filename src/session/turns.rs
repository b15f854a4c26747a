//! `meta.turn_index`: which user turn of the session a request belongs to.
//!
//! A turn starts with a user prompt: a user message that is not only tool results (the
//! same rule as the `before_last_user_prompt` insert point). Requests of one tool loop share
//! the turn of the prompt that started it. The index is 0-based like `request_index`: the
//! number of user prompts in the history before the current one.

use serde_json::Value;

use crate::providers::Endpoint;

/// The 0-based turn of a request whose client history is `history`.
pub fn turn_index(history: &[Value], endpoint: Endpoint) -> u64 {
    let prompts = history
        .iter()
        .filter(|m| is_user_prompt(m, endpoint))
        .count() as u64;
    prompts.saturating_sub(1)
}

fn is_user_prompt(msg: &Value, endpoint: Endpoint) -> bool {
    if msg.get("role").and_then(Value::as_str) != Some("user") {
        return false;
    }
    match (endpoint, msg.get("content")) {
        // Chat tool results have their own role; Responses tool outputs are their own items.
        (Endpoint::Chat | Endpoint::Responses, _) => true,
        (_, Some(Value::Array(blocks))) => blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) != Some("tool_result")),
        (_, Some(_)) => true,
        (_, None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_loops_stay_in_the_turn_that_started_them() {
        let mut h = vec![json!({"role": "user", "content": "first task"})];
        assert_eq!(turn_index(&h, Endpoint::Messages), 0);
        h.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]}));
        h.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}));
        assert_eq!(turn_index(&h, Endpoint::Messages), 0);
        h.push(json!({"role": "assistant", "content": "done"}));
        h.push(json!({"role": "user", "content": [{"type": "text", "text": "next task"}]}));
        assert_eq!(turn_index(&h, Endpoint::Messages), 1);
        // Claude Code's system messages inside `messages` are not prompts.
        h.push(json!({"role": "system", "content": "reminder"}));
        assert_eq!(turn_index(&h, Endpoint::Messages), 1);
    }

    #[test]
    fn openai_shapes() {
        let chat = [
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "a"}),
            json!({"role": "assistant", "tool_calls": []}),
            json!({"role": "tool", "tool_call_id": "c", "content": "x"}),
            json!({"role": "user", "content": "b"}),
        ];
        assert_eq!(turn_index(&chat, Endpoint::Chat), 1);
        let responses = [
            json!({"role": "user", "content": "a"}),
            json!({"type": "function_call_output", "call_id": "c", "output": "x"}),
        ];
        assert_eq!(turn_index(&responses, Endpoint::Responses), 0);
        assert_eq!(turn_index(&[], Endpoint::Responses), 0);
    }
}
