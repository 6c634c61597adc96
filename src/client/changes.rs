//! `switchboard changes list|export|verify`: the change log as a scope's owners read it
//! (issue 47, list_webhook_changes) — who changed what their webhooks route, who proposed,
//! who approved, and the digests before and after. `export` writes JSON Lines an auditor can
//! keep (the same lines `switchboard admin changes export` writes); `verify` checks such a
//! file: each entry's own hash and the links between consecutive entries. The whole chain,
//! other scopes' entries included, is verified by an operator (`switchboard admin changes
//! verify`).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use switchboard_control_client::views::{ChangeOut, ListWebhookChangesOut};
use switchboard_model::change_log::{read_export, verify_extract};
use switchboard_proto::control::v1 as pb;

use super::{Common, Failure, Session, emit, exit};

#[derive(Args, Debug)]
pub struct ChangesArgs {
    #[command(subcommand)]
    command: ChangesCommand,
    #[command(flatten)]
    common: Common,
}

/// Which entries to read.
#[derive(Args, Debug, Clone, Default)]
pub struct Filter {
    /// Only this webhook's changes (`wh_…`); default: every webhook (of your scope).
    #[arg(long)]
    pub webhook: Option<String>,
    /// Only changes this actor made or approved: an endpoint id, a person's login or an
    /// operator credential id.
    #[arg(long)]
    pub actor: Option<String>,
    /// Only changes at or after / before these times (ms since the Unix epoch).
    #[arg(long)]
    pub since_ms: Option<i64>,
    #[arg(long)]
    pub until_ms: Option<i64>,
}

#[derive(Subcommand, Debug)]
pub enum ChangesCommand {
    /// One page of your scope's changes, oldest first.
    List {
        #[command(flatten)]
        filter: Filter,
        /// Entries after this seq (`next after` from the previous page).
        #[arg(long, default_value_t = 0)]
        after: u64,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Every matching change as JSON Lines (`{"entry": …, "hash": …}`), to a file or stdout.
    Export {
        #[command(flatten)]
        filter: Filter,
        #[arg(long)]
        file: Option<PathBuf>,
    },
    /// Checks an export: each entry's hash, and the links between consecutive entries.
    Verify {
        #[arg(long)]
        file: PathBuf,
    },
}

pub async fn run(args: ChangesArgs) -> Result<u8, Failure> {
    match args.command {
        ChangesCommand::Verify { file } => verify(&file),
        ChangesCommand::List {
            filter,
            after,
            limit,
        } => {
            let s = Session::open("list_webhook_changes", &args.common)?;
            let out = page(&s, &filter, after, limit).await?;
            emit(s.output, &out, table)?;
            Ok(exit::OK)
        }
        ChangesCommand::Export { filter, file } => {
            let s = Session::open("list_webhook_changes", &args.common)?;
            let mut lines = String::new();
            let mut after = 0;
            loop {
                let out = page(&s, &filter, after, 1000).await?;
                for c in &out.changes {
                    lines.push_str(&export_line(c)?);
                }
                match out.next_after_seq {
                    Some(next) if next > after => after = next,
                    _ => break,
                }
            }
            match file {
                Some(path) => std::fs::write(&path, lines).map_err(|e| Failure {
                    exit: exit::OTHER,
                    message: format!("write {}: {e}", path.display()),
                })?,
                None => print!("{lines}"),
            }
            Ok(exit::OK)
        }
    }
}

async fn page(
    s: &Session,
    f: &Filter,
    after: u64,
    limit: u32,
) -> Result<ListWebhookChangesOut, Failure> {
    let r = s
        .client
        .list_webhook_changes(
            &s.bearer,
            pb::ListWebhookChangesRequest {
                webhook_id: f.webhook.clone().unwrap_or_default(),
                after_seq: after,
                limit,
                actor: f.actor.clone().unwrap_or_default(),
                // 0 is no bound, as it always was.
                since: bound(f.since_ms),
                until: bound(f.until_ms),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| s.status(e))?;
    switchboard_control_client::convert::changes(r).map_err(Failure::call)
}

/// `--since-ms`/`--until-ms` as the Timestamp control reads; 0 is no bound.
pub(crate) fn bound(ms: Option<i64>) -> Option<switchboard_proto::convert::time::Timestamp> {
    ms.filter(|&ms| ms != 0)
        .map(switchboard_proto::convert::time::from_millis)
}

/// One export line: the entry's canonical JSON and its hash, canonical as a whole.
fn export_line(c: &ChangeOut) -> Result<String, Failure> {
    let entry = serde_json::to_value(&c.entry).map_err(|e| Failure {
        exit: exit::OTHER,
        message: format!("an entry does not serialize: {e}"),
    })?;
    let mut line = String::new();
    switchboard_model::write_canonical(
        &serde_json::json!({"entry": entry, "hash": c.hash}),
        &mut line,
    );
    line.push('\n');
    Ok(line)
}

fn verify(file: &std::path::Path) -> Result<u8, Failure> {
    let text = std::fs::read_to_string(file).map_err(|e| Failure {
        exit: exit::USAGE,
        message: format!("read {}: {e}", file.display()),
    })?;
    let sealed = read_export(&text).map_err(|e| Failure {
        exit: exit::USAGE,
        message: e.to_string(),
    })?;
    match verify_extract(&sealed) {
        Ok(n) => {
            println!(
                "the export verifies: {n} entries, each matching its hash, consecutive ones linked"
            );
            Ok(exit::OK)
        }
        Err(broken) => Err(Failure {
            exit: exit::REFUSED,
            message: format!("the export does not verify: {broken}"),
        }),
    }
}

fn table(out: &ListWebhookChangesOut) -> String {
    let mut text = String::new();
    if out.changes.is_empty() {
        text.push_str("no changes\n");
    }
    for c in &out.changes {
        let e = &c.entry;
        let by = e.actor.describe();
        let kind = serde_json::to_value(e.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let _ = write!(
            text,
            "{:>5}  {}  {kind}  {}  by {by}",
            e.seq,
            switchboard_model::rfc3339_millis(e.at_ms),
            e.webhook_id.as_deref().unwrap_or("-"),
        );
        if let Some(v) = e.version {
            let _ = write!(text, "  version {v}");
        }
        if let Some(p) = e.detail.get("proposed_by") {
            let _ = write!(text, "  proposed by {p}");
        }
        if !e.approvers.is_empty() {
            let _ = write!(text, "  approved by {}", e.approvers.join(", "));
        }
        let _ = writeln!(text, "  {}", &c.hash[..c.hash.len().min(12)]);
    }
    if let Some(next) = out.next_after_seq {
        let _ = writeln!(text, "next after: {next}");
    }
    text
}
