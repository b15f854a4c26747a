//! The shaping phases of one request, for requests a policy matches: parse into the
//! envelope → identify the session → replay its persisted patches (anchored) →
//! `context(before_request)` (persisted) → inject → `context(ephemeral)` → compile with
//! cache markers → `before_provider_request`.

use bytes::Bytes;

use super::finish::{After, ShapedAfter};
use super::handlers::{Persisted, Shaping};
use super::history::HistoryMap;
use super::{Pipeline, RequestCtx};
use crate::envelope::{BreakpointMode, CompileOptions, Envelope, Payload, Ttl};
use crate::error::ApiError;
use crate::policy::{self, ContextReason, Policy, RequestFacts, TemplateVars};
use crate::session::{self, PatchEvent, PatchOutcome, PrefixHashes, SessionContext};

/// What to forward, and what to do once the response has ended.
pub struct Shaped {
    /// The body to send: the client's, or a splice of it.
    pub body: Payload,
    pub variant: String,
    pub after: After,
    /// A beta the request must name in `anthropic-beta` (cachet asked for the provider's
    /// cache diagnostics).
    pub anthropic_beta: Option<&'static str>,
}

impl Shaped {
    fn passthrough(body: Bytes, after: After) -> Self {
        Shaped {
            body: Payload::from(body),
            variant: "none".into(),
            after,
            anthropic_beta: None,
        }
    }

    /// The session, when shaping identified it.
    pub fn session(&self) -> Option<&str> {
        match &self.after {
            After::Shaped(s) => Some(&s.ctx.id.id),
            _ => None,
        }
    }

    /// Messages of the request-only tail at the end of the body.
    pub fn uncached_tail(&self) -> usize {
        match &self.after {
            After::Shaped(s) => s.uncached_tail,
            _ => 0,
        }
    }

    /// Whether a `context(turn_end)` handler will want the assistant message (the stream's
    /// events are kept only then).
    pub fn wants_assistant(&self) -> bool {
        matches!(&self.after, After::Shaped(s) if s.wants_assistant || s.keep_warm().is_some())
    }

    /// The adaptive-TTL decision made for the request (`ttl = "auto"`).
    pub fn ttl_decision(&self) -> Option<&crate::ttl::TtlDecision> {
        match &self.after {
            After::Shaped(s) => s.ttl_decision.as_ref(),
            _ => None,
        }
    }
}

impl Pipeline {
    /// Shape a request outside the proxy, as if it arrived at `at_ms` (offline replay runs
    /// the live phases this way, on the recorded times).
    pub async fn shape_request(
        &self,
        route: crate::providers::Route,
        headers: http::HeaderMap,
        body: Bytes,
        model: &str,
        at_ms: u64,
    ) -> Result<Shaped, ApiError> {
        self.shape(&replayed_ctx(route, headers, body, model, at_ms))
            .await
    }

