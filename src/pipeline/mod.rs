//! The request pipeline of DESIGN §1, for requests that a policy matches:
//!
//! parse into the envelope → identify the session → replay its persisted patches (anchored)
//! → `context(before_request)` (persisted) → `context(ephemeral)` → compile with cache
//! markers → `before_provider_request` → [forward] → `context(turn_end)` (persisted) →
//! session log.
//!
//! Requests no policy matches never reach it: they pass through unparsed.

mod after;
pub mod assemble;
mod handlers;
pub mod history;
mod inject;

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use crate::config::{Config, StoreFailure};
use crate::envelope::{detect_client, BreakpointMode, CompileOptions, Envelope, Ttl};
use crate::error::{ApiError, ErrorKind};
use crate::hooks::HookClient;
use crate::metrics::Metrics;
use crate::policy::{self, ContextReason, Policy, PolicySet, RequestFacts, TemplateVars};
use crate::provider::{Endpoint, Route};
use crate::session::{self, PrefixHashes, SessionContext, SessionStore};

pub use after::AfterResponse;
use handlers::{Persisted, Shaping};
use history::HistoryMap;

/// Policies, hooks and the session store, shared by every request.
pub struct Pipeline {
    policies: PolicySet,
    hooks: HookClient,
    store: Option<Arc<dyn SessionStore>>,
    on_store_error: StoreFailure,
    strict: bool,
    metrics: Arc<Metrics>,
    injections: Option<inject::Injections>,
}

/// What to forward, and what to do once the response has ended.
pub struct Prepared {
    pub body: Bytes,
    pub variant: String,
    /// Messages of the request-only tail at the end of `body`.
    pub uncached_tail: usize,
    pub after: Option<AfterResponse>,
}

impl Prepared {
    fn passthrough(body: Bytes) -> Self {
        Prepared {
            body,
            variant: "none".into(),
            uncached_tail: 0,
            after: None,
        }
    }
}

