//! Holding `move_lines` (`when = "changed"`, the `stabilize-volatile` policy): the session
//! records, as persisted patches of reason `hold`, the system parts its cached prefix
//! holds; such a patch is never replayed as a patch (a policy taken away leaves the
//! client's text as it is) but read by the handler that made it, which puts the held lines
//! back while the prefix is warm and moves the client's new lines to the uncached tail.

use super::handlers::{Patching, Persisted};
use super::Pipeline;
use crate::envelope::Envelope;
use crate::error::ApiError;
use crate::patch::{HandlerResult, Op};
use crate::policy::{ContextHandler, ContextReason, Held, MoveLines};
use crate::session::entry::HOLD_REASON;
use crate::session::{ContextTransform, PatchEvent, PatchOutcome, SessionLog};

/// What the session's holding handlers hold, by transformer, and whether the prefix that
/// holds it can still be read.
#[derive(Debug, Default)]
pub struct Holding {
    by_transformer: Vec<(String, Vec<(String, String)>)>,
    warm: bool,
}

impl Holding {
    /// Whether the prefix holds parts and can still be read.
    pub fn is_warm(&self) -> bool {
        self.warm && !self.by_transformer.is_empty()
    }

    /// The request cannot read the prefix that holds the parts (see [`reads_held_prefix`]):
    /// holding them would buy nothing.
    pub fn unread(&mut self) {
        self.warm = false;
    }
}

impl Holding {
    /// From the session's `hold` patches that apply to this request's history, in log
    /// order (the latest text of each part wins).
    pub fn of<'a>(transforms: impl Iterator<Item = &'a ContextTransform>, warm: bool) -> Holding {
        let mut holding = Holding {
            warm,
            ..Holding::default()
        };
        for t in transforms.filter(|t| is_hold(t)) {
            let parts = holding.parts_mut(&t.transformer);
            for op in &t.patch {
                if let Op::SystemPartSet {
                    part_name, text, ..
                } = op
                {
                    parts.retain(|(name, _)| name != part_name);
                    parts.push((part_name.clone(), text.clone()));
                }
            }
        }
        holding
    }

    fn parts(&self, transformer: &str) -> &[(String, String)] {
        self.by_transformer
            .iter()
            .find(|(t, _)| t == transformer)
            .map_or(&[], |(_, parts)| parts.as_slice())
    }

    fn parts_mut(&mut self, transformer: &str) -> &mut Vec<(String, String)> {
        let at = match self
            .by_transformer
            .iter()
            .position(|(t, _)| t == transformer)
        {
            Some(at) => at,
            None => {
                self.by_transformer
                    .push((transformer.to_string(), Vec::new()));
                self.by_transformer.len() - 1
            }
        };
        &mut self.by_transformer[at].1
    }
}

/// Whether a persisted patch records what a holding handler holds.
pub fn is_hold(t: &ContextTransform) -> bool {
    t.reason == HOLD_REASON
}

/// Whether the session's cached prefix may still be read at `now_ms`: its latest request's
/// longest marker lifetime has not run out since (5 minutes without markers, as OpenAI's
/// automatic cache keeps a prefix at least), or a keep-warm planned after it keeps it an
/// hour longer. A request is recorded once answered, so the latest hold (`held`, made
/// while shaping a request) counts as a request of 5 minutes' lifetime.
pub fn prefix_warm(log: &SessionLog, held: &[&ContextTransform], now_ms: u64) -> bool {
    let five = crate::envelope::Ttl::FiveMinutes.seconds() * 1000;
    let recorded = log.latest_requests().next().map(|latest| {
        let marked = latest.marks.iter().map(|m| m.ttl.seconds() * 1000).max();
        let kept = latest
            .ttl_decision
            .as_ref()
            .and_then(|d| d.keep_warm_after_secs)
            .map(|after| (after + crate::envelope::Ttl::OneHour.seconds()) * 1000);
        let lifetime = marked.into_iter().chain(kept).max().unwrap_or(five);
        latest.time.saturating_add(lifetime)
    });
    let holding = held.iter().map(|t| t.time.saturating_add(five)).max();
    recorded
        .into_iter()
        .chain(holding)
        .any(|until| now_ms < until)
}

