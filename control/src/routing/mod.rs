//! Control's view of the router plane: every decision comes from a router instance over
//! gRPC. Calls are balanced round-robin over the instances (a static list or a DNS name
//! resolved periodically, e.g. a Kubernetes headless Service); a call that fails on one
//! instance is retried on the next, so a router dying mid-replay costs a retry, not a plan.

use std::sync::Arc;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use switchboard_proto::router::v1::router_client::RouterClient;
use switchboard_proto::router::v1::{
    Configuration, DeliveryDecisions, EvaluateRequest, RoutingContext, StoredDelivery,
    ValidateRequest, ValidateResponse,
};
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

/// Largest message exchanged with a router (a chunk of stored deliveries).
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;
/// HTTP/2 windows sized for megabyte batches (the router's server uses the same), so a
/// chunk of stored deliveries is not sent 64 KiB per round trip.
const STREAM_WINDOW_BYTES: u32 = 8 * 1024 * 1024;
const CONNECTION_WINDOW_BYTES: u32 = 16 * 1024 * 1024;

/// Where the routers are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouterSource {
    /// Fixed addresses (`host:port`).
    Static(Vec<String>),
    /// A DNS name whose A/AAAA records are the routers, re-resolved periodically.
    Dns { name: String, port: u16 },
}

impl RouterSource {
    /// `dns:///name:port` for DNS; otherwise a comma-separated list of `host:port`.
    pub fn parse(spec: &str) -> Result<Self, String> {
        if let Some(rest) = spec.strip_prefix("dns:///") {
            let (name, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| format!("{spec}: expected dns:///<name>:<port>"))?;
            let port = port.parse().map_err(|_| format!("{spec}: bad port"))?;
            return Ok(Self::Dns {
                name: name.to_string(),
                port,
            });
        }
        let addrs: Vec<String> = spec
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.trim_start_matches("http://").to_string())
            .collect();
        if addrs.is_empty() {
            return Err("no router address given".into());
        }
        Ok(Self::Static(addrs))
    }
}

mod coalesce;

pub use coalesce::{Coalescer, MAX_SHARED_CALL};

/// Why no router could answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("no router answered: {0}")]
    Unavailable(String),
    #[error("the router refused the request: {0}")]
    Refused(String),
}

#[derive(Clone)]
struct Instance {
    addr: String,
    client: RouterClient<Channel>,
}

/// A balanced set of router instances.
pub struct Routers {
    source: RouterSource,
    instances: RwLock<Vec<Instance>>,
    next: AtomicUsize,
    call_timeout: Duration,
    /// Deliveries waiting to share a call ([`Routers::evaluate_one`]).
    coalescer: Coalescer,
    /// Evaluate calls made, successful or not: how well calls are shared.
    calls: std::sync::atomic::AtomicU64,
}

fn connect(addr: &str) -> Option<Instance> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(STREAM_WINDOW_BYTES))
        .initial_connection_window_size(Some(CONNECTION_WINDOW_BYTES));
    let client = RouterClient::new(endpoint.connect_lazy())
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    Some(Instance {
        addr: addr.to_string(),
        client,
    })
}

/// Is this failure the instance's (try another) rather than the request's?
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::Unknown
            | Code::Cancelled
            | Code::DeadlineExceeded
            | Code::Internal
            | Code::Aborted
    )
}

impl Routers {
    /// Builds the set; DNS sources are resolved now and then every `refresh` by
    /// [`Routers::spawn_refresh`].
    pub async fn new(source: RouterSource, call_timeout: Duration) -> Arc<Self> {
        let routers = Arc::new(Self {
            source,
            instances: RwLock::new(Vec::new()),
            next: AtomicUsize::new(0),
            call_timeout,
            coalescer: Coalescer::default(),
            calls: std::sync::atomic::AtomicU64::new(0),
        });
        routers.refresh().await;
        routers
    }

    /// Re-reads the source, keeping connections to instances that are still listed.
    pub async fn refresh(&self) {
        let addrs = match &self.source {
            RouterSource::Static(a) => a.clone(),
            RouterSource::Dns { name, port } => {
                match tokio::net::lookup_host((name.as_str(), *port)).await {
                    Ok(found) => {
                        let mut a: Vec<String> = found.map(|s| s.to_string()).collect();
                        a.sort();
                        a.dedup();
                        a
                    }
                    Err(e) => {
                        tracing::warn!(name = %name, error = %e, "router dns lookup failed; keeping the last set");
                        return;
                    }
                }
            }
        };
        let Ok(mut instances) = self.instances.write() else {
            return;
        };
        let old = std::mem::take(&mut *instances);
        *instances = addrs
            .iter()
            .filter_map(|a| {
                old.iter()
                    .find(|i| &i.addr == a)
                    .cloned()
                    .or_else(|| connect(a))
            })
            .collect();
    }