impl Pipeline {
    /// The pipeline for a configuration, or `None` when no policy is active (pure
    /// pass-through). Opens the session store.
    pub async fn new(
        config: &Config,
        policies: PolicySet,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Option<Pipeline>> {
        if policies.is_empty() {
            return Ok(None);
        }
        let store = match session::open_store(&config.sessions.store).await {
            Ok(store) => Some(store),
            Err(e) if config.sessions.on_store_error == StoreFailure::FailOpen => {
                tracing::warn!("session store unavailable, running without sessions: {e}");
                metrics.store_errors.with_label_values(&["open"]).inc();
                None
            }
            Err(e) => anyhow::bail!("{e}"),
        };
        let injections = Some(inject::Injections::new(policies.iter())?).filter(|i| !i.is_empty());
        Ok(Some(Pipeline {
            injections,
            policies,
            hooks: HookClient::new()?,
            store,
            on_store_error: config.sessions.on_store_error,
            strict: config.policies.strict,
            metrics,
        }))
    }

    pub fn store(&self) -> Option<&Arc<dyn SessionStore>> {
        self.store.as_ref()
    }

    /// A store failure: counted and logged; fails the request only in fail-closed mode.
    fn store_failed(&self, operation: &str, err: &dyn std::fmt::Display) -> Result<(), ApiError> {
        self.metrics
            .store_errors
            .with_label_values(&[operation])
            .inc();
        tracing::warn!(operation, "session store failed: {err}");
        match self.on_store_error {
            StoreFailure::FailOpen => Ok(()),
            StoreFailure::FailClosed => Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("session store unavailable ({operation})"),
            )),
        }
    }

    /// Shape a request for the upstream.
    pub async fn prepare(
        &self,
        route: Route,
        headers: &HeaderMap,
        body: Bytes,
        model: &str,
    ) -> Result<Prepared, ApiError> {
        let client = detect_client(headers, &body);
        let facts = RequestFacts {
            provider: route.provider,
            endpoint: route.endpoint,
            model,
            client,
            headers,
        };
        let policies = self.policies.matching(&facts);
        if policies.is_empty() || !route.endpoint.is_generation() {
            return Ok(Prepared::passthrough(body));
        }
        let mut env = Envelope::parse(route.provider, route.endpoint, body.clone())?;
        let value: Value =
            serde_json::from_slice(&body).map_err(|e| ApiError::invalid(e.to_string()))?;
        let history = client_history(route.endpoint, &value);
        let ctx = self
            .session_context(
                session::identify(headers, &value, route.provider, route.endpoint),
                &history,
            )
            .await?;
        let id = ctx.id.id.clone();
        let request_index = ctx.request_index;
        env.meta.session = Some(id.clone());
        env.meta.client = client;
        env.meta.request_index = request_index;
        env.meta.turn_index = session::turns::turn_index(&history, route.endpoint);
        let vars = TemplateVars {
            session: id.clone(),
            request_index,
            turn_index: env.meta.turn_index,
            model: model.to_string(),
            provider: route.provider.label().to_string(),
            date: policy::utc_date(std::time::SystemTime::now()),
        };

        let mut map = HistoryMap::new(history.len());
        let mut shaping = Shaping {
            env: &mut env,
            map: &mut map,
        };
        self.replay(&ctx, &mut shaping);
        let reason = ContextReason::BeforeRequest;
        let mut persisted = self
            .run_context(&policies, reason, &mut shaping, &vars, None)
            .await?;
        let injected = self.inject(&policies, &ctx, &history, &mut shaping).await?;
        persisted.extend(injected.persist);
        self.persist(&ctx, reason, persisted).await?;
        let reason = ContextReason::Ephemeral;
        self.run_context(&policies, reason, &mut shaping, &vars, None)
            .await?;

        let mut opts = compile_options(&policies, &id);
        if injected.marker_before_insertion && opts.breakpoints == BreakpointMode::Preserve {
            // Context-hook injection: the history before the insertion must stay readable
            // next turn, which takes a marker there (DESIGN §6).
            opts.breakpoints = BreakpointMode::Auto {
                ttl: Ttl::FiveMinutes,
            };
        }
        let compiled = env.compile(&opts);
        let variant = injected.variant.unwrap_or("none").to_string();
        let body = self.run_payload(&policies, compiled, &vars, route).await?;
        let policy_names = policies.iter().map(|p| p.name.clone()).collect();
        let wants_assistant = policies.iter().any(|p| {
            p.context_for(ContextReason::TurnEnd).next().is_some()
                || p.hooks_for(policy::HookEvent::Context(ContextReason::TurnEnd))
                    .next()
                    .is_some()
        });
        Ok(Prepared {
            body: body.clone(),
            variant: variant.clone(),
            uncached_tail: env.uncached_raw().count(),
            after: Some(AfterResponse {
                route,
                model: model.to_string(),
                ctx,
                client: client.label(),
                env,
                map,
                vars,
                policy_names,
                sent: body,
                variant: (variant != "none").then_some(variant),
                wants_assistant,
            }),
        })
    }

    /// The session's log and request index; without a store (or when it fails open), an
    /// empty log: the request goes on without replay.
    async fn session_context(
        &self,
        id: session::SessionId,
        history: &[Value],
    ) -> Result<SessionContext, ApiError> {
        if let Some(store) = &self.store {
            match session::prepare(store.as_ref(), id.clone(), history).await {
                Ok(ctx) => return Ok(ctx),
                Err(e) => self.store_failed("load", &e)?,
            }
        }
        Ok(SessionContext {
            id,
            request_index: 0,
            log: Arc::new(Vec::new()),
            history: PrefixHashes::new(history),
        })
    }

    /// Apply the session's persisted patches whose anchor matches this history.
    fn replay(&self, ctx: &SessionContext, shaping: &mut Shaping<'_>) {
        let plan = ctx.plan();
        for stale in &plan.stale {
            for op in &stale.patch {
                self.metrics
                    .patches
                    .with_label_values(&[&stale.transformer, op.name(), "stale"])
                    .inc();
            }
        }
        for transform in plan.apply {
            match shaping.replay(&transform.patch, &transform.transformer) {
                Ok(()) => {
                    for op in &transform.patch {
                        self.metrics
                            .patches
                            .with_label_values(&[&transform.transformer, op.name(), "replayed"])
                            .inc();
                    }
                }
                Err(refusal) => self.count_refused(&refusal, &transform.patch),
            }
        }
    }

    /// Store patches durably before the request they shaped is forwarded.
    async fn persist(
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

/// The client's history messages as JSON values (Anthropic and Chat `messages`, Responses
/// `input` items).
fn client_history(endpoint: Endpoint, body: &Value) -> Vec<Value> {
    let key = if endpoint == Endpoint::Responses {
        "input"
    } else {
        "messages"
    };
    match body.get(key) {
        Some(Value::Array(items)) => items.clone(),
        Some(Value::String(text)) => vec![serde_json::json!({"role": "user", "content": text})],
        _ => Vec::new(),
    }
}

/// Marker placement and prompt_cache_key from the matched policies (the last one that
/// sets each wins).
fn compile_options(policies: &[&Policy], session: &str) -> CompileOptions {
    let mut opts = CompileOptions::default();
    for policy in policies {
        if let Some(b) = policy.breakpoints {
            let ttl = match b.ttl {
                policy::CacheTtl::FiveMinutes => Ttl::FiveMinutes,
                policy::CacheTtl::OneHour => Ttl::OneHour,
            };
            opts.breakpoints = match b.mode {
                policy::BreakpointMode::Preserve => BreakpointMode::Preserve,
                policy::BreakpointMode::Auto => BreakpointMode::Auto { ttl },
                policy::BreakpointMode::Strip => BreakpointMode::Strip,
            };
        }
        if policy.prompt_cache_key.is_some() {
            opts.prompt_cache_key = Some(session.to_string());
        }
    }
    opts
}
