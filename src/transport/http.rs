//! The proxy's HTTP plumbing: reading a request body within its limit, and provider-format
//! error responses. (The accept loop and the response body type every listener shares are
//! [`crate::http_serve`]'s.)

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::error::{ApiError, ErrorKind};
pub use crate::http_serve::full;
use crate::route::Provider;

/// The body of the proxy's responses: every listener's.
pub type ProxyBody = crate::http_serve::ResponseBody;

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
