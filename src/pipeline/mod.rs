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

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use crate::config::{Config, StoreFailure};
use crate::envelope::{detect_client, BreakpointMode, CompileOptions, Envelope, Ttl};
use crate::error::{ApiError, ErrorKind};
use crate::hooks::HookClient;
use crate::metrics::Metrics;
use crate::policy::{
    self, ClientKind, ContextReason, Policy, PolicySet, RequestFacts, TemplateVars,
};
use crate::provider::{Endpoint, Route};
use crate::session::{self, Entry, PrefixHashes, SessionStore};

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
}

/// What to forward, and what to do once the response has ended.
pub struct Prepared {
    pub body: Bytes,
    pub variant: String,
    pub after: Option<AfterResponse>,
}

impl Prepared {
    fn passthrough(body: Bytes) -> Self {
        Prepared {
            body,
            variant: "none".into(),
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
        Ok(Some(Pipeline {
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
            client: ClientKind::parse(client.label()).unwrap_or(ClientKind::Unknown),
            headers,
        };
        let policies = self.policies.matching(&facts);
        if policies.is_empty() || !route.endpoint.is_generation() {
            return Ok(Prepared::passthrough(body));
        }
        let mut env = Envelope::parse(route.provider, route.endpoint, body.clone())?;
        let value: Value =
            serde_json::from_slice(&body).map_err(|e| ApiError::invalid(e.to_string()))?;
        let id = session::identify(headers, &value, route.provider, route.endpoint).id;
        let history = client_history(route.endpoint, &value);
        let hashes = PrefixHashes::new(&history);

        let (log, request_index) = self.load_session(&id).await?;
        env.meta.session = Some(id.clone());
        env.meta.client = client;
        env.meta.request_index = request_index;
        env.meta.turn_index = turn_index(route.endpoint, &history);
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
        self.replay(&log, &hashes, &mut shaping);
        let persisted = self
            .run_context(
                &policies,
                ContextReason::BeforeRequest,
                &mut shaping,
                &vars,
                None,
            )
            .await?;
        self.persist(
            &id,
            "before_request",
            &persisted,
            hashes.full(),
            request_index,
        )
        .await?;
        self.run_context(
            &policies,
            ContextReason::Ephemeral,
            &mut shaping,
            &vars,
            None,
        )
        .await?;

        let compiled = env.compile(&compile_options(&policies, &id));
        let body = self.run_payload(&policies, compiled, &vars, route).await?;
        let policy_names = policies.iter().map(|p| p.name.clone()).collect();
        Ok(Prepared {
            body: body.clone(),
            variant: "none".into(),
            after: Some(AfterResponse {
                route,
                model: model.to_string(),
                session: id,
                client: client.label(),
                request_index,
                log,
                hashes,
                env,
                map,
                vars,
                policy_names,
                sent: body,
                variant: None,
            }),
        })
    }

    async fn load_session(&self, id: &str) -> Result<(Arc<Vec<Entry>>, u64), ApiError> {
        let Some(store) = &self.store else {
            return Ok((Arc::new(Vec::new()), 0));
        };
        let log = match store.load(id).await {
            Ok(log) => log,
            Err(e) => {
                self.store_failed("load", &e)?;
                Arc::new(Vec::new())
            }
        };
        let index = match store.next_request_index(id).await {
            Ok(i) => i,
            Err(e) => {
                self.store_failed("request_index", &e)?;
                0
            }
        };
        Ok((log, index))
    }

    /// Apply the session's persisted patches whose anchor matches this history.
    fn replay(&self, log: &[Entry], hashes: &PrefixHashes, shaping: &mut Shaping<'_>) {
        let plan = session::plan_replay(log, hashes);
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
        session: &str,
        reason: &str,
        patches: &[Persisted],
        anchor: session::Anchor,
        request_index: u64,
    ) -> Result<(), ApiError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        if patches.is_empty() {
            return Ok(());
        }
        let entries: Vec<Entry> = patches
            .iter()
            .map(|p| {
                Entry::ContextTransform(session::ContextTransform {
                    version: session::entry::ENTRY_VERSION,
                    time: session::entry::now_ms(),
                    transformer: p.transformer.clone(),
                    reason: reason.to_string(),
                    anchor: anchor.clone(),
                    patch: p.ops.clone(),
                    display: p.display.clone(),
                    request_index: Some(request_index),
                })
            })
            .collect();
        if let Err(e) = store.append(session, &entries).await {
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

/// User prompts so far: user messages that are not only tool results.
fn turn_index(endpoint: Endpoint, history: &[Value]) -> u64 {
    history
        .iter()
        .filter(|m| {
            let role = m.get("role").and_then(Value::as_str);
            if role != Some("user") {
                return false;
            }
            if endpoint == Endpoint::Responses {
                return m
                    .get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "message");
            }
            match m.get("content") {
                Some(Value::Array(blocks)) => blocks
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) != Some("tool_result")),
                _ => true,
            }
        })
        .count() as u64
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
