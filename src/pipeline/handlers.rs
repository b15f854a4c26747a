//! Running one hook point's handlers over the envelope: each policy's `[[context]]`
//! handlers in policy order, then the external hooks in the same order; each handler sees
//! the previous one's output. A refused patch is dropped whole (or fails the request in
//! strict mode); outcomes go to metrics.

use serde_json::Value;

use super::history::HistoryMap;
use super::Pipeline;
use crate::envelope::{Envelope, Payload};
use crate::error::{ApiError, ErrorKind};
use crate::hooks::HookOutcome;
use crate::patch::{HandlerResult, Op, PatchRefusal, Selector};
use crate::policy::{ContextReason, HookEvent, Policy, TemplateVars};
use crate::session::{PatchEvent, PatchOutcome};

/// A patch that was applied and is to be persisted: its ops with message positions
/// rewritten to client positions (see `history`).
#[derive(Debug, Clone)]
pub struct Persisted {
    pub transformer: String,
    pub ops: Vec<Op>,
    pub display: Option<Value>,
    /// A record of what the cached prefix holds (see `hold`), stored with reason `hold`.
    pub hold: bool,
}

/// The envelope being shaped, with the map from envelope to client positions and the
/// patch events for the session log.
pub struct Patching<'a> {
    pub env: &'a mut Envelope,
    pub map: &'a mut HistoryMap,
    pub events: Vec<PatchEvent>,
    /// What the session's holding handlers hold (empty outside `before_request`).
    pub held: super::hold::Holding,
}

impl Patching<'_> {
    /// The envelope's system parts, `(name, text)`, as built-in transforms read them.
    pub fn system_parts(&self) -> Vec<(String, String)> {
        self.env
            .system_parts()
            .iter()
            .map(|p| (p.name.clone(), p.text.clone()))
            .collect()
    }

    /// Apply ops one at a time (so each insert position is known), all or nothing: to a
    /// copy of the envelope, kept only when every op applied.
    /// Returns the ops with message positions as client positions.
    pub fn apply(
        &mut self,
        ops: &[Op],
        transformer: &str,
        turn_end: bool,
    ) -> Result<Vec<Op>, PatchRefusal> {
        let mut env = self.env.clone();
        let mut map = self.map.clone();
        let mut client_ops = Vec::with_capacity(ops.len());
        for op in ops {
            let insert_at = match op {
                Op::MessagesInsert { at, .. } => env.position_of(*at),
                _ => None,
            };
            env.apply_in_place(std::slice::from_ref(op), transformer)?;
            let mut stored = op.clone();
            if let (Op::MessagesInsert { at, .. }, Some(pos)) = (&mut stored, insert_at) {
                let client = map.client_index_at(pos);
                // `end` after a response means after the assistant message the client will
                // send back with its next request.
                let client = if turn_end && pos == map.len() {
                    client + 1
                } else {
                    client
                };
                *at = Selector::Index(client);
            }
            map.applied(op, insert_at);
            client_ops.push(stored);
        }
        *self.env = env;
        *self.map = map;
        Ok(client_ops)
    }

    /// Apply a stored patch whose message positions are client positions.
    pub fn replay(&mut self, ops: &[Op], transformer: &str) -> Result<(), PatchRefusal> {
        self.replay_all([(ops, transformer)])
    }

    /// Apply stored patches in order, all or nothing, on one copy of the envelope: a
    /// session that gathered a patch a turn (pinned memory) would otherwise copy its
    /// whole history once per patch on every request.
    pub fn replay_all<'p>(
        &mut self,
        patches: impl IntoIterator<Item = (&'p [Op], &'p str)>,
    ) -> Result<(), PatchRefusal> {
        let mut env = self.env.clone();
        let mut map = self.map.clone();
        for (ops, transformer) in patches {
            for op in ops {
                let mut live = op.clone();
                let mut insert_at = None;
                if let Op::MessagesInsert { at, .. } = &mut live {
                    if let Selector::Index(client) = *at {
                        let pos = map.position_of_client(client);
                        *at = Selector::Index(pos);
                        insert_at = Some(pos);
                    }
                }
                env.apply_in_place(std::slice::from_ref(&live), transformer)?;
                map.applied(&live, insert_at);
            }
        }
        *self.env = env;
        *self.map = map;
        Ok(())
    }
}

impl Pipeline {
    /// An applied patch: counted (cached-scope ops as invalidations with their reason) and
    /// logged for the session.
    pub(super) fn note_applied(
        &self,
        shaping: &mut Patching<'_>,
        transformer: &str,
        reason: &str,
        outcome: PatchOutcome,
        ops: &[Op],
    ) {
        shaping
            .events
            .push(PatchEvent::new(transformer, reason, outcome, ops));
        self.count_applied(transformer, ops);
    }

