//! HTTP serving below every listener (the proxy's, the admin's, the emulator's): the accept
//! loop with graceful shutdown and bounded connections, the response body type, the path
//! guard every request passes first, and reading a query's values. It knows nothing of the
//! proxy or the emulator, which both build on it.
//!
//! A connection speaks HTTP/1.1 or cleartext HTTP/2 (told by its first bytes: [`h2c`]).
//! An HTTP/1.1 connection may be upgraded (a WebSocket): every request carries its [`Connection`],
//! which the upgraded socket keeps, so that it still counts among the connections served
//! and hears the shutdown.

mod coarse_timer;
mod h2c;
pub mod path_guard;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use coarse_timer::CoarseTimer;

/// The body of every response a listener sends.
pub type ResponseBody = UnsyncBoxBody<Bytes, std::io::Error>;

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

/// What a request knows of the connection it came on, in its extensions: a socket upgraded
/// from it keeps this, so that it holds the connection's place among those served until it
/// closes, and closes when the listener shuts down.
#[derive(Clone)]
pub struct Connection {
    _slot: Arc<OwnedSemaphorePermit>,
    shutdown: watch::Receiver<bool>,
}

impl Connection {
    /// Resolves once the listener is shutting down (at once if it already is).
    pub async fn shutting_down(&mut self) {
        // A dropped sender is a listener gone: shutting down too.
        let _ = self.shutdown.wait_for(|stop| *stop).await;
    }
}

/// Accept loop with graceful shutdown: on the signal, stop accepting and wait (up to
/// `grace`) for connections in flight, streams and upgraded sockets included, to finish.
pub async fn serve_connections<F, Fut>(
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
    limits: ConnectionLimits,
    handler: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + 'static,
{
    let max_connections = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max_connections));
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
                let connection = Connection {
                    _slot: Arc::new(permit),
                    shutdown: shutdown.clone(),
                };
                tokio::spawn(serve_one(
                    stream,
                    connection,
                    limits,
                    header_timer.clone(),
                    handler.clone(),
                ));
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    // Every connection holds a slot until it (or the socket upgraded from it) ends.
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(limits.grace, slots.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period ended with connections still open");
    }
}

/// One connection: HTTP/1.1 (with upgrades: a WebSocket) or cleartext HTTP/2, told by its
/// first bytes ([`h2c`]), served until it ends or the listener shuts down.
async fn serve_one<F, Fut>(
    stream: tokio::net::TcpStream,
    connection: Connection,
    limits: ConnectionLimits,
    header_timer: CoarseTimer,
    handler: F,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<ResponseBody>, Infallible>> + Send + 'static,
{
    let mut stop = connection.clone();
    // Telling the HTTP waits for the client's first bytes, within the header time-out.
    let speaks = tokio::select! {
        speaks = h2c::detect(stream, limits.header_timeout) => speaks,
        () = stop.shutting_down() => None,
    };
    let Some(speaks) = speaks else { return };
    let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(connection.clone());
        handler(req)
    });
    let ended = match speaks {
        h2c::Speaks::Http1(io) => {
            // A client that never finishes its request head must not hold a connection
            // forever (the timer is checked every tick: see its module).
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(header_timer)
                .header_read_timeout(limits.header_timeout)
                .max_buf_size(READ_BUFFER)
                .serve_connection(TokioIo::new(io), svc)
                .with_upgrades();
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                ended = conn.as_mut() => ended,
                () = stop.shutting_down() => {
                    // Requests in flight finish; an idle keep-alive closes now.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            }
        }
        h2c::Speaks::Http2(io) => {
            let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .timer(header_timer)
                .serve_connection(TokioIo::new(io), svc);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                ended = conn.as_mut() => ended,
                () = stop.shutting_down() => {
                    // Streams in flight finish (GOAWAY); no new one starts.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            }
        }
    };
    if let Err(e) = ended {
        tracing::debug!("connection ended with an error: {e}");
    }
}

pub fn full(body: impl Into<Bytes>) -> ResponseBody {
    Full::new(body.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// The value of `name` in a raw query string (`a=1&b=2`), undecoded: the admin pages' own
/// parameters are plain words and numbers, as are the emulator's listing parameters.
pub fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_found_by_whole_name() {
        assert_eq!(
            query_value(Some("sort=cost&order=asc"), "order"),
            Some("asc")
        );
        assert_eq!(query_value(Some("xsort=a&sort=b"), "sort"), Some("b"));
        assert_eq!(query_value(Some("sort"), "sort"), None);
        assert_eq!(query_value(None, "sort"), None);
    }
}
