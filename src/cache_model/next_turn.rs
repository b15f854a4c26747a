//! What the next turn of a conversation can read of what a request writes (Anthropic): the
//! question to ask before paying for a write that lasts an hour, which only a later read
//! repays. The next turn sends the same history, the answer and a new prompt; what it
//! reads is bounded by the thinking it drops ([`super::thinking`]), and by the lookback of
//! its markers: a marker reads back over at most 20 blocks
//! (`crate::providers::anthropic::LOOKBACK_BLOCKS`), so the end of
//! what it keeps must carry a marker of its own when the turn added more blocks than that
//! (`auto` markers place one there, `crate::envelope::CompileOptions::kept_history`).

use super::thinking::{dropped_at_next_turn, Keep};
use crate::envelope::MsgKind;

/// One history message, as the question needs it.
#[derive(Debug, Clone, Default)]
pub struct Message {
    pub kind: MsgKind,
    /// Its content blocks (string content is one).
    pub blocks: usize,
    /// Of which thinking blocks.
    pub thinking_blocks: usize,
}

/// How many of the history's first messages the next turn sends as this request writes
/// them: those before the first one whose thinking it drops (all of them when it drops
/// none). A marker at the end of the last of them reads them whatever came after.
pub fn messages_kept_at_next_turn(messages: &[Message], keep: Option<Keep>) -> usize {
    let kinds: Vec<MsgKind> = messages.iter().map(|m| m.kind.clone()).collect();
    dropped_at_next_turn(keep, &kinds, |i| messages[i].thinking_blocks > 0)
        .unwrap_or(messages.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(from_model: bool, tool_result: bool, thinking: usize) -> Message {
        Message {
            kind: MsgKind {
                role: if from_model { "assistant" } else { "user" }.into(),
                from_model,
                calls_tool: from_model,
                tool_result,
                other_content: !from_model && !tool_result,
                ..MsgKind::default()
            },
            blocks: 1 + thinking,
            thinking_blocks: thinking,
        }
    }

    /// A prompt and a tool loop of `steps` calls, each with a thinking block.
    fn turn(steps: usize) -> Vec<Message> {
        let mut out = vec![message(false, false, 0)];
        for _ in 0..steps {
            out.push(message(true, false, 1));
            out.push(message(false, true, 0));
        }
        out
    }

    #[test]
    fn the_next_turn_keeps_the_history_up_to_the_thinking_it_drops() {
        let keep_one = Some(Keep::Turns(1));
        // The turn's prompt, not its tool loop whose thinking goes.
        assert_eq!(messages_kept_at_next_turn(&turn(14), keep_one), 1);
        // A model that keeps its thinking, or thinking off: the whole history.
        assert_eq!(messages_kept_at_next_turn(&turn(14), Some(Keep::All)), 29);
        assert_eq!(messages_kept_at_next_turn(&turn(14), None), 29);
    }
}
