//! W3C trace context across process boundaries: into and out of gRPC metadata (gateway →
//! control → router) and out of an MCP request's `_meta` (agent → gateway).
//!
//! Every request span carries a `trace_id` field, so JSON log lines inside it name the trace.

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

struct MetadataInjector<'a>(&'a mut tonic::metadata::MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
            tonic::metadata::MetadataValue::try_from(value.as_str()),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct JsonExtractor<'a>(&'a serde_json::Map<String, serde_json::Value>);

impl Extractor for JsonExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.as_str())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Writes the current span's trace context (`traceparent`, `tracestate`) into outgoing gRPC
/// metadata.
pub fn inject(metadata: &mut tonic::metadata::MetadataMap) {
    let context = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&context, &mut MetadataInjector(metadata))
    });
}

/// Makes `span` a child of the trace context in `headers` (if any) and records its trace id.
pub fn continue_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)));
    adopt(span, parent);
}

/// Makes `span` a child of the trace context an MCP request carries in `_meta` (`traceparent`,
/// `tracestate`), if it carries one, and records its trace id.
pub fn continue_from_meta(span: &tracing::Span, meta: &serde_json::Map<String, serde_json::Value>) {
    let parent =
        opentelemetry::global::get_text_map_propagator(|p| p.extract(&JsonExtractor(meta)));
    adopt(span, parent);
}

fn adopt(span: &tracing::Span, parent: opentelemetry::Context) {
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
    record_trace_id(span);
}

/// Records the span's trace id in its `trace_id` field (declared `tracing::field::Empty`).
pub fn record_trace_id(span: &tracing::Span) {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    if span_context.is_valid() {
        span.record("trace_id", span_context.trace_id().to_string());
    }
}

/// The span of one incoming gRPC call, continuing the caller's trace. Health checks and
/// reflection get none: they would drown the traces that matter.
pub fn grpc_request_span(request: &http::Request<()>) -> tracing::Span {
    let path = request.uri().path();
    if path.starts_with("/grpc.health.v1.") || path.starts_with("/grpc.reflection.") {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "grpc",
        otel.name = path,
        rpc.system = "grpc",
        trace_id = tracing::field::Empty
    );
    continue_from_headers(&span, request.headers());
    span
}

/// The current span's trace id, when it has a valid one.
pub fn current_trace_id() -> Option<String> {
    let context = tracing::Span::current().context();
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}