/// Whether this request can read the system prompt the session's cached prefix holds,
/// as the provider's cache would. OpenAI reads the longest prefix it shares with the
/// previous prompt, wherever it ends: always, while warm. Anthropic reads at markers:
/// through one on the tools or the system prompt, when they reach the model's minimum
/// cacheable length; or through its history, when the marker on its last message reaches
/// back to the end of the previous request of its conversation within the lookback (to the
/// end of what the provider still sees as that request sent it, when it drops thinking
/// that request kept), or `auto` markers (`auto_markers`) put one there. Held lines that no
/// marker reads only cost their tail.
pub fn reads_held_prefix(env: &Envelope, auto_markers: bool) -> bool {
    if env.endpoint().read_as() != crate::route::Endpoint::Messages {
        return true;
    }
    (!env.prefix_marks(0).is_empty() && long_enough(env, 0))
        || reached_back(env, auto_markers).is_some_and(|from| long_enough(env, from))
}

/// Whether the tools, the system prompt and the first `messages` history messages reach
/// the model's minimum cacheable length (counted only when the bytes leave it open).
fn long_enough(env: &Envelope, messages: usize) -> bool {
    let min = crate::models::lookup(&env.meta.model)
        .map_or(crate::measure::breaks::DEFAULT_MIN_TOKENS, |m| {
            m.min_cacheable_tokens
        });
    let mut prefix: Vec<u8> = env.tools_raw().flatten().copied().collect();
    prefix.extend_from_slice(env.system_compiled().as_bytes());
    for message in env.history_raw().take(messages) {
        if prefix.len() as u64 >= min * 8 {
            break;
        }
        prefix.extend_from_slice(message);
    }
    if prefix.len() as u64 >= min * 8 {
        return true;
    }
    static COUNTED: crate::memo::Memo<u64> = crate::memo::Memo::new(256);
    let tokens = COUNTED.get_or_insert_with(crate::memo::key(b"prefix tokens", &prefix), || {
        crate::tokens::count_up_to(&String::from_utf8_lossy(&prefix), min)
    });
    tokens >= min
}

/// How many history messages the request reads back to as the previous request of its
/// conversation stored them, when a marker reaches their end.
fn reached_back(env: &Envelope, auto_markers: bool) -> Option<usize> {
    let kinds = env.history_kinds();
    let model = kinds.iter().rposition(|k| k.from_model)?;
    let ended = kinds[..model].iter().rposition(|k| !k.from_model)?;
    let dropped = kept_history(env).filter(|&kept| kept <= ended);
    let from = dropped.unwrap_or(ended + 1);
    if auto_markers {
        return Some(from);
    }
    let prompt = crate::envelope::turns::last_prompt_start(&kinds).unwrap_or(kinds.len());
    let after: usize = env
        .history_blocks()
        .enumerate()
        .skip(from)
        .map(|(i, (blocks, thinking))| match dropped {
            Some(_) if i < prompt => blocks - thinking,
            _ => blocks,
        })
        .sum();
    (after < crate::providers::anthropic::LOOKBACK_BLOCKS).then_some(from)
}

/// A turn's first request, on a model that drops the previous turn's thinking: how many
/// history messages come before the first one dropped (what the previous turn's entries
/// still hold for this request). A tool loop's request drops nothing its previous one kept.
pub fn kept_history(env: &Envelope) -> Option<usize> {
    let kinds = env.history_kinds();
    let prompt = crate::envelope::turns::last_prompt_start(&kinds)?;
    if kinds[prompt..].iter().any(|k| k.from_model) {
        return None;
    }
    crate::measure::breaks::thinking_stripped_from(env)
}

