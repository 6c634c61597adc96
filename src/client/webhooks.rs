//! `switchboard webhooks list|show|rename`: the webhooks of the endpoint's owner scope.

use clap::{Args, Subcommand};
use switchboard_control_client::convert;
use switchboard_control_client::views::{GetWebhookOut, ListWebhooksOut, WebhookOut};
use switchboard_proto::control::v1 as pb;

use super::{Common, Failure, Session, Table, emit, exit, facts, list, time};

#[derive(Args, Debug)]
pub struct WebhooksArgs {
    #[command(subcommand)]
    command: WebhooksCommand,
    #[command(flatten)]
    common: Common,
}

#[derive(Subcommand, Debug)]
enum WebhooksCommand {
    /// Every webhook of your owner scope, oldest first (list_webhooks).
    #[command(after_help = super::EXIT_CODES_HELP)]
    List,
    /// One webhook: its grant, configuration version and installed packs (get_webhook).
    #[command(after_help = super::EXIT_CODES_HELP)]
    Show {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
    },
    /// Names a webhook, shown beside its id everywhere (rename_webhook; an editor's act). An
    /// empty name clears it.
    #[command(after_help = super::EXIT_CODES_HELP)]
    Rename {
        /// The webhook's id (`wh_…`).
        webhook_id: String,
        /// 1–80 characters, no control characters; "" clears the name.
        name: String,
    },
}

pub async fn run(args: WebhooksArgs) -> Result<u8, Failure> {
    match args.command {
        WebhooksCommand::List => {
            let s = Session::open("list_webhooks", &args.common)?;
            let webhooks = s
                .client
                .all_webhooks(&s.bearer)
                .await
                .map_err(|e| s.status(e))?;
            let out = ListWebhooksOut {
                webhooks: webhooks
                    .into_iter()
                    .map(convert::webhook)
                    .collect::<Result<_, _>>()
                    .map_err(Failure::call)?,
            };
            emit(s.output, &out, |o| list_table(&o.webhooks))?;
        }
        WebhooksCommand::Show { webhook_id } => {
            let s = Session::open("get_webhook", &args.common)?;
            let r = s
                .client
                .get_webhook(&s.bearer, pb::GetWebhookRequest { webhook_id })
                .await
                .map_err(|e| s.status(e))?;
            let webhook = convert::required("webhook", r.webhook)
                .and_then(convert::webhook)
                .map_err(Failure::call)?;
            emit(s.output, &GetWebhookOut { webhook }, |o| show(&o.webhook))?;
        }
        WebhooksCommand::Rename { webhook_id, name } => {
            let s = Session::open("rename_webhook", &args.common)?;
            let r = s
                .client
                .rename_webhook(&s.bearer, pb::RenameWebhookRequest { webhook_id, name })
                .await
                .map_err(|e| s.status(e))?;
            let webhook = convert::required("webhook", r.webhook)
                .and_then(convert::webhook)
                .map_err(Failure::call)?;
            emit(s.output, &GetWebhookOut { webhook }, |o| show(&o.webhook))?;
        }
    }
    Ok(exit::OK)
}

fn packs(w: &WebhookOut) -> String {
    let installed: Vec<String> = w
        .installed_packs
        .iter()
        .map(|(name, p)| format!("{name}@{}", p["version"].as_str().unwrap_or("?")))
        .collect();
    list(&installed)
}

/// The name, or `-` for an unnamed webhook (like an empty list).
fn name(w: &WebhookOut) -> String {
    if w.name.is_empty() {
        "-".into()
    } else {
        w.name.clone()
    }
}

fn list_table(webhooks: &[WebhookOut]) -> String {
    if webhooks.is_empty() {
        return "no webhooks in this scope\n".into();
    }
    let mut t = Table::new(&[
        "id", "name", "source", "version", "grant", "packs", "created",
    ]);
    for w in webhooks {
        t.row([
            w.id.clone(),
            name(w),
            w.source_type.clone(),
            w.config_version.to_string(),
            list(&w.grant),
            packs(w),
            time(Some(w.created_at_ms)),
        ]);
    }
    t.render(0)
}

fn show(w: &WebhookOut) -> String {
    let mut pairs = vec![
        ("id", w.id.clone()),
        ("name", name(w)),
        ("owner", w.owner_scope.clone()),
        ("source", w.source_type.clone()),
        ("grant", list(&w.grant)),
        ("default queue", w.default_queue.clone()),
        (
            "unverified",
            if w.reject_unverified {
                "rejected at the door".into()
            } else {
                "accepted (verified: false)".into()
            },
        ),
        ("version", w.config_version.to_string()),
        ("digest", w.config_digest.clone()),
        ("ingest path", w.ingest_path.clone()),
        ("packs", packs(w)),
        ("created", time(Some(w.created_at_ms))),
    ];
    if let Some(t) = &w.trusted_actors {
        pairs.push((
            "trusted",
            format!(
                "humans {}; agents {}; bots {}",
                list(&t.humans),
                list(&t.agents),
                list(&t.bots)
            ),
        ));
    }
    facts(&pairs)
}
