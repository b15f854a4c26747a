//! The proxy listener and its request handler: route the request, hand it to the
//! [`Pipeline`], and render any failure once, in the client's provider format.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;

mod admin;
pub mod client_auth;

use crate::config::Config;
use crate::error::{ApiError, ErrorKind};
use crate::http_serve::{path_guard, serve_connections, ConnectionLimits};
use crate::metrics::Metrics;
use crate::pipeline::{ClientName, Pipeline};
use crate::providers::classify;
use crate::route::{Endpoint, Route};
use crate::session::store::Maintenance;
use crate::trace::recorder::{self, Recorder, RecorderTask};
use crate::transport::http::{error_response, full, ProxyBody};
use admin::AdminState;
use client_auth::ClientKeys;

/// A running proxy (and its admin listener).
pub struct ProxyHandle {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub metrics: Arc<Metrics>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    recorder: Option<RecorderTask>,
    /// The session store's retention sweeper; closes the store at shutdown.
    maintenance: Maintenance,
    telemetry: Arc<crate::telemetry::Telemetry>,
    pipeline: Arc<Pipeline>,
}

impl ProxyHandle {
    /// Stop accepting, let requests in flight finish (within the grace period), then return.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        // Session entries of answers already sent reach the store before the end.
        self.pipeline.drain(Duration::from_secs(10)).await;
        self.maintenance.stop().await;
        if let Some(recorder) = self.recorder {
            // Every queued trace record reaches the disk before the process ends.
            let _ = tokio::time::timeout(Duration::from_secs(10), recorder.finish()).await;
        }
        self.telemetry.shutdown().await;
    }
}

/// What a proxy runs with besides its configuration.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// The time the session log is written in (the wall clock unless a test moves it).
    pub clock: crate::session::SessionClock,
}

/// Bind both listeners (port 0 allowed) and serve in the background.
pub async fn spawn(config: Config) -> anyhow::Result<ProxyHandle> {
    spawn_with(config, ServeOptions::default()).await
}

/// [`spawn`], with options.
pub async fn spawn_with(config: Config, options: ServeOptions) -> anyhow::Result<ProxyHandle> {
    let keys = ClientKeys::from_config(&config.server, &config.upstream)?;
    let admin_token = admin::token_from_config(&config.server)?;
    if admin_token.is_none() && !config.server.admin_listen.ip().is_loopback() {
        tracing::warn!(
            admin = %config.server.admin_listen,
            "the admin listener (metrics, sessions with their prompts) binds beyond loopback \
             without server.admin_token_env: anyone who reaches it can read them"
        );
    }
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
    let (recorder, recorder_task) = match &config.record.dir {
        Some(dir) => {
            let dropped = &metrics.trace_records_dropped;
            let (r, t) = Recorder::start_counted(
                dir,
                recorder::DEFAULT_QUEUE,
                dropped.with_label_values(&["queue_full"]),
                dropped.with_label_values(&["write_failed"]),
            )
            .map_err(|e| anyhow::anyhow!("cannot record traces into {}: {e}", dir.display()))?;
            (Some(r), Some(t))
        }
        None => (None, None),
    };
    let limits = ConnectionLimits {
        grace: Duration::from_secs(config.server.shutdown_grace_secs),
        header_timeout: Duration::from_millis(config.server.header_read_timeout_ms),
        max_connections: config.server.max_connections,
    };
    let whatif = crate::replay::live::start(&config, &metrics)?;
    let (feed, board) = whatif.map(|w| (w.feed, w.board)).unzip();
    let pipeline =
        Pipeline::new(config, policies, metrics.clone(), recorder, options.clock).await?;
    let pipeline = Arc::new(pipeline.with_whatif(feed));
    let maintenance = Maintenance::start(
        pipeline.store().cloned(),
        &pipeline.config().sessions,
        metrics.store_errors.clone(),
    );
    let telemetry = pipeline.telemetry().clone();
    let handle_pipeline = pipeline.clone();
    let admin_state = Arc::new(AdminState {
        metrics: metrics.clone(),
        store: pipeline.store().cloned(),
        whatif: board,
        token: admin_token,
    });
    let addr = listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let (tx, rx) = watch::channel(false);
    let edge = Arc::new(Edge { pipeline, keys });
    let proxy_task = tokio::spawn(serve_connections(
        listener,
        rx.clone(),
        limits,
        move |req| {
            let edge = edge.clone();
            async move { Ok::<_, Infallible>(handle(edge, req).await) }
        },
    ));
    let admin_limits = ConnectionLimits {
        max_connections: ADMIN_CONNECTIONS,
        ..limits
    };
    let admin_task = tokio::spawn(serve_connections(
        admin_listener,
        rx,
        admin_limits,
        move |req| {
            let state = admin_state.clone();
            async move { Ok::<_, Infallible>(admin::handle(&state, req).await) }
        },
    ));
    Ok(ProxyHandle {
        addr,
        admin_addr,
        metrics,
        shutdown: tx,
        tasks: vec![proxy_task, admin_task],
        recorder: recorder_task,
        maintenance,
        telemetry,
        pipeline: handle_pipeline,
    })
}

