//! Why a patch was refused, and what an applied patch did — the outcomes metrics and the
//! session timeline record.

use serde_json::Value;

use super::ops::{HandlerResult, Op, Scope};
use crate::error::{ApiError, ErrorKind};

/// The specific reason a patch was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefusalReason {
    /// A cached-scope op without `invalidateCacheReason`.
    MissingInvalidateReason,
    /// The op is not one of DESIGN §3 (or a field is unknown or malformed).
    InvalidOp(String),
    /// `tools_remove` named a tool the request does not have.
    UnknownTool(String),
    /// A system part named in the op does not exist.
    UnknownPart(String),
    /// `messages_insert` selector that is malformed or out of range.
    BadSelector(String),
    /// A message or tool the provider would not accept in that shape.
    BadElement(String),
    /// The result would break the provider's ordering rules (e.g. a tool result separated
    /// from its tool call).
    ProviderRule(String),
    /// `options_set` tried to set an envelope section (`messages`, `model`, ...).
    NotAnOption(String),
}

impl RefusalReason {
    /// A bounded label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            RefusalReason::MissingInvalidateReason => "missing_invalidate_reason",
            RefusalReason::InvalidOp(_) => "invalid_op",
            RefusalReason::UnknownTool(_) => "unknown_tool",
            RefusalReason::UnknownPart(_) => "unknown_part",
            RefusalReason::BadSelector(_) => "bad_selector",
            RefusalReason::BadElement(_) => "bad_element",
            RefusalReason::ProviderRule(_) => "provider_rule",
            RefusalReason::NotAnOption(_) => "not_an_option",
        }
    }
}

/// A refused patch: nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("patch from transformer `{transformer}` refused: {message}")]
pub struct PatchRefusal {
    pub transformer: String,
    /// Position of the offending op in the patch, when one op is to blame.
    pub op_index: Option<usize>,
    /// Its name (`system_part_set`, ...), when known.
    pub op: Option<&'static str>,
    pub reason: RefusalReason,
    /// A human sentence naming the op and what is wrong.
    pub message: String,
}

impl PatchRefusal {
    pub(crate) fn new(
        transformer: &str,
        index: Option<usize>,
        op: Option<&Op>,
        reason: RefusalReason,
        what: String,
    ) -> Self {
        let message = match (index, op) {
            (Some(i), Some(op)) => format!("op {i} (`{}`): {what}", op.name()),
            (Some(i), None) => format!("op {i}: {what}"),
            _ => what,
        };
        PatchRefusal {
            transformer: transformer.to_owned(),
            op_index: index,
            op: op.map(Op::name),
            reason,
            message,
        }
    }

    /// The error a strict-mode request fails with: a provider-format 500 naming the
    /// transformer and the reason.
    pub fn to_api_error(&self) -> ApiError {
        ApiError::new(ErrorKind::Internal, self.to_string())
    }
}

/// What one applied op did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpOutcome {
    pub op: &'static str,
    pub scope: Scope,
    /// The op's `invalidateCacheReason` (for `cachet_cache_invalidations_total`).
    pub invalidate_reason: Option<String>,
}

/// What an applied patch did, op by op.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApplyReport {
    pub transformer: String,
    pub ops: Vec<OpOutcome>,
}

/// Read a handler's `patch` array, refusing the whole patch on an unknown op or a
/// malformed one (with the op's position).
pub fn parse_ops(patch: &Value, transformer: &str) -> Result<Vec<Op>, PatchRefusal> {
    let Some(items) = patch.as_array() else {
        return Err(PatchRefusal::new(
            transformer,
            None,
            None,
            RefusalReason::InvalidOp("patch must be an array".into()),
            "patch must be an array".into(),
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            serde_json::from_value::<Op>(item.clone()).map_err(|e| {
                let what = e.to_string();
                PatchRefusal::new(
                    transformer,
                    Some(i),
                    None,
                    RefusalReason::InvalidOp(what.clone()),
                    what,
                )
            })
        })
        .collect()
}

/// Read a handler's whole answer (`{patch, transformerName?, display?}`), refusing it with
/// a specific reason when an op is unknown or malformed.
pub fn parse_handler_result(
    answer: &Value,
    default_transformer: &str,
) -> Result<HandlerResult, PatchRefusal> {
    let transformer = answer
        .get("transformerName")
        .and_then(Value::as_str)
        .unwrap_or(default_transformer);
    let patch = parse_ops(
        answer.get("patch").unwrap_or(&Value::Array(Vec::new())),
        transformer,
    )?;
    let display = answer
        .get("display")
        .and_then(|d| serde_json::from_value(d.clone()).ok());
    Ok(HandlerResult {
        patch,
        transformer_name: Some(transformer.to_owned()),
        display,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_op_is_refused_with_its_position() {
        let patch = json!([{"op": "options_set", "options": {}}, {"op": "system_nuke"}]);
        let r = parse_ops(&patch, "memory").unwrap_err();
        assert_eq!(r.op_index, Some(1));
        assert_eq!(r.reason.label(), "invalid_op");
        assert!(r.to_string().contains("transformer `memory`"), "{r}");
        assert!(r.to_string().contains("system_nuke"), "{r}");
        assert_eq!(r.to_api_error().status().as_u16(), 500);
        let answer = json!({"transformerName": "hook-a", "patch": [{"op": "tools_remove", "names": ["x"], "invalidateCacheReason": "r"}]});
        let result = parse_handler_result(&answer, "default").unwrap();
        assert_eq!(result.transformer_name.as_deref(), Some("hook-a"));
        assert_eq!(result.patch.len(), 1);
        let bad = json!({"patch": [{"op": "nope"}]});
        assert_eq!(
            parse_handler_result(&bad, "hook-b")
                .unwrap_err()
                .transformer,
            "hook-b"
        );
    }
}
