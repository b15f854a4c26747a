//! Every Prometheus metric cachet exports (names and labels are a contract: DESIGN §8).
//! Labels stay bounded: never a session id or prompt text; model names are sanitised and capped.

use std::collections::HashSet;
use std::sync::RwLock;

use prometheus::{
    CounterVec, Encoder, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::provider::{Endpoint, Provider};
use crate::usage::Usage;

/// Distinct model label values kept before new ones are reported as `other`.
const MAX_MODELS: usize = 256;

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub input_tokens: IntCounterVec,
    pub output_tokens: IntCounterVec,
    pub prefix_breaks: IntCounterVec,
    pub invalidations: IntCounterVec,
    pub patches: IntCounterVec,
    pub cost_usd: CounterVec,
    pub savings_usd: CounterVec,
    pub upstream_duration: HistogramVec,
    pub overhead_duration: HistogramVec,
    pub hook_duration: HistogramVec,
    pub hook_failures: IntCounterVec,
    pub stream_errors: IntCounterVec,
    pub store_errors: IntCounterVec,
    models: RwLock<HashSet<String>>,
    names: Vec<String>,
}

/// Registers metrics and remembers their names (the Grafana dashboard test checks against them).
struct Registrar {
    registry: Registry,
    names: Vec<String>,
}

impl Registrar {
    fn register<C: prometheus::core::Collector + Clone + 'static>(
        &mut self,
        name: &str,
        c: C,
    ) -> C {
        self.registry
            .register(Box::new(c.clone()))
            .expect("metric registered once");
        self.names.push(name.to_string());
        c
    }
}

fn counter(r: &mut Registrar, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    r.register(name, c)
}

fn fcounter(r: &mut Registrar, name: &str, help: &str, labels: &[&str]) -> CounterVec {
    let c = CounterVec::new(Opts::new(name, help), labels).expect("valid metric definition");
    r.register(name, c)
}

