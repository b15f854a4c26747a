//! The latest user prompt of a request: what retrieval runs against and what marks a turn.

use serde_json::Value;

/// Index and text of the last user message that is not only tool results (Anthropic
/// `tool_result` blocks; OpenAI tool answers have their own role and never match). This is
/// the start of the current turn, the `before_last_user_prompt` insertion point.
pub fn latest_user_prompt(messages: &[Value]) -> Option<(usize, String)> {
    messages
        .iter()
        .enumerate()
        .rev()
        .find(|(_, m)| is_user_prompt(m))
        .map(|(i, m)| (i, text_of(m)))
}

fn is_user_prompt(message: &Value) -> bool {
    if message.get("role").and_then(Value::as_str) != Some("user") {
        return false;
    }
    match message.get("content") {
        Some(Value::String(_)) => true,
        Some(Value::Array(blocks)) => blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) != Some("tool_result")),
        _ => false,
    }
}

/// The text blocks of a message joined by newlines (`text` and `input_text` parts).
fn text_of(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skips_tool_results_and_assistant_messages() {
        let msgs = vec![
            json!({"role": "user", "content": "fix the retry test"}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}),
        ];
        assert_eq!(
            latest_user_prompt(&msgs),
            Some((0, "fix the retry test".to_string()))
        );
        let msgs = vec![json!({"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})];
        assert_eq!(latest_user_prompt(&msgs), Some((0, "a\nb".to_string())));
        assert_eq!(
            latest_user_prompt(&[json!({"role": "assistant", "content": "x"})]),
            None
        );
    }
}
