//! The provider emulator (`cachet emulate`): Anthropic Messages (+ count_tokens), OpenAI
//! Chat Completions and Responses, streaming and not, with the cache accounting of
//! [`crate::cache_model`], deterministic replies, a movable clock and injected faults.
//! It is cachet's default upstream for tests and the demo.

mod anthropic;
mod body;
mod chat;
mod conversations;
pub mod fault;
mod files;
mod models;
mod recent;
pub mod reply;
mod responses;
mod routes;
mod stored;
pub mod tool_loop;
mod turn;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

pub use reply::{Reply, ReplyScript, ToolCalls};
pub use routes::{Accounted, LOG_CAPACITY};

use crate::cache_model::{CacheModelConfig, Clock};
use crate::cli::EmulateArgs;

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
    let task = tokio::spawn(crate::transport::http::serve_connections(
        listener,
        rx,
        crate::transport::http::ConnectionLimits {
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

/// `cachet emulate`: serve until Ctrl-C.
pub async fn run_emulate(args: EmulateArgs) -> anyhow::Result<()> {
    crate::models::install_user_table(args.models.models.as_deref()).map_err(anyhow::Error::msg)?;
    // Agents pace their own requests: the cache model sees them at that pace.
    let mut opts = EmulatorOptions {
        clock: Some(Clock::running()),
        ..EmulatorOptions::default()
    };
    if let Some(text) = args.reply {
        opts.reply.text = text;
    }
    opts.reply.tool_calls = ToolCalls::parse(args.tool_calls.as_deref().unwrap_or(""));
    opts.reply.max_tool_steps = args.tool_steps;
    opts.api_keys = args.api_keys;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.listen))?;
    let handle = spawn(listener, opts).await?;
    println!("cachet emulate listening on {}", handle.url());
    tokio::signal::ctrl_c().await?;
    handle.shutdown().await;
    Ok(())
}
