//! What the diagnosis learns after its first reading: whether an edited message is a
//! thinking block the provider dropped or blocks appended to the last message, whether a
//! miss is OpenAI's overflow, and whether the provider's own diagnosis says the same.

use super::breaks::{diagnose, BreakReason, Current, Diagnosis, Previous};

/// Whether cachet's diagnosis and the provider's own (`diagnostics` of an Anthropic answer)
/// say the same: both nothing lost, or the same kind of divergence. `None` when the
/// provider could not compare (`previous_message_not_found`, `unavailable`). Losses the
/// provider does not diagnose (TTL, lookback, minimum) count as "nothing changed" on its
/// side.
pub fn agrees_with_provider(ours: Option<&Diagnosis>, theirs: &serde_json::Value) -> Option<bool> {
    if theirs.get("cache_miss_reason").is_none() && theirs.get("type").is_some() {
        return agrees_with_openai(ours, theirs);
    }
    let reason = theirs.get("cache_miss_reason");
    let kind = reason
        .and_then(|r| r.get("type"))
        .and_then(serde_json::Value::as_str);
    let theirs = match kind {
        None => None,
        Some("previous_message_not_found" | "unavailable") => return None,
        Some(k) => Some(k),
    };
    let ours = ours.and_then(|d| match d.reason {
        BreakReason::ModelChanged => Some("model_changed"),
        BreakReason::ToolsChanged => Some("tools_changed"),
        BreakReason::SystemChanged => Some("system_changed"),
        BreakReason::MessageEdited
        | BreakReason::HistoryTruncated
        | BreakReason::ThinkingDropped => Some("messages_changed"),
        BreakReason::SpeedChanged
        | BreakReason::TtlExpired
        | BreakReason::BelowMinimum
        | BreakReason::OutsideLookback
        | BreakReason::RateOverflow
        | BreakReason::ContextEdited
        | BreakReason::Unexplained => None,
    });
    Some(ours == theirs)
}

/// [`agrees_with_provider`] for OpenAI's `prompt_cache_diagnostics` (`type`: `cache_hit`,
/// `cache_miss` with its `reason`, `comparison_response_not_found`, `unavailable`;
/// developers.openai.com/api/docs/guides/prompt-caching/diagnostics). Its reasons name the
/// request's settings, or `input_changed` for the prompt itself (instructions and input).
fn agrees_with_openai(ours: Option<&Diagnosis>, theirs: &serde_json::Value) -> Option<bool> {
    let theirs = match theirs.get("type").and_then(serde_json::Value::as_str) {
        Some("cache_hit") => None,
        Some("cache_miss") => Some(theirs.get("reason").and_then(serde_json::Value::as_str)?),
        _ => return None,
    };
    let ours = ours.and_then(|d| match d.reason {
        BreakReason::ModelChanged => Some("model_changed"),
        BreakReason::ToolsChanged => Some("tools_changed"),
        BreakReason::SpeedChanged => Some("service_tier_changed"),
        BreakReason::ContextEdited => Some("context_compacted"),
        BreakReason::SystemChanged
        | BreakReason::MessageEdited
        | BreakReason::HistoryTruncated
        | BreakReason::ThinkingDropped => Some("input_changed"),
        BreakReason::TtlExpired
        | BreakReason::BelowMinimum
        | BreakReason::OutsideLookback
        | BreakReason::RateOverflow
        | BreakReason::Unexplained => None,
    });
    Some(ours == theirs)
}

impl Diagnosis {
    /// A `message_edited` where the two messages differ only by thinking blocks that the
    /// newer one lacks becomes `thinking_dropped`. `before` and `now` are the message's JSON
    /// in the previous and this request.
    pub fn refine_thinking(&mut self, before: &[u8], now: &[u8]) {
        if self.reason != BreakReason::MessageEdited {
            return;
        }
        let (Ok(before), Ok(now)) = (
            serde_json::from_slice::<serde_json::Value>(before),
            serde_json::from_slice::<serde_json::Value>(now),
        ) else {
            return;
        };
        let (a, had) = without_thinking(&before);
        let (b, has) = without_thinking(&now);
        if had > has
            && crate::providers::cache_key::message_key(&a)
                == crate::providers::cache_key::message_key(&b)
        {
            self.reason = BreakReason::ThinkingDropped;
            let at = self.message_index.unwrap_or(0);
            self.detail = format!("message {at} lost its thinking blocks");
            self.blame = Some(super::blame::Blame {
                who: super::blame::Who::Client,
                what: format!("message {at} sent without its thinking blocks"),
                transformer: None,
                op: None,
            });
        }
    }

