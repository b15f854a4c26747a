//! One proxied request's telemetry, from arrival to the end of its response body: the
//! `request` log span, the in-flight count, and the OTLP span exported at the end.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use http::HeaderMap;
use tracing::field::{display, Empty};

use super::genai::Facts;
use super::otlp::{Otlp, SpanRecord, TRACE_HEADERS};
use crate::metrics::{InFlight, Metrics};
use crate::route::Route;
use crate::usage::Usage;

/// Longest value of a client-chosen field (model, session) kept in logs and spans.
const MAX_FIELD: usize = 128;

/// How the response ended, for the last log line and the exported span.
pub struct Finished<'a> {
    pub status: u16,
    /// How the body ended (`Outcome::label`).
    pub outcome: &'a str,
    pub usage: Option<&'a Usage>,
    /// The model the response named.
    pub response_model: Option<&'a str>,
}

/// Carried along with the request; `finish` or `refused` ends it (dropping it also ends
/// the in-flight count, without a log line).
pub struct RequestTelemetry {
    inner: Option<Inner>,
    /// What stays once the request is finished, for what is learned after its answer.
    after: Option<Followup>,
}

/// A finished request's log span and exported span, to which its prefix break is added
/// once the session record has diagnosed it (off the request path, after the answer).
struct Followup {
    span: tracing::Span,
    exported: Option<(Arc<Otlp>, opentelemetry::trace::SpanContext)>,
}

struct Inner {
    span: tracing::Span,
    route: Route,
    arrived: Instant,
    started: SystemTime,
    /// Whether the span has its model yet (else the response's model fills it in).
    model_known: bool,
    model: Option<String>,
    session: Option<String>,
    variant: Option<String>,
    request_id: Option<String>,
    /// The client's trace-context headers, kept only when spans are exported.
    parent: Vec<(String, String)>,
    otlp: Option<Arc<Otlp>>,
    _in_flight: InFlight,
}

fn route_label(route: Route) -> &'static str {
    use crate::route::{Endpoint, Provider};
    // Every provider and endpoint, `provider/endpoint`, made once.
    static LABELS: std::sync::LazyLock<Vec<(Route, String)>> = std::sync::LazyLock::new(|| {
        Provider::ALL
            .into_iter()
            .flat_map(|provider| {
                Endpoint::ALL.into_iter().map(move |endpoint| {
                    let label = format!("{}/{}", provider.label(), endpoint.label());
                    (Route { provider, endpoint }, label)
                })
            })
            .collect()
    });
    LABELS
        .iter()
        .find(|(r, _)| *r == route)
        .map_or("other", |(_, label)| label.as_str())
}

/// At most `MAX_FIELD` characters of a value (a client chooses its model name).
fn cut(value: &str) -> &str {
    match value.char_indices().nth(MAX_FIELD) {
        Some((end, _)) => &value[..end],
        None => value,
    }
}

impl Inner {
    /// Whether anyone reads the request's fields: a log subscriber or the exporter. When
    /// no one does, recording costs nothing.
    fn observed(&self) -> bool {
        !self.span.is_disabled() || self.otlp.is_some()
    }

    /// Record a field in the log span; keep a copy only for an exported span.
    fn note(&mut self, field: &'static str, value: &str) -> Option<String> {
        let value = cut(value);
        self.span.record(field, display(value));
        self.otlp.as_ref().map(|_| value.to_string())
    }
}

impl RequestTelemetry {
    pub(super) fn start(
        route: Route,
        headers: &HeaderMap,
        metrics: &Metrics,
        otlp: Option<Arc<Otlp>>,
    ) -> RequestTelemetry {
        let span = tracing::info_span!(
            "request",
            route = %route_label(route),
            model = Empty,
            session = Empty,
            variant = Empty,
            request_id = Empty,
        );
        let parent = match &otlp {
            Some(_) => TRACE_HEADERS
                .iter()
                .filter_map(|name| {
                    let value = headers.get(*name)?.to_str().ok()?;
                    Some((name.to_string(), cut(value).to_string()))
                })
                .collect(),
            None => Vec::new(),
        };
        RequestTelemetry {
            inner: Some(Inner {
                span,
                route,
                arrived: Instant::now(),
                started: SystemTime::now(),
                model_known: false,
                model: None,
                session: None,
                variant: None,
                request_id: None,
                parent,
                otlp,
                _in_flight: metrics.in_flight_guard(),
            }),
            after: None,
        }
    }

    /// The request's log span (to instrument the work done for it).
    pub fn span(&self) -> tracing::Span {
        self.inner
            .as_ref()
            .map_or_else(tracing::Span::none, |i| i.span.clone())
    }

    /// Telemetry that records nothing (requests shaped outside the proxy, e.g. by replay).
    pub fn none() -> RequestTelemetry {
        RequestTelemetry {
            inner: None,
            after: None,
        }
    }

    /// Move the telemetry out (into the response body's completion), leaving this empty.
    pub fn take(&mut self) -> RequestTelemetry {
        RequestTelemetry {
            inner: self.inner.take(),
            after: self.after.take(),
        }
    }

    /// The model the request asked for.
    pub fn record_model(&mut self, model: &str) {
        if let Some(i) = &mut self.inner {
            i.model_known = true;
            i.model = i.note("model", model);
        }
    }

