//! `switchboard control`: ingest (HTTP) and the control gRPC API over one store, routing
//! through the routers it is given. `switchboard up` builds the same thing from the same parts.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use switchboard_control::console::{AuthProxy, ConsoleSettings};
use switchboard_control::ingest::{BodyPace, HttpLimits, RetryOptions};
use switchboard_control::pack_sources::FetchOptions;
use switchboard_control::retention::RetentionOptions;
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::rule_packs::load_catalog;
use switchboard_control::server::{BoundControl, ServeOptions};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{GroupCommitBounds, Retention};
use switchboard_control::{SealingKey, Store, StoreOptions};

use super::shutdown_signal;

#[derive(Args, Debug, Clone)]
pub struct ControlArgs {
    /// The store: `sqlite://<path>?mode=rwc` (one machine) or `postgres://…` (replicas).
    #[arg(long, env = "SWITCHBOARD_DATABASE_URL")]
    pub database_url: String,
    /// The routers: `host:port,host:port` or `dns:///<name>:<port>` (re-resolved).
    #[arg(long, env = "SWITCHBOARD_ROUTERS", default_value = "127.0.0.1:7701")]
    pub routers: String,
    #[command(flatten)]
    pub listen: ListenArgs,
    #[command(flatten)]
    pub tuning: ControlTuning,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
}

/// Where control listens.
#[derive(Args, Debug, Clone)]
pub struct ListenArgs {
    /// Address for ingest, `POST /hooks/<id>` (port 0 picks a free port; it is printed).
    #[arg(
        long,
        env = "SWITCHBOARD_HTTP_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub http_listen: SocketAddr,
    /// Address for the control gRPC API (port 0 picks a free port; it is printed).
    #[arg(
        long,
        env = "SWITCHBOARD_GRPC_LISTEN",
        default_value = "127.0.0.1:7700"
    )]
    pub grpc_listen: SocketAddr,
}

/// The key webhook signing secrets are sealed with at rest (`store/src/sealing.rs`).
#[derive(Args, Debug, Clone, Default)]
pub struct SecretKeyArgs {
    /// The sealing key itself, 64 hex digits; prefer the environment variable or a file, so
    /// it never shows in a process listing.
    #[arg(long, env = "SWITCHBOARD_SECRET_KEY", hide_env_values = true)]
    pub secret_key: Option<String>,
    /// A file holding the sealing key (64 hex digits), readable by control only.
    #[arg(long, env = "SWITCHBOARD_SECRET_KEY_FILE")]
    pub secret_key_file: Option<std::path::PathBuf>,
}

impl SecretKeyArgs {
    /// The key given, or (for `switchboard up`) the one in `default_file`, made there (mode
    /// 0600) on the first start. With neither, a clear start-up error.
    pub fn key(&self, default_file: Option<&std::path::Path>) -> anyhow::Result<SealingKey> {
        let key = match (&self.secret_key, &self.secret_key_file, default_file) {
            (Some(hex), _, _) => SealingKey::from_hex(hex),
            (None, Some(file), _) => SealingKey::load(file),
            (None, None, Some(file)) => SealingKey::load_or_create(file),
            (None, None, None) => {
                anyhow::bail!(
                    "no secret key: webhook secrets are sealed at rest; set SWITCHBOARD_SECRET_KEY \
                     (64 hex digits) or --secret-key-file (`switchboard admin secret-key generate <file>` makes one)"
                )
            }
        };
        key.map_err(|e| anyhow::anyhow!("the secret key: {}", e.log_text()))
    }
}

