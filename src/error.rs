//! One error type for everything cachet answers itself, rendered in the client's own
//! provider error format (Anthropic `{"type":"error",...}`, OpenAI `{"error":{...}}`).

use bytes::Bytes;
use http::StatusCode;

use crate::providers::Provider;

/// What went wrong, which decides the status and the provider error type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The client's request is malformed (400).
    InvalidRequest,
    /// The body exceeds the configured limit (413).
    TooLarge,
    /// Authentication with cachet failed (401).
    Authentication,
    /// No such route (404).
    NotFound,
    /// The client did not send its request body in time (408).
    RequestTimeout,
    /// A WebSocket upgrade, which cachet does not serve (426): the status the Responses API's
    /// clients read as "send it over HTTP instead", so they fall back at once.
    UpgradeRefused,
    /// Rate limited (429); used by the emulator's fault injection.
    RateLimit,
    /// cachet itself failed, e.g. a refused patch in strict mode or a failing hook (500).
    Internal,
    /// The upstream could not be reached, or TLS failed (502).
    BadGateway,
    /// A required dependency (the session store) is unavailable (503).
    Unavailable,
    /// The upstream did not answer in time (504).
    Timeout,
    /// The provider is overloaded (529); used by the emulator's fault injection.
    Overloaded,
}

impl ErrorKind {
    pub fn status(self) -> StatusCode {
        let code = match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::TooLarge => 413,
            ErrorKind::Authentication => 401,
            ErrorKind::NotFound => 404,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::UpgradeRefused => 426,
            ErrorKind::RateLimit => 429,
            ErrorKind::Internal => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::Unavailable => 503,
            ErrorKind::Timeout => 504,
            ErrorKind::Overloaded => 529,
        };
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    fn anthropic_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::UpgradeRefused => "invalid_request_error",
            ErrorKind::TooLarge => "request_too_large",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RequestTimeout => "timeout_error",
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Internal | ErrorKind::BadGateway => "api_error",
            ErrorKind::Unavailable | ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Timeout => "timeout_error",
        }
    }

    fn openai_type(self) -> (&'static str, Option<&'static str>) {
        match self {
            ErrorKind::InvalidRequest => ("invalid_request_error", None),
            ErrorKind::TooLarge => ("invalid_request_error", Some("request_too_large")),
            ErrorKind::Authentication => ("invalid_request_error", Some("invalid_api_key")),
            ErrorKind::NotFound => ("invalid_request_error", Some("not_found")),
            ErrorKind::RequestTimeout => ("invalid_request_error", Some("request_timeout")),
            ErrorKind::UpgradeRefused => ("invalid_request_error", Some("websocket_not_supported")),
            ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
            ErrorKind::Internal => ("server_error", None),
            ErrorKind::BadGateway => ("server_error", Some("bad_gateway")),
            ErrorKind::Unavailable | ErrorKind::Overloaded => ("server_error", Some("overloaded")),
            ErrorKind::Timeout => ("server_error", Some("timeout")),
        }
    }
}

/// An error cachet answers itself. The message must never contain a secret.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidRequest, message)
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// The body in the provider's own error shape.
    pub fn body(&self, provider: Provider) -> Bytes {
        error_body(provider, self.kind, &self.message)
    }
}

/// Render an error body in the provider's own error shape.
pub fn error_body(provider: Provider, kind: ErrorKind, message: &str) -> Bytes {
    let value = match provider {
        Provider::Anthropic => serde_json::json!({
            "type": "error",
            "error": { "type": kind.anthropic_type(), "message": message },
        }),
        Provider::OpenAi => {
            let (ty, code) = kind.openai_type();
            serde_json::json!({
                "error": { "message": message, "type": ty, "param": null, "code": code },
            })
        }
    };
    Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
}

/// The Anthropic SSE `error` event sent when a stream breaks after a 200.
pub fn anthropic_stream_error_event(kind: ErrorKind, message: &str) -> Bytes {
    let body = error_body(Provider::Anthropic, kind, message);
    let mut out = Vec::with_capacity(body.len() + 24);
    out.extend_from_slice(b"event: error\ndata: ");
    out.extend_from_slice(&body);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_and_openai_shapes() {
        let e = ApiError::new(ErrorKind::TooLarge, "body is 40 MiB, limit 32 MiB");
        let a: serde_json::Value = serde_json::from_slice(&e.body(Provider::Anthropic)).unwrap();
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "request_too_large");
        let o: serde_json::Value = serde_json::from_slice(&e.body(Provider::OpenAi)).unwrap();
        assert_eq!(o["error"]["message"], "body is 40 MiB, limit 32 MiB");
        assert_eq!(e.status().as_u16(), 413);
    }
}
