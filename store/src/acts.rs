//! An act and who makes it (issue 47): the words the operator audit names an act with
//! ([`OperatorAction`], [`AuditRecord`]), the change-log entry an act is recorded as, and the
//! store handles whose writes are someone's acts ([`Store::by_operator`],
//! [`Store::by_person`]). Each store write an operator may make calls [`Store::record_act`]
//! in its own transaction, so the change and its record commit together or not at all.

use std::collections::BTreeMap;
use std::fmt;

use switchboard_model::change_log::{ChangeActor, ChangeEntry, ChangeKind};

use crate::Store;
use crate::error::Result;

/// The operator a bootstrap from the database is logged as: it acts without a credential.
pub(crate) const BOOTSTRAP: &str = "bootstrap";

/// What an operator did, as the audit names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperatorAction {
    BootstrapOperatorCredential,
    CreateOperatorCredential,
    RevokeOperatorCredential,
    CreateHuman,
    CreateSignInLink,
    CreateTeam,
    SetTeamMember,
    RemoveTeamMember,
    CreateWebhook,
    SetWebhookGrant,
    SetWebhookConfirmPolicy,
    SetWebhookGuardDefault,
    SetWebhookApprovalRule,
    SetWebhookClaimTtl,
    SetGrantAllowance,
    ClearGrantAllowance,
    VendEndpoint,
    RevokeEndpoint,
    DeleteWebhook,
    RenameWebhook,
    DeleteHuman,
    DeleteTeam,
}

impl OperatorAction {
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorAction::BootstrapOperatorCredential => "bootstrap_operator_credential",
            OperatorAction::CreateOperatorCredential => "create_operator_credential",
            OperatorAction::RevokeOperatorCredential => "revoke_operator_credential",
            OperatorAction::CreateHuman => "create_human",
            OperatorAction::CreateSignInLink => "create_sign_in_link",
            OperatorAction::CreateTeam => "create_team",
            OperatorAction::SetTeamMember => "set_team_member",
            OperatorAction::RemoveTeamMember => "remove_team_member",
            OperatorAction::CreateWebhook => "create_webhook",
            OperatorAction::SetWebhookGrant => "set_webhook_grant",
            OperatorAction::SetWebhookConfirmPolicy => "set_webhook_confirm_policy",
            OperatorAction::SetWebhookGuardDefault => "set_webhook_guard_default",
            OperatorAction::SetWebhookApprovalRule => "set_webhook_approval_rule",
            OperatorAction::SetWebhookClaimTtl => "set_webhook_claim_ttl",
            OperatorAction::SetGrantAllowance => "set_grant_allowance",
            OperatorAction::ClearGrantAllowance => "clear_grant_allowance",
            OperatorAction::VendEndpoint => "vend_endpoint",
            OperatorAction::RevokeEndpoint => "revoke_endpoint",
            OperatorAction::DeleteWebhook => "delete_webhook",
            OperatorAction::RenameWebhook => "rename_webhook",
            OperatorAction::DeleteHuman => "delete_human",
            OperatorAction::DeleteTeam => "delete_team",
        }
    }
}

impl fmt::Display for OperatorAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An audit row to write: the action, its target (`team:infra`, `wh_…`, `ep_…`) and detail.
#[derive(Clone, Debug)]
pub struct AuditRecord {
    pub action: OperatorAction,
    pub target: String,
    /// Names and values worth keeping (a role, a grant, verbs); never a secret.
    pub detail: BTreeMap<String, String>,
}

impl AuditRecord {
    pub fn new(action: OperatorAction, target: impl Into<String>) -> AuditRecord {
        AuditRecord {
            action,
            target: target.into(),
            detail: BTreeMap::new(),
        }
    }

    pub fn with(mut self, name: &str, value: impl Into<String>) -> AuditRecord {
        self.detail.insert(name.to_string(), value.into());
        self
    }
}

/// An audit row's id: its time and this process's count of audit rows, then random bits, so
/// rows of one millisecond list newest first in the order they were written (the listing
/// orders by `at`, then `id`).
fn audit_id(at: i64) -> Result<String> {
    static WRITTEN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = WRITTEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(format!(
        "au_{:013x}{n:08x}{}",
        at.max(0),
        crate::secrets::random_hex(8)?
    ))
}

/// What kind of change an operator's act is, by the audit's action word.
fn operator_kind(action: &str) -> ChangeKind {
    match action {
        "set_webhook_confirm_policy" => ChangeKind::ConfirmPolicy,
        "set_webhook_approval_rule" => ChangeKind::ApprovalRules,
        "set_webhook_grant" | "create_webhook" => ChangeKind::Grant,
        "set_grant_allowance" | "clear_grant_allowance" => ChangeKind::GrantAllowance,
        "delete_webhook" => ChangeKind::WebhookDelete,
        "vend_endpoint" => ChangeKind::EndpointVend,
        "revoke_endpoint" => ChangeKind::EndpointRevoke,
        "bootstrap_operator_credential"
        | "create_operator_credential"
        | "revoke_operator_credential" => ChangeKind::OperatorCredential,
        _ => ChangeKind::Operator,
    }
}

