//! Traces: OpenTelemetry spans over OTLP (HTTP, JSON) for a job's create,
//! the dispatcher's claim, each produce, a result report and an ingress
//! request, joined to the caller's `traceparent` (W3C), with the job's id
//! and topic as attributes. Off unless `tracing.otlp_endpoint` is set:
//! then the spans go to `{endpoint}/v1/traces` in batches.
//!
//! The process's subscriber is set up once ([`subscriber_init`]); `tickler
//! serve` reads its configuration first, to know whether to export.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported: the per-job spans of the hot path are
/// made only then.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Where and how spans are exported (`[tracing]`).
pub struct Export<'a> {
    /// The OTLP/HTTP endpoint, e.g. `http://otel-collector:4318`.
    pub endpoint: &'a str,
    pub service_name: &'a str,
    /// How often the spans gathered are sent.
    pub every: Duration,
}

/// Flushes the spans still queued when dropped (at exit).
pub struct TelemetryGuard(SdkTracerProvider);

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(err) = self.0.shutdown() {
            eprintln!("tickler: flushing the last spans failed: {err}");
        }
    }
}

/// The process's subscriber: log lines (filtered by `TICKLER_LOG`, info by
/// default) and, with `export`, the spans over OTLP. Call once, first.
pub fn subscriber_init(export: Option<Export<'_>>) -> Result<Option<TelemetryGuard>, String> {
    let Some(export) = export else {
        tracing_subscriber::registry().with(logs()).init();
        return Ok(None);
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpJson)
        .with_endpoint(format!(
            "{}/v1/traces",
            export.endpoint.trim_end_matches('/')
        ))
        .with_timeout(Duration::from_secs(5))
        .build()
        .map_err(|err| {
            format!(
                "the OTLP exporter for {}: {err}",
                crate::config::url_masked(export.endpoint)
            )
        })?;
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(export.every)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_attributes([KeyValue::new(
                    "service.name",
                    export.service_name.to_owned(),
                )])
                .build(),
        )
        .build();
    let spans = tracing_opentelemetry::layer().with_tracer(provider.tracer("tickler"));
    tracing_subscriber::registry()
        .with(spans)
        .with(logs())
        .init();
    ENABLED.store(true, Ordering::Relaxed);
    tracing::info!(
        endpoint = %crate::config::url_masked(export.endpoint),
        service_name = export.service_name,
        "traces are exported over OTLP"
    );
    Ok(Some(TelemetryGuard(provider)))
}

/// The log lines: filtered by `TICKLER_LOG` (info by default).
fn logs<S>() -> impl Layer<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    tracing_subscriber::fmt::layer().with_filter(
        tracing_subscriber::EnvFilter::try_from_env("TICKLER_LOG")
            .unwrap_or_else(|_| "info".into()),
    )
}

/// Makes `span` a child of the W3C `traceparent` (`00-<trace>-<span>-<flags>`),
/// when there is one and it parses.
pub fn parent_set(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else {
        return;
    };
    if !enabled() {
        return;
    }
    let carrier: HashMap<String, String> =
        HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(context);
}
