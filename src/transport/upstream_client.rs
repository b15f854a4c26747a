//! The HTTP client that forwards requests upstream: hyper-util's pooled client. It speaks
//! HTTP/1.1 and HTTP/2 (ALPN) over rustls with the webpki roots and ring, keeps idle
//! connections 90 s, sets `TCP_NODELAY`, TCP keep-alive and a user time-out, bounds
//! connecting (TCP, a proxy's tunnel and TLS) by `upstream.connect_timeout_ms`, follows no
//! redirects and decompresses nothing: the client's headers go as they came. It reaches an
//! upstream through a proxy when `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY` applies to it
//! (`NO_PROXY` exempts hosts), the variables read as reqwest reads them: an `https` upstream
//! through a `CONNECT` tunnel, a plain `http` one by asking the proxy for the absolute URL.
//! Its errors become client-facing answers in [`crate::transport::forward::send_error`].

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::Stream;
use http::uri::Scheme;
use http::{HeaderMap, Method, StatusCode, Uri};
use http_body_util::{BodyDataStream, BodyExt};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tower_service::Service;

use crate::config::UpstreamConfig;
use crate::envelope::Payload;
use crate::transport::arriving::{ArrivingBody, CutOff};

/// How long an idle pooled connection is kept.
const POOL_IDLE: Duration = Duration::from_secs(90);
/// TCP keep-alive time and probe interval.
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);

type BoxError = Box<dyn StdError + Send + Sync>;
type HyperClient = Client<ConnectTimeout<HttpsConnector<Via>>, PayloadBody>;

/// The upstream client the pipeline forwards through.
#[derive(Clone)]
pub struct UpstreamClient {
    client: HyperClient,
    /// HTTP/1.1 only: a WebSocket handshake is an HTTP/1.1 upgrade (RFC 6455 §4.1), which
    /// an `h2` connection cannot carry.
    upgrades: HyperClient,
    /// The proxy variables, read once: a request to a plain `http` upstream through an
    /// HTTP proxy carries the proxy's credentials itself.
    proxies: Arc<Matcher>,
}

impl UpstreamClient {
    /// The client, reaching each upstream directly or through the proxy the environment
    /// names for it.
    pub fn build(cfg: &UpstreamConfig) -> anyhow::Result<Self> {
        Self::build_with_proxies(cfg, Matcher::from_system())
    }

    /// [`UpstreamClient::build`] with the proxy settings given rather than read.
    fn build_with_proxies(cfg: &UpstreamConfig, proxies: Matcher) -> anyhow::Result<Self> {
        let proxies = Arc::new(proxies);
        for base in [&cfg.anthropic, &cfg.openai, &cfg.chatgpt] {
            let Ok(uri) = base.parse::<Uri>() else {
                continue;
            };
            let Some(proxy) = proxies.intercept(&uri) else {
                continue;
            };
            // The proxy's address (the matcher keeps its credentials apart).
            let upstream = uri.host().unwrap_or("upstream");
            let address = proxy.uri().authority().map_or("", |a| a.as_str());
            match http_proxy(proxy.uri()) {
                true => tracing::info!(upstream, proxy = address, "reaching this upstream through a proxy"),
                false => tracing::warn!(
                    upstream,
                    proxy = address,
                    "a proxy variable names a SOCKS proxy for this upstream, which cachet cannot speak through: requests to it will fail"
                ),
            }
        }
        Ok(UpstreamClient {
            client: build_hyper(cfg, proxies.clone(), true)?,
            upgrades: build_hyper(cfg, proxies.clone(), false)?,
            proxies,
        })
    }

    /// Send a request; resolves when the response headers have arrived.
    pub async fn send(
        &self,
        method: Method,
        url: reqwest::Url,
        headers: HeaderMap,
        body: RequestBody,
    ) -> Result<UpstreamResponse, SendError> {
        self.send_on(&self.client, method, url, headers, body).await
    }

    /// Send a WebSocket handshake (a `GET` with `upgrade: websocket`) over HTTP/1.1; a 101
    /// answer's connection is then the socket ([`UpstreamResponse::upgrade`]).
    pub async fn send_upgrade(
        &self,
        url: reqwest::Url,
        headers: HeaderMap,
    ) -> Result<UpstreamResponse, SendError> {
        let body = RequestBody::Whole(Payload::from(Bytes::new()));
        self.send_on(&self.upgrades, Method::GET, url, headers, body)
            .await
    }

