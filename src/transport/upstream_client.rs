//! The HTTP client that forwards requests upstream (`upstream.client`): reqwest, or
//! hyper-util's pooled client without reqwest's layers. Both speak HTTP/1.1 and HTTP/2
//! (ALPN) over rustls with the webpki roots and ring, keep idle connections 90 s, set
//! `TCP_NODELAY` and reqwest's TCP keep-alive and user time-out, bound connecting (TCP and
//! TLS) by `upstream.connect_timeout_ms`, follow no redirects and decompress nothing. Their
//! errors are mapped to the same client-facing answers by
//! [`crate::transport::forward::send_error`].

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body_util::{BodyDataStream, BodyExt};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{UpstreamClientKind, UpstreamConfig};
use crate::envelope::Payload;
use crate::transport::arriving::{ArrivingBody, CutOff};

/// How long an idle pooled connection is kept (as reqwest's default).
const POOL_IDLE: Duration = Duration::from_secs(90);
/// TCP keep-alive time and probe interval (as reqwest's defaults).
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

type BoxError = Box<dyn StdError + Send + Sync>;
type HyperClient = Client<ConnectTimeout<HttpsConnector<HttpConnector>>, PayloadBody>;

/// The upstream client the pipeline forwards through.
#[derive(Clone)]
pub enum UpstreamClient {
    Reqwest(reqwest::Client),
    Hyper(Box<HyperClient>),
}

impl UpstreamClient {
    /// The client `upstream.client` names. The hyper client does not speak through proxies:
    /// when `HTTP_PROXY`, `HTTPS_PROXY` or `ALL_PROXY` applies to an upstream (the same
    /// reading of the environment, `NO_PROXY` included, as reqwest's), reqwest is used.
    pub fn build(cfg: &UpstreamConfig) -> anyhow::Result<Self> {
        Self::build_with_proxies(cfg, &Matcher::from_system())
    }

    /// [`UpstreamClient::build`] with the proxy settings given rather than read.
    fn build_with_proxies(cfg: &UpstreamConfig, proxies: &Matcher) -> anyhow::Result<Self> {
        match cfg.client {
            UpstreamClientKind::Reqwest => Ok(UpstreamClient::Reqwest(build_reqwest(cfg)?)),
            UpstreamClientKind::Hyper => match proxied_upstream(cfg, proxies) {
                Some(host) => {
                    tracing::info!(
                        upstream = %host,
                        "a proxy variable applies to this upstream; forwarding with reqwest, which honours it, instead of the hyper client"
                    );
                    Ok(UpstreamClient::Reqwest(build_reqwest(cfg)?))
                }
                None => Ok(UpstreamClient::Hyper(Box::new(build_hyper(cfg)?))),
            },
        }
    }

    /// Which client this is (after any fallback).
    pub fn kind(&self) -> UpstreamClientKind {
        match self {
            UpstreamClient::Reqwest(_) => UpstreamClientKind::Reqwest,
            UpstreamClient::Hyper(_) => UpstreamClientKind::Hyper,
        }
    }

    /// Send a request; resolves when the response headers have arrived.
    pub async fn send(
        &self,
        method: Method,
        url: reqwest::Url,
        headers: HeaderMap,
        body: RequestBody,
    ) -> Result<UpstreamResponse, SendError> {
        match self {
            UpstreamClient::Reqwest(client) => {
                let body = match body {
                    // reqwest sends a body of pieces chunked; one buffer keeps its length.
                    RequestBody::Whole(payload) => reqwest::Body::from(payload.to_bytes()),
                    // Its length, when declared, is in `headers`.
                    RequestBody::Arriving(arriving) => {
                        reqwest::Body::wrap_stream(BodyDataStream::new(arriving))
                    }
                };
                client
                    .request(method, url)
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .map(UpstreamResponse::Reqwest)
                    .map_err(SendError::Reqwest)
            }
            UpstreamClient::Hyper(client) => {
                // A parsed `Url` is a valid URI; should it ever not be, it is a request error.
                let uri: Uri = url
                    .as_str()
                    .parse()
                    .map_err(|e: http::uri::InvalidUri| SendError::Uri(e.to_string()))?;
                let mut request = http::Request::new(PayloadBody::new(body));
                *request.method_mut() = method;
                *request.uri_mut() = uri;
                *request.headers_mut() = headers;
                client
                    .request(request)
                    .await
                    .map(UpstreamResponse::Hyper)
                    .map_err(SendError::Hyper)
            }
        }
    }
}

/// What goes upstream: a body cachet has read (whole, perhaps spliced from pieces), or one
/// it passes on as it arrives ([`ArrivingBody`]).
pub enum RequestBody {
    Whole(Payload),
    Arriving(ArrivingBody),
}

fn build_reqwest(cfg: &UpstreamConfig) -> anyhow::Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_millis(cfg.connect_timeout_ms))
        .redirect(reqwest::redirect::Policy::none())
        .pool_idle_timeout(POOL_IDLE)
        .tcp_nodelay(true)
        .build()?)
}

