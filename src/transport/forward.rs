//! The upstream side: where a request goes, which headers cross, and how failures to reach
//! the upstream become provider-format errors (502 unreachable/TLS, 504 time-out).

use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::UpstreamConfig;
use crate::error::{ApiError, ErrorKind};
use crate::providers::bedrock::{self, sigv4, sigv4::AwsCredentials};
use crate::providers::{auth, vertex};
use crate::route::Provider;
use crate::secret::Secret;
use crate::transport::upstream_client::{SendError, UpstreamClient};
use crate::transport::vertex_token::TokenMinter;

/// Headers that describe one hop, never forwarded (RFC 9110 §7.6.1), plus those the HTTP
/// client sets itself.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

pub fn is_hop_by_hop(name: &HeaderName, connection: Option<&HeaderValue>) -> bool {
    if HOP_BY_HOP.contains(&name.as_str()) {
        return true;
    }
    // Headers named in `Connection` are hop-by-hop too.
    connection
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(name.as_str()))
        })
        .unwrap_or(false)
}

/// The length a client declared for its body, where its framing goes by it: a length beside
/// `transfer-encoding` is one the chunked framing overrides (RFC 9112 §6.3).
pub fn declared_length(client: &HeaderMap) -> Option<&HeaderValue> {
    match client.contains_key(http::header::TRANSFER_ENCODING) {
        true => None,
        false => client.get(http::header::CONTENT_LENGTH),
    }
}

fn copy_end_to_end(from: &HeaderMap) -> HeaderMap {
    // Cloning the map and removing the few hop-by-hop names costs less than re-inserting
    // every header one by one (each insert hashes its name).
    let mut out = from.clone();
    let connection = from.get(http::header::CONNECTION);
    let hop: Vec<&HeaderName> = from
        .keys()
        .filter(|name| is_hop_by_hop(name, connection))
        .collect();
    for name in hop {
        out.remove(name);
    }
    out
}

/// Where a request goes: its provider's API, or, for an OpenAI request signed in with
/// ChatGPT, the ChatGPT backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    Anthropic,
    OpenAi,
    ChatGpt,
    Gemini,
    Bedrock,
    Vertex,
}

impl Destination {
    /// The destination of a request of `provider` carrying `headers`.
    pub fn of(provider: Provider, headers: &HeaderMap) -> Destination {
        match provider {
            Provider::Anthropic => Destination::Anthropic,
            Provider::OpenAi if crate::providers::auth::signed_in_with_chatgpt(headers) => {
                Destination::ChatGpt
            }
            Provider::OpenAi => Destination::OpenAi,
            Provider::Gemini => Destination::Gemini,
            Provider::Bedrock => Destination::Bedrock,
            Provider::Vertex => Destination::Vertex,
        }
    }
}

/// Resolved upstream endpoints and optional keys held by cachet.
#[derive(Debug, Clone)]
pub struct Upstreams {
    anthropic: Base,
    openai: Base,
    chatgpt: Base,
    gemini: Base,
    bedrock: Base,
    /// `None`: each request's location's endpoint.
    vertex: Option<Base>,
    anthropic_key: Option<Secret>,
    openai_key: Option<Secret>,
    gemini_key: Option<Secret>,
    vertex_token: Option<Secret>,
    /// The service-account key cachet mints Vertex AI's token from, when it holds one.
    vertex_minter: Option<Arc<TokenMinter>>,
    /// The AWS credentials Bedrock requests are signed with, when cachet holds them.
    aws: Option<AwsCredentials>,
}

/// A configured base URL, parsed once: a request only sets the path and query on a copy, so
/// its scheme, host and port are the configured ones whatever the path holds.
#[derive(Debug, Clone)]
pub(crate) struct Base {
    /// `None` when the configured base is not a URL: every request to it is refused.
    url: Option<reqwest::Url>,
    /// Its own path without a trailing `/` (`/gw/anthropic`, or empty), which no request
    /// may leave.
    path: String,
    /// Its host, for error messages (never the full URL).
    host: String,
}