    /// An OpenAI miss left `unexplained` becomes `rate_overflow` when more requests took its
    /// route (prompt start and `prompt_cache_key`, see [`super::overflow`]) in the minute
    /// ending with it than the provider serves from one machine. `route_requests` counts
    /// them, this one included.
    pub fn refine_overflow(&mut self, route_requests: usize) {
        use crate::cache_model::{OVERFLOW_PER_MINUTE, RATE_WINDOW_MS};
        if self.reason != BreakReason::Unexplained || route_requests <= OVERFLOW_PER_MINUTE {
            return;
        }
        self.reason = BreakReason::RateOverflow;
        self.blame = Some(super::blame::Blame::of_reason(self));
        self.detail = format!(
            "{route_requests} requests with this prompt start and prompt_cache_key in {} s; past about {OVERFLOW_PER_MINUTE} a minute on one route, the provider sends some to machines that have not cached it",
            RATE_WINDOW_MS / 1000
        );
    }
}

/// Whether the message `now` is `before` with content blocks appended after its own
/// (markers aside): a client that adds its next words to the last message instead of
/// sending a message of its own, as Claude Code's `/compact` appends its summary prompt to
/// the last tool result's message. The provider keys its cache on blocks, so such a
/// prompt still extends the previous one.
pub fn appends_blocks(before: &[u8], now: &[u8]) -> bool {
    let (Ok(before), Ok(now)) = (
        serde_json::from_slice::<serde_json::Value>(before),
        serde_json::from_slice::<serde_json::Value>(now),
    ) else {
        return false;
    };
    let blocks = |m: &serde_json::Value| match m.get("content") {
        Some(serde_json::Value::String(text)) => {
            vec![serde_json::json!({"type": "text", "text": text})]
        }
        Some(serde_json::Value::Array(blocks)) => blocks.clone(),
        _ => Vec::new(),
    };
    let (had, has) = (blocks(&before), blocks(&now));
    if before.get("role") != now.get("role") || had.is_empty() || has.len() <= had.len() {
        return false;
    }
    let key = |blocks: &[serde_json::Value]| {
        crate::providers::cache_key::message_key(
            &serde_json::json!({"role": now.get("role"), "content": blocks}),
        )
    };
    key(&had) == key(&has[..had.len()])
}

impl Diagnosis {
    /// For a `message_edited` at the last message of the previous request's history that
    /// only had blocks appended ([`appends_blocks`]; `before` and `now` are that message's
    /// JSON in the previous and this request): the diagnosis of this request as the
    /// extension it is to the provider. `None` when the edit is another.
    pub fn as_appended(
        &self,
        prev: &Previous<'_>,
        cur: &Current<'_>,
        tokens_through: &dyn Fn(u32) -> u64,
        (before, now): (&[u8], &[u8]),
    ) -> Option<Option<Diagnosis>> {
        let at = self.message_index?;
        let appended = self.reason == BreakReason::MessageEdited
            && at + 1 == prev.shape.messages.len()
            && appends_blocks(before, now);
        if !appended {
            return None;
        }
        let mut grown = prev.shape.clone();
        grown.messages[at] = *cur.shape.messages.get(at)?;
        let prev = Previous {
            shape: &grown,
            ..prev.clone()
        };
        Some(diagnose(&prev, cur, tokens_through))
    }
}

/// A message without its thinking blocks, and how many it had.
fn without_thinking(message: &serde_json::Value) -> (serde_json::Value, usize) {
    let mut out = message.clone();
    let mut removed = 0;
    if let Some(blocks) = out.get_mut("content").and_then(|c| c.as_array_mut()) {
        blocks.retain(|b| {
            let thinking = (b.get("type").and_then(|t| t.as_str()))
                .is_some_and(crate::providers::anthropic::is_thinking_block);
            removed += usize::from(thinking);
            !thinking
        });
    }
    (out, removed)
}