/// The change-log entry of an operator's act (an operator-audit row).
pub(crate) fn operator_entry(
    at: i64,
    operator_id: Option<&str>,
    action: &str,
    target: &str,
    detail: &BTreeMap<String, String>,
) -> ChangeEntry {
    let mut detail = detail.clone();
    detail.insert("action".into(), action.into());
    detail.insert("target".into(), target.into());
    ChangeEntry {
        seq: 0,
        at_ms: at,
        kind: operator_kind(action),
        actor: ChangeActor {
            operator: Some(operator_id.unwrap_or(BOOTSTRAP).to_string()),
            ..ChangeActor::default()
        },
        approvers: Vec::new(),
        owner_scope: None,
        webhook_id: target.starts_with("wh_").then(|| target.to_string()),
        version: None,
        digest_before: None,
        digest_after: None,
        evidence: BTreeMap::new(),
        detail,
        prev_hash: String::new(),
    }
}

/// Who a store handle's writes are made by ([`Store::by_operator`], [`Store::by_person`]).
#[derive(Clone, Debug)]
pub(crate) enum Acting {
    /// An operator credential's id.
    Operator(String),
    /// A person's login, acting on the console.
    Person(String),
    /// An endpoint and the human it acts for (an agent's call).
    Endpoint { endpoint: String, human: String },
}

impl Store {
    /// This store, its writes made by the operator `operator_id`: each change an operator may
    /// make (a webhook's grant and policies, an allowance, an endpoint, a team, a human)
    /// records the act — its change-log entry, which the operator audit lists — in the
    /// change's own transaction, so a change is never without its record and a refused one
    /// records nothing.
    pub fn by_operator(&self, operator_id: &str) -> Store {
        Store {
            acting: Some(Acting::Operator(operator_id.to_string())),
            ..self.clone()
        }
    }

    /// This store, its writes made at setup without a credential (`switchboard up`'s dev
    /// human, webhook, allowance and endpoint): recorded as a bootstrap's acts.
    pub fn by_bootstrap(&self) -> Store {
        self.by_operator(BOOTSTRAP)
    }

    /// This store, its writes made by the person `login` on the console: recorded in the
    /// change log as [`Store::by_operator`]'s are, with the person as the actor.
    pub fn by_person(&self, login: &str) -> Store {
        Store {
            acting: Some(Acting::Person(login.to_string())),
            ..self.clone()
        }
    }

    /// This store, its writes made by the endpoint `endpoint_id` acting for `human`: the
    /// entries its changes append (a redrive applied) name them.
    pub fn by_endpoint(&self, endpoint_id: &str, human: &str) -> Store {
        Store {
            acting: Some(Acting::Endpoint {
                endpoint: endpoint_id.to_string(),
                human: human.to_string(),
            }),
            ..self.clone()
        }
    }

    /// Who this handle's writes are made by, as the change log names an actor (nobody: the
    /// default, for Switchboard's own writes such as a guard's recovery).
    pub(crate) fn acting_actor(&self) -> ChangeActor {
        match &self.acting {
            None => ChangeActor::default(),
            Some(Acting::Operator(id)) => ChangeActor {
                operator: Some(id.clone()),
                ..Default::default()
            },
            Some(Acting::Person(login)) => ChangeActor {
                human: Some(login.clone()),
                ..Default::default()
            },
            Some(Acting::Endpoint { endpoint, human }) => ChangeActor {
                endpoint: Some(endpoint.clone()),
                human: Some(human.clone()),
                operator: None,
            },
        }
    }

    /// Records the act of whoever this handle acts for, in the change's transaction `conn`;
    /// nothing when it acts for no one (a bare store: tests; every caller in Switchboard names
    /// who acts).
    pub(crate) async fn record_act(
        &self,
        conn: &mut sqlx::AnyConnection,
        scope: Option<&crate::OwnerScope>,
        record: AuditRecord,
    ) -> Result<()> {
        match &self.acting {
            None => Ok(()),
            Some(Acting::Operator(id)) => {
                self.audit_in(conn, self.now(), Some(id), scope, &record)
                    .await
            }
            Some(Acting::Person(_) | Acting::Endpoint { .. }) => {
                let mut entry = operator_entry(
                    self.now(),
                    None,
                    record.action.as_str(),
                    &record.target,
                    &record.detail,
                );
                entry.actor = self.acting_actor();
                entry.owner_scope = scope.map(ToString::to_string);
                self.append_change(conn, entry).await.map(|_| ())
            }
        }
    }

    /// Writes an operator's act: its change-log entry, and on a schema before the audit was
    /// the log's view (migration 0021), its `operator_audit` row as well.
    pub(crate) async fn audit_in(
        &self,
        conn: &mut sqlx::AnyConnection,
        at: i64,
        operator_id: Option<&str>,
        scope: Option<&crate::OwnerScope>,
        record: &AuditRecord,
    ) -> Result<()> {
        if !self.audit_view {
            sqlx::query(
                "INSERT INTO operator_audit (id, at, operator_id, action, target, detail) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(audit_id(at)?)
            .bind(at)
            .bind(operator_id)
            .bind(record.action.as_str())
            .bind(record.target.as_str())
            .bind(serde_json::to_string(&record.detail)?)
            .execute(&mut *conn)
            .await?;
        }
        let mut entry = operator_entry(
            at,
            operator_id,
            record.action.as_str(),
            &record.target,
            &record.detail,
        );
        // The scope it changed, when it names one: its owners read it with their log.
        entry.owner_scope = scope.map(ToString::to_string);
        self.append_change(conn, entry).await.map(|_| ())
    }
}
