//! Every Prometheus metric cachet exports (names and labels are a contract: DESIGN §8).
//! Labels stay bounded: never a session id or prompt text; model names are sanitised and capped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock, RwLock};

use prometheus::{
    Counter, CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, Opts, Registry, TextEncoder,
};

use crate::provider::{Endpoint, Provider};
use crate::usage::Usage;

/// Distinct model label values kept before new ones are reported as `other`.
const MAX_MODELS: usize = 256;
/// Token-counter handles kept per (provider, model as sent, variant); past this, requests
/// still count, through the label lookups.
const MAX_CACHED_COUNTERS: usize = 1024;

const PROVIDERS: [Provider; 2] = [Provider::Anthropic, Provider::OpenAi];
const ENDPOINTS: [Endpoint; 6] = [
    Endpoint::Messages,
    Endpoint::CountTokens,
    Endpoint::Chat,
    Endpoint::Responses,
    Endpoint::Models,
    Endpoint::Other,
];

/// The latency histograms of one provider and endpoint, resolved once: every request
/// observes them, and a label lookup hashes every label value each time.
pub struct RouteTimers {
    pub overhead: Histogram,
    pub first_byte: Histogram,
    pub total: Histogram,
}

/// The usage counters of one (provider, model, variant), resolved once.
struct TokenCounters {
    input: [IntCounter; 3],
    output: IntCounter,
    /// Cost and savings, for models with known prices.
    priced: Option<(&'static crate::models::ModelInfo, Counter, Counter)>,
    /// The model and variant labels these counters carry.
    label: String,
    variant: String,
}

impl TokenCounters {
    /// `cachet_requests_total` also has endpoint and status labels, so it stays a lookup.
    fn requests(
        &self,
        metrics: &Metrics,
        provider: Provider,
        endpoint: Endpoint,
        status: &str,
    ) -> IntCounter {
        metrics.requests.with_label_values(&[
            provider.label(),
            &self.label,
            endpoint.label(),
            status,
            &self.variant,
        ])
    }
}

type CounterKey = (Provider, String, String);

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
    route_timers: [[OnceLock<RouteTimers>; ENDPOINTS.len()]; PROVIDERS.len()],
    token_counters: RwLock<HashMap<CounterKey, Arc<TokenCounters>>>,
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
            route_timers: Default::default(),
            token_counters: RwLock::new(HashMap::new()),
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

    /// The latency histograms of a route.
    pub fn route(&self, provider: Provider, endpoint: Endpoint) -> &RouteTimers {
        let p = PROVIDERS.iter().position(|&x| x == provider).unwrap_or(0);
        let e = ENDPOINTS.iter().position(|&x| x == endpoint).unwrap_or(0);
        self.route_timers[p][e].get_or_init(|| {
            let (p, e) = (provider.label(), endpoint.label());
            RouteTimers {
                overhead: self.overhead_duration.with_label_values(&[e]),
                first_byte: self
                    .upstream_duration
                    .with_label_values(&[p, e, "first_byte"]),
                total: self.upstream_duration.with_label_values(&[p, e, "total"]),
            }
        })
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
        let Some(u) = usage else {
            // No usage (model lists, errors): count the request, and create no all-zero
            // token series for it.
            let label = self.model_label(model);
            let labels = [provider.label(), &label, endpoint.label(), status, variant];
            self.requests.with_label_values(&labels).inc();
            return;
        };
        let counters = self.token_counters(provider, model, variant);
        counters.requests(self, provider, endpoint, status).inc();
        for (counter, n) in counters
            .input
            .iter()
            .zip([u.cache_read, u.cache_write, u.uncached])
        {
            counter.inc_by(n);
        }
        counters.output.inc_by(u.output);
        if let Some((info, cost, savings)) = &counters.priced {
            cost.inc_by(info.cost_usd(u).max(0.0));
            // A Prometheus counter cannot go down; cache writes that cost more than they saved
            // show up in cost, not as negative savings.
            savings.inc_by(info.savings_usd(u).max(0.0));
        }
    }

    fn token_counters(&self, provider: Provider, model: &str, variant: &str) -> Arc<TokenCounters> {
        let key = (provider, model.to_string(), variant.to_string());
        if let Some(found) = self
            .token_counters
            .read()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return found;
        }
        let label = self.model_label(model);
        let p = provider.label();
        let kinds = ["cache_read", "cache_write", "uncached"];
        let counters = Arc::new(TokenCounters {
            input: kinds.map(|kind| {
                self.input_tokens
                    .with_label_values(&[p, &label, variant, kind])
            }),
            output: self.output_tokens.with_label_values(&[p, &label, variant]),
            priced: crate::models::lookup(&label).map(|info| {
                (
                    info,
                    self.cost_usd.with_label_values(&[p, &label, variant]),
                    self.savings_usd.with_label_values(&[p, &label, variant]),
                )
            }),
            label,
            variant: variant.to_string(),
        });
        if let Ok(mut map) = self.token_counters.write() {
            // Keys hold the model as sent: long ones are not kept, or a client could make
            // the cache hold megabytes per entry.
            if map.len() < MAX_CACHED_COUNTERS && model.len() <= 128 && variant.len() <= 128 {
                map.insert(key, counters.clone());
            }
        }
        counters
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
    fn counter_handles_stay_bounded_and_keep_counting() {
        let m = Metrics::new();
        let u = Usage {
            uncached: 1,
            ..Usage::default()
        };
        let long = "m".repeat(1000);
        for i in 0..MAX_CACHED_COUNTERS + 50 {
            let model = format!("model-{i}");
            m.record_request(
                Provider::Anthropic,
                Endpoint::Messages,
                &model,
                "200",
                "none",
                Some(&u),
            );
        }
        m.record_request(
            Provider::Anthropic,
            Endpoint::Messages,
            &long,
            "200",
            "none",
            Some(&u),
        );
        let cached = m.token_counters.read().unwrap();
        assert_eq!(cached.len(), MAX_CACHED_COUNTERS);
        assert!(!cached.keys().any(|(_, model, _)| model == &long));
        drop(cached);
        // Every request counted, cached handle or not: 256 named models, the rest as `other`.
        let total: u64 = m
            .input_tokens
            .with_label_values(&["anthropic", "other", "none", "uncached"])
            .get()
            + (0..MAX_MODELS)
                .map(|i| {
                    m.input_tokens
                        .with_label_values(&[
                            "anthropic",
                            &format!("model-{i}"),
                            "none",
                            "uncached",
                        ])
                        .get()
                })
                .sum::<u64>();
        assert_eq!(total, (MAX_CACHED_COUNTERS + 51) as u64);
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
