//! The request pipeline of DESIGN §1. [`Pipeline::handle`] is the phase list, top to
//! bottom, over one [`Exchange`] per provider call, which [`Pipeline::finish`] closes once
//! whatever the outcome:
//!
//! accept → read the body → check its shape → shape it (parse into the envelope →
//! identify the session → replay its persisted patches → `context(before_request)` →
//! inject → `context(ephemeral)` → compile with cache markers → `before_provider_request`)
//! → forward → stream the answer back through the usage tap → finish (count, span, trace
//! record; then, off the request path and in order per session, `context(turn_end)`, the
//! session record and the prefix-break diagnosis).
//!
//! Requests no policy matches are not shaped: their bytes go out as they came, and the
//! session record and diagnosis are computed after the response from those same bytes
//! (monitoring, on unless `sessions.monitor = false`).

mod diagnose;
mod exchange;
mod finish;
mod gemini_caches;
mod handlers;
pub mod history;
mod hold;
mod inject;
mod keep_warm;
mod queue;
mod recall;
mod record;
mod shape;
mod socket;
mod socket_relay;
mod upstream;
mod whatif;

use std::sync::Arc;

use bytes::Bytes;
use http::request::Parts;
use http::Response;
use hyper::body::Incoming;

use crate::config::Config;
use crate::error::{ApiError, ErrorKind};
use crate::hooks::HookClient;
use crate::known_prefix::{self, KnownPrefixes, PrefixMatch};
use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::route::{Endpoint, Route};
use crate::session::StoreFailure;
use crate::session::{self, SessionStore};
use crate::telemetry::Telemetry;
use crate::trace::record::Record;
use crate::trace::recorder::Recorder;
use crate::transport::forward::Upstreams;
use crate::transport::{error_response, ProxyBody};

pub use exchange::{After, Answer, ClientName, Exchange, Outcome, Shaping};

/// Everything shared by every request: configuration, the upstream client, policies,
/// hooks, the session store and metrics.
pub struct Pipeline {
    config: Config,
    client: crate::transport::upstream_client::UpstreamClient,
    upstreams: Upstreams,
    metrics: Arc<Metrics>,
    /// Trace recording (`--record DIR`); off by default.
    recorder: Option<Recorder>,
    /// The live what-if's queue, fed the same records (`sessions.whatif`).
    whatif: Option<session::whatif::WhatIfFeed>,
    policies: PolicySet,
    hooks: HookClient,
    store: Option<Arc<dyn SessionStore>>,
    injections: Option<inject::Injections>,
    /// Recent client histories (rolling hash) and their sessions, for requests that carry
    /// no session id.
    histories: moka::future::Cache<u128, String>,
    /// Recent message pairs of those histories and their sessions, for the request that
    /// goes on after a compaction.
    pairs: moka::future::Cache<u128, Arc<str>>,
    /// Fingerprint sessions and the message after their first, which tells a second
    /// conversation with the same fingerprint apart.
    starts: moka::future::Cache<u128, session::MessageKey>,
    /// Recent Responses answers' ids, with their sessions and turns, for requests that
    /// continue an answer by `previous_response_id` (inserted as a response ends, before the
    /// client can name it).
    answers: moka::sync::Cache<u128, recall::Answered>,
    /// What the Gemini caches created through cachet hold, by name, for the requests that
    /// name one (measured on the prompt the model reads).
    gemini_caches: moka::sync::Cache<u128, Bytes>,
    /// Request spans, the in-flight gauge and OTLP export.
    telemetry: Arc<Telemetry>,
    /// The time the session log is written in.
    clock: session::SessionClock,
    /// The latest answer's id per session and lane, for the provider's cache diagnostics.
    response_ids: moka::future::Cache<(String, u32), String>,
    /// Session entries to write once responses end, in order (started on first use).
    after_queue: std::sync::OnceLock<queue::AfterQueue>,
    /// When each session last sent a request, for keep-warm timers.
    arrivals: keep_warm::Arrivals,
    /// Recent bodies' history prefixes, so a request is read from where it stops
    /// repeating one (`server.incremental`).
    known: KnownPrefixes,
    /// OpenAI's routing rate over every session, for the overflow diagnosis.
    routes: std::sync::Mutex<crate::measure::overflow::Routes>,
}

/// Sessions whose latest answer ids are remembered for the provider's cache diagnostics.
const REMEMBERED_ANSWERS: u64 = 10_000;

