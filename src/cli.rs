//! Command-line roles. Each role's flags live beside it in `roles/`; every flag can also come
//! from a `SWITCHBOARD_*` environment variable or a config file (`config.rs`): flags win over
//! the environment, which wins over the file, which wins over the defaults.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::{client, config, roles};

#[derive(Parser, Debug)]
#[command(
    name = "switchboard",
    version,
    about = "A webhook router: ordered jq rules route every delivery to a queue, a drop or a quarantine"
)]
struct Cli {
    #[command(subcommand)]
    role: Role,
    /// A TOML config file: one table per role (`[control]`, `[router]`, …) keyed by flag
    /// names with `_` for `-`. Below the `SWITCHBOARD_*` environment and flags.
    #[arg(long, global = true, env = config::CONFIG_ENV, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print the role's effective configuration (secrets redacted, each value's source) and
    /// exit without starting anything.
    #[arg(long, global = true)]
    print_config: bool,
}

#[derive(Subcommand, Debug)]
enum Role {
    /// Run every role in one process for one machine: a router, control on a SQLite file in
    /// the data directory, and a dev human, webhook and endpoint, printed.
    Up(roles::up::UpArgs),
    /// Run control: ingest (HTTP) and the control gRPC API, over SQLite or PostgreSQL.
    Control(roles::control::ControlArgs),
    /// Run a router: validates and evaluates configurations in sandbox children (gRPC).
    Router(roles::router::RouterArgs),
    /// Run the MCP gateway: every allowed verb as an MCP tool at /mcp, calling control.
    Gateway(roles::gateway::GatewayArgs),
    /// Operator commands on the store: humans, teams, webhooks and their grants, endpoints.
    Admin(roles::admin::AdminArgs),
    /// Rule packs: the catalog and what a webhook has installed, plans to install or remove
    /// one (rendered lost work first) and their confirm; and the authors' `packs test <dir>`.
    /// Calls control with the endpoint credential in SWITCHBOARD_TOKEN (not `test`).
    #[command(after_help = client::EXIT_CODES_HELP)]
    Packs(client::packs::PacksArgs),
    /// Your scope's webhooks: list, show. Calls control's gRPC API with the endpoint
    /// credential in SWITCHBOARD_TOKEN.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Webhooks(client::webhooks::WebhooksArgs),
    /// A webhook's stored deliveries and their decisions: list, show.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Events(client::events::EventsArgs),
    /// A webhook's rules: list, test a candidate over stored deliveries (nothing saved),
    /// history.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Rules(client::rules::RulesArgs),
    /// The work queue: list, claim, release, complete.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Todos(client::todos::TodosArgs),
    /// Trials: a plan's candidate beside the live rules on live deliveries, routing nothing:
    /// start, show, list, stop, promote.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Trials(client::trials::TrialsArgs),
    /// A confirmed change's guard: the replaced rules in its shadow on live deliveries,
    /// forecast beside observed, any breach, the revert and the recovery (get_rule_guard).
    #[command(after_help = client::EXIT_CODES_HELP)]
    Guard(client::guards::GuardsArgs),
    /// The change log of your scope's webhooks: every change to what they route, who
    /// proposed it and who approved it (list_webhook_changes): list, export (JSON Lines),
    /// verify an export.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Changes(client::changes::ChangesArgs),
    /// Why a stored delivery was routed where it went: the rule that decided under the
    /// configuration version recorded with it, each earlier rule's outcome, and what the
    /// current configuration decides. Calls control's gRPC API with the endpoint credential in
    /// SWITCHBOARD_TOKEN.
    #[command(after_help = client::EXIT_CODES_HELP)]
    Explain(client::explain::ExplainArgs),
}

impl Role {
    /// The service name traces and metrics carry.
    fn service_name(&self) -> &'static str {
        match self {
            Role::Up(_) => "switchboard",
            Role::Control(_) => "switchboard-control",
            Role::Router(_) => "switchboard-router",
            Role::Gateway(_) => "switchboard-gateway",
            Role::Admin(_) => "switchboard-admin",
            Role::Packs(_) => "switchboard-packs",
            Role::Webhooks(_)
            | Role::Events(_)
            | Role::Rules(_)
            | Role::Todos(_)
            | Role::Trials(_)
            | Role::Guard(_)
            | Role::Changes(_)
            | Role::Explain(_) => "switchboard-client",
        }
    }
}

pub fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let command = Cli::command();
    let layer = match config::apply_file(&command, &argv) {
        Ok(layer) => layer,
        Err(e) => {
            eprintln!("switchboard: {e:#}");
            return ExitCode::from(2);
        }
    };
    // A fresh command: clap reads each flag's variable when the command is built, and the
    // file has just set some.
    let command = Cli::command();
    let matches = command.clone().get_matches_from(&argv);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if cli.print_config {
        print!("{}", config::print_config(&command, &matches, &layer));
        return ExitCode::SUCCESS;
    }
    let telemetry = switchboard_telemetry::init(cli.role.service_name(), "SWITCHBOARD_LOG");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("switchboard: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A people's command ends the process with its own exit code.
    macro_rules! people {
        ($name:expr, $run:expr) => {{
            let outcome = runtime.block_on($run);
            drop(runtime);
            telemetry.shutdown();
            return client::finish($name, outcome);
        }};
    }
    let result = match cli.role {
        // The CLI for people: exit codes of their own (docs/cli.md).
        Role::Webhooks(args) => people!("switchboard webhooks", client::webhooks::run(args)),
        Role::Events(args) => people!("switchboard events", client::events::run(args)),
        Role::Rules(args) => people!("switchboard rules", client::rules::run(args)),
        Role::Todos(args) => people!("switchboard todos", client::todos::run(args)),
        Role::Trials(args) => people!("switchboard trials", client::trials::run(args)),
        Role::Guard(args) => people!("switchboard guard", client::guards::run(args)),
        Role::Changes(args) => people!("switchboard changes", client::changes::run(args)),
        Role::Explain(args) => people!("switchboard explain", client::explain::run(args)),
        Role::Packs(client::packs::PacksArgs {
            command: client::packs::PacksCommand::Test { dir },
            ..
        }) => runtime.block_on(roles::packs::test(dir)),
        Role::Packs(args) => people!(
            "switchboard packs",
            client::packs::run(args.command, args.common)
        ),
        Role::Up(args) => runtime.block_on(roles::up::run(args)),
        Role::Control(args) => runtime.block_on(roles::control::run(args)),
        Role::Router(args) => runtime.block_on(roles::router::run(args)),
        Role::Gateway(args) => runtime.block_on(roles::gateway::run(args)),
        Role::Admin(args) => runtime.block_on(roles::admin::run(args)),
    };
    // The runtime first (its tasks end), then the last spans and metrics go out.
    drop(runtime);
    telemetry.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchboard: {e:#}");
            // A call control refused exits by its reason, as the people's CLI does; so does
            // a failure that names its exit code (a usage error, a log that does not verify).
            if let Some(refused) = e.downcast_ref::<switchboard_control_client::CallError>() {
                ExitCode::from(client::exit_for(&refused.code))
            } else if let Some(failure) = e.downcast_ref::<client::Failure>() {
                ExitCode::from(failure.exit)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
