//! How long each call a server answered took, by OpenTelemetry's semantic conventions for HTTP
//! and RPC servers (issue 49): `http.server.request.duration` and `rpc.server.call.duration`,
//! in seconds, with the attributes those conventions name. One tower layer for both: axum's
//! routers and tonic's servers are tower services over `http`.
//!
//! Attributes stay bounded whatever a caller sends: an HTTP route is the route template axum
//! matched (`/hooks/{webhook_id}`, never the id), absent when no route matched; a method
//! outside the standard ones is `_OTHER`; a gRPC path no service serves (answered
//! `UNIMPLEMENTED`) is method `_OTHER`.
//!
//! A gRPC call's status is read from the response's head, where tonic puts it when the call
//! fails before answering (a "trailers-only" response); a call that answered is `OK`. A
//! streaming call is timed to its first answer's head, not to the stream's end.

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};
use std::time::Instant;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Histogram;

/// The conventions' advised boundaries for both durations, in seconds.
pub const SERVER_SECONDS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];

/// The gRPC status names the RPC conventions use, by code.
const GRPC_STATUS: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

const UNIMPLEMENTED: &str = "UNIMPLEMENTED";

struct Instruments {
    http: Histogram<f64>,
    rpc: Histogram<f64>,
}

fn instruments() -> &'static Instruments {
    static MADE: OnceLock<Instruments> = OnceLock::new();
    MADE.get_or_init(|| {
        let meter = opentelemetry::global::meter("switchboard");
        Instruments {
            http: meter
                .f64_histogram("http.server.request.duration")
                .with_unit("s")
                .with_boundaries(SERVER_SECONDS.to_vec())
                .with_description("Duration of HTTP server requests (ingest, the console, MCP), by method, route and status")
                .build(),
            rpc: meter
                .f64_histogram("rpc.server.call.duration")
                .with_unit("s")
                .with_boundaries(SERVER_SECONDS.to_vec())
                .with_description("Duration of gRPC calls served (control's API, a router's Evaluate), by method and status")
                .build(),
        }
    })
}

/// What kind of server a [`ServerMetricsLayer`] times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Server {
    Http,
    Grpc,
}

/// Times every call of the service it wraps (module docs).
#[derive(Clone, Copy, Debug)]
pub struct ServerMetricsLayer(Server);

impl ServerMetricsLayer {
    /// For an axum router (`Router::layer`, which runs after routing, so the matched route is
    /// known).
    pub fn http() -> Self {
        ServerMetricsLayer(Server::Http)
    }

    /// For a tonic server (`Server::builder().layer`).
    pub fn grpc() -> Self {
        ServerMetricsLayer(Server::Grpc)
    }
}

impl<S> tower::Layer<S> for ServerMetricsLayer {
    type Service = ServerMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerMetrics {
            inner,
            server: self.0,
        }
    }
}

/// The service [`ServerMetricsLayer`] makes.
#[derive(Clone, Debug)]
pub struct ServerMetrics<S> {
    inner: S,
    server: Server,
}

/// What is known of a call before it is answered.
struct Started {
    at: Instant,
    server: Server,
    method: &'static str,
    /// The matched route (HTTP), or the gRPC path.
    target: Option<String>,
}

impl<S, B, R> tower::Service<http::Request<B>> for ServerMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    R: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let target = match self.server {
            Server::Http => request
                .extensions()
                .get::<axum::extract::MatchedPath>()
                .map(|m| m.as_str().to_string()),
            Server::Grpc => Some(request.uri().path().to_string()),
        };
        let started = Started {
            at: Instant::now(),
            server: self.server,
            method: method_name(request.method()),
            target,
        };
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answered = answer.await;
            if let Ok(response) = &answered {
                record(&started, response);
            }
            answered
        })
    }
}

fn record<R>(started: &Started, response: &http::Response<R>) {
    let took = started.at.elapsed().as_secs_f64();
    match started.server {
        Server::Http => {
            let mut attributes = vec![
                KeyValue::new("http.request.method", started.method),
                KeyValue::new(
                    "http.response.status_code",
                    i64::from(response.status().as_u16()),
                ),
                KeyValue::new("url.scheme", "http"),
            ];
            if let Some(route) = &started.target {
                attributes.push(KeyValue::new("http.route", route.clone()));
            }
            if response.status().is_server_error() {
                attributes.push(KeyValue::new(
                    "error.type",
                    response.status().as_u16().to_string(),
                ));
            }
            instruments().http.record(took, &attributes);
        }
        Server::Grpc => {
            let status = grpc_status(response.headers());
            let method = match (&started.target, status) {
                (_, UNIMPLEMENTED) | (None, _) => "_OTHER".to_string(),
                (Some(path), _) => path.trim_start_matches('/').to_string(),
            };
            let mut attributes = vec![
                KeyValue::new("rpc.system.name", "grpc"),
                KeyValue::new("rpc.method", method),
                KeyValue::new("rpc.response.status_code", status),
            ];
            if status != "OK" {
                attributes.push(KeyValue::new("error.type", status));
            }
            instruments().rpc.record(took, &attributes);
        }
    }
}

/// The status a gRPC response's head carries (`OK` when it carries none: the status comes in
/// the trailers after an answer).
fn grpc_status(headers: &http::HeaderMap) -> &'static str {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .map_or("OK", |code| {
            GRPC_STATUS.get(code).copied().unwrap_or("UNKNOWN")
        })
}

/// The conventions' method names: the standard ones as they are, any other `_OTHER`.
fn method_name(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::DELETE => "DELETE",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::PATCH => "PATCH",
        http::Method::CONNECT => "CONNECT",
        http::Method::TRACE => "TRACE",
        _ => "_OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_in_the_head_is_the_calls_and_none_is_ok() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(grpc_status(&headers), "OK");
        headers.insert("grpc-status", http::HeaderValue::from_static("5"));
        assert_eq!(grpc_status(&headers), "NOT_FOUND");
        headers.insert("grpc-status", http::HeaderValue::from_static("16"));
        assert_eq!(grpc_status(&headers), "UNAUTHENTICATED");
        headers.insert("grpc-status", http::HeaderValue::from_static("99"));
        assert_eq!(grpc_status(&headers), "UNKNOWN");
    }

    #[test]
    fn a_method_outside_the_standard_ones_is_other() {
        assert_eq!(method_name(&http::Method::POST), "POST");
        let made_up = http::Method::from_bytes(b"BREW").expect("a method");
        assert_eq!(method_name(&made_up), "_OTHER");
    }
}
