//! Finish: once the response body has ended, count the request in metrics and hand its
//! trace record to the recorder; then, in a task of its own (never delaying the client),
//! run `context(turn_end)` handlers with the assembled assistant message (their patches
//! persisted) and write the request's entry in the session log, with the prefix-break
//! diagnosis against the previous request of its lane.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::handlers::Shaping;
use super::history::HistoryMap;
use super::shape::Shaped;
use super::{Pipeline, RequestCtx};
use crate::envelope::Envelope;
use crate::measure::PromptShape;
use crate::policy::{ContextReason, TemplateVars};
use crate::providers::Route;
use crate::replay::trace::Record;
use crate::session::{self, Entry, RequestDraft, SessionContext};
use crate::tap::{Outcome, TapResult};

/// What is left to do once the response has ended.
pub enum After {
    /// Nothing: not a generation request, or neither a policy nor monitoring applies.
    Nothing,
    /// Monitoring only: the request went out as the client sent it; its session entry and
    /// diagnosis are computed from those bytes.
    Observe,
    /// A shaped request: its session, envelope and handlers.
    Shaped(Box<ShapedAfter>),
}

/// What shaping hands over to the end of the response.
pub struct ShapedAfter {
    pub ctx: SessionContext,
    pub env: Envelope,
    pub map: HistoryMap,
    pub vars: TemplateVars,
    pub policy_names: Vec<String>,
    /// Messages of the request-only tail at the end of what was sent.
    pub uncached_tail: usize,
    /// Every patch of the request so far, for the session log.
    pub patches: Vec<session::PatchEvent>,
    pub variant: Option<String>,
    /// A `context(turn_end)` handler or hook will want the assistant message.
    pub wants_assistant: bool,
}

