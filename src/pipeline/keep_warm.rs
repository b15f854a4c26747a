//! Keep-warm, live (see [`crate::ttl::keep_warm`]): after a turn's final answer, a timer;
//! when it fires and the session has sent nothing since the answer, one `max_tokens: 1`
//! request that writes the prefix and the answer under a 1h marker. Counted in the usual
//! request and token metrics (variant `keep-warm`) and in `cachet_keep_warm_total`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::{Answer, Exchange, Outcome, Pipeline};
use crate::route::Endpoint;
use crate::telemetry::RequestTelemetry;
use crate::transport::upstream_client::RequestBody;
use crate::ttl::keep_warm;

/// Whether an answer may be followed by a keep-warm request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeepWarm {
    /// Live: a keep-warm is armed when the request's policy asks for one.
    MayArm,
    /// The answer is not a live one (offline replay): none is.
    Never,
}

/// Sessions remembered for keep-warm timers (least recently used go first).
const SESSIONS: u64 = 10_000;

/// Which request each session sent last, numbered in arrival order across all sessions,
/// so that a timer whose session went on is dropped. A number, not a time: an agent's next
/// request can arrive within the millisecond its answer ended, and the answer is read after
/// it (after the response, off the request path). Numbered across sessions, not counted
/// per session, so that a session forgotten (the least recently used beyond
/// [`SESSIONS`]) and seen again still reads as having gone on.
pub(super) struct Arrivals {
    latest: AtomicU64,
    of_session: moka::sync::Cache<String, Arc<AtomicU64>>,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals {
            latest: AtomicU64::new(0),
            of_session: moka::sync::Cache::new(SESSIONS),
        }
    }
}

impl Arrivals {
    /// A request of `session` arrived.
    pub(super) fn note(&self, session: &str) {
        let number = self.latest.fetch_add(1, Ordering::Relaxed) + 1;
        self.of_session
            .get_with_by_ref(session, Default::default)
            .fetch_max(number, Ordering::Relaxed);
    }

    /// The number of the latest request to arrive, of any session.
    pub(super) fn latest(&self) -> u64 {
        self.latest.load(Ordering::Relaxed)
    }

    /// Whether `session` sent a request numbered after `mark`.
    fn since(&self, session: &str, mark: u64) -> bool {
        self.of_session
            .get(session)
            .is_some_and(|n| n.load(Ordering::Relaxed) > mark)
    }
}

impl Pipeline {
    /// After a final answer (`assistant`) to the request of `ex`, whose forwarded body was
    /// `sent` (its last `tail` messages the request-only tail): arm the keep-warm timer.
    /// It stands down if the session sent a request numbered after `arrived_by_answer`
    /// (the latest number when the answer ended).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn arm_keep_warm(
        self: &Arc<Self>,
        ex: &Exchange,
        session: &str,
        sent: &Bytes,
        tail: usize,
        assistant: &Value,
        after_secs: u64,
        arrived_by_answer: u64,
    ) {
        if !keep_warm::ends_turn(assistant) {
            return;
        }
        let route = ex.route;
        let to = crate::transport::forward::Destination::of(route.provider, &ex.parts.headers);
        let mut headers = self.upstreams.request_headers(to, &ex.parts.headers, true);
        headers.remove(http::header::CONTENT_ENCODING);
        let path = ex
            .parts
            .uri
            .path_and_query()
            .map_or("/v1/messages", |p| p.as_str());
        let Ok(url) = self.upstreams.url(to, path) else {
            self.count_keep_warm("unbuilt");
            return;
        };
        let wait = Duration::from_secs(after_secs).saturating_sub(ex.start.elapsed());
        let (pipeline, session, model) = (self.clone(), session.to_string(), ex.model.clone());
        let key = ex.key.clone();
        // The keep-warm is an exchange of its own, counted as every request is.
        let route = crate::route::Route {
            endpoint: Endpoint::Messages,
            ..route
        };
        let (mut parts, ()) = http::Request::new(()).into_parts();
        parts.method = http::Method::POST;
        // The body is built when the timer fires, not now: most timers stand down (the
        // agent's next request comes first), and reading a long history to build one is
        // most of what a shaped request would otherwise cost after its answer.
        let (sent, assistant) = (sent.clone(), assistant.clone());
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if pipeline.arrivals.since(&session, arrived_by_answer) {
                pipeline.count_keep_warm("skipped");
                return;
            }
            let built = tokio::task::spawn_blocking(move || {
                let sent = serde_json::from_slice::<Value>(&sent).ok()?;
                let body = keep_warm::request_body(&sent, tail, &assistant)?;
                serde_json::to_vec(&body).ok()
            });
            let Ok(Some(body)) = built.await else {
                pipeline.count_keep_warm("unbuilt");
                return;
            };
            let sent = pipeline.client.send(
                http::Method::POST,
                url,
                headers,
                RequestBody::Whole(bytes::Bytes::from(body).into()),
            );
            let timeout = Duration::from_millis(pipeline.config.upstream.response_timeout_ms);
            let answer = match tokio::time::timeout(timeout, sent).await {
                Ok(Ok(resp)) => {
                    let status = resp.status();
                    resp.bytes().await.ok().map(|b| (status, b))
                }
                _ => None,
            };
            let Some((status, bytes)) = answer else {
                tracing::warn!(session = %session, "keep-warm request failed");
                pipeline.count_keep_warm("failed");
                return;
            };
            let usage =
                crate::providers::usage::read_response_body(Endpoint::Messages, &bytes).usage;
            let mut kept_warm = Exchange::accepted(route, parts, RequestTelemetry::none());
            (kept_warm.model, kept_warm.variant, kept_warm.key) =
                (model, Some("keep-warm".into()), key);
            let tap = crate::tap::TapResult::with_usage(usage);
            let answer = Answer::new(status.as_u16(), tap);
            pipeline
                .clone()
                .finish(kept_warm, Outcome::Answered(answer));
            pipeline.count_keep_warm(if status.is_success() {
                "sent"
            } else {
                "failed"
            });
            tracing::info!(session = %session, status = status.as_u16(), "keep-warm request sent");
        });
    }

    fn count_keep_warm(&self, outcome: &str) {
        self.metrics.keep_warm.with_label_values(&[outcome]).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::Arrivals;

    #[test]
    fn a_session_goes_on_once_it_sends_a_request_after_the_answer() {
        let arrivals = Arrivals::default();
        arrivals.note("a");
        arrivals.note("b");
        let answered = arrivals.latest();
        // Another session's request says nothing of this one.
        arrivals.note("b");
        assert!(!arrivals.since("a", answered));
        arrivals.note("a");
        assert!(arrivals.since("a", answered));
    }

    #[test]
    fn a_session_forgotten_and_seen_again_has_gone_on() {
        let arrivals = Arrivals::default();
        for _ in 0..3 {
            arrivals.note("a");
        }
        let answered = arrivals.latest();
        // Pushed out by other sessions while its timer waits, then back with one request:
        // a count per session would start again at one, below the three it was at.
        arrivals.of_session.invalidate("a");
        assert!(!arrivals.since("a", answered));
        arrivals.note("a");
        assert!(arrivals.since("a", answered));
    }
}
