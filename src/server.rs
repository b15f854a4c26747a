//! The proxy listener: accept, validate, forward, stream back untouched, tap usage.
//!
//! Phases of one request, in order (DESIGN §1): classify the route → read the body within the
//! limit → check its shape → (policy pipeline, when one applies) → forward → stream the answer
//! back through the usage tap → record metrics when the body ends.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin;
use crate::cli::ServeArgs;
use crate::config::Config;
use crate::content_encoding;
use crate::error::{ApiError, ErrorKind};
use crate::forward::{self, Upstreams};
use crate::metrics::Metrics;
use crate::pipeline::{AfterResponse, Pipeline};
use crate::provider::{classify, Endpoint, Provider, Route};
use crate::replay::recorder::{self, Recorder, RecorderTask};
use crate::shape;
use crate::tap::{Outcome, Tap, TapResult, TapStream};

pub type ProxyBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Everything a request handler needs, shared by all connections.
pub struct State {
    pub config: Config,
    pub client: reqwest::Client,
    pub upstreams: Upstreams,
    pub metrics: Arc<Metrics>,
    /// Policies, hooks and sessions; `None` when no policy is active (pure pass-through).
    pub pipeline: Option<Arc<Pipeline>>,
    /// Trace recording (`--record DIR`); off by default.
    pub recorder: Option<Recorder>,
}

/// A running proxy (and its admin listener).
pub struct ProxyHandle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    recorder: Option<RecorderTask>,
}

impl ProxyHandle {
    /// Stop accepting, let requests in flight finish (within the grace period), then return.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Some(recorder) = self.recorder {
            // Every queued trace record reaches the disk before the process ends.
            let _ = tokio::time::timeout(Duration::from_secs(10), recorder.finish()).await;
        }
    }
}

/// Bind both listeners (port 0 allowed) and serve in the background.
pub async fn spawn(config: Config) -> anyhow::Result<ProxyHandle> {
    let listener = TcpListener::bind(config.server.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.server.listen))?;
    let admin_listener = TcpListener::bind(config.server.admin_listen)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot listen on {} (admin): {e}",
                config.server.admin_listen
            )
        })?;
    let policies = crate::policy::load_policies(&config.policies.files, &config.policies.dirs)
        .map_err(|errors| {
            anyhow::anyhow!(
                "invalid policies:\n{}",
                crate::policy::render_errors(&errors)
            )
        })?;
    let metrics = Arc::new(Metrics::new());
    let pipeline = Pipeline::new(&config, policies, metrics.clone())
        .await?
        .map(Arc::new);
    let (recorder, recorder_task) = match &config.record.dir {
        Some(dir) => {
            let (r, t) = Recorder::start(dir, recorder::DEFAULT_QUEUE)
                .map_err(|e| anyhow::anyhow!("cannot record traces into {}: {e}", dir.display()))?;
            (Some(r), Some(t))
        }
        None => (None, None),
    };
    let state = Arc::new(State {
        recorder,
        client: forward::build_client(&config.upstream)?,
        upstreams: Upstreams::from_config(&config.upstream)?,
        metrics,
        pipeline,
        config,
    });
    let addr = listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let (tx, rx) = watch::channel(false);
    let grace = Duration::from_secs(state.config.server.shutdown_grace_secs);
    let header_timeout = Duration::from_millis(state.config.server.header_read_timeout_ms);
    let proxy_state = state.clone();
    let proxy_task = tokio::spawn(serve_connections(
        listener,
        rx.clone(),
        grace,
        header_timeout,
        move |req| {
            let state = proxy_state.clone();
            async move { Ok::<_, Infallible>(handle(state, req).await) }
        },
    ));
    let admin_state = state.clone();
    let admin_task = tokio::spawn(serve_connections(
        admin_listener,
        rx,
        grace,
        header_timeout,
        move |req| {
            let state = admin_state.clone();
            async move { Ok::<_, Infallible>(admin::handle(&state, req).await) }
        },
    ));
    Ok(ProxyHandle {
        addr,
        admin_addr,
        metrics: state.metrics.clone(),
        shutdown: tx,
        tasks: vec![proxy_task, admin_task],
        recorder: recorder_task,
    })
}

