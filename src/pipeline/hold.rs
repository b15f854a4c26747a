//! Holding `move_lines` (`when = "changed"`, the `stabilize-volatile` policy): the session
//! records, as persisted patches of reason `hold`, the system parts its cached prefix
//! holds; such a patch is never replayed as a patch (a policy taken away leaves the
//! client's text as it is) but read by the handler that made it, which puts the held lines
//! back while the prefix is warm and moves the client's new lines to the uncached tail.

use super::handlers::{Patching, Persisted};
use super::Pipeline;
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
        let parts: Vec<(String, String)> = shaping
            .env
            .system_parts()
            .iter()
            .map(|p| (p.name.clone(), p.text.clone()))
            .collect();
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
