//! `cachet.toml`: strict raw structs (unknown fields refused), then flags on top.
//! Every field is documented in the book's configuration reference
//! (docs/src/operations/configuration.md; `tests/it/docs_reference.rs` holds it to these structs).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::policy::line_col;

/// The `key` metric label, and the session namespace, of requests that present no client
/// key: no client key may be named so.
pub const NO_KEY: &str = "none";

/// The whole configuration file. Every section and field is optional.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub server: ServerConfig,
    pub upstream: UpstreamConfig,
    pub policies: PoliciesConfig,
    pub sessions: crate::session::SessionsConfig,
    pub record: RecordConfig,
    pub log: crate::telemetry::LogConfig,
    /// A model table (format of `data/models.toml`) whose rows are tried before the shipped
    /// ones: prices, cache minimums and context windows for models cachet does not ship.
    pub models: Option<PathBuf>,
    pub telemetry: crate::telemetry::TelemetryConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Proxy listener.
    pub listen: SocketAddr,
    /// Admin listener (metrics, health, sessions). Keep it on loopback.
    pub admin_listen: SocketAddr,
    /// Largest request body accepted, in bytes; larger bodies get a 413.
    pub max_body_bytes: usize,
    /// On SIGTERM/Ctrl-C, how long streams in flight may take to finish.
    pub shutdown_grace_secs: u64,
    /// Time a client has to send its request line and headers before the connection closes.
    pub header_read_timeout_ms: u64,
    /// Check that each generation request body is JSON of its API's shape before forwarding
    /// it (a 400 otherwise). Off, requests no policy matches go through unread, and the model
    /// label comes from the response.
    pub check_body: bool,
    /// Read agents' bodies incrementally: remember recent bodies' history prefixes, and
    /// check and scan only what a request adds to the body it repeats. Off, every body is
    /// read whole (the same results, more CPU).
    pub incremental: bool,
    /// Time a client has to send its whole request body once the head is in (a 408 after).
    pub body_read_timeout_ms: u64,
    /// Proxy connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Keys clients must present (`x-api-key` or `authorization: Bearer`); none: no check.
    pub client_keys: Vec<ClientKeyConfig>,
    /// Let cachet hold an upstream key without client keys (anyone reaching it uses it).
    pub allow_open_relay: bool,
    /// Environment variable holding a bearer token the admin listener requires (all routes
    /// but `/healthz` and `/readyz`).
    pub admin_token_env: Option<String>,
    /// Proxy the Responses API's WebSocket mode (`GET /v1/responses` upgraded, as Codex
    /// asks first). Off, the upgrade is answered 426 and clients fall back to HTTP.
    pub websocket: bool,
    /// A socket with no message either way for this long is closed (code 1001).
    pub websocket_idle_timeout_secs: u64,
}