    /// Re-resolves a DNS source every `every` until the set is dropped.
    pub fn spawn_refresh(self: &Arc<Self>, every: Duration) {
        if !matches!(self.source, RouterSource::Dns { .. }) {
            return;
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match weak.upgrade() {
                    Some(r) => r.refresh().await,
                    None => return,
                }
            }
        });
    }

    /// The instances' addresses, in order.
    pub fn addresses(&self) -> Vec<String> {
        self.instances
            .read()
            .map(|i| i.iter().map(|x| x.addr.clone()).collect())
            .unwrap_or_default()
    }

    /// The instances to try for one call: all of them, starting at the next in turn.
    fn rotation(&self) -> Vec<Instance> {
        let instances = self.instances.read().map(|i| i.clone()).unwrap_or_default();
        if instances.is_empty() {
            return instances;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % instances.len();
        instances
            .iter()
            .cycle()
            .skip(start)
            .take(instances.len())
            .cloned()
            .collect()
    }

    /// Validates a configuration as a save would, on whichever router answers.
    pub async fn validate(
        &self,
        json: &str,
        ctx: &RoutingContext,
    ) -> Result<ValidateResponse, RoutingError> {
        let req = ValidateRequest {
            configuration: Some(Configuration {
                json: json.to_string(),
            }),
            context: Some(ctx.clone()),
        };
        let mut last = String::from("no router is configured");
        for mut instance in self.rotation() {
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(self.call_timeout);
            switchboard_telemetry::propagation::inject(request.metadata_mut());
            match instance.client.validate(request).await {
                Ok(resp) => return Ok(resp.into_inner()),
                Err(status) if retryable(&status) => {
                    last = format!("{}: {}", instance.addr, status.message())
                }
                Err(status) => return Err(RoutingError::Refused(status.message().to_string())),
            }
        }
        Err(RoutingError::Unavailable(last))
    }

    /// Evaluate calls made so far (each try on each router counts once per request).
    pub fn evaluate_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Evaluates one request on one router, retrying on the others when it fails.
    pub async fn evaluate(
        &self,
        req: EvaluateRequest,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut last = String::from("no router is configured");
        for mut instance in self.rotation() {
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(self.call_timeout);
            switchboard_telemetry::propagation::inject(request.metadata_mut());
            match instance.client.evaluate(request).await {
                Ok(resp) => return Ok(resp.into_inner().results),
                Err(status) if retryable(&status) => {
                    tracing::warn!(router = %instance.addr, error = %status.message(), "router call failed; trying the next");
                    last = format!("{}: {}", instance.addr, status.message());
                }
                Err(status) => return Err(RoutingError::Refused(status.message().to_string())),
            }
        }
        Err(RoutingError::Unavailable(last))
    }

    /// Evaluates many deliveries in chunks spread over every instance at once, each chunk
    /// retried elsewhere on failure. Results come back in delivery order.
    pub async fn evaluate_chunked(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        deliveries: Vec<StoredDelivery>,
        chunk: usize,
        budget_ms: u32,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        let chunk = chunk.max(1);
        let calls = deliveries.chunks(chunk).map(|part| {
            self.evaluate(EvaluateRequest {
                context: Some(ctx.clone()),
                configurations: configurations.to_vec(),
                deliveries: part.to_vec(),
                budget_ms,
            })
        });
        let mut out = Vec::with_capacity(deliveries.len());
        for result in futures::future::join_all(calls).await {
            out.extend(result?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(
            RouterSource::parse("127.0.0.1:1, http://10.0.0.2:2").unwrap(),
            RouterSource::Static(vec!["127.0.0.1:1".into(), "10.0.0.2:2".into()])
        );
        assert_eq!(
            RouterSource::parse("dns:///router.switchboard.svc:7701").unwrap(),
            RouterSource::Dns {
                name: "router.switchboard.svc".into(),
                port: 7701
            }
        );
        assert!(RouterSource::parse("").is_err());
        assert!(RouterSource::parse("dns:///nope").is_err());
    }
}
