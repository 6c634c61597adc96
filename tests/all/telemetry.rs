//! Observability end to end: `switchboard up` exporting to a real OTLP/gRPC endpoint served by
//! the test (the collector protocol, from `opentelemetry-proto`). One trace runs agent →
//! gateway → control → router, carried as W3C trace context in MCP `_meta` and gRPC
//! metadata; a delivery's trace continues the sender's `traceparent`; health checks make no
//! spans; the metrics arrive; the JSON log lines name the trace.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;

use crate::cli::{Process, up_lines};
use crate::control_harness::{post, signed};
use crate::mcp_e2e::mcp_post;
use crate::support::payload;

/// One exported span, flattened.
#[derive(Clone, Debug)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    parent_span_id: String,
}

/// What the collector received.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    /// (metric name, data point attributes as `key=value`).
    metrics: Vec<(String, Vec<String>)>,
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Received>>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = self.0.lock().expect("collector lock");
        for resource in request.into_inner().resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref()?.value.as_ref())
                .map(|v| match v {
                    AnyValue::StringValue(s) => s.clone(),
                    other => format!("{other:?}"),
                })
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    received.spans.push(Span {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        parent_span_id: hex(&span.parent_span_id),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        use opentelemetry_proto::tonic::metrics::v1::metric::Data;
        let mut received = self.0.lock().expect("collector lock");
        for resource in request.into_inner().resource_metrics {
            for scope in resource.scope_metrics {
                for metric in scope.metrics {
                    let attributes: Vec<Vec<String>> = match &metric.data {
                        Some(Data::Sum(sum)) => sum
                            .data_points
                            .iter()
                            .map(|p| attribute_texts(&p.attributes))
                            .collect(),
                        Some(Data::Histogram(h)) => h
                            .data_points
                            .iter()
                            .map(|p| attribute_texts(&p.attributes))
                            .collect(),
                        _ => vec![Vec::new()],
                    };
                    for a in attributes {
                        received.metrics.push((metric.name.clone(), a));
                    }
                }
            }
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

fn attribute_texts(attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> Vec<String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            format!("{}={value}", kv.key)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Serves the OTLP trace and metrics services on 127.0.0.1:0.
async fn start_collector() -> (SocketAddr, Collector) {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the collector");
    let addr = listener.local_addr().expect("collector address");
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(collector.clone()))
        .add_service(MetricsServiceServer::new(collector.clone()))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    tokio::spawn(server);
    (addr, collector)
}

const INGEST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const INGEST_PARENT: &str = "00f067aa0ba902b7";
const MCP_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const MCP_PARENT: &str = "b7ad6b7169203331";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_the_agent_through_gateway_control_and_router() {
    let (collector_addr, collector) = start_collector().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let log_path = dir.path().join("up.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let endpoint = format!("http://{collector_addr}");
    let args = [
        "up",
        "--data-dir",
        data.to_str().expect("utf-8 path"),
        "--http-listen",
        "127.0.0.1:0",
        "--grpc-listen",
        "127.0.0.1:0",
        "--mcp-listen",
        "127.0.0.1:0",
        "--children",
        "1",
    ];
    let mut up = Process::spawn_logging(
        &args,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
            ("SWITCHBOARD_LOG", "info"),
        ],
        Stdio::from(log),
    );
    let lines = up_lines(&mut up);

    // A signed delivery whose sender started a trace.
    let (authority, path) = lines
        .ingest_url
        .strip_prefix("http://")
        .and_then(|rest| rest.split_once('/'))
        .expect("ingest url");
    let http: SocketAddr = authority.parse().expect("ingest address");
    let p = payload("github", "pull_request.opened.json");
    let mut headers = signed("github", "pull_request", "otel-1", &lines.secret, &p.body);
    headers.push((
        "traceparent".to_string(),
        format!("00-{INGEST_TRACE}-{INGEST_PARENT}-01"),
    ));
    let resp = post(http, &format!("/{path}"), &headers, &p.body).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    let event_id = resp.json()["event_id"]
        .as_str()
        .expect("event id")
        .to_string();

    // An agent's tool call carrying its trace in `_meta`: gateway → control → router.
    let answer = mcp_post(
        &lines.mcp_url,
        &lines.token,
        serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "test_webhook_rules",
            "arguments": {"webhook_id": lines.webhook, "event_id": event_id},
            "_meta": {"traceparent": format!("00-{MCP_TRACE}-{MCP_PARENT}-01")},
        }}),
    )
    .await;
    assert_ne!(answer["result"]["isError"], true, "{answer}");

    // Shutting down sends what is buffered.
    up.terminate();
    assert!(up.wait_exit(Duration::from_secs(30)).success());

    let received = collector.0.lock().expect("collector lock");
    let in_trace = |trace: &str| -> Vec<Span> {
        received
            .spans
            .iter()
            .filter(|s| s.trace_id == trace)
            .cloned()
            .collect()
    };
    let names =
        |spans: &[Span]| -> BTreeSet<String> { spans.iter().map(|s| s.name.clone()).collect() };

    let ingest = in_trace(INGEST_TRACE);
    let ingest_names = names(&ingest);
    assert!(
        ingest
            .iter()
            .any(|s| s.name.starts_with("POST /hooks/") && s.parent_span_id == INGEST_PARENT),
        "the delivery's span continues the sender's: {ingest:?}"
    );
    assert!(
        ingest_names.contains("/switchboard.router.v1.Router/Evaluate"),
        "the router's Evaluate is in the delivery's trace: {ingest_names:?}"
    );

    let agent = in_trace(MCP_TRACE);
    let agent_names = names(&agent);
    assert!(
        agent
            .iter()
            .any(|s| s.name == "tools/call test_webhook_rules" && s.parent_span_id == MCP_PARENT),
        "the tool call continues the agent's trace: {agent:?}"
    );
    for hop in [
        "/switchboard.control.v1.WebhookRules/TestWebhookRules",
        "/switchboard.router.v1.Router/Evaluate",
    ] {
        assert!(
            agent_names.contains(hop),
            "{hop} is in the agent's trace: {agent_names:?}"
        );
    }
    assert!(
        received.spans.iter().all(|s| s.service == "switchboard"),
        "`up` reports as one service"
    );
    assert!(
        !received
            .spans
            .iter()
            .any(|s| s.name.contains("grpc.health")),
        "health checks make no spans"
    );

    let deliveries: Vec<&Vec<String>> = received
        .metrics
        .iter()
        .filter(|(name, _)| name == "switchboard.ingest.deliveries")
        .map(|(_, attributes)| attributes)
        .collect();
    assert!(
        deliveries
            .iter()
            .any(|a| a.contains(&"decision=default".to_string())
                && a.contains(&"verified=true".to_string())),
        "deliveries by decision: {deliveries:?}"
    );
    let metric_names: BTreeSet<&str> = received.metrics.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        metric_names.contains("switchboard.ingest.duration"),
        "{metric_names:?}"
    );

    // Not a terminal: JSON log lines, the delivery's naming its trace.
    let log = std::fs::read_to_string(&log_path).expect("read the log");
    let ingested = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|l| l["fields"]["message"] == "delivery ingested")
        .unwrap_or_else(|| panic!("no JSON `delivery ingested` line in:\n{log}"));
    assert_eq!(ingested["span"]["trace_id"], INGEST_TRACE, "{ingested}");
}
