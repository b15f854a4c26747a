//! One provider call from accept to finish: the [`Exchange`] every phase fills in and
//! [`Pipeline::finish`](super::Pipeline::finish) reads once, whatever the outcome. Nothing
//! learned on the way in is thrown away and derived again on the way out: the envelope,
//! the session and its log, the model, the body that went upstream and what shaping did to
//! it are all still here when the count, the session record, the diagnosis, the trace
//! record and the span are written.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;

use super::history::HistoryMap;
use crate::config::NO_KEY;
use crate::envelope::{Client, Envelope, Payload};
use crate::error::ApiError;
use crate::json::check::Gathered;
use crate::known_prefix::PrefixMatch;
use crate::policy::TemplateVars;
use crate::route::Route;
use crate::session::{PatchEvent, SessionContext};
use crate::tap::TapResult;
use crate::telemetry::RequestTelemetry;
use crate::trace::record::Record;

/// The name of the client key a request presented, set in its extensions by the edge
/// (`[[server.client_keys]]`).
#[derive(Debug, Clone)]
pub struct ClientName(pub Arc<str>);

/// One provider call on its way through the phases.
pub struct Exchange {
    pub route: Route,
    pub parts: Parts,
    /// The client key the request presented (`[[server.client_keys]]`), when any are set.
    pub key: Option<Arc<str>>,
    pub start: Instant,
    /// The request's log span, in-flight count and exported span.
    pub telemetry: RequestTelemetry,

    /// The body as the client sent it (decoded, when it came compressed).
    pub body: Bytes,
    /// What monitoring reads instead of `body`: a socket's request that continues an
    /// answer held on the socket, as the whole request it stands for.
    pub observed: Option<Bytes>,
    /// The compressed bytes the client sent, when it sent a `content-encoding`.
    pub encoded: Option<Bytes>,
    /// The model the request names, once read (an unread body's is the answer's).
    pub model: Option<String>,
    /// The model the route's path names (Gemini, Bedrock, Vertex), whose bodies name none.
    pub path_model: Option<String>,
    pub client: Client,
    /// How far the body has been read.
    pub read: BodyRead,
    /// The trace record of the request as the client sent it, when recording.
    pub trace: Option<Record>,

    /// The request's session: identified before forwarding when a policy shapes it, after
    /// the answer when it is only observed.
    pub session: Option<SessionContext>,
    /// The client's request as an envelope (as the patches left it, when shaped).
    pub env: Option<Envelope>,
    /// `meta.turn_index`: the user prompts so far.
    pub turn_index: u64,
    /// What is left to do once the answer has ended.
    pub after: After,

    /// The body that goes upstream: the client's, or a splice of it.
    pub payload: Payload,
    /// The injection arm of an A/B test, or a keep-warm's own.
    pub variant: Option<String>,
    /// A beta the request must name in `anthropic-beta` (cachet asked for the provider's
    /// cache diagnostics).
    pub anthropic_beta: Option<&'static str>,
    /// When the request went upstream.
    pub sent_at: Option<Instant>,
    /// When it went upstream on the session clock, the clock of the log's times.
    pub sent_ms: Option<u64>,
}

/// How far cachet has read a request's body.
#[derive(Default)]
pub struct BodyRead {
    /// The remembered body this one repeats the first history messages of, if any.
    pub known: Option<PrefixMatch>,
    /// The whole body passed the body check.
    pub checked: bool,
    /// What the check gathered of the body (its top-level fields, history and tools), so
    /// that its envelope is split without scanning it again; held only while an envelope
    /// read is still to come.
    pub gathered: Option<Gathered>,
}

impl BodyRead {
    /// What the body check gathered, once the whole body passed it.
    pub fn gathered(&self) -> Option<&Gathered> {
        self.gathered.as_ref().filter(|_| self.checked)
    }
}

/// What is left to do once the answer has ended.
pub enum After {
    /// Nothing: not a generation request, or neither a policy nor monitoring applies.
    Nothing,
    /// Monitoring only: the request went out as the client sent it; its session and
    /// diagnosis are read from those bytes after the answer, and its turn counted on from
    /// its session's log once that is loaded.
    Observe,
    /// A policy shaped it: its handlers and what they did.
    Shaped(Box<Shaping>),
}

/// What shaping a request did, for `context(turn_end)` and the session record.
pub struct Shaping {
    /// Where the client's history messages sit among those the patches inserted.
    pub map: HistoryMap,
    /// The system parts as shaped, by name: what the diagnosis calls them.
    pub system: Vec<crate::measure::Named>,
    pub policy_names: Vec<String>,
    /// Messages of the request-only tail at the end of what was sent.
    pub uncached_tail: usize,
    /// Every patch of the request so far, for the session log.
    pub patches: Vec<PatchEvent>,
    /// The lane whose previous answer the provider's cache diagnostics were asked against.
    pub diagnosis_lane: Option<u32>,
    /// A `context(turn_end)` handler or hook will want the assistant message.
    pub wants_assistant: bool,
    /// With `ttl = "auto"`: the lifetime chosen, for the session log (and keep-warm).
    pub ttl_decision: Option<crate::session::TtlDecision>,
    /// The number of the latest request to arrive (of any session) when the answer
    /// ended: a keep-warm stands down once its session sends a later one.
    pub arrived_by_answer: u64,
}

impl Shaping {
    /// A keep-warm may follow this request's answer, this many seconds after it.
    pub fn keep_warm(&self) -> Option<u64> {
        self.ttl_decision.as_ref()?.keep_warm_after_secs
    }
}

