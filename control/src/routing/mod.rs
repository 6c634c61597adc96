//! Control's view of the router plane: every decision comes from a router instance over
//! gRPC. Instances (a static list or a DNS name resolved periodically, e.g. a Kubernetes
//! headless Service) are chosen by health, not by turn ([`balance`]): a late or failing one
//! is ejected for a while, a small call a sender waits on is hedged on another router when
//! its first is late, and a call that fails on one instance is retried on another, so a
//! router dying mid-replay costs a retry, not a plan, and a hung one costs a few deliveries
//! a hedge delay each, not every delivery a call timeout.

use std::future::Future;
use std::sync::Arc;
use std::sync::RwLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use switchboard_proto::router::v1::router_client::RouterClient;
use switchboard_proto::router::v1::{
    Configuration, DeliveryDecisions, EvaluateRequest, RoutingContext, StoredDelivery,
    ValidateRequest, ValidateResponse, WorkClass,
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

pub mod balance;
mod coalesce;

pub use coalesce::{Coalescer, MAX_SHARED_CALL};

use balance::Health;

/// Why no router could answer. What a caller sees is the variant's text; the detail (which
/// router, what it said) is for the log only, never sent (`log_text`).
#[derive(Clone, Debug, thiserror::Error)]
pub enum RoutingError {
    #[error("no router answered")]
    Unavailable(String),
    #[error("the router refused the request")]
    Refused(String),
}

impl RoutingError {
    /// The text with its detail, for the log.
    pub fn log_text(&self) -> String {
        match self {
            Self::Unavailable(d) | Self::Refused(d) => format!("{self}: {d}"),
        }
    }
}

#[derive(Clone)]
struct Instance {
    addr: String,
    client: RouterClient<Channel>,
    /// Replays' own connection, made on the background runtime: a replay's megabyte calls
    /// never share an HTTP/2 connection (or its send buffer) with a live delivery's, and
    /// their encoding and decoding run on the background's low-priority threads.
    bulk: RouterClient<Channel>,
    health: Arc<Health>,
}

/// How one call is attempted across instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempts {
    /// Small calls a sender waits on (ingest, validation): if the chosen instance has not
    /// answered after its hedge delay, the same request goes to another one as well, and the
    /// first answer wins; all within the call timeout.
    Hedged,
    /// Large calls, whose time says nothing about health: one instance at a time, each given
    /// the whole call timeout, the next tried on failure.
    OneByOne,
    /// Replay chunks: as [`Attempts::OneByOne`], but an attempt may take until the replay's
    /// own deadline. A replay yields to live work, so under load its chunks wait, and that is
    /// no router's failure: the replay ends truncated at its deadline instead of failing.
    Until(tokio::time::Instant),
}

/// A balanced set of router instances ([`balance`]).
pub struct Routers {
    source: RouterSource,
    instances: RwLock<Vec<Instance>>,
    call_timeout: Duration,
    /// Deliveries waiting to share a call ([`Routers::evaluate_one`]).
    coalescer: Coalescer,
    /// Evaluate calls made, successful or not: how well calls are shared.
    calls: std::sync::atomic::AtomicU64,
    /// Attempts started on a second instance because the first was late.
    hedges: std::sync::atomic::AtomicU64,
}