    async fn send_on(
        &self,
        client: &HyperClient,
        method: Method,
        url: reqwest::Url,
        mut headers: HeaderMap,
        body: RequestBody,
    ) -> Result<UpstreamResponse, SendError> {
        // A parsed `Url` is a valid URI; should it ever not be, it is a request error.
        let uri: Uri = url
            .as_str()
            .parse()
            .map_err(|e: http::uri::InvalidUri| SendError::Uri(e.to_string()))?;
        // Through a proxy, a plain-http request goes to the proxy itself, which reads its
        // credentials from the request (an https one carries them in its tunnel's CONNECT).
        if uri.scheme() == Some(&Scheme::HTTP) {
            if let Some(auth) = self
                .proxies
                .intercept(&uri)
                .and_then(|p| p.basic_auth().cloned())
            {
                headers.insert(http::header::PROXY_AUTHORIZATION, auth);
            }
        }
        let mut request = http::Request::new(PayloadBody::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri;
        *request.headers_mut() = headers;
        client
            .request(request)
            .await
            .map(UpstreamResponse)
            .map_err(SendError::Hyper)
    }
}

/// What goes upstream: a body cachet has read (whole, perhaps spliced from pieces), or one
/// it passes on as it arrives ([`ArrivingBody`]).
pub enum RequestBody {
    Whole(Payload),
    Arriving(ArrivingBody),
}

fn build_hyper(
    cfg: &UpstreamConfig,
    proxies: Arc<Matcher>,
    http2: bool,
) -> anyhow::Result<HyperClient> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    // reqwest's socket defaults, so a dead upstream connection is noticed as it noticed it.
    http.set_keepalive(Some(TCP_KEEPALIVE));
    http.set_keepalive_interval(Some(TCP_KEEPALIVE));
    http.set_keepalive_retries(Some(3));
    #[cfg(any(target_os = "android", target_os = "fuchsia", target_os = "linux"))]
    http.set_tcp_user_timeout(Some(Duration::from_secs(30)));
    // The process's crypto provider if one was installed, else ring; TLS 1.2 and 1.3; the
    // webpki roots.
    let provider = rustls::crypto::CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()));
    // To an `https://` proxy: TLS to the proxy itself, which speaks HTTP/1.1 (`CONNECT`).
    let to_proxy = HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider.clone())?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http.clone());
    let via = Via {
        direct: http,
        to_proxy,
        proxies,
    };
    // To the upstream, over whatever `Via` connected: ALPN `h2`, `http/1.1`.
    let builder = HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(provider)?
        .https_or_http()
        .enable_http1();
    let https = match http2 {
        true => builder.enable_http2().wrap_connector(via),
        false => builder.wrap_connector(via),
    };
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(ConnectTimeout {
            inner: https,
            timeout: Duration::from_millis(cfg.connect_timeout_ms),
        }))
}

/// Whether a proxy's URL is an HTTP proxy (`http://` or `https://`), which cachet speaks
/// through; the matcher also hands out SOCKS proxies, which it does not.
fn http_proxy(proxy: &Uri) -> bool {
    matches!(proxy.scheme_str(), Some("http" | "https"))
}

/// The connection under TLS: to the upstream itself, or through the proxy the environment
/// names for it (a tunnel for an `https` upstream; for a plain `http` one the connection to
/// the proxy, which is then sent absolute URLs).
#[derive(Clone)]
struct Via {
    direct: HttpConnector,
    to_proxy: HttpsConnector<HttpConnector>,
    proxies: Arc<Matcher>,
}

impl Via {
    async fn connect(mut self, dst: Uri) -> Result<Hop, BoxError> {
        let Some(proxy) = self.proxies.intercept(&dst) else {
            let tcp = self.direct.call(dst).await?;
            return Ok(Hop {
                io: MaybeHttpsStream::Http(tcp),
                proxied: false,
            });
        };
        if !http_proxy(proxy.uri()) {
            let scheme = proxy.uri().scheme_str().unwrap_or_default();
            return Err(format!("the proxy for this upstream is a {scheme} proxy; cachet speaks only through HTTP proxies (http:// or https://)").into());
        }
        if dst.scheme() == Some(&Scheme::HTTPS) {
            let mut tunnel = Tunnel::new(proxy.uri().clone(), self.to_proxy);
            if let Some(auth) = proxy.basic_auth() {
                tunnel = tunnel.with_auth(auth.clone());
            }
            let io = tunnel.call(dst).await?;
            return Ok(Hop { io, proxied: false });
        }
        let io = self.to_proxy.call(proxy.uri().clone()).await?;
        Ok(Hop { io, proxied: true })
    }
}

