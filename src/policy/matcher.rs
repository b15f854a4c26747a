//! `[match]`: which requests a policy applies to.

use globset::{Glob, GlobSet, GlobSetBuilder};
use http::header::HeaderName;
use http::HeaderMap;

use crate::providers::auth::Credential;
use crate::route::{Endpoint, Provider};

/// The coding agent (or SDK) a request comes from: the envelope's client detection.
pub use crate::envelope::Client as ClientKind;

/// What is known about a request when policies are chosen.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    pub provider: Provider,
    pub endpoint: Endpoint,
    pub model: &'a str,
    pub client: ClientKind,
    pub headers: &'a HeaderMap,
}

/// A validated `[match]` table. Empty lists match everything.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    pub providers: Vec<Provider>,
    pub endpoints: Vec<Endpoint>,
    /// The model globs as written, for display.
    pub model_patterns: Vec<String>,
    models: Option<GlobSet>,
    pub clients: Vec<ClientKind>,
    /// Header name (lower case) and the exact value it must have.
    pub headers: Vec<(HeaderName, String)>,
    /// Credential kinds shaped; empty means API keys only: subscription (OAuth) traffic is
    /// passed through unless a policy names it.
    pub auth: Vec<Credential>,
}

impl Matcher {
    pub fn new(
        providers: Vec<Provider>,
        endpoints: Vec<Endpoint>,
        model_globs: Vec<(String, Glob)>,
        clients: Vec<ClientKind>,
        headers: Vec<(HeaderName, String)>,
    ) -> Result<Self, globset::Error> {
        let models = if model_globs.is_empty() {
            None
        } else {
            let mut builder = GlobSetBuilder::new();
            for (_, glob) in &model_globs {
                builder.add(glob.clone());
            }
            Some(builder.build()?)
        };
        Ok(Matcher {
            providers,
            endpoints,
            model_patterns: model_globs.into_iter().map(|(p, _)| p).collect(),
            models,
            clients,
            headers,
            auth: Vec::new(),
        })
    }

    /// The credential kinds this policy shapes (`[match] auth`).
    pub fn with_auth(mut self, auth: Vec<Credential>) -> Self {
        self.auth = auth;
        self
    }

    fn shapes(&self, credential: Credential) -> bool {
        match self.auth.is_empty() {
            true => credential == Credential::ApiKey,
            false => self.auth.contains(&credential),
        }
    }

    /// Every condition given holds for the request.
    pub fn matches(&self, facts: &RequestFacts<'_>) -> bool {
        (self.providers.is_empty() || self.providers.contains(&facts.provider))
            && (self.endpoints.is_empty() || self.endpoints.contains(&facts.endpoint))
            && self.models.as_ref().is_none_or(|m| m.is_match(facts.model))
            && (self.clients.is_empty() || self.clients.contains(&facts.client))
            && self.headers.iter().all(|(name, value)| {
                facts
                    .headers
                    .get_all(name)
                    .iter()
                    .any(|v| v.to_str().is_ok_and(|v| v == value))
            })
            && self.shapes(crate::providers::auth::credential(facts.headers))
    }
}

/// The providers a policy can name: every one.
fn policy_providers() -> impl Iterator<Item = Provider> {
    Provider::ALL.into_iter()
}

/// The endpoints a policy can name: the generation endpoints.
fn policy_endpoints() -> impl Iterator<Item = Endpoint> {
    Endpoint::ALL.into_iter().filter(|e| e.is_generation())
}

/// Names as an error lists the accepted ones: `a | b | c`.
fn expected(names: impl Iterator<Item = &'static str>) -> String {
    names.collect::<Vec<_>>().join(" | ")
}

/// A provider name as written in policies, or why it names none.
pub fn parse_provider(s: &str) -> Result<Provider, String> {
    policy_providers().find(|p| p.label() == s).ok_or_else(|| {
        let names = expected(policy_providers().map(Provider::label));
        format!("unknown provider `{s}`; expected {names}")
    })
}

/// An endpoint name a policy can match (a generation endpoint), or why it names none.
pub fn parse_endpoint(s: &str) -> Result<Endpoint, String> {
    policy_endpoints().find(|e| e.label() == s).ok_or_else(|| {
        let names = expected(policy_endpoints().map(Endpoint::label));
        format!("unknown endpoint `{s}`; expected {names}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(model: &'a str, headers: &'a HeaderMap) -> RequestFacts<'a> {
        RequestFacts {
            provider: Provider::Anthropic,
            endpoint: Endpoint::Messages,
            model,
            client: ClientKind::ClaudeCode,
            headers,
        }
    }

    #[test]
    fn every_given_condition_must_hold() {
        let m = Matcher::new(
            vec![Provider::Anthropic],
            vec![],
            vec![("claude-*".into(), Glob::new("claude-*").unwrap())],
            vec![ClientKind::ClaudeCode, ClientKind::Pi],
            vec![(HeaderName::from_static("x-team"), "infra".into())],
        )
        .unwrap();
        let mut headers = HeaderMap::new();
        assert!(!m.matches(&facts("claude-sonnet-4-5", &headers)));
        headers.insert("x-team", "infra".parse().unwrap());
        assert!(m.matches(&facts("claude-sonnet-4-5", &headers)));
        assert!(!m.matches(&facts("gpt-5", &headers)));
        let mut f = facts("claude-sonnet-4-5", &headers);
        f.provider = Provider::OpenAi;
        assert!(!m.matches(&f));
        let mut f = facts("claude-sonnet-4-5", &headers);
        f.client = ClientKind::Codex;
        assert!(!m.matches(&f));
    }

    #[test]
    fn empty_matcher_matches_every_api_key_request() {
        let headers = HeaderMap::new();
        assert!(Matcher::default().matches(&facts("anything", &headers)));
    }

    #[test]
    fn subscription_requests_match_only_policies_that_name_them() {
        let mut oauth = HeaderMap::new();
        oauth.insert("authorization", "Bearer sk-ant-oat01-x".parse().unwrap());
        assert!(!Matcher::default().matches(&facts("m", &oauth)));
        let opted = Matcher::default().with_auth(vec![Credential::ApiKey, Credential::OAuth]);
        assert!(opted.matches(&facts("m", &oauth)));
        assert!(opted.matches(&facts("m", &HeaderMap::new())));
        let only = Matcher::default().with_auth(vec![Credential::OAuth]);
        assert!(!only.matches(&facts("m", &HeaderMap::new())));
    }
}
