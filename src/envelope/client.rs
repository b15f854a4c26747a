//! Request metadata (`meta` of the envelope), and the coding agents it names.

use serde::Serialize;

use crate::route::{Endpoint, Provider};

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

    /// Name the model of a request whose body does not (Gemini names it in its path).
    pub fn name_model(&mut self, model: &str) {
        if self.model.is_empty() && !model.is_empty() {
            *self = Meta {
                session: self.session.take(),
                client: self.client,
                turn_index: self.turn_index,
                request_index: self.request_index,
                ..Meta::new(self.provider, self.endpoint, model.to_string())
            };
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