fn connect(addr: &str) -> Option<Instance> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .initial_stream_window_size(Some(STREAM_WINDOW_BYTES))
        .initial_connection_window_size(Some(CONNECTION_WINDOW_BYTES));
    let client_of = |channel: Channel| {
        RouterClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    };
    let client = client_of(endpoint.connect_lazy());
    // A channel's tasks (its connection, the body it sends) run on the runtime it is made on.
    let bulk = {
        let _on = switchboard_background::background().handle().enter();
        client_of(endpoint.connect_lazy())
    };
    Some(Instance {
        addr: addr.to_string(),
        client,
        bulk,
        health: Arc::new(Health::new(Instant::now())),
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

/// One attempt's end: which instance, when it began, and what it came to.
type AttemptEnd<T> = (usize, Instant, Result<T, tonic::Status>);

impl Routers {
    /// Builds the set; DNS sources are resolved now and then every `refresh` by
    /// [`Routers::spawn_refresh`].
    pub async fn new(source: RouterSource, call_timeout: Duration) -> Arc<Self> {
        let routers = Arc::new(Self {
            source,
            instances: RwLock::new(Vec::new()),
            call_timeout,
            coalescer: Coalescer::default(),
            calls: std::sync::atomic::AtomicU64::new(0),
            hedges: std::sync::atomic::AtomicU64::new(0),
        });
        routers.refresh().await;
        routers
    }

    /// Re-reads the source, keeping connections (and health) of instances still listed.
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

    /// The addresses of instances ejected now (for tests and the log).
    pub fn ejected(&self) -> Vec<String> {
        let now = Instant::now();
        self.instances
            .read()
            .map(|i| {
                i.iter()
                    .filter(|x| x.health.ejected_until(now).is_some())
                    .map(|x| x.addr.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn snapshot(&self) -> Vec<Instance> {
        self.instances.read().map(|i| i.clone()).unwrap_or_default()
    }

    /// Makes one call: on an instance chosen by [`balance::choose`], then, as `attempts`
    /// says, on others. Late and failing instances are ejected; answers in time feed the
    /// estimate.
    async fn call<T, F, Fut>(&self, attempts: Attempts, mut run: F) -> Result<T, RoutingError>
    where
        F: FnMut(RouterClient<Channel>, Duration) -> Fut,
        Fut: Future<Output = Result<T, tonic::Status>>,
    {
        let instances = self.snapshot();
        if instances.is_empty() {
            return Err(RoutingError::Unavailable("no router is configured".into()));
        }
        let healths: Vec<&Health> = instances.iter().map(|i| &*i.health).collect();
        let deadline = tokio::time::Instant::now() + self.call_timeout;
        let mut tried: Vec<usize> = Vec::new();
        let mut running: Vec<(usize, Instant)> = Vec::new();
        let mut pending = futures::stream::FuturesUnordered::new();
        let mut hedge_at = deadline;
        let mut last = String::from("no router answered");
        let mut launch = |tried: &mut Vec<usize>,
                          running: &mut Vec<(usize, Instant)>,
                          pending: &mut futures::stream::FuturesUnordered<_>|
         -> Option<tokio::time::Instant> {
            let measure = match attempts {
                Attempts::Hedged => balance::Measure::Latency,
                Attempts::OneByOne | Attempts::Until(_) => balance::Measure::InFlight,
            };
            let i = balance::choose(&healths, tried, Instant::now(), measure, |n| {
                fastrand::usize(..n)
            })?;
            tried.push(i);
            let instance = &instances[i];
            let timeout = match attempts {
                Attempts::Hedged => deadline.saturating_duration_since(tokio::time::Instant::now()),
                Attempts::OneByOne => self.call_timeout,
                Attempts::Until(at) => at
                    .saturating_duration_since(tokio::time::Instant::now())
                    .max(self.call_timeout),
            };
            let began = Instant::now();
            running.push((i, began));
            let flight = instance.health.start();
            let client = match attempts {
                Attempts::Until(_) => instance.bulk.clone(),
                Attempts::Hedged | Attempts::OneByOne => instance.client.clone(),
            };
            let call = run(client, timeout);
            pending.push(async move {
                let result = match tokio::time::timeout(timeout, call).await {
                    Ok(r) => r,
                    Err(_) => Err(tonic::Status::deadline_exceeded("no answer in time")),
                };
                drop(flight);
                (i, began, result)
            });
            Some(tokio::time::Instant::now() + instance.health.hedge_after())
        };
        loop {
            if pending.is_empty() {
                match launch(&mut tried, &mut running, &mut pending) {
                    Some(at) => hedge_at = at,
                    None => return Err(RoutingError::Unavailable(last)),
                }
            }
            let may_hedge = attempts == Attempts::Hedged && tried.len() < instances.len();
            let wait_until = match attempts {
                Attempts::Hedged => deadline,
                Attempts::OneByOne => tokio::time::Instant::now() + self.call_timeout * 2,
                Attempts::Until(at) => at.max(tokio::time::Instant::now() + self.call_timeout * 2),
            };
            tokio::select! {
                Some(end) = futures::StreamExt::next(&mut pending) => {
                    let (i, began, result): AttemptEnd<T> = end;
                    running.retain(|(j, _)| *j != i);
                    match result {
                        Ok(value) => {
                            let now = Instant::now();
                            // Only small calls' times are comparable: a replay chunk's
                            // seconds would make its router look slow for the next ingest.
                            match attempts {
                                Attempts::Hedged => instances[i].health.observe(now - began, now),
                                Attempts::OneByOne | Attempts::Until(_) => {
                                    instances[i].health.answered()
                                }
                            }
                            // Those asked before the winner and still silent are late.
                            for (j, asked) in &running {
                                if *asked <= began {
                                    self.eject(&instances[*j], "answered later than another router");
                                }
                            }
                            return Ok(value);
                        }
                        Err(status) if retryable(&status) => {
                            self.eject(&instances[i], status.message());
                            last = format!("{}: {}", instances[i].addr, status.message());
                        }
                        Err(status) => {
                            return Err(RoutingError::Refused(format!(
                                "{}: {}",
                                instances[i].addr,
                                status.message()
                            )));
                        }
                    }
                }
                () = tokio::time::sleep_until(hedge_at), if may_hedge => {
                    if let Some(at) = launch(&mut tried, &mut running, &mut pending) {
                        self.hedges.fetch_add(1, Ordering::Relaxed);
                        hedge_at = at;
                    }
                }
                () = tokio::time::sleep_until(wait_until) => {
                    for (j, _) in &running {
                        self.eject(&instances[*j], "no answer within the call timeout");
                    }
                    return Err(RoutingError::Unavailable(last));
                }
            }
        }
    }

    fn eject(&self, instance: &Instance, why: &str) {
        let now = Instant::now();
        let was = instance.health.ejected_until(now).is_some();
        instance.health.eject(now);
        if !was {
            switchboard_telemetry::metrics().router_ejection();
            tracing::warn!(router = %instance.addr, reason = %why, "router ejected for a while");
        }
    }

    /// Validates a configuration as a save would, on whichever router answers.
    pub async fn validate(
        &self,
        configuration: &switchboard_model::Configuration,
        ctx: &RoutingContext,
    ) -> Result<ValidateResponse, RoutingError> {
        let req = ValidateRequest {
            configuration: Some(Configuration::from(configuration)),
            context: Some(ctx.clone()),
        };
        self.call(Attempts::Hedged, |mut client, timeout| {
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(timeout);
            switchboard_telemetry::propagation::inject(request.metadata_mut());
            async move { client.validate(request).await.map(|r| r.into_inner()) }
        })
        .await
    }

    /// Evaluate calls made so far (each request counts once, however many attempts).
    pub fn evaluate_calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Attempts started on a second router because the first was late.
    pub fn hedged_attempts(&self) -> u64 {
        self.hedges.load(Ordering::Relaxed)
    }

    /// Evaluates one request on one router, retrying on the others when it fails. For
    /// large requests (replays): no hedging.
    pub async fn evaluate(
        &self,
        req: EvaluateRequest,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        self.evaluate_with(Attempts::OneByOne, req).await
    }

    /// Evaluates a replay chunk: like [`Routers::evaluate`], but an attempt may run until
    /// `deadline` (the replay's own), never less than the call timeout; on the replay
    /// connection, as an `EvaluateStream` whose first message holds only the call's terms and
    /// the rest its deliveries, [`REPLAY_PART`] at a time, so the router knows a replay before
    /// it decodes any of its deliveries (and decodes them at a replay's priority).
    pub async fn evaluate_until(
        &self,
        req: EvaluateRequest,
        deadline: tokio::time::Instant,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.call(Attempts::Until(deadline), |mut client, timeout| {
            let mut request = tonic::Request::new(futures::stream::iter(in_parts(&req)));
            request.set_timeout(timeout);
            switchboard_telemetry::propagation::inject(request.metadata_mut());
            async move {
                client
                    .evaluate_stream(request)
                    .await
                    .map(|r| r.into_inner().results)
            }
        })
        .await
    }

    /// Evaluates a small request a sender waits on: hedged on another router when the
    /// chosen one is late ([`Attempts::Hedged`]).
    pub async fn evaluate_hedged(
        &self,
        req: EvaluateRequest,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        self.evaluate_with(Attempts::Hedged, req).await
    }

    async fn evaluate_with(
        &self,
        attempts: Attempts,
        req: EvaluateRequest,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.call(attempts, |mut client, timeout| {
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(timeout);
            switchboard_telemetry::propagation::inject(request.metadata_mut());
            async move {
                client
                    .evaluate(request)
                    .await
                    .map(|r| r.into_inner().results)
            }
        })
        .await
    }

    /// Evaluates many of `tenant`'s waiting deliveries as live work, in chunks (at most
    /// `chunk` deliveries, and about [`CHUNK_BYTES`](switchboard_model::body::CHUNK_BYTES) of
    /// bodies) spread over every instance at once, each chunk retried elsewhere on failure.
    /// Results come back in delivery order.
    pub async fn evaluate_chunked(
        &self,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        deliveries: Vec<StoredDelivery>,
        chunk: usize,
        budget_ms: u32,
        tenant: &str,
    ) -> Result<Vec<DeliveryDecisions>, RoutingError> {
        let chunks = switchboard_model::body::chunk_ranges(
            deliveries.iter().map(|d| d.body.len()),
            chunk,
            switchboard_model::body::CHUNK_BYTES,
        );
        let calls = chunks.into_iter().map(|range| {
            self.evaluate(EvaluateRequest {
                context: Some(ctx.clone()),
                configurations: configurations.to_vec(),
                deliveries: deliveries[range].to_vec(),
                budget_ms,
                work_class: WorkClass::Live as i32,
                tenant: tenant.to_string(),
                max_child_faults: 0,
            })
        });
        let mut out = Vec::with_capacity(deliveries.len());
        for result in futures::future::join_all(calls).await {
            out.extend(result?);
        }
        Ok(out)
    }
}

/// Deliveries per message of a streamed replay call: small messages, so none holds a
/// connection or a decoder for long.
pub const REPLAY_PART: usize = 25;

/// A call as an `EvaluateStream`: its terms alone (its deliveries not cloned), then its
/// deliveries in parts.
fn in_parts(req: &EvaluateRequest) -> Vec<EvaluateRequest> {
    let EvaluateRequest {
        context,
        configurations,
        deliveries,
        budget_ms,
        work_class,
        tenant,
        max_child_faults,
    } = req;
    let terms = EvaluateRequest {
        context: context.clone(),
        configurations: configurations.clone(),
        deliveries: Vec::new(),
        budget_ms: *budget_ms,
        work_class: *work_class,
        tenant: tenant.clone(),
        max_child_faults: *max_child_faults,
    };
    std::iter::once(terms)
        .chain(deliveries.chunks(REPLAY_PART).map(|part| EvaluateRequest {
            deliveries: part.to_vec(),
            ..EvaluateRequest::default()
        }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_replay_call_sends_its_terms_first_and_then_its_deliveries_in_parts() {
        let req = EvaluateRequest {
            context: Some(RoutingContext::default()),
            configurations: vec![Configuration::text("{}")],
            deliveries: (0..60)
                .map(|i| StoredDelivery {
                    event_id: format!("ev-{i}"),
                    ..StoredDelivery::default()
                })
                .collect(),
            budget_ms: 50,
            work_class: WorkClass::Replay as i32,
            tenant: "human:a".into(),
            max_child_faults: 3,
        };
        let parts = in_parts(&req);
        assert_eq!(parts.len(), 1 + 3);
        assert_eq!(
            parts[0],
            EvaluateRequest {
                deliveries: Vec::new(),
                ..req.clone()
            }
        );
        let sizes: Vec<usize> = parts[1..].iter().map(|p| p.deliveries.len()).collect();
        assert_eq!(sizes, [25, 25, 10]);
        let again: Vec<StoredDelivery> = parts[1..]
            .iter()
            .flat_map(|p| p.deliveries.clone())
            .collect();
        assert_eq!(again, req.deliveries);
        assert!(
            parts[1..].iter().all(|p| EvaluateRequest {
                deliveries: Vec::new(),
                ..p.clone()
            } == EvaluateRequest::default()),
            "later parts carry deliveries only"
        );
    }

    #[test]
    fn what_a_caller_sees_names_no_router() {
        let e = RoutingError::Unavailable("10.0.0.7:7701: connection refused".into());
        assert_eq!(e.to_string(), "no router answered");
        assert!(e.log_text().contains("10.0.0.7:7701"), "the log keeps it");
        let e = RoutingError::Refused("10.0.0.7:7701: decode error".into());
        assert!(!e.to_string().contains("10.0.0.7"));
    }

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
