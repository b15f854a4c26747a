//! The shaping phases of one request, for requests a policy matches: parse into the
//! envelope → identify the session → replay its persisted patches (anchored) →
//! `context(before_request)` (persisted) → inject → `context(ephemeral)` → compile with
//! cache markers → `before_provider_request`.

use bytes::Bytes;

use super::exchange::{After, Exchange, Shaping};
use super::handlers::{Patching, Persisted};
use super::history::HistoryMap;
use super::hold;
use super::Pipeline;
use crate::envelope::{BreakpointMode, CompileOptions, Envelope, Payload, Ttl};
use crate::error::ApiError;
use crate::policy::{self, ContextReason, Policy, RequestFacts};
use crate::session::{self, PatchEvent, PatchOutcome, PrefixHashes, SessionContext};

impl Pipeline {
    /// Shape a request outside the proxy, at the pipeline clock's time (offline replay runs
    /// the live phases this way, with the clock set to each request's recorded time).
    pub async fn shape_request(
        &self,
        route: crate::route::Route,
        headers: http::HeaderMap,
        body: Bytes,
        model: &str,
    ) -> Result<Exchange, ApiError> {
        let mut ex = unforwarded(route, headers, body, model);
        self.shape(&mut ex).await?;
        Ok(ex)
    }

    /// Shape a request for the upstream; requests no policy matches pass as they came.
    pub(super) async fn shape(&self, ex: &mut Exchange) -> Result<(), ApiError> {
        ex.payload = Payload::from(ex.body.clone());
        let route = ex.route;
        if !route.endpoint.is_generation() {
            return Ok(());
        }
        let facts = RequestFacts {
            provider: route.provider,
            endpoint: route.endpoint,
            model: ex.model_label(),
            client: ex.client,
            headers: &ex.parts.headers,
        };
        let policies = self.policies.matching(&facts);
        if policies.is_empty() {
            if self.store.is_some() && self.config.sessions.monitor {
                ex.after = After::Observe;
            }
            return Ok(());
        }
        // One parse serves the envelope, the session identity and the anchors.
        let (mut env, history) = self.read_envelope(
            route,
            ex.body.clone(),
            ex.read.known.as_ref(),
            ex.read.gathered(),
        )?;
        ex.name_path_model(&mut env);
        let id = self
            .identify(&ex.parts.headers, &env, &history, ex.namespace())
            .await;
        let session_ctx = self.session_context(id, history).await?;
        let id = session_ctx.id.id.clone();
        self.arrivals.note(&id);
        env.meta.session = Some(id.clone());
        env.meta.client = ex.client;
        env.meta.request_index = session_ctx.request_index;
        let session = Some((&session_ctx.log, &session_ctx.history));
        env.meta.turn_index = self.turn_index(&env, ex.namespace(), session);
        ex.turn_index = env.meta.turn_index;
        let vars = ex.template_vars(&session_ctx);
        // The current turn's prompt in the client's own history, before any patch.
        // A pasted file of megabytes is read only as far as a memory source is asked about.
        let prompt = env.latest_user_prompt(crate::inject::QUERY_MAX_BYTES / 2);

        let mut map = HistoryMap::new(session_ctx.history.len());
        let mut patching = Patching {
            env: &mut env,
            map: &mut map,
            events: Vec::new(),
            held: Default::default(),
        };
        self.replay(&session_ctx, &mut patching);
        if patching.held.is_warm() {
            let auto_markers = matches!(
                compile_options(&policies, &id).0.breakpoints,
                BreakpointMode::Auto { .. }
            );
            if !hold::reads_held_prefix(patching.env, auto_markers) {
                patching.held.unread();
            }
        }
        let reason = ContextReason::BeforeRequest;
        let persisted = self
            .run_context(&policies, reason, &mut patching, &vars, None)
            .await?;
        self.persist(&session_ctx, reason, persisted).await?;
        // Pinned injections persist their own placements, once per turn.
        let injected = self
            .inject(&policies, &session_ctx, prompt, &mut patching)
            .await?;
        let reason = ContextReason::Ephemeral;
        self.run_context(&policies, reason, &mut patching, &vars, None)
            .await?;

        let patches = std::mem::take(&mut patching.events);
        // OpenAI explains misses only on the models with explicit cache options (GPT-5.6
        // and later).
        let model_diagnoses = route.endpoint != crate::route::Endpoint::Responses
            || crate::cache_model::takes_breakpoints(ex.model_label());
        let wants_diagnosis = policies.iter().any(|p| p.provider_diagnostics) && model_diagnoses;
        let diagnosis_lane = match wants_diagnosis {
            true => Some(
                self.ask_provider_diagnosis(route.endpoint, &mut env, &session_ctx)
                    .await,
            ),
            false => None,
        };
        let (mut opts, lifetime) = compile_options(&policies, &id);
        let ttl_decision = match lifetime {
            Lifetime::Adaptive { keep_warm_after } => {
                let now = self.clock.now_ms();
                let headers = &ex.parts.headers;
                crate::ttl::for_request(&env, &session_ctx, headers, now, keep_warm_after)
            }
            Lifetime::Fixed => None,
        };
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
        if matches!(opts.breakpoints, BreakpointMode::Auto { .. }) {
            opts.kept_history = hold::kept_history(&env);
        }
        let compiled = env.compile_with_markers(&opts);
        ex.payload = self.run_payload(&policies, compiled, &vars, route).await?;
        ex.variant = injected.variant.map(str::to_string);
        ex.anthropic_beta =
            diagnosis_lane.and_then(|_| crate::providers::diagnosis_beta(route.endpoint));
        let wants_assistant = policies.iter().any(|p| {
            p.context_for(ContextReason::TurnEnd).next().is_some()
                || p.hooks_for(policy::HookEvent::Context(ContextReason::TurnEnd))
                    .next()
                    .is_some()
        });
        ex.after = After::Shaped(Box::new(Shaping {
            map,
            system: crate::measure::prompt::system_of(&env),
            uncached_tail: env.uncached_raw().count(),
            patches,
            diagnosis_lane,
            policy_names: policies.iter().map(|p| p.name.clone()).collect(),
            wants_assistant,
            ttl_decision,
            arrived_by_answer: 0,
        }));
        ex.env = Some(env);
        ex.session = Some(session_ctx);
        Ok(())
    }