/// Accept loop with graceful shutdown: on the signal, stop accepting and wait (up to
/// `grace`) for connections in flight, streams included, to finish.
pub async fn serve_connections<F, Fut>(
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
    header_timeout: Duration,
    handler: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let io = hyper_util::rt::TokioIo::new(stream);
                let svc = hyper::service::service_fn(handler.clone());
                // A client that never finishes its request head must not hold a
                // connection forever.
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(header_timeout)
                    .serve_connection(io, svc);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("connection ended with an error: {e}");
                    }
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            tracing::warn!("shutdown grace period ended with connections still open");
        }
    }
}

pub fn full(body: impl Into<Bytes>) -> ProxyBody {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A provider-format error response.
pub fn error_response(provider: Provider, err: &ApiError) -> Response<ProxyBody> {
    let mut resp = Response::new(full(err.body(provider)));
    *resp.status_mut() = err.status();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut()
        .insert("x-cachet-error", HeaderValue::from_static("1"));
    resp
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<ProxyBody> {
    let start = Instant::now();
    let Some(route) = classify(req.method(), req.uri().path(), req.headers()) else {
        return local_response(&req);
    };
    let mut model = String::from("unknown");
    match proxy(&state, route, req, start, &mut model).await {
        Ok(resp) => resp,
        Err(err) => {
            tracing::info!(
                provider = route.provider.label(),
                endpoint = route.endpoint.label(),
                status = err.status().as_u16(),
                "request refused: {}",
                err.message
            );
            state.metrics.record_request(
                route.provider,
                route.endpoint,
                &model,
                err.status().as_str(),
                "none",
                None,
            );
            error_response(route.provider, &err)
        }
    }
}

/// Answers for paths outside `/v1/`: Claude Code probes `HEAD /` (or `/api/hello`) before
/// its first request.
fn local_response(req: &Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    if matches!(path, "/" | "/api/hello") && matches!(*req.method(), Method::HEAD | Method::GET) {
        return Response::new(full("cachet\n"));
    }
    let provider = if req.headers().contains_key("anthropic-version") {
        Provider::Anthropic
    } else {
        Provider::OpenAi
    };
    let err = ApiError::new(
        ErrorKind::NotFound,
        format!("no route for {} {path}", req.method()),
    );
    // A client pointed at the wrong base URL shows up here (path only: never a query).
    tracing::info!(status = 404, "{}", err.message);
    error_response(provider, &err)
}

async fn read_body(body: Incoming, declared: Option<u64>, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = |n: String| {
        ApiError::new(
            ErrorKind::TooLarge,
            format!("request body is {n}, larger than the limit of {limit} bytes"),
        )
    };
    if let Some(len) = declared.filter(|&l| l > limit as u64) {
        return Err(too_large(format!("{len} bytes")));
    }
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(too_large("over the limit".into()))
        }
        Err(e) => Err(ApiError::invalid(format!(
            "could not read the request body: {e}"
        ))),
    }
}

