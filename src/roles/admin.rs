//! `switchboard admin`: the operator's CLI, a client of control's `Operators` gRPC API
//! (`--control`, the operator credential from `SWITCHBOARD_OPERATOR_TOKEN`). Humans, teams and
//! roles, webhooks and their grants, the queues each scope's agents may grant, endpoints vended
//! and revoked, operator credentials and the audit. Secrets are printed once, when they are
//! made, and never again.
//!
//! Two commands open the database instead: `operator bootstrap` (the first operator
//! credential, before any exists to call the API with) and `secret-key generate|rotate`.

use std::io::{BufRead, Write};

use anyhow::Context;
use clap::{Args, Subcommand};
use switchboard_control::store::SourceType;
use switchboard_control::{Error, OwnerScope, Role, SealingKey, Store, verbs};
use switchboard_control_client::{CallError, walk};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::convert::time;

use crate::client::Output;
use switchboard_proto::control::v1::operators_client::OperatorsClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The operator credential comes from the environment only: a flag would put it in the
/// process list and shell history.
pub const OPERATOR_TOKEN_ENV: &str = "SWITCHBOARD_OPERATOR_TOKEN";

#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// Control's gRPC address (`host:port` or `http://host:port`); anywhere on the line.
    #[arg(
        long,
        global = true,
        env = "SWITCHBOARD_CONTROL",
        default_value = "127.0.0.1:7700"
    )]
    pub control: String,
    /// `table` (for people) or `json`: each answer as protobuf JSON, the object the API
    /// answered (`.proto` field names, every field present); a listing of several pages prints
    /// one object per page. Anywhere on the line.
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// The store, for the commands that must open it directly.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// The store: `sqlite://<path>?mode=rwc` or `postgres://…`.
    #[arg(long, env = "SWITCHBOARD_DATABASE_URL")]
    pub database_url: String,
    /// The key the store's webhook secrets are sealed with, as control has it.
    #[command(flatten)]
    pub secret_key: super::control::SecretKeyArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum AdminCommand {
    /// Humans: the people endpoints act for.
    #[command(subcommand)]
    Human(HumanCommand),
    /// Teams and their members' roles.
    #[command(subcommand)]
    Team(TeamCommand),
    /// Webhooks: create them and set the queues they may route to.
    #[command(subcommand)]
    Webhook(WebhookCommand),
    /// Owner scopes' grant allowances: the queues their agents may grant when they create
    /// webhooks over the API.
    #[command(subcommand)]
    Scope(ScopeCommand),
    /// Endpoints: credentials vended to agents.
    #[command(subcommand)]
    Endpoint(EndpointCommand),
    /// Operator credentials (`sbo_…`) and the audit of what operators changed.
    #[command(subcommand)]
    Operator(OperatorCommand),
    /// The key webhook signing secrets are sealed with at rest.
    #[command(subcommand)]
    SecretKey(SecretKeyCommand),
    /// The change log: every change to routing, as a hash chain (issue 47).
    #[command(subcommand)]
    Changes(ChangesCommand),
}