/// What an operator may tune about control.
#[derive(Args, Debug, Clone)]
pub struct ControlTuning {
    #[command(flatten)]
    pub secret_key: SecretKeyArgs,
    /// Signed deliveries each webhook may have routed per minute; more are stored and
    /// deferred (routed later, in order) up to `--ingest-backlog-per-webhook`.
    #[arg(
        long,
        env = "SWITCHBOARD_INGEST_PER_WEBHOOK_PER_MINUTE",
        default_value_t = 600
    )]
    pub ingest_per_minute: u32,
    /// Unverified deliveries each webhook may send per minute (a budget of their own); more
    /// answer 429.
    #[arg(
        long,
        env = "SWITCHBOARD_INGEST_UNVERIFIED_PER_WEBHOOK_PER_MINUTE",
        default_value_t = 60
    )]
    pub ingest_unverified_per_minute: u32,
    /// Deferred and unrouted events a webhook may have waiting before a signed delivery over
    /// its rate answers 429.
    #[arg(
        long,
        env = "SWITCHBOARD_INGEST_BACKLOG_PER_WEBHOOK",
        default_value_t = 10_000
    )]
    pub ingest_backlog_per_webhook: u32,
    /// A delivery is answered within this many milliseconds of its body being read: routed,
    /// or `pending` (stored, routed in the background).
    #[arg(long, env = "SWITCHBOARD_INGEST_DEADLINE_MS", default_value_t = 2_000)]
    pub ingest_deadline_ms: u64,
    /// How long a delivery waits for its router decision before it is stored without one
    /// (at most a quarter of the ingest deadline). Decided in time, a delivery is stored with
    /// its decision and todo in one write; `0` stores every delivery before routing it (two
    /// writes each, and nothing received lives only in memory while a router decides).
    #[arg(
        long,
        env = "SWITCHBOARD_INGEST_DECIDE_BEFORE_STORE_MS",
        default_value_t = 250,
        value_parser = clap::value_parser!(u64).range(0..=10_000),
    )]
    pub ingest_decide_before_store_ms: u64,
    /// The biggest delivery body taken, in MiB (GitHub sends up to 25 MB); bigger answers 413.
    #[arg(
        long,
        env = "SWITCHBOARD_MAX_BODY_MB",
        default_value_t = switchboard_model::body::DEFAULT_MAX_BODY_MB as u64,
        value_parser = clap::value_parser!(u64).range(1..=switchboard_model::body::MAX_BODY_MB_CEILING as u64),
    )]
    pub max_body_mb: u64,
    /// Stored events are kept this many days, then purged (never one not yet routed, nor one
    /// an open todo needs).
    #[arg(long, env = "SWITCHBOARD_RETENTION_DAYS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=36_500))]
    pub retention_days: u64,
    /// Past this many stored events, a webhook's oldest are purged (with the same exceptions).
    #[arg(long, env = "SWITCHBOARD_RETENTION_EVENTS_PER_WEBHOOK", default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_events_per_webhook: u64,
    /// How long a plan an agent confirmed on a `confirm_policy: person` webhook waits for a
    /// person, hours.
    #[arg(long, env = "SWITCHBOARD_APPROVAL_TTL_HOURS", default_value_t = 24,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub approval_ttl_hours: u64,
    /// Trials (a plan's candidate beside the live rules on live deliveries) that may run at
    /// once per webhook.
    #[arg(long, env = "SWITCHBOARD_MAX_TRIALS_PER_WEBHOOK", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=16))]
    pub max_trials_per_webhook: u32,
    /// How long a todo claim lasts, seconds, on a webhook that sets none of its own
    /// (`switchboard admin webhook claim-ttl`): past it the todo is back in its queue.
    #[arg(long, env = "SWITCHBOARD_CLAIM_TTL_SECS", default_value_t = 1_800,
          value_parser = clap::value_parser!(u64).range(1..=switchboard_control::store::MAX_CLAIM_TTL.as_secs()))]
    pub claim_ttl_secs: u64,
    /// Where people reach the console (`https://switchboard.example.com`), for the link a
    /// plan awaiting a person carries. Unset: the link is a path on this HTTP listener.
    #[arg(long, env = "SWITCHBOARD_CONSOLE_URL")]
    pub console_url: Option<String>,
    /// Console: the request header an auth proxy names the signed-in person in (e.g.
    /// `X-Forwarded-User`), believed only from --console-trusted-proxy addresses.
    #[arg(long, env = "SWITCHBOARD_CONSOLE_AUTH_PROXY_HEADER")]
    pub console_auth_proxy_header: Option<String>,
    /// Console: networks (CIDR) the auth proxy connects from; comma-separated.
    #[arg(long, env = "SWITCHBOARD_CONSOLE_TRUSTED_PROXY", value_delimiter = ',')]
    pub console_trusted_proxy: Vec<ipnet::IpNet>,
    /// Console: mark its cookies Secure (it is reached over TLS).
    #[arg(long, env = "SWITCHBOARD_CONSOLE_SECURE_COOKIES")]
    pub console_secure_cookies: bool,
    /// Time between retention passes, milliseconds.
    #[arg(
        long,
        env = "SWITCHBOARD_RETENTION_INTERVAL_MS",
        default_value_t = 60_000
    )]
    pub retention_interval_ms: u64,
    /// Open HTTP connections at most; one more is answered 503 at once.
    #[arg(
        long,
        env = "SWITCHBOARD_HTTP_MAX_CONNECTIONS",
        default_value_t = 1_024
    )]
    pub http_max_connections: usize,
    /// A request's headers must arrive within this many milliseconds.
    #[arg(
        long,
        env = "SWITCHBOARD_HTTP_HEADER_TIMEOUT_MS",
        default_value_t = 5_000
    )]
    pub http_header_timeout_ms: u64,
    /// A body must arrive within this many milliseconds, plus one second per
    /// `--http-body-min-bytes-per-sec` bytes; slower answers 408.
    #[arg(long, env = "SWITCHBOARD_HTTP_BODY_GRACE_MS", default_value_t = 5_000)]
    pub http_body_grace_ms: u64,
    /// The slowest body rate accepted past the grace, bytes per second.
    #[arg(
        long,
        env = "SWITCHBOARD_HTTP_BODY_MIN_BYTES_PER_SEC",
        default_value_t = 65_536
    )]
    pub http_body_min_bytes_per_sec: u64,
    /// Requests each endpoint may make per minute.
    #[arg(
        long,
        env = "SWITCHBOARD_REQUESTS_PER_ENDPOINT_PER_MINUTE",
        default_value_t = 600
    )]
    pub requests_per_endpoint_per_minute: u32,
    /// Per-envelope evaluation budget asked of routers, in milliseconds.
    #[arg(long, env = "SWITCHBOARD_EVALUATION_BUDGET_MS", default_value_t = 50)]
    pub evaluation_budget_ms: u64,
    /// Longest wait for one router call, in milliseconds.
    #[arg(long, env = "SWITCHBOARD_ROUTER_TIMEOUT_MS", default_value_t = 10_000)]
    pub router_timeout_ms: u64,
    /// The trusted-actors capability (SPEC-0026): `.actor`, quarantine, fail-closed faults.
    #[arg(
        long,
        env = "SWITCHBOARD_TRUSTED_ACTORS",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub trusted_actors: bool,
    /// Time between re-reading the router list (re-resolving a `dns:///` name), milliseconds.
    #[arg(long, env = "SWITCHBOARD_ROUTERS_REFRESH_MS", default_value_t = 5_000)]
    pub routers_refresh_ms: u64,
    /// Time between passes that route events stored while no router answered, milliseconds.
    #[arg(long, env = "SWITCHBOARD_UNROUTED_RETRY_MS", default_value_t = 5_000)]
    pub unrouted_retry_ms: u64,
    /// Time between reporting not-ready and closing the listeners at shutdown, milliseconds.
    #[arg(long, env = "SWITCHBOARD_READINESS_GRACE_MS", default_value_t = 0)]
    pub readiness_grace_ms: u64,
    /// A gRPC connection older than this many seconds is asked to reconnect (GOAWAY), so
    /// clients spread over replicas added since; calls in flight get as long again to finish.
    #[arg(long, env = "SWITCHBOARD_GRPC_MAX_CONNECTION_AGE_SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_max_connection_age_secs: u64,
    /// Database connections at most.
    #[arg(
        long,
        env = "SWITCHBOARD_DATABASE_MAX_CONNECTIONS",
        default_value_t = 8
    )]
    pub database_max_connections: u32,
    /// Ingest writes (events, decisions, rate-limit grants) one group commit may hold
    /// (docs/storage.md); 1 turns group commit off, each write committing on its own.
    #[arg(
        long,
        env = "SWITCHBOARD_GROUP_COMMIT_WRITES",
        default_value_t = 64,
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub group_commit_writes: u32,
    /// External rule packs, read once at start: `file://<dir>` and `https://<url>` sources,
    /// comma-separated (docs/rule-packs/authoring.md).
    #[arg(long, env = "SWITCHBOARD_RULE_PACK_SOURCES")]
    pub rule_pack_sources: Option<String>,
    /// Extra trusted roots (PEM) for `https://` rule-pack sources.
    #[arg(long, env = switchboard_control::pack_sources::CA_FILE_ENV)]
    pub rule_pack_ca_file: Option<std::path::PathBuf>,
}