    /// A refused patch: counted, logged, and noted for the session.
    pub(super) fn note_refused(
        &self,
        shaping: &mut Patching<'_>,
        refusal: &PatchRefusal,
        reason: &str,
        ops: &[Op],
    ) {
        let mut event = PatchEvent::new(&refusal.transformer, reason, PatchOutcome::Refused, ops);
        event.error = Some(refusal.message.clone());
        PatchEvent::push_folded(&mut shaping.events, event);
        self.count_refused(refusal, ops);
    }

    fn count_applied(&self, transformer: &str, ops: &[Op]) {
        for op in ops {
            self.metrics
                .patches
                .with_label_values(&[transformer, op.name(), "applied"])
                .inc();
            if let Some(reason) = op
                .invalidate_cache_reason()
                .filter(|_| op.scope() == crate::patch::Scope::Cached)
            {
                self.metrics
                    .invalidations
                    .with_label_values(&[transformer, &bounded(reason)])
                    .inc();
            }
        }
    }

    fn count_refused(&self, refusal: &PatchRefusal, ops: &[Op]) {
        tracing::warn!(transformer = %refusal.transformer, reason = refusal.reason.label(), "{}", refusal.message);
        for op in ops {
            self.metrics
                .patches
                .with_label_values(&[&refusal.transformer, op.name(), "refused"])
                .inc();
        }
        if ops.is_empty() {
            self.metrics
                .patches
                .with_label_values(&[&refusal.transformer, "none", "refused"])
                .inc();
        }
    }

    /// Apply one handler's result; returns what to persist when it applied.
    pub(super) fn apply_result(
        &self,
        shaping: &mut Patching<'_>,
        result: &HandlerResult,
        default_name: &str,
        reason: ContextReason,
    ) -> Result<Option<Persisted>, ApiError> {
        let turn_end = reason == ContextReason::TurnEnd;
        if result.patch.is_empty() {
            return Ok(None);
        }
        let transformer = result
            .transformer_name
            .clone()
            .unwrap_or_else(|| default_name.to_string());
        match shaping.apply(&result.patch, &transformer, turn_end) {
            Ok(ops) => {
                let outcome = if crate::session::is_persisted_reason(reason.label()) {
                    PatchOutcome::Persisted
                } else {
                    PatchOutcome::Ephemeral
                };
                self.note_applied(
                    shaping,
                    &transformer,
                    reason.label(),
                    outcome,
                    &result.patch,
                );
                Ok(Some(Persisted {
                    transformer,
                    ops,
                    display: result
                        .display
                        .as_ref()
                        .and_then(|d| serde_json::to_value(d).ok()),
                    hold: false,
                }))
            }
            Err(refusal) => {
                self.note_refused(shaping, &refusal, reason.label(), &result.patch);
                if self.config.policies.strict {
                    return Err(refusal.to_api_error());
                }
                Ok(None)
            }
        }
    }

    /// Run every handler of `reason`: the policies' own, then their external hooks.
    pub(super) async fn run_context(
        &self,
        policies: &[&Policy],
        reason: ContextReason,
        shaping: &mut Patching<'_>,
        vars: &TemplateVars,
        response: Option<(&Value, &Value)>,
    ) -> Result<Vec<Persisted>, ApiError> {
        let mut persisted = Vec::new();
        for policy in policies {
            for handler in policy.context_for(reason) {
                if let Some(lines) = handler.holding() {
                    persisted.extend(self.run_hold(shaping, handler, lines)?);
                    continue;
                }
                let result = handler.result(&shaping.system_parts(), vars);
                persisted.extend(self.apply_result(
                    shaping,
                    &result,
                    &handler.transformer,
                    reason,
                )?);
            }
        }
        for policy in policies {
            for hook in policy.hooks_for(HookEvent::Context(reason)) {
                let envelope = shaping.env.to_json_bytes();
                let call = self
                    .hooks
                    .call_context(
                        hook,
                        reason,
                        &envelope,
                        response.map(|r| r.0),
                        response.map(|r| r.1),
                    )
                    .await;
                self.count_hook(&call);
                if let Some(message) = call.fail_closed() {
                    return Err(ApiError::new(ErrorKind::Internal, message.to_string()));
                }
                if let HookOutcome::Patch(result) = &call.outcome {
                    persisted.extend(self.apply_result(shaping, result, &hook.name, reason)?);
                }
            }
        }
        Ok(persisted)
    }

    pub(super) fn count_hook(&self, call: &crate::hooks::HookCall) {
        self.metrics
            .hook_duration
            .with_label_values(&[&call.hook])
            .observe(call.elapsed.as_secs_f64());
        if call.is_failure() {
            self.metrics
                .hook_failures
                .with_label_values(&[&call.hook])
                .inc();
        }
    }

