//! One setup for every role: logs to stderr (JSON when stderr is not a terminal), spans with
//! W3C trace ids always, metrics always readable at `/metrics` ([`crate::scrape`]), and OTLP
//! export of traces and metrics only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The variable that turns OTLP export on (the OpenTelemetry SDKs' own name for it).
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Keeps the providers (and the small runtime their gRPC exporters run on) alive; call
/// [`Telemetry::shutdown`] at exit so the last spans and metrics are sent.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    /// The OTLP exporters' channels live on this runtime: the SDK exports from its own
    /// threads, which have no Tokio context of their own.
    runtime: Option<tokio::runtime::Runtime>,
    /// Why export is off, or where it goes: logged once the subscriber exists.
    pub export: Export,
}

/// Where telemetry goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Export {
    /// No endpoint set: spans still get trace ids (logs carry them), nothing is sent.
    Off,
    /// Traces and metrics go to this OTLP/gRPC endpoint.
    Otlp(String),
    /// An endpoint was set but the exporters could not be built: export is off.
    Failed(String),
}

impl Telemetry {
    /// Sends what is buffered and stops the exporters.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let _ = self.meter.shutdown();
        let _ = self.tracer.shutdown();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn resource(service: &str) -> Resource {
    Resource::builder()
        .with_service_name(service.to_string())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

/// Sets the global subscriber, propagator and providers for a process whose role is
/// `service` (`switchboard-control`, `switchboard-router`, …). Log filter from `log_env`
/// (`info` when unset).
pub fn init(service: &str, log_env: &str) -> Telemetry {
    use std::io::IsTerminal;
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());

    let endpoint = std::env::var(OTLP_ENDPOINT_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty());
    let (tracer, otlp_metrics, runtime, export) = match endpoint {
        None => (
            SdkTracerProvider::builder()
                .with_resource(resource(service))
                .build(),
            None,
            None,
            Export::Off,
        ),
        Some(endpoint) => match exporting(service) {
            Ok((tracer, metrics, runtime)) => (tracer, Some(metrics), Some(runtime), {
                Export::Otlp(endpoint)
            }),
            Err(e) => (
                SdkTracerProvider::builder()
                    .with_resource(resource(service))
                    .build(),
                None,
                None,
                Export::Failed(format!("{endpoint}: {e}")),
            ),
        },
    };
    let mut meter = SdkMeterProvider::builder().with_resource(resource(service));
    match opentelemetry_prometheus::exporter()
        .with_registry(crate::scrape::registry().clone())
        // One meter: its scope's name and version would label every sample alike.
        .scope_info_enabled(false)
        .build()
    {
        Ok(prometheus) => meter = meter.with_reader(prometheus),
        Err(e) => eprintln!("switchboard: /metrics is off: {e}"),
    }
    if let Some(metrics) = otlp_metrics {
        let _inside = runtime.as_ref().map(|r| r.enter());
        meter = meter.with_periodic_exporter(metrics);
    }
    let meter = meter.build();
    opentelemetry::global::set_meter_provider(meter.clone());
    opentelemetry::global::set_tracer_provider(tracer.clone());
    // The instruments now, so every documented series is on the page from the start.
    crate::metrics::metrics();

    let filter = EnvFilter::try_from_env(log_env).unwrap_or_else(|_| EnvFilter::new("info"));
    let otel = tracing_opentelemetry::layer().with_tracer(tracer.tracer("switchboard"));
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let result = if std::io::stderr().is_terminal() {
        registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_current_span(true)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init()
    };
    if let Err(e) = result {
        eprintln!("switchboard: logging was already set up: {e}");
    }
    match &export {
        Export::Off => {}
        Export::Otlp(endpoint) => {
            tracing::info!(%endpoint, "exporting traces and metrics over OTLP")
        }
        Export::Failed(why) => {
            tracing::error!(%why, "OTLP export is off: the exporters could not be built")
        }
    }
    Telemetry {
        tracer,
        meter,
        runtime,
        export,
    }
}

type Providers = (
    SdkTracerProvider,
    opentelemetry_otlp::MetricExporter,
    tokio::runtime::Runtime,
);

/// The OTLP/gRPC exporters (endpoint, headers and timeouts from the standard `OTEL_*`
/// variables), built on a runtime of their own.
fn exporting(service: &str) -> Result<Providers, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()
        .map_err(|e| format!("starting the export runtime: {e}"))?;
    let _inside = runtime.enter();
    let spans = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
        .map_err(|e| format!("span exporter: {e}"))?;
    let metrics = opentelemetry_otlp::MetricExporter::builder()
        .with_tonic()
        .build()
        .map_err(|e| format!("metric exporter: {e}"))?;
    let tracer = SdkTracerProvider::builder()
        .with_resource(resource(service))
        .with_batch_exporter(spans)
        .build();
    drop(_inside);
    Ok((tracer, metrics, runtime))
}