impl Pipeline {
    /// The pipeline for a configuration and its loaded policies. Opens the session store
    /// when a policy is active or monitoring is on.
    pub async fn new(
        config: Config,
        policies: PolicySet,
        metrics: Arc<Metrics>,
        recorder: Option<Recorder>,
        clock: session::SessionClock,
    ) -> anyhow::Result<Pipeline> {
        let wants_store = !policies.is_empty() || config.sessions.monitor;
        let store = if wants_store {
            Some(session::store::open_configured(&config.sessions, &metrics.store_errors).await?)
        } else {
            None
        };
        let injections = Some(inject::Injections::new(policies.iter())?).filter(|i| !i.is_empty());
        if policies.places_markers() {
            // Marker placement counts tokens on the request path: the tokenizer's vocabulary
            // loads now, off the runtime's threads, not on the first request it shapes.
            tokio::task::spawn_blocking(crate::tokens::warm);
        }
        // Kept bodies count against the sessions' memory budget: a quarter of it at most.
        let known_budget = usize::try_from(config.sessions.cache_bytes / 4).unwrap_or(usize::MAX);
        let known = KnownPrefixes::new(config.server.incremental, known_budget);
        Ok(Pipeline {
            telemetry: Arc::new(Telemetry::new(&config.telemetry, metrics.clone())?),
            client: crate::transport::forward::build_client(&config.upstream)?,
            upstreams: Upstreams::from_config(&config.upstream)?,
            injections,
            policies,
            hooks: HookClient::new()?,
            store,
            metrics,
            recorder,
            whatif: None,
            config,
            histories: moka::future::Cache::new(recall::REMEMBERED_HISTORIES),
            pairs: moka::future::Cache::new(recall::REMEMBERED_PAIRS),
            starts: moka::future::Cache::new(recall::REMEMBERED_STARTS),
            answers: moka::sync::Cache::new(recall::REMEMBERED_ANSWER_SESSIONS),
            gemini_caches: gemini_caches::remembered_caches(),
            after_queue: std::sync::OnceLock::new(),
            response_ids: moka::future::Cache::new(REMEMBERED_ANSWERS),
            clock,
            arrivals: Default::default(),
            known,
            routes: Default::default(),
        })
    }

    /// Feed every finished request's trace record to the live what-if too.
    pub fn with_whatif(mut self, feed: Option<session::whatif::WhatIfFeed>) -> Pipeline {
        self.whatif = feed;
        self
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

    /// Stop taking session entries and write the queued ones (up to `grace`).
    pub async fn drain(&self, grace: std::time::Duration) {
        if let Some(queue) = self.after_queue.get() {
            queue.drain(grace).await;
        }
    }

    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    /// A request accepted at the edge: its exchange, with its span and in-flight count.
    pub fn accept(&self, route: Route, parts: Parts) -> Exchange {
        let telemetry = self.telemetry.request(route, &parts.headers);
        Exchange::accepted(route, parts, telemetry)
    }

    /// One proxied request, phase by phase; a failure in any phase is answered once, in
    /// the client's provider format.
    pub async fn handle(
        self: &Arc<Self>,
        route: Route,
        req: http::Request<Incoming>,
    ) -> Response<ProxyBody> {
        let (parts, body) = req.into_parts();
        let mut ex = self.accept(route, parts);
        let span = ex.telemetry.span();
        let phases = async {
            let unread = self.read_body(&mut ex, body).await?;
            self.prepare(&mut ex).await?;
            let upstream = self.forward(&mut ex, unread).await?;
            ex.telemetry.record_upstream(upstream.headers());
            Ok::<_, ApiError>(upstream)
        };
        match tracing::Instrument::instrument(phases, span).await {
            Ok(upstream) => self.stream_back(ex, upstream),
            Err(err) => self.refuse(ex, err),
        }
    }

    /// The phases between reading a body and forwarding it: check its shape, start its
    /// trace record, shape it. An HTTP body and a socket's `response.create` pass the same.
    async fn prepare(&self, ex: &mut Exchange) -> Result<(), ApiError> {
        self.check_body(ex)?;
        ex.trace = self.trace_record(ex);
        // Boxed: shaping's state would otherwise sit in every request's future for as
        // long as its answer streams, though it is done before forwarding.
        Box::pin(self.shape(ex)).await?;
        // Only monitoring reads the body's envelope, after the response.
        if !matches!(ex.after, After::Observe) {
            ex.read.gathered = None;
        }
        let session = ex.session_for_logs();
        let variant = ex.variant.as_deref().unwrap_or(crate::metrics::NO_VARIANT);
        ex.telemetry.record_shaping(session.as_deref(), variant);
        Ok(())
    }

    /// cachet answers the request itself, in the client's provider format; the exchange
    /// is finished with the failure.
    pub fn refuse(self: &Arc<Self>, ex: Exchange, err: ApiError) -> Response<ProxyBody> {
        let response = error_response(ex.route.provider, &err);
        self.clone().finish(ex, Outcome::Failed(err));
        response
    }

    /// Read a generation body within its limit; a compressed one is decoded for reading (its
    /// own bytes still go upstream when nothing changes them). Any other call's body (a file
    /// upload, a batch) is handed back unread, to go upstream as it arrives.
    async fn read_body(
        &self,
        ex: &mut Exchange,
        body: Incoming,
    ) -> Result<Option<Incoming>, ApiError> {
        if !reads_body(ex.route.endpoint) {
            return Ok(Some(body));
        }
        let declared = ex
            .parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok());
        let limit = self.config.server.max_body_bytes;
        let timeout = std::time::Duration::from_millis(self.config.server.body_read_timeout_ms);
        let body = crate::transport::http::read_body(body, declared, limit, timeout).await?;
        let decoded = crate::content_encoding::decode(&ex.parts.headers, body, limit)?;
        ex.body = decoded.readable().clone();
        ex.encoded = decoded.plain.is_some().then_some(decoded.sent);
        Ok(None)
    }

