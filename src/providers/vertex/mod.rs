//! Google Vertex AI's Anthropic models: every rule cachet knows about this route.
//!
//! - Routes: `POST /v1/projects/{project}/locations/{location}/publishers/anthropic/models/
//!   {model}:rawPredict` (a whole answer) and `:streamRawPredict` (SSE, the Messages
//!   stream's events). The body is an Anthropic Messages body ([`RAW_PREDICT`]: the Messages
//!   wire's rules on Vertex's route) with the model in the path and `anthropic_version:
//!   "vertex-2023-10-16"` in the body (docs.anthropic.com, "Claude on Vertex AI": "the
//!   model is passed in the Vertex endpoint URL instead of the request body"; "anthropic_version
//!   is passed in the request body (rather than as a header), and must be set to the value
//!   vertex-2023-10-16").
//! - Credentials: `authorization: Bearer` with a Google access token, passed through, or
//!   one cachet holds.
//! - Errors: Google's `{"error": {"code", "message", "status"}}`.
//! - The host is the location's: `{location}-aiplatform.googleapis.com`, or
//!   `aiplatform.googleapis.com` for `global`.

use bytes::Bytes;

use super::anthropic::Messages;
use crate::error::ErrorKind;
use crate::route::{Endpoint, Provider};

/// rawPredict and streamRawPredict: the Messages rules on Vertex's route.
pub static RAW_PREDICT: Messages = Messages::routed(Provider::Vertex, Endpoint::RawPredict);

/// The `anthropic_version` a Vertex body names.
pub const ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// What a Vertex publisher-model path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    pub project: &'a str,
    pub location: &'a str,
    pub model: &'a str,
    /// `:streamRawPredict`.
    pub stream: bool,
}

/// The project, location and model of `/v1/projects/{p}/locations/{l}/publishers/
/// anthropic/models/{m}:rawPredict` (or `:streamRawPredict`).
pub fn target(path: &str) -> Option<Target<'_>> {
    let rest = path.strip_prefix("/v1/projects/")?;
    let (project, rest) = rest.split_once("/locations/")?;
    let (location, rest) = rest.split_once("/publishers/anthropic/models/")?;
    let (model, method) = rest.rsplit_once(':')?;
    let stream = match method {
        "rawPredict" => false,
        "streamRawPredict" => true,
        _ => return None,
    };
    let plain = |s: &str| !s.is_empty() && !s.contains('/');
    (plain(project) && plain(location) && plain(model)).then_some(Target {
        project,
        location,
        model,
        stream,
    })
}

/// The location a Vertex path names (`/v1/projects/{p}/locations/{l}/...`), whatever it
/// asks for there.
pub fn location_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/v1/projects/")?;
    let (_, rest) = rest.split_once("/locations/")?;
    let location = rest.split(['/', '?', ':']).next()?;
    let plain = !location.is_empty()
        && location
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    plain.then_some(location)
}

/// The model a Vertex path names.
pub fn model_of(path: &str) -> Option<String> {
    target(path).map(|t| t.model.to_string())
}

/// The Vertex AI endpoint of a location (cloud.google.com, "Vertex AI locations": regional
/// `{location}-aiplatform.googleapis.com`; the global endpoint `aiplatform.googleapis.com`).
pub fn regional_endpoint(location: &str) -> String {
    match location {
        "global" => "https://aiplatform.googleapis.com".to_string(),
        region => format!("https://{region}-aiplatform.googleapis.com"),
    }
}

/// Google's status name of an error (google.rpc.Code).
fn status(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::UpgradeRefused | ErrorKind::TooLarge => {
            "INVALID_ARGUMENT"
        }
        ErrorKind::Authentication => "UNAUTHENTICATED",
        ErrorKind::NotFound => "NOT_FOUND",
        ErrorKind::RateLimit => "RESOURCE_EXHAUSTED",
        ErrorKind::RequestTimeout | ErrorKind::Timeout => "DEADLINE_EXCEEDED",
        ErrorKind::Unavailable | ErrorKind::Overloaded => "UNAVAILABLE",
        ErrorKind::Internal | ErrorKind::BadGateway => "INTERNAL",
    }
}

/// An error body: `{"error": {"code": C, "message": M, "status": S}}`.
pub fn error_body(kind: ErrorKind, message: &str) -> Bytes {
    let value = serde_json::json!({
        "error": {
            "code": kind.status().as_u16(),
            "message": message,
            "status": status(kind),
        }
    });
    Bytes::from(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_from_paths() {
        let t = target(
            "/v1/projects/proj-e2e/locations/us-east5/publishers/anthropic/models/claude-opus-5-5:streamRawPredict",
        )
        .unwrap();
        assert_eq!(
            (t.project, t.location, t.model, t.stream),
            ("proj-e2e", "us-east5", "claude-opus-5-5", true)
        );
        let t = target("/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict").unwrap();
        assert_eq!((t.model, t.stream), ("claude-sonnet-4-5@20250929", false));
        assert!(target(
            "/v1/projects/p/locations/l/publishers/google/models/gemini:generateContent"
        )
        .is_none());
        assert!(
            target("/v1/projects/p/locations/l/publishers/anthropic/models/m:predict").is_none()
        );
        assert_eq!(
            regional_endpoint("global"),
            "https://aiplatform.googleapis.com"
        );
        assert_eq!(
            regional_endpoint("us-east5"),
            "https://us-east5-aiplatform.googleapis.com"
        );
    }
}
