//! Anthropic's tool-result clearing (`clear_tool_uses_20250919`; platform.claude.com,
//! Context editing): once the prompt passes the edit's trigger, the provider replaces the
//! oldest tool results with a placeholder before sampling, keeping the latest ones. The
//! prompt the cache sees is the edited one, so the cached prefix ends at the first result
//! cleared since.
//!
//! The parameters, with the documented defaults: `trigger` (`input_tokens` 100,000, or
//! `tool_uses`: clearing starts when the prompt exceeds it), `keep` (`tool_uses` 3: the most
//! recent tool uses stay), `clear_at_least` (`input_tokens`: when fewer would be cleared,
//! the edit is not applied), `exclude_tools` (names never cleared), `clear_tool_inputs`
//! (the calls' inputs are cleared too).
//!
//! What the documentation leaves open, modelled here: the edit is worked out afresh on
//! every request from the history as sent (the client keeps the unedited history, and
//! nothing says the provider keeps state), so the results cleared once stay cleared and the
//! next cleared one is the oldest kept before. The placeholder is this model's own text, and
//! a cleared call's input becomes `{}`.

use serde_json::{json, Value};

use crate::error::ApiError;
use crate::providers::anthropic;
use crate::usage::Cleared;

/// The text a cleared tool result is replaced with (the provider's own is not documented).
pub const PLACEHOLDER: &str = "[Old tool result content cleared]";

const DEFAULT_TRIGGER_TOKENS: u64 = 100_000;
const DEFAULT_KEEP: usize = 3;

enum Trigger {
    InputTokens(u64),
    ToolUses(u64),
}

struct Edit {
    trigger: Trigger,
    keep: usize,
    clear_at_least: Option<u64>,
    exclude: Vec<String>,
    clear_inputs: bool,
}

/// The request as the provider samples it after its `clear_tool_uses` edit, and what the
/// edit cleared; `None` when there is no such edit or it does not apply. `input_tokens`
/// counts a request's prompt.
pub fn apply(
    req: &Value,
    input_tokens: impl Fn(&Value) -> Result<u64, ApiError>,
) -> Result<Option<(Value, Cleared)>, ApiError> {
    let Some(edit) = edit_of(req)? else {
        return Ok(None);
    };
    let Some(messages) = req.get("messages").and_then(Value::as_array) else {
        return Ok(None);
    };
    let start = anthropic::compaction_start(messages).map_or(0, |(m, _)| m);
    // Every tool call in the prompt, oldest first: (id, name).
    let calls: Vec<(&str, &str)> = messages[start..]
        .iter()
        .filter(|m| m.get("role").and_then(Value::as_str) == Some("assistant"))
        .filter_map(|m| m.get("content")?.as_array())
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .filter_map(|b| {
            let id = b.get("id")?.as_str()?;
            Some((id, b.get("name").and_then(Value::as_str).unwrap_or("")))
        })
        .collect();
    let before = input_tokens(req)?;
    let triggered = match edit.trigger {
        Trigger::InputTokens(n) => before > n,
        Trigger::ToolUses(n) => calls.len() as u64 > n,
    };
    if !triggered {
        return Ok(None);
    }
    let older = calls.len().saturating_sub(edit.keep);
    let cleared: Vec<&str> = calls[..older]
        .iter()
        .filter(|(_, name)| !edit.exclude.iter().any(|x| x == name))
        .map(|(id, _)| *id)
        .collect();
    if cleared.is_empty() {
        return Ok(None);
    }
    let mut edited = req.clone();
    if let Some(messages) = edited.get_mut("messages").and_then(Value::as_array_mut) {
        for message in messages.iter_mut().skip(start) {
            let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
                continue;
            };
            for block in blocks {
                let kind = block.get("type").and_then(Value::as_str);
                let id_field = match kind {
                    Some("tool_result") => "tool_use_id",
                    Some("tool_use") if edit.clear_inputs => "id",
                    _ => continue,
                };
                let id = block.get(id_field).and_then(Value::as_str).unwrap_or("");
                if !cleared.contains(&id) {
                    continue;
                }
                if kind == Some("tool_result") {
                    block["content"] = json!(PLACEHOLDER);
                } else {
                    block["input"] = json!({});
                }
            }
        }
    }
    let freed = before.saturating_sub(input_tokens(&edited)?);
    if edit.clear_at_least.is_some_and(|least| freed < least) {
        return Ok(None);
    }
    Ok(Some((
        edited,
        Cleared {
            tool_uses: cleared.len() as u64,
            input_tokens: freed,
        },
    )))
}

/// The request's `clear_tool_uses` edit, read with its defaults; a malformed one is the
/// 400 the API answers.
fn edit_of(req: &Value) -> Result<Option<Edit>, ApiError> {
    let Some((i, edit)) = anthropic::context_edit(req.get("context_management"), |t| {
        t == anthropic::CLEAR_TOOL_USES_EDIT
    }) else {
        return Ok(None);
    };
    let path = |field: &str| format!("context_management.edits.{i}.{field}");
    let amount = |field: &str, kinds: &[&str]| -> Result<Option<(String, u64)>, ApiError> {
        let Some(v) = edit.get(field).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if !kinds.contains(&kind) {
            return Err(ApiError::invalid(format!(
                "{}.type: Input should be {}",
                path(field),
                kinds
                    .iter()
                    .map(|k| format!("'{k}'"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            )));
        }
        let value = v.get("value").and_then(Value::as_u64).ok_or_else(|| {
            ApiError::invalid(format!(
                "{}.value: Input should be a valid integer",
                path(field)
            ))
        })?;
        Ok(Some((kind.to_string(), value)))
    };
    let trigger = match amount("trigger", &["input_tokens", "tool_uses"])? {
        None => Trigger::InputTokens(DEFAULT_TRIGGER_TOKENS),
        Some((kind, n)) if kind == "tool_uses" => Trigger::ToolUses(n),
        Some((_, n)) => Trigger::InputTokens(n),
    };
    let keep = amount("keep", &["tool_uses"])?.map_or(DEFAULT_KEEP, |(_, n)| {
        usize::try_from(n).unwrap_or(usize::MAX)
    });
    let clear_at_least = amount("clear_at_least", &["input_tokens"])?.map(|(_, n)| n);
    let exclude = edit
        .get("exclude_tools")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    let clear_inputs = edit
        .get("clear_tool_inputs")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Some(Edit {
        trigger,
        keep,
        clear_at_least,
        exclude,
        clear_inputs,
    }))
}
