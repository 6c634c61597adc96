//! `switchboard up`: every role in one process tree for one machine. A router (its sandbox
//! children are child processes of this binary, as always), control on a SQLite file in the
//! data directory, the MCP gateway, and a dev human, webhook and endpoint, printed. The roles
//! talk gRPC to each other exactly as they do across machines; if any role stops, the process
//! stops.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use switchboard_control::routing::RouterSource;
use switchboard_control::store::{
    Actor, MintedOperatorCredential, NewEndpoint, NewWebhook, SourceType, VendedEndpoint, Webhook,
    within_allowance,
};
use switchboard_control::{Error, OwnerScope, Store};
use switchboard_mcp_gateway::{BoundGateway, GatewayConfig};
use switchboard_router::server::BoundRouter;
use tokio::sync::watch;

use super::control::{ControlTuning, ListenArgs, bind_and_announce, grpc_routes};
use super::router::SandboxArgs;
use super::shutdown_signal;

/// The dev human `up` creates and acts for.
pub const DEV_LOGIN: &str = "dev";
/// The dev webhook's queues; the first is its default queue.
pub const DEV_GRANT: [&str; 3] = ["forge", "review", "triage"];

#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Where the SQLite file lives; created when missing, reused on the next start.
    #[arg(long, env = "SWITCHBOARD_DATA_DIR", default_value = ".switchboard")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    pub listen: ListenArgs,
    /// Address for the MCP gateway, `/mcp` (port 0 picks a free port; it is printed).
    #[arg(long, env = "SWITCHBOARD_MCP_LISTEN", default_value = "127.0.0.1:8090")]
    pub mcp_listen: SocketAddr,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub tuning: ControlTuning,
    #[command(flatten)]
    pub metrics: super::MetricsArgs,
}

/// The dev setup, found or created.
struct Dev {
    webhook: Webhook,
    endpoint: VendedEndpoint,
    operator: MintedOperatorCredential,
}

fn internal(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{}", e.log_text())
}

/// Creates the dev human and webhook unless they exist, allows the dev scope to grant the dev
/// webhook's queues (so the dev endpoint can create webhooks granting them), and vends a new
/// endpoint: a credential is shown once, so every start gets a fresh one.
async fn bootstrap(store: &Store) -> anyhow::Result<Dev> {
    // Setup's writes are a bootstrap's acts: the change log (and the audit) record them.
    let store = &store.by_bootstrap();
    match store.create_human(DEV_LOGIN, Some("Developer")).await {
        Ok(_) | Err(Error::Conflict { .. }) => {}
        Err(e) => return Err(internal(e)).context("creating the dev human"),
    }
    let scope = OwnerScope::human(DEV_LOGIN);
    let existing = store
        .list_webhooks(&scope)
        .await
        .map_err(internal)?
        .into_iter()
        .find(|w| w.source_type == SourceType::Github);
    let webhook = match existing {
        Some(w) => w,
        None => store
            .create_webhook(NewWebhook {
                owner_scope: scope.clone(),
                source_type: SourceType::Github,
                secret: None,
                grant: DEV_GRANT.iter().map(|q| q.to_string()).collect(),
                reject_unverified: false,
                name: switchboard_model::WebhookName::parse("dev (GitHub)")
                    .ok()
                    .flatten(),
                configuration: None,
                actor: Actor::operator(),
            })
            .await
            .map_err(internal)
            .context("creating the dev webhook")?,
    };
    allow_dev_grant(store, &scope, &webhook.grant).await?;
    let endpoint = store
        .vend_endpoint(NewEndpoint {
            name: "dev (switchboard up)".into(),
            human_login: DEV_LOGIN.into(),
            owner_scope: scope,
            verbs: switchboard_control::verbs::FAMILIES
                .iter()
                .map(|f| f.name().to_string())
                .collect(),
        })
        .await
        .map_err(internal)
        .context("vending the dev endpoint")?;
    // An operator credential too, so `switchboard admin --control` works against this instance.
    let operator = store
        .create_operator_credential("dev (switchboard up)", None)
        .await
        .map_err(internal)
        .context("minting the dev operator credential")?;
    Ok(Dev {
        webhook,
        endpoint,
        operator,
    })
}

