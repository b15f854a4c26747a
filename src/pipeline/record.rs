//! The session record of an answered exchange, written off the request path and in order
//! per session (see [`super::queue`]): an observed request is identified from the bytes it
//! went out with; a shaped one runs its `context(turn_end)` handlers; then the request's
//! entry goes into the session log, on its lane and with its prefix-break diagnosis.

use std::sync::Arc;

use serde_json::Value;

use super::exchange::{After, Answer, Exchange, Shaping};
use super::handlers::Patching;
use super::keep_warm::KeepWarm;
use super::recall::Continued;
use super::Pipeline;
use crate::measure::PromptShape;
use crate::policy::ContextReason;
use crate::session::{self, Entry, RequestDraft, SessionContext};

impl Pipeline {
    /// The session of an answered request, in the order answers end: shaping knew it
    /// already; an observed request is identified now, from the bytes it went out with.
    /// `false` when there is nothing to record.
    pub(super) async fn identify_answered(&self, ex: &mut Exchange, answer: &Answer) -> bool {
        match &ex.after {
            After::Nothing => return false,
            After::Shaped(_) => return true,
            After::Observe => {}
        }
        super::queue::let_requests_in().await;
        let found = match (&ex.observed, ex.read.checked) {
            (Some(observed), _) => self.find_known(observed),
            (None, true) => ex.read.known.clone(),
            (None, false) => self.find_known(&ex.body),
        };
        // A request that names a Gemini cache is read as the prompt the model reads.
        let read = match self.expanded_gemini_body(ex) {
            Some(whole) => self
                .read_envelope(ex.route, whole, None, None)
                .map(|(mut env, h)| {
                    ex.name_path_model(&mut env);
                    (env, h)
                }),
            None => self.read_exchange_envelope(ex, found.as_ref()),
        };
        // A body that does not parse went out unchecked; the provider answered it.
        let Ok((env, history)) = read else {
            return false;
        };
        ex.read.gathered = None;
        super::queue::let_requests_in().await;
        let namespace = ex.key.as_deref();
        let id = self
            .identify(&ex.parts.headers, &env, &history, namespace)
            .await;
        // The turn as far as the remembered answers tell it (always, but after a restart):
        // what the next request in the chain counts from.
        ex.turn_index = self.turn_index(&env, namespace, None);
        let response_id = answer.tap.response_id.as_deref();
        self.remember_answer(&env, response_id, &id.id, ex.turn_index, namespace);
        // Its log is loaded by the worker that writes its record, just before it does.
        ex.session = Some(SessionContext {
            id,
            request_index: 0,
            log: session::SessionLog::new(),
            history,
        });
        ex.env = Some(env);
        true
    }