fn build_hyper(cfg: &UpstreamConfig) -> anyhow::Result<HyperClient> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    // reqwest's socket defaults, so a dead upstream connection is noticed alike.
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_keepalive_interval(Some(TCP_KEEPALIVE));
    http.set_keepalive_retries(Some(3));
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    http.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    // The same TLS as reqwest's `rustls-tls`: the process's crypto provider if one was
    // installed, else ring; TLS 1.2 and 1.3; the webpki roots; ALPN `h2`, `http/1.1`.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| std::sync::Arc::new(rustls::crypto::ring::default_provider()));
    let https = HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(ConnectTimeout {
            inner: https,
            timeout: Duration::from_millis(cfg.connect_timeout_ms),
        }))
}

/// The host of the first upstream a proxy variable applies to, if any.
fn proxied_upstream(cfg: &UpstreamConfig, proxies: &Matcher) -> Option<String> {
    [&cfg.anthropic, &cfg.openai].into_iter().find_map(|base| {
        let uri: Uri = base.parse().ok()?;
        proxies.intercept(&uri)?;
        Some(uri.host().unwrap_or("upstream").to_string())
    })
}

/// A connector bounded in time as a whole (TCP connect and TLS handshake), as reqwest's
/// `connect_timeout` is; a time-out is an `io::ErrorKind::TimedOut`.
#[derive(Clone)]
pub struct ConnectTimeout<C> {
    inner: C,
    timeout: Duration,
}

type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<C> tower_service::Service<Uri> for ConnectTimeout<C>
where
    C: tower_service::Service<Uri> + Send,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Connecting<C::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Connecting<C::Response> {
        let connecting = self.inner.call(dst);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "connect timed out",
                )) as BoxError),
            }
        })
    }
}

/// A failure to get response headers.
#[derive(Debug)]
pub enum SendError {
    Reqwest(reqwest::Error),
    Hyper(hyper_util::client::legacy::Error),
    /// The URL could not be turned into a request URI.
    Uri(String),
}

impl SendError {
    /// A time-out anywhere in the chain (connecting, or an I/O time-out), as reqwest's
    /// `is_timeout` reads it.
    pub fn is_timeout(&self) -> bool {
        match self {
            SendError::Reqwest(e) => e.is_timeout(),
            SendError::Hyper(e) => chain(e).any(|s| {
                s.downcast_ref::<hyper::Error>()
                    .is_some_and(hyper::Error::is_timeout)
                    || s.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            }),
            SendError::Uri(_) => false,
        }
    }

    /// The connection (TCP or TLS) could not be established.
    pub fn is_connect(&self) -> bool {
        match self {
            SendError::Reqwest(e) => e.is_connect(),
            SendError::Hyper(e) => e.is_connect(),
            SendError::Uri(_) => false,
        }
    }

    /// The innermost cause (refused, unresolvable, the TLS alert), never a URL.
    pub fn root_cause(&self) -> String {
        let source = match self {
            SendError::Reqwest(e) => chain(e).last(),
            SendError::Hyper(e) => chain(e).last(),
            SendError::Uri(_) => None,
        };
        source.map(ToString::to_string).unwrap_or_default()
    }

    /// What went wrong, without the URL (reqwest names it in its message).
    pub fn describe(&self) -> String {
        match self {
            SendError::Reqwest(e) => {
                let mut s = e.to_string();
                if let Some(url) = e.url() {
                    s = s.replace(url.as_str(), "");
                }
                s
            }
            SendError::Hyper(e) => match chain(e).last() {
                Some(cause) => format!("{e}: {cause}"),
                None => e.to_string(),
            },
            SendError::Uri(_) => "the request URL is not a valid URI".to_string(),
        }
    }
}

/// The sources of an error, outermost first (the error itself excluded).
fn chain<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(err.source(), |e| (*e).source())
}

/// An upstream response whose headers have arrived; its body is still to be read.
pub enum UpstreamResponse {
    Reqwest(reqwest::Response),
    Hyper(http::Response<Incoming>),
}

impl UpstreamResponse {
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamResponse::Reqwest(r) => r.status(),
            UpstreamResponse::Hyper(r) => r.status(),
        }
    }

    pub fn headers(&self) -> &HeaderMap {
        match self {
            UpstreamResponse::Reqwest(r) => r.headers(),
            UpstreamResponse::Hyper(r) => r.headers(),
        }
    }

    /// The body, chunk by chunk as it arrives.
    pub fn into_body(self) -> UpstreamBody {
        match self {
            UpstreamResponse::Reqwest(r) => UpstreamBody::Reqwest(Box::pin(r.bytes_stream())),
            UpstreamResponse::Hyper(r) => UpstreamBody::Hyper(BodyDataStream::new(r.into_body())),
        }
    }

    /// The whole body.
    pub async fn bytes(self) -> Result<Bytes, BodyError> {
        match self {
            UpstreamResponse::Reqwest(r) => r.bytes().await.map_err(BodyError::Reqwest),
            UpstreamResponse::Hyper(r) => r
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .map_err(BodyError::Hyper),
        }
    }
}