    /// Shape a request for the upstream; requests no policy matches pass as they came.
    pub(super) async fn shape(&self, ctx: &RequestCtx) -> Result<Shaped, ApiError> {
        let route = ctx.route;
        if !route.endpoint.is_generation() {
            return Ok(Shaped::passthrough(ctx.body.clone(), After::Nothing));
        }
        let facts = RequestFacts {
            provider: route.provider,
            endpoint: route.endpoint,
            model: &ctx.model,
            client: ctx.client,
            headers: &ctx.parts.headers,
        };
        let policies = self.policies.matching(&facts);
        if policies.is_empty() {
            let after = match self.store.is_some() && self.config.sessions.monitor {
                true => After::Observe,
                false => After::Nothing,
            };
            return Ok(Shaped::passthrough(ctx.body.clone(), after));
        }
        let body = ctx.body.clone();
        let model = ctx.model.as_str();
        // One parse serves the envelope, the session identity and the anchors.
        let (mut env, history) =
            self.read_envelope(route, body.clone(), ctx.known.as_ref(), ctx.gathered())?;
        let id = self
            .identify(&ctx.parts.headers, &env, &history, ctx.namespace())
            .await;
        let session_ctx = self.session_context(id, history).await?;
        let id = session_ctx.id.id.clone();
        self.arrivals.note(&id);
        let request_index = session_ctx.request_index;
        env.meta.session = Some(id.clone());
        env.meta.client = ctx.client;
        env.meta.request_index = request_index;
        env.meta.turn_index = self.turn_index(&env, ctx.namespace(), Some(&session_ctx.log));
        // The current turn's prompt in the client's own history, before any patch.
        // A pasted file of megabytes is read only as far as a memory source is asked about.
        let prompt = env.latest_user_prompt(crate::inject::QUERY_MAX_BYTES / 2);
        let vars = TemplateVars {
            session: id.clone(),
            request_index,
            turn_index: env.meta.turn_index,
            model: model.to_string(),
            provider: route.provider.label().to_string(),
            date: policy::utc_date(std::time::SystemTime::now()),
        };

        let mut map = HistoryMap::new(session_ctx.history.len());
        let mut shaping = Shaping {
            env: &mut env,
            map: &mut map,
            events: Vec::new(),
        };
        self.replay(&session_ctx, &mut shaping);
        let reason = ContextReason::BeforeRequest;
        let persisted = self
            .run_context(&policies, reason, &mut shaping, &vars, None)
            .await?;
        self.persist(&session_ctx, reason, persisted).await?;
        // Pinned injections persist their own placements, once per turn.
        let injected = self
            .inject(&policies, &session_ctx, prompt, &mut shaping)
            .await?;
        let reason = ContextReason::Ephemeral;
        self.run_context(&policies, reason, &mut shaping, &vars, None)
            .await?;

        let patches = std::mem::take(&mut shaping.events);
        let wants_diagnosis = route.endpoint == crate::providers::Endpoint::Messages
            && policies.iter().any(|p| p.provider_diagnostics);
        let diagnosis_lane = match wants_diagnosis {
            true => Some(self.ask_provider_diagnosis(&mut env, &session_ctx).await),
            false => None,
        };
        let (mut opts, adaptive) = compile_options(&policies, &id);
        let ttl_decision = adaptive.and_then(|keep_warm| {
            let now = self.now_of(ctx);
            crate::ttl::for_request(&env, &session_ctx, &ctx.parts.headers, now, keep_warm)
        });
        if let Some(d) = &ttl_decision {
            opts.breakpoints = BreakpointMode::Auto { ttl: d.ttl() };
        }
        if injected.marker_before_insertion && opts.breakpoints == BreakpointMode::Preserve {
            // Context-hook injection: the history before the insertion must stay readable
            // next turn, which takes a marker there (DESIGN §6).
            opts.breakpoints = BreakpointMode::Auto {
                ttl: Ttl::FiveMinutes,
            };
        }
        let compiled = env.compile_with_markers(&opts);
        let variant = injected.variant.unwrap_or("none").to_string();
        let body = self.run_payload(&policies, compiled, &vars, route).await?;
        let policy_names = policies.iter().map(|p| p.name.clone()).collect();
        let wants_assistant = policies.iter().any(|p| {
            p.context_for(ContextReason::TurnEnd).next().is_some()
                || p.hooks_for(policy::HookEvent::Context(ContextReason::TurnEnd))
                    .next()
                    .is_some()
        });
        Ok(Shaped {
            anthropic_beta: diagnosis_lane
                .is_some()
                .then_some(crate::providers::anthropic::CACHE_DIAGNOSIS_BETA),
            body,
            variant: variant.clone(),
            after: After::Shaped(Box::new(ShapedAfter {
                ctx: session_ctx,
                uncached_tail: env.uncached_raw().count(),
                patches,
                diagnosis_lane,
                env,
                map,
                vars,
                policy_names,
                variant: (variant != "none").then_some(variant),
                wants_assistant,
                ttl_decision,
                arrived_by_answer: 0,
            })),
        })
    }

    /// Ask the provider for its own cache-miss reason against the previous answer of this
    /// request's lane (when there is one). Returns the lane, so that this answer's id is
    /// remembered for the next request.
    async fn ask_provider_diagnosis(&self, env: &mut Envelope, ctx: &SessionContext) -> u32 {
        let shape = crate::measure::PromptShape::of(env, 0);
        let lane =
            session::lanes::assign(&session::lanes::heads_of(&ctx.log), &shape, &ctx.history);
        let previous = self
            .response_ids
            .get(&(ctx.id.id.clone(), lane))
            .await
            .or_else(|| {
                session::lanes::previous_answered(&ctx.log, lane)
                    .and_then(|r| r.response_id.clone())
            });
        if let Some(id) = previous {
            let field = serde_json::json!({ "previous_message_id": id });
            env.set_option("diagnostics", Bytes::from(field.to_string()));
        }
        lane
    }

    /// The session's log and request index; without a store (or when it fails open), an
    /// empty log: the request goes on without replay.
    pub(super) async fn session_context(
        &self,
        id: session::SessionId,
        history: PrefixHashes,
    ) -> Result<SessionContext, ApiError> {
        if let Some(store) = &self.store {
            match session::prepare(store.as_ref(), id.clone(), history.clone()).await {
                Ok(ctx) => return Ok(ctx),
                Err(e) => self.store_failed("load", &e)?,
            }
        }
        Ok(SessionContext {
            id,
            request_index: 0,
            log: session::SessionLog::new(),
            history,
        })
    }

