//! Request metadata (`meta` of the envelope) and which coding agent sent the request.

use http::HeaderMap;
use serde::Serialize;

use crate::providers::{Endpoint, Provider};

/// The client program, as named in policies (`client = [...]`) and the envelope's meta.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Client {
    Pi,
    ClaudeCode,
    Codex,
    Sdk,
    #[default]
    Unknown,
}

impl Client {
    pub const ALL: [Client; 5] = [
        Client::Pi,
        Client::ClaudeCode,
        Client::Codex,
        Client::Sdk,
        Client::Unknown,
    ];

    /// The name as written in policies (`client = [...]`).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.label() == s)
    }

    pub fn label(self) -> &'static str {
        match self {
            Client::Pi => "pi",
            Client::ClaudeCode => "claude-code",
            Client::Codex => "codex",
            Client::Sdk => "sdk",
            Client::Unknown => "unknown",
        }
    }
}

/// Read-only request metadata. The session layer fills `session` and the indices.
#[derive(Debug, Clone)]
pub struct Meta {
    pub provider: Provider,
    pub endpoint: Endpoint,
    pub model: String,
    /// Context window in tokens, when the model is known.
    pub limit: Option<u64>,
    pub session: Option<String>,
    /// User prompts so far in the session.
    pub turn_index: u64,
    /// Provider calls so far in the session.
    pub request_index: u64,
    pub client: Client,
}

impl Meta {
    pub fn new(provider: Provider, endpoint: Endpoint, model: String) -> Self {
        let limit = crate::models::lookup(&model).map(|m| m.context_window);
        Meta {
            provider,
            endpoint,
            model,
            limit,
            session: None,
            turn_index: 0,
            request_index: 0,
            client: Client::Unknown,
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "provider": self.provider.label(),
            "endpoint": self.endpoint.label(),
            "model": self.model,
            "limit": self.limit,
            "session": self.session,
            "turn_index": self.turn_index,
            "request_index": self.request_index,
            "client": self.client.label(),
        })
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Which client sent a request, from its headers (and, failing those, body habits).
pub fn detect_client(headers: &HeaderMap, body: &[u8]) -> Client {
    let ua = header(headers, "user-agent").to_ascii_lowercase();
    let beta = header(headers, "anthropic-beta").to_ascii_lowercase();
    let originator = header(headers, "originator").to_ascii_lowercase();
    if headers.contains_key("x-claude-code-session-id")
        || beta.contains("claude-code")
        || ua.starts_with("claude-cli")
        || ua.contains("claude-code")
    {
        return Client::ClaudeCode;
    }
    if originator.contains("codex") || ua.starts_with("codex") || ua.contains("codex_") {
        return Client::Codex;
    }
    if ua.contains("pi-coding-agent")
        || ua.starts_with("pi/")
        || headers.contains_key("x-pi-session")
    {
        return Client::Pi;
    }
    // The official SDKs identify themselves with their own user agent and `x-stainless-*`.
    if headers.contains_key("x-stainless-lang")
        || ua.starts_with("anthropic/")
        || ua.starts_with("openai/")
        || ua.contains("anthropic-sdk")
        || ua.contains("openai-sdk")
    {
        // pi is built on the SDKs; its system prompt names it.
        if memchr::memmem::find(body, b"pi-coding-agent").is_some() {
            return Client::Pi;
        }
        return Client::Sdk;
    }
    Client::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn clients_are_told_apart() {
        let cc = headers(&[("user-agent", "claude-cli/2.1.0 (external, cli)")]);
        assert_eq!(detect_client(&cc, b"{}"), Client::ClaudeCode);
        let cc = headers(&[("anthropic-beta", "claude-code-20250219,oauth")]);
        assert_eq!(detect_client(&cc, b"{}"), Client::ClaudeCode);
        let codex = headers(&[("originator", "codex_cli_rs")]);
        assert_eq!(detect_client(&codex, b"{}"), Client::Codex);
        let sdk = headers(&[
            ("x-stainless-lang", "python"),
            ("user-agent", "Anthropic/Python 0.40"),
        ]);
        assert_eq!(detect_client(&sdk, b"{}"), Client::Sdk);
        let pi = headers(&[("x-stainless-lang", "js")]);
        assert_eq!(
            detect_client(&pi, br#"{"system":"You are pi-coding-agent"}"#),
            Client::Pi
        );
        assert_eq!(detect_client(&HeaderMap::new(), b"{}"), Client::Unknown);
        assert_eq!(Client::ClaudeCode.label(), "claude-code");
    }
}
