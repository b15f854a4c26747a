//! The HTTP side of a hook call: POST the event, honour the hook's time-out, turn every
//! way of failing into a specific message and one warning line.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::outcome::{HookCall, HookOutcome};
use super::protocol::{context_event, parse_context_answer, parse_payload_answer, provider_event};
use crate::policy::{ContextReason, HookSpec};
use crate::route::{Endpoint, Provider};

/// Calls external hook servers. Cheap to clone; one per process keeps connections warm.
#[derive(Debug, Clone)]
pub struct HookClient {
    http: reqwest::Client,
}

impl HookClient {
    pub fn new() -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            // Hook servers are the operator's own, usually on loopback: a proxy from the
            // environment would only get in the way.
            .no_proxy()
            .user_agent(concat!("cachet/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(HookClient { http })
    }

    /// A `context` event (`before_request`, `ephemeral`, or `turn_end` with the
    /// assistant message and usage).
    pub async fn call_context(
        &self,
        hook: &HookSpec,
        reason: ContextReason,
        envelope: &[u8],
        assistant: Option<&Value>,
        usage: Option<&Value>,
    ) -> HookCall {
        let event = context_event(reason, envelope, assistant, usage);
        self.call(hook, event, parse_context_answer).await
    }

    /// A `before_provider_request` event with the compiled payload's JSON text.
    pub async fn call_before_provider_request(
        &self,
        hook: &HookSpec,
        provider: Provider,
        endpoint: Endpoint,
        payload: &[u8],
    ) -> HookCall {
        let event = provider_event(provider, endpoint, payload);
        self.call(hook, event, parse_payload_answer).await
    }

    async fn call(
        &self,
        hook: &HookSpec,
        event: Vec<u8>,
        parse: fn(&[u8]) -> Result<HookOutcome, String>,
    ) -> HookCall {
        let started = Instant::now();
        let result = self.exchange(hook, event, parse).await;
        let elapsed = started.elapsed();
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(message) => {
                let message = format!("hook `{}`: {message}", hook.name);
                tracing::warn!(
                    hook = %hook.name,
                    url = %redacted(&hook.url),
                    on_error = hook.on_error.label(),
                    "{message}"
                );
                HookOutcome::Failed {
                    on_error: hook.on_error,
                    message,
                }
            }
        };
        HookCall {
            hook: hook.name.clone(),
            elapsed,
            outcome,
        }
    }

    async fn exchange(
        &self,
        hook: &HookSpec,
        event: Vec<u8>,
        parse: fn(&[u8]) -> Result<HookOutcome, String>,
    ) -> Result<HookOutcome, String> {
        let sent = self
            .http
            .post(hook.url.clone())
            .timeout(hook.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(event)
            .send()
            .await;
        let response = sent.map_err(|e| transport_error(&e, hook.timeout))?;
        let status = response.status();
        if status == reqwest::StatusCode::NO_CONTENT {
            return Ok(HookOutcome::NoChange);
        }
        if !status.is_success() {
            return Err(format!(
                "answered HTTP {} (expected 200 with JSON, or 204)",
                status.as_u16()
            ));
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| transport_error(&e, hook.timeout))?;
        parse(&body).map_err(|e| format!("malformed answer: {e}"))
    }
}

/// Why the request did not complete, without the URL (which may carry a token).
fn transport_error(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no answer within {} ms", timeout.as_millis());
    }
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        cause = e.to_string();
    }
    if e.is_connect() {
        format!("cannot connect: {cause}")
    } else {
        format!("request failed: {cause}")
    }
}

/// Scheme, host, port and path only: user info and query strings may hold secrets.
fn redacted(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_drops_credentials_and_query() {
        let u = reqwest::Url::parse("http://user:pw@127.0.0.1:7000/hook?token=abc#x").unwrap();
        assert_eq!(redacted(&u), "http://127.0.0.1:7000/hook");
    }
}