impl ControlTuning {
    pub fn store_options(&self, key: SealingKey) -> StoreOptions {
        StoreOptions {
            sealing_key: Some(key),
            max_connections: self.database_max_connections.max(1),
            group_commit: GroupCommitBounds {
                max_writes: self.group_commit_writes as usize,
                ..GroupCommitBounds::default()
            },
            ..StoreOptions::default()
        }
    }

    pub fn serve_options(&self) -> ServeOptions {
        let interval = Duration::from_millis(self.unrouted_retry_ms.max(10));
        ServeOptions {
            http: HttpLimits {
                max_connections: self.http_max_connections.max(1),
                header_timeout: Duration::from_millis(self.http_header_timeout_ms.max(1)),
                body: BodyPace {
                    grace: Duration::from_millis(self.http_body_grace_ms),
                    min_bytes_per_sec: self.http_body_min_bytes_per_sec.max(1),
                },
                max_body_bytes: usize::try_from(self.max_body_mb)
                    .unwrap_or(usize::MAX)
                    .saturating_mul(1024 * 1024),
                ..HttpLimits::default()
            },
            readiness_grace: Duration::from_millis(self.readiness_grace_ms),
            grpc_max_connection_age: Duration::from_secs(self.grpc_max_connection_age_secs),
            grpc_max_connection_age_grace: Duration::from_secs(self.grpc_max_connection_age_secs),
            retry: Some(RetryOptions {
                interval,
                // Leave an event to the ingest call that stored it for a little while.
                min_age: interval.min(Duration::from_secs(10)),
                ..RetryOptions::default()
            }),
            retention: Some(RetentionOptions {
                interval: Duration::from_millis(self.retention_interval_ms.max(10)),
                ..RetentionOptions::default()
            }),
            console: self.console_settings(),
        }
    }