    /// The session the request belongs to, when known.
    pub fn record_session(&mut self, session: Option<&str>) {
        if let (Some(i), Some(session)) = (&mut self.inner, session) {
            i.session = i.note("session", session);
        }
    }

    /// What the pipeline decided: the session (namespaced by the client key, as the session
    /// log stores it) and the variant.
    pub fn record_shaping(&mut self, session: Option<&str>, variant: &str) {
        if !self.inner.as_ref().is_some_and(Inner::observed) {
            return;
        }
        self.record_session(session);
        self.record_variant(variant);
    }

    /// The injection arm (`none` outside A/B tests).
    pub fn record_variant(&mut self, variant: &str) {
        if let Some(i) = &mut self.inner {
            i.variant = i.note("variant", variant);
        }
    }

    /// The upstream's request id ([`crate::providers::REQUEST_ID_HEADERS`]).
    pub fn record_upstream(&mut self, headers: &HeaderMap) {
        let Some(i) = &mut self.inner else { return };
        let id = crate::providers::REQUEST_ID_HEADERS
            .iter()
            .find_map(|name| headers.get(name)?.to_str().ok());
        if let Some(id) = id {
            i.request_id = i.note("request_id", id);
        }
    }

    /// The response body ended (or broke off, or the client left): the request's log line,
    /// and its exported span. The span stays at hand for [`Self::prefix_break`].
    pub fn finish(&mut self, done: Finished<'_>) {
        let Some(mut i) = self.inner.take() else {
            return;
        };
        if !i.model_known {
            if let Some(answered) = done.response_model {
                i.model = i.note("model", answered);
            }
        }
        let usage = done.usage;
        // A billed answer without usage: its tokens are in no figure (README, "Metrics").
        let unmeasured = usage.is_none() && i.route.endpoint.bills(done.status);
        i.span.in_scope(|| {
            tracing::info!(
                status = done.status,
                outcome = done.outcome,
                usage = unmeasured.then_some("missing"),
                cache_read = usage.map(|u| u.cache_read),
                cache_write = usage.map(|u| u.cache_write),
                uncached = usage.map(|u| u.uncached),
                output = usage.map(|u| u.output),
                ms = i.arrived.elapsed().as_millis() as u64,
                "request done"
            )
        });
        let span = i.span.clone();
        let exported = i.otlp.clone().zip(i.export(&done));
        self.after = Some(Followup { span, exported });
    }

    /// The request's prefix break, diagnosed after its answer: a `prefix break` line in the
    /// request's log span, and a `cachet.prefix_break` span under its exported one.
    pub fn prefix_break(&self, d: &crate::measure::Diagnosis) {
        let Some(after) = &self.after else { return };
        let blame = d.blame();
        let transformer = blame.transformer.as_deref();
        after.span.in_scope(|| {
            tracing::info!(
                reason = d.reason.label(),
                section = d.section.label(),
                blame = blame.who.label(),
                transformer,
                "prefix break: {}",
                blame.what
            )
        });
        if let Some((otlp, parent)) = &after.exported {
            let mut attributes = vec![
                opentelemetry::KeyValue::new("cachet.break.reason", d.reason.label()),
                opentelemetry::KeyValue::new("cachet.break.section", d.section.label()),
                opentelemetry::KeyValue::new("cachet.break.blame", blame.who.label()),
                opentelemetry::KeyValue::new("cachet.break.what", cut(&blame.what).to_string()),
            ];
            if let Some(t) = transformer {
                attributes.push(opentelemetry::KeyValue::new(
                    "cachet.break.transformer",
                    cut(t).to_string(),
                ));
            }
            if let Some(op) = &blame.op {
                attributes.push(opentelemetry::KeyValue::new("cachet.break.op", op.clone()));
            }
            otlp.export_child(parent, "cachet.prefix_break", SystemTime::now(), attributes);
        }
    }

    /// cachet answered the request with an error itself (bad body, upstream unreachable).
    pub fn refused(mut self, status: u16, message: &str) {
        let Some(i) = self.inner.take() else {
            return;
        };
        i.span
            .in_scope(|| tracing::info!(status, "request refused: {message}"));
        let _ = i.export(&Finished {
            status,
            outcome: "refused",
            usage: None,
            response_model: None,
        });
    }
}

impl Inner {
    /// Export the request's span (a generation request's, when exporting); its context.
    fn export(self, done: &Finished<'_>) -> Option<opentelemetry::trace::SpanContext> {
        let otlp = self.otlp.as_ref()?;
        if !self.route.endpoint.is_generation() {
            return None;
        }
        let facts = Facts {
            route: self.route,
            request_model: self.model.as_deref(),
            response_model: done.response_model,
            usage: done.usage,
            status: done.status,
            outcome: done.outcome,
            session: self.session.as_deref(),
            variant: self.variant.as_deref(),
            request_id: self.request_id.as_deref(),
        };
        Some(otlp.export(SpanRecord {
            name: facts.span_name(),
            start: self.started,
            end: self.started + self.arrived.elapsed(),
            attributes: facts.attributes(),
            error: facts.error_type(),
            parent: self.parent,
        }))
    }
}