    /// Apply the session's persisted patches whose anchor matches this history.
    fn replay(&self, ctx: &SessionContext, shaping: &mut Shaping<'_>) {
        let plan = ctx.plan();
        for stale in &plan.stale {
            for (op, n) in &stale.ops {
                self.metrics
                    .patches
                    .with_label_values(&[&stale.transformer, op, "stale"])
                    .inc_by(*n as u64);
            }
            PatchEvent::push_folded(&mut shaping.events, stale.event(PatchOutcome::Stale));
        }
        self.replay_transforms(shaping, &plan.apply);
    }

    /// Apply persisted patches in log order, each counted and noted for the session log.
    /// Together on one copy of the envelope; when one of them is refused, one at a time,
    /// so the others still apply and only it is noted refused.
    pub(super) fn replay_transforms(
        &self,
        shaping: &mut Shaping<'_>,
        transforms: &[&session::ContextTransform],
    ) {
        let together = transforms
            .iter()
            .map(|t| (t.patch.as_slice(), t.transformer.as_str()));
        if transforms.len() > 1 && shaping.replay_all(together).is_ok() {
            for transform in transforms {
                self.note_replayed(shaping, transform);
            }
            return;
        }
        for transform in transforms {
            match shaping.replay(&transform.patch, &transform.transformer) {
                Ok(()) => self.note_replayed(shaping, transform),
                Err(refusal) => self.note_refused(shaping, &refusal, "replay", &transform.patch),
            }
        }
    }

    /// A replayed persisted patch: counted, and noted for the session log.
    fn note_replayed(&self, shaping: &mut Shaping<'_>, transform: &session::ContextTransform) {
        for op in &transform.patch {
            self.metrics
                .patches
                .with_label_values(&[&transform.transformer, op.name(), "replayed"])
                .inc();
        }
        PatchEvent::push_folded(
            &mut shaping.events,
            PatchEvent::new(
                &transform.transformer,
                "replay",
                PatchOutcome::Replayed,
                &transform.patch,
            ),
        );
    }

    /// Store patches durably before the request they shaped is forwarded.
    pub(super) async fn persist(
        &self,
        ctx: &SessionContext,
        reason: ContextReason,
        patches: Vec<Persisted>,
    ) -> Result<(), ApiError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let transforms = patches
            .into_iter()
            .filter_map(|p| ctx.transform(&p.transformer, reason.label(), p.ops, p.display))
            .collect();
        if let Err(e) = ctx.persist(store.as_ref(), transforms).await {
            self.store_failed("append", &e)?;
        }
        Ok(())
    }
}

/// Marker placement and prompt_cache_key from the matched policies (the last one that
/// sets each wins). With `ttl = "auto"` the lifetime is decided per request
/// ([`crate::ttl`]): the second value is then `Some`, holding the keep-warm delay when
/// keep-warm is on.
fn compile_options(policies: &[&Policy], session: &str) -> (CompileOptions, Option<Option<u64>>) {
    let mut opts = CompileOptions::default();
    let mut adaptive = None;
    for policy in policies {
        if let Some(b) = policy.breakpoints {
            let ttl = match b.ttl {
                policy::CacheTtl::OneHour => Ttl::OneHour,
                policy::CacheTtl::FiveMinutes | policy::CacheTtl::Auto => Ttl::FiveMinutes,
            };
            opts.breakpoints = match b.mode {
                policy::BreakpointMode::Preserve => BreakpointMode::Preserve,
                policy::BreakpointMode::Auto => BreakpointMode::Auto { ttl },
                policy::BreakpointMode::Strip => BreakpointMode::Strip,
            };
            adaptive = (b.mode == policy::BreakpointMode::Auto && b.ttl == policy::CacheTtl::Auto)
                .then_some(b.keep_warm.then_some(b.keep_warm_after_secs));
        }
        if policy.prompt_cache_key.is_some() {
            opts.prompt_cache_key = Some(session.to_string());
        }
    }
    (opts, adaptive)
}

/// The context of a request replayed offline: recorded headers and body, recorded time.
pub(super) fn replayed_ctx(
    route: crate::providers::Route,
    headers: http::HeaderMap,
    body: Bytes,
    model: &str,
    at_ms: u64,
) -> RequestCtx {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = http::Method::POST;
    let client = crate::envelope::detect_client(&headers, &body);
    parts.headers = headers;
    RequestCtx {
        route,
        parts,
        body,
        encoded: None,
        model: model.to_string(),
        client,
        start: std::time::Instant::now(),
        key: None,
        telemetry: crate::telemetry::RequestTelemetry::none(),
        replayed_at_ms: Some(at_ms),
        known: None,
        checked: false,
        gathered: None,
    }
}