    /// How the console signs people in. A proxy header without trusted networks trusts no one.
    pub fn console_settings(&self) -> ConsoleSettings {
        ConsoleSettings {
            auth_proxy: self
                .console_auth_proxy_header
                .as_deref()
                .and_then(|h| axum::http::HeaderName::from_bytes(h.trim().as_bytes()).ok())
                .map(|header| AuthProxy {
                    header,
                    trusted: self.console_trusted_proxy.clone(),
                }),
            secure_cookies: self.console_secure_cookies,
            ..ConsoleSettings::default()
        }
    }

    /// The shared state of one control process.
    pub async fn state(&self, store: Store, routers: RouterSource) -> ControlState {
        let routers = Routers::new(
            routers,
            Duration::from_millis(self.router_timeout_ms.max(1)),
        )
        .await;
        routers.spawn_refresh(Duration::from_millis(self.routers_refresh_ms.max(100)));
        // External packs load once, now, and are checked through the routers.
        let fetch = FetchOptions::with_ca_file(self.rule_pack_ca_file.clone());
        let catalog = std::sync::Arc::new(
            load_catalog(self.rule_pack_sources.as_deref(), &fetch, &routers).await,
        );
        let trials = switchboard_control::trials::Trials::start(
            store.clone(),
            routers.clone(),
            switchboard_control::trials::TrialOptions {
                budget_ms: u32::try_from(self.evaluation_budget_ms.max(1)).unwrap_or(u32::MAX),
                max_per_webhook: self.max_trials_per_webhook,
                ..Default::default()
            },
        );
        ControlState {
            store,
            catalog,
            routers,
            trials,
            capabilities: Capabilities {
                trusted_actors: self.trusted_actors,
            },
            limits: Limits {
                evaluation_budget: Duration::from_millis(self.evaluation_budget_ms.max(1)),
                ingest_per_webhook_per_minute: self.ingest_per_minute.max(1),
                ingest_unverified_per_webhook_per_minute: self.ingest_unverified_per_minute.max(1),
                ingest_backlog_per_webhook: self.ingest_backlog_per_webhook,
                ingest_deadline: Duration::from_millis(self.ingest_deadline_ms.max(1)),
                ingest_decide_before_store: Duration::from_millis(
                    self.ingest_decide_before_store_ms,
                ),
                requests_per_endpoint_per_minute: self.requests_per_endpoint_per_minute.max(1),
                retention: Retention {
                    max_age: Duration::from_secs(self.retention_days.saturating_mul(24 * 3600)),
                    max_events_per_webhook: self.retention_events_per_webhook,
                },
                approval_ttl: Duration::from_secs(self.approval_ttl_hours.saturating_mul(3600)),
                claim_ttl: Duration::from_secs(self.claim_ttl_secs),
                ..Limits::default()
            },
            console_base: self.console_url.clone(),
        }
    }
}