#[derive(Subcommand, Debug, Clone)]
pub enum ChangesCommand {
    /// Lists entries, oldest first: seq, time, kind, actor, webhook and version.
    List {
        /// Entries after this seq.
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Only this owner scope's entries (`human:<login>`, `team:<name>`): its own and those
        /// naming one of its webhooks.
        #[arg(long)]
        scope: Option<String>,
        #[command(flatten)]
        filter: crate::client::changes::Filter,
    },
    /// Writes every entry as JSON Lines (`{"entry": …, "hash": …}`, oldest first) to `--out`
    /// or standard output: what an auditor verifies with `changes verify --file`.
    Export {
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
    /// Recomputes the chain: from the database (through control), or from an export
    /// (`--file`, no control needed). Prints the head, or the first entry that does not
    /// match and exits 1.
    Verify {
        #[arg(long)]
        file: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum OperatorCommand {
    /// Mints an operator credential directly in the store and prints it once: the first one,
    /// before any exists to call the API with (audited as a bootstrap).
    Bootstrap {
        #[command(flatten)]
        store: StoreArgs,
        /// A name to recognize it by.
        #[arg(long, default_value = "bootstrap")]
        name: String,
    },
    /// Mints another operator credential over the API; prints it once.
    Create { name: String },
    /// Lists operator credentials (never the credentials themselves).
    List,
    /// Revokes an operator credential: it stops working at once.
    Revoke { id: String },
    /// The audit of operators' changes, newest first.
    Audit {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Where to go on: the `next cursor` the previous page printed.
        #[arg(long, default_value = "")]
        cursor: String,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum SecretKeyCommand {
    /// Writes a fresh key to a new file (mode 0600); prints only its id.
    Generate { file: std::path::PathBuf },
    /// Seals every webhook secret again with the key in `--new-key-file`, in one
    /// transaction; then restart control with that key. The current key opens them first.
    /// Opens the store directly: key material never crosses the API.
    Rotate {
        #[arg(long)]
        new_key_file: std::path::PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum HumanCommand {
    /// Creates a human, admin of its own scope `human:<login>`.
    Create {
        login: String,
        #[arg(long)]
        display_name: Option<String>,
    },
    /// Lists every human (every page).
    List,
    /// Offboards a human: deletes their endpoints (their credentials stop at once), ends their
    /// console sessions, removes their memberships; refused while `human:<login>` owns
    /// webhooks. Asks first unless `--yes`.
    Delete {
        login: String,
        #[arg(long)]
        yes: bool,
    },
    /// Prints a one-time link that signs the human in to the console (15 minutes, single use).
    SignInLink {
        login: String,
        /// Where people reach control's HTTP listener, e.g. `https://switchboard.example.com`
        /// (default: SWITCHBOARD_CONSOLE_URL, else a path to append to it).
        #[arg(long, env = "SWITCHBOARD_CONSOLE_URL")]
        console_url: Option<String>,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum TeamCommand {
    /// Creates a team, the scope `team:<slug>`.
    Create {
        slug: String,
        /// Display name (default: the slug).
        #[arg(long)]
        name: Option<String>,
    },
    /// Gives a human a role in a team, replacing any role it had there.
    AddMember {
        slug: String,
        login: String,
        /// viewer (reads), editor (also changes rules), admin (also webhooks and endpoints).
        #[arg(long)]
        role: Role,
    },
    /// Takes a human out of a team: their endpoints in its scope lose its verbs at once.
    RemoveMember { slug: String, login: String },
    /// Lists every team (every page).
    List,
    /// Deletes a team with its memberships and endpoints; refused while it owns webhooks.
    /// Asks first unless `--yes`.
    Delete {
        slug: String,
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand, Debug, Clone)]
pub enum WebhookCommand {
    /// Creates a webhook and prints its id, ingest path and signing secret (shown once).
    Create {
        /// Owner scope: `human:<login>` or `team:<slug>`.
        #[arg(long)]
        scope: OwnerScope,
        /// forgejo, gitea, github, cairn or generic.
        #[arg(long)]
        source: SourceType,
        /// Queues it may route to, comma-separated; the first is its default queue.
        #[arg(long, value_delimiter = ',', required = true)]
        grant: Vec<String>,
        /// The signing secret the forge already has (default: 256 fresh random bits).
        #[arg(long, env = "SWITCHBOARD_WEBHOOK_SECRET", hide_env_values = true)]
        secret: Option<String>,
        /// Reject unverified deliveries at the door (401, nothing stored).
        #[arg(long)]
        reject_unverified: bool,
        /// A name people know it by, shown beside its id (1–80 characters).
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Names a webhook (shown beside its id in the console, the CLI and MCP listings); an
    /// empty name clears it.
    Name { id: String, name: String },
    /// Sets the queues a webhook may route to (an operator's act; agents never can).
    Grant {
        id: String,
        #[arg(long, value_delimiter = ',', required = true)]
        grant: Vec<String>,
    },
    /// Deletes a webhook with its events, todos, plans and history (its change-log entries
    /// stay); asks first unless `--yes`.
    Delete {
        id: String,
        #[arg(long)]
        yes: bool,
    },
    /// Lists a scope's webhooks (no secrets).
    List {
        #[arg(long)]
        scope: OwnerScope,
    },
    /// Sets who may put a rule-pack plan live: `self` (the endpoint that planned confirms it)
    /// or `person` (an endpoint's confirm waits for a person's acceptance in the console).
    ConfirmPolicy {
        id: String,
        policy: switchboard_control::store::ConfirmPolicy,
    },
    /// Sets how long a claim on the webhook's todos lasts: seconds (1 to 30 days), or
    /// `default` for the instance's --claim-ttl-secs. Claims already made keep their expiry.
    ClaimTtl { id: String, ttl: ClaimTtl },
    /// Sets what a guard does on a breach when its plan does not say: `revert` (the replaced
    /// configuration is saved again and the lost work recovered), `alert`, or `default`
    /// (revert). Plans made from now on carry it; guards already running keep theirs.
    Guard {
        id: String,
        #[arg(value_parser = ["revert", "alert", "default"])]
        on_breach: String,
    },
    /// Sets how many distinct people must accept a plan on a `person` webhook (1 to 10 each):
    /// `--required` for any plan, and a count for each risk (a plan that loses work, removes
    /// a pack, changes the default action or widens what is quarantined); a risk not given
    /// needs `--required`. `--default` returns to the default: 1, and 2 for every risk. The
    /// human the proposing agent acts for never counts. Pending plans are counted under the
    /// new rule.
    Approvals {
        id: String,
        #[arg(long, conflicts_with_all = ["required", "lost_work", "removes_pack", "default_action", "widens_quarantine", "proposer_counts"])]
        default: bool,
        #[arg(long, default_value_t = 1)]
        required: u32,
        #[arg(long)]
        lost_work: Option<u32>,
        #[arg(long)]
        removes_pack: Option<u32>,
        #[arg(long)]
        default_action: Option<u32>,
        #[arg(long)]
        widens_quarantine: Option<u32>,
        /// Let the human the proposing agent acts for count (off by default).
        #[arg(long)]
        proposer_counts: bool,
    },
}

/// A webhook's claim lease as the operator names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimTtl {
    Default,
    Seconds(u64),
}

impl std::str::FromStr for ClaimTtl {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "default" {
            return Ok(ClaimTtl::Default);
        }
        let max = switchboard_control::store::MAX_CLAIM_TTL.as_secs();
        match s.parse::<u64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(ClaimTtl::Seconds(n)),
            _ => Err(format!(
                "{s:?} is no claim lease: seconds from 1 to {max}, or `default`"
            )),
        }
    }
}

#[derive(Subcommand, Debug, Clone)]
pub enum ScopeCommand {
    /// Sets the queues the scope's agents may grant in `create_webhook`, replacing any set
    /// before (an operator's act; agents never can). Existing webhooks keep their grants.
    Allow {
        /// Owner scope: `human:<login>` or `team:<slug>`.
        #[arg(long)]
        scope: OwnerScope,
        /// The allowed queues, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        queues: Vec<String>,
    },
    /// Shows the queues the scope's agents may grant.
    Show {
        #[arg(long)]
        scope: OwnerScope,
    },
    /// Removes the scope's allowance: its agents can create no webhook over the API.
    Clear {
        #[arg(long)]
        scope: OwnerScope,
    },
    /// Lists every scope's allowance.
    List,
}

#[derive(Subcommand, Debug, Clone)]
pub enum EndpointCommand {
    /// Vends an endpoint: shows the verbs it will get, asks, then prints the credential once.
    Vend {
        /// The human the endpoint acts for; it must hold a role in the scope.
        #[arg(long)]
        human: String,
        /// Owner scope: `human:<login>` or `team:<slug>`.
        #[arg(long)]
        scope: OwnerScope,
        /// Verb families (webhooks, webhook-rules, todos) or single verbs, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        verbs: Vec<String>,
        /// A name to recognize it by (default: `<human>-agent`).
        #[arg(long)]
        name: Option<String>,
        /// Vend without asking.
        #[arg(long)]
        yes: bool,
    },
    /// Revokes an endpoint: its credential stops working at once.
    Revoke { id: String },
    /// Lists endpoints (never their credentials).
    List {
        #[arg(long)]
        scope: Option<OwnerScope>,
    },
}

/// Store errors as an operator needs them: the full text, internal context included.
fn op(e: Error) -> anyhow::Error {
    anyhow::anyhow!("{}", e.log_text())
}

/// How this process prints: set once by [`run`] from `--output` (one command per process).
static OUTPUT: std::sync::OnceLock<Output> = std::sync::OnceLock::new();

fn json_output() -> bool {
    OUTPUT.get() == Some(&Output::Json)
}

/// A line for people: printed with `--output table` only (with `json` the answers are).
macro_rules! say {
    ($($arg:tt)*) => {
        if !json_output() {
            println!($($arg)*);
        }
    };
}

/// What a person must read whatever the output (a consent's terms): stdout for a table,
/// stderr beside JSON.
macro_rules! tell {
    ($($arg:tt)*) => {
        if json_output() {
            eprintln!($($arg)*);
        } else {
            println!($($arg)*);
        }
    };
}

/// An answer of control's: with `--output json` printed as the API's object, then returned
/// for the table lines.
fn answered<M: prost::Message + prost::Name>(response: tonic::Response<M>) -> anyhow::Result<M> {
    let message = response.into_inner();
    if json_output() {
        print_json(&message)?;
    }
    Ok(message)
}

/// Prints `message` as the API's object in protobuf JSON, one line.
fn print_json<M: prost::Message + prost::Name>(message: &M) -> anyhow::Result<()> {
    let value = switchboard_proto::message_json::message_json(message)
        .map_err(|e| anyhow::anyhow!("printing {} as JSON: {e}", M::full_name()))?;
    println!("{value}");
    Ok(())
}

/// The largest page a listing serves: `admin … list` walks pages of these.
const PAGE: u32 = 200;

/// Every item of one Operators listing: `$method` called page by page with `$request` (built
/// from `cursor`, with `limit: PAGE`), each page printed as [`answered`] prints it, `$items`
/// read from each (`switchboard_control_client::walk`).
macro_rules! every {
    ($client:expr, $method:ident, $items:ident, |$cursor:ident| $request:expr) => {
        walk(|$cursor| {
            // Built here, so the future owns what it sends; the client is a cheap handle.
            let (mut client, request) = ($client.clone(), $request);
            async move {
                let page = client
                    .$method(request)
                    .await
                    .map_err(api)
                    .and_then(answered)?;
                anyhow::Ok((page.$items, page.next_cursor))
            }
        })
        .await?
    };
}

/// Control's refusal (or its silence) as the typed error the people's CLI prints
/// (`reason: text`; a call control never answered says `control_unavailable`, not the
/// transport's words): its code sets the exit code, from the one reason table (`cli::run`).
fn api(status: tonic::Status) -> anyhow::Error {
    anyhow::Error::new(CallError::from_status(&status))
}

type Client = OperatorsClient<InterceptedService<Channel, Bearer>>;

/// Puts the operator credential on every call.
#[derive(Clone)]
struct Bearer(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

fn client(control: &str) -> anyhow::Result<Client> {
    let token = match std::env::var(OPERATOR_TOKEN_ENV) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        // A usage error, exit 2, as the people's CLI without its token.
        _ => {
            return Err(anyhow::Error::new(crate::client::Failure::usage(format!(
                "set {OPERATOR_TOKEN_ENV} to an operator credential (sbo_…); `switchboard admin operator bootstrap --database-url …` mints the first"
            ))));
        }
    };
    let header = format!("Bearer {token}")
        .parse()
        .map_err(|_| anyhow::anyhow!("{OPERATOR_TOKEN_ENV} is not a credential"))?;
    let channel = switchboard_control_client::channel(control)
        .with_context(|| format!("invalid control address {control:?}"))?;
    Ok(OperatorsClient::with_interceptor(channel, Bearer(header)))
}

pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let _ = OUTPUT.set(args.output);
    match args.command {
        AdminCommand::Changes(ChangesCommand::Verify { file: Some(file) }) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?;
            let entries = exported(&text)?;
            match switchboard_model::change_log::verify(&entries, None) {
                Ok(head) => {
                    let head = head.as_ref().map(|h| (h.seq, h.hash.as_str()));
                    if json_output() {
                        // The object `VerifyChangeLog` answers for the same log.
                        print_json(&pb::VerifyChangeLogResponse {
                            intact: true,
                            head_seq: head.map_or(0, |(seq, _)| seq),
                            head_hash: head.map(|(_, hash)| hash.to_string()).unwrap_or_default(),
                            ..Default::default()
                        })?;
                    }
                    print_head(head);
                    Ok(())
                }
                Err(broken) => Err(broken_log(broken)),
            }
        }
        AdminCommand::SecretKey(SecretKeyCommand::Generate { file }) => {
            let text = SealingKey::generate_hex().map_err(op)?;
            switchboard_control::sealing::write_private(&file, &format!("{text}\n")).map_err(op)?;
            let key = SealingKey::from_hex(&text).map_err(op)?;
            if json_output() {
                println!(
                    "{}",
                    serde_json::json!({"key_id": key.id(), "file": file.display().to_string()})
                );
            }
            say!(
                "secret key {} written to {} (mode 0600)",
                key.id(),
                file.display()
            );
            Ok(())
        }
        AdminCommand::SecretKey(SecretKeyCommand::Rotate {
            new_key_file,
            store,
        }) => {
            let store = open(&store).await?;
            let result = async {
                let new = SealingKey::load(&new_key_file).map_err(op)?;
                let n = store.reseal_secrets(&new).await.map_err(op)?;
                if json_output() {
                    println!(
                        "{}",
                        serde_json::json!({
                            "resealed": n,
                            "key_id": new.id(),
                            "previous_key_id": store.sealing_key().id(),
                        })
                    );
                }
                say!(
                    "{n} webhook secrets sealed again with key {} (was {}); restart control with the new key",
                    new.id(),
                    store.sealing_key().id()
                );
                Ok(())
            }
            .await;
            store.close().await;
            result
        }
        AdminCommand::Operator(OperatorCommand::Bootstrap { store, name }) => {
            let store = open(&store).await?;
            let minted = store
                .create_operator_credential(&name, None)
                .await
                .map_err(op);
            store.close().await;
            let minted = minted?;
            if json_output() {
                // The object `CreateOperatorCredential` answers.
                print_json(&pb::CreateOperatorCredentialResponse {
                    credential: Some(switchboard_control::api::operators::operator_credential(
                        minted.credential.clone(),
                    )),
                    token: minted.token.clone(),
                })?;
            }
            say!("operator credential {} created", minted.credential.id);
            say!(
                "operator token (shown once; it is stored only as a hash): {}",
                minted.token
            );
            Ok(())
        }
        command => {
            let mut client = client(&args.control)?;
            call(&mut client, command).await.map_err(|e| {
                // Control not answering is said with the address the operator gave.
                match e.downcast::<CallError>() {
                    Ok(refused) => anyhow::Error::new(refused.at_control(&args.control)),
                    Err(other) => other,
                }
            })
        }
    }
}

async fn open(args: &StoreArgs) -> anyhow::Result<Store> {
    let key = args.secret_key.key(None)?;
    Store::connect(&args.database_url, &key)
        .await
        .map_err(op)
        .context("opening the store")
}

fn webhook_of(w: Option<pb::Webhook>) -> anyhow::Result<pb::Webhook> {
    w.context("control answered no webhook")
}

async fn call(client: &mut Client, command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::SecretKey(_)
        | AdminCommand::Operator(OperatorCommand::Bootstrap { .. })
        | AdminCommand::Changes(ChangesCommand::Verify { file: Some(_) }) => {}
        AdminCommand::Changes(ChangesCommand::List {
            after,
            limit,
            scope,
            filter,
        }) => {
            let page = client
                .list_changes(pb::ListChangesRequest {
                    after_seq: after,
                    limit,
                    owner_scope: scope.unwrap_or_default(),
                    webhook_id: filter.webhook.unwrap_or_default(),
                    actor: filter.actor.unwrap_or_default(),
                    since: crate::client::changes::bound(filter.since_ms),
                    until: crate::client::changes::bound(filter.until_ms),
                    ..Default::default()
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            for e in page.entries {
                let some = |v: &String| (!v.is_empty()).then(|| v.clone());
                let actor = switchboard_model::change_log::ChangeActor {
                    endpoint: some(&e.actor_endpoint),
                    human: some(&e.actor_human),
                    operator: some(&e.actor_operator),
                }
                .describe();
                say!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    e.seq,
                    time::to_millis_or_zero(e.at.as_ref()),
                    e.kind,
                    actor,
                    e.webhook_id,
                    e.version.map(|v| v.to_string()).unwrap_or_default()
                );
            }
            if page.next_after_seq > 0 {
                say!("next after: {}", page.next_after_seq);
            }
        }
        AdminCommand::Changes(ChangesCommand::Export { out }) => {
            let mut lines = String::new();
            let mut after = 0;
            loop {
                let page = client
                    .list_changes(pb::ListChangesRequest {
                        after_seq: after,
                        limit: 1000,
                        ..Default::default()
                    })
                    .await
                    .map_err(api)?
                    // Not echoed with --output json: the export is JSON Lines already.
                    .into_inner()
                    .entries;
                let Some(last) = page.last() else { break };
                after = last.seq;
                for e in &page {
                    let entry: serde_json::Value = serde_json::from_str(&e.canonical)
                        .context("control answered an entry that is not JSON")?;
                    let line = serde_json::json!({"entry": entry, "hash": e.hash});
                    switchboard_model::write_canonical(&line, &mut lines);
                    lines.push('\n');
                }
            }
            match out {
                Some(path) => std::fs::write(&path, lines)
                    .with_context(|| format!("write {}", path.display()))?,
                None => print!("{lines}"),
            }
        }
        AdminCommand::Changes(ChangesCommand::Verify { file: None }) => {
            let v = client
                .verify_change_log(pb::VerifyChangeLogRequest {})
                .await
                .map_err(api)
                .and_then(answered)?;
            if !v.intact {
                return Err(broken_log(v.broken));
            }
            print_head((v.head_seq > 0).then_some((v.head_seq, v.head_hash.as_str())));
        }
        AdminCommand::Human(HumanCommand::Create {
            login,
            display_name,
        }) => {
            let h = client
                .create_human(pb::CreateHumanRequest {
                    login,
                    display_name,
                })
                .await
                .map_err(api)
                .and_then(answered)?
                .human
                .context("control answered no human")?;
            say!("human {} created (admin of human:{})", h.login, h.login);
        }
        AdminCommand::Human(HumanCommand::SignInLink { login, console_url }) => {
            let link = client
                .create_sign_in_link(pb::CreateSignInLinkRequest {
                    login: login.clone(),
                    console_url,
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            say!("{}", link.url);
            eprintln!(
                "a one-time sign-in link for {login}, valid for {} minutes",
                link.valid_for_secs / 60
            );
        }
        AdminCommand::Human(HumanCommand::List) => {
            let humans = every!(client, list_humans, humans, |cursor| {
                pb::ListHumansRequest {
                    cursor,
                    limit: PAGE,
                }
            });
            for h in humans {
                say!("{}\t{}", h.login, h.display_name);
            }
        }
        AdminCommand::Human(HumanCommand::Delete { login, yes }) => {
            let prompt =
                format!("delete human {login}, their endpoints, sessions and memberships? [y/N] ");
            if !yes && !confirm(&prompt)? {
                say!("nothing deleted");
                return Ok(());
            }
            let gone = client
                .delete_human(pb::DeleteHumanRequest { login })
                .await
                .map_err(api)
                .and_then(answered)?;
            say!(
                "human {} deleted ({} endpoints, {} memberships)",
                gone.login,
                gone.endpoints_deleted,
                gone.memberships_removed
            );
        }
        AdminCommand::Team(TeamCommand::Create { slug, name }) => {
            let t = client
                .create_team(pb::CreateTeamRequest { slug, name })
                .await
                .map_err(api)
                .and_then(answered)?
                .team
                .context("control answered no team")?;
            say!("team {} created (scope team:{})", t.slug, t.slug);
        }
        AdminCommand::Team(TeamCommand::AddMember { slug, login, role }) => {
            let m = client
                .set_team_member(pb::SetTeamMemberRequest {
                    team: slug,
                    login,
                    role: role.as_str().to_string(),
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            say!("{} is {} of team:{}", m.login, m.role, m.team);
        }
        AdminCommand::Team(TeamCommand::RemoveMember { slug, login }) => {
            let m = client
                .remove_team_member(pb::RemoveTeamMemberRequest { team: slug, login })
                .await
                .map_err(api)
                .and_then(answered)?;
            say!("{} is no longer a member of team:{}", m.login, m.team);
        }
        AdminCommand::Team(TeamCommand::List) => {
            let teams = every!(client, list_teams, teams, |cursor| pb::ListTeamsRequest {
                cursor,
                limit: PAGE
            });
            for t in teams {
                say!("{}\t{}", t.slug, t.name);
            }
        }
        AdminCommand::Team(TeamCommand::Delete { slug, yes }) => {
            let prompt = format!("delete team {slug}, its memberships and endpoints? [y/N] ");
            if !yes && !confirm(&prompt)? {
                say!("nothing deleted");
                return Ok(());
            }
            let gone = client
                .delete_team(pb::DeleteTeamRequest { slug })
                .await
                .map_err(api)
                .and_then(answered)?;
            say!(
                "team {} deleted ({} endpoints, {} memberships)",
                gone.slug,
                gone.endpoints_deleted,
                gone.memberships_removed
            );
        }
        AdminCommand::Webhook(command) => webhook(client, command).await?,
        AdminCommand::Scope(command) => scope(client, command).await?,
        AdminCommand::Endpoint(EndpointCommand::Vend {
            human,
            scope,
            verbs: asked,
            name,
            yes,
        }) => vend(client, human, scope, asked, name, yes).await?,
        AdminCommand::Endpoint(EndpointCommand::Revoke { id }) => {
            let e = client
                .revoke_endpoint(pb::RevokeEndpointRequest { endpoint_id: id })
                .await
                .map_err(api)
                .and_then(answered)?
                .endpoint
                .context("control answered no endpoint")?;
            say!("endpoint {} revoked", e.id);
        }
        AdminCommand::Endpoint(EndpointCommand::List { scope }) => {
            let owner_scope = scope.map(|s| s.to_string());
            let endpoints = every!(client, list_endpoints, endpoints, |cursor| {
                pb::ListEndpointsRequest {
                    owner_scope: owner_scope.clone(),
                    cursor,
                    limit: PAGE,
                }
            });
            for e in endpoints {
                let families: Vec<String> = verbs::group_by_family(&e.verbs)
                    .into_iter()
                    .map(|(family, held)| format!("{family}({})", held.len()))
                    .collect();
                say!(
                    "{}\t{}\thuman={}\tscope={}\t{}\tverbs={}",
                    e.id,
                    e.name,
                    e.human,
                    e.owner_scope,
                    if e.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    },
                    families.join(",")
                );
            }
        }
        AdminCommand::Operator(OperatorCommand::Create { name }) => {
            let made = client
                .create_operator_credential(pb::CreateOperatorCredentialRequest { name })
                .await
                .map_err(api)
                .and_then(answered)?;
            let c = made.credential.context("control answered no credential")?;
            say!("operator credential {} created", c.id);
            say!(
                "operator token (shown once; it is stored only as a hash): {}",
                made.token
            );
        }
        AdminCommand::Operator(OperatorCommand::List) => {
            let all = every!(client, list_operator_credentials, credentials, |cursor| {
                pb::ListOperatorCredentialsRequest {
                    cursor,
                    limit: PAGE,
                }
            });
            for c in all {
                say!(
                    "{}\t{}\t{}\tcreated_by={}",
                    c.id,
                    c.name,
                    if c.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    },
                    if c.created_by.is_empty() {
                        "bootstrap"
                    } else {
                        &c.created_by
                    }
                );
            }
        }
        AdminCommand::Operator(OperatorCommand::Revoke { id }) => {
            let c = client
                .revoke_operator_credential(pb::RevokeOperatorCredentialRequest { id })
                .await
                .map_err(api)
                .and_then(answered)?
                .credential
                .context("control answered no credential")?;
            say!("operator credential {} revoked", c.id);
        }
        AdminCommand::Operator(OperatorCommand::Audit { limit, cursor }) => {
            let page = client
                .list_audit_entries(pb::ListAuditEntriesRequest { limit, cursor })
                .await
                .map_err(api)
                .and_then(answered)?;
            for e in page.entries {
                let mut detail: Vec<(String, String)> = e.detail.into_iter().collect();
                detail.sort();
                let detail: Vec<String> = detail.iter().map(|(k, v)| format!("{k}={v}")).collect();
                say!(
                    "{}\t{}\t{}\t{}\t{}",
                    time::to_millis_or_zero(e.at.as_ref()),
                    if e.operator_id.is_empty() {
                        "bootstrap"
                    } else {
                        &e.operator_id
                    },
                    e.action,
                    e.target,
                    detail.join(" ")
                );
            }
            if !page.next_cursor.is_empty() {
                say!("next cursor: {}", page.next_cursor);
            }
        }
    }
    Ok(())
}

async fn webhook(client: &mut Client, command: WebhookCommand) -> anyhow::Result<()> {
    match command {
        WebhookCommand::Create {
            scope,
            source,
            grant,
            secret,
            reject_unverified,
            name,
        } => {
            let made = client
                .provision_webhook(pb::ProvisionWebhookRequest {
                    owner_scope: scope.to_string(),
                    source_type: switchboard_proto::control::v1::SourceType::from(source) as i32,
                    grant,
                    secret,
                    reject_unverified,
                    name,
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            let w = webhook_of(made.webhook)?;
            say!("webhook {} created", w.id);
            if !w.name.is_empty() {
                say!("name: {}", w.name);
            }
            say!("scope: {}", w.owner_scope);
            say!("source: {}", source_name(w.source_type));
            say!("grant: {}", w.grant.join(","));
            say!("reject unverified: {}", w.reject_unverified);
            say!("ingest path: {}", w.ingest_path);
            say!("secret (shown once; give it to the forge): {}", made.secret);
        }
        WebhookCommand::Name { id, name } => {
            let set = client
                .set_webhook_name(pb::SetWebhookNameRequest {
                    webhook_id: id,
                    name,
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            let w = webhook_of(set.webhook)?;
            if w.name.is_empty() {
                say!("webhook {}: no name", w.id);
            } else {
                say!("webhook {}: named {}", w.id, w.name);
            }
        }
        WebhookCommand::Grant { id, grant } => {
            let set = client
                .set_webhook_grant(pb::SetWebhookGrantRequest {
                    webhook_id: id,
                    grant,
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            let w = webhook_of(set.webhook)?;
            say!("webhook {} may route to: {}", w.id, w.grant.join(","));
            if !set.routed_outside_grant.is_empty() {
                eprintln!(
                    "warning: the saved rules route to {} outside the new grant; those deliveries will fault (not_granted) until the rules change",
                    set.routed_outside_grant.join(", ")
                );
            }
        }
        WebhookCommand::Delete { id, yes } => {
            let prompt = format!("delete webhook {id} with its events, todos and plans? [y/N] ");
            if !yes && !confirm(&prompt)? {
                say!("nothing deleted");
                return Ok(());
            }
            let gone = client
                .deprovision_webhook(pb::DeprovisionWebhookRequest { webhook_id: id })
                .await
                .map_err(api)
                .and_then(answered)?;
            say!("webhook {} deleted", gone.webhook_id);
        }
        WebhookCommand::List { scope } => {
            let owner_scope = scope.to_string();
            let webhooks = every!(client, list_scope_webhooks, webhooks, |cursor| {
                pb::ListScopeWebhooksRequest {
                    owner_scope: owner_scope.clone(),
                    cursor,
                    limit: PAGE,
                }
            });
            for w in webhooks {
                say!(
                    "{}\t{}\tgrant={}\tversion={}\treject_unverified={}\tname={}",
                    w.id,
                    source_name(w.source_type),
                    w.grant.join(","),
                    w.config_version,
                    w.reject_unverified,
                    w.name
                );
            }
        }
        WebhookCommand::ConfirmPolicy { id, policy } => {
            let w = client
                .set_webhook_confirm_policy(pb::SetWebhookConfirmPolicyRequest {
                    webhook_id: id,
                    policy: policy.to_string(),
                })
                .await
                .map_err(api)
                .and_then(answered)?
                .webhook;
            let w = webhook_of(w)?;
            say!("webhook {}: confirm policy {}", w.id, w.confirm_policy);
        }
        WebhookCommand::Guard { id, on_breach } => {
            let w = client
                .set_webhook_guard_default(pb::SetWebhookGuardDefaultRequest {
                    webhook_id: id,
                    on_breach: if on_breach == "default" {
                        String::new()
                    } else {
                        on_breach
                    },
                })
                .await
                .map_err(api)
                .and_then(answered)?
                .webhook;
            let w = webhook_of(w)?;
            say!(
                "webhook {}: a guard's breach {}",
                w.id,
                match w.guard_on_breach.as_str() {
                    "alert" => "alerts (set by an operator)",
                    "revert" => "reverts (set by an operator)",
                    _ => "reverts (the default)",
                }
            );
        }
        WebhookCommand::Approvals {
            id,
            default,
            required,
            lost_work,
            removes_pack,
            default_action,
            widens_quarantine,
            proposer_counts,
        } => {
            use switchboard_model::approval::Risk;
            let tiers = [
                (Risk::LostWork, lost_work),
                (Risk::RemovesPack, removes_pack),
                (Risk::DefaultAction, default_action),
                (Risk::WidensQuarantine, widens_quarantine),
            ]
            .into_iter()
            .filter_map(|(risk, n)| {
                n.map(|n| pb::ApprovalTier {
                    risk: pb::ApprovalRisk::from(risk) as i32,
                    required: n,
                })
            })
            .collect();
            let w = client
                .set_webhook_approval_rule(pb::SetWebhookApprovalRuleRequest {
                    webhook_id: id,
                    rule: (!default).then_some(pb::ApprovalRule {
                        required,
                        tiers,
                        proposer_counts,
                    }),
                })
                .await
                .map_err(api)
                .and_then(answered)?
                .webhook;
            let w = webhook_of(w)?;
            say!(
                "webhook {}: {}",
                w.id,
                crate::client::approvals::rule_words(
                    w.approval_rule.as_ref(),
                    w.approval_rule_default
                )
            );
        }
        WebhookCommand::ClaimTtl { id, ttl } => {
            let set = client
                .set_webhook_claim_ttl(pb::SetWebhookClaimTtlRequest {
                    webhook_id: id,
                    ttl_secs: match ttl {
                        ClaimTtl::Default => None,
                        ClaimTtl::Seconds(n) => Some(n),
                    },
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            match set.ttl_secs {
                Some(secs) => say!("webhook {}: claims last {secs} s", set.webhook_id),
                None => say!(
                    "webhook {}: claims last the instance default (--claim-ttl-secs)",
                    set.webhook_id
                ),
            }
        }
    }
    Ok(())
}

/// A source type as operators name it (`github`), from the API's enum.
fn source_name(value: i32) -> String {
    switchboard_control::api::convert::source_type_from(value)
        .map(|t: SourceType| t.to_string())
        .unwrap_or_else(|_| "unknown".to_string())
}

async fn scope(client: &mut Client, command: ScopeCommand) -> anyhow::Result<()> {
    match command {
        ScopeCommand::Allow { scope, queues } => {
            let set = client
                .set_grant_allowance(pb::SetGrantAllowanceRequest {
                    owner_scope: scope.to_string(),
                    queues,
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            let a = set.allowance.context("control answered no allowance")?;
            say!(
                "{} may grant: {} (create_webhook over the API refuses any other queue)",
                a.owner_scope,
                a.queues.join(",")
            );
            for w in set.webhooks_outside {
                eprintln!(
                    "note: webhook {} keeps its grant, which names {} outside the allowance (change it with `webhook grant`)",
                    w.webhook_id,
                    w.outside.join(",")
                );
            }
        }
        ScopeCommand::Show { scope } => {
            let got = client
                .get_grant_allowance(pb::GetGrantAllowanceRequest {
                    owner_scope: scope.to_string(),
                })
                .await
                .map_err(api)
                .and_then(answered)?;
            match got.allowance {
                Some(a) => say!("{} may grant: {}", a.owner_scope, a.queues.join(",")),
                None => say!(
                    "{scope} has no grant allowance: its agents can create no webhook over the API"
                ),
            }
        }
        ScopeCommand::Clear { scope } => {
            let cleared = client
                .clear_grant_allowance(pb::ClearGrantAllowanceRequest {
                    owner_scope: scope.to_string(),
                })
                .await
                .map_err(api)
                .and_then(answered)?
                .cleared;
            if cleared {
                say!(
                    "{scope}'s grant allowance cleared: its agents can create no webhook over the API"
                );
            } else {
                say!("{scope} had no grant allowance");
            }
        }
        ScopeCommand::List => {
            let all = every!(client, list_grant_allowances, allowances, |cursor| {
                pb::ListGrantAllowancesRequest {
                    cursor,
                    limit: PAGE,
                }
            });
            for a in all {
                say!("{}\t{}", a.owner_scope, a.queues.join(","));
            }
        }
    }
    Ok(())
}

/// The consent step: control answers what the endpoint will be able to call, grouped by
/// family; the operator says yes; only then is it vended, with `consent`.
async fn vend(
    client: &mut Client,
    human: String,
    scope: OwnerScope,
    asked: Vec<String>,
    name: Option<String>,
    yes: bool,
) -> anyhow::Result<()> {
    let mut request = pb::VendEndpointRequest {
        human: human.clone(),
        owner_scope: scope.to_string(),
        verbs: asked,
        name,
        consent: false,
    };
    // The preview (consent: false) is for the person, not the answer.
    let shown = client
        .vend_endpoint(request.clone())
        .await
        .map_err(api)?
        .into_inner();
    tell!(
        "an endpoint acting for {human} ({} of {scope}) will be able to call:",
        shown.role
    );
    for f in &shown.families {
        let note = if f.whole_family {
            " (the whole family)"
        } else {
            ""
        };
        tell!("  {}{note}: {}", f.family, f.verbs.join(", "));
    }
    if !yes && !confirm("vend this endpoint? [y/N] ")? {
        anyhow::bail!("not confirmed: nothing vended");
    }
    request.consent = true;
    let vended = client
        .vend_endpoint(request)
        .await
        .map_err(api)
        .and_then(answered)?;
    let e = vended.endpoint.context("control answered no endpoint")?;
    say!("endpoint {} vended", e.id);
    say!(
        "credential (shown once; it is stored only as a hash): {}",
        vended.credential
    );
    Ok(())
}

/// Asks on stderr and reads one answer from stdin; only `y` or `yes` confirm.
fn confirm(prompt: &str) -> anyhow::Result<bool> {
    eprint!("{prompt}");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    Ok(matches!(
        answer.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// An export's lines as the sealed entries they carry: each entry's canonical text again.
fn exported(text: &str) -> anyhow::Result<Vec<switchboard_model::change_log::Sealed>> {
    Ok(switchboard_model::change_log::read_export(text)?)
}

/// A change log that does not verify: a refusal to act on, exit 4, as `switchboard changes
/// verify` exits for an export that does not.
fn broken_log(broken: impl std::fmt::Display) -> anyhow::Error {
    anyhow::Error::new(crate::client::Failure {
        exit: switchboard_proto::reason::exit::REFUSED,
        message: format!("the change log does not verify: {broken}"),
    })
}

fn print_head(head: Option<(u64, &str)>) {
    match head {
        Some((seq, hash)) => say!("the change log verifies: head {seq} {hash}"),
        None => say!("the change log verifies: it is empty"),
    }
}
