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
use super::identify::Continued;
use super::shape::Shaped;
use super::{Pipeline, RequestCtx};
use crate::envelope::Envelope;
use crate::measure::PromptShape;
use crate::policy::{ContextReason, TemplateVars};
use crate::providers::Route;
use crate::replay::trace::Record;
use crate::session::{self, Entry, RequestDraft, SessionContext};
use crate::tap::{Outcome, TapResult};

/// A request whose response has ended, queued for its session entry.
pub struct Finished {
    pub ctx: RequestCtx,
    /// The model as named (by the request, else the response).
    pub model: String,
    pub shaped: Shaped,
    pub result: TapResult,
    pub status: u16,
}

/// Which session a finished request belongs to.
pub struct Identified {
    pub session: session::SessionId,
    /// What identifying an observed request read of it; a shaped request's history and
    /// turn are in its [`ShapedAfter`] already.
    pub observed: Option<Observed>,
}

/// An observed request as it was read to identify it.
pub struct Observed {
    /// Prefix hashes of the client's history.
    pub history: session::PrefixHashes,
    pub turn_index: u64,
    /// A stateful request whose continued turn was not remembered (after a restart): its
    /// turn is counted again from the session's log once that is loaded.
    pub recount_turn: bool,
    /// The body as parsed: it went out as the client sent it, so the session record reads
    /// the same envelope instead of parsing the bytes again.
    pub sent: Envelope,
}

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
    /// The lane whose previous answer the provider's cache diagnostics were asked against.
    pub diagnosis_lane: Option<u32>,
    pub variant: Option<String>,
    /// A `context(turn_end)` handler or hook will want the assistant message.
    pub wants_assistant: bool,
    /// With `ttl = "auto"`: the lifetime chosen, for the session log (and keep-warm).
    pub ttl_decision: Option<crate::ttl::TtlDecision>,
    /// The number of the latest request to arrive (of any session) when the answer
    /// ended: a keep-warm stands down once its session sends a later one.
    pub arrived_by_answer: u64,
}

impl ShapedAfter {
    /// A keep-warm may follow this request's answer, this many seconds after it.
    pub fn keep_warm(&self) -> Option<u64> {
        self.ttl_decision.as_ref()?.keep_warm_after_secs
    }
}

