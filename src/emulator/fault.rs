//! Fault injection, chosen per request with the header `x-cachet-emulate-fault`: a
//! comma-separated list of `429`, `500`, `529`, `cut:N`, `error-event:N`,
//! `slow-first-byte:MS`, `slow-events:MS`, `diagnostics-unavailable`.

use std::time::Duration;

use bytes::Bytes;

use crate::error::{ApiError, ErrorKind};
use crate::providers::anthropic::stream_error_event as anthropic_stream_error_event;
use crate::providers::error_body;
use crate::route::{Endpoint, Provider};

pub const HEADER: &str = "x-cachet-emulate-fault";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Answer with this error instead of a reply.
    pub error: Option<ErrorKind>,
    /// Stop the stream after this many events (the body after this many bytes when not
    /// streaming), without the terminating events: the connection is dropped.
    pub cut_after: Option<usize>,
    /// After this many events, send the provider's stream error event (overloaded) and
    /// end the stream: an error after a 200.
    pub error_event_after: Option<usize>,
    pub first_byte_delay: Option<Duration>,
    pub event_delay: Option<Duration>,
    /// Cache diagnostics answer `unavailable` (the provider could not compare).
    pub diagnostics_unavailable: bool,
}

impl Faults {
    pub fn parse(header: Option<&str>) -> Result<Faults, ApiError> {
        let mut faults = Faults::default();
        for item in header
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (name, arg) = match item.split_once(':') {
                Some((n, a)) => (n.trim(), Some(a.trim())),
                None => (item, None),
            };
            let number = || -> Result<u64, ApiError> {
                arg.and_then(|a| a.parse().ok()).ok_or_else(|| {
                    ApiError::invalid(format!(
                        "{HEADER}: `{item}` needs a whole number, e.g. `{name}:3`"
                    ))
                })
            };
            match name {
                "429" => faults.error = Some(ErrorKind::RateLimit),
                "500" => faults.error = Some(ErrorKind::Internal),
                "529" => faults.error = Some(ErrorKind::Overloaded),
                "cut" => faults.cut_after = Some(number()? as usize),
                "error-event" => faults.error_event_after = Some(number()? as usize),
                "slow-first-byte" => {
                    faults.first_byte_delay = Some(Duration::from_millis(number()?))
                }
                "slow-events" => faults.event_delay = Some(Duration::from_millis(number()?)),
                "diagnostics-unavailable" => faults.diagnostics_unavailable = true,
                _ => {
                    return Err(ApiError::invalid(format!(
                        "{HEADER}: unknown fault `{item}` (expected 429, 500, 529, cut:N, \
                         error-event:N, slow-first-byte:MS, slow-events:MS or diagnostics-unavailable)"
                    )))
                }
            }
        }
        Ok(faults)
    }

    /// The message of an injected error, as the provider would word it.
    pub fn error_message(kind: ErrorKind) -> &'static str {
        match kind {
            ErrorKind::RateLimit => "Rate limit exceeded (injected by the cachet emulator).",
            ErrorKind::Overloaded => "Overloaded (injected by the cachet emulator).",
            _ => "Internal server error (injected by the cachet emulator).",
        }
    }
}

/// The stream error event each API sends when it fails after a 200.
pub fn stream_error_event(endpoint: Endpoint, sequence_number: usize) -> Bytes {
    let message = Faults::error_message(ErrorKind::Overloaded);
    match endpoint {
        Endpoint::Chat => {
            let body = error_body(Provider::OpenAi, ErrorKind::Overloaded, message);
            let mut out = b"data: ".to_vec();
            out.extend_from_slice(&body);
            out.extend_from_slice(b"\n\n");
            Bytes::from(out)
        }
        Endpoint::Responses => {
            super::body::sse(Some("error"), &stream_error_payload(sequence_number))
        }
        _ => anthropic_stream_error_event(ErrorKind::Overloaded, message),
    }
}

/// The Responses stream's error event (openai-python `ResponseErrorEvent`), as JSON.
pub fn stream_error_payload(sequence_number: usize) -> serde_json::Value {
    let message = Faults::error_message(ErrorKind::Overloaded);
    serde_json::json!({"type": "error", "code": "server_error", "message": message,
        "param": null, "sequence_number": sequence_number})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_refuses_unknown() {
        let f = Faults::parse(Some("cut:3, slow-events:5,slow-first-byte:7")).unwrap();
        assert_eq!(f.cut_after, Some(3));
        assert_eq!(
            Faults::parse(Some("error-event:2"))
                .unwrap()
                .error_event_after,
            Some(2)
        );
        assert_eq!(f.event_delay, Some(Duration::from_millis(5)));
        assert_eq!(f.first_byte_delay, Some(Duration::from_millis(7)));
        assert_eq!(
            Faults::parse(Some("529")).unwrap().error,
            Some(ErrorKind::Overloaded)
        );
        assert_eq!(Faults::parse(None).unwrap(), Faults::default());
        assert!(Faults::parse(Some("cut")).is_err());
        assert!(Faults::parse(Some("cut:x")).is_err());
        assert!(Faults::parse(Some("503")).is_err());
    }
}