/// A request body sent piece by piece, its length known: the upstream connection writes
/// the pieces as they are (a vectored write on a plain connection), so a spliced body is
/// never copied together on its way out. Or a body still arriving from the client.
pub enum PayloadBody {
    Pieces {
        pieces: std::vec::IntoIter<Bytes>,
        left: u64,
    },
    Arriving(ArrivingBody),
}

impl PayloadBody {
    pub fn new(body: RequestBody) -> PayloadBody {
        match body {
            RequestBody::Whole(payload) => PayloadBody::Pieces {
                left: payload.len() as u64,
                pieces: payload.into_pieces().into_iter(),
            },
            RequestBody::Arriving(arriving) => PayloadBody::Arriving(arriving),
        }
    }
}

impl hyper::body::Body for PayloadBody {
    type Data = Bytes;
    type Error = CutOff;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            PayloadBody::Pieces { pieces, left } => {
                let next = pieces.next();
                if let Some(piece) = &next {
                    *left -= piece.len() as u64;
                }
                Poll::Ready(next.map(|piece| Ok(hyper::body::Frame::data(piece))))
            }
            PayloadBody::Arriving(arriving) => Pin::new(arriving).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            PayloadBody::Pieces { left, .. } => *left == 0,
            PayloadBody::Arriving(arriving) => arriving.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            PayloadBody::Pieces { left, .. } => hyper::body::SizeHint::with_exact(*left),
            PayloadBody::Arriving(arriving) => arriving.size_hint(),
        }
    }
}

type ReqwestChunks = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A response body as a stream of data chunks (trailers skipped).
pub enum UpstreamBody {
    Reqwest(ReqwestChunks),
    Hyper(BodyDataStream<Incoming>),
}

impl Stream for UpstreamBody {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.get_mut() {
            UpstreamBody::Reqwest(s) => s
                .as_mut()
                .poll_next(cx)
                .map(|c| c.map(|r| r.map_err(BodyError::Reqwest))),
            UpstreamBody::Hyper(s) => Pin::new(s)
                .poll_next(cx)
                .map(|c| c.map(|r| r.map_err(BodyError::Hyper))),
        }
    }
}

/// A response body that broke off.
#[derive(Debug)]
pub enum BodyError {
    Reqwest(reqwest::Error),
    Hyper(hyper::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Reqwest(e) => e.fmt(f),
            // hyper's message names the kind ("error reading a body from connection"); the
            // cause says why (an early end of the connection, a reset stream).
            BodyError::Hyper(e) => match e.source() {
                Some(cause) => write!(f, "{e}: {cause}"),
                None => e.fmt(f),
            },
        }
    }
}

impl StdError for BodyError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            BodyError::Reqwest(e) => e.source(),
            BodyError::Hyper(e) => e.source(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hyper_config() -> UpstreamConfig {
        UpstreamConfig {
            openai: "http://127.0.0.1:9/v1".into(),
            client: UpstreamClientKind::Hyper,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn the_hyper_client_is_built_when_no_proxy_applies() {
        let none = Matcher::builder().build();
        let client = UpstreamClient::build_with_proxies(&hyper_config(), &none).unwrap();
        assert_eq!(client.kind(), UpstreamClientKind::Hyper);
        // An HTTPS proxy for a host NO_PROXY exempts (and an http upstream it does not
        // cover) leaves every upstream direct.
        let exempt = Matcher::builder()
            .https("http://proxy.internal:3128")
            .no("api.anthropic.com")
            .build();
        let client = UpstreamClient::build_with_proxies(&hyper_config(), &exempt).unwrap();
        assert_eq!(client.kind(), UpstreamClientKind::Hyper);
    }

    #[tokio::test]
    async fn a_proxy_for_an_upstream_falls_back_to_reqwest() {
        // HTTPS_PROXY covers the default Anthropic upstream (https://api.anthropic.com).
        let https = Matcher::builder()
            .https("http://proxy.internal:3128")
            .build();
        let client = UpstreamClient::build_with_proxies(&hyper_config(), &https).unwrap();
        assert_eq!(client.kind(), UpstreamClientKind::Reqwest);
        // HTTP_PROXY covers the plain-http OpenAI upstream of this configuration.
        let http = Matcher::builder()
            .http("http://proxy.internal:3128")
            .build();
        let client = UpstreamClient::build_with_proxies(&hyper_config(), &http).unwrap();
        assert_eq!(client.kind(), UpstreamClientKind::Reqwest);
        // reqwest chosen outright is reqwest, proxies or not.
        let cfg = UpstreamConfig {
            client: UpstreamClientKind::Reqwest,
            ..Default::default()
        };
        let client = UpstreamClient::build_with_proxies(&cfg, &https).unwrap();
        assert_eq!(client.kind(), UpstreamClientKind::Reqwest);
    }
}
