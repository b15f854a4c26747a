//! Forward and stream back: send the shaped body upstream, then hand the answer to the
//! client chunk by chunk through the usage tap, which fires [`Pipeline::finish`] once the
//! body has ended (or broke off, or the client went away).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::TryStreamExt;
use http::{Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Body, Frame, Incoming};

use super::exchange::{Answer, Exchange, Outcome};
use super::Pipeline;
use crate::envelope::Payload;
use crate::error::{ApiError, ErrorKind};
use crate::tap::{Tap, TapResult, TapStream};
use crate::transport::arriving::ArrivingBody;
use crate::transport::upstream_client::{RequestBody, UpstreamResponse};
use crate::transport::{forward, ProxyBody};

/// An upstream response whose headers have arrived.
pub(super) struct Upstream {
    response: UpstreamResponse,
}

impl Upstream {
    pub(super) fn headers(&self) -> &http::HeaderMap {
        self.response.headers()
    }
}

impl Pipeline {
    /// Send the request upstream and wait for the response headers. `unread`: the client's
    /// body, when cachet does not read it, to go upstream as it arrives.
    pub(super) async fn forward(
        &self,
        ex: &mut Exchange,
        unread: Option<Incoming>,
    ) -> Result<Upstream, ApiError> {
        let route = ex.route;
        let identity = route.endpoint.is_billed();
        let to = forward::Destination::of(route.provider, &ex.parts.headers);
        let mut headers = self
            .upstreams
            .request_headers(to, &ex.parts.headers, identity);
        if let Some(beta) = ex.anthropic_beta {
            add_beta(&mut headers, beta);
        }
        // A call without a body goes without one, as before (a stream would go chunked).
        let (body, arrival) = match unread.filter(|body| !body.is_end_stream()) {
            Some(incoming) => {
                // The length the client declared, kept: it has not been read to be counted.
                if let Some(length) = forward::declared_length(&ex.parts.headers) {
                    headers.insert(http::header::CONTENT_LENGTH, length.clone());
                }
                let idle = Duration::from_millis(self.config.server.body_read_timeout_ms);
                let (body, arrival) = ArrivingBody::new(incoming, idle);
                (RequestBody::Arriving(body), Some(arrival))
            }
            // A compressed body goes as the client sent it unless shaping changed it; a
            // changed one goes plain.
            None => match &ex.encoded {
                Some(encoded) if ex.payload.is(&ex.body) => {
                    (RequestBody::Whole(Payload::from(encoded.clone())), None)
                }
                Some(_) => {
                    headers.remove(http::header::CONTENT_ENCODING);
                    (RequestBody::Whole(ex.payload.clone()), None)
                }
                None => (RequestBody::Whole(ex.payload.clone()), None),
            },
        };
        let path_and_query = ex
            .parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let url = self.upstreams.url(to, path_and_query)?;
        let host = self.upstreams.host(to, path_and_query);
        let host = host.as_str();
        if to == forward::Destination::Bedrock {
            crate::transport::aws::sign_or_refuse(
                self.upstreams.aws(),
                &ex.parts.method,
                &url,
                &mut headers,
                &body,
            )?;
        }
        if to == forward::Destination::Vertex {
            if let Some(minter) = self.upstreams.vertex_minter() {
                minter.authorize(&self.client, &mut headers).await?;
            }
        }
        self.metrics
            .route(route.provider, route.endpoint)
            .overhead
            .observe(ex.start.elapsed().as_secs_f64());

        let sent = Instant::now();
        ex.sent_at = Some(sent);
        ex.sent_ms = Some(self.clock.now_ms());
        let request = self
            .client
            .send(ex.parts.method.clone(), url, headers, body);
        let timeout = Duration::from_millis(self.config.upstream.response_timeout_ms);
        // A body passed on as it arrives is waited for first; a client that cut it off is
        // told so, whatever the upstream made of the part it got.
        let (answered, cut_off) = match arrival {
            Some(arrival) => arrival.answered_within(timeout, request).await,
            None => (tokio::time::timeout(timeout, request).await, None),
        };
        let response = match (answered, cut_off) {
            (Ok(Ok(resp)), _) => resp,
            (_, Some(cut_off)) => return Err(cut_off),
            (Err(_), None) => {
                return Err(ApiError::new(
                    ErrorKind::Timeout,
                    format!(
                        "upstream {host} did not answer within {} ms",
                        timeout.as_millis()
                    ),
                ))
            }
            (Ok(Err(e)), None) => return Err(forward::send_error(&e, host)),
        };
        self.metrics
            .route(route.provider, route.endpoint)
            .first_byte
            .observe(sent.elapsed().as_secs_f64());
        Ok(Upstream { response })
    }

    /// The client's response: the upstream's status and headers, and its body streamed
    /// through the usage tap.
    pub(super) fn stream_back(
        self: &Arc<Self>,
        ex: Exchange,
        upstream: Upstream,
    ) -> Response<ProxyBody> {
        let Upstream { response } = upstream;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let sse = content_type.starts_with("text/event-stream");
        let frames = content_type.starts_with(crate::providers::bedrock::eventstream::CONTENT_TYPE);
        // A broken event stream ends with an event of cachet's own (`TapStream`), so only
        // other bodies go on as they came.
        let (response_headers, length) = forward::response_head(
            response.headers(),
            status,
            ex.parts.method == http::Method::HEAD,
            !sse,
        );
        // A recorded answer that a later request may continue keeps its output for replay.
        let record_output = self.keeps_output(&ex);
        let keep_events = ex.wants_assistant() || record_output;
        let tap = match frames {
            true => Tap::event_stream(ex.route.endpoint, keep_events),
            false => Tap::new(ex.route.endpoint, sse, keep_events),
        };
        let pipeline = Arc::clone(self);
        let on_finish = Box::new(move |tap: TapResult| {
            pipeline.finish(ex, Outcome::Answered(Answer::new(status, tap)));
        });
        let idle = Duration::from_millis(self.config.upstream.idle_timeout_ms);
        let stream =
            TapStream::new(response.into_body(), tap, sse, idle, on_finish).with_length(length);
        let body = StreamBody::new(stream.map_ok(Frame::data)).boxed_unsync();
        let mut resp = Response::new(body);
        *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        *resp.headers_mut() = response_headers;
        resp
    }
}

/// Name a beta in `anthropic-beta`, after the ones the client named.
fn add_beta(headers: &mut http::HeaderMap, beta: &str) {
    let current = headers
        .get(crate::providers::ANTHROPIC_BETA)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if current.split(',').any(|b| b.trim() == beta) {
        return;
    }
    let value = if current.is_empty() {
        beta.to_string()
    } else {
        format!("{current},{beta}")
    };
    if let Ok(v) = http::HeaderValue::from_str(&value) {
        headers.insert(crate::providers::ANTHROPIC_BETA, v);
    }
}