    /// A generation body must be JSON of its API's shape: a clear 400 otherwise, before
    /// anything is forwarded. Policies read the body, so it is always checked for them;
    /// monitoring reads it after the response and never refuses what it cannot read.
    fn check_body(&self, ex: &mut Exchange) -> Result<(), ApiError> {
        let reads_body = !self.policies.is_empty();
        let checks = self.config.server.check_body || reads_body;
        if is_generation_like(ex.route.endpoint) && checks {
            // Unchecked, the body is first read after the response (monitoring), and looked
            // up there.
            ex.read.known = self.find_known(&ex.body);
            // One pass: what the check reads of the body's top level, history and tools, the
            // envelope is split from (by a policy now, or by monitoring after the response);
            // with no envelope read, the body is kept for the next request from it.
            let reads = self.reads_envelopes();
            let keeps = !reads && self.config.server.incremental;
            let mut gathered = (reads || keeps).then(crate::providers::gathered);
            let named = known_prefix::check(
                ex.route.endpoint,
                &ex.body,
                ex.read.known.as_ref(),
                gathered.as_mut(),
            )?;
            // The model a path names (Gemini, Bedrock, Vertex) is the request's.
            ex.model = Some(ex.path_model.clone().unwrap_or(named));
            if let (Some(gathered), true) = (&gathered, keeps) {
                self.known
                    .remember_checked(&ex.body, gathered, ex.read.known.as_ref());
            }
            ex.read.gathered = gathered.filter(|_| reads);
            ex.read.checked = true;
            ex.telemetry
                .record_model(ex.model.as_deref().unwrap_or(crate::metrics::UNKNOWN_MODEL));
        }
        if ex.route.endpoint.is_generation() {
            ex.client = crate::providers::clients::detect_client(&ex.parts.headers, &ex.body);
        }
        if ex.route.endpoint == Endpoint::Converse {
            // Counted and signed, never reshaped: its model is its path's.
            ex.model.clone_from(&ex.path_model);
            ex.telemetry
                .record_model(ex.model.as_deref().unwrap_or(crate::metrics::UNKNOWN_MODEL));
        }
        if ex.route.endpoint == Endpoint::Compact {
            // Counted, never reshaped: only its model is read; the provider judges the rest.
            ex.model = finish::requested_model(&ex.body);
            ex.telemetry
                .record_model(ex.model.as_deref().unwrap_or(crate::metrics::UNKNOWN_MODEL));
        }
        Ok(())
    }

    /// Whether a request's envelope may be read (by a policy, or by monitoring after the
    /// response), which keeps its body for the next request of its conversation.
    fn reads_envelopes(&self) -> bool {
        !self.policies.is_empty() || (self.store.is_some() && self.config.sessions.monitor)
    }

    /// The remembered body `body` repeats the first history messages of; counted by the
    /// path the body is read on.
    pub(super) fn find_known(&self, body: &[u8]) -> Option<PrefixMatch> {
        let found = self.known.find(body);
        let path = match found {
            Some(_) => known_prefix::Path::Incremental,
            None => known_prefix::Path::Full,
        };
        self.metrics
            .body_reads
            .with_label_values(&[path.label()])
            .inc();
        found
    }

    /// Parse a client's body into its envelope and its history's prefix hashes, from where
    /// it stops repeating the kept body `known` (or from what the body check gathered of
    /// it), and keep it for the client's next request. `gathered`: what the body check
    /// gathered, when the whole body passed it.
    pub(super) fn read_envelope(
        &self,
        route: crate::route::Route,
        body: Bytes,
        known: Option<&PrefixMatch>,
        gathered: Option<&crate::json::check::Gathered>,
    ) -> Result<(crate::envelope::Envelope, crate::session::PrefixHashes), ApiError> {
        self.read_kept(route, body, known, gathered, known_prefix::Kind::Received)
    }