impl Pipeline {
    /// The response body ended: metrics and the trace record now, the rest in a task.
    pub(super) fn finish(
        self: Arc<Self>,
        mut ctx: RequestCtx,
        mut shaped: Shaped,
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
        let key = ctx.key_label().to_string();
        self.count_finished(
            ctx.route,
            &model,
            &shaped.variant,
            &key,
            status,
            sent,
            &result,
        );
        ctx.telemetry.take().finish(crate::telemetry::Finished {
            status,
            outcome: result.outcome.label(),
            usage: result.usage.as_ref(),
            response_model: result.model.as_deref(),
        });
        if let (Some(recorder), Some(mut record)) = (&self.recorder, trace) {
            record.usage = result.usage;
            record.status = Some(status);
            record.response_id = result.response_id.clone();
            if record.may_be_continued() && (200..300).contains(&status) {
                record.output = ctx
                    .route
                    .endpoint
                    .assistant_message(result.json_body.as_deref(), &result.kept_events);
            }
            recorder.record(record);
        }
        if let After::Shaped(after) = &shaped.after {
            // Known before the client can send its next request: that request names this
            // answer in `previous_response_id`, or in its own diagnostics.
            let answer = result.response_id.as_deref();
            let turn = after.vars.turn_index;
            let session = &after.ctx.id.id;
            self.remember_answer(&after.env, answer, session, turn, ctx.namespace());
            if let (Some(lane), Some(id)) = (after.diagnosis_lane, answer) {
                let key = (after.ctx.id.id.clone(), lane);
                let ids = self.response_ids.clone();
                let id = id.to_string();
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move { ids.insert(key, id).await });
                }
            }
        }
        if matches!(shaped.after, After::Nothing) {
            return;
        }
        if let After::Shaped(after) = &mut shaped.after {
            // Counted now, before the client can send its next request; the keep-warm is
            // armed later, off the request path.
            if after.keep_warm().is_some() {
                after.arrived_by_answer = self.arrivals.latest();
            }
        }
        let job = Finished {
            ctx,
            model,
            shaped,
            result,
            status,
        };
        let queue = self
            .after_queue
            .get_or_init(|| super::queue::AfterQueue::start(Arc::downgrade(&self)));
        if !queue.submit(job) {
            self.metrics.session_records_dropped.inc();
            tracing::warn!("after-response queue full; the session log misses one request");
        }
    }

    /// Offline replay: the session-log entry of a request shaped with
    /// [`Pipeline::shape_request`], answered with `usage` at its recorded time, so that
    /// later requests of the replay see the session's log as they would live. No
    /// `context(turn_end)` handler runs and no keep-warm is armed: the answer itself is not
    /// known.
    pub async fn record_replayed(
        self: Arc<Self>,
        route: Route,
        headers: http::HeaderMap,
        body: bytes::Bytes,
        at_ms: u64,
        shaped: Shaped,
        usage: Option<crate::usage::Usage>,
    ) {
        let model = requested_model(&body);
        let ctx = super::shape::replayed_ctx(route, headers, body, &model, at_ms);
        let result = TapResult {
            usage,
            model: None,
            response_id: None,
            provider_diagnostics: None,
            outcome: Outcome::Complete,
            bytes: 0,
            events: 0,
            json_body: None,
            kept_events: Vec::new(),
        };
        let job = Finished {
            ctx,
            model,
            shaped,
            result,
            status: 200,
        };
        if let Some(identified) = self.identify_finished(&job).await {
            self.after_response(job, identified).await;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn count_finished(
        &self,
        route: Route,
        model: &str,
        variant: &str,
        key: &str,
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
        if result.usage.is_none() && route.endpoint.bills(status) {
            // Billed, but unmeasured: said in a series of its own rather than left out.
            metrics
                .usage_missing
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
            key,
            result.usage.as_ref(),
        );
    }

    /// The session of a finished request (in the order responses end): shaping knew it
    /// already; an observed request is identified now, from the bytes it went out with.
    pub(super) async fn identify_finished(&self, job: &Finished) -> Option<Identified> {
        let ctx = &job.ctx;
        match &job.shaped.after {
            After::Nothing => None,
            After::Shaped(after) => Some(Identified {
                session: after.ctx.id.clone(),
                observed: None,
            }),
            After::Observe => {
                super::queue::let_requests_in().await;
                let found = match ctx.checked {
                    true => ctx.known.clone(),
                    false => self.find_known(&ctx.body),
                };
                // A body that does not parse went out unchecked; the provider answered it.
                let (env, history) = self
                    .read_envelope(ctx.route, ctx.body.clone(), found.as_ref(), ctx.gathered())
                    .ok()?;
                super::queue::let_requests_in().await;
                let session = self
                    .identify(&ctx.parts.headers, &env, &history, ctx.namespace())
                    .await;
                // The turn as far as the remembered answers tell it (always, but after a
                // restart): what the next request in the chain counts from.
                let continued = self.continued_turn_index(&env, ctx.namespace(), None);
                let turn_index = continued.unwrap_or_else(|| env.turn_index());
                let answer = job.result.response_id.as_deref();
                self.remember_answer(&env, answer, &session.id, turn_index, ctx.namespace());
                let recount_turn = continued.is_none() && Continued::of(&env).is_some();
                Some(Identified {
                    session,
                    observed: Some(Observed {
                        history,
                        turn_index,
                        recount_turn,
                        sent: env,
                    }),
                })
            }
        }
    }

    /// Off the request path, in order per session: `context(turn_end)`, then the session
    /// log entry with its lane and diagnosis.
    pub(super) async fn after_response(self: &Arc<Self>, job: Finished, identified: Identified) {
        let mut parsed = None;
        // An unshaped request's session is loaded here, just before it is recorded.
        let loaded_now = matches!(job.shaped.after, After::Observe);
        let Finished {
            mut ctx,
            model,
            mut shaped,
            result,
            status,
        } = job;
        let usage = result.usage;
        let complete = result.outcome == Outcome::Complete && (200..300).contains(&status);
        let mut patches = Vec::new();
        let mut ttl_decision = None;
        // The body as sent, in one buffer: the splice that went upstream is pieced together
        // here, after the response, once for keep-warm and the session log alike, over the
        // client's body when nothing else holds it any more (the client's envelope is let go
        // of first).
        let mut sent_body: Option<bytes::Bytes> = None;
        let (session_ctx, uncached_tail, variant, turn_index) = match shaped.after {
            After::Nothing => return,
            After::Observe => {
                let (Some(store), Some(observed)) = (&self.store, identified.observed) else {
                    return;
                };
                let Observed {
                    history,
                    turn_index,
                    recount_turn,
                    sent,
                } = observed;
                let session = identified.session;
                let session_ctx = match session::observed(store.as_ref(), session, history).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = self.store_failed("load", &e);
                        return;
                    }
                };
                // After a restart, the continued answer's turn is in the log: this answer is
                // remembered again with the turn it gives.
                let counted = match recount_turn {
                    true => self
                        .continued_turn_index_in_log(&sent, &session_ctx.log)
                        .unwrap_or(turn_index),
                    false => turn_index,
                };
                if counted != turn_index {
                    let (answer, session) = (result.response_id.as_deref(), &session_ctx.id.id);
                    self.remember_answer(&sent, answer, session, counted, ctx.namespace());
                }
                let turn_index = counted;
                parsed = Some(sent);
                (session_ctx, 0, None, turn_index)
            }
            After::Shaped(mut after) => {
                // A turn_end handler sees only a complete answer: a cut or abandoned stream
                // would hand it a partial message, and its patches would be persisted.
                let assistant = (complete
                    && (after.wants_assistant || after.keep_warm().is_some()))
                .then(|| {
                    ctx.route
                        .endpoint
                        .assistant_message(result.json_body.as_deref(), &result.kept_events)
                })
                .flatten();
                if let (Some(assistant), true) = (&assistant, after.wants_assistant) {
                    self.turn_end(&mut after, assistant, usage).await;
                }
                let keep_warm = after.keep_warm();
                drop(after.env);
                crate::memory::release_after(ctx.body.len());
                if let (Some(assistant), Some(secs), None) =
                    (&assistant, keep_warm, ctx.replayed_at_ms)
                {
                    let id = after.ctx.id.id.clone();
                    let tail = after.uncached_tail;
                    let sent = sent_body
                        .get_or_insert_with(|| sent_in_one(&mut shaped.body, &mut ctx.body));
                    let arrived = after.arrived_by_answer;
                    self.arm_keep_warm(&ctx, &id, sent, tail, assistant, secs, arrived);
                }
                ttl_decision = after.ttl_decision.take();
                patches = std::mem::take(&mut after.patches);
                let turn = after.vars.turn_index;
                (after.ctx, after.uncached_tail, after.variant, turn)
            }
        };
        let Some(store) = self.store.clone() else {
            return;
        };
        // The history keys of what was sent: an observed request's are its session's; a
        // shaped body repeats the previous shaped body of its session, whose keys are kept.
        let sent = match parsed.map_or_else(
            || {
                let sent = sent_body
                    .take()
                    .unwrap_or_else(|| sent_in_one(&mut shaped.body, &mut ctx.body));
                let (env, history) = self.read_sent_envelope(ctx.route, sent)?;
                Ok::<_, crate::error::ApiError>((env, history.into_keys()))
            },
            |env| Ok((env, session_ctx.history.keys().to_vec())),
        ) {
            Ok(sent) => sent,
            Err(e) => {
                // Only a body sent unchecked gets here; the provider has answered it.
                tracing::debug!("request not recorded: {}", e.message);
                return;
            }
        };
        let (sent, keys) = sent;
        super::queue::let_requests_in().await;
        let shape = PromptShape::with_history_keys(&sent, uncached_tail, keys);
        // The log as it is now: entries of this session's earlier answers may have been
        // written since this request was shaped (the queue writes them in order).
        let log = if loaded_now {
            session_ctx.log.clone()
        } else {
            match store.load(&session_ctx.id.id).await {
                Ok(log) => log,
                Err(e) => {
                    let _ = self.store_failed("load", &e);
                    session_ctx.log.clone()
                }
            }
        };
        let log = &log;
        // A stateful Responses request goes on the lane of the answer it names, or of its
        // conversation; its prompt is that conversation, held by the provider, which cachet
        // does not see, so it is not compared with the previous request (not diagnosed).
        let continued = Continued::of(&sent).and_then(|c| c.lane_in_log(log));
        let lane = continued.unwrap_or_else(|| {
            session::lanes::assign(&session::lanes::heads_of(log), &shape, &session_ctx.history)
        });
        let answered = usage.filter(|_| (200..300).contains(&status));
        let previous = session::lanes::previous_answered(log, lane).filter(|_| continued.is_none());
        super::queue::let_requests_in().await;
        let diagnosis = match (previous, answered) {
            (Some(prev), Some(usage)) => {
                let session = session_ctx.id.id.as_str();
                self.diagnose(
                    store.as_ref(),
                    session,
                    log,
                    prev,
                    &shape,
                    &sent,
                    (usage, self.now_of(&ctx)),
                )
                .await
            }
            _ => None,
        };
        if let Some(d) = &diagnosis {
            self.metrics
                .count_prefix_break(ctx.route.provider, d.section, d.reason);
        }
        let history: Vec<bytes::Bytes> = sent.history_shared().take(shape.messages.len()).collect();
        let draft = RequestDraft {
            request_index: session_ctx.request_index,
            turn_index: Some(turn_index),
            time_ms: self.clock.now_ms(),
            provider: ctx.route.provider.label(),
            endpoint: ctx.route.endpoint.label(),
            client: Some(ctx.client.label()),
            shape: &shape,
            history: &history,
            hashes: Some(&session_ctx.history),
            usage,
            status: Some(status),
            lane,
            conversation: session::lanes::Conversation::of(&session_ctx.history),
            diagnosis,
            patches,
            variant,
            response_id: result.response_id.clone(),
            conversation_id: session::identity::conversation(&sent),
        };
        let _ = model;
        super::queue::let_requests_in().await;
        let (mut record, blobs) = session::compact_request(log, &draft);
        if let Some(theirs) = result.provider_diagnostics.clone() {
            let agree =
                crate::measure::breaks::agrees_with_provider(record.diagnosis.as_ref(), &theirs);
            if agree == Some(false) {
                self.metrics
                    .diagnosis_disagreements
                    .with_label_values(&[ctx.route.provider.label()])
                    .inc();
            }
            record.provider_diagnosis = Some(theirs);
        }
        record.ttl_decision = ttl_decision;
        if let Some(at) = ctx.replayed_at_ms {
            record.time = at;
        }
        let session = session_ctx.id.id.as_str();
        // An observed request's index is taken as its record is written, in the same write.
        let written = match loaded_now {
            true => store
                .record_next(session, Entry::Request(record), blobs)
                .await
                .map(drop),
            false => store
                .record(session, &Entry::Request(record), blobs)
                .await
                .map(drop),
        };
        // The response is already with the client; only the timeline loses an entry.
        if let Err(e) = written {
            drop(self.store_failed("record", &e));
        }
    }

    /// The diagnosis of a request, answered with `usage` at `now_ms`, against the previous
    /// request of its lane.
    #[allow(clippy::too_many_arguments)]
    async fn diagnose(
        &self,
        store: &dyn session::SessionStore,
        session: &str,
        log: &session::SessionLog,
        prev: &session::RequestRecord,
        shape: &PromptShape,
        sent: &Envelope,
        (usage, now_ms): (crate::usage::Usage, u64),
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
            time_ms: now_ms,
            min_tokens,
            thinking_stripped_from: crate::measure::breaks::thinking_stripped_from(sent),
            retention: crate::measure::breaks::retention(sent),
        };
        if crate::measure::breaks::may_count_tokens(&current) && !crate::tokens::is_warm() {
            // The vocabulary loads off the runtime's threads.
            let _ = tokio::task::spawn_blocking(crate::tokens::warm).await;
        }
        let mut diagnosis = crate::measure::diagnose(&previous, &current, &|block| {
            crate::measure::shape::tokens_through(sent, block, min_tokens)
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
        // This request and its lane's earlier ones in the provider's rate window.
        diagnosis.refine_overflow(shape.endpoint, || {
            let window = crate::cache_model::RATE_WINDOW_MS;
            1 + log
                .latest_requests()
                .take_while(|r| r.time + window > now_ms)
                .filter(|r| r.lane == prev.lane)
                .count()
        });
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
        messages: log.sent_keys(prev.request_index).unwrap_or_default(),
        tail: prev.tail.clone(),
        marks: prev.marks.clone(),
        compacted_at: None,
    }
}

