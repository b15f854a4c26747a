//! OTLP trace export: one span per generation request, with the OpenTelemetry GenAI
//! semantic conventions, so tools that read LLM traffic (Langfuse, Phoenix, Tempo, Jaeger)
//! see cachet's requests with their cache tokens and cost.
//!
//! Export never waits on the request path: a finished span goes into a bounded queue that
//! a background thread sends in batches; when the queue is full the span is dropped and
//! counted (`cachet_otlp_spans_total{outcome="dropped"}`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
    SpanProcessor,
};
use opentelemetry_sdk::Resource;
use prometheus::IntCounter;

use super::config::OtlpConfig;
use crate::metrics::Metrics;

/// How often queued spans are sent when fewer than a batch are waiting.
const BATCH_DELAY: Duration = Duration::from_secs(1);

/// The W3C trace-context headers a client may send to make cachet's span a child of its own.
pub const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// Spans by fate: sent, dropped on a full queue, or lost to a failed export.
#[derive(Debug, Clone)]
struct Counts {
    exported: IntCounter,
    dropped: IntCounter,
    failed: IntCounter,
}

pub struct Otlp {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

/// One generation request, as exported.
pub struct SpanRecord {
    pub name: String,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    /// `Some(description)` when the request failed.
    pub error: Option<String>,
    /// The client's `traceparent` / `tracestate`, when it sent them.
    pub parent: Vec<(String, String)>,
}

impl Otlp {
    pub fn start(config: &OtlpConfig, metrics: &Metrics) -> anyhow::Result<Otlp> {
        let timeout = Duration::from_millis(config.timeout_ms);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url())
            .with_timeout(timeout)
            .build()
            .map_err(|e| anyhow::anyhow!("telemetry.otlp: cannot build the exporter: {e}"))?;
        let counts = Counts {
            exported: metrics.otlp_spans.with_label_values(&["exported"]),
            dropped: metrics.otlp_spans.with_label_values(&["dropped"]),
            failed: metrics.otlp_spans.with_label_values(&["failed"]),
        };
        let pending = Arc::new(AtomicUsize::new(0));
        let batch = BatchConfigBuilder::default()
            .with_max_queue_size(config.queue_size)
            .with_scheduled_delay(BATCH_DELAY)
            .build();
        let processor = BatchSpanProcessor::builder(CountingExporter {
            inner: exporter,
            pending: pending.clone(),
            counts: counts.clone(),
        })
        .with_batch_config(batch)
        .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Gate {
                inner: processor,
                pending,
                capacity: config.queue_size,
                counts,
            })
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("cachet");
        Ok(Otlp { provider, tracer })
    }

    /// Queue one span; returns at once, with the span's context (for a child span later).
    pub fn export(&self, record: SpanRecord) -> opentelemetry::trace::SpanContext {
        let parent = if record.parent.is_empty() {
            Context::new()
        } else {
            let carrier: HashMap<String, String> = record.parent.into_iter().collect();
            TraceContextPropagator::new().extract(&carrier)
        };
        let mut span = self
            .tracer
            .span_builder(record.name)
            .with_kind(SpanKind::Client)
            .with_start_time(record.start)
            .with_attributes(record.attributes)
            .start_with_context(&self.tracer, &parent);
        if let Some(description) = record.error {
            span.set_status(Status::error(description));
        }
        let context = span.span_context().clone();
        span.end_with_timestamp(record.end);
        context
    }

    /// Queue a span of no duration at `at`, a child of `parent` (a request's span): what
    /// was learned of the request once its answer had ended (its prefix break).
    pub fn export_child(
        &self,
        parent: &opentelemetry::trace::SpanContext,
        name: &'static str,
        at: SystemTime,
        attributes: Vec<KeyValue>,
    ) {
        use opentelemetry::trace::TraceContextExt;
        let parent = Context::new().with_remote_span_context(parent.clone());
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        span.end_with_timestamp(at);
    }

    /// Send what is queued, then stop (blocks: call it off the async threads).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("OTLP export did not finish cleanly: {e}");
        }
    }
}

/// In front of the batch processor: keeps the spans waiting below the queue's capacity, so
/// every drop happens here, where it is counted.
#[derive(Debug)]
struct Gate {
    inner: BatchSpanProcessor,
    /// Spans handed on and not yet through an export.
    pending: Arc<AtomicUsize>,
    capacity: usize,
    counts: Counts,
}

impl SpanProcessor for Gate {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.pending.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.counts.dropped.inc();
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting what each export did.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    pending: Arc<AtomicUsize>,
    counts: Counts,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        let result = self.inner.export(batch).await;
        self.pending.fetch_sub(n, Ordering::AcqRel);
        match &result {
            Ok(()) => self.counts.exported.inc_by(n as u64),
            Err(e) => {
                self.counts.failed.inc_by(n as u64);
                tracing::warn!(spans = n, "OTLP export failed: {e}");
            }
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