fn histogram(
    r: &mut Registrar,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: Vec<f64>,
) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels)
        .expect("valid metric definition");
    r.register(name, h)
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric defined (tests create one per proxy instance).
    pub fn new() -> Self {
        let mut reg = Registrar {
            registry: Registry::new(),
            names: Vec::new(),
        };
        let r = &mut reg;
        let latency = vec![
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
        ];
        let overhead = vec![
            0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
            1.0,
        ];
        Metrics {
            requests: counter(r, "cachet_requests_total", "Provider requests handled.",
                &["provider", "model", "endpoint", "status", "variant"]),
            input_tokens: counter(r, "cachet_input_tokens_total",
                "Input tokens by cache outcome (cache_read, cache_write, uncached).",
                &["provider", "model", "variant", "kind"]),
            output_tokens: counter(r, "cachet_output_tokens_total", "Output tokens.",
                &["provider", "model", "variant"]),
            prefix_breaks: counter(r, "cachet_prefix_breaks_total",
                "Requests whose prefix differs from the session's previous request, by first differing section.",
                &["provider", "section"]),
            invalidations: counter(r, "cachet_cache_invalidations_total",
                "Patch operations applied that changed cached content, by reason.",
                &["transformer", "reason"]),
            patches: counter(r, "cachet_patches_total", "Patch operations by outcome.",
                &["transformer", "op", "outcome"]),
            cost_usd: fcounter(r, "cachet_cost_usd_total", "Cost of requests in USD.",
                &["provider", "model", "variant"]),
            savings_usd: fcounter(r, "cachet_cache_savings_usd_total",
                "USD saved by prompt caching against uncached input.",
                &["provider", "model", "variant"]),
            upstream_duration: histogram(r, "cachet_upstream_duration_seconds",
                "Upstream latency: phase=first_byte (response headers) and phase=total (end of body).",
                &["provider", "endpoint", "phase"], latency.clone()),
            overhead_duration: histogram(r, "cachet_overhead_duration_seconds",
                "Time spent in cachet before forwarding a request.", &["endpoint"], overhead),
            hook_duration: histogram(r, "cachet_hook_duration_seconds",
                "External hook call duration.", &["hook"], latency),
            hook_failures: counter(r, "cachet_hook_failures_total",
                "External hook calls that failed (error, time-out, malformed answer).", &["hook"]),
            stream_errors: counter(r, "cachet_stream_errors_total",
                "Responses whose body broke off (upstream cut, idle time-out) or whose client went away.",
                &["provider", "endpoint", "cause"]),
            store_errors: counter(r, "cachet_store_errors_total",
                "Session store operations that failed.", &["operation"]),
            models: RwLock::new(HashSet::new()),
            registry: reg.registry,
            names: reg.names,
        }
    }

    /// A bounded, sanitised model label.
    pub fn model_label(&self, model: &str) -> String {
        // Fast path: a clean model name already seen.
        if model.len() <= 64
            && !model.is_empty()
            && model
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._:/@".contains(c))
        {
            if let Ok(seen) = self.models.read() {
                if seen.contains(model) {
                    return model.to_string();
                }
            }
        }
        let clean: String = model
            .chars()
            .take(64)
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._:/@".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if clean.is_empty() {
            return "unknown".into();
        }
        let Ok(mut seen) = self.models.write() else {
            return "other".into();
        };
        if seen.contains(&clean) {
            return clean;
        }
        if seen.len() >= MAX_MODELS {
            return "other".into();
        }
        seen.insert(clean.clone());
        clean
    }

    /// Count a finished request and its usage.
    pub fn record_request(
        &self,
        provider: Provider,
        endpoint: Endpoint,
        model: &str,
        status: &str,
        variant: &str,
        usage: Option<&Usage>,
    ) {
        let model = self.model_label(model);
        let p = provider.label();
        self.requests
            .with_label_values(&[p, &model, endpoint.label(), status, variant])
            .inc();
        let Some(u) = usage else { return };
        for (kind, n) in [
            ("cache_read", u.cache_read),
            ("cache_write", u.cache_write),
            ("uncached", u.uncached),
        ] {
            self.input_tokens
                .with_label_values(&[p, &model, variant, kind])
                .inc_by(n);
        }
        self.output_tokens
            .with_label_values(&[p, &model, variant])
            .inc_by(u.output);
        if let Some(info) = crate::models::lookup(&model) {
            self.cost_usd
                .with_label_values(&[p, &model, variant])
                .inc_by(info.cost_usd(u).max(0.0));
            let saved = info.savings_usd(u);
            // A Prometheus counter cannot go down; cache writes that cost more than they saved
            // show up in cost, not as negative savings.
            self.savings_usd
                .with_label_values(&[p, &model, variant])
                .inc_by(saved.max(0.0));
        }
    }

    /// Names of every metric cachet exports.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The text exposition format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_labels_are_bounded() {
        let m = Metrics::new();
        assert_eq!(m.model_label("claude-sonnet-4-5"), "claude-sonnet-4-5");
        assert_eq!(m.model_label("a b{c}"), "a_b_c_");
        for i in 0..MAX_MODELS + 10 {
            m.model_label(&format!("m{i}"));
        }
        assert_eq!(m.model_label("brand-new"), "other");
    }

    #[test]
    fn usage_lands_in_token_counters() {
        let m = Metrics::new();
        let u = Usage {
            cache_read: 10,
            cache_write: 20,
            uncached: 3,
            output: 4,
            ..Usage::default()
        };
        m.record_request(
            Provider::Anthropic,
            Endpoint::Messages,
            "claude-sonnet-4-5",
            "200",
            "none",
            Some(&u),
        );
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("cachet_input_tokens_total{kind=\"cache_read\",model=\"claude-sonnet-4-5\",provider=\"anthropic\",variant=\"none\"} 10"), "{text}");
        assert!(text.contains("cachet_output_tokens_total{model=\"claude-sonnet-4-5\",provider=\"anthropic\",variant=\"none\"} 4"));
    }
}
