//! Every Prometheus metric cachet exports (names and labels are a contract: DESIGN §8).
//! Labels stay bounded: never a session id or prompt text; every label a client or a hook
//! can choose (model, transformer, reason, hook) keeps a bounded set of values, then `other`.

mod labels;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

use prometheus::{
    Counter, CounterVec, Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter,
    IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

pub use labels::{Capped, Charset, LabelSet};

use crate::measure::breaks::{BreakReason, SectionName};
use crate::measure::Who;
use crate::route::{Endpoint, Provider};
use crate::usage::Usage;

/// Distinct model label values kept before new ones are reported as `other`.
const MAX_MODELS: usize = 256;
/// Distinct transformer, invalidation reason and hook names kept, each.
const MAX_HOOK_LABELS: usize = 64;
/// Token-counter handles kept per (provider, model as sent, variant); past this, requests
/// still count, through the label lookups.
const MAX_CACHED_COUNTERS: usize = 1024;
/// Session store operations, counted from zero so a rate over them always has data.
const STORE_OPERATIONS: [&str; 5] = ["open", "load", "append", "record", "request_index"];

/// The `model` label of a request whose model is not known (its body unread, its answer
/// silent).
pub const UNKNOWN_MODEL: &str = "unknown";
/// The `variant` label outside A/B tests.
pub const NO_VARIANT: &str = "none";

const PROVIDERS: [Provider; Provider::ALL.len()] = Provider::ALL;
const ENDPOINTS: [Endpoint; Endpoint::ALL.len()] = Endpoint::ALL;

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
    /// `cachet_cache_write_tokens_total` for the `5m`, `1h` and `12h` writes.
    write_ttl: [IntCounter; 3],
    /// Cost and savings, for models with known prices.
    priced: Option<(&'static crate::models::ModelInfo, Counter, Counter)>,
    provider: &'static str,
    /// The model, variant and client key labels these counters carry.
    label: String,
    variant: String,
    key: String,
}

impl TokenCounters {
    fn add(&self, metrics: &Metrics, u: &Usage) {
        for (counter, n) in self
            .input
            .iter()
            .zip([u.cache_read, u.cache_write, u.uncached])
        {
            counter.inc_by(n);
        }
        self.output.inc_by(u.output);
        self.write_ttl[0].inc_by(u.cache_write_5m);
        self.write_ttl[1].inc_by(u.cache_write_1h);
        self.write_ttl[2].inc_by(u.cache_write_12h);
        // Writes whose TTL the provider did not report (OpenAI-style `cache_write_tokens`).
        let untimed = u
            .cache_write
            .saturating_sub(u.cache_write_5m + u.cache_write_1h + u.cache_write_12h);
        if untimed > 0 {
            metrics
                .cache_write_tokens
                .with_label_values(&[
                    self.provider,
                    &self.label,
                    &self.variant,
                    &self.key,
                    "unknown",
                ])
                .inc_by(untimed);
        }
        if self.priced.is_none() {
            metrics.unknown_models.inc();
        }
        if let Some((info, cost, savings)) = &self.priced {
            cost.inc_by(info.cost_usd(u).max(0.0));
            // A Prometheus counter cannot go down; cache writes that cost more than they saved
            // show up in cost, not as negative savings.
            savings.inc_by(info.savings_usd(u).max(0.0));
        }
    }
}

type CounterKey = (Provider, String, String, String);

/// Decrements `cachet_requests_in_flight` when dropped: hold it for as long as the request
/// lives, response body included, so a client that goes away also ends it.
pub struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// `cachet_websocket_events_total`'s `event` label: a socket `opened`, an upgrade
/// `refused` (426 to the client), and how each socket ended: `client_closed`,
/// `upstream_closed`, `client_gone` and `upstream_gone` (without a close frame),
/// `oversized` (a message over the limit), `bad_frame` (a protocol error), `idle_timeout`,
/// `upstream_stalled` (nothing of an answer for `upstream.idle_timeout_ms`), `shutdown`.
pub const WEBSOCKET_EVENTS: [&str; 11] = [
    "opened",
    "refused",
    "client_closed",
    "upstream_closed",
    "client_gone",
    "upstream_gone",
    "oversized",
    "bad_frame",
    "idle_timeout",
    "upstream_stalled",
    "shutdown",
];

pub struct Metrics {
    registry: Registry,
    pub requests: IntCounterVec,
    pub input_tokens: IntCounterVec,
    pub output_tokens: IntCounterVec,
    pub cache_write_tokens: IntCounterVec,
    /// Through `count_prefix_break` only: its labels come from a fixed vocabulary.
    prefix_breaks: IntCounterVec,
    pub invalidations: Capped<IntCounterVec>,
    pub patches: Capped<IntCounterVec>,
    pub cost_usd: CounterVec,
    pub savings_usd: CounterVec,
    pub upstream_duration: HistogramVec,
    pub overhead_duration: HistogramVec,
    pub hook_duration: Capped<HistogramVec>,
    pub hook_failures: Capped<IntCounterVec>,
    pub stream_errors: IntCounterVec,
    /// Billed answers that carried no usage cachet could read (tokens and cost unknown).
    pub usage_missing: IntCounterVec,
    pub store_errors: IntCounterVec,
    /// Answered requests for a model the model table does not know (cost not computed).
    pub unknown_models: IntCounter,
    /// Finished requests the after-response queue could not take (no session entry).
    pub session_records_dropped: IntCounter,
    /// Requests where the provider's own cache diagnosis and cachet's disagree.
    pub diagnosis_disagreements: IntCounterVec,
    /// What the provider did to prompts on its own, by `edit`: `compaction` (samplings
    /// that compacted the conversation), `clear_tool_uses` (requests whose older tool
    /// results it cleared).
    pub provider_context_edits: IntCounterVec,
    /// OTLP spans by outcome; series appear only when export is configured.
    pub otlp_spans: IntCounterVec,
    /// Keep-warm requests by outcome (`sent`, `skipped`, `failed`, `unbuilt`).
    pub keep_warm: IntCounterVec,
    /// Trace records (`--record`) not written, by cause: `queue_full`, `write_failed`.
    pub trace_records_dropped: IntCounterVec,
    /// The live what-if's predicted cost, by `candidate` (`client`: the requests as sent).
    pub whatif_cost_usd: CounterVec,
    /// What the live what-if left out, by `cause` (see [`WHATIF_SKIPS`]).
    pub whatif_skipped: IntCounterVec,
    /// Generation bodies by how they were read: `incremental` (from where they stop
    /// repeating a remembered body) or `full`.
    pub body_reads: IntCounterVec,
    /// The Responses API's WebSocket mode, by `event` (see [`WEBSOCKET_EVENTS`]).
    pub websocket_events: IntCounterVec,
    in_flight: IntGauge,
    models: LabelSet,
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

/// The causes of `cachet_whatif_skipped_total`.
pub const WHATIF_SKIPS: [&str; 5] = [
    "queue_full",
    "too_large",
    "too_old",
    "request_too_large",
    "evicted",
];

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

fn gauge(r: &mut Registrar, name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric definition");
    r.register(name, g)
}

/// `cachet_build_info{version}`: always 1; joins other series to the version running.
fn build_info(r: &mut Registrar) {
    let name = "cachet_build_info";
    let g = IntGaugeVec::new(
        Opts::new(name, "The cachet build running (value 1)."),
        &["version"],
    )
    .expect("valid metric definition");
    g.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    r.register(name, g);
}

/// `process_*` metrics (CPU, memory, file descriptors, start time) where the OS gives them.
fn process(registry: &Registry) {
    #[cfg(target_os = "linux")]
    {
        let collector = prometheus::process_collector::ProcessCollector::for_self();
        let _ = registry.register(Box::new(collector));
    }
    #[cfg(not(target_os = "linux"))]
    let _ = registry;
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
        let bounded = || Some(Arc::new(LabelSet::new(MAX_HOOK_LABELS, Charset::Text)));
        // A transformer keeps one label value across patches and invalidations.
        let transformers = bounded();
        let hooks = bounded();
        build_info(r);
        process(&r.registry);
        let store_errors = counter(
            r,
            "cachet_store_errors_total",
            "Session store operations that failed.",
            &["operation"],
        );
        for operation in STORE_OPERATIONS {
            store_errors.with_label_values(&[operation]);
        }
        Metrics {
            requests: counter(r, "cachet_requests_total", "Provider requests handled.",
                &["provider", "model", "endpoint", "status", "variant", "key"]),
            input_tokens: counter(r, "cachet_input_tokens_total",
                "Input tokens by cache outcome (cache_read, cache_write, uncached).",
                &["provider", "model", "variant", "key", "kind"]),
            output_tokens: counter(r, "cachet_output_tokens_total", "Output tokens.",
                &["provider", "model", "variant", "key"]),
            cache_write_tokens: counter(r, "cachet_cache_write_tokens_total",
                "Input tokens written to the prompt cache, by the TTL they were written with (5m, 1h; unknown when the provider does not say).",
                &["provider", "model", "variant", "key", "ttl"]),
            prefix_breaks: counter(r, "cachet_prefix_breaks_total",
                "Requests whose prefix differs from the session's previous request, by first differing section, why, and who can fix it.",
                &["provider", "section", "reason", "blame"]),
            invalidations: Capped::new(counter(r, "cachet_cache_invalidations_total",
                "Patch operations applied that changed cached content, by reason.",
                &["transformer", "reason"]), vec![transformers.clone(), bounded()]),
            patches: Capped::new(counter(r, "cachet_patches_total", "Patch operations by outcome.",
                &["transformer", "op", "outcome"]), vec![transformers, None, None]),
            cost_usd: fcounter(r, "cachet_cost_usd_total", "Cost of requests in USD.",
                &["provider", "model", "variant", "key"]),
            savings_usd: fcounter(r, "cachet_cache_savings_usd_total",
                "USD saved by prompt caching against uncached input.",
                &["provider", "model", "variant", "key"]),
            upstream_duration: histogram(r, "cachet_upstream_duration_seconds",
                "Upstream latency: phase=first_byte (response headers) and phase=total (end of body).",
                &["provider", "endpoint", "phase"], latency.clone()),
            overhead_duration: histogram(r, "cachet_overhead_duration_seconds",
                "Time spent in cachet before forwarding a request.", &["endpoint"], overhead),
            hook_duration: Capped::new(histogram(r, "cachet_hook_duration_seconds",
                "External hook call duration.", &["hook"], latency), vec![hooks.clone()]),
            hook_failures: Capped::new(counter(r, "cachet_hook_failures_total",
                "External hook calls that failed (error, time-out, malformed answer).", &["hook"]),
                vec![hooks]),
            stream_errors: counter(r, "cachet_stream_errors_total",
                "Responses whose body broke off (upstream cut, idle time-out) or whose client went away.",
                &["provider", "endpoint", "cause"]),
            usage_missing: counter(r, "cachet_usage_missing_total",
                "Answered generation requests (2xx) whose answer carried no usage cachet could read, by how the answer ended: their tokens and cost are in no other series (e.g. an OpenAI Chat stream without stream_options.include_usage).",
                &["provider", "endpoint", "outcome"]),
            store_errors,
            unknown_models: {
                let c = IntCounter::new("cachet_unknown_models_total",
                    "Answered requests whose model is not in the model table: their cost is not computed (the log names each model once).")
                    .expect("valid metric definition");
                r.register("cachet_unknown_models_total", c)
            },
            session_records_dropped: {
                let c = IntCounter::new("cachet_session_records_dropped_total",
                    "Finished requests whose session entry was not written: the after-response queue was full.")
                    .expect("valid metric definition");
                r.register("cachet_session_records_dropped_total", c)
            },
            diagnosis_disagreements: counter(r, "cachet_diagnosis_disagreements_total",
                "Requests whose cache-miss reason from the provider (Anthropic cache diagnostics) differs from cachet's diagnosis.",
                &["provider"]),
            provider_context_edits: counter(r, "cachet_provider_context_edits_total",
                "What the provider changed in prompts on its own: edit = compaction (server-side compactions, each an extra billed sampling) or clear_tool_uses (requests whose older tool results it cleared before caching).",
                &["provider", "edit"]),
            otlp_spans: counter(r, "cachet_otlp_spans_total",
                "OpenTelemetry spans by outcome: exported, dropped (queue full), failed (export error).",
                &["outcome"]),
            keep_warm: counter(r, "cachet_keep_warm_total",
                "Keep-warm requests after a turn's final answer: sent, skipped (the session went on), failed, unbuilt.",
                &["outcome"]),
            trace_records_dropped: {
                let c = counter(r, "cachet_trace_records_dropped_total",
                    "Trace records (--record) not written: queue_full (the writer fell behind), write_failed (the disk refused).",
                    &["cause"]);
                for cause in ["queue_full", "write_failed"] {
                    c.with_label_values(&[cause]);
                }
                c
            },
            whatif_cost_usd: fcounter(r, "cachet_whatif_cost_usd_total",
                "The live what-if: what each candidate policy would have cost on the sessions followed, on the emulator's cache model; candidate=\"client\" is the requests as sent, on the same model.",
                &["candidate"]),
            whatif_skipped: {
                let c = counter(r, "cachet_whatif_skipped_total",
                    "What the live what-if left out: requests by cause queue_full (its worker fell behind), too_large (the session is past sessions.whatif_max_requests), too_old (the session is older than sessions.whatif_max_age_secs, or the request that far behind the newest), request_too_large (the session sent a body over sessions.whatif_max_request_bytes); sessions by cause evicted (let go to stay within the sessions it keeps).",
                    &["cause"]);
                for cause in WHATIF_SKIPS {
                    c.with_label_values(&[cause]);
                }
                c
            },
            body_reads: {
                let c = counter(r, "cachet_body_reads_total",
                    "Generation request bodies by how they were read: incremental (only what follows the history messages of a remembered body they repeat) or full.",
                    &["path"]);
                for path in ["incremental", "full"] {
                    c.with_label_values(&[path]);
                }
                c
            },
            websocket_events: {
                let c = counter(r, "cachet_websocket_events_total",
                    "The Responses API's WebSocket mode: sockets opened, refused (upgrade refused by the upstream or unreachable: the client got a 426), and how they ended.",
                    &["event"]);
                for event in WEBSOCKET_EVENTS {
                    c.with_label_values(&[event]);
                }
                c
            },
            in_flight: gauge(r, "cachet_requests_in_flight",
                "Proxy requests received and not yet finished (response body included)."),
            models: LabelSet::new(MAX_MODELS, Charset::Name),
            route_timers: Default::default(),
            token_counters: RwLock::new(HashMap::new()),
            registry: reg.registry,
            names: reg.names,
        }
    }

    /// A bounded, sanitised model label.
    pub fn model_label(&self, model: &str) -> String {
        self.models.get(model).into_owned()
    }

    /// Count a request in flight until the returned guard is dropped.
    pub fn in_flight_guard(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// Count a prefix break: the section where the prompt stopped extending the session's
    /// previous request, and why.
    pub fn count_prefix_break(
        &self,
        provider: Provider,
        section: SectionName,
        reason: BreakReason,
        blame: Who,
    ) {
        self.prefix_breaks
            .with_label_values(&[
                provider.label(),
                section.label(),
                reason.label(),
                blame.label(),
            ])
            .inc();
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

    /// Count a finished request and its usage. Token series are created only by a request
    /// that reports usage: a model list or a refused request makes no all-zero series.
    /// `key` is the client key's name (`none` without client keys): a configured name, so
    /// the label's values are bounded by the configuration.
    #[allow(clippy::too_many_arguments)]
    pub fn record_request(
        &self,
        provider: Provider,
        endpoint: Endpoint,
        model: &str,
        status: &str,
        variant: &str,
        key: &str,
        usage: Option<&Usage>,
    ) {
        let (p, e) = (provider.label(), endpoint.label());
        let Some(u) = usage else {
            let label = self.models.get(model);
            self.requests
                .with_label_values(&[p, &label, e, status, variant, key])
                .inc();
            return;
        };
        let counters = self.token_counters(provider, model, variant, key);
        self.requests
            .with_label_values(&[p, &counters.label, e, status, &counters.variant, key])
            .inc();
        counters.add(self, u);
        if let Some(i) = u.iterations.filter(|i| i.compactions > 0) {
            self.provider_context_edits
                .with_label_values(&[p, "compaction"])
                .inc_by(u64::from(i.compactions));
        }
        if u.cleared.is_some() {
            self.provider_context_edits
                .with_label_values(&[p, "clear_tool_uses"])
                .inc();
        }
    }

    fn token_counters(
        &self,
        provider: Provider,
        model: &str,
        variant: &str,
        client_key: &str,
    ) -> Arc<TokenCounters> {
        let key = (
            provider,
            model.to_string(),
            variant.to_string(),
            client_key.to_string(),
        );
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
                    .with_label_values(&[p, &label, variant, client_key, kind])
            }),
            output: self
                .output_tokens
                .with_label_values(&[p, &label, variant, client_key]),
            write_ttl: ["5m", "1h", "12h"].map(|ttl| {
                self.cache_write_tokens
                    .with_label_values(&[p, &label, variant, client_key, ttl])
            }),
            // Priced by the model as sent (the label may be `other`); an unknown model is
            // logged once and not priced as another model.
            priced: crate::models::price(model).map(|info| {
                (
                    info,
                    self.cost_usd
                        .with_label_values(&[p, &label, variant, client_key]),
                    self.savings_usd
                        .with_label_values(&[p, &label, variant, client_key]),
                )
            }),
            provider: p,
            label,
            variant: variant.to_string(),
            key: client_key.to_string(),
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

    /// Names of every metric cachet exports under its own prefix.
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
            "none",
            Some(&u),
        );
        let cached = m.token_counters.read().unwrap();
        assert_eq!(cached.len(), MAX_CACHED_COUNTERS);
        assert!(!cached.keys().any(|(_, model, _, _)| model == &long));
        drop(cached);
        // Every request counted, cached handle or not: 256 named models, the rest as `other`.
        let total: u64 = m
            .input_tokens
            .with_label_values(&["anthropic", "other", "none", "none", "uncached"])
            .get()
            + (0..MAX_MODELS)
                .map(|i| {
                    m.input_tokens
                        .with_label_values(&[
                            "anthropic",
                            &format!("model-{i}"),
                            "none",
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
            "none",
            Some(&u),
        );
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("cachet_input_tokens_total{key=\"none\",kind=\"cache_read\",model=\"claude-sonnet-4-5\",provider=\"anthropic\",variant=\"none\"} 10"), "{text}");
        assert!(text.contains("cachet_output_tokens_total{key=\"none\",model=\"claude-sonnet-4-5\",provider=\"anthropic\",variant=\"none\"} 4"));
    }

    fn anthropic_usage() -> Usage {
        // Anthropic's usage with the TTL split: `cache_creation_input_tokens` is the sum of
        // `cache_creation.ephemeral_5m_input_tokens` and `ephemeral_1h_input_tokens`.
        let mut u = Usage::default();
        crate::providers::usage::merge_anthropic(
            &mut u,
            &serde_json::json!({
                "input_tokens": 3, "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 50,
                "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30},
                "output_tokens": 7
            }),
        );
        u
    }

    #[test]
    fn cache_writes_by_ttl_add_up_to_cache_write_tokens() {
        let m = Metrics::new();
        let u = anthropic_usage();
        // OpenAI-style writes carry no TTL.
        let openai = crate::providers::usage::from_openai_chat(&serde_json::json!({
            "prompt_tokens": 100, "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 60, "cache_write_tokens": 40}
        }));
        m.record_request(
            Provider::Anthropic,
            Endpoint::Messages,
            "claude-sonnet-4-5",
            "200",
            "none",
            "none",
            Some(&u),
        );
        m.record_request(
            Provider::OpenAi,
            Endpoint::Chat,
            "gpt-4o",
            "200",
            "none",
            "none",
            Some(&openai),
        );
        let text = String::from_utf8(m.render()).unwrap();
        let ttl = |ttl: &str, model: &str| {
            m.cache_write_tokens
                .with_label_values(&[
                    if model == "gpt-4o" {
                        "openai"
                    } else {
                        "anthropic"
                    },
                    model,
                    "none",
                    "none",
                    ttl,
                ])
                .get()
        };
        assert_eq!(ttl("5m", "claude-sonnet-4-5"), 20);
        assert_eq!(ttl("1h", "claude-sonnet-4-5"), 30);
        // A Responses answer splits its writes by lifetime: the 12-hour ones are `12h`.
        let split = crate::providers::usage::from_openai_responses(&serde_json::json!({
            "input_tokens": 9000, "output_tokens": 1,
            "input_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 5000,
                "cache_write_tokens_details": {"ttl_30m_tokens": 2000, "ttl_12h_tokens": 3000}}
        }));
        m.record_request(
            Provider::OpenAi,
            Endpoint::Responses,
            "gpt-4o",
            "200",
            "none",
            "none",
            Some(&split),
        );
        assert_eq!(ttl("12h", "gpt-4o"), 3000);
        assert_eq!(ttl("unknown", "gpt-4o"), 40 + 2000);
        for model in ["claude-sonnet-4-5", "gpt-4o"] {
            let provider = if model == "gpt-4o" {
                "openai"
            } else {
                "anthropic"
            };
            let by_ttl: u64 = ["5m", "1h", "12h", "unknown"]
                .iter()
                .map(|t| ttl(t, model))
                .sum();
            let written = m
                .input_tokens
                .with_label_values(&[provider, model, "none", "none", "cache_write"])
                .get();
            assert_eq!(by_ttl, written, "{model}: {text}");
            assert!(written > 0);
        }
    }

    #[test]
    fn requests_without_usage_make_no_token_series() {
        let m = Metrics::new();
        // `GET /v1/models` and refused requests: no model, no usage.
        m.record_request(
            Provider::OpenAi,
            Endpoint::Models,
            "unknown",
            "200",
            "none",
            "none",
            None,
        );
        m.record_request(
            Provider::Anthropic,
            Endpoint::Messages,
            "unknown",
            "400",
            "none",
            "none",
            None,
        );
        let text = String::from_utf8(m.render()).unwrap();
        for name in [
            "cachet_input_tokens_total",
            "cachet_output_tokens_total",
            "cachet_cache_write_tokens_total",
            "cachet_cost_usd_total",
        ] {
            assert!(
                !text.contains(&format!("{name}{{")),
                "{name} series made: {text}"
            );
        }
        assert!(text.contains(r#"cachet_requests_total{endpoint="models",key="none",model="unknown",provider="openai",status="200",variant="none"} 1"#), "{text}");
    }

    #[test]
    fn in_flight_counts_until_the_guard_is_dropped() {
        let m = Metrics::new();
        let a = m.in_flight_guard();
        let b = m.in_flight_guard();
        assert_eq!(m.in_flight.get(), 2);
        drop(a);
        assert_eq!(m.in_flight.get(), 1);
        drop(b);
        assert_eq!(m.in_flight.get(), 0);
    }

    #[test]
    fn build_info_and_process_metrics_are_exported() {
        let text = String::from_utf8(Metrics::new().render()).unwrap();
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.contains(&format!("cachet_build_info{{version=\"{version}\"}} 1")),
            "{text}"
        );
        #[cfg(target_os = "linux")]
        for name in [
            "process_resident_memory_bytes",
            "process_cpu_seconds_total",
            "process_open_fds",
        ] {
            assert!(
                text.contains(&format!("\n{name} ")),
                "{name} missing: {text}"
            );
        }
    }

    #[test]
    fn hook_chosen_labels_are_capped() {
        let m = Metrics::new();
        // A hook answer names its transformer and reason freely: one per request here.
        for i in 0..MAX_HOOK_LABELS + 20 {
            let name = format!("transformer-{i}");
            m.patches
                .with_label_values(&[&name, "system_part_set", "applied"])
                .inc();
            m.invalidations
                .with_label_values(&[&name, &format!("reason {i}")])
                .inc();
            m.hook_failures
                .with_label_values(&[&format!("hook-{i}")])
                .inc();
        }
        let text = String::from_utf8(m.render()).unwrap();
        for (name, label) in [
            ("cachet_patches_total", "transformer"),
            ("cachet_cache_invalidations_total", "reason"),
            ("cachet_hook_failures_total", "hook"),
        ] {
            let series = text
                .lines()
                .filter(|l| l.starts_with(&format!("{name}{{")))
                .count();
            assert_eq!(series, MAX_HOOK_LABELS + 1, "{name}: {text}");
            assert!(text.contains(&format!("{label}=\"other\"")), "{name}");
        }
        // Counted all the same.
        let total: f64 = text
            .lines()
            .filter(|l| l.starts_with("cachet_patches_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert_eq!(total, (MAX_HOOK_LABELS + 20) as f64);
    }

    /// An unknown model is counted (no model label: the names are unbounded) and not
    /// priced; a known one is priced by the model as sent.
    #[test]
    fn unknown_models_are_counted_and_not_priced() {
        let m = Metrics::new();
        let u = Usage {
            uncached: 1_000_000,
            ..Usage::default()
        };
        for model in [
            "claude-opus-9-test",
            "claude-opus-9-test",
            "claude-opus-5-5",
        ] {
            m.record_request(
                Provider::Anthropic,
                Endpoint::Messages,
                model,
                "200",
                "none",
                "none",
                Some(&u),
            );
        }
        m.record_request(
            Provider::Anthropic,
            Endpoint::Messages,
            "claude-opus-9-test",
            "400",
            "none",
            "none",
            None,
        );
        assert_eq!(m.unknown_models.get(), 2);
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains("cachet_unknown_models_total 2"), "{text}");
        assert!(!text.contains("cachet_cost_usd_total{model=\"claude-opus-9-test\""));
        let opus = m
            .cost_usd
            .with_label_values(&["anthropic", "claude-opus-5-5", "none", "none"])
            .get();
        assert!(
            (opus - 4.0).abs() < 1e-9,
            "Opus 5.5 input is $4 / MTok, got {opus}"
        );
    }

    /// GPT-5.6 writes (`cache_write_tokens`) land in `kind="cache_write"` and are priced at
    /// the write price, 1.25x input.
    #[test]
    fn openai_writes_are_counted_and_priced() {
        let m = Metrics::new();
        let u = crate::providers::usage::from_openai_responses(&serde_json::json!({
            "input_tokens": 100_000, "output_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 100_000}}));
        m.record_request(
            Provider::OpenAi,
            Endpoint::Responses,
            "gpt-5.6",
            "200",
            "none",
            "none",
            Some(&u),
        );
        let written = m
            .input_tokens
            .with_label_values(&["openai", "gpt-5.6", "none", "none", "cache_write"])
            .get();
        assert_eq!(written, 100_000);
        let cost = m
            .cost_usd
            .with_label_values(&["openai", "gpt-5.6", "none", "none"])
            .get();
        // $5 a million written (1.25x the $4 input), under the 272K long-context line.
        assert!((cost - 0.5).abs() < 1e-9, "{cost}");
    }

    #[test]
    fn prefix_breaks_carry_section_and_reason() {
        let m = Metrics::new();
        m.count_prefix_break(
            Provider::Anthropic,
            SectionName::System,
            BreakReason::SystemChanged,
            Who::Client,
        );
        let text = String::from_utf8(m.render()).unwrap();
        assert!(text.contains(r#"cachet_prefix_breaks_total{blame="client",provider="anthropic",reason="system_changed",section="system"} 1"#), "{text}");
    }
}
