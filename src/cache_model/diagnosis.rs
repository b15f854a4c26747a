//! Anthropic's cache diagnostics (beta `cache-diagnosis-2026-04-07`,
//! platform.claude.com/docs/en/build-with-claude/cache-diagnostics): the API keeps a
//! fingerprint of each request, keyed by its response id; a later request naming that id
//! in `diagnostics.previous_message_id` gets the first point where the two prompts diverge:
//! `model_changed`, `tools_changed`, `system_changed` or `messages_changed`, each with
//! `cache_missed_input_tokens` ("approximate number of input tokens that would have been
//! read from cache had the prefix matched the previous request", anthropic-sdk-python
//! `BetaCacheMiss*`), or `previous_message_not_found` / `unavailable`.
//!
//! A fingerprint holds only prefix keys and token counts, computed on the same flattened
//! prompt the cache accounting uses (markers, `"X"` ≡ one text block, the billing header
//! and dropped thinking blocks all as the cache sees them).

use serde_json::{json, Value};

use super::anthropic_prompt::{flatten, Level};
use super::hash::PrefixHash;
use crate::error::ApiError;

/// What is kept of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    model: String,
    /// Served in fast mode: its keys are the fast cache's.
    fast: bool,
    /// Cumulative key at the end of the tools and of the system blocks (`None`: none).
    tools_end: Option<PrefixHash>,
    system_end: Option<PrefixHash>,
    /// Every block: its cumulative key and tokens.
    blocks: Vec<(PrefixHash, u64)>,
    /// Tokens up to the request's last marker (its whole prompt without one): what the
    /// next request would read had its prefix matched.
    cacheable_tokens: u64,
}

/// Why the prefix of the previous request could not be reused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheMissReason {
    ModelChanged { missed: u64 },
    ToolsChanged { missed: u64 },
    SystemChanged { missed: u64 },
    MessagesChanged { missed: u64 },
    PreviousMessageNotFound,
    Unavailable,
}

impl CacheMissReason {
    /// The `cache_miss_reason` object of the response.
    pub fn to_json(&self) -> Value {
        let with_tokens =
            |kind: &str, missed: u64| json!({"type": kind, "cache_missed_input_tokens": missed});
        match *self {
            CacheMissReason::ModelChanged { missed } => with_tokens("model_changed", missed),
            CacheMissReason::ToolsChanged { missed } => with_tokens("tools_changed", missed),
            CacheMissReason::SystemChanged { missed } => with_tokens("system_changed", missed),
            CacheMissReason::MessagesChanged { missed } => with_tokens("messages_changed", missed),
            CacheMissReason::PreviousMessageNotFound => {
                json!({"type": "previous_message_not_found"})
            }
            CacheMissReason::Unavailable => json!({"type": "unavailable"}),
        }
    }
}

/// The response's `diagnostics` object; a `null` reason means no divergence (or no
/// previous message named).
pub fn diagnostics_json(reason: Option<&CacheMissReason>) -> Value {
    json!({"cache_miss_reason": reason.map(CacheMissReason::to_json)})
}

impl Fingerprint {
    /// The fingerprint of a Messages request (errors are the request's own 400s).
    pub fn of(request: &Value) -> Result<Fingerprint, ApiError> {
        let prompt = flatten(request)?;
        let last_of = |level: Level| {
            prompt
                .blocks
                .iter()
                .rev()
                .find(|b| b.level == level)
                .map(|b| b.key)
        };
        let last_marker = prompt
            .blocks
            .iter()
            .rposition(|b| b.marker.is_some())
            .or_else(|| prompt.automatic.and(prompt.blocks.len().checked_sub(1)));
        Ok(Fingerprint {
            model: prompt.model.clone(),
            fast: prompt.fast,
            tools_end: last_of(Level::Tools),
            system_end: last_of(Level::System),
            blocks: prompt
                .blocks
                .iter()
                .map(|b| (b.key, b.cumulative_tokens))
                .collect(),
            cacheable_tokens: last_marker.map_or(prompt.keyed_tokens(), |i| {
                prompt.blocks[i].cumulative_tokens
            }),
        })
    }

