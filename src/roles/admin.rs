//! `switchboard admin`: the operator's surface over the store. Humans, teams and roles,
//! webhooks and their grants, the queues each scope's agents may grant, endpoints vended and
//! revoked. Secrets are printed once, when
//! they are made, and never again.

use std::io::{BufRead, Write};

use anyhow::Context;
use clap::{Args, Subcommand};
use switchboard_control::store::{
    Actor, NewEndpoint, NewWebhook, SourceType, Webhook, within_allowance,
};
use switchboard_control::{Error, OwnerScope, Role, SealingKey, Store, verbs};

#[derive(Args, Debug, Clone)]
pub struct AdminArgs {
    /// The store: `sqlite://<path>?mode=rwc` or `postgres://…` (every command but
    /// `secret-key generate` needs it).
    #[arg(long, env = "SWITCHBOARD_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The key the store's webhook secrets are sealed with, as control has it.
    #[command(flatten)]
    pub secret_key: super::control::SecretKeyArgs,
    #[command(subcommand)]
    pub command: AdminCommand,
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
    /// The key webhook signing secrets are sealed with at rest.
    #[command(subcommand)]
    SecretKey(SecretKeyCommand),
}

#[derive(Subcommand, Debug, Clone)]
pub enum SecretKeyCommand {
    /// Writes a fresh key to a new file (mode 0600); prints only its id.
    Generate { file: std::path::PathBuf },
    /// Seals every webhook secret again with the key in `--new-key-file`, in one
    /// transaction; then restart control with that key. The current key opens them first.
    Rotate {
        #[arg(long)]
        new_key_file: std::path::PathBuf,
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
    /// Lists every human.
    List,
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
    /// Lists every team.
    List,
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
    },
    /// Sets the queues a webhook may route to (an operator's act; agents never can).
    Grant {
        id: String,
        #[arg(long, value_delimiter = ',', required = true)]
        grant: Vec<String>,
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

pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    if let AdminCommand::SecretKey(SecretKeyCommand::Generate { file }) = &args.command {
        let text = SealingKey::generate_hex().map_err(op)?;
        switchboard_control::sealing::write_private(file, &format!("{text}\n")).map_err(op)?;
        let key = SealingKey::from_hex(&text).map_err(op)?;
        println!(
            "secret key {} written to {} (mode 0600)",
            key.id(),
            file.display()
        );
        return Ok(());
    }
    let Some(database_url) = &args.database_url else {
        anyhow::bail!("--database-url (or SWITCHBOARD_DATABASE_URL) is required");
    };
    let key = args.secret_key.key(None)?;
    let store = Store::connect(database_url, &key)
        .await
        .map_err(op)
        .context("opening the store")?;
    let result = command(&store, args.command).await;
    store.close().await;
    result
}

async fn command(store: &Store, command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::SecretKey(SecretKeyCommand::Generate { .. }) => {}
        AdminCommand::SecretKey(SecretKeyCommand::Rotate { new_key_file }) => {
            let new = SealingKey::load(&new_key_file).map_err(op)?;
            let n = store.reseal_secrets(&new).await.map_err(op)?;
            println!(
                "{n} webhook secrets sealed again with key {} (was {}); restart control with the new key",
                new.id(),
                store.sealing_key().id()
            );
        }
        AdminCommand::Human(HumanCommand::Create {
            login,
            display_name,
        }) => {
            let h = store
                .create_human(&login, display_name.as_deref())
                .await
                .map_err(op)?;
            println!("human {} created (admin of human:{})", h.login, h.login);
        }
        AdminCommand::Human(HumanCommand::SignInLink { login, console_url }) => {
            let ttl = switchboard_control::console::SIGN_IN_LINK_TTL;
            let token = store
                .create_sign_in_link(&login, i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
                .await
                .map_err(op)?;
            println!(
                "{}",
                switchboard_control::console::sign_in_url(console_url.as_deref(), &token)
            );
            eprintln!(
                "a one-time sign-in link for {login}, valid for {} minutes",
                ttl.as_secs() / 60
            );
        }
        AdminCommand::Webhook(WebhookCommand::ConfirmPolicy { id, policy }) => {
            let current = store.webhook_for_ingest(&id).await.map_err(op)?;
            let w = store
                .set_confirm_policy(&current.owner_scope, &id, policy)
                .await
                .map_err(op)?;
            println!("webhook {}: confirm policy {}", w.id, w.confirm_policy);
        }
        AdminCommand::Webhook(WebhookCommand::ClaimTtl { id, ttl }) => {
            let current = store.webhook_for_ingest(&id).await.map_err(op)?;
            let ttl = match ttl {
                ClaimTtl::Default => None,
                ClaimTtl::Seconds(n) => Some(std::time::Duration::from_secs(n)),
            };
            let w = store
                .set_claim_ttl(&current.owner_scope, &id, ttl)
                .await
                .map_err(op)?;
            match w.claim_ttl {
                Some(ttl) => println!("webhook {}: claims last {} s", w.id, ttl.as_secs()),
                None => println!(
                    "webhook {}: claims last the instance default (--claim-ttl-secs)",
                    w.id
                ),
            }
        }
        AdminCommand::Human(HumanCommand::List) => {
            for h in store.list_humans().await.map_err(op)? {
                println!("{}\t{}", h.login, h.display_name.unwrap_or_default());
            }
        }
        AdminCommand::Team(TeamCommand::Create { slug, name }) => {
            let t = store
                .create_team(&slug, name.as_deref().unwrap_or(&slug))
                .await
                .map_err(op)?;
            println!("team {} created (scope team:{})", t.slug, t.slug);
        }
        AdminCommand::Team(TeamCommand::AddMember { slug, login, role }) => {
            let m = store
                .set_membership(&slug, &login, role)
                .await
                .map_err(op)?;
            println!("{} is {} of team:{}", m.human_login, m.role, m.team_slug);
        }
        AdminCommand::Team(TeamCommand::List) => {
            for t in store.list_teams().await.map_err(op)? {
                println!("{}\t{}", t.slug, t.name);
            }
        }
        AdminCommand::Webhook(WebhookCommand::Create {
            scope,
            source,
            grant,
            secret,
            reject_unverified,
        }) => {
            let w = store
                .create_webhook(NewWebhook {
                    owner_scope: scope,
                    source_type: source,
                    secret,
                    grant,
                    reject_unverified,
                    configuration: None,
                    actor: Actor::operator(),
                })
                .await
                .map_err(op)?;
            println!("webhook {} created", w.id);
            println!("scope: {}", w.owner_scope);
            println!("source: {}", w.source_type);
            println!("grant: {}", w.grant.join(","));
            println!("reject unverified: {}", w.reject_unverified);
            println!("ingest path: /hooks/{}", w.id);
            println!("secret (shown once; give it to the forge): {}", w.secret);
        }
        AdminCommand::Webhook(WebhookCommand::Grant { id, grant }) => {
            // An operator names a webhook by id alone; its scope comes from the store.
            let current = store.webhook_for_ingest(&id).await.map_err(op)?;
            let w = store
                .set_webhook_grant(&current.owner_scope, &id, &grant)
                .await
                .map_err(op)?;
            println!("webhook {} may route to: {}", w.id, w.grant.join(","));
            let outside = queues_outside_grant(&w);
            if !outside.is_empty() {
                eprintln!(
                    "warning: the saved rules route to {} outside the new grant; those deliveries will fault (not_granted) until the rules change",
                    outside.join(", ")
                );
            }
        }
        AdminCommand::Webhook(WebhookCommand::List { scope }) => {
            for w in store.list_webhooks(&scope).await.map_err(op)? {
                println!(
                    "{}\t{}\tgrant={}\tversion={}\treject_unverified={}",
                    w.id,
                    w.source_type,
                    w.grant.join(","),
                    w.config_version,
                    w.reject_unverified
                );
            }
        }
        AdminCommand::Scope(command) => scope(store, command).await?,
        AdminCommand::Endpoint(EndpointCommand::Vend {
            human,
            scope,
            verbs: asked,
            name,
            yes,
        }) => vend(store, human, scope, asked, name, yes).await?,
        AdminCommand::Endpoint(EndpointCommand::Revoke { id }) => {
            let e = store.revoke_endpoint(&id).await.map_err(op)?;
            println!("endpoint {} revoked", e.id);
        }
        AdminCommand::Endpoint(EndpointCommand::List { scope }) => {
            for e in store.list_endpoints(scope.as_ref()).await.map_err(op)? {
                let families: Vec<String> = verbs::group_by_family(&e.verbs)
                    .into_iter()
                    .map(|(family, held)| format!("{family}({})", held.len()))
                    .collect();
                println!(
                    "{}\t{}\thuman={}\tscope={}\t{}\tverbs={}",
                    e.id,
                    e.name,
                    e.human_login,
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
    }
    Ok(())
}

async fn scope(store: &Store, command: ScopeCommand) -> anyhow::Result<()> {
    match command {
        ScopeCommand::Allow { scope, queues } => {
            let a = store
                .set_grant_allowance(&scope, &queues)
                .await
                .map_err(op)?;
            println!(
                "{} may grant: {} (create_webhook over the API refuses any other queue)",
                a.owner_scope,
                a.queues.join(",")
            );
            for w in store.list_webhooks(&scope).await.map_err(op)? {
                if let Err(outside) = within_allowance(&w.grant, &a.queues) {
                    eprintln!(
                        "note: webhook {} keeps its grant, which names {} outside the allowance (change it with `webhook grant`)",
                        w.id,
                        outside.join(",")
                    );
                }
            }
        }
        ScopeCommand::Show { scope } => match store.grant_allowance(&scope).await.map_err(op)? {
            Some(a) => println!("{} may grant: {}", a.owner_scope, a.queues.join(",")),
            None => println!(
                "{scope} has no grant allowance: its agents can create no webhook over the API"
            ),
        },
        ScopeCommand::Clear { scope } => {
            if store.clear_grant_allowance(&scope).await.map_err(op)? {
                println!(
                    "{scope}'s grant allowance cleared: its agents can create no webhook over the API"
                );
            } else {
                println!("{scope} had no grant allowance");
            }
        }
        ScopeCommand::List => {
            for a in store.list_grant_allowances().await.map_err(op)? {
                println!("{}\t{}", a.owner_scope, a.queues.join(","));
            }
        }
    }
    Ok(())
}

/// Queues the saved rules (and default action) name that the grant does not hold.
fn queues_outside_grant(w: &Webhook) -> Vec<String> {
    let Ok(config) = switchboard_model::Configuration::from_json(&w.configuration.to_string())
    else {
        return Vec::new();
    };
    let mut outside: Vec<String> = config
        .rules
        .iter()
        .map(|r| &r.action)
        .chain(config.default_action.as_ref())
        .filter_map(|a| match a {
            switchboard_model::Action::Queue(q) if !w.grant.contains(q) => Some(q.clone()),
            _ => None,
        })
        .collect();
    outside.sort();
    outside.dedup();
    outside
}

/// The consent step: what the endpoint will be able to do, grouped by family, then a yes.
async fn vend(
    store: &Store,
    human: String,
    scope: OwnerScope,
    asked: Vec<String>,
    name: Option<String>,
    yes: bool,
) -> anyhow::Result<()> {
    let expanded = verbs::expand(&asked).map_err(|m| anyhow::anyhow!("--verbs: {m}"))?;
    if expanded.is_empty() {
        anyhow::bail!("--verbs: name at least one verb or family");
    }
    let role = store.role_in_scope(&human, &scope).await.map_err(op)?;
    let Some(role) = role else {
        anyhow::bail!("{human} holds no role in {scope}: nothing vended");
    };
    println!("an endpoint acting for {human} ({role} of {scope}) will be able to call:");
    for (family, held) in verbs::group_by_family(&expanded) {
        let whole = verbs::FAMILIES
            .iter()
            .find(|f| f.name == family)
            .is_some_and(|f| f.verbs.len() == held.len());
        let note = if whole { " (the whole family)" } else { "" };
        println!("  {family}{note}: {}", held.join(", "));
    }
    if !yes && !confirm("vend this endpoint? [y/N] ")? {
        anyhow::bail!("not confirmed: nothing vended");
    }
    let vended = store
        .vend_endpoint(NewEndpoint {
            name: name.unwrap_or_else(|| format!("{human}-agent")),
            human_login: human,
            owner_scope: scope,
            verbs: asked,
        })
        .await
        .map_err(op)?;
    println!("endpoint {} vended", vended.endpoint.id);
    println!(
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
