//! One error type for everything cachet answers itself: what went wrong, which decides its
//! status. Each provider renders it in its own error format
//! ([`crate::providers::error_body`]).

use http::StatusCode;

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
}
