//! OpenTelemetry spans of the gateway's decisions, exported over OTLP/HTTP (protobuf) when
//! `[telemetry] otlp_endpoint` is set (docs/reference.md "Telemetry"): `stopline.admission` (a
//! call admitted: from its arrival to the decision), `stopline.dispatch` (a call handed upstream:
//! from its dispatch to its outcome) and `stopline.refusal` (a call refused, with its code).
//!
//! Export must never stand on a call's path, a refusal's least of all. A call only puts a small
//! record into a bounded queue ([`QUEUE`]) without waiting; a full queue drops the record and
//! counts it ([`dropped`], logged at the first drop and every thousandth). One thread of its own
//! turns records into spans of the OpenTelemetry SDK, whose batch processor (its own bounded
//! queue and thread) sends them with a blocking HTTP client bounded by [`EXPORT_TIMEOUT`]. A
//! collector that is down, slow or refusing costs the gateway those spans, nothing else. With
//! no endpoint nothing is started and every call here returns at once.

use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};
use stopline_control::config::TelemetryConfig;

/// Span records waiting for the export thread before the next one is dropped.
pub const QUEUE: usize = 4096;
/// The bound on one export request to the collector.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long spans wait in the SDK's batch before they are sent.
pub const BATCH_DELAY: Duration = Duration::from_millis(500);

/// One span to export, as a call leaves it.
#[derive(Debug)]
struct SpanRecord {
    name: &'static str,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<String>,
}

#[derive(Debug)]
struct Queue {
    sender: SyncSender<SpanRecord>,
    dropped: AtomicU64,
    /// The provider the export thread's tracer belongs to, and the endpoint it sends to.
    provider: SdkTracerProvider,
    endpoint: String,
}

static QUEUED: OnceLock<Queue> = OnceLock::new();

/// The running export; [`Telemetry::shutdown`] sends what the SDK still holds.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
}

/// Why telemetry could not start (the gateway does not start either: `config_invalid`).
#[derive(Debug, thiserror::Error)]
#[error("[telemetry] otlp_endpoint {endpoint:?}: {why}")]
pub struct TelemetryError {
    endpoint: String,
    why: String,
}

/// The traces URL of `endpoint`: as given when it ends in `/v1/traces`, else with it appended
/// (a bare collector address, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read).
pub fn traces_url(endpoint: &str) -> String {
    if endpoint.trim_end_matches('/').ends_with("/v1/traces") {
        endpoint.to_string()
    } else {
        format!("{}/v1/traces", endpoint.trim_end_matches('/'))
    }
}

/// Start exporting when `config` names an endpoint (`None` when it does not). The export is one
/// per process: a later gateway of the same process (a drill's repeats) shares the first one's.
pub fn start(config: &TelemetryConfig) -> Result<Option<Telemetry>, TelemetryError> {
    let Some(endpoint) = config.otlp_endpoint.as_deref() else {
        return Ok(None);
    };
    if let Some(running) = QUEUED.get() {
        if running.endpoint != endpoint {
            tracing::warn!(endpoint = %running.endpoint, "telemetry already exports from this process: spans keep going there");
        }
        return Ok(Some(Telemetry {
            provider: running.provider.clone(),
        }));
    }
    let error = |why: String| TelemetryError {
        endpoint: endpoint.to_string(),
        why,
    };
    let url = traces_url(endpoint);
    let parsed: hyper::Uri = url.parse().map_err(|e| error(format!("not a URL: {e}")))?;
    if !matches!(parsed.scheme_str(), Some("http" | "https")) || parsed.host().is_none() {
        return Err(error("not an http:// or https:// URL".into()));
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| error(e.to_string()))?;
    let batch = BatchConfigBuilder::default()
        .with_scheduled_delay(BATCH_DELAY)
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch)
        .build();
    let service = config
        .service_name
        .clone()
        .unwrap_or_else(|| "stopline-gateway".into());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .build();
    let (sender, received) = sync_channel::<SpanRecord>(QUEUE);
    let tracer = provider.tracer("stopline-gateway");
    let queue = Queue {
        sender,
        dropped: AtomicU64::new(0),
        provider: provider.clone(),
        endpoint: endpoint.to_string(),
    };
    if QUEUED.set(queue).is_err() {
        // Two gateways of one process started at once: the other one exports.
        return Ok(None);
    }
    std::thread::Builder::new()
        .name("stopline-otel".into())
        .spawn(move || {
            for record in received {
                let mut span = tracer
                    .span_builder(record.name)
                    .with_kind(SpanKind::Internal)
                    .with_start_time(record.start)
                    .with_attributes(record.attributes)
                    .start(&tracer);
                if let Some(why) = record.error {
                    span.set_status(Status::error(why));
                }
                span.end_with_timestamp(record.end);
            }
        })
        .map_err(|e| error(format!("cannot start the export thread: {e}")))?;
    tracing::info!(endpoint = %endpoint, "exporting spans over OTLP/HTTP");
    Ok(Some(Telemetry { provider }))
}