impl Pipeline {
    /// Run one holding handler: the held lines back in place and the client's in the tail
    /// for this request only; what the prefix holds from now on, when that changed, to be
    /// persisted (the request goes with those texts as they are).
    pub(super) fn run_hold(
        &self,
        shaping: &mut Patching<'_>,
        handler: &ContextHandler,
        lines: &MoveLines,
    ) -> Result<Option<Persisted>, ApiError> {
        let parts = shaping.system_parts();
        let held = Held {
            parts: shaping.held.parts(&handler.transformer),
            warm: shaping.held.warm,
        };
        let ops = lines.hold_ops(&parts, held);
        if !ops.now.is_empty() {
            let result = HandlerResult {
                patch: ops.now,
                transformer_name: Some(handler.transformer.clone()),
                display: None,
            };
            self.apply_result(
                shaping,
                &result,
                &handler.transformer,
                ContextReason::Ephemeral,
            )?;
        }
        if ops.persist.is_empty() {
            return Ok(None);
        }
        // A record of what the prefix holds changes nothing: no cache is invalidated.
        let mut event = PatchEvent::new(
            &handler.transformer,
            HOLD_REASON,
            PatchOutcome::Persisted,
            &ops.persist,
        );
        event.invalidate.clear();
        shaping.events.push(event);
        Ok(Some(Persisted {
            transformer: handler.transformer.clone(),
            ops: ops.persist,
            display: None,
            hold: true,
        }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::reads_held_prefix;
    use crate::envelope::Envelope;
    use crate::route::Endpoint;

    /// pi on Sonnet 4.5: a short system prompt (below the 1024-token minimum with the
    /// tools), marked; a first turn of `steps` tool calls, each with a thinking block when
    /// `thinking`; then the next turn's prompt.
    fn next_turn(system: &str, steps: usize, thinking: bool) -> Envelope {
        let mut messages = vec![
            json!({"role": "user", "content": [{"type": "text", "text": "Look at the code. ".repeat(300)}]}),
        ];
        for i in 0..steps {
            let mut content = vec![
                json!({"type": "tool_use", "id": format!("t{i}"), "name": "read", "input": {}}),
            ];
            if thinking {
                content.insert(
                    0,
                    json!({"type": "thinking", "thinking": "Next.", "signature": "s"}),
                );
            }
            messages.push(json!({"role": "assistant", "content": content}));
            messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": "fn f() {}"}]}));
        }
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}));
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": "Go on.", "cache_control": {"type": "ephemeral"}}]}));
        let mut body = json!({"model": "claude-sonnet-4-5", "max_tokens": 8192,
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": messages});
        if thinking {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": 4096});
        }
        crate::providers::parse_envelope(
            Endpoint::Messages,
            bytes::Bytes::from(serde_json::to_vec(&body).unwrap()),
        )
        .unwrap()
    }

    /// Held lines are put back only where the request reads them: a long marked system
    /// prompt always; otherwise through the history, when the marker on the last message
    /// reaches back to what the previous turn stored, or `auto` markers bridge to it.
    #[test]
    fn a_held_prefix_is_read_through_the_head_or_a_history_that_reaches_back() {
        let long = "Rules of the house. ".repeat(1000);
        assert!(reads_held_prefix(&next_turn(&long, 14, true), false));
        let short = "You are pi.";
        // Eight steps: the previous turn's entry is within the lookback.
        assert!(reads_held_prefix(&next_turn(short, 8, false), false));
        // Fourteen with their thinking dropped: the kept history is out of reach of the
        // client's markers, in reach of a bridge of `auto` markers.
        assert!(!reads_held_prefix(&next_turn(short, 14, true), false));
        assert!(reads_held_prefix(&next_turn(short, 14, true), true));
        // Without thinking, the previous request's entry is two blocks back.
        assert!(reads_held_prefix(&next_turn(short, 14, false), false));
        let first: Value = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
            "system": [{"type": "text", "text": short, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}]});
        let first = crate::providers::parse_envelope(
            Endpoint::Messages,
            bytes::Bytes::from(serde_json::to_vec(&first).unwrap()),
        )
        .unwrap();
        assert!(
            !reads_held_prefix(&first, true),
            "nothing long enough to read"
        );
    }
}