    /// Ask the provider for its own cache-miss reason against the previous answer of this
    /// request's lane (when there is one). Returns the lane, so that this answer's id is
    /// remembered for the next request.
    async fn ask_provider_diagnosis(
        &self,
        endpoint: crate::route::Endpoint,
        env: &mut Envelope,
        ctx: &SessionContext,
    ) -> u32 {
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
        if let Some((key, value)) =
            previous.and_then(|id| crate::providers::diagnosis_option(endpoint, env, &id))
        {
            env.set_option(key, value);
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
    fn replay(&self, ctx: &SessionContext, patching: &mut Patching<'_>) {
        let plan = ctx.plan();
        for stale in &plan.stale {
            for (op, n) in &stale.ops {
                self.metrics
                    .patches
                    .with_label_values(&[&stale.transformer, op, "stale"])
                    .inc_by(*n as u64);
            }
            PatchEvent::push_folded(&mut patching.events, stale.event(PatchOutcome::Stale));
        }
        // What holding handlers hold is theirs to read, not a patch to replay.
        let (held, patches): (Vec<_>, Vec<_>) = plan.apply.iter().partition(|t| hold::is_hold(t));
        let warm = hold::prefix_warm(&ctx.log, &held, self.clock.now_ms());
        patching.held = hold::Holding::of(held.into_iter(), warm);
        self.replay_transforms(patching, &patches);
    }

    /// Apply persisted patches in log order, each counted and noted for the session log.
    /// Together on one copy of the envelope; when one of them is refused, one at a time,
    /// so the others still apply and only it is noted refused.
    pub(super) fn replay_transforms(
        &self,
        patching: &mut Patching<'_>,
        transforms: &[&session::ContextTransform],
    ) {
        let together = transforms
            .iter()
            .map(|t| (t.patch.as_slice(), t.transformer.as_str()));
        if transforms.len() > 1 && patching.replay_all(together).is_ok() {
            for transform in transforms {
                self.note_replayed(patching, transform);
            }
            return;
        }
        for transform in transforms {
            match patching.replay(&transform.patch, &transform.transformer) {
                Ok(()) => self.note_replayed(patching, transform),
                Err(refusal) => self.note_refused(patching, &refusal, "replay", &transform.patch),
            }
        }
    }

    /// A replayed persisted patch: counted, and noted for the session log.
    fn note_replayed(&self, patching: &mut Patching<'_>, transform: &session::ContextTransform) {
        for op in &transform.patch {
            self.metrics
                .patches
                .with_label_values(&[&transform.transformer, op.name(), "replayed"])
                .inc();
        }
        PatchEvent::push_folded(
            &mut patching.events,
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
            .filter_map(|p| {
                let reason = match p.hold {
                    true => crate::session::entry::HOLD_REASON,
                    false => reason.label(),
                };
                // At the pipeline's clock, as requests are (replay sets it to theirs).
                ctx.transform(&p.transformer, reason, p.ops, p.display)
                    .map(|t| session::ContextTransform {
                        time: self.clock.now_ms(),
                        ..t
                    })
            })
            .collect();
        if let Err(e) = ctx.persist(store.as_ref(), transforms).await {
            self.store_failed("append", &e)?;
        }
        Ok(())
    }
}

/// Whether a request's marker lifetime is decided per request (`ttl = "auto"`).
enum Lifetime {
    /// As the policy says (`5m` or `1h`), or no policy places markers.
    Fixed,
    /// Decided per request ([`crate::ttl`]), with a keep-warm this many seconds after a
    /// turn's final answer when keep-warm is on.
    Adaptive { keep_warm_after: Option<u64> },
}

/// Marker placement and prompt_cache_key from the matched policies (the last one that
/// sets each wins), and whether the lifetime is decided per request.
fn compile_options(policies: &[&Policy], session: &str) -> (CompileOptions, Lifetime) {
    let mut opts = CompileOptions::default();
    let mut lifetime = Lifetime::Fixed;
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
            let adaptive =
                b.mode == policy::BreakpointMode::Auto && b.ttl == policy::CacheTtl::Auto;
            lifetime = match adaptive {
                true => Lifetime::Adaptive {
                    keep_warm_after: b.keep_warm.then_some(b.keep_warm_after_secs),
                },
                false => Lifetime::Fixed,
            };
        }
        if policy.prompt_cache_key.is_some() {
            opts.prompt_cache_key = Some(session.to_string());
        }
    }
    (opts, lifetime)
}

/// The exchange of a request shaped outside the proxy (offline replay): recorded headers
/// and body, and no client waiting on a connection.
pub(super) fn unforwarded(
    route: crate::route::Route,
    headers: http::HeaderMap,
    body: Bytes,
    model: &str,
) -> Exchange {
    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = http::Method::POST;
    parts.headers = headers;
    let mut ex = Exchange::accepted(route, parts, crate::telemetry::RequestTelemetry::none());
    ex.client = crate::providers::clients::detect_client(&ex.parts.headers, &body);
    ex.model = Some(model.to_string());
    ex.body = body;
    ex
}
