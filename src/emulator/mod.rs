//! The provider emulator (`cachet emulate`): Anthropic Messages (+ count_tokens), OpenAI
//! Chat Completions and Responses, streaming and not, with the cache accounting of
//! [`crate::cache_model`], deterministic replies, a movable clock and injected faults.
//! It is cachet's default upstream for tests and the demo.

mod anthropic;
mod bedrock;
mod body;
mod chat;
mod conversations;
mod converse;
pub mod fault;
mod files;
mod gemini;
mod gemini_caches;
mod generate;
mod google_token;
mod models;
mod prompt_diagnostics;
mod read;
mod recent;
pub mod reply;
mod responses;
mod routes;
mod stored;
pub mod tool_loop;
mod turn;
mod vertex;
mod websocket;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use google_token::ServiceAccount;
pub use reply::{Reply, ReplyScript, ToolCalls};
pub use routes::{Accounted, LOG_CAPACITY};

use crate::cache_model::{CacheModelConfig, Clock};

/// How the emulator behaves. `Default` gives text replies, the providers' cache rules and
/// a clock starting at the current time.
#[derive(Debug, Clone, Default)]
pub struct EmulatorOptions {
    pub reply: ReplyScript,
    pub cache: CacheModelConfig,
    /// Share a clock with the caller; a fresh one otherwise.
    pub clock: Option<Clock>,
    /// The keys and tokens the provider APIs accept (`--api-key`): a request presenting none
    /// of them gets the provider's 401. Empty: any credential is accepted.
    pub api_keys: Vec<String>,
    /// The AWS credentials whose SigV4 signatures Bedrock requests may carry
    /// (`--aws-credentials`): a request signed by others gets Bedrock's 403. Empty: any
    /// signature is accepted.
    pub aws_credentials: Vec<crate::providers::bedrock::sigv4::AwsCredentials>,
    /// The service accounts whose signed assertions `POST /token` exchanges for an access
    /// token, which Vertex AI's routes then accept (beside `api_keys`).
    pub service_accounts: Vec<ServiceAccount>,
}