impl Service<Uri> for Via {
    type Response = Hop;
    type Error = BoxError;
    type Future = Connecting<Hop>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Each connection is made by a clone, whose connectors are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Connecting<Hop> {
        Box::pin(self.clone().connect(dst))
    }
}

/// A connection [`Via`] made: to the upstream, through a proxy's tunnel, or to an HTTP
/// proxy that is sent absolute URLs (`proxied`).
struct Hop {
    io: MaybeHttpsStream<TokioIo<tokio::net::TcpStream>>,
    proxied: bool,
}

impl Connection for Hop {
    fn connected(&self) -> Connected {
        self.io.connected().proxy(self.proxied)
    }
}

impl hyper::rt::Read for Hop {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Hop {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A connector bounded in time as a whole (TCP connect, a proxy's tunnel and the TLS
/// handshake); a time-out is an `io::ErrorKind::TimedOut`.
#[derive(Clone)]
pub struct ConnectTimeout<C> {
    inner: C,
    timeout: Duration,
}

type Connecting<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<C> Service<Uri> for ConnectTimeout<C>
where
    C: Service<Uri> + Send,
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
    Hyper(hyper_util::client::legacy::Error),
    /// The URL could not be turned into a request URI.
    Uri(String),
}

impl SendError {
    /// A time-out anywhere in the chain (connecting, or an I/O time-out).
    pub fn is_timeout(&self) -> bool {
        match self {
            SendError::Hyper(e) => chain(e).any(|s| {
                s.downcast_ref::<hyper::Error>()
                    .is_some_and(hyper::Error::is_timeout)
                    || s.downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
            }),
            SendError::Uri(_) => false,
        }
    }

    /// The connection (TCP, a proxy's tunnel or TLS) could not be established.
    pub fn is_connect(&self) -> bool {
        match self {
            SendError::Hyper(e) => e.is_connect(),
            SendError::Uri(_) => false,
        }
    }

    /// The innermost cause (refused, unresolvable, the TLS alert, the proxy's refusal),
    /// never a URL.
    pub fn root_cause(&self) -> String {
        let source = match self {
            SendError::Hyper(e) => chain(e).last(),
            SendError::Uri(_) => None,
        };
        source.map(ToString::to_string).unwrap_or_default()
    }

    /// What went wrong, without the URL.
    pub fn describe(&self) -> String {
        match self {
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
pub struct UpstreamResponse(http::Response<Incoming>);

impl UpstreamResponse {
    pub fn status(&self) -> StatusCode {
        self.0.status()
    }

    pub fn headers(&self) -> &HeaderMap {
        self.0.headers()
    }

    /// The body, chunk by chunk as it arrives.
    pub fn into_body(self) -> UpstreamBody {
        UpstreamBody(BodyDataStream::new(self.0.into_body()))
    }

    /// The connection a 101 answer switched to another protocol, once it is handed over.
    pub fn upgrade(self) -> hyper::upgrade::OnUpgrade {
        hyper::upgrade::on(self.0)
    }

    /// The whole body.
    pub async fn bytes(self) -> Result<Bytes, BodyError> {
        self.0
            .into_body()
            .collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(BodyError)
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

/// A response body as a stream of data chunks (trailers skipped).
pub struct UpstreamBody(BodyDataStream<Incoming>);

impl Stream for UpstreamBody {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.get_mut().0)
            .poll_next(cx)
            .map(|c| c.map(|r| r.map_err(BodyError)))
    }
}

/// A response body that broke off.
#[derive(Debug)]
pub struct BodyError(hyper::Error);

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // hyper's message names the kind ("error reading a body from connection"); the
        // cause says why (an early end of the connection, a reset stream).
        match self.0.source() {
            Some(cause) => write!(f, "{}: {cause}", self.0),
            None => self.0.fmt(f),
        }
    }
}

impl StdError for BodyError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Mutex;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// What a test's server saw: each connection's request head (or first bytes).
    type Seen = Arc<Mutex<Vec<Vec<u8>>>>;