/// How an exchange ended.
// Made once per exchange and taken apart at once: boxing the answer would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum Outcome {
    /// The upstream answered.
    Answered(Answer),
    /// cachet answered itself: refused at the edge or in a phase, or the upstream could
    /// not be reached in time.
    Failed(ApiError),
}

/// The upstream's answer: its status, and what the tap read of its body, including how
/// that ended (complete, cut off, failed, or the client gone first).
pub struct Answer {
    pub status: u16,
    pub tap: TapResult,
    /// The assistant message, in the provider's own shape, when something reads it (the
    /// trace record of an answer a later request may continue, a `turn_end` handler, a
    /// keep-warm): assembled once, from the tapped body or events.
    pub assistant: Option<serde_json::Value>,
}

impl Answer {
    /// The upstream's answer as the tap read it.
    pub fn new(status: u16, tap: TapResult) -> Answer {
        Answer {
            status,
            tap,
            assistant: None,
        }
    }

    /// A complete answer with a success status: one a `turn_end` handler may see.
    pub fn is_complete(&self) -> bool {
        self.tap.outcome == crate::tap::Outcome::Complete && (200..300).contains(&self.status)
    }

    /// The usage of a successful answer.
    pub fn billed_usage(&self) -> Option<crate::usage::Usage> {
        self.tap.usage.filter(|_| (200..300).contains(&self.status))
    }
}

impl Exchange {
    /// A request accepted at the edge, before its body is read.
    pub fn accepted(route: Route, mut parts: Parts, telemetry: RequestTelemetry) -> Exchange {
        let key = parts.extensions.get::<ClientName>().map(|c| c.0.clone());
        let path_model = crate::providers::model_in_path(route.endpoint, parts.uri.path());
        // The connection's place among those served is its own (or its socket's) to hold:
        // an exchange kept after its answer (its session record, a keep-warm) must not
        // hold it, nor keep a shutdown waiting.
        parts.extensions.remove::<crate::http_serve::Connection>();
        Exchange {
            path_model,
            route,
            parts,
            key,
            start: Instant::now(),
            telemetry,
            body: Bytes::new(),
            observed: None,
            encoded: None,
            model: None,
            client: Client::Unknown,
            read: BodyRead::default(),
            trace: None,
            session: None,
            env: None,
            turn_index: 0,
            after: After::Nothing,
            payload: Payload::default(),
            variant: None,
            anthropic_beta: None,
            sent_at: None,
            sent_ms: None,
        }
    }

    /// Give an envelope read from this request's body the model its path names, where the
    /// path names it (the body has none).
    pub fn name_path_model(&self, env: &mut Envelope) {
        if let Some(model) = self.path_model.as_deref().filter(|m| env.meta.model != *m) {
            env.meta.model.clear();
            env.meta.name_model(model);
        }
    }

    /// The `model` label: the model the request names, or `unknown`.
    pub fn model_label(&self) -> &str {
        self.model
            .as_deref()
            .unwrap_or(crate::metrics::UNKNOWN_MODEL)
    }

    /// The `variant` label: the A/B arm, or `none`.
    pub fn variant_label(&self) -> &str {
        self.variant
            .as_deref()
            .unwrap_or(crate::metrics::NO_VARIANT)
    }

    /// The `key` metric label: the client key's name, or `none`.
    pub fn key_label(&self) -> &str {
        self.key.as_deref().unwrap_or(NO_KEY)
    }

    /// The session namespace: the client key's name, when client keys are configured.
    pub fn namespace(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The session id, once identified.
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_ref().map(|s| s.id.id.as_str())
    }

    /// The session for this request's log line and span: the pipeline's when a policy ran,
    /// else the one the headers name, in the key's namespace as the session log stores it.
    /// (A session found by fingerprint or continuation is known only after the response.)
    pub fn session_for_logs(&self) -> Option<String> {
        match self.session_id() {
            Some(session) => Some(session.to_owned()),
            None => crate::session::identity::named_in_headers(&self.parts.headers)
                .map(|id| super::recall::in_namespace(&id, self.namespace())),
        }
    }

    /// What shaping did, when a policy shaped the request.
    pub fn shaping(&self) -> Option<&Shaping> {
        match &self.after {
            After::Shaped(s) => Some(s),
            _ => None,
        }
    }

    /// Messages of the request-only tail at the end of the body.
    pub fn uncached_tail(&self) -> usize {
        self.shaping().map_or(0, |s| s.uncached_tail)
    }

    /// Whether a `context(turn_end)` handler or a keep-warm will want the assistant
    /// message (the stream's events are kept only then).
    pub fn wants_assistant(&self) -> bool {
        self.shaping()
            .is_some_and(|s| s.wants_assistant || s.keep_warm().is_some())
    }

    /// The body as sent, in one buffer, written over the client's when nothing else holds
    /// it: both are taken, neither is read again.
    pub fn sent_in_one(&mut self) -> Bytes {
        std::mem::take(&mut self.payload).into_one(std::mem::take(&mut self.body))
    }

    /// The template variables of policy text (`{{session}}`, ...) for this request in
    /// `session`.
    pub fn template_vars(&self, session: &SessionContext) -> TemplateVars {
        TemplateVars {
            session: session.id.id.clone(),
            request_index: session.request_index,
            turn_index: self.turn_index,
            model: self.model_label().to_string(),
            provider: self.route.provider.label().to_string(),
            date: crate::policy::utc_date(std::time::SystemTime::now()),
        }
    }

    /// The adaptive-TTL decision made for the request (`ttl = "auto"`).
    pub fn ttl_decision(&self) -> Option<&crate::session::TtlDecision> {
        self.shaping()?.ttl_decision.as_ref()
    }
}