impl Base {
    fn parse(configured: &str, fallback_host: &str) -> Base {
        let url = reqwest::Url::parse(configured.trim_end_matches('/')).ok();
        Base {
            path: url
                .as_ref()
                .map(|u| u.path().trim_end_matches('/').to_string())
                .unwrap_or_default(),
            host: url
                .as_ref()
                .and_then(|u| u.host_str())
                .unwrap_or(fallback_host)
                .to_string(),
            url,
        }
    }
}

impl Upstreams {
    pub fn from_config(cfg: &UpstreamConfig) -> anyhow::Result<Self> {
        let key = |env: &Option<String>| -> anyhow::Result<Option<Secret>> {
            match env {
                None => Ok(None),
                Some(var) => match std::env::var(var) {
                    Ok(v) if !v.is_empty() => Ok(Some(Secret::new(v))),
                    _ => anyhow::bail!("environment variable {var} (an upstream key) is not set"),
                },
            }
        };
        let aws = cfg.aws()?;
        let bedrock = match &cfg.bedrock {
            Some(url) => url.clone(),
            None => {
                let region = aws.as_ref().map(|c| c.region.clone()).unwrap_or_else(|| {
                    std::env::var("AWS_REGION")
                        .ok()
                        .filter(|r| !r.is_empty())
                        .unwrap_or_else(|| sigv4::DEFAULT_REGION.to_string())
                });
                bedrock::regional_endpoint(&region)
            }
        };
        Ok(Upstreams {
            anthropic: Base::parse(&cfg.anthropic, "anthropic"),
            openai: Base::parse(&cfg.openai, "openai"),
            chatgpt: Base::parse(&cfg.chatgpt, "chatgpt"),
            gemini: Base::parse(&cfg.gemini, "gemini"),
            bedrock: Base::parse(&bedrock, "bedrock"),
            vertex: cfg.vertex.as_deref().map(|url| Base::parse(url, "vertex")),
            anthropic_key: key(&cfg.anthropic_api_key_env)?,
            openai_key: key(&cfg.openai_api_key_env)?,
            gemini_key: key(&cfg.gemini_api_key_env)?,
            vertex_token: key(&cfg.vertex_token_env)?,
            vertex_minter: match cfg.vertex_key_file()? {
                Some(path) => Some(Arc::new(TokenMinter::from_file(&path)?)),
                None => None,
            },
            aws,
        })
    }

