//! What cachet tells an operator about each request besides its metrics: a log span per
//! request (route, model, session, variant, upstream request-id) and, when configured, an
//! OpenTelemetry span exported over OTLP.

mod config;
mod genai;
pub mod logs;
mod otlp;
mod request;

use std::sync::Arc;

use http::HeaderMap;

pub use config::{LogConfig, LogFormat, OtlpConfig, TelemetryConfig};
pub use logs::{init_logging, LogGuard};
pub use request::{Finished, RequestTelemetry};

use crate::metrics::Metrics;
use crate::route::Route;

/// Shared by every request.
pub struct Telemetry {
    metrics: Arc<Metrics>,
    otlp: Option<Arc<otlp::Otlp>>,
}

impl Telemetry {
    /// Start the exporters the configuration asks for.
    pub fn new(config: &TelemetryConfig, metrics: Arc<Metrics>) -> anyhow::Result<Telemetry> {
        config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        let otlp = match &config.otlp {
            Some(c) => Some(Arc::new(otlp::Otlp::start(c, &metrics)?)),
            None => None,
        };
        Ok(Telemetry { metrics, otlp })
    }

    /// Begin a proxied request: its span, its place in `cachet_requests_in_flight`.
    pub fn request(&self, route: Route, headers: &HeaderMap) -> RequestTelemetry {
        RequestTelemetry::start(route, headers, &self.metrics, self.otlp.clone())
    }

    /// Send the spans still queued (waits up to the export time-out).
    pub async fn shutdown(&self) {
        if let Some(otlp) = &self.otlp {
            let otlp = otlp.clone();
            let _ = tokio::task::spawn_blocking(move || otlp.shutdown()).await;
        }
    }
}
