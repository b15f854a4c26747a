//! The request pipeline of DESIGN §1. [`Pipeline::handle`] is the phase list, top to
//! bottom, over one per-request context ([`RequestCtx`]):
//!
//! read the body → check its shape → shape it (parse into the envelope → identify the
//! session → replay its persisted patches → `context(before_request)` → inject →
//! `context(ephemeral)` → compile with cache markers → `before_provider_request`) →
//! forward → stream the answer back through the usage tap → finish (metrics, trace record;
//! then, off the request path, `context(turn_end)`, the session log and the prefix-break
//! diagnosis).
//!
//! Requests no policy matches are not shaped: their bytes go out as they came, and the
//! session log and diagnosis are computed after the response from those same bytes
//! (monitoring, on unless `sessions.monitor = false`).

pub mod assemble;
mod finish;
mod handlers;
pub mod history;
mod inject;
mod shape;
mod upstream;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::Response;
use hyper::body::Incoming;

use crate::config::{Config, StoreFailure};
use crate::envelope::Client;
use crate::error::{ApiError, ErrorKind};
use crate::hooks::HookClient;
use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::providers::{Endpoint, Route};
use crate::replay::recorder::Recorder;
use crate::session::{self, SessionStore};
use crate::transport::forward::Upstreams;
use crate::transport::ProxyBody;

pub use finish::After;
pub use shape::Shaped;

/// Everything shared by every request: configuration, the upstream client, policies,
/// hooks, the session store and metrics.
pub struct Pipeline {
    config: Config,
    client: reqwest::Client,
    upstreams: Upstreams,
    metrics: Arc<Metrics>,
    /// Trace recording (`--record DIR`); off by default.
    recorder: Option<Recorder>,
    policies: PolicySet,
    hooks: HookClient,
    store: Option<Arc<dyn SessionStore>>,
    injections: Option<inject::Injections>,
}

/// One request on its way through the phases.
pub struct RequestCtx {
    pub route: Route,
    pub parts: Parts,
    /// The body as the client sent it.
    pub body: Bytes,
    /// The model the body names (`unknown` until checked).
    pub model: String,
    pub client: Client,
    pub start: Instant,
}

impl Pipeline {
    /// The pipeline for a configuration and its loaded policies. Opens the session store
    /// when a policy is active or monitoring is on.
    pub async fn new(
        config: Config,
        policies: PolicySet,
        metrics: Arc<Metrics>,
        recorder: Option<Recorder>,
    ) -> anyhow::Result<Pipeline> {
        let wants_store = !policies.is_empty() || config.sessions.monitor;
        let store = if wants_store {
            Some(session::store::open_configured(&config.sessions, &metrics.store_errors).await?)
        } else {
            None
        };
        let injections = Some(inject::Injections::new(policies.iter())?).filter(|i| !i.is_empty());
        Ok(Pipeline {
            client: crate::transport::forward::build_client(&config.upstream)?,
            upstreams: Upstreams::from_config(&config.upstream)?,
            injections,
            policies,
            hooks: HookClient::new()?,
            store,
            metrics,
            recorder,
            config,
        })
    }

    pub fn store(&self) -> Option<&Arc<dyn SessionStore>> {
        self.store.as_ref()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// One proxied request, phase by phase.
    pub async fn handle(
        self: &Arc<Self>,
        route: Route,
        req: http::Request<Incoming>,
    ) -> Result<Response<ProxyBody>, (ApiError, String)> {
        let start = Instant::now();
        let (parts, body) = req.into_parts();
        let mut ctx = RequestCtx {
            route,
            body: Bytes::new(),
            model: "unknown".into(),
            client: Client::Unknown,
            start,
            parts,
        };
        let fail = |ctx: &RequestCtx, e: ApiError| (e, ctx.model.clone());
        ctx.body = self
            .read_body(&ctx, body)
            .await
            .map_err(|e| fail(&ctx, e))?;
        self.check_body(&mut ctx).map_err(|e| fail(&ctx, e))?;
        let trace = self.trace_record(&ctx);
        let shaped = self.shape(&ctx).await.map_err(|e| fail(&ctx, e))?;
        let upstream = self
            .forward(&ctx, &shaped)
            .await
            .map_err(|e| fail(&ctx, e))?;
        Ok(self.stream_back(ctx, shaped, upstream, trace))
    }

    async fn read_body(&self, ctx: &RequestCtx, body: Incoming) -> Result<Bytes, ApiError> {
        let declared = ctx
            .parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        crate::transport::http::read_body(body, declared, self.config.server.max_body_bytes).await
    }

    /// A generation body must be JSON of its API's shape: a clear 400 otherwise, before
    /// anything is forwarded. Policies read the body, so it is always checked for them;
    /// monitoring reads it after the response and never refuses what it cannot read.
    fn check_body(&self, ctx: &mut RequestCtx) -> Result<(), ApiError> {
        let generation_like = matches!(
            ctx.route.endpoint,
            Endpoint::Messages | Endpoint::CountTokens | Endpoint::Chat | Endpoint::Responses
        );
        let reads_body = !self.policies.is_empty();
        if generation_like && (self.config.server.check_body || reads_body) {
            ctx.model = crate::shape::check(ctx.route.endpoint, &ctx.body)?;
        }
        if ctx.route.endpoint.is_generation() {
            ctx.client = crate::envelope::detect_client(&ctx.parts.headers, &ctx.body);
        }
        Ok(())
    }

    /// The trace record of a request as the client sent it, when recording.
    fn trace_record(&self, ctx: &RequestCtx) -> Option<crate::replay::trace::Record> {
        self.recorder.as_ref()?;
        if !ctx.route.endpoint.is_generation() {
            return None;
        }
        let value: serde_json::Value = serde_json::from_slice(&ctx.body).ok()?;
        let session = session::identify(
            &ctx.parts.headers,
            &value,
            ctx.route.provider,
            ctx.route.endpoint,
        )
        .id;
        Some(crate::replay::recorder::capture(
            session::now_ms(),
            &session,
            ctx.route,
            ctx.parts.uri.path(),
            &ctx.parts.headers,
            &value,
        ))
    }

    /// A store failure: counted and logged; fails the request only in fail-closed mode.
    fn store_failed(&self, operation: &str, err: &dyn std::fmt::Display) -> Result<(), ApiError> {
        self.metrics
            .store_errors
            .with_label_values(&[operation])
            .inc();
        tracing::warn!(operation, "session store failed: {err}");
        match self.config.sessions.on_store_error {
            StoreFailure::FailOpen => Ok(()),
            StoreFailure::FailClosed => Err(ApiError::new(
                ErrorKind::Unavailable,
                format!("session store unavailable ({operation})"),
            )),
        }
    }
}