async fn proxy(
    state: &Arc<State>,
    route: Route,
    req: Request<Incoming>,
    start: Instant,
    model: &mut String,
) -> Result<Response<ProxyBody>, ApiError> {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let limit = state.config.server.max_body_bytes;
    let body = read_body(body, declared, limit).await?;
    let generation_like = matches!(
        route.endpoint,
        Endpoint::Messages | Endpoint::CountTokens | Endpoint::Chat | Endpoint::Responses
    );
    let body = if generation_like {
        content_encoding::decode(&parts.headers, body, limit)?
    } else {
        content_encoding::Decoded {
            sent: body,
            plain: None,
        }
    };
    // Policies read the body whatever `check_body` says, so it is always checked for them.
    if generation_like && (state.config.server.check_body || state.pipeline.is_some()) {
        *model = shape::check(route.endpoint, body.readable())?;
    }
    let trace = state
        .recorder
        .as_ref()
        .filter(|_| route.endpoint.is_generation())
        .and_then(|_| trace_record(route, &parts, body.readable()));
    let (body, decoded, variant, after) = match &state.pipeline {
        Some(pipeline) if route.endpoint.is_generation() => {
            let readable = body.readable().clone();
            let prepared = pipeline
                .prepare(route, &parts.headers, readable, model)
                .await?;
            let (body, decoded) = body.forward(prepared.body);
            (body, decoded, prepared.variant, prepared.after)
        }
        _ => (body.sent, false, "none".to_string(), None),
    };

    let identity = route.endpoint.is_generation();
    let mut headers = state
        .upstreams
        .request_headers(route.provider, &parts.headers, identity);
    if decoded {
        headers.remove(http::header::CONTENT_ENCODING);
    }
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let url = state.upstreams.url(route.provider, path_and_query);
    let host = state.upstreams.host(route.provider);
    let metrics = state.metrics.clone();
    let timers = metrics.route(route.provider, route.endpoint);
    timers.overhead.observe(start.elapsed().as_secs_f64());

    let sent = Instant::now();
    let request = state
        .client
        .request(parts.method.clone(), url)
        .headers(headers)
        .body(body);
    let timeout = Duration::from_millis(state.config.upstream.response_timeout_ms);
    let upstream = match tokio::time::timeout(timeout, request.send()).await {
        Err(_) => {
            return Err(ApiError::new(
                ErrorKind::Timeout,
                format!(
                    "upstream {host} did not answer within {} ms",
                    timeout.as_millis()
                ),
            ))
        }
        Ok(Err(e)) => return Err(forward::send_error(&e, host)),
        Ok(Ok(resp)) => resp,
    };
    timers.first_byte.observe(sent.elapsed().as_secs_f64());

    let status = upstream.status();
    let response_headers = forward::response_headers(upstream.headers());
    let sse = response_headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.starts_with("text/event-stream"))
        .unwrap_or(false);
    // The stream's events are kept only when a turn_end handler needs the assistant message.
    let keep_events = after.as_ref().is_some_and(|a| a.wants_assistant);
    let tap = Tap::new(route.endpoint, sse, keep_events);
    let model = model.clone();
    let pipeline = state.pipeline.clone();
    let recorder = state.recorder.clone();
    let on_finish = Box::new(move |result: TapResult| {
        // An unchecked body leaves the model to the response.
        let model = match (&result.model, model.as_str()) {
            (Some(answered), "unknown") => answered.as_str(),
            _ => model.as_str(),
        };
        finish_request(&metrics, route, model, &variant, status, sent, &result);
        if let (Some(recorder), Some(mut record)) = (recorder, trace) {
            record.usage = result.usage;
            record.status = Some(status.as_u16());
            recorder.record(record);
        }
        if let (Some(pipeline), Some(after)) = (pipeline, after) {
            spawn_after_response(pipeline, after, result, status.as_u16());
        }
    });
    let idle = Duration::from_millis(state.config.upstream.idle_timeout_ms);
    let stream = TapStream::new(upstream.bytes_stream(), tap, sse, idle, on_finish);
    let body = StreamBody::new(stream.map_ok(Frame::data)).boxed_unsync();
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    *resp.headers_mut() = response_headers;
    Ok(resp)
}

/// The trace record of a request as the client sent it (secrets redacted by `capture`).
fn trace_record(
    route: Route,
    parts: &http::request::Parts,
    body: &Bytes,
) -> Option<crate::replay::trace::Record> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let session =
        crate::session::identify(&parts.headers, &value, route.provider, route.endpoint).id;
    Some(recorder::capture(
        crate::session::entry::now_ms(),
        &session,
        route,
        parts.uri.path(),
        &parts.headers,
        &value,
    ))
}