impl Pipeline {
    /// The response body ended: metrics and the trace record now, the rest in a task.
    pub(super) fn finish(
        self: Arc<Self>,
        mut ctx: RequestCtx,
        shaped: Shaped,
        trace: Option<Record>,
        status: u16,
        sent: Instant,
        result: TapResult,
    ) {
        // An unchecked body leaves the model to the response.
        let model = match (&result.model, ctx.model.as_str()) {
            (Some(answered), "unknown") => answered.clone(),
            _ => ctx.model.clone(),
        };
        self.count_finished(ctx.route, &model, &shaped.variant, status, sent, &result);
        ctx.telemetry.take().finish(crate::telemetry::Finished {
            status,
            outcome: result.outcome.label(),
            usage: result.usage.as_ref(),
            response_model: result.model.as_deref(),
        });
        if let (Some(recorder), Some(mut record)) = (&self.recorder, trace) {
            record.usage = result.usage;
            record.status = Some(status);
            recorder.record(record);
        }
        if matches!(shaped.after, After::Nothing) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    self.after_response(ctx, model, shaped, result, status)
                        .await
                });
            }
            Err(_) => {
                tracing::warn!("response ended outside the runtime; session entry not recorded")
            }
        }
    }

    fn count_finished(
        &self,
        route: Route,
        model: &str,
        variant: &str,
        status: u16,
        sent: Instant,
        result: &TapResult,
    ) {
        let metrics = &self.metrics;
        let labels = [route.provider.label(), route.endpoint.label()];
        metrics
            .route(route.provider, route.endpoint)
            .total
            .observe(sent.elapsed().as_secs_f64());
        if result.outcome != Outcome::Complete {
            metrics
                .stream_errors
                .with_label_values(&[labels[0], labels[1], result.outcome.label()])
                .inc();
        }
        let status_label = http::StatusCode::from_u16(status)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| status.to_string());
        metrics.record_request(
            route.provider,
            route.endpoint,
            model,
            &status_label,
            variant,
            result.usage.as_ref(),
        );
    }

    /// Off the request path: `context(turn_end)`, then the session log entry.
    async fn after_response(
        self: Arc<Self>,
        ctx: RequestCtx,
        model: String,
        shaped: Shaped,
        result: TapResult,
        status: u16,
    ) {
        let usage = result.usage;
        let complete = result.outcome == Outcome::Complete && (200..300).contains(&status);
        let mut patches = Vec::new();
        let (session_ctx, uncached_tail, variant, turn_index) = match shaped.after {
            After::Nothing => return,
            After::Observe => {
                // A body that does not parse went out unchecked; the provider answered it.
                let (Ok(value), Ok(env)) = (
                    serde_json::from_slice::<Value>(&ctx.body),
                    Envelope::parse(ctx.route.provider, ctx.route.endpoint, ctx.body.clone()),
                ) else {
                    return;
                };
                let history = session::PrefixHashes::of_raw(env.history_raw());
                let id = self
                    .identify(&ctx.parts.headers, &value, ctx.route, &history)
                    .await;
                let Some(store) = &self.store else { return };
                let session_ctx = match session::prepare(store.as_ref(), id, history).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = self.store_failed("load", &e);
                        return;
                    }
                };
                (session_ctx, 0, None, env.turn_index())
            }
            After::Shaped(mut after) => {
                // A turn_end handler sees only a complete answer: a cut or abandoned stream
                // would hand it a partial message, and its patches would be persisted.
                if after.wants_assistant && complete {
                    if let Some(assistant) = ctx
                        .route
                        .endpoint
                        .assistant_message(result.json_body.as_deref(), &result.kept_events)
                    {
                        self.turn_end(&mut after, &assistant, usage).await;
                    }
                }
                patches = std::mem::take(&mut after.patches);
                let turn = after.vars.turn_index;
                (after.ctx, after.uncached_tail, after.variant, turn)
            }
        };
        let Some(store) = self.store.clone() else {
            return;
        };
        let sent = match Envelope::parse(ctx.route.provider, ctx.route.endpoint, shaped.body) {
            Ok(env) => env,
            Err(e) => {
                // Only a body sent unchecked gets here; the provider has answered it.
                tracing::debug!("request not recorded: {}", e.message);
                return;
            }
        };
        let shape = PromptShape::of(&sent, uncached_tail);
        // One session's entries are written one at a time, each against the log as it is
        // then: an agent sends its next request as soon as the previous answer ends, before
        // that answer's entry may be written, and must still be compared with it.
        let lock = self
            .session_locks
            .get_with(session_ctx.id.id.clone(), async { Default::default() })
            .await;
        let _writing = lock.lock().await;
        let log = match store.load(&session_ctx.id.id).await {
            Ok(log) => log,
            Err(e) => {
                let _ = self.store_failed("load", &e);
                session_ctx.log.clone()
            }
        };
        let log = &log;
        let lane =
            session::lanes::assign(&session::lanes::heads_of(log), &shape, &session_ctx.history);
        let answered = usage.filter(|_| (200..300).contains(&status));
        let previous = session::lanes::previous_answered(log, lane);
        let diagnosis = match (previous, answered) {
            (Some(prev), Some(usage)) => {
                let session = session_ctx.id.id.as_str();
                self.diagnose(store.as_ref(), session, log, prev, &shape, &sent, usage)
                    .await
            }
            _ => None,
        };
        if let Some(d) = &diagnosis {
            self.metrics
                .count_prefix_break(ctx.route.provider, d.section, d.reason);
        }
        let history: Vec<&[u8]> = sent.history_raw().take(shape.messages.len()).collect();
        let draft = RequestDraft {
            request_index: session_ctx.request_index,
            turn_index: Some(turn_index),
            provider: ctx.route.provider.label(),
            endpoint: ctx.route.endpoint.label(),
            client: Some(ctx.client.label()),
            shape: &shape,
            history: &history,
            usage,
            status: Some(status),
            lane,
            conversation: session::lanes::Conversation::of(&session_ctx.history),
            diagnosis,
            patches,
            variant,
            response_id: result.response_id.clone(),
        };
        let _ = model;
        let (record, blobs) = session::compact_request(log, &draft);
        let written = store
            .record(&session_ctx.id.id, &Entry::Request(record), &blobs)
            .await;
        match written {
            Ok(()) => self.remember_history(&session_ctx).await,
            // The response is already with the client; only the timeline loses an entry.
            Err(e) => {
                let _ = self.store_failed("record", &e);
            }
        }
    }

    /// The diagnosis of a request against the previous request of its lane.
    #[allow(clippy::too_many_arguments)]
    async fn diagnose(
        &self,
        store: &dyn session::SessionStore,
        session: &str,
        log: &session::SessionLog,
        prev: &session::RequestRecord,
        shape: &PromptShape,
        sent: &Envelope,
        usage: crate::usage::Usage,
    ) -> Option<crate::measure::Diagnosis> {
        let prev_shape = previous_shape(store, session, log, prev, shape).await;
        let min_tokens = crate::measure::breaks::min_tokens(&shape.model);
        let previous = crate::measure::Previous {
            shape: &prev_shape,
            usage: prev.usage.unwrap_or_default(),
            time_ms: prev.time,
        };
        let current = crate::measure::breaks::Current {
            shape,
            usage,
            time_ms: session::now_ms(),
            min_tokens,
            thinking_stripped_from: None,
        };
        let mut diagnosis = crate::measure::diagnose(&previous, &current, &|block| {
            crate::measure::shape::tokens_through(sent, block)
        })?;
        // A message that differs only by the thinking blocks it lost is a dropped thought,
        // not an edit.
        if diagnosis.reason == crate::measure::BreakReason::MessageEdited {
            let at = diagnosis.message_index.unwrap_or(0);
            if let (Some(key), Some(now)) =
                (prev_shape.messages.get(at), sent.history_raw().nth(at))
            {
                if let Ok(found) = store.get_blobs(session, std::slice::from_ref(key)).await {
                    if let Some(Some(before)) = found.first() {
                        diagnosis.refine_thinking(before, now);
                    }
                }
            }
        }
        Some(diagnosis)
    }

    async fn turn_end(
        &self,
        after: &mut ShapedAfter,
        assistant: &Value,
        usage: Option<crate::usage::Usage>,
    ) {
        let facts_policies: Vec<_> = self
            .policies
            .iter()
            .filter(|p| after.policy_names.contains(&p.name))
            .collect();
        let usage_json = serde_json::to_value(usage.unwrap_or_default()).unwrap_or(Value::Null);
        let mut shaping = Shaping {
            env: &mut after.env,
            map: &mut after.map,
            events: Vec::new(),
        };
        let persisted = match self
            .run_context(
                &facts_policies,
                ContextReason::TurnEnd,
                &mut shaping,
                &after.vars,
                Some((assistant, &usage_json)),
            )
            .await
        {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(session = %after.ctx.id.id, "turn_end handlers failed: {}", e.message);
                after.patches.append(&mut shaping.events);
                return;
            }
        };
        after.patches.append(&mut shaping.events);
        if let Err(e) = self
            .persist(&after.ctx, ContextReason::TurnEnd, persisted)
            .await
        {
            tracing::warn!("turn_end patches not persisted: {}", e.message);
        }
    }
}