    /// Off the request path, in order per session: `context(turn_end)`, then the session
    /// log entry with its lane and diagnosis.
    pub(super) async fn after_response(
        self: &Arc<Self>,
        mut ex: Exchange,
        answer: Answer,
        keep_warm: KeepWarm,
    ) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let Some(mut session_ctx) = ex.session.take() else {
            return;
        };
        self.feed_whatif(&ex, &answer, &session_ctx.id.id);
        let usage = answer.tap.usage;
        let observed = matches!(ex.after, After::Observe);
        let mut after = std::mem::replace(&mut ex.after, After::Nothing);
        // What went out and its history's message keys: an observed request went out as it
        // was read; a shaped body is read again from where it repeats the previous shaped
        // body of its session.
        let (sent, keys, uncached_tail) = match &mut after {
            After::Nothing => return,
            After::Observe => {
                // An observed request's session is loaded here, just before it is recorded.
                session_ctx.log = match store.load(&session_ctx.id.id).await {
                    Ok(log) => log,
                    Err(e) => {
                        let _ = self.store_failed("load", &e);
                        return;
                    }
                };
                let Some(sent) = ex.env.take() else { return };
                // The turn counted on from the log now at hand: a compacted history goes on
                // from its session's turn, and after a restart a continued answer's turn is
                // read from it. This answer is then remembered again with the turn it gives.
                let (log, history) = (&session_ctx.log, &session_ctx.history);
                let counted = self.turn_index_in_log(&sent, log, history);
                if let Some(counted) = counted.filter(|&counted| counted != ex.turn_index) {
                    let (id, session) = (answer.tap.response_id.as_deref(), &session_ctx.id.id);
                    self.remember_answer(&sent, id, session, counted, ex.namespace());
                    ex.turn_index = counted;
                }
                (sent, session_ctx.history.keys().to_vec(), 0)
            }
            After::Shaped(shaping) => {
                let pieced = self
                    .turn_end_and_keep_warm(&mut ex, shaping, &session_ctx, &answer, keep_warm)
                    .await;
                let sent = pieced.unwrap_or_else(|| ex.sent_in_one());
                let read = self.read_sent_envelope(&ex, sent);
                match read {
                    Ok((env, history)) => (env, history.into_keys(), shaping.uncached_tail),
                    Err(e) => {
                        // Only a body sent unchecked gets here; the provider has answered it.
                        tracing::debug!("request not recorded: {}", e.message);
                        return;
                    }
                }
            }
        };
        super::queue::let_requests_in().await;
        let mut shape = PromptShape::with_history_keys(&sent, uncached_tail, keys);
        if let After::Shaped(shaping) = &after {
            shape.name_system_parts(&shaping.system);
        }
        // The log as it is now: entries of this session's earlier answers may have been
        // written since this request was shaped (the queue writes them in order).
        let log = if observed {
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
        // A warmup prepares the session's next turn: it is shown on the lane last active
        // and at the turn it prepares, and no later request is compared with it. Its prompt
        // is a part of the next one's, so of its diagnosis only a switch of model holds: the
        // new model's cache misses there, and the request it prepares is not blamed again.
        let warmup = crate::providers::openai_responses::is_warmup(&sent);
        if warmup {
            ex.turn_index = session::lanes::next_turn(log);
            let (id, session) = (answer.tap.response_id.as_deref(), &session_ctx.id.id);
            self.remember_answer(&sent, id, session, ex.turn_index, ex.namespace());
        }
        let warmup_lane = warmup.then(|| session::lanes::latest_lane(log));
        // A request the provider was asked to diagnose is compared on the lane it was asked
        // against.
        let asked = match &after {
            After::Shaped(shaping) => shaping.diagnosis_lane,
            _ => None,
        };
        let lane = warmup_lane.or(continued).or(asked).unwrap_or_else(|| {
            session::lanes::assign(&session::lanes::heads_of(log), &shape, &session_ctx.history)
        });
        let previous = session::lanes::previous_answered_before(log, lane, ex.sent_ms)
            .filter(|_| continued.is_none());
        super::queue::let_requests_in().await;
        let now = self.clock.now_ms();
        // Every request counts toward its route's rate, diagnosed or not.
        let route_requests = crate::measure::overflow::route_of(&sent).map(|route| {
            let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
            routes.count(route, now)
        });
        let diagnosis = match (previous, answer.billed_usage()) {
            (Some(prev), Some(usage)) => {
                let session = session_ctx.id.id.as_str();
                let current = (&shape, &sent, usage, now);
                let mut d = self
                    .diagnose(store.as_ref(), session, log, prev, current)
                    .await;
                if let (Some(d), Some(sent)) = (&mut d, route_requests) {
                    d.refine_overflow(sent);
                }
                if let Some(d) = &mut d {
                    let shaping = match &after {
                        After::Shaped(shaping) => Some(&**shaping),
                        _ => None,
                    };
                    self.blame(d, prev, shaping, &session_ctx.history);
                }
                d
            }
            _ => None,
        };
        let model_changed =
            |d: &crate::measure::Diagnosis| d.reason == crate::measure::BreakReason::ModelChanged;
        let diagnosis = match warmup {
            true => diagnosis.filter(model_changed),
            false => diagnosis.filter(|d| {
                !model_changed(d) || !session::lanes::warmed_on(log, lane, &shape.model)
            }),
        };
        if let Some(d) = &diagnosis {
            ex.telemetry.prefix_break(d);
            let who = d.blame().who;
            self.metrics
                .count_prefix_break(ex.route.provider, d.section, d.reason, who);
        }
        let (patches, ttl_decision) = match after {
            After::Shaped(shaping) => (shaping.patches, shaping.ttl_decision),
            _ => (Vec::new(), None),
        };
        let history: Vec<bytes::Bytes> = sent.history_shared().take(shape.messages.len()).collect();
        let draft = RequestDraft {
            request_index: session_ctx.request_index,
            turn_index: Some(ex.turn_index),
            time_ms: now,
            provider: ex.route.provider.label(),
            endpoint: ex.route.endpoint.label(),
            client: Some(ex.client.label()),
            shape: &shape,
            history: &history,
            hashes: Some(&session_ctx.history),
            usage,
            status: Some(answer.status),
            outcome: (answer.tap.outcome != crate::tap::Outcome::Complete)
                .then(|| answer.tap.outcome.label()),
            lane,
            conversation: session::entry::Conversation::of(&session_ctx.history),
            diagnosis,
            patches,
            variant: ex.variant.clone(),
            response_id: answer.tap.response_id.clone(),
            conversation_id: session::identity::conversation(&sent),
        };
        super::queue::let_requests_in().await;
        let (mut record, blobs) = session::compact_request(log, &draft);
        record.sent_ms = ex.sent_ms;
        record.warmup = warmup;
        if let Some(theirs) = answer.tap.provider_diagnostics {
            let agree =
                crate::measure::refine::agrees_with_provider(record.diagnosis.as_ref(), &theirs);
            if agree == Some(false) {
                self.metrics
                    .diagnosis_disagreements
                    .with_label_values(&[ex.route.provider.label()])
                    .inc();
            }
            record.provider_diagnosis = Some(theirs);
        }
        record.ttl_decision = ttl_decision;
        let session = session_ctx.id.id.as_str();
        // An observed request's index is taken as its record is written, in the same write.
        let written = match observed {
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

    /// A shaped request's answer: `context(turn_end)` with the assistant message, then a
    /// keep-warm armed when its policy asks for one. The client's envelope is let go of
    /// here, so that the body as sent can be pieced together over the client's buffer;
    /// returns that body when the keep-warm did so.
    async fn turn_end_and_keep_warm(
        self: &Arc<Self>,
        ex: &mut Exchange,
        shaping: &mut Shaping,
        session_ctx: &SessionContext,
        answer: &Answer,
        keep_warm: KeepWarm,
    ) -> Option<bytes::Bytes> {
        // A turn_end handler sees only a complete answer: a cut or abandoned stream would
        // hand it a partial message, and its patches would be persisted.
        let tap = &answer.tap;
        let assistant = answer.assistant.as_ref().filter(|_| answer.is_complete());
        if let (Some(assistant), true) = (assistant, shaping.wants_assistant) {
            let vars = ex.template_vars(session_ctx);
            if let Some(env) = ex.env.as_mut() {
                self.turn_end(env, shaping, session_ctx, &vars, assistant, tap.usage)
                    .await;
            }
        }
        ex.env = None;
        crate::memory::release_after(ex.body.len());
        let keep_warm_secs = shaping
            .keep_warm()
            .filter(|_| keep_warm == KeepWarm::MayArm);
        let (Some(assistant), Some(secs)) = (assistant, keep_warm_secs) else {
            return None;
        };
        let sent = ex.sent_in_one();
        let (tail, arrived) = (shaping.uncached_tail, shaping.arrived_by_answer);
        let id = &session_ctx.id.id;
        self.arm_keep_warm(ex, id, &sent, tail, assistant, secs, arrived);
        Some(sent)
    }

    async fn turn_end(
        &self,
        env: &mut crate::envelope::Envelope,
        shaping: &mut Shaping,
        session_ctx: &SessionContext,
        vars: &crate::policy::TemplateVars,
        assistant: &Value,
        usage: Option<crate::usage::Usage>,
    ) {
        let policies: Vec<_> = self
            .policies
            .iter()
            .filter(|p| shaping.policy_names.contains(&p.name))
            .collect();
        let usage_json = serde_json::to_value(usage.unwrap_or_default()).unwrap_or(Value::Null);
        let mut patching = Patching {
            env,
            map: &mut shaping.map,
            events: Vec::new(),
            held: Default::default(),
        };
        let ran = self
            .run_context(
                &policies,
                ContextReason::TurnEnd,
                &mut patching,
                vars,
                Some((assistant, &usage_json)),
            )
            .await;
        shaping.patches.append(&mut patching.events);
        let persisted = match ran {
            Ok(p) => p,
            Err(e) => {
                let session = &session_ctx.id.id;
                tracing::warn!(session = %session, "turn_end handlers failed: {}", e.message);
                return;
            }
        };
        if let Err(e) = self
            .persist(session_ctx, ContextReason::TurnEnd, persisted)
            .await
        {
            tracing::warn!("turn_end patches not persisted: {}", e.message);
        }
    }
}
