//! `switchboard up`: every role in one process tree for one machine. A router (its sandbox
//! children are child processes of this binary, as always), control on a SQLite file in the
//! data directory, and a dev human, webhook and endpoint, printed. Control reaches the router
//! over gRPC exactly as it reaches remote routers; if either role stops, the process stops.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use switchboard_control::routing::RouterSource;
use switchboard_control::store::{
    Actor, NewEndpoint, NewWebhook, SourceType, VendedEndpoint, Webhook,
};
use switchboard_control::{Error, OwnerScope, Store};
use switchboard_router::server::BoundRouter;
use tokio::sync::watch;

use super::control::{ControlTuning, ListenArgs, bind_and_announce, grpc_routes};
use super::router::SandboxArgs;
use crate::cli::shutdown_signal;

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
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    #[command(flatten)]
    pub tuning: ControlTuning,
}

/// The dev setup, found or created.
struct Dev {
    webhook: Webhook,
    endpoint: VendedEndpoint,
}

fn internal(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{}", e.log_text())
}

/// Creates the dev human and webhook unless they exist, and vends a new endpoint: a
/// credential is shown once, so every start gets a fresh one.
async fn bootstrap(store: &Store) -> anyhow::Result<Dev> {
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
                configuration: None,
                actor: Actor::operator(),
            })
            .await
            .map_err(internal)
            .context("creating the dev webhook")?,
    };
    let endpoint = store
        .vend_endpoint(NewEndpoint {
            name: "dev (switchboard up)".into(),
            human_login: DEV_LOGIN.into(),
            owner_scope: scope,
            verbs: switchboard_control::verbs::FAMILIES
                .iter()
                .map(|f| f.name.to_string())
                .collect(),
        })
        .await
        .map_err(internal)
        .context("vending the dev endpoint")?;
    Ok(Dev { webhook, endpoint })
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

pub async fn run(args: UpArgs) -> anyhow::Result<()> {
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

    let store = Store::connect_with(&database_url, args.tuning.store_options())
        .await
        .map_err(internal)
        .context("opening the store")?;
    let dev = bootstrap(&store).await?;
    let state = args
        .tuning
        .state(
            store.clone(),
            RouterSource::Static(vec![router_addr.to_string()]),
        )
        .await;
    let routes = grpc_routes(&state);
    let control = bind_and_announce(state, &args.listen).await?;

    let endpoint = &dev.endpoint.endpoint;
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
    println!("mcp: not built yet");
    println!("switchboard up: ready (Ctrl-C or SIGTERM stops it)");

    // Control stops first (readiness, then drain), the router after it: deliveries in flight
    // still get their decisions.
    let (stop_control, control_rx) = watch::channel(false);
    let (stop_router, router_rx) = watch::channel(false);
    let mut control_task =
        tokio::spawn(control.serve(routes, args.tuning.serve_options(), stopped(control_rx)));
    let mut router_task = tokio::spawn(router.serve(stopped(router_rx)));

    let mut early = None;
    tokio::select! {
        _ = shutdown_signal() => tracing::info!("stopping"),
        r = &mut control_task => early = Some(("control", r.map(|r| r.map_err(anyhow::Error::from)))),
        r = &mut router_task => early = Some(("router", r)),
    }
    let _ = stop_control.send(true);
    let control_result = match &early {
        Some(("control", _)) => Ok(()),
        _ => control_task
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r.map_err(anyhow::Error::from)),
    };
    let _ = stop_router.send(true);
    let router_result = match &early {
        Some(("router", _)) => Ok(()),
        _ => router_task
            .await
            .map_err(anyhow::Error::from)
            .and_then(|r| r),
    };
    store.close().await;
    if let Some((role, result)) = early {
        let why = match result {
            Ok(Ok(())) => "it stopped".to_string(),
            Ok(Err(e)) => format!("{e:#}"),
            Err(e) => format!("{e}"),
        };
        anyhow::bail!("the {role} role stopped on its own ({why}); everything stopped");
    }
    control_result.context("control")?;
    router_result.context("router")?;
    Ok(())
}
