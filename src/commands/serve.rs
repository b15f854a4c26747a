//! `cachet serve`: configuration from the file and flags, logging, signals.

use crate::cli::ServeArgs;
use crate::config::Config;
use crate::server;

/// Apply command-line flags over the configuration file.
pub fn config_from_args(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = Config::load(args.policy.config.as_deref())?;
    if let Some(a) = args.listen {
        config.server.listen = a;
    }
    if let Some(a) = args.admin_listen {
        config.server.admin_listen = a;
    }
    if let Some(u) = &args.anthropic_upstream {
        config.upstream.anthropic = u.clone();
    }
    if let Some(u) = &args.openai_upstream {
        config.upstream.openai = u.clone();
    }
    if let Some(u) = &args.chatgpt_upstream {
        config.upstream.chatgpt = u.clone();
    }
    if let Some(u) = &args.gemini_upstream {
        config.upstream.gemini = u.clone();
    }
    if let Some(u) = &args.bedrock_upstream {
        config.upstream.bedrock = Some(u.clone());
    }
    if let Some(u) = &args.vertex_upstream {
        config.upstream.vertex = Some(u.clone());
    }
    config
        .policies
        .files
        .extend(args.policy.policy.iter().cloned());
    config
        .policies
        .dirs
        .extend(args.policy.policies.iter().cloned());
    if let Some(s) = &args.store {
        config.sessions.store = s.clone();
    }
    if let Some(d) = &args.record {
        config.record.dir = Some(d.clone());
    }
    config.policies.strict |= args.strict;
    if let Some(m) = &args.models.models {
        config.models = Some(m.clone());
    }
    Ok(config)
}

/// Wait for Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn run_serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = config_from_args(&args)?;
    // Held until cachet stops: dropping it writes the log lines still waiting.
    let _logs = crate::telemetry::init_logging(&config.log);
    crate::models::install_user_table(config.models.as_deref()).map_err(anyhow::Error::msg)?;
    let handle = server::spawn(config).await?;
    println!(
        "cachet listening on http://{} (admin: http://{}/metrics)",
        handle.addr, handle.admin_addr
    );
    shutdown_signal().await;
    tracing::info!("shutting down; draining requests in flight");
    handle.shutdown().await;
    Ok(())
}
