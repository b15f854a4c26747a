//! Structured logs to stderr: text or JSON, one span per request (`request`), colours only
//! on a terminal.

use std::io::IsTerminal;

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

use crate::config::{Config, LogFormat};

/// Set up logs once, `RUST_LOG` overriding the configured level.
pub fn init_logging(config: &Config) {
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| config.log.level.clone());
    // Escape codes in a log file or a journal are noise: colour only when a person watches.
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    // A plain level is checked once per call site; a full filter (`cachet=debug,...`) is
    // evaluated per event, which costs measurably on the request path.
    let _ = match (spec.trim().parse::<LevelFilter>(), config.log.format) {
        (Ok(level), LogFormat::Json) => builder.with_max_level(level).json().try_init(),
        (Ok(level), LogFormat::Text) => builder.with_max_level(level).try_init(),
        (Err(_), format) => {
            let builder = builder.with_env_filter(EnvFilter::new(spec));
            match format {
                LogFormat::Json => builder.json().try_init(),
                LogFormat::Text => builder.try_init(),
            }
        }
    };
}
