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

/// [`retention`] from a request's `thinking` and `context_management` options, their JSON
/// as the request carries them.
pub fn retention_of(
    thinking: Option<&[u8]>,
    context_management: Option<&[u8]>,
    model: &str,
) -> Option<Keep> {
    let mut request = Map::new();
    for (key, raw) in [
        ("thinking", thinking),
        ("context_management", context_management),
    ] {
        if let Some(value) = raw.and_then(|r| serde_json::from_slice(r).ok()) {
            request.insert(key.to_string(), value);
        }
    }
    retention(&request, model)
}

/// The first message whose thinking blocks a prompt of these kinds keeps and the prompt of
/// the next turn (the same history, the answer, then a user prompt) drops: what the prompt
/// writes from that message on is not what the next turn sends. `None` when the next turn
/// drops nothing this prompt keeps.
pub fn dropped_at_next_turn(
    keep: Option<Keep>,
    kinds: &[MsgKind],
    has_thinking: impl Fn(usize) -> bool,
) -> Option<usize> {
    if matches!(keep, None | Some(Keep::All)) {
        return None;
    }
    let now = kept_by_kind(keep, kinds);
    let mut next_kinds = kinds.to_vec();
    next_kinds.push(MsgKind {
        role: "assistant".into(),
        from_model: true,
        other_content: true,
        ..MsgKind::default()
    });
    next_kinds.push(MsgKind {
        role: "user".into(),
        other_content: true,
        ..MsgKind::default()
    });
    let next = kept_by_kind(keep, &next_kinds);
    (0..kinds.len()).find(|&i| now[i] && !next[i] && has_thinking(i))
}

/// For each message, whether its thinking blocks stay in the prompt.
pub fn kept_by_message(request: &Map<String, Value>, messages: &[Value], model: &str) -> Vec<bool> {
    let keep = retention(request, model);
    if matches!(keep, None | Some(Keep::All)) {
        return vec![true; messages.len()];
    }
    kept_by_kind(keep, &kinds_of(messages))
}

/// [`dropped_at_next_turn`] for a request's `messages` (as JSON), under what the request
/// asks for.
pub fn dropped_at_next_turn_of(
    request: &Map<String, Value>,
    messages: &[Value],
    model: &str,
) -> Option<usize> {
    let has_thinking = |i: usize| {
        messages[i]["content"].as_array().is_some_and(|blocks| {
            blocks.iter().any(|b| {
                (b.get("type").and_then(Value::as_str))
                    .is_some_and(crate::providers::anthropic::is_thinking_block)
            })
        })
    };
    dropped_at_next_turn(retention(request, model), &kinds_of(messages), has_thinking)
}

fn kinds_of(messages: &[Value]) -> Vec<MsgKind> {
    messages
        .iter()
        .map(|m| {
            crate::providers::message_kind(
                Endpoint::Messages,
                &serde_json::to_vec(m).unwrap_or_default(),
            )
        })
        .collect()
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

    use super::{dropped_at_next_turn, kept_by_kind, Keep};
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

    /// A turn's tool loop keeps its own thinking; the next turn drops it from the turn's
    /// first thinking message on (older models), or nothing (models that keep it all).
    #[test]
    fn the_next_turn_drops_the_current_turns_thinking_on_older_models() {
        let user = |tool_result: bool| MsgKind {
            role: "user".into(),
            tool_result,
            other_content: !tool_result,
            ..MsgKind::default()
        };
        let model = MsgKind {
            role: "assistant".into(),
            from_model: true,
            calls_tool: true,
            ..MsgKind::default()
        };
        let answer = MsgKind {
            calls_tool: false,
            other_content: true,
            ..model.clone()
        };
        // Turn 1 (prompt, call, result, answer), turn 2 (prompt, call, result, call, result).
        let kinds = [
            user(false),
            model.clone(),
            user(true),
            answer,
            user(false),
            model.clone(),
            user(true),
            model.clone(),
            user(true),
        ];
        let thinking = |i: usize| kinds[i].from_model;
        assert_eq!(
            dropped_at_next_turn(Some(Keep::Turns(1)), &kinds, thinking),
            Some(5)
        );
        assert_eq!(
            dropped_at_next_turn(Some(Keep::All), &kinds, thinking),
            None
        );
        assert_eq!(dropped_at_next_turn(None, &kinds, thinking), None);
        assert_eq!(
            dropped_at_next_turn(Some(Keep::Turns(1)), &kinds, |_| false),
            None
        );
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
