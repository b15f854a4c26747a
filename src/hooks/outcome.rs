//! What a hook call produced. An enum, so a failure cannot be mistaken for "no change".

use std::time::Duration;

use crate::patch::HandlerResult;
use crate::policy::OnError;

#[derive(Debug, Clone, PartialEq)]
pub enum HookOutcome {
    /// A context hook's patch (not yet checked for invalidate reasons: the engine does
    /// that with `Op::check_reason`, like for every handler).
    Patch(HandlerResult),
    /// A `before_provider_request` hook's replacement payload, as its JSON text (an object).
    Payload(bytes::Bytes),
    /// A `before_provider_request` hook's RFC 6902 edits.
    JsonPatch(json_patch::Patch),
    /// 204, or an answer with nothing to change.
    NoChange,
    /// Time-out, connection error, non-2xx status or malformed answer. `on_error` says
    /// what the request does now: go on unchanged (`continue`) or fail (`fail`).
    Failed { on_error: OnError, message: String },
}

/// One hook call, with what the metrics need: `cachet_hook_duration_seconds{hook}` from
/// `elapsed`, `cachet_hook_failures_total{hook}` when `is_failure()`.
#[derive(Debug, Clone, PartialEq)]
pub struct HookCall {
    /// The hook's name (metric label).
    pub hook: String,
    pub elapsed: Duration,
    pub outcome: HookOutcome,
}

impl HookCall {
    pub fn is_failure(&self) -> bool {
        matches!(self.outcome, HookOutcome::Failed { .. })
    }

    /// A failure whose hook says the request must fail: the message for the client's
    /// provider-format error.
    pub fn fail_closed(&self) -> Option<&str> {
        match &self.outcome {
            HookOutcome::Failed {
                on_error: OnError::Fail,
                message,
            } => Some(message),
            _ => None,
        }
    }
}
