//! User turns, the same rule for every provider API.
//!
//! A user turn is the run of messages between two turns of the model. It starts a new
//! prompt when it holds a user message with content of its own and no tool result. A tool
//! result anywhere in it continues the model's tool loop, whatever text blocks or further
//! messages follow: Claude Code appends reminder text to its tool results, and a policy may
//! append a request-only message after them. The provider sees such a turn as the answer to
//! its tool call, and so does cachet: "Consecutive `user` or `assistant` turns in your
//! request will be combined into a single turn" (Anthropic Messages API reference, the
//! `messages` parameter), so a text message after a tool result is part of the tool
//! result's turn. A Responses `compaction` item is the model's too: the summary it answered
//! stands for the turns it replaced, so the prompt after it starts a turn (Codex keeps the
//! user messages, then the compaction item, then its next prompt).

use super::MsgKind;

/// Whether a message ends the user's turn: the model's own (an answer, a tool call, a
/// compaction's summary).
fn ends_user_turn(kind: &MsgKind) -> bool {
    kind.from_model || kind.compaction
}

/// Position of the first user message of each turn that starts a prompt, in order.
pub fn prompt_starts(kinds: &[MsgKind]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i < kinds.len() {
        if ends_user_turn(&kinds[i]) {
            i += 1;
            continue;
        }
        let end = kinds[i..]
            .iter()
            .position(ends_user_turn)
            .map_or(kinds.len(), |n| i + n);
        let turn = &kinds[i..end];
        if !turn.iter().any(|k| k.tool_result) {
            if let Some(first) = turn.iter().position(MsgKind::is_user_content) {
                starts.push(i + first);
            }
        }
        i = end;
    }
    starts
}

/// Where the current turn's prompt starts: the `before_last_user_prompt` insertion point.
pub fn last_prompt_start(kinds: &[MsgKind]) -> Option<usize> {
    prompt_starts(kinds).last().copied()
}

/// `meta.turn_index`: 0-based, the number of user prompts before the current one.
/// Requests of one tool loop share the turn of the prompt that started it.
pub fn turn_index(kinds: &[MsgKind]) -> u64 {
    (prompt_starts(kinds).len() as u64).saturating_sub(1)
}

/// `meta.turn_index` of a request that continues an answer the provider holds (a stateful
/// Responses request's `previous_response_id`) and carries only its new input: the turns
/// before it are the continued request's (`continued`, its own `turn_index`) and its current
/// one, then each prompt the new input starts. Input that starts none (tool outputs) goes on
/// the continued turn.
pub fn continued_turn_index(continued: u64, kinds: &[MsgKind]) -> u64 {
    continued + prompt_starts(kinds).len() as u64
}