/// Turn-end handlers and the session log run in their own task once the body has ended.
fn spawn_after_response(
    pipeline: Arc<Pipeline>,
    after: AfterResponse,
    result: TapResult,
    status: u16,
) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(pipeline.after_response(after, result, status));
        }
        Err(_) => tracing::warn!("response ended outside the runtime; session entry not recorded"),
    }
}

fn finish_request(
    metrics: &Metrics,
    route: Route,
    model: &str,
    variant: &str,
    status: reqwest::StatusCode,
    sent: Instant,
    result: &TapResult,
) {
    let labels = [route.provider.label(), route.endpoint.label()];
    metrics
        .route(route.provider, route.endpoint)
        .total
        .observe(sent.elapsed().as_secs_f64());
    if result.outcome != Outcome::Complete {
        metrics
            .stream_errors
            .with_label_values(&[labels[0], labels[1], result.outcome.label()])
            .inc();
    }
    metrics.record_request(
        route.provider,
        route.endpoint,
        model,
        status.as_str(),
        variant,
        result.usage.as_ref(),
    );
    tracing::info!(
        provider = labels[0],
        endpoint = labels[1],
        status = status.as_u16(),
        outcome = result.outcome.label(),
        cache_read = result.usage.map(|u| u.cache_read),
        cache_write = result.usage.map(|u| u.cache_write),
        uncached = result.usage.map(|u| u.uncached),
        ms = sent.elapsed().as_millis() as u64,
        "request done"
    );
}

/// Apply command-line flags over the configuration file.
pub fn config_from_args(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(args.policy.config.as_deref())?;
    if let Some(a) = args.listen {
        config.server.listen = a;
    }
    if let Some(a) = args.admin_listen {
        config.server.admin_listen = a;
    }
    if let Some(u) = &args.anthropic_upstream {
        config.upstream.anthropic = u.clone();
    }
    if let Some(u) = &args.openai_upstream {
        config.upstream.openai = u.clone();
    }
    config
        .policies
        .files
        .extend(args.policy.policy.iter().cloned());
    config
        .policies
        .dirs
        .extend(args.policy.policies.iter().cloned());
    if let Some(s) = &args.store {
        config.sessions.store = s.clone();
    }
    if let Some(d) = &args.record {
        config.record.dir = Some(d.clone());
    }
    config.policies.strict |= args.strict;
    Ok(config)
}

/// Set up structured logs once (text or JSON), `RUST_LOG` overriding the configured level.
pub fn init_logging(config: &Config) {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::EnvFilter;
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log.level.clone());
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr);
    // A plain level is checked once per call site; a full filter (`cachet=debug,...`) is
    // evaluated per event, which costs measurably on the request path.
    let _ = match (spec.trim().parse::<LevelFilter>(), config.log.format) {
        (Ok(level), crate::config::LogFormat::Json) => {
            builder.with_max_level(level).json().try_init()
        }
        (Ok(level), crate::config::LogFormat::Text) => builder.with_max_level(level).try_init(),
        (Err(_), format) => {
            let builder = builder.with_env_filter(EnvFilter::new(spec));
            match format {
                crate::config::LogFormat::Json => builder.json().try_init(),
                crate::config::LogFormat::Text => builder.try_init(),
            }
        }
    };
}

/// Wait for Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = config_from_args(&args)?;
    init_logging(&config);
    let handle = spawn(config).await?;
    println!(
        "cachet listening on http://{} (admin: http://{}/metrics)",
        handle.addr, handle.admin_addr
    );
    shutdown_signal().await;
    tracing::info!("shutting down; draining requests in flight");
    handle.shutdown().await;
    Ok(())
}
