//! Which provider API a request speaks, decided once at the edge.

use http::{HeaderMap, Method};

/// The provider family: decides the upstream and the error format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    Anthropic,
    OpenAi,
}

impl Provider {
    pub fn label(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }
}

/// The API endpoint, as named in policies and metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Anthropic `POST /v1/messages/count_tokens`.
    CountTokens,
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// OpenAI `POST /v1/responses`.
    Responses,
    /// `GET /v1/models` (either family).
    Models,
    /// Any other `/v1/...` path: forwarded untouched.
    Other,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Endpoint::Messages => "messages",
            Endpoint::CountTokens => "count_tokens",
            Endpoint::Chat => "chat",
            Endpoint::Responses => "responses",
            Endpoint::Models => "models",
            Endpoint::Other => "other",
        }
    }

    /// Endpoints whose body is a model request cachet parses and taps.
    pub fn is_generation(self) -> bool {
        matches!(
            self,
            Endpoint::Messages | Endpoint::Chat | Endpoint::Responses
        )
    }
}

/// A classified request target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub provider: Provider,
    pub endpoint: Endpoint,
}

/// Classify a request by method, path (without query) and headers.
/// Returns `None` for paths outside `/v1/`.
pub fn classify(method: &Method, path: &str, headers: &HeaderMap) -> Option<Route> {
    let path = path.trim_end_matches('/');
    let anthropic_headers =
        headers.contains_key("anthropic-version") || headers.contains_key("x-api-key");
    let family = if anthropic_headers {
        Provider::Anthropic
    } else {
        Provider::OpenAi
    };
    let route = |provider, endpoint| Some(Route { provider, endpoint });
    match (method, path) {
        (&Method::POST, "/v1/messages") => route(Provider::Anthropic, Endpoint::Messages),
        (&Method::POST, "/v1/messages/count_tokens") => {
            route(Provider::Anthropic, Endpoint::CountTokens)
        }
        (&Method::POST, "/v1/chat/completions") => route(Provider::OpenAi, Endpoint::Chat),
        (&Method::POST, "/v1/responses") => route(Provider::OpenAi, Endpoint::Responses),
        (&Method::GET, "/v1/models") => route(family, Endpoint::Models),
        (_, p) if p.starts_with("/v1/") || p == "/v1" => route(family, Endpoint::Other),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_routes_and_family_fallback() {
        let h = HeaderMap::new();
        let r = classify(&Method::POST, "/v1/messages", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::Anthropic, Endpoint::Messages)
        );
        let r = classify(&Method::POST, "/v1/responses", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::OpenAi, Endpoint::Responses)
        );
        let r = classify(&Method::GET, "/v1/files", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::OpenAi, Endpoint::Other)
        );
        let mut h = HeaderMap::new();
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        let r = classify(&Method::GET, "/v1/models", &h).unwrap();
        assert_eq!(
            (r.provider, r.endpoint),
            (Provider::Anthropic, Endpoint::Models)
        );
        assert!(classify(&Method::GET, "/healthz", &h).is_none());
    }
}