    /// The base a request to `to` for `path` goes under: a Vertex request without a
    /// configured base goes to its location's endpoint.
    fn base(&self, to: Destination, path: &str) -> std::borrow::Cow<'_, Base> {
        use std::borrow::Cow;
        match to {
            Destination::Anthropic => Cow::Borrowed(&self.anthropic),
            Destination::OpenAi => Cow::Borrowed(&self.openai),
            Destination::ChatGpt => Cow::Borrowed(&self.chatgpt),
            Destination::Gemini => Cow::Borrowed(&self.gemini),
            Destination::Bedrock => Cow::Borrowed(&self.bedrock),
            Destination::Vertex => match &self.vertex {
                Some(base) => Cow::Borrowed(base),
                None => {
                    let location = vertex::location_of(path).unwrap_or("global");
                    Cow::Owned(Base::parse(&vertex::regional_endpoint(location), "vertex"))
                }
            },
        }
    }

    /// What mints the token cachet sends Vertex AI, when it holds a service-account key.
    pub fn vertex_minter(&self) -> Option<&TokenMinter> {
        self.vertex_minter.as_deref()
    }

    /// The AWS credentials cachet signs Bedrock requests with, if it holds any.
    pub fn aws(&self) -> Option<&AwsCredentials> {
        self.aws.as_ref()
    }

    /// The upstream URL for a client path (with query). A base that already stands for `/v1`
    /// (one ending in it, as OpenAI base URLs often do, or the ChatGPT backend's Codex base)
    /// does not get the client's `/v1`. The path is appended to the base's path as it came;
    /// should URL parsing normalise it anywhere (a dot segment, a backslash), the URL would
    /// leave or reshape the base path, and it is refused.
    pub fn url(&self, to: Destination, path_and_query: &str) -> Result<reqwest::Url, ApiError> {
        let base = self.base(to, path_and_query);
        let base_path = &base.path;
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        let path = match path.strip_prefix("/v1") {
            Some(rest) if crate::providers::openai_responses::base_stands_for_v1(base_path) => rest,
            _ => path,
        };
        let refused = || {
            ApiError::invalid(
                "request path cannot be forwarded: it would leave the upstream's base path",
            )
        };
        let joins = path.is_empty() || path.starts_with('/');
        let Some(mut url) = base.url.clone().filter(|_| joins) else {
            return Err(refused());
        };
        // The path is parsed as it would be in the whole URL (dot segments, backslashes).
        let expected = format!("{base_path}{path}");
        url.set_path(&expected);
        url.set_query(query);
        if to == Destination::Gemini && self.gemini_key.is_some() {
            // The held key goes in its header: a key the client put in the query (its cachet
            // key, or its own) never goes upstream beside it.
            crate::providers::gemini::drop_query_key(&mut url);
        }
        let segments = |p: &str| p.split('/').count();
        let inside = url.path() == expected
            || (url.path().starts_with(base_path.as_str())
                && url.path()[base_path.len()..].starts_with('/')
                && segments(url.path()) == segments(&expected));
        if !inside {
            return Err(refused());
        }
        Ok(url)
    }

    /// Host of the upstream, for error messages (never the full URL).
    pub fn host(&self, to: Destination, path: &str) -> String {
        self.base(to, path).host.clone()
    }

    /// Headers for the upstream request: the client's end-to-end headers, with cachet's own
    /// key in place of the client's when one is configured for the destination's API (never
    /// for the ChatGPT backend, which takes the client's own sign-in, and is another host,
    /// and never in place of a subscription's own token: see
    /// [`auth::carries_subscription_token`]).
    /// `identity` asks the upstream for an uncompressed body so the usage tap can read it.
    pub fn request_headers(
        &self,
        to: Destination,
        client: &HeaderMap,
        identity: bool,
    ) -> HeaderMap {
        let mut headers = copy_end_to_end(client);
        headers.remove("x-cachet-session");
        if identity {
            headers.remove(http::header::ACCEPT_ENCODING);
        }
        let held = match to {
            _ if auth::carries_subscription_token(client) => None,
            Destination::Anthropic => {
                (self.anthropic_key.as_ref()).map(|key| ("x-api-key", key.expose().to_string()))
            }
            Destination::OpenAi => (self.openai_key.as_ref())
                .map(|key| ("authorization", format!("Bearer {}", key.expose()))),
            Destination::Vertex => (self.vertex_token.as_ref())
                .map(|token| ("authorization", format!("Bearer {}", token.expose()))),
            Destination::Gemini => {
                (self.gemini_key.as_ref()).map(|key| ("x-goog-api-key", key.expose().to_string()))
            }
            Destination::ChatGpt | Destination::Bedrock => None,
        };
        if let Some((name, value)) = held {
            if let Ok(v) = HeaderValue::from_str(&value) {
                hold(&mut headers, HeaderName::from_static(name), v);
            }
        }
        headers
    }
}

/// Put a credential cachet holds in `name`, in place of every credential the client sent.
pub fn hold(headers: &mut HeaderMap, name: HeaderName, mut value: HeaderValue) {
    headers.remove(http::header::AUTHORIZATION);
    headers.remove("x-api-key");
    headers.remove(crate::providers::gemini::API_KEY_HEADER);
    value.set_sensitive(true);
    headers.insert(name, value);
}

