//! Which kind of credential a request carries: a provider API key, or a subscription's
//! OAuth token. Subscription traffic (Claude Code signed in to a Claude plan, Codex signed
//! in with ChatGPT) is passed through unmodified unless a policy opts in (`[match] auth`):
//! the provider accepts such a token only for requests shaped as its own client sends them.

use http::HeaderMap;

/// The kind of credential, as named in a policy's `[match] auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Credential {
    /// A provider API key (`x-api-key`, `authorization: Bearer sk-…`), or none at all.
    ApiKey,
    /// A subscription's OAuth access token.
    OAuth,
}

impl Credential {
    pub fn label(self) -> &'static str {
        match self {
            Credential::ApiKey => "api-key",
            Credential::OAuth => "oauth",
        }
    }

    pub fn parse(s: &str) -> Option<Credential> {
        [Credential::ApiKey, Credential::OAuth]
            .into_iter()
            .find(|c| c.label() == s)
    }
}

/// Anthropic OAuth access tokens start with this (`sk-ant-oat01-…`; API keys are
/// `sk-ant-api03-…`).
const ANTHROPIC_OAUTH_PREFIX: &str = "sk-ant-oat";
/// Claude Code sends this beta (`oauth-2025-04-20`) with an OAuth token.
const ANTHROPIC_OAUTH_BETA: &str = "oauth-";
/// Codex signed in with ChatGPT names the account in this header.
const CHATGPT_ACCOUNT_HEADER: &str = "chatgpt-account-id";

/// The credential a request carries.
pub fn credential(headers: &HeaderMap) -> Credential {
    let bearer_oauth = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(bearer_token)
        .any(|token| token.starts_with(ANTHROPIC_OAUTH_PREFIX));
    let oauth_beta = headers
        .get_all(super::ANTHROPIC_BETA)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|beta| beta.trim().starts_with(ANTHROPIC_OAUTH_BETA));
    if bearer_oauth || oauth_beta || signed_in_with_chatgpt(headers) {
        Credential::OAuth
    } else {
        Credential::ApiKey
    }
}

/// Whether a subscription request still carries its own token (`authorization: Bearer`,
/// once any cachet client key has been taken off at the edge). That token is the user's
/// plan: a key cachet holds for the provider never takes its place, which would move the
/// request onto the operator's API bill (README, "Security model").
pub fn carries_subscription_token(headers: &HeaderMap) -> bool {
    credential(headers) == Credential::OAuth
        && headers
            .get_all(http::header::AUTHORIZATION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .any(|v| bearer_token(v).is_some_and(|token| !token.is_empty()))
}

/// Whether a request is signed in with ChatGPT (Codex names the account in
/// `chatgpt-account-id` beside its access token): such a request is served by the ChatGPT
/// backend ([`super::openai_responses::CHATGPT_CODEX_BASE_URL`]), not by the API.
pub fn signed_in_with_chatgpt(headers: &HeaderMap) -> bool {
    headers.contains_key(CHATGPT_ACCOUNT_HEADER)
}

/// The secrets a request presents where `provider` reads its credential: Anthropic's
/// `x-api-key` (an API key) or `authorization: Bearer` (a subscription's OAuth token);
/// OpenAI's `authorization: Bearer` (an API key, or a ChatGPT access token on the ChatGPT
/// backend).
pub fn presented(provider: super::Provider, headers: &HeaderMap) -> Vec<&str> {
    let bearer = headers
        .get_all(http::header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(bearer_token);
    match provider {
        super::Provider::Anthropic => headers
            .get_all("x-api-key")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .chain(bearer)
            .collect(),
        super::Provider::Gemini => headers
            .get_all(super::gemini::API_KEY_HEADER)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::trim)
            .collect(),
        super::Provider::OpenAi | super::Provider::Bedrock | super::Provider::Vertex => {
            bearer.collect()
        }
    }
}

/// The token of an `authorization: Bearer TOKEN` value.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    // Claude Code on a subscription: `Authorization: Bearer sk-ant-oat01-…` with
    // `anthropic-beta: oauth-2025-04-20,…` (captured Claude Code traffic, e.g.
    // vpaturel/claude-wrapper-secure analyse_claude_api.md). Codex signed in with ChatGPT
    // sends `chatgpt-account-id` with its OAuth bearer token (openai/codex docs and
    // proxies built on it).
    #[test]
    fn subscription_credentials_are_told_from_api_keys() {
        for oauth in [
            headers(&[("authorization", "Bearer sk-ant-oat01-abc")]),
            headers(&[("authorization", "bearer sk-ant-oat01-abc")]),
            headers(&[
                ("x-api-key", "sk-ant-api03-x"),
                ("anthropic-beta", "claude-code-20250219, oauth-2025-04-20"),
            ]),
            headers(&[
                ("authorization", "Bearer eyJhbGciOi.x.y"),
                ("chatgpt-account-id", "acc-1"),
            ]),
        ] {
            assert_eq!(credential(&oauth), Credential::OAuth, "{oauth:?}");
        }
        for key in [
            headers(&[("x-api-key", "sk-ant-api03-x")]),
            headers(&[("authorization", "Bearer sk-proj-abc")]),
            headers(&[("anthropic-beta", "prompt-caching-2024-07-31")]),
            headers(&[]),
        ] {
            assert_eq!(credential(&key), Credential::ApiKey, "{key:?}");
        }
    }

    /// The held key gives way only to a token the request still carries: a request with a
    /// subscription's beta and no token of its own (an API key beside it, or nothing once its
    /// cachet key is taken off) still goes with the held key.
    #[test]
    fn a_subscription_token_is_one_the_request_still_carries() {
        for own in [
            headers(&[
                ("authorization", "Bearer sk-ant-oat01-abc"),
                ("anthropic-beta", "oauth-2025-04-20"),
            ]),
            headers(&[("authorization", "Bearer sk-ant-oat01-abc")]),
            headers(&[
                ("authorization", "Bearer eyJhbGciOi.x.y"),
                ("chatgpt-account-id", "acc-1"),
            ]),
        ] {
            assert!(carries_subscription_token(&own), "{own:?}");
        }
        for not_own in [
            headers(&[("anthropic-beta", "claude-code-20250219, oauth-2025-04-20")]),
            headers(&[
                ("x-api-key", "sk-ant-api03-x"),
                ("anthropic-beta", "oauth-2025-04-20"),
            ]),
            headers(&[("authorization", "Bearer sk-proj-abc")]),
            headers(&[("authorization", "Bearer "), ("chatgpt-account-id", "a")]),
        ] {
            assert!(!carries_subscription_token(&not_own), "{not_own:?}");
        }
    }
}