/// One `[[server.client_keys]]` entry: a name (the `key` metric label and the session
/// namespace) and the environment variable holding the key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientKeyConfig {
    pub name: String,
    pub key_env: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9787)),
            max_body_bytes: 32 * 1024 * 1024,
            shutdown_grace_secs: 30,
            header_read_timeout_ms: 30_000,
            check_body: true,
            incremental: true,
            body_read_timeout_ms: 30_000,
            max_connections: 1024,
            client_keys: Vec::new(),
            allow_open_relay: false,
            admin_token_env: None,
            websocket: true,
            websocket_idle_timeout_secs: 900,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Base URL of the Anthropic API.
    pub anthropic: String,
    /// Base URL of the OpenAI API.
    pub openai: String,
    /// Base URL of the ChatGPT backend, where OpenAI-family requests signed in with ChatGPT
    /// (Codex's `chatgpt-account-id`) go instead of `openai`.
    pub chatgpt: String,
    /// Base URL of Google's Gemini API (`/v1beta/...` requests).
    pub gemini: String,
    /// Base URL of Amazon Bedrock Runtime (`/model/{modelId}/...`); unset: the regional
    /// endpoint `https://bedrock-runtime.{region}.amazonaws.com` of the region cachet signs
    /// for (`AWS_REGION`, the profile's, else `us-east-1`).
    pub bedrock: Option<String>,
    /// Base URL of Vertex AI (`/v1/projects/...`); unset: the endpoint of each request's
    /// location, `https://{location}-aiplatform.googleapis.com` (`global`:
    /// `https://aiplatform.googleapis.com`).
    pub vertex: Option<String>,
    /// Sign Bedrock requests with the AWS credentials of the environment
    /// (`"environment"`: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`,
    /// `AWS_REGION`). Holding them is holding a key: client keys are then required.
    pub aws_credentials: Option<AwsCredentialsSource>,
    /// Sign Bedrock requests with the credentials of this profile of the shared AWS files
    /// (`~/.aws/credentials`, its region from `~/.aws/config`).
    pub aws_profile: Option<String>,
    /// Time allowed to connect (and finish TLS) to an upstream.
    pub connect_timeout_ms: u64,
    /// Time allowed until the upstream's response headers arrive (504 after).
    pub response_timeout_ms: u64,
    /// Time allowed between two chunks of a response body once it has started.
    pub idle_timeout_ms: u64,
    /// Name of an environment variable holding an Anthropic key that cachet sends
    /// upstream instead of the client's (the client's own key is forwarded when unset).
    pub anthropic_api_key_env: Option<String>,
    /// Same for OpenAI.
    pub openai_api_key_env: Option<String>,
    /// Same for the Gemini API (sent as `x-goog-api-key`; a client's `key=` parameter is
    /// then removed).
    pub gemini_api_key_env: Option<String>,
    /// Name of an environment variable holding a Google access token that cachet sends to
    /// Vertex AI (`authorization: Bearer`) instead of the client's.
    pub vertex_token_env: Option<String>,
    /// Mint the token cachet sends to Vertex AI from the service-account key file that
    /// `GOOGLE_APPLICATION_CREDENTIALS` names (`"environment"`). Holding it is holding a key.
    pub vertex_credentials: Option<GoogleCredentialsSource>,
    /// Mint the token cachet sends to Vertex AI from this service-account key file (JSON, as
    /// Google issues it); the token is fetched from the file's `token_uri`.
    pub vertex_credentials_file: Option<String>,
    /// The HTTP client that forwards requests upstream: `"hyper"`, the only one (hooks and
    /// memory sources use reqwest).
    pub client: UpstreamClientKind,
}

/// `upstream.aws_credentials`: where the AWS credentials cachet signs with come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum AwsCredentialsSource {
    /// The standard variables, read at start.
    #[serde(rename = "environment")]
    Environment,
}

/// `upstream.vertex_credentials`: where the service-account key comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum GoogleCredentialsSource {
    /// The file `GOOGLE_APPLICATION_CREDENTIALS` names, read at start.
    #[serde(rename = "environment")]
    Environment,
}

impl UpstreamConfig {
    /// The service-account key file cachet mints Vertex AI's token from, if it holds one.
    pub fn vertex_key_file(&self) -> anyhow::Result<Option<std::path::PathBuf>> {
        let sources = [
            self.vertex_token_env.is_some(),
            self.vertex_credentials.is_some(),
            self.vertex_credentials_file.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            anyhow::bail!(
                "upstream.vertex_token_env, upstream.vertex_credentials and \
                 upstream.vertex_credentials_file name more than one Vertex AI credential: keep one"
            );
        }
        if let Some(path) = &self.vertex_credentials_file {
            return Ok(Some(path.into()));
        }
        match self.vertex_credentials {
            Some(GoogleCredentialsSource::Environment) => {
                match std::env::var("GOOGLE_APPLICATION_CREDENTIALS") {
                    Ok(path) if !path.is_empty() => Ok(Some(path.into())),
                    _ => anyhow::bail!(
                        "upstream.vertex_credentials = \"environment\": \
                         GOOGLE_APPLICATION_CREDENTIALS is not set"
                    ),
                }
            }
            None => Ok(None),
        }
    }