impl Telemetry {
    /// Send what the SDK still holds (bounded by its export timeout). The export itself goes on
    /// for another gateway of the process; it ends with the process.
    pub fn shutdown(self) {
        let dropped = dropped();
        if dropped > 0 {
            tracing::warn!(dropped, "spans dropped while the export queue was full");
        }
        if let Err(error) = self.provider.force_flush() {
            tracing::warn!(%error, "telemetry: the last spans were not sent");
        }
    }
}

/// Span records dropped so far because the queue was full.
pub fn dropped() -> u64 {
    QUEUED
        .get()
        .map_or(0, |q| q.dropped.load(Ordering::Relaxed))
}

/// True when spans are exported (a caller may skip building attributes otherwise).
pub fn on() -> bool {
    QUEUED.get().is_some()
}

/// The wall-clock time of `instant` (for a span's start).
fn wall(instant: Instant) -> SystemTime {
    SystemTime::now()
        .checked_sub(instant.elapsed())
        .unwrap_or_else(SystemTime::now)
}

fn queue(name: &'static str, started: Instant, attributes: Vec<KeyValue>, error: Option<String>) {
    let Some(queue) = QUEUED.get() else {
        return;
    };
    let record = SpanRecord {
        name,
        start: wall(started),
        end: SystemTime::now(),
        attributes,
        error,
    };
    if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
        queue.sender.try_send(record)
    {
        let dropped = queue.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if dropped == 1 || dropped % 1000 == 0 {
            tracing::warn!(dropped, "span dropped: the telemetry export queue is full");
        }
    }
}

fn call(agent: &str, route: &str, target: Option<&str>) -> Vec<KeyValue> {
    vec![
        KeyValue::new("stopline.agent", agent.to_string()),
        KeyValue::new("http.route", route.to_string()),
        KeyValue::new("stopline.operation", target.unwrap_or("-").to_string()),
    ]
}

/// `stopline.admission`: a call admitted, from its arrival (`started`) to now.
pub fn admitted(agent: &str, route: &str, target: Option<&str>, surface: &str, started: Instant) {
    if !on() {
        return;
    }
    let mut attributes = call(agent, route, target);
    attributes.push(KeyValue::new("stopline.surface", surface.to_string()));
    attributes.push(KeyValue::new("stopline.decision", "allow"));
    queue("stopline.admission", started, attributes, None);
}

/// `stopline.dispatch`: a call handed upstream at `dispatched`, ended now with `status`.
pub fn dispatched(
    agent: &str,
    route: &str,
    target: Option<&str>,
    status: &str,
    dispatched: Instant,
) {
    if !on() {
        return;
    }
    let mut attributes = call(agent, route, target);
    attributes.push(KeyValue::new("stopline.status", status.to_string()));
    queue("stopline.dispatch", dispatched, attributes, None);
}

/// `stopline.refusal`: a call refused with `code`, from its arrival (`started`) to now.
pub fn refused(
    agent: &str,
    route: &str,
    target: Option<&str>,
    code: &str,
    message: &str,
    started: Instant,
) {
    if !on() {
        return;
    }
    let mut attributes = call(agent, route, target);
    attributes.push(KeyValue::new("stopline.code", code.to_string()));
    attributes.push(KeyValue::new("stopline.decision", "block"));
    queue(
        "stopline.refusal",
        started,
        attributes,
        Some(format!("{code}: {message}")),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_to_a_bare_collector_address_only() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://127.0.0.1:4318/"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces"),
            "http://c:4318/v1/traces"
        );
    }
}