    /// The first divergence of `self` (the new request) from `previous`, or `None` when the
    /// new prompt extends the previous one's cacheable prefix.
    pub fn diverges_from(&self, previous: &Fingerprint) -> Option<CacheMissReason> {
        let cacheable = previous.cacheable_tokens;
        // Blocks of the previous prompt up to its cacheable point.
        let wanted = previous
            .blocks
            .iter()
            .take_while(|(_, cum)| *cum <= cacheable)
            .count();
        let common = previous
            .blocks
            .iter()
            .zip(&self.blocks)
            .take(wanted)
            .take_while(|(a, b)| a.0 == b.0)
            .count();
        let missed =
            cacheable.saturating_sub(common.checked_sub(1).map_or(0, |i| previous.blocks[i].1));
        if self.model != previous.model {
            return Some(CacheMissReason::ModelChanged { missed: cacheable });
        }
        // The documented reasons name no speed switch, and the keys of the two speeds'
        // caches never match: no comparison to give.
        if self.fast != previous.fast {
            return Some(CacheMissReason::Unavailable);
        }
        if self.tools_end != previous.tools_end {
            return Some(CacheMissReason::ToolsChanged { missed });
        }
        if self.system_end != previous.system_end {
            return Some(CacheMissReason::SystemChanged { missed });
        }
        if common < wanted {
            return Some(CacheMissReason::MessagesChanged { missed });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(model: &str, tools: &str, system: &str, messages: Value) -> Value {
        json!({"model": model, "max_tokens": 8,
            "tools": [{"name": "read", "description": tools, "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": messages})
    }

    fn turn(n: usize) -> Value {
        let mut m = Vec::new();
        for i in 0..n {
            m.push(json!({"role": "user", "content": format!("question {i} ").repeat(50)}));
            m.push(json!({"role": "assistant", "content": format!("answer {i} ").repeat(50)}));
        }
        m.push(
            json!({"role": "user", "content": [{"type": "text", "text": "next",
            "cache_control": {"type": "ephemeral"}}]}),
        );
        Value::Array(m)
    }

    /// The vocabulary and order of anthropic-sdk-python's `BetaCacheMiss*` types, checked in
    /// the documented order: model, tools, system, messages.
    #[test]
    fn each_section_change_is_named_and_growth_is_not_a_miss() {
        let base = Fingerprint::of(&req("claude-opus-5-5", "t", "s", turn(2))).unwrap();
        let mut appended = turn(2);
        let list = appended.as_array_mut().unwrap();
        list.push(json!({"role": "assistant", "content": "done"}));
        list.push(json!({"role": "user", "content": "and then?"}));
        let grown = Fingerprint::of(&req("claude-opus-5-5", "t", "s", appended)).unwrap();
        assert_eq!(grown.diverges_from(&base), None);
        let cases = [
            (req("claude-sonnet-4-5", "t", "s", turn(3)), "model_changed"),
            (req("claude-opus-5-5", "T", "s", turn(3)), "tools_changed"),
            (req("claude-opus-5-5", "t", "S", turn(3)), "system_changed"),
        ];
        for (request, kind) in cases {
            let reason = Fingerprint::of(&request)
                .unwrap()
                .diverges_from(&base)
                .unwrap();
            let j = reason.to_json();
            assert_eq!(j["type"], kind);
            let missed = j["cache_missed_input_tokens"].as_u64().unwrap();
            if kind == "system_changed" {
                // The tools still match: only what follows them is missed.
                assert!(missed > 0 && missed < base.cacheable_tokens);
            } else {
                assert_eq!(missed, base.cacheable_tokens, "{kind}");
            }
        }
        let mut edited = turn(3);
        edited[2]["content"] = json!("an edited question");
        let reason = Fingerprint::of(&req("claude-opus-5-5", "t", "s", edited))
            .unwrap()
            .diverges_from(&base)
            .unwrap();
        let CacheMissReason::MessagesChanged { missed } = reason else {
            panic!("{reason:?}")
        };
        assert!(missed > 0 && missed < base.cacheable_tokens);
    }
}
