//! `[telemetry]` in `cachet.toml`: OpenTelemetry export, off unless configured.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP trace export (HTTP/protobuf); off when the section is absent.
    pub otlp: Option<OtlpConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OtlpConfig {
    /// The collector's base URL (`/v1/traces` is appended unless the URL already ends so).
    pub endpoint: String,
    /// `service.name` of the exported spans.
    #[serde(default = "default_service_name")]
    pub service_name: String,
    /// How long one export may take before it counts as failed.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Finished spans waiting for export; past this, new spans are dropped (and counted).
    #[serde(default = "default_queue_size")]
    pub queue_size: usize,
}

fn default_service_name() -> String {
    "cachet".into()
}

fn default_timeout_ms() -> u64 {
    10_000
}

fn default_queue_size() -> usize {
    2048
}

impl OtlpConfig {
    /// The traces URL the exporter posts to.
    pub fn traces_url(&self) -> String {
        let base = self.endpoint.trim_end_matches('/');
        if base.ends_with("/v1/traces") {
            base.to_string()
        } else {
            format!("{base}/v1/traces")
        }
    }
}

impl TelemetryConfig {
    /// What is wrong with the section, as `field: message`.
    pub fn validate(&self) -> Result<(), String> {
        let Some(otlp) = &self.otlp else {
            return Ok(());
        };
        let ok = reqwest::Url::parse(&otlp.endpoint)
            .map(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .unwrap_or(false);
        if !ok {
            return Err(format!(
                "telemetry.otlp.endpoint: `{}` is not an http(s) URL",
                otlp.endpoint
            ));
        }
        if otlp.queue_size == 0 {
            return Err("telemetry.otlp.queue_size: must be greater than 0".into());
        }
        if otlp.service_name.trim().is_empty() {
            return Err("telemetry.otlp.service_name: must not be empty".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn otlp(endpoint: &str) -> TelemetryConfig {
        TelemetryConfig {
            otlp: Some(OtlpConfig {
                endpoint: endpoint.into(),
                service_name: default_service_name(),
                timeout_ms: default_timeout_ms(),
                queue_size: default_queue_size(),
            }),
        }
    }

    #[test]
    fn the_traces_path_is_appended_once() {
        let c = otlp("http://127.0.0.1:4318/");
        assert_eq!(
            c.otlp.unwrap().traces_url(),
            "http://127.0.0.1:4318/v1/traces"
        );
        let c = otlp("https://collector/otlp/v1/traces");
        assert_eq!(
            c.otlp.unwrap().traces_url(),
            "https://collector/otlp/v1/traces"
        );
    }

    #[test]
    fn a_bad_endpoint_is_refused() {
        assert!(otlp("127.0.0.1:4318").validate().is_err());
        assert!(otlp("http://127.0.0.1:4318").validate().is_ok());
        assert!(TelemetryConfig::default().validate().is_ok());
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `cachet=debug`; `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: LogFormat::Text,
            level: "info".into(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}