    /// The AWS credentials cachet holds for Bedrock, if it holds any.
    pub fn aws(&self) -> anyhow::Result<Option<crate::providers::bedrock::sigv4::AwsCredentials>> {
        use crate::providers::bedrock::sigv4::AwsCredentials;
        let creds = match (&self.aws_credentials, &self.aws_profile) {
            (Some(_), Some(_)) => anyhow::bail!(
                "upstream.aws_credentials and upstream.aws_profile name two sources of AWS \
                 credentials: keep one"
            ),
            (Some(AwsCredentialsSource::Environment), None) => AwsCredentials::from_env()
                .map_err(|e| anyhow::anyhow!("upstream.aws_credentials = \"environment\": {e}"))?,
            (None, Some(profile)) => AwsCredentials::from_profile(profile)
                .map_err(|e| anyhow::anyhow!("upstream.aws_profile = {profile:?}: {e}"))?,
            (None, None) => return Ok(None),
        };
        Ok(Some(creds))
    }

    /// Whether cachet holds a credential of its own for some upstream (an API key, AWS
    /// credentials): then the listener must ask for client keys.
    pub fn holds_credentials(&self) -> bool {
        self.anthropic_api_key_env.is_some()
            || self.openai_api_key_env.is_some()
            || self.gemini_api_key_env.is_some()
            || self.vertex_token_env.is_some()
            || self.vertex_credentials.is_some()
            || self.vertex_credentials_file.is_some()
            || self.aws_credentials.is_some()
            || self.aws_profile.is_some()
    }
}

/// `upstream.client`: the HTTP client that forwards requests upstream. hyper-util's pooled
/// client is the only one; `"reqwest"`, which earlier versions also accepted, is refused
/// with what to do instead, rather than quietly read as `"hyper"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpstreamClientKind {
    /// hyper-util's pooled client: HTTP/1.1 and HTTP/2 (ALPN) over rustls with the webpki
    /// roots, no redirects, no decompression, the client's headers as they came; through
    /// the proxy `HTTPS_PROXY`, `HTTP_PROXY` or `ALL_PROXY` names (`NO_PROXY` exempts).
    #[default]
    Hyper,
}