/// What the client is sent ahead of an answer's body: the upstream's end-to-end headers,
/// unchanged, and how many bytes the body holds when that is known (`None`: until it ends).
///
/// With `body_as_sent` (cachet passes the body on as it came, adding nothing), the
/// upstream's `content-length` is kept too: the client reads the framing the provider
/// chose, a body cut short is one it can tell is short, and a keep-alive client reuses its
/// connection more often than with a re-chunked body (BENCHMARKS.md, "Answers framed as the
/// upstream framed them").
pub fn response_head(
    upstream: &HeaderMap,
    status: u16,
    head_request: bool,
    body_as_sent: bool,
) -> (HeaderMap, Option<u64>) {
    let mut headers = copy_end_to_end(upstream);
    // A length beside `transfer-encoding` is one the upstream's framing overrode
    // (RFC 9112 §6.3); a 204 never has one (RFC 9110 §8.6).
    let kept = match upstream.get(http::header::CONTENT_LENGTH) {
        Some(length)
            if body_as_sent
                && status != 204
                && !upstream.contains_key(http::header::TRANSFER_ENCODING) =>
        {
            headers.insert(http::header::CONTENT_LENGTH, length.clone());
            length.to_str().ok().and_then(|v| v.parse().ok())
        }
        _ => None,
    };
    // A response to HEAD, a 204 and a 304 have no body whatever their headers say
    // (RFC 9110 §9.3.2, §15.3.5, §15.4.5).
    let bodiless = head_request || matches!(status, 204 | 304);
    (headers, if bodiless { Some(0) } else { kept })
}

/// The HTTP client for upstreams: hyper-util's, over rustls, through the environment's
/// proxies, no redirects, no transparent decompression.
pub fn build_client(cfg: &UpstreamConfig) -> anyhow::Result<UpstreamClient> {
    UpstreamClient::build(cfg)
}

