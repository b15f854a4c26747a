//! Request bodies as the emulator reads them: at most the providers' size limit, decoded by
//! their `content-encoding`, as JSON where the API takes JSON.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::Value;

use crate::error::{ApiError, ErrorKind};

/// The providers' request size limit.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

/// A request body as JSON, decoded first by its `content-encoding` as cachet decodes what
/// it reads (Codex signed in with ChatGPT sends `zstd`).
pub(super) async fn read_json(req: Request<Incoming>) -> Result<Value, ApiError> {
    read_optional_json(req)
        .await?
        .ok_or_else(|| ApiError::invalid("request body is empty: expected a JSON object"))
}

/// [`read_json`], or `None` for an empty body (a request whose parameters are all optional).
pub(super) async fn read_optional_json(req: Request<Incoming>) -> Result<Option<Value>, ApiError> {
    let (parts, body) = req.into_parts();
    let bytes = read_bytes(body).await?;
    let decoded = crate::content_encoding::decode(&parts.headers, bytes, BODY_LIMIT)?;
    if decoded.readable().is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(decoded.readable())
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("request body is not valid JSON: {e}")))
}

/// A request body's bytes as they came (a signed body is checked on these).
pub(super) async fn read_bytes(body: Incoming) -> Result<Bytes, ApiError> {
    Ok(Limited::new(body, BODY_LIMIT)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ApiError::new(
                    ErrorKind::TooLarge,
                    "request exceeds the maximum size of 32 MB",
                )
            } else {
                ApiError::invalid(format!("could not read the request body: {e}"))
            }
        })?
        .to_bytes())
}