/// A running emulator.
pub struct EmulatorHandle {
    pub addr: SocketAddr,
    pub clock: Clock,
    shared: Arc<routes::Shared>,
    shutdown: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl EmulatorHandle {
    /// Base URL, e.g. `http://127.0.0.1:40123` (SDKs append `/v1/...`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Move the cache clock forward (same as `POST /emulator/clock/advance`).
    pub fn advance_clock(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Forget every cached prefix (same as `POST /emulator/cache/clear`): a provider that
    /// evicted its cache, for tests of what cachet reports then.
    pub fn clear_cache(&self) {
        self.shared.clear_cache();
    }

    /// The accounting of the most recent requests (oldest first, at most
    /// [`LOG_CAPACITY`]).
    pub fn accounted(&self) -> Vec<Accounted> {
        self.shared.log_snapshot()
    }

    /// How many access tokens `POST /token` has minted.
    pub fn minted_tokens(&self) -> usize {
        self.shared.minted_count()
    }

    /// Stop accepting and wait for connections in flight (up to a second).
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let _ = self.task.await;
    }
}

/// Serve on `listener` (port 0 allowed) in the background.
pub async fn spawn(
    listener: TcpListener,
    opts: EmulatorOptions,
) -> std::io::Result<EmulatorHandle> {
    let addr = listener.local_addr()?;
    let clock = opts.clock.clone().unwrap_or_default();
    let shared = Arc::new(routes::Shared::new(&opts, clock.clone()));
    let (tx, rx) = watch::channel(false);
    let handler_state = shared.clone();
    let task = tokio::spawn(crate::http_serve::serve_connections(
        listener,
        rx,
        crate::http_serve::ConnectionLimits {
            grace: Duration::from_secs(1),
            header_timeout: Duration::from_secs(30),
            // A load generator's stand-in: bounded only to stay within file descriptors.
            max_connections: 16_384,
        },
        move |req| {
            let shared = handler_state.clone();
            async move { Ok::<_, std::convert::Infallible>(routes::handle(shared, req).await) }
        },
    ));
    Ok(EmulatorHandle {
        addr,
        clock,
        shared,
        shutdown: tx,
        task,
    })
}

/// What `cachet emulate` is asked for: its command line's options, converted by the CLI.
#[derive(Debug, Clone)]
pub struct EmulateConfig {
    pub listen: SocketAddr,
    /// Reply text for every request (default: a short deterministic sentence).
    pub reply: Option<String>,
    /// A model table whose rows are tried before the shipped one.
    pub models: Option<std::path::PathBuf>,
    /// When requests that offer tools are answered with a tool call (`never`, `first` or a
    /// tool name; see [`ToolCalls::parse`]).
    pub tool_calls: Option<String>,
    /// Tool calls in a row after each user prompt before the reply is text.
    pub tool_steps: u32,
    /// The keys and tokens the provider APIs accept (empty: any).
    pub api_keys: Vec<String>,
    /// `ACCESS_KEY_ID:SECRET` pairs whose SigV4 signatures Bedrock requests may carry
    /// (empty: any).
    pub aws_credentials: Vec<String>,
}

/// `cachet emulate`: serve until Ctrl-C.
pub async fn run_emulate(config: EmulateConfig) -> anyhow::Result<()> {
    crate::models::install_user_table(config.models.as_deref()).map_err(anyhow::Error::msg)?;
    // Agents pace their own requests: the cache model sees them at that pace.
    let mut opts = EmulatorOptions {
        clock: Some(Clock::running()),
        ..EmulatorOptions::default()
    };
    if let Some(text) = config.reply {
        opts.reply.text = text;
    }
    opts.reply.tool_calls = ToolCalls::parse(config.tool_calls.as_deref().unwrap_or(""));
    opts.reply.max_tool_steps = config.tool_steps;
    opts.api_keys = config.api_keys;
    for pair in &config.aws_credentials {
        let Some((id, secret)) = pair.split_once(':') else {
            anyhow::bail!("--aws-credentials takes ACCESS_KEY_ID:SECRET");
        };
        let region = crate::providers::bedrock::sigv4::DEFAULT_REGION;
        opts.aws_credentials
            .push(crate::providers::bedrock::sigv4::AwsCredentials::new(
                id, secret, None, region,
            ));
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    let handle = spawn(listener, opts).await?;
    println!("cachet emulate listening on {}", handle.url());
    tokio::signal::ctrl_c().await?;
    handle.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The emulator depends on nothing of the proxy: the `crate::` paths of its files name
    /// only the cache model, the provider facts and the layers below them (HTTP serving
    /// included), so that `cachet emulate` could be a crate of its own without moving code.
    #[test]
    fn the_emulator_uses_no_module_of_the_proxy() {
        const BELOW: &[&str] = &[
            "emulator",
            "cache_model",
            "providers",
            "models",
            "tokens",
            "error",
            "content_encoding",
            "usage",
            "route",
            "envelope",
            "json",
            "sse",
            "memo",
            "secret",
            "http_serve",
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/emulator");
        let path = regex::Regex::new(r"crate::(\{)?\s*([a-z_]+)").unwrap();
        let mut used = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let file = entry.unwrap().path();
            let text = std::fs::read_to_string(&file).unwrap();
            for m in path.captures_iter(&text) {
                assert!(
                    m.get(1).is_none(),
                    "{}: a grouped `crate::{{…}}` import: name each path",
                    file.display()
                );
                used.push((
                    file.file_name().unwrap().to_string_lossy().into_owned(),
                    m[2].to_string(),
                ));
            }
        }
        assert!(used.len() > 10, "{used:?}");
        let wrong: Vec<_> = used
            .iter()
            .filter(|(_, m)| !BELOW.contains(&m.as_str()))
            .collect();
        assert!(
            wrong.is_empty(),
            "the emulator uses the proxy's modules: {wrong:?}"
        );
    }
}
