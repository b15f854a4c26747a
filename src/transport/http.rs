//! HTTP plumbing shared by every listener (proxy, admin, emulator): the response body type,
//! the accept loop with graceful shutdown, reading a request body within its limit, and
//! provider-format error responses.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full, Limited};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use super::coarse_timer::CoarseTimer;
use crate::error::{ApiError, ErrorKind};
use crate::route::Provider;

pub type ProxyBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// How a listener treats its connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// On shutdown, how long connections in flight may take to finish.
    pub grace: Duration,
    /// Time a client has to send its request head.
    pub header_timeout: Duration,
    /// Connections served at once. The next one is accepted only when one ends, so that
    /// excess clients wait in the kernel's listen backlog instead of making `accept` fail
    /// (out of file descriptors) for everyone.
    pub max_connections: usize,
}

/// Largest read buffer of one connection. hyper grows a connection's buffer while reads fill
/// it (to 400 KiB by default) and keeps it for the connection's life: with a thousand
/// connections held open by streams, that alone was most of cachet's memory. At 16 KiB a
/// 500 KB body took 32 reads and cost up to a third more CPU than at 64 KiB (BENCHMARKS.md,
/// "The check keeps its bodies, and the read buffer"); 64 KiB left the 1,000-streams
/// soak's memory where it was.
const READ_BUFFER: usize = 64 * 1024;

/// Accept loop with graceful shutdown: on the signal, stop accepting and wait (up to
/// `grace`) for connections in flight, streams included, to finish.
pub async fn serve_connections<F, Fut>(
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    limits: ConnectionLimits,
    handler: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<ProxyBody>, Infallible>> + Send + 'static,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let header_timer = CoarseTimer::start(limits.header_timeout);
    loop {
        // A free slot first, then the next connection from the backlog.
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = shutdown.changed() => break,
        };
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
                // connection forever (the timer is checked every tick: see its module).
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(header_timer.clone())
                    .header_read_timeout(limits.header_timeout)
                    .max_buf_size(READ_BUFFER)
                    .serve_connection(io, svc);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!("connection ended with an error: {e}");
                    }
                    drop(permit);
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.grace) => {
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
    let mut resp = Response::new(full(crate::providers::error_body(
        provider,
        err.kind,
        &err.message,
    )));
    *resp.status_mut() = err.status();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut()
        .insert("x-cachet-error", HeaderValue::from_static("1"));
    if err.kind == ErrorKind::RequestTimeout {
        // The body was not read whole: the connection cannot carry another request.
        resp.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Read a request body whole, refusing one larger than `limit` (before reading it when the
/// client declared its length) and one that does not arrive within `timeout` (a 408).
pub async fn read_body(
    body: Incoming,
    declared: Option<u64>,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    let too_large = |n: String| {
        ApiError::new(
            ErrorKind::TooLarge,
            format!("request body is {n}, larger than the limit of {limit} bytes"),
        )
    };
    if let Some(len) = declared.filter(|&l| l > limit as u64) {
        return Err(too_large(format!("{len} bytes")));
    }
    let collected = match tokio::time::timeout(timeout, gather(body, declared, limit)).await {
        Ok(collected) => collected,
        Err(_) => return Err(body_late(timeout)),
    };
    match collected {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            Err(too_large("over the limit".into()))
        }
        Err(e) => Err(body_unreadable(&e)),
    }
}

/// A request body that did not arrive within `timeout` (a 408), whether cachet reads it or
/// passes it on as it arrives.
pub fn body_late(timeout: Duration) -> ApiError {
    ApiError::new(
        ErrorKind::RequestTimeout,
        format!(
            "the request body did not arrive within {} ms",
            timeout.as_millis()
        ),
    )
}

/// A request body that broke off (a 400).
pub fn body_unreadable(e: &dyn std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("could not read the request body: {e}"))
}

/// Room left after a gathered body of `ROOM_FROM` bytes or more, so that a shaped copy of
/// it can be written over it once it is sent (`Payload::into_one`) when shaping made it
/// longer: markers and injected notes add bytes, not megabytes. Pages never written are
/// never resident. A shorter body is copied rather than written over (the next request's
/// comparison keeps it), so it gets none.
const ROOM_TO_SHAPE: usize = 64 * 1024;
const ROOM_FROM: usize = 1 << 20;

/// The body in one buffer. A body that arrives in one frame is that frame; a longer one is
/// copied once into a buffer of its declared length, as its frames arrive, so a large body
/// never sits in memory twice (frames and their concatenation, or a buffer and its grown
/// copy).
async fn gather(
    body: Incoming,
    declared: Option<u64>,
    limit: usize,
) -> Result<Bytes, Box<dyn std::error::Error + Send + Sync>> {
    let mut body = Limited::new(body, limit);
    let mut first: Option<Bytes> = None;
    let mut gathered: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        match (&mut gathered, first.take()) {
            (Some(buf), _) => buf.extend_from_slice(&data),
            (None, None) => first = Some(data),
            (None, Some(head)) => {
                let wanted = declared.map_or(0, |n| n.min(limit as u64) as usize);
                let wanted = wanted.max(head.len() + data.len());
                let wanted = match wanted >= ROOM_FROM {
                    true => wanted + ROOM_TO_SHAPE,
                    false => wanted,
                };
                let mut buf = BytesMut::with_capacity(wanted);
                buf.extend_from_slice(&head);
                buf.extend_from_slice(&data);
                gathered = Some(buf);
            }
        }
    }
    Ok(match gathered {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}