/// Map a failure to get response headers from the upstream into a client-facing error: a
/// time-out (connecting included) is a 504, a connection, proxy tunnel or TLS handshake that
/// failed a 502 with its innermost cause, anything else a 502. Never the URL.
pub fn send_error(err: &SendError, host: &str) -> ApiError {
    if err.is_timeout() {
        return ApiError::new(
            ErrorKind::Timeout,
            format!("upstream {host} did not answer in time"),
        );
    }
    if err.is_connect() {
        // The source chain says whether it was refused, unresolvable or a TLS failure.
        return ApiError::new(
            ErrorKind::BadGateway,
            format!("cannot connect to upstream {host}: {}", err.root_cause()),
        );
    }
    ApiError::new(
        ErrorKind::BadGateway,
        format!("upstream {host} failed: {}", err.describe()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_v1_dedup() {
        let cfg = UpstreamConfig {
            openai: "http://127.0.0.1:9/v1/".into(),
            ..Default::default()
        };
        let u = Upstreams::from_config(&cfg).unwrap();
        assert_eq!(
            u.url(Destination::OpenAi, "/v1/chat/completions")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9/v1/chat/completions"
        );
        assert_eq!(
            u.url(Destination::Anthropic, "/v1/messages?beta=true")
                .unwrap()
                .as_str(),
            "https://api.anthropic.com/v1/messages?beta=true"
        );
    }

    /// Codex signed in with ChatGPT talks to `https://chatgpt.com/backend-api/codex`, and
    /// appends `/responses` to it (codex-rs: `CHATGPT_CODEX_BASE_URL`, the Responses
    /// endpoint's path `responses`). Behind cachet it sends `/v1/responses` (its
    /// `openai_base_url` ends in `/v1`), so that base stands for `/v1` like one ending in it.
    #[test]
    fn the_chatgpt_codex_base_stands_for_v1() {
        for base in [
            "https://chatgpt.com/backend-api/codex",
            "https://chatgpt.com/backend-api/codex/",
        ] {
            let cfg = UpstreamConfig {
                openai: base.into(),
                ..Default::default()
            };
            let u = Upstreams::from_config(&cfg).unwrap();
            assert_eq!(
                u.url(Destination::OpenAi, "/v1/responses")
                    .unwrap()
                    .as_str(),
                "https://chatgpt.com/backend-api/codex/responses"
            );
            assert_eq!(
                u.url(Destination::OpenAi, "/v1/models?client_version=0.171.0")
                    .unwrap()
                    .as_str(),
                "https://chatgpt.com/backend-api/codex/models?client_version=0.171.0"
            );
        }
        // By default a request signed in with ChatGPT goes there; others to the API.
        let u = Upstreams::from_config(&UpstreamConfig::default()).unwrap();
        let mut signed_in = HeaderMap::new();
        signed_in.insert("chatgpt-account-id", HeaderValue::from_static("acc-1"));
        let to = Destination::of(Provider::OpenAi, &signed_in);
        assert_eq!(to, Destination::ChatGpt);
        assert_eq!(
            u.url(to, "/v1/responses").unwrap().as_str(),
            "https://chatgpt.com/backend-api/codex/responses"
        );
        let to = Destination::of(Provider::OpenAi, &HeaderMap::new());
        assert_eq!(
            u.url(to, "/v1/responses").unwrap().as_str(),
            "https://api.openai.com/v1/responses"
        );
        assert_eq!(
            Destination::of(Provider::Anthropic, &signed_in),
            Destination::Anthropic
        );
        // Only that base: another path ending in `codex` keeps the client's `/v1`.
        let cfg = UpstreamConfig {
            openai: "http://127.0.0.1:9/gw/codex".into(),
            ..Default::default()
        };
        let u = Upstreams::from_config(&cfg).unwrap();
        assert_eq!(
            u.url(Destination::OpenAi, "/v1/responses").unwrap().path(),
            "/gw/codex/v1/responses"
        );
    }

    #[test]
    fn no_path_leaves_the_base_path() {
        let cfg = UpstreamConfig {
            anthropic: "http://127.0.0.1:9/gw/anthropic".into(),
            openai: "http://127.0.0.1:9/gw/openai/v1".into(),
            ..Default::default()
        };
        let u = Upstreams::from_config(&cfg).unwrap();
        assert_eq!(
            u.url(Destination::Anthropic, "/v1/messages")
                .unwrap()
                .path(),
            "/gw/anthropic/v1/messages"
        );
        assert_eq!(
            u.url(Destination::OpenAi, "/v1/files/a%20b?x=1")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9/gw/openai/v1/files/a%20b?x=1"
        );
        for path in [
            "/v1/../../openai/v1/chat/completions",
            "/v1/%2e%2e/%2e%2e/openai/v1/chat/completions",
            "/v1/%2E%2e/x",
            "/v1/./messages",
            "/v1\\..\\..\\admin",
        ] {
            assert!(u.url(Destination::Anthropic, path).is_err(), "{path}");
            assert!(u.url(Destination::OpenAi, path).is_err(), "{path}");
        }
    }

    #[test]
    fn hop_by_hop_headers_are_dropped() {
        let mut h = HeaderMap::new();
        h.insert("connection", "keep-alive, x-foo".parse().unwrap());
        h.insert("x-foo", "1".parse().unwrap());
        h.insert("x-api-key", "sk".parse().unwrap());
        h.insert("anthropic-version", "2023-06-01".parse().unwrap());
        h.insert("accept-encoding", "gzip".parse().unwrap());
        h.insert("x-cachet-session", "s1".parse().unwrap());
        let u = Upstreams::from_config(&UpstreamConfig::default()).unwrap();
        let out = u.request_headers(Destination::Anthropic, &h, true);
        assert!(out.get("x-foo").is_none() && out.get("connection").is_none());
        assert!(out.get("accept-encoding").is_none() && out.get("x-cachet-session").is_none());
        assert_eq!(out.get("x-api-key").unwrap(), "sk");
        assert_eq!(out.get("anthropic-version").unwrap(), "2023-06-01");
    }
}