/// The messages of the current turn's prompt: from its start to the next model message.
pub fn last_prompt_range(kinds: &[MsgKind]) -> Option<std::ops::Range<usize>> {
    let start = last_prompt_start(kinds)?;
    let end = kinds[start..]
        .iter()
        .position(ends_user_turn)
        .map_or(kinds.len(), |n| start + n);
    Some(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::Endpoint;

    fn kinds(endpoint: Endpoint, msgs: &[&str]) -> Vec<MsgKind> {
        msgs.iter()
            .map(|m| crate::providers::message_kind(endpoint, m.as_bytes()))
            .collect()
    }

    const TOOL_USE: &str = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}"#;

    /// Claude Code appends a `<system-reminder>` text block to the tool result inside its
    /// tool loop: still the same turn.
    #[test]
    fn claude_code_tool_result_with_reminder_text_continues_the_turn() {
        let h = kinds(
            Endpoint::Messages,
            &[
                r#"{"role":"user","content":[{"type":"text","text":"fix the test"}]}"#,
                TOOL_USE,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"},{"type":"text","text":"<system-reminder>todo list empty</system-reminder>"}]}"#,
            ],
        );
        assert_eq!(prompt_starts(&h), vec![0]);
        assert_eq!(turn_index(&h), 0);
        assert_eq!(last_prompt_start(&h), Some(0));
    }

    /// A request-only text message appended after the tool result (the uncached tail of a
    /// policy) is part of the tool result's turn, not a new prompt.
    #[test]
    fn a_user_message_after_a_tool_result_continues_the_turn() {
        let h = kinds(
            Endpoint::Messages,
            &[
                r#"{"role":"user","content":"fix the test"}"#,
                TOOL_USE,
                r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}"#,
                r#"{"role":"user","content":"Current date and time: 2026-11-23 12:00"}"#,
            ],
        );
        assert_eq!(prompt_starts(&h), vec![0]);
    }

    /// Claude Code puts `role: "system"` messages in `messages`; they never start a turn.
    #[test]
    fn in_history_system_messages_are_not_prompts() {
        let h = kinds(
            Endpoint::Messages,
            &[
                r#"{"role":"user","content":"one"}"#,
                r#"{"role":"assistant","content":"done"}"#,
                r#"{"role":"system","content":"reminder"}"#,
                r#"{"role":"user","content":"two"}"#,
            ],
        );
        assert_eq!(prompt_starts(&h), vec![0, 3]);
        assert_eq!(turn_index(&h), 1);
    }

    /// Codex opens with a developer message and a user `<environment_context>` message
    /// before the prompt: one turn, starting at the first user message.
    #[test]
    fn codex_environment_context_and_prompt_are_one_turn() {
        let h = kinds(
            Endpoint::Responses,
            &[
                r#"{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>"}]}"#,
                r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>"}]}"#,
                r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]}"#,
                r#"{"type":"reasoning","summary":[],"encrypted_content":"x"}"#,
                r#"{"type":"function_call","name":"shell","arguments":"{}","call_id":"c1"}"#,
                r#"{"type":"function_call_output","call_id":"c1","output":"a.txt"}"#,
            ],
        );
        assert_eq!(prompt_starts(&h), vec![1]);
        assert_eq!(turn_index(&h), 0);
        assert_eq!(last_prompt_range(&h), Some(1..3));
    }

    /// Codex signed in with ChatGPT after an inline compaction (0.171.0): its history keeps
    /// the user messages, then the compaction item the model answered, then the next prompt.
    /// The compaction stands for the model's turns it replaced: the prompt after it starts
    /// a turn of its own.
    #[test]
    fn a_prompt_after_a_compaction_item_starts_a_turn() {
        let h = kinds(
            Endpoint::Responses,
            &[
                r#"{"type":"message","id":"msg_1","role":"developer","content":[{"type":"input_text","text":"You are Codex"}]}"#,
                r#"{"type":"message","id":"msg_2","role":"user","content":[{"type":"input_text","text":"<environment_context>"}]}"#,
                r#"{"type":"message","id":"msg_3","role":"user","content":[{"type":"input_text","text":"List the files in this folder."}],"internal_chat_message_metadata_passthrough":{"turn_id":"t1"}}"#,
                r#"{"type":"compaction","id":"cmp_1","encrypted_content":"SGVsbG8="}"#,
                r#"{"type":"message","id":"msg_4","role":"user","content":[{"type":"input_text","text":"Now look at them again."}],"internal_chat_message_metadata_passthrough":{"turn_id":"t2"}}"#,
            ],
        );
        assert_eq!(prompt_starts(&h), vec![1, 4]);
        assert_eq!(turn_index(&h), 1);
        assert_eq!(last_prompt_range(&h), Some(4..5));
    }

    #[test]
    fn chat_tool_messages_continue_and_a_later_user_message_starts_a_turn() {
        let h = kinds(
            Endpoint::Chat,
            &[
                r#"{"role":"user","content":"a"}"#,
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}]}"#,
                r#"{"role":"tool","tool_call_id":"c","content":"x"}"#,
                r#"{"role":"assistant","content":"done"}"#,
                r#"{"role":"user","content":"b"}"#,
            ],
        );
        assert_eq!(prompt_starts(&h), vec![0, 4]);
        assert_eq!(turn_index(&h), 1);
        assert_eq!(turn_index(&[]), 0);
    }
}