/// The body as sent in one buffer, written over the client's when nothing else holds it:
/// both are taken, neither is read again.
fn sent_in_one(sent: &mut crate::envelope::Payload, client: &mut bytes::Bytes) -> bytes::Bytes {
    std::mem::take(sent).into_one(std::mem::take(client))
}

/// The `model` string of a request body, or `unknown`. Only that field is built: serde
/// skips the rest of the body without making a `Value` of it.
pub(super) fn requested_model(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct Model {
        model: Option<String>,
    }
    // A derived struct also reads a JSON array positionally; a body must be an object.
    let is_object = body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    is_object
        .then(|| serde_json::from_slice::<Model>(body).ok())
        .flatten()
        .and_then(|m| m.model)
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::providers::{Endpoint, Provider, Route};
    use std::sync::Arc;

    const ANTHROPIC: Route = Route {
        provider: Provider::Anthropic,
        endpoint: Endpoint::Messages,
    };

    /// A pipeline with the shipped `anthropic-auto-breakpoints` policy and its own store,
    /// on a runtime of the calling thread (so that the allocation meter sees its work).
    fn shaping_pipeline(
        store: &std::path::Path,
    ) -> (tokio::runtime::Runtime, Arc<super::Pipeline>) {
        let mut config = crate::config::Config::default();
        config.sessions.store = format!("{}/", store.display());
        let policy = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/policies/anthropic-auto-breakpoints.toml"
        );
        let policies = crate::policy::load_policies(&[policy.into()], &[]).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let pipeline = rt.block_on(super::Pipeline::new(
            config,
            policies,
            metrics,
            None,
            Default::default(),
        ));
        (rt, Arc::new(pipeline.unwrap()))
    }

    /// Claude Code's shape: a system prompt, tools, and `messages`; gathered as the server
    /// gathers a large body, into its own buffer with room after it.
    fn claude_code_body(messages: Vec<Value>) -> bytes::Bytes {
        let body = serde_json::to_vec(&serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are Claude Code."}],
            "tools": [{"name": "Read", "input_schema": {"type": "object"}}],
            "messages": messages,
        }))
        .unwrap();
        let mut gathered = bytes::BytesMut::with_capacity(body.len() + 64 * 1024);
        gathered.extend_from_slice(&body);
        gathered.freeze()
    }

    fn turns(n: usize, text: &str) -> Vec<Value> {
        (0..n)
            .map(|i| {
                let role = ["user", "assistant"][i % 2];
                serde_json::json!({"role": role, "content": format!("{i}: {text}")})
            })
            .collect()
    }

    fn session_header(id: &str) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-cachet-session", id.parse().unwrap());
        headers
    }

    /// Identifying a shaped request takes its session from what shaping knew, and copies
    /// nothing of its history (an agent's history of 20,000 steps is 1.3 MB of hashes).
    #[test]
    fn a_shaped_request_is_identified_without_copying_its_history() {
        let dir = tempfile::tempdir().unwrap();
        let (rt, pipeline) = shaping_pipeline(dir.path());
        let body = claude_code_body(turns(20_000, "ok"));
        let headers = session_header("long-shaped");
        let model = "claude-sonnet-4-5";
        let shaped =
            rt.block_on(pipeline.shape_request(ANTHROPIC, headers.clone(), body.clone(), model, 1));
        let job = super::Finished {
            ctx: super::super::shape::replayed_ctx(ANTHROPIC, headers, body, model, 1),
            model: model.into(),
            shaped: shaped.unwrap(),
            result: super::TapResult {
                usage: None,
                model: None,
                response_id: None,
                provider_diagnostics: None,
                outcome: super::Outcome::Complete,
                bytes: 0,
                events: 0,
                json_body: None,
                kept_events: Vec::new(),
            },
            status: 200,
        };
        let (identified, held) =
            crate::alloc_meter::peak_during(|| rt.block_on(pipeline.identify_finished(&job)));
        let identified = identified.unwrap();
        assert_eq!(identified.session.id, "long-shaped");
        assert!(identified.observed.is_none());
        assert!(
            held < 4096,
            "{held} bytes held to identify a shaped request"
        );
    }

    /// A large shaped body is recorded from the client's own buffer, written over once the
    /// answer is in, not from a copy of it: the body as sent is never in memory twice.
    #[test]
    fn a_large_shaped_body_is_recorded_without_a_copy_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let (rt, pipeline) = shaping_pipeline(dir.path());
        let file = "fn main() { println!(\"hello\"); }\n".repeat(30_000);
        let body = claude_code_body(turns(6, &file));
        let len = body.len();
        let headers = session_header("large-shaped");
        let model = "claude-sonnet-4-5";
        let route = ANTHROPIC;
        let shaped = rt
            .block_on(pipeline.shape_request(route, headers.clone(), body.clone(), model, 1))
            .unwrap();
        assert!(shaped.body.pieces().len() > 1, "the policy placed markers");
        // What went upstream, as its messages' content addresses: the record must hold them.
        let sent: Value = serde_json::from_slice(&shaped.body.to_bytes()).unwrap();
        let sent_keys: Vec<_> = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(crate::session::normalize::message_key)
            .collect();
        assert!(sent.to_string().contains("cache_control"));
        let usage = crate::usage::Usage::default();
        let ((), peak) = crate::alloc_meter::peak_during(|| {
            rt.block_on(pipeline.clone().record_replayed(
                route,
                headers,
                body,
                1,
                shaped,
                Some(usage),
            ))
        });
        let store = pipeline.store.clone().unwrap();
        let log = rt.block_on(store.load("large-shaped")).unwrap();
        let recorded = log.iter().find_map(|entry| match entry {
            crate::session::Entry::Request(r) => Some(r.sent.keys.clone()),
            _ => None,
        });
        assert_eq!(
            recorded,
            Some(sent_keys),
            "the request is recorded as it was sent"
        );
        assert!(
            peak < len / 4,
            "{peak} bytes held at once for a {len}-byte body"
        );
    }

    static RELEASED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn count_release() {
        RELEASED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Once a body of tens of MB has been let go of, the allocator is asked to give its
    /// pages back before the record is made (on whichever thread it runs); a usual body
    /// leaves them for the next requests.
    #[test]
    fn a_very_large_shaped_body_gives_freed_memory_back() {
        crate::memory::set_release(count_release);
        let released = || RELEASED.load(std::sync::atomic::Ordering::SeqCst);
        let dir = tempfile::tempdir().unwrap();
        let (rt, pipeline) = shaping_pipeline(dir.path());
        let model = "claude-sonnet-4-5";
        let record = |name: &str, body: bytes::Bytes| {
            let headers = session_header(name);
            let shaped = rt
                .block_on(pipeline.shape_request(
                    ANTHROPIC,
                    headers.clone(),
                    body.clone(),
                    model,
                    1,
                ))
                .unwrap();
            let usage = Some(crate::usage::Usage::default());
            let before = released();
            rt.block_on(
                pipeline
                    .clone()
                    .record_replayed(ANTHROPIC, headers, body, 1, shaped, usage),
            );
            released() - before
        };
        let file = "fn main() { println!(\"hello\"); }\n".repeat(30_000);
        let usual = claude_code_body(turns(2, &file));
        assert_eq!(record("usual", usual), 0, "a usual body leaves its pages");
        let large = claude_code_body(turns(9, &file));
        let len = large.len();
        assert!(len >= crate::memory::RELEASE_FROM);
        assert_eq!(
            record("large", large),
            1,
            "a {len}-byte body gives its pages back"
        );
    }

    /// As the whole-body reading answered, on bodies as clients send them and odd ones.
    /// (A body naming `model` twice, which no client sends, reads `unknown` here where
    /// a `Value` kept the last one.)
    #[test]
    fn requested_model_equals_the_value_reading() {
        fn from_value(body: &[u8]) -> String {
            serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| "unknown".into())
        }
        let fixtures =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/clients"))
                .unwrap()
                .map(|e| std::fs::read(e.unwrap().path()).unwrap());
        let odd: Vec<Vec<u8>> = [
            r#"{"messages":[{"role":"user","content":"hi","model":"inner"}],"model":"claude-opus-4-5"}"#,
            r#" {"model":"gpt-\u0035"} "#,
            r#"{"model":7,"messages":[]}"#,
            r#"{"model":null}"#,
            r#"{"messages":[]}"#,
            r#"["claude-opus-4-5"]"#,
            r#""model""#,
            r#"{"model":"x""#,
            "",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let mut named = 0;
        for body in fixtures.chain(odd) {
            let ours = super::requested_model(&body);
            assert_eq!(
                ours,
                from_value(&body),
                "{}",
                String::from_utf8_lossy(&body)
            );
            named += usize::from(ours != "unknown");
        }
        assert!(named >= 10, "the client fixtures name their models");
    }
}
