//! Which thinking blocks of earlier assistant messages an Anthropic prompt keeps: the
//! provider drops the others before the prompt is cached, so the messages after a dropped
//! block no longer match what an earlier request stored.
//!
//! The rule (platform.claude.com/docs/en/build-with-claude/extended-thinking and
//! .../context-editing):
//! - With thinking off, nothing is dropped.
//! - By default, Claude Opus 4.5+, Sonnet 4.6+ and the Claude 5 models keep every earlier
//!   thinking block; older models (Opus 4.1 and earlier, Sonnet 4.5 and earlier, Haiku
//!   through 4.5) keep only the current assistant turn's. Which model does what is data:
//!   `keeps_earlier_thinking` in `data/models.toml`. A model the table does not know is
//!   taken to keep everything, as every model since Opus 4.5 does.
//! - A `context_management` edit of type `clear_thinking_*` decides instead: `keep: "all"`,
//!   or `keep: {"type": "thinking_turns", "value": N}` (the last N assistant turns), which
//!   is also its default.
//!
//! An assistant turn is everything the model produced since the last user prompt; a user
//! message carrying tool results (with or without appended text, as Claude Code sends) is
//! still the same turn. The user-prompt rule is `providers::turns`, not a copy of it. When the
//! request ends with a user prompt, the turn about to be generated is the current one, so
//! keeping one turn keeps nothing earlier.

use serde_json::{Map, Value};

use crate::envelope::{turns, MsgKind};

use crate::route::Endpoint;

/// How many assistant turns keep their thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    All,
    /// The last N turns, the current one included.
    Turns(usize),
}

/// What the request asks for, or the model's default (`None` when thinking is off).
pub fn retention(request: &Map<String, Value>, model: &str) -> Option<Keep> {
    if let Some(keep) = clear_thinking_edit(request) {
        return Some(keep);
    }
    if !thinking_on(request.get("thinking")) {
        return None;
    }
    let keeps_all = crate::models::lookup(model).is_none_or(|m| m.keeps_earlier_thinking);
    Some(if keeps_all { Keep::All } else { Keep::Turns(1) })
}

/// For each message, whether its thinking blocks stay in the prompt.
pub fn kept_by_message(request: &Map<String, Value>, messages: &[Value], model: &str) -> Vec<bool> {
    let keep = retention(request, model);
    if matches!(keep, None | Some(Keep::All)) {
        return vec![true; messages.len()];
    }
    let kinds: Vec<MsgKind> = messages
        .iter()
        .map(|m| {
            crate::providers::message_kind(
                Endpoint::Messages,
                &serde_json::to_vec(m).unwrap_or_default(),
            )
        })
        .collect();
    kept_by_kind(keep, &kinds)
}

/// For each message of these kinds, whether its thinking blocks stay in the prompt, under
/// `keep` (from [`retention`]).
pub fn kept_by_kind(keep: Option<Keep>, kinds: &[MsgKind]) -> Vec<bool> {
    let turns = match keep {
        None | Some(Keep::All) => return vec![true; kinds.len()],
        Some(Keep::Turns(n)) => n,
    };
    // The turn each message belongs to: the number of user prompts up to it.
    let starts = turns::prompt_starts(kinds);
    let prompts = starts.len();
    // The current turn is the last one; the N most recent turns keep their thinking.
    let first_kept = (prompts + 1).saturating_sub(turns);
    let mut turn = 0;
    (0..kinds.len())
        .map(|i| {
            while turn < prompts && starts[turn] <= i {
                turn += 1;
            }
            turn >= first_kept
        })
        .collect()
}

fn thinking_on(thinking: Option<&Value>) -> bool {
    matches!(
        thinking.and_then(|t| t.get("type")).and_then(Value::as_str),
        Some("enabled") | Some("adaptive")
    )
}

/// The `keep` of a `clear_thinking_*` context-management edit, if the request has one.
fn clear_thinking_edit(request: &Map<String, Value>) -> Option<Keep> {
    let (_, edit) =
        crate::providers::anthropic::context_edit(request.get("context_management"), |t| {
            t.starts_with("clear_thinking")
        })?;
    Some(match edit.get("keep") {
        Some(Value::String(s)) if s == "all" => Keep::All,
        Some(keep) if keep.get("type").and_then(Value::as_str) == Some("thinking_turns") => {
            Keep::Turns(
                keep.get("value")
                    .and_then(Value::as_u64)
                    .map_or(1, |n| n as usize),
            )
        }
        _ => Keep::Turns(1),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{kept_by_kind, Keep};
    use crate::envelope::{turns, MsgKind};

    /// The rule as first written: each message's turn counted from scratch.
    fn kept_by_counting(keep: Option<Keep>, kinds: &[MsgKind]) -> Vec<bool> {
        let turns = match keep {
            None | Some(Keep::All) => return vec![true; kinds.len()],
            Some(Keep::Turns(n)) => n,
        };
        let starts = turns::prompt_starts(kinds);
        let first_kept = (starts.len() + 1).saturating_sub(turns);
        (0..kinds.len())
            .map(|i| starts.iter().filter(|&&s| s <= i).count() >= first_kept)
            .collect()
    }

    fn arb_kind() -> impl Strategy<Value = MsgKind> {
        prop_oneof![
            // A user prompt, a tool result (with or without appended text), an assistant
            // message (with or without a call), a system message.
            Just((false, "user", false, true)),
            Just((false, "user", true, false)),
            Just((false, "user", true, true)),
            Just((true, "assistant", false, true)),
            Just((true, "assistant", false, false)),
            Just((false, "system", false, true)),
        ]
        .prop_map(|(from_model, role, tool_result, other_content)| MsgKind {
            role: role.into(),
            from_model,
            calls_tool: from_model && !other_content,
            tool_result,
            other_content,
            ..MsgKind::default()
        })
    }

    proptest! {
        #[test]
        fn one_pass_turn_counting_equals_counting_per_message(
            kinds in prop::collection::vec(arb_kind(), 0..40),
            keep in prop_oneof![
                Just(None),
                Just(Some(Keep::All)),
                (0usize..5).prop_map(|n| Some(Keep::Turns(n))),
            ],
        ) {
            prop_assert_eq!(kept_by_kind(keep, &kinds), kept_by_counting(keep, &kinds));
        }
    }
}