/// The control gRPC API's routes (health and reflection are added by the server).
pub fn grpc_routes(state: &ControlState) -> tonic::service::Routes {
    switchboard_control::api::routes(state.clone())
}

/// Binds control and prints the two lines tests and operators read the addresses from.
pub async fn bind_and_announce(
    state: ControlState,
    listen: &ListenArgs,
) -> anyhow::Result<BoundControl> {
    let bound = BoundControl::bind(state, listen.http_listen, listen.grpc_listen)
        .await
        .context("binding the control listeners")?;
    println!("ingest listening on http://{}", bound.http_addr);
    println!("control grpc listening on {}", bound.grpc_addr);
    Ok(bound)
}

pub async fn run(args: ControlArgs) -> anyhow::Result<()> {
    let source =
        RouterSource::parse(&args.routers).map_err(|e| anyhow::anyhow!("--routers: {e}"))?;
    let key = args.tuning.secret_key.key(None)?;
    let store = Store::connect_with(&args.database_url, args.tuning.store_options(key))
        .await
        .map_err(|e| anyhow::anyhow!("opening the store: {}", e.log_text()))?;
    let state = args.tuning.state(store.clone(), source).await;
    let routes = grpc_routes(&state);
    switchboard_telemetry::scrape::on_scrape(switchboard_control::backlog::sampler(store.clone()));
    args.metrics.start().await?;
    let stop = shutdown_signal();
    let bound = bind_and_announce(state, &args.listen).await?;
    tracing::info!(http = %bound.http_addr, grpc = %bound.grpc_addr, "control serving");
    let result = bound.serve(routes, args.tuning.serve_options(), stop).await;
    store.close().await;
    result.map_err(Into::into)
}
