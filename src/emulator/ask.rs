//! What a generation request's headers ask of the emulator: its faults, a scripted reply,
//! the cache diagnosis beta, and how its answer is framed (SSE, or Bedrock's event stream).

use super::fault::{self, Faults};
use super::routes::{DIAGNOSIS_BETA, REPLY_HEADER};
use crate::error::ApiError;
use crate::route::{Endpoint, Provider};

/// A generation request as its headers ask for it to be served.
pub(super) struct Ask<'a> {
    pub endpoint: Endpoint,
    pub provider: Provider,
    pub seq: u64,
    pub request_id: &'a str,
    pub faults: Faults,
    pub reply_header: Option<String>,
    pub diagnosis_beta: bool,
    /// The betas it opts into (`anthropic-beta`; Bedrock's body names them instead).
    pub betas: Option<String>,
    /// An answer streamed as an AWS event stream (Bedrock), not SSE.
    pub event_stream: bool,
}

impl<'a> Ask<'a> {
    pub(super) fn of(
        headers: &http::HeaderMap,
        endpoint: Endpoint,
        provider: Provider,
        seq: u64,
        request_id: &'a str,
    ) -> Result<Ask<'a>, ApiError> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Ok(Ask {
            endpoint,
            provider,
            seq,
            request_id,
            faults: Faults::parse(header(fault::HEADER).as_deref())?,
            reply_header: header(REPLY_HEADER),
            diagnosis_beta: header("anthropic-beta")
                .is_some_and(|betas| betas.split(',').any(|b| b.trim() == DIAGNOSIS_BETA)),
            betas: header("anthropic-beta"),
            event_stream: false,
        })
    }
}