    /// `before_provider_request`: payload edits, the session's prompt_cache_key, then hooks.
    pub(super) async fn run_payload(
        &self,
        policies: &[&Policy],
        payload: Payload,
        vars: &TemplateVars,
        route: crate::route::Route,
    ) -> Result<Payload, ApiError> {
        let edits: Vec<(&str, usize, &crate::policy::PayloadEdit)> = policies
            .iter()
            .flat_map(|p| {
                let name = p.name.as_str();
                p.payload.iter().enumerate().map(move |(i, e)| (name, i, e))
            })
            .collect();
        let hooks: Vec<_> = policies
            .iter()
            .flat_map(|p| p.hooks_for(HookEvent::BeforeProviderRequest))
            .collect();
        if edits.is_empty() && hooks.is_empty() {
            return Ok(payload);
        }
        // The edits work on the body's bytes: what they leave alone keeps its bytes
        // (DESIGN §2), and no `Value` of the body is built.
        let sent = payload.to_bytes();
        let mut body = sent.to_vec();
        // Each edit on its own: one that fails is left out (logged and counted, or the
        // request's failure in strict mode), and the next one still applies.
        for (policy, i, edit) in edits {
            let result = crate::policy::apply_payload_edit(&mut body, edit, vars);
            let outcome = if result.is_ok() { "applied" } else { "refused" };
            self.metrics
                .patches
                .with_label_values(&[policy, edit.name(), outcome])
                .inc();
            if let Err(e) = result {
                let e = format!("policy `{policy}` payload[{i}].{}: {e}", edit.name());
                tracing::warn!("payload edit skipped: {e}");
                if self.config.policies.strict {
                    return Err(ApiError::new(
                        ErrorKind::Internal,
                        format!("payload edit failed: {e}"),
                    ));
                }
            }
        }
        for hook in hooks {
            let call = self
                .hooks
                .call_before_provider_request(hook, route.provider, route.endpoint, &body)
                .await;
            self.count_hook(&call);
            if let Some(message) = call.fail_closed() {
                return Err(ApiError::new(ErrorKind::Internal, message.to_string()));
            }
            match call.outcome {
                HookOutcome::Payload(replacement) => {
                    body = crate::json_edit::splice(&body, &replacement);
                }
                HookOutcome::JsonPatch(patch) => {
                    if let Err(e) = crate::json_edit::patch(&mut body, &patch) {
                        self.metrics
                            .hook_failures
                            .with_label_values(&[&call.hook])
                            .inc();
                        tracing::warn!(hook = %call.hook, "json_patch from hook does not apply: {e}");
                    }
                }
                _ => {}
            }
        }
        // What the edits changed lies between the bytes they left at both ends: only that is
        // copied, and the rest goes out as the splice it was compiled into.
        let same_start = crate::known_prefix::common_prefix(&body, &sent);
        let same_end = crate::known_prefix::common_suffix(&body[same_start..], &sent[same_start..]);
        if same_start == body.len() && body.len() == sent.len() {
            return Ok(payload);
        }
        let changed = bytes::Bytes::copy_from_slice(&body[same_start..body.len() - same_end]);
        Ok(payload.replaced(same_start..sent.len() - same_end, changed))
    }
}

/// Invalidate reasons are free text from policies and hooks: keep the label bounded.
fn bounded(reason: &str) -> String {
    reason.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::CompileOptions;
    use crate::route::Endpoint;

    const BODY: &str = r#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"Base."}],"messages":[{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":"second"}],"max_tokens":100}"#;

    /// A patch whose first op applies and whose second is refused: the ops run one at a
    /// time on one copy of the envelope, and the refusal leaves the shaped envelope and its
    /// position map as they were, replayed or applied.
    #[test]
    fn a_refused_op_after_an_applied_one_leaves_the_envelope_as_it_was() {
        let ops = crate::patch::parse_ops(
            &serde_json::json!([
                {"op": "system_part_set", "partName": "memory", "text": "notes", "invalidateCacheReason": "new notes"},
                {"op": "tools_remove", "names": ["bash"]}
            ]),
            "t",
        )
        .unwrap();
        let mut env = crate::providers::parse_envelope(
            Endpoint::Messages,
            bytes::Bytes::from_static(BODY.as_bytes()),
        )
        .unwrap();
        let mut map = HistoryMap::new(env.history_len());
        let mut shaping = Patching {
            env: &mut env,
            map: &mut map,
            events: Vec::new(),
            held: Default::default(),
        };
        let refusal = shaping.replay(&ops, "t").unwrap_err();
        assert_eq!(refusal.op_index, Some(0), "each op is replayed on its own");
        assert!(shaping.apply(&ops, "t", false).is_err());
        assert!(!env.is_patched());
        assert_eq!(env.compile(&CompileOptions::default()), BODY.as_bytes());
        assert_eq!(map.len(), 3);
    }
}