/// Widens the dev scope's grant allowance to hold `grant`, keeping what an operator allowed
/// besides (never narrowing it on a restart).
async fn allow_dev_grant(
    store: &Store,
    scope: &OwnerScope,
    grant: &[String],
) -> anyhow::Result<()> {
    let mut allowed = store
        .grant_allowance(scope)
        .await
        .map_err(internal)?
        .map(|a| a.queues)
        .unwrap_or_default();
    if let Err(outside) = within_allowance(grant, &allowed) {
        allowed.extend(outside);
        store
            .set_grant_allowance(scope, &allowed)
            .await
            .map_err(internal)
            .context("allowing the dev scope its webhook's queues")?;
    }
    Ok(())
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
    // Before anything is printed: a signal right after the lines must stop us gracefully.
    let stop = shutdown_signal();
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let data_dir = std::fs::canonicalize(&args.data_dir)
        .with_context(|| format!("reading {}", args.data_dir.display()))?;
    let database = data_dir.join("switchboard.db");
    let database_url = format!("sqlite://{}?mode=rwc", database.display());

    let router = BoundRouter::bind(
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        args.sandbox.sandbox_config()?,
    )
    .await
    .context("starting the router")?;
    let router_addr = router.local_addr;
    println!("router listening on {router_addr}");
    switchboard_telemetry::scrape::on_scrape(switchboard_router::metrics::sampler(
        &router.pool(),
        router_addr.to_string(),
    ));
    // Served before control's state is built: external rule packs are checked through it.
    let (router_stop, rx) = watch::channel(false);
    let router_task = tokio::spawn(router.serve(stopped(rx)));

    // The sealing key lives beside the database, mode 0600, made on the first start.
    let key = args
        .tuning
        .secret_key
        .key(Some(&data_dir.join("secret.key")))?;
    let store = Store::connect_with(&database_url, args.tuning.store_options(key))
        .await
        .map_err(internal)
        .context("opening the store")?;
    let dev = bootstrap(&store).await?;
    switchboard_telemetry::scrape::on_scrape(switchboard_control::backlog::sampler(store.clone()));
    let state = args
        .tuning
        .state(
            store.clone(),
            RouterSource::Static(vec![router_addr.to_string()]),
        )
        .await;
    let mut control = bind_and_announce(state, &args.listen).await?;
    // The links pending plans carry point at the listener just bound.
    control.console_base_or(format!("http://{}", control.http_addr));
    let routes = grpc_routes(control.state());

    let gateway = BoundGateway::bind(GatewayConfig::new(
        args.mcp_listen,
        control.grpc_addr.to_string(),
    ))
    .await
    .map_err(|e| anyhow::anyhow!("starting the MCP gateway: {e}"))?;

    let endpoint = &dev.endpoint.endpoint;
    println!("mcp gateway listening on {}", gateway.local_addr);
    // What `switchboard admin` and the CLI for people take as --control (SWITCHBOARD_CONTROL).
    println!("control grpc listening on {}", control.grpc_addr);
    println!("database: {database_url}");
    println!(
        "webhook: {} (source {}, grant {})",
        dev.webhook.id,
        dev.webhook.source_type,
        dev.webhook.grant.join(", ")
    );
    println!(
        "ingest url: http://{}/hooks/{}",
        control.http_addr, dev.webhook.id
    );
    println!("webhook secret: {}", dev.webhook.secret);
    println!(
        "endpoint: {} (human {}, scope {}, every verb)",
        endpoint.id, endpoint.human_login, endpoint.owner_scope
    );
    println!("bearer token: {}", dev.endpoint.credential);
    println!("operator token: {}", dev.operator.token);
    println!("mcp url: {}", gateway.url());
    let console_base = format!("http://{}", control.http_addr);
    println!("console url: {console_base}/console");
    // One machine: /metrics is always on, on loopback (a free port unless given).
    let mut metrics = args.metrics.clone();
    metrics
        .metrics_listen
        .get_or_insert(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
    metrics.start().await?;
    let ttl = switchboard_control::console::SIGN_IN_LINK_TTL;
    let link = store
        .create_sign_in_link(
            DEV_LOGIN,
            i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        )
        .await
        .map_err(internal)
        .context("issuing the dev human's sign-in link")?;
    println!(
        "console sign-in ({DEV_LOGIN}, once, {} minutes): {}",
        ttl.as_secs() / 60,
        switchboard_control::console::sign_in_url(Some(&console_base), &link)
    );
    // The change log's head (issue 47): what an operator publishes or pins, so a later
    // `switchboard admin changes verify` can show nothing before it was rewritten.
    match store.change_log_head().await.map_err(internal)? {
        Some(head) => println!("change log head: {} {}", head.seq, head.hash),
        None => println!("change log head: empty"),
    }
    println!("switchboard up: ready (Ctrl-C or SIGTERM stops it)");

    // Roles in the order they stop: the gateway (the agents' door) first, then control
    // (readiness, then drain), then the router, so work in flight still gets its decisions.
    let mut roles: Vec<Role> = Vec::new();
    let (tx, rx) = watch::channel(false);
    roles.push(Role {
        name: "mcp gateway",
        stop: tx,
        task: tokio::spawn(async move {
            gateway
                .serve(stopped(rx))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))
        }),
    });
    let (tx, rx) = watch::channel(false);
    let options = args.tuning.serve_options();
    roles.push(Role {
        name: "control",
        stop: tx,
        task: tokio::spawn(async move {
            control
                .serve(routes, options, stopped(rx))
                .await
                .map_err(anyhow::Error::from)
        }),
    });
    roles.push(Role {
        name: "router",
        stop: router_stop,
        task: router_task,
    });

    let names: Vec<&'static str> = roles.iter().map(|r| r.name).collect();
    let early = tokio::select! {
        _ = stop => {
            tracing::info!("stopping");
            None
        }
        (result, index, _) = futures::future::select_all(roles.iter_mut().map(|r| &mut r.task)) => {
            Some((index, result))
        }
    };
    let mut failures = Vec::new();
    for (i, role) in roles.into_iter().enumerate() {
        let _ = role.stop.send(true);
        let result = match &early {
            Some((index, _)) if *index == i => continue,
            _ => role.task.await,
        };
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("{}: {e:#}", role.name)),
            Err(e) => failures.push(format!("{}: {e}", role.name)),
        }
    }
    store.close().await;
    if let Some((index, result)) = early {
        let name = names.get(index).copied().unwrap_or("a role");
        let why = match result {
            Ok(Ok(())) => "it stopped".to_string(),
            Ok(Err(e)) => format!("{e:#}"),
            Err(e) => e.to_string(),
        };
        anyhow::bail!("the {name} stopped on its own ({why}); everything stopped");
    }
    if !failures.is_empty() {
        anyhow::bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// One role of the process: how to stop it and its task.
struct Role {
    name: &'static str,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}