/// The previous request's shape, rebuilt from its log entry (the tool and system lists are
/// read from the store only when they differ from this request's).
async fn previous_shape(
    store: &dyn session::SessionStore,
    session: &str,
    log: &session::SessionLog,
    prev: &session::RequestRecord,
    current: &PromptShape,
) -> PromptShape {
    let decode = |k: &Option<String>| k.as_deref().and_then(session::record::decode_key);
    let tools_key = decode(&prev.tools_key);
    let system_key = decode(&prev.system_key);
    let list = |key: Option<session::MessageKey>, same: bool, mine: &Vec<crate::measure::Named>| {
        let mine = mine.clone();
        async move {
            if same {
                return mine;
            }
            let Some(key) = key else { return Vec::new() };
            match store.get_blobs(session, &[key]).await {
                Ok(found) => found
                    .into_iter()
                    .flatten()
                    .next()
                    .and_then(|b| session::record::named_list(&b))
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            }
        }
    };
    let tools = list(tools_key, tools_key == current.tools_key, &current.tools).await;
    let system = list(
        system_key,
        system_key == current.system_key,
        &current.system,
    )
    .await;
    PromptShape {
        endpoint: current.endpoint,
        model: prev.model.clone(),
        tools,
        tools_key,
        system,
        system_key,
        messages: session::sent_keys(log, prev.request_index).unwrap_or_default(),
        tail: prev
            .tail
            .iter()
            .filter_map(|k| session::record::decode_key(k))
            .collect(),
        marks: prev.marks.clone(),
    }
}