    /// [`Self::read_envelope`] of an exchange's own body, its model named from its path
    /// where the API names it there.
    pub(super) fn read_exchange_envelope(
        &self,
        ex: &Exchange,
        known: Option<&PrefixMatch>,
    ) -> Result<(crate::envelope::Envelope, crate::session::PrefixHashes), ApiError> {
        let read = match &ex.observed {
            Some(observed) => self.read_envelope(ex.route, observed.clone(), known, None),
            None => self.read_envelope(ex.route, ex.body.clone(), known, ex.read.gathered()),
        };
        let (mut env, history) = read?;
        ex.name_path_model(&mut env);
        Ok((env, history))
    }

    /// [`Self::read_envelope`] of a body cachet sent after a policy changed it, read again
    /// for the session log: from where it repeats the body sent before it, kept beside the
    /// client's.
    pub(super) fn read_sent_envelope(
        &self,
        ex: &Exchange,
        body: Bytes,
    ) -> Result<(crate::envelope::Envelope, crate::session::PrefixHashes), ApiError> {
        let known = self.known.find_sent(&body);
        let kind = known_prefix::Kind::Sent;
        let (mut env, history) = self.read_kept(ex.route, body, known.as_ref(), None, kind)?;
        ex.name_path_model(&mut env);
        Ok((env, history))
    }

    fn read_kept(
        &self,
        route: crate::route::Route,
        body: Bytes,
        known: Option<&PrefixMatch>,
        gathered: Option<&crate::json::check::Gathered>,
        kind: known_prefix::Kind,
    ) -> Result<(crate::envelope::Envelope, crate::session::PrefixHashes), ApiError> {
        let wire = crate::providers::wire_or_refuse(route.endpoint)?;
        let resume = known.map(PrefixMatch::resume);
        let env = crate::envelope::Envelope::parse_checked(wire, body, resume.as_ref(), gathered)?;
        let checked = gathered.is_some();
        let remembered = env.scanned().and_then(|scanned| match kind {
            known_prefix::Kind::Received => self.known.remember(scanned, known, checked),
            known_prefix::Kind::Sent => self.known.remember_sent(scanned, known),
        });
        let history = known_prefix::history_hashes(&env, known, remembered.as_ref());
        Ok((env, history))
    }

    /// The trace record of a request as the client sent it, when recording: its body as
    /// the client's JSON text, or, when serde_json cannot read it, as its bytes.
    fn trace_record(&self, ex: &Exchange) -> Option<Record> {
        self.recorder.as_ref()?;
        if !ex.route.endpoint.is_generation() {
            return None;
        }
        let path = ex.parts.uri.path();
        let headers = &ex.parts.headers;
        // Replay reads the trace with serde_json: a body it reads is recorded as its text
        // (read here without building a value of it), any other as its bytes.
        let readable = crate::trace::recorder::readable(&ex.body);
        let parsed = readable
            .then(|| crate::providers::parse_envelope(ex.route.endpoint, ex.body.clone()).ok())
            .flatten();
        let Some(env) = parsed else {
            let session = session::identity::named_in_headers(headers)
                .map(|id| recall::in_namespace(&id, ex.namespace()))
                .unwrap_or_else(|| "unknown".into());
            return Some(crate::trace::recorder::capture_raw(
                self.clock.now_ms(),
                &session,
                ex.route,
                path,
                headers,
                &ex.body,
            ));
        };
        let named = session::identify(headers, &env);
        // The session the session log will give it, as far as that is known now: a stateful
        // Responses request goes under the session of the answer it names.
        let session = match named.source {
            session::IdSource::Fingerprint => self.continued_answer(&env, ex.namespace()),
            _ => None,
        }
        .unwrap_or_else(|| recall::in_namespace(&named.id, ex.namespace()));
        Some(crate::trace::recorder::capture_text(
            self.clock.now_ms(),
            &session,
            ex.route,
            path,
            headers,
            &ex.body,
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

/// Endpoints whose body is a model request cachet checks (and reads whole, decoded).
fn is_generation_like(endpoint: Endpoint) -> bool {
    endpoint == Endpoint::CountTokens || endpoint.is_generation()
}

/// Endpoints whose body cachet reads whole before forwarding: the generation-like ones, and
/// the other billed ones (a compaction, Bedrock's Converse), whose model is read for their
/// counts (and a Converse body is signed), and a Gemini cache's, remembered for the requests
/// that name it.
fn reads_body(endpoint: Endpoint) -> bool {
    is_generation_like(endpoint) || crate::providers::reads_whole(endpoint)
}
