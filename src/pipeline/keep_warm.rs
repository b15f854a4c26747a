//! Keep-warm, live (see [`crate::ttl::keep_warm`]): after a turn's final answer, a timer;
//! when it fires and the session has sent nothing since the answer, one `max_tokens: 1`
//! request that writes the prefix and the answer under a 1h marker. Counted in the usual
//! request and token metrics (variant `keep-warm`) and in `cachet_keep_warm_total`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::{Pipeline, RequestCtx};
use crate::providers::Endpoint;
use crate::ttl::keep_warm;

/// Sessions remembered for keep-warm timers (least recently used go first).
const SESSIONS: u64 = 10_000;

/// When each session last sent a request, so that a timer whose session went on is
/// dropped.
pub(super) struct Arrivals(moka::future::Cache<String, u64>);

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals(moka::future::Cache::new(SESSIONS))
    }
}

impl Arrivals {
    pub(super) async fn note(&self, session: &str, at_ms: u64) {
        self.0.insert(session.to_string(), at_ms).await;
    }

    async fn since(&self, session: &str, at_ms: u64) -> bool {
        self.0.get(session).await.is_some_and(|t| t > at_ms)
    }
}

impl Pipeline {
    /// After a final answer (`assistant`) to the request of `ctx`, whose forwarded body was
    /// `sent` (its last `tail` messages the request-only tail): arm the keep-warm timer.
    pub(super) fn arm_keep_warm(
        self: &Arc<Self>,
        ctx: &RequestCtx,
        session: &str,
        sent: &Bytes,
        tail: usize,
        assistant: &Value,
        after_secs: u64,
    ) {
        if !keep_warm::ends_turn(assistant) {
            return;
        }
        let body = serde_json::from_slice::<Value>(sent)
            .ok()
            .and_then(|sent| keep_warm::request_body(&sent, tail, assistant))
            .and_then(|body| serde_json::to_vec(&body).ok());
        let Some(body) = body else {
            self.count_keep_warm("unbuilt");
            return;
        };
        let route = ctx.route;
        let mut headers = self
            .upstreams
            .request_headers(route.provider, &ctx.parts.headers, true);
        headers.remove(http::header::CONTENT_ENCODING);
        let path = ctx
            .parts
            .uri
            .path_and_query()
            .map_or("/v1/messages", |p| p.as_str());
        let Ok(url) = self.upstreams.url(route.provider, path) else {
            self.count_keep_warm("unbuilt");
            return;
        };
        let wait = Duration::from_secs(after_secs).saturating_sub(ctx.start.elapsed());
        let answered = self.now_of(ctx);
        let (pipeline, session, model) = (self.clone(), session.to_string(), ctx.model.clone());
        let key = ctx.key_label().to_string();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if pipeline.arrivals.since(&session, answered).await {
                pipeline.count_keep_warm("skipped");
                return;
            }
            let sent = pipeline.client.send(
                http::Method::POST,
                url,
                headers,
                bytes::Bytes::from(body).into(),
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
            let usage = crate::usage::read_response_body(Endpoint::Messages, &bytes).usage;
            pipeline.metrics.record_request(
                route.provider,
                Endpoint::Messages,
                &model,
                status.as_str(),
                "keep-warm",
                &key,
                usage.as_ref(),
            );
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