/// Connections the admin listener serves at once (scrapes and a few people).
const ADMIN_CONNECTIONS: usize = 64;

/// What the proxy's edge needs: the pipeline and the client keys.
struct Edge {
    pipeline: Arc<Pipeline>,
    keys: ClientKeys,
}

/// The edge, before any byte of the body is read: refuse a path that could leave the
/// upstream's base path, route, then check the client's key.
async fn handle(edge: Arc<Edge>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    if let Err(err) = path_guard::check(path) {
        let provider = crate::providers::family_of(path, req.headers());
        let route = Route {
            provider,
            endpoint: Endpoint::Other,
        };
        return edge_refusal(&edge.pipeline, route, req, err);
    }
    let Some(route) = classify(req.method(), path, req.headers()) else {
        return local_response(&req);
    };
    let websocket = asks_for_websocket(req.headers());
    let proxied = websocket
        && edge.pipeline.config().server.websocket
        && crate::providers::openai_responses::websocket::serves(req.method(), path);
    if websocket && !proxied {
        let err = ApiError::new(
            ErrorKind::UpgradeRefused,
            format!(
                "cachet does not proxy WebSocket upgrades ({} {path}); send the request over HTTP",
                req.method()
            ),
        );
        return edge_refusal(&edge.pipeline, route, req, err);
    }
    if edge.keys.required() {
        let Some(client) = edge.keys.authenticate(req.headers()) else {
            let err = ApiError::new(
                ErrorKind::Authentication,
                "a cachet client key is required (x-api-key or authorization: Bearer)",
            );
            return edge_refusal(&edge.pipeline, route, req, err);
        };
        // The client's cachet key is never forwarded upstream.
        req.headers_mut().remove(&client.header);
        req.extensions_mut().insert(ClientName(client.name));
    }
    if proxied {
        return edge.pipeline.websocket(route, req).await;
    }
    edge.pipeline.handle(route, req).await
}

/// Whether a request asks to switch its connection to a WebSocket (RFC 6455 §4.1), as
/// Codex does first for the Responses API. Other upgrades (`h2c`) are hop-by-hop headers a
/// server may ignore, and are dropped on the way upstream.
fn asks_for_websocket(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|protocol| protocol.trim().eq_ignore_ascii_case("websocket"))
}

/// A request refused at the edge, before its body is read: its exchange is finished with
/// the refusal (counted, logged), it is answered in the provider's format, and its
/// connection is closed.
fn edge_refusal(
    pipeline: &Arc<Pipeline>,
    route: Route,
    req: Request<Incoming>,
    err: ApiError,
) -> Response<ProxyBody> {
    let (parts, _unread) = req.into_parts();
    let ex = pipeline.accept(route, parts);
    let mut resp = pipeline.refuse(ex, err);
    // Refused before its body was read: the connection carries no further request.
    resp.headers_mut().insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
}

/// Answers for paths outside `/v1/`: Claude Code probes `HEAD /` (or `/api/hello`) before
/// its first request.
fn local_response(req: &Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path();
    if matches!(path, "/" | "/api/hello") && matches!(*req.method(), Method::HEAD | Method::GET) {
        return Response::new(full("cachet\n"));
    }
    let provider = crate::providers::family_of(path, req.headers());
    let err = ApiError::new(
        ErrorKind::NotFound,
        format!("no route for {} {path}", req.method()),
    );
    // A client pointed at the wrong base URL shows up here (path only: never a query).
    tracing::info!(status = 404, "{}", err.message);
    error_response(provider, &err)
}