    /// Read until the end of a request head (or the first read when `raw`), returned with
    /// what came after it.
    async fn read_head(stream: &mut TcpStream, raw: bool) -> (Vec<u8>, Vec<u8>) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            buf.extend_from_slice(&chunk[..n]);
            if n == 0 || raw {
                return (buf, Vec::new());
            }
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let rest = buf.split_off(at + 4);
                return (buf, rest);
            }
        }
    }

    /// A small HTTP proxy, as squid or tinyproxy answer: `CONNECT host:port` is tunnelled,
    /// and a request for an absolute URL forwarded as it came, both to `target` whatever
    /// host they name (so that no name needs resolving). With `password`, a request without
    /// `user:password` in `proxy-authorization` gets a 407.
    async fn proxy(target: SocketAddr, password: Option<&'static str>) -> (String, Seen) {
        let (addr, seen) = serve(move |mut client, heads| async move {
                    let (head, rest) = read_head(&mut client, false).await;
                    heads.lock().unwrap().push(head.clone());
                    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    if let Some(p) = password {
                        use base64::Engine;
                        let want = base64::engine::general_purpose::STANDARD.encode(p);
                        if !text.contains(&format!(
                            "proxy-authorization: basic {}",
                            want.to_ascii_lowercase()
                        )) {
                            let _ = client.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n").await;
                            return;
                        }
                    }
                    let mut upstream = TcpStream::connect(target).await.unwrap();
                    if text.starts_with("connect ") {
                        client
                            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                            .await
                            .unwrap();
                    } else {
                        upstream.write_all(&head).await.unwrap();
                    }
                    upstream.write_all(&rest).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        })
        .await;
        (format!("http://{addr}"), seen)
    }

    /// A server that records the first bytes of each connection and answers a request head
    /// with `200 ok` (a TLS hello gets nothing, and the connection closes).
    async fn upstream() -> (SocketAddr, Seen) {
        serve(|mut stream, firsts| async move {
            let mut first = [0u8; 1];
            if stream.peek(&mut first).await.unwrap_or(0) == 0 {
                return;
            }
            // 0x16: a TLS handshake record.
            let (bytes, _) = read_head(&mut stream, first[0] == 0x16).await;
            let tls = bytes.first() == Some(&0x16);
            firsts.lock().unwrap().push(bytes);
            if !tls {
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
            }
        })
        .await
    }

    /// A loopback server handing each connection to `each`, with what the server records.
    async fn serve<F, Fut>(each: F) -> (SocketAddr, Seen)
    where
        F: Fn(TcpStream, Seen) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Seen::default();
        let recorded = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(each(stream, recorded.clone()));
            }
        });
        (addr, seen)
    }

    fn client(proxies: Matcher) -> UpstreamClient {
        UpstreamClient::build_with_proxies(&UpstreamConfig::default(), proxies).unwrap()
    }

    async fn post(client: &UpstreamClient, url: &str) -> Result<UpstreamResponse, SendError> {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", http::HeaderValue::from_static("sk-test"));
        let body = RequestBody::Whole(Bytes::from_static(b"{}").into());
        client
            .send(Method::POST, url.parse().unwrap(), headers, body)
            .await
    }

    fn text(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    /// A spliced body goes as its pieces, in order, each announced with what is left: the
    /// upstream gets the body's bytes with their exact length, never chunked.
    #[tokio::test]
    async fn a_spliced_body_is_sent_as_its_bytes_with_its_length() {
        use hyper::body::Body;
        let client = Bytes::from(format!(
            "{{\"messages\":[{}]}}",
            "\"step\",".repeat(2000) + "\"end\""
        ));
        let payload = Payload::from(client.clone())
            .replaced(2..10, Bytes::from_static(b"system\":\"s\",\"messages"))
            // Step 700's string, 13 bytes later for the edit before it.
            .replaced(4926..4932, Bytes::from_static(b"\"edit\""));
        assert!(payload.pieces().len() >= 4, "{:?}", payload.pieces().len());
        let expected = payload.to_bytes();
        let mut body = PayloadBody::new(RequestBody::Whole(payload));
        let mut sent = Vec::new();
        let mut left = expected.len() as u64;
        while let Some(frame) = body.frame().await {
            assert_eq!(
                body.size_hint().exact(),
                Some(left - frame.as_ref().unwrap().data_ref().unwrap().len() as u64)
            );
            let data = frame.unwrap().into_data().unwrap();
            left -= data.len() as u64;
            sent.extend_from_slice(&data);
        }
        assert!(body.is_end_stream());
        assert_eq!(sent, expected);
        let value: serde_json::Value = serde_json::from_slice(&sent).unwrap();
        assert_eq!(value["system"], "s");
        assert_eq!(value["messages"][700], "edit");
    }

    /// An https upstream behind `HTTPS_PROXY`: a `CONNECT` to its host and port with the
    /// proxy's credentials, then TLS to the upstream itself through the tunnel (its name in
    /// the hello, `h2` offered), as reqwest did.
    #[tokio::test]
    async fn an_https_upstream_is_reached_through_the_proxys_tunnel() {
        let (target, hellos) = upstream().await;
        let (proxy_url, heads) = proxy(target, Some("ann:s3cret")).await;
        let url = proxy_url.replace("http://", "http://ann:s3cret@");
        let client = client(Matcher::builder().https(url).build());
        let err = post(&client, "https://api.anthropic.test/v1/messages")
            .await
            .err()
            .expect("no TLS server behind the tunnel");
        assert!(err.is_connect(), "{}", err.describe());
        let heads = heads.lock().unwrap();
        let head = text(&heads[0]);
        assert!(
            head.starts_with("CONNECT api.anthropic.test:443 HTTP/1.1\r\n"),
            "{head}"
        );
        let hellos = hellos.lock().unwrap();
        let hello = &hellos[0];
        assert_eq!(hello[0], 0x16, "a TLS handshake through the tunnel");
        let has = |needle: &[u8]| hello.windows(needle.len()).any(|w| w == needle);
        assert!(has(b"api.anthropic.test") && has(b"h2"), "{hello:?}");
    }

    /// A proxy that refuses the credentials: a connection error that says so, never the
    /// URL or the credentials.
    #[tokio::test]
    async fn a_proxy_that_refuses_is_a_connect_error_saying_why() {
        let (target, _) = upstream().await;
        let (proxy_url, _) = proxy(target, Some("ann:s3cret")).await;
        let url = proxy_url.replace("http://", "http://ann:wrong@");
        let client = client(Matcher::builder().all(url).build());
        let err = post(&client, "https://api.anthropic.test/v1/messages")
            .await
            .err()
            .unwrap();
        assert!(err.is_connect());
        let said = format!("{} / {}", err.root_cause(), err.describe());
        assert!(said.contains("proxy authorization required"), "{said}");
        assert!(
            !said.contains("wrong") && !said.contains("anthropic.test"),
            "{said}"
        );
    }

    /// A plain-http upstream behind `HTTP_PROXY`: the request goes to the proxy for its
    /// absolute URL, with the proxy's credentials, and its answer comes back.
    #[tokio::test]
    async fn a_plain_http_upstream_is_asked_of_the_proxy_by_its_absolute_url() {
        let (target, requests) = upstream().await;
        let (proxy_url, _) = proxy(target, Some("ann:s3cret")).await;
        let url = proxy_url.replace("http://", "http://ann:s3cret@");
        let client = client(Matcher::builder().http(url).build());
        let resp = post(&client, "http://upstream.test:8080/v1/messages?beta=true")
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(&resp.bytes().await.unwrap()[..], b"ok");
        let requests = requests.lock().unwrap();
        let head = text(&requests[0]).to_ascii_lowercase();
        assert!(
            head.starts_with("post http://upstream.test:8080/v1/messages?beta=true http/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("x-api-key: sk-test"), "{head}");
    }

    /// `NO_PROXY` exempts an upstream; a proxy for the other scheme does not apply.
    #[tokio::test]
    async fn an_exempt_upstream_is_reached_directly() {
        let (target, requests) = upstream().await;
        let (proxy_url, heads) = proxy(target, None).await;
        let matcher = Matcher::builder()
            .http(proxy_url.clone())
            .no("127.0.0.1")
            .build();
        let url = format!("http://{target}/v1/messages");
        assert_eq!(post(&client(matcher), &url).await.unwrap().status(), 200);
        let other = Matcher::builder().https(proxy_url).build();
        assert_eq!(post(&client(other), &url).await.unwrap().status(), 200);
        assert!(heads.lock().unwrap().is_empty());
        let requests = requests.lock().unwrap();
        assert_eq!(requests.len(), 2);
        assert!(text(&requests[0]).starts_with("POST /v1/messages HTTP/1.1\r\n"));
    }

    /// A SOCKS proxy (which `ALL_PROXY` may name) is not spoken through: the request fails
    /// with an error that says why instead of speaking HTTP to it.
    #[tokio::test]
    async fn a_socks_proxy_is_refused_saying_why() {
        let (target, seen) = upstream().await;
        let client = client(Matcher::builder().all(format!("socks5://{target}")).build());
        let err = post(&client, "https://api.anthropic.test/v1/messages")
            .await
            .err()
            .unwrap();
        assert!(err.is_connect());
        assert!(
            err.root_cause().contains("socks5 proxy"),
            "{}",
            err.root_cause()
        );
        assert!(seen.lock().unwrap().is_empty());
    }
}