impl<'de> Deserialize<'de> for UpstreamClientKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let name = String::deserialize(d)?;
        match name.as_str() {
            "hyper" => Ok(UpstreamClientKind::Hyper),
            "reqwest" => Err(D::Error::custom(
                "upstream.client = \"reqwest\" was removed: requests go upstream through \
                 hyper-util's client only, which speaks through the proxy HTTPS_PROXY, \
                 HTTP_PROXY or ALL_PROXY names as reqwest did; remove the line, or write \
                 \"hyper\"",
            )),
            other => Err(D::Error::unknown_variant(other, &["hyper"])),
        }
    }
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            anthropic: "https://api.anthropic.com".into(),
            openai: "https://api.openai.com".into(),
            chatgpt: crate::providers::openai_responses::CHATGPT_CODEX_BASE_URL.into(),
            gemini: crate::providers::gemini::DEFAULT_BASE_URL.into(),
            bedrock: None,
            vertex: None,
            aws_credentials: None,
            aws_profile: None,
            connect_timeout_ms: 10_000,
            response_timeout_ms: 600_000,
            idle_timeout_ms: 300_000,
            anthropic_api_key_env: None,
            openai_api_key_env: None,
            gemini_api_key_env: None,
            vertex_token_env: None,
            vertex_credentials: None,
            vertex_credentials_file: None,
            client: UpstreamClientKind::default(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct PoliciesConfig {
    /// Policy files to activate.
    pub files: Vec<PathBuf>,
    /// Folders whose every `*.toml` policy is activated.
    pub dirs: Vec<PathBuf>,
    /// A refused patch fails the request (500) instead of being dropped.
    pub strict: bool,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RecordConfig {
    /// Folder for JSONL traces of every request; off when unset.
    pub dir: Option<PathBuf>,
}

/// A configuration error that names the file, the line and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Render a TOML deserialisation error as `file:line:col: message`.
pub fn toml_error(path: &Path, text: &str, err: &toml::de::Error) -> ConfigError {
    let message = err.message().trim().to_string();
    match err.span() {
        Some(span) => {
            let (line, col) = line_col(text, span.start);
            ConfigError(format!("{}:{line}:{col}: {message}", path.display()))
        }
        None => ConfigError(format!("{}: {message}", path.display())),
    }
}

impl Config {
    /// Parse configuration text; `path` is only used in error messages.
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| toml_error(path, text, &e))?;
        config.validate(path)?;
        Ok(config)
    }

    /// Load `path`, or `./cachet.toml` when present, or the built-in defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let default = Path::new("cachet.toml");
        let path = match path {
            Some(p) => p,
            None if default.exists() => default,
            None => return Ok(Config::default()),
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("{}: cannot read: {e}", path.display())))?;
        Config::parse(path, &text)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let optional = [
            ("upstream.bedrock", &self.upstream.bedrock),
            ("upstream.vertex", &self.upstream.vertex),
        ];
        let optional = optional
            .iter()
            .filter_map(|(field, url)| Some((*field, url.as_ref()?)));
        for (field, url) in [
            ("upstream.anthropic", &self.upstream.anthropic),
            ("upstream.openai", &self.upstream.openai),
            ("upstream.chatgpt", &self.upstream.chatgpt),
            ("upstream.gemini", &self.upstream.gemini),
        ]
        .into_iter()
        .chain(optional)
        {
            let ok = reqwest::Url::parse(url)
                .map(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
                .unwrap_or(false);
            if !ok {
                return Err(ConfigError(format!(
                    "{}: {field}: `{url}` is not an http(s) URL",
                    path.display()
                )));
            }
        }
        if let Err(e) = crate::session::store::StoreSpec::parse(&self.sessions.store) {
            return Err(ConfigError(format!(
                "{}: sessions.store: {e}",
                path.display()
            )));
        }
        if let Some(ca) = &self.sessions.redis_ca_file {
            if let Err(e) = std::fs::metadata(ca) {
                return Err(ConfigError(format!(
                    "{}: sessions.redis_ca_file: cannot read {}: {e}",
                    path.display(),
                    ca.display()
                )));
            }
        }
        if let Some(models) = &self.models {
            crate::models::read_user_table(models)
                .map_err(|e| ConfigError(format!("{}: models: {e}", path.display())))?;
        }
        if let Err(e) = self.telemetry.validate() {
            return Err(ConfigError(format!("{}: {e}", path.display())));
        }
        if self.server.max_body_bytes == 0 {
            return Err(ConfigError(format!(
                "{}: server.max_body_bytes: must be greater than 0",
                path.display()
            )));
        }
        if self.server.max_connections == 0 {
            return Err(ConfigError(format!(
                "{}: server.max_connections: must be greater than 0",
                path.display()
            )));
        }
        self.validate_client_keys(path)
    }

    /// Client key names become metric labels and session namespaces: short, plain, unique,
    /// and never `none` (the label of requests without a key).
    fn validate_client_keys(&self, path: &Path) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, key) in self.server.client_keys.iter().enumerate() {
            let at = format!("{}: server.client_keys[{i}]", path.display());
            let plain = !key.name.is_empty()
                && key.name.len() <= 64
                && key
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !plain || key.name == NO_KEY {
                return Err(ConfigError(format!(
                    "{at}.name: `{}` must be 1 to 64 letters, digits, `-`, `_` or `.`, and not `none`",
                    key.name
                )));
            }
            if !seen.insert(key.name.as_str()) {
                return Err(ConfigError(format!(
                    "{at}.name: `{}` is used twice",
                    key.name
                )));
            }
            if key.key_env.is_empty() {
                return Err(ConfigError(format!(
                    "{at}.key_env: must name an environment variable"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_names_file_line_and_field() {
        let text = "[server]\nlisten = \"127.0.0.1:1\"\nlisten_port = 3\n";
        let err = Config::parse(Path::new("cachet.toml"), text).unwrap_err().0;
        assert!(
            err.starts_with("cachet.toml:3:1: unknown field `listen_port`"),
            "{err}"
        );
    }

    #[test]
    fn a_models_file_is_checked_when_the_configuration_is() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("models.toml");
        std::fs::write(&good, "[[model]]\nmatch = \"m\"\nprovider = \"openai\"\nmin_cacheable_tokens = 1024\ncontext_window = 8000\ninput = 1.0\noutput = 2.0\ncache_read = 0.1\ncache_write_5m = 1.0\ncache_write_1h = 1.0\n").unwrap();
        let text = format!("models = {:?}\n", good.to_str().unwrap());
        let c = Config::parse(Path::new("c.toml"), &text).unwrap();
        assert_eq!(c.models.as_deref(), Some(good.as_path()));
        let err = Config::parse(Path::new("c.toml"), "models = \"/nonexistent/m.toml\"\n")
            .unwrap_err()
            .0;
        assert!(
            err.contains("models") && err.contains("/nonexistent/m.toml"),
            "{err}"
        );
    }

    #[test]
    fn client_keys_parse_and_bad_names_are_refused() {
        let text = "[server]\nallow_open_relay = false\nbody_read_timeout_ms = 500\nadmin_token_env = \"ADM\"\n\n[[server.client_keys]]\nname = \"team-a\"\nkey_env = \"CACHET_KEY_TEAM_A\"\n";
        let c = Config::parse(Path::new("c.toml"), text).unwrap();
        assert_eq!(c.server.client_keys[0].name, "team-a");
        assert_eq!(c.server.client_keys[0].key_env, "CACHET_KEY_TEAM_A");
        assert_eq!(c.server.body_read_timeout_ms, 500);
        assert_eq!(c.server.admin_token_env.as_deref(), Some("ADM"));
        assert_eq!(Config::default().server.body_read_timeout_ms, 30_000);
        for bad in ["none", "a/b", "a:b", ""] {
            let text = format!("[[server.client_keys]]\nname = \"{bad}\"\nkey_env = \"E\"\n");
            let err = Config::parse(Path::new("c.toml"), &text).unwrap_err().0;
            assert!(err.contains("server.client_keys[0].name"), "{err}");
        }
        let twice = "[[server.client_keys]]\nname = \"a\"\nkey_env = \"E\"\n[[server.client_keys]]\nname = \"a\"\nkey_env = \"F\"\n";
        let err = Config::parse(Path::new("c.toml"), twice).unwrap_err().0;
        assert!(err.contains("used twice"), "{err}");
    }

    #[test]
    fn defaults_and_overrides() {
        let c = Config::parse(
            Path::new("c.toml"),
            "[upstream]\nopenai = \"http://127.0.0.1:9\"\n",
        )
        .unwrap();
        assert_eq!(c.upstream.openai, "http://127.0.0.1:9");
        assert_eq!(c.upstream.anthropic, "https://api.anthropic.com");
        assert_eq!(c.server.max_body_bytes, 32 * 1024 * 1024);
        let err = Config::parse(Path::new("c.toml"), "[upstream]\nopenai = \"ftp://x\"\n")
            .unwrap_err()
            .0;
        assert!(err.contains("upstream.openai"), "{err}");
    }

    #[test]
    fn a_store_with_an_unknown_scheme_is_a_config_error() {
        let err = Config::parse(Path::new("c.toml"), "[sessions]\nstore = \"redsi://x\"\n")
            .unwrap_err()
            .0;
        assert!(
            err.starts_with("c.toml: sessions.store:") && err.contains("unknown scheme"),
            "{err}"
        );
        let c = Config::parse(
            Path::new("c.toml"),
            "[sessions]\nstore = \"rediss://h:6380/0\"\n",
        );
        assert!(c.is_ok());
        let c = Config::parse(Path::new("c.toml"), "").unwrap();
        assert_eq!(c.sessions.cache_bytes, 64 * 1024 * 1024);
        assert_eq!(c.sessions.retention_days, 30);
    }
}
