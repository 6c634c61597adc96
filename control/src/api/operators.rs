//! The `Operators` service (issue 21 item 1): what `switchboard admin` calls. Every call
//! carries an operator credential (`sbo_…`, [`crate::store::OperatorCredential`]); endpoint
//! credentials live in another table and answer here exactly as unknown ones. Every change
//! is made through [`crate::store::Store::by_operator`], so the store records the act in the
//! change log (which the audit lists) in the change's own transaction; a refused or failed
//! call records nothing.

use std::str::FromStr;

use switchboard_model::guard::OnBreach;

use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::operators_server::Operators;
use switchboard_proto::convert::time;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::convert;
use super::respond;
use super::status::ApiError;
use crate::scope::{OwnerScope, Role};
use crate::state::ControlState;
use crate::store::{
    Actor, ConfirmPolicy, Endpoint, GrantAllowance, NewEndpoint, NewWebhook, OperatorCredential,
    Webhook, within_allowance,
};
use crate::verbs;

pub struct OperatorsApi {
    state: ControlState,
}

impl OperatorsApi {
    pub fn new(state: ControlState) -> Self {
        Self { state }
    }

    /// The operator behind the call's credential. Missing, unknown, revoked and endpoint
    /// credentials are all `unauthenticated`, the last three alike.
    async fn operator(&self, metadata: &MetadataMap) -> Result<OperatorCredential, ApiError> {
        let credential = super::auth::bearer(metadata).ok_or(ApiError::Unauthenticated(
            "send an operator credential as `authorization: Bearer <credential>`",
        ))?;
        self.state
            .store
            .authenticate_operator(credential)
            .await?
            .ok_or(ApiError::Unauthenticated(
                "the credential is unknown or revoked",
            ))
    }

    /// An operator names a webhook by id alone; its scope comes from the store.
    async fn webhook(&self, id: &str) -> Result<Webhook, ApiError> {
        Ok(self.state.store.webhook_for_ingest(id).await?)
    }
}

fn scope(text: &str) -> Result<OwnerScope, ApiError> {
    OwnerScope::from_str(text).map_err(|m| ApiError::invalid("owner_scope", m))
}

// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
fn human(h: crate::store::Human) -> pb::Human {
    pb::Human {
        login: h.login,
        display_name: h.display_name.unwrap_or_default(),
        created_at_ms: h.created_at,
        created_at: Some(time::from_millis(h.created_at)),
    }
}

// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
fn team(t: crate::store::Team) -> pb::Team {
    pb::Team {
        slug: t.slug,
        name: t.name,
        created_at_ms: t.created_at,
        created_at: Some(time::from_millis(t.created_at)),
    }
}

fn allowance(a: GrantAllowance) -> pb::GrantAllowance {
    pb::GrantAllowance {
        owner_scope: a.owner_scope.to_string(),
        queues: a.queues,
    }
}

// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
fn endpoint(e: Endpoint) -> pb::Endpoint {
    pb::Endpoint {
        id: e.id,
        name: e.name,
        human: e.human_login,
        owner_scope: e.owner_scope.to_string(),
        verbs: e.verbs,
        created_at_ms: e.created_at,
        created_at: Some(time::from_millis(e.created_at)),
        revoked_at_ms: e.revoked_at,
        revoked_at: e.revoked_at.map(time::from_millis),
    }
}

// The deprecated `*_ms` / RFC 3339 text fields are filled beside their Timestamps for one release.
#[allow(deprecated)]
/// An operator credential as the API answers it (never its token).
pub fn operator_credential(c: OperatorCredential) -> pb::OperatorCredential {
    pb::OperatorCredential {
        id: c.id,
        name: c.name,
        created_at_ms: c.created_at,
        created_at: Some(time::from_millis(c.created_at)),
        revoked_at_ms: c.revoked_at,
        revoked_at: c.revoked_at.map(time::from_millis),
        created_by: c.created_by.unwrap_or_default(),
    }
}

/// Queues the saved rules (and default action) route to that the grant does not hold.
pub fn queues_outside_grant(w: &Webhook) -> Result<Vec<String>, crate::Error> {
    let config = w.configuration.clone();
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
    Ok(outside)
}

/// What an endpoint asked for would be able to call, grouped by family: the consent step.
fn families(expanded: &[&'static str]) -> Vec<pb::VerbFamilyGrant> {
    verbs::group_by_family(expanded)
        .into_iter()
        .map(|(family, held)| pb::VerbFamilyGrant {
            family: family.to_string(),
            whole_family: verbs::Family::parse(family)
                .is_some_and(|f| f.verbs().len() == held.len()),
            verbs: held.into_iter().map(str::to_string).collect(),
        })
        .collect()
}

#[tonic::async_trait]
impl Operators for OperatorsApi {
    async fn create_human(
        &self,
        request: Request<pb::CreateHumanRequest>,
    ) -> Result<Response<pb::CreateHumanResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let h = self
                .state
                .store
                .by_operator(&op.id)
                .create_human(&r.login, r.display_name.as_deref())
                .await?;
            Ok(pb::CreateHumanResponse {
                human: Some(human(h)),
            })
        })
        .await
    }

    async fn list_humans(
        &self,
        request: Request<pb::ListHumansRequest>,
    ) -> Result<Response<pb::ListHumansResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let page = self
                .state
                .store
                .list_humans_page(&convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListHumansResponse {
                humans: page.items.into_iter().map(human).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn delete_human(
        &self,
        request: Request<pb::DeleteHumanRequest>,
    ) -> Result<Response<pb::DeleteHumanResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.into_inner();
            let gone = self
                .state
                .store
                .by_operator(&op.id)
                .delete_human(&r.login)
                .await?;
            tracing::info!(human = %r.login, endpoints = gone.endpoints, "human deleted");
            Ok(pb::DeleteHumanResponse {
                login: r.login,
                endpoints_deleted: gone.endpoints,
                memberships_removed: gone.memberships,
            })
        })
        .await
    }

    async fn create_sign_in_link(
        &self,
        request: Request<pb::CreateSignInLinkRequest>,
    ) -> Result<Response<pb::CreateSignInLinkResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let ttl = crate::console::SIGN_IN_LINK_TTL;
            let token = self
                .state
                .store
                .by_operator(&op.id)
                .create_sign_in_link(&r.login, i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX))
                .await?;
            let base = r
                .console_url
                .as_deref()
                .or(self.state.console_base.as_deref());
            Ok(pb::CreateSignInLinkResponse {
                url: crate::console::sign_in_url(base, &token),
                valid_for_secs: i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX),
            })
        })
        .await
    }

    async fn create_team(
        &self,
        request: Request<pb::CreateTeamRequest>,
    ) -> Result<Response<pb::CreateTeamResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let t = self
                .state
                .store
                .by_operator(&op.id)
                .create_team(&r.slug, r.name.as_deref().unwrap_or(&r.slug))
                .await?;
            Ok(pb::CreateTeamResponse {
                team: Some(team(t)),
            })
        })
        .await
    }

    async fn list_teams(
        &self,
        request: Request<pb::ListTeamsRequest>,
    ) -> Result<Response<pb::ListTeamsResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let page = self
                .state
                .store
                .list_teams_page(&convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListTeamsResponse {
                teams: page.items.into_iter().map(team).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn delete_team(
        &self,
        request: Request<pb::DeleteTeamRequest>,
    ) -> Result<Response<pb::DeleteTeamResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.into_inner();
            let gone = self
                .state
                .store
                .by_operator(&op.id)
                .delete_team(&r.slug)
                .await?;
            tracing::info!(team = %r.slug, endpoints = gone.endpoints, "team deleted");
            Ok(pb::DeleteTeamResponse {
                slug: r.slug,
                endpoints_deleted: gone.endpoints,
                memberships_removed: gone.memberships,
            })
        })
        .await
    }

    async fn set_team_member(
        &self,
        request: Request<pb::SetTeamMemberRequest>,
    ) -> Result<Response<pb::SetTeamMemberResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let role = Role::from_str(&r.role).map_err(|m| ApiError::invalid("role", m))?;
            let m = self
                .state
                .store
                .by_operator(&op.id)
                .set_membership(&r.team, &r.login, role)
                .await?;
            Ok(pb::SetTeamMemberResponse {
                team: m.team_slug,
                login: m.human_login,
                role: m.role.as_str().to_string(),
            })
        })
        .await
    }

    async fn remove_team_member(
        &self,
        request: Request<pb::RemoveTeamMemberRequest>,
    ) -> Result<Response<pb::RemoveTeamMemberResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.into_inner();
            self.state
                .store
                .by_operator(&op.id)
                .remove_membership(&r.team, &r.login)
                .await?;
            Ok(pb::RemoveTeamMemberResponse {
                team: r.team,
                login: r.login,
            })
        })
        .await
    }

    async fn deprovision_webhook(
        &self,
        request: Request<pb::DeprovisionWebhookRequest>,
    ) -> Result<Response<pb::DeprovisionWebhookResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let current = self.webhook(&request.get_ref().webhook_id).await?;
            self.state
                .store
                .by_operator(&op.id)
                .delete_webhook(&current.owner_scope, &current.id)
                .await?;
            Ok(pb::DeprovisionWebhookResponse {
                webhook_id: current.id,
            })
        })
        .await
    }

    async fn provision_webhook(
        &self,
        request: Request<pb::ProvisionWebhookRequest>,
    ) -> Result<Response<pb::ProvisionWebhookResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.into_inner();
            let w = self
                .state
                .store
                .by_operator(&op.id)
                .create_webhook(NewWebhook {
                    owner_scope: scope(&r.owner_scope)?,
                    source_type: convert::source_type_from(r.source_type)?,
                    secret: r.secret,
                    grant: r.grant,
                    reject_unverified: r.reject_unverified,
                    name: convert::webhook_name(&r.name)?,
                    configuration: None,
                    actor: Actor::operator(),
                })
                .await?;
            Ok(pb::ProvisionWebhookResponse {
                webhook: Some(convert::webhook(&w)),
                secret: w.secret,
            })
        })
        .await
    }

    async fn list_scope_webhooks(
        &self,
        request: Request<pb::ListScopeWebhooksRequest>,
    ) -> Result<Response<pb::ListScopeWebhooksResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let scope = scope(&r.owner_scope)?;
            let page = self
                .state
                .store
                .list_webhooks_page(&scope, &convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListScopeWebhooksResponse {
                webhooks: page.items.iter().map(convert::webhook).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn set_webhook_grant(
        &self,
        request: Request<pb::SetWebhookGrantRequest>,
    ) -> Result<Response<pb::SetWebhookGrantResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let current = self.webhook(&r.webhook_id).await?;
            let w = self
                .state
                .store
                .by_operator(&op.id)
                .set_webhook_grant(&current.owner_scope, &current.id, &r.grant)
                .await?;
            Ok(pb::SetWebhookGrantResponse {
                routed_outside_grant: queues_outside_grant(&w)?,
                webhook: Some(convert::webhook(&w)),
            })
        })
        .await
    }

    async fn set_webhook_name(
        &self,
        request: Request<pb::SetWebhookNameRequest>,
    ) -> Result<Response<pb::SetWebhookNameResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let name = convert::webhook_name(&r.name)?;
            let current = self.webhook(&r.webhook_id).await?;
            let w = self
                .state
                .store
                .by_operator(&op.id)
                .set_webhook_name(&current.owner_scope, &current.id, name.as_ref())
                .await?;
            Ok(pb::SetWebhookNameResponse {
                webhook: Some(convert::webhook(&w)),
            })
        })
        .await
    }

    async fn set_webhook_confirm_policy(
        &self,
        request: Request<pb::SetWebhookConfirmPolicyRequest>,
    ) -> Result<Response<pb::SetWebhookConfirmPolicyResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let policy =
                ConfirmPolicy::from_str(&r.policy).map_err(|m| ApiError::invalid("policy", m))?;
            let current = self.webhook(&r.webhook_id).await?;
            let w = self
                .state
                .store
                .by_operator(&op.id)
                .set_confirm_policy(&current.owner_scope, &current.id, policy)
                .await?;
            Ok(pb::SetWebhookConfirmPolicyResponse {
                webhook: Some(convert::webhook(&w)),
            })
        })
        .await
    }

    async fn set_webhook_guard_default(
        &self,
        request: Request<pb::SetWebhookGuardDefaultRequest>,
    ) -> Result<Response<pb::SetWebhookGuardDefaultResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let word = r.on_breach.trim();
            let on_breach = match word {
                "" => None,
                w => Some(OnBreach::parse(w).ok_or_else(|| {
                    ApiError::invalid(
                        "on_breach",
                        "must be revert or alert (empty: the default, revert)",
                    )
                })?),
            };
            let current = self.webhook(&r.webhook_id).await?;
            let w = self
                .state
                .store
                .by_operator(&op.id)
                .set_guard_on_breach(&current.owner_scope, &current.id, on_breach)
                .await?;
            Ok(pb::SetWebhookGuardDefaultResponse {
                webhook: Some(convert::webhook(&w)),
            })
        })
        .await
    }

    async fn set_webhook_approval_rule(
        &self,
        request: Request<pb::SetWebhookApprovalRuleRequest>,
    ) -> Result<Response<pb::SetWebhookApprovalRuleResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let rule = r
                .rule
                .as_ref()
                .map(|rule| {
                    switchboard_proto::convert::approval::approval_rule(rule).map_err(|n| {
                        ApiError::invalid(
                            "rule.tiers",
                            format!(
                                "risk {n} is not one of lost_work, removes_pack, default_action, widens_quarantine"
                            ),
                        )
                    })
                })
                .transpose()?;
            let current = self.webhook(&r.webhook_id).await?;
            let w = self.state.store.by_operator(&op.id).set_approval_rule(&current.owner_scope, &current.id, rule.as_ref())
                .await?;
            Ok(pb::SetWebhookApprovalRuleResponse {
                webhook: Some(convert::webhook(&w)),
            })
        })
        .await
    }

    async fn set_webhook_claim_ttl(
        &self,
        request: Request<pb::SetWebhookClaimTtlRequest>,
    ) -> Result<Response<pb::SetWebhookClaimTtlResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let current = self.webhook(&r.webhook_id).await?;
            let w = self
                .state
                .store
                .by_operator(&op.id)
                .set_claim_ttl(
                    &current.owner_scope,
                    &current.id,
                    r.ttl_secs.map(std::time::Duration::from_secs),
                )
                .await
                // The store names the lease; this request's field is `ttl_secs`.
                .map_err(|e| match e {
                    crate::error::Error::InvalidArgument {
                        field: "claim_ttl",
                        message,
                    } => crate::error::Error::InvalidArgument {
                        field: "ttl_secs",
                        message,
                    },
                    other => other,
                })?;
            let ttl_secs = w.claim_ttl.map(|t| t.as_secs());
            Ok(pb::SetWebhookClaimTtlResponse {
                webhook_id: w.id,
                ttl_secs,
            })
        })
        .await
    }

    async fn set_grant_allowance(
        &self,
        request: Request<pb::SetGrantAllowanceRequest>,
    ) -> Result<Response<pb::SetGrantAllowanceResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let scope = scope(&r.owner_scope)?;
            let a = self
                .state
                .store
                .by_operator(&op.id)
                .set_grant_allowance(&scope, &r.queues)
                .await?;
            let webhooks_outside = self
                .state
                .store
                .list_webhooks(&scope)
                .await?
                .into_iter()
                .filter_map(|w| {
                    within_allowance(&w.grant, &a.queues).err().map(|outside| {
                        pb::GrantOutsideAllowance {
                            webhook_id: w.id,
                            outside,
                        }
                    })
                })
                .collect();
            Ok(pb::SetGrantAllowanceResponse {
                allowance: Some(allowance(a)),
                webhooks_outside,
            })
        })
        .await
    }

    async fn get_grant_allowance(
        &self,
        request: Request<pb::GetGrantAllowanceRequest>,
    ) -> Result<Response<pb::GetGrantAllowanceResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let scope = scope(&request.get_ref().owner_scope)?;
            let a = self.state.store.grant_allowance(&scope).await?;
            Ok(pb::GetGrantAllowanceResponse {
                allowance: a.map(allowance),
            })
        })
        .await
    }

    async fn clear_grant_allowance(
        &self,
        request: Request<pb::ClearGrantAllowanceRequest>,
    ) -> Result<Response<pb::ClearGrantAllowanceResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let scope = scope(&request.get_ref().owner_scope)?;
            let cleared = self
                .state
                .store
                .by_operator(&op.id)
                .clear_grant_allowance(&scope)
                .await?;
            Ok(pb::ClearGrantAllowanceResponse { cleared })
        })
        .await
    }

    async fn list_grant_allowances(
        &self,
        request: Request<pb::ListGrantAllowancesRequest>,
    ) -> Result<Response<pb::ListGrantAllowancesResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let page = self
                .state
                .store
                .list_grant_allowances_page(&convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListGrantAllowancesResponse {
                allowances: page.items.into_iter().map(allowance).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn vend_endpoint(
        &self,
        request: Request<pb::VendEndpointRequest>,
    ) -> Result<Response<pb::VendEndpointResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let r = request.into_inner();
            let owner_scope = scope(&r.owner_scope)?;
            let expanded = verbs::expand(&r.verbs).map_err(|m| ApiError::invalid("verbs", m))?;
            if expanded.is_empty() {
                return Err(ApiError::invalid(
                    "verbs",
                    "name at least one verb or family",
                ));
            }
            let Some(role) = self
                .state
                .store
                .role_in_scope(&r.human, &owner_scope)
                .await?
            else {
                return Err(ApiError::invalid(
                    "owner_scope",
                    format!("{} holds no role in {owner_scope}: nothing vended", r.human),
                ));
            };
            let mut answer = pb::VendEndpointResponse {
                role: role.as_str().to_string(),
                families: families(&expanded),
                ..Default::default()
            };
            if !r.consent {
                return Ok(answer);
            }
            let vended = self
                .state
                .store
                .by_operator(&op.id)
                .vend_endpoint(NewEndpoint {
                    name: r.name.unwrap_or_else(|| format!("{}-agent", r.human)),
                    human_login: r.human,
                    owner_scope,
                    verbs: r.verbs,
                })
                .await?;
            let e = vended.endpoint;
            answer.vended = true;
            answer.endpoint = Some(endpoint(e));
            answer.credential = vended.credential;
            Ok(answer)
        })
        .await
    }

    async fn revoke_endpoint(
        &self,
        request: Request<pb::RevokeEndpointRequest>,
    ) -> Result<Response<pb::RevokeEndpointResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let e = self
                .state
                .store
                .by_operator(&op.id)
                .revoke_endpoint(&request.get_ref().endpoint_id)
                .await?;
            Ok(pb::RevokeEndpointResponse {
                endpoint: Some(endpoint(e)),
            })
        })
        .await
    }

    async fn list_endpoints(
        &self,
        request: Request<pb::ListEndpointsRequest>,
    ) -> Result<Response<pb::ListEndpointsResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let filter = r.owner_scope.as_deref().map(scope).transpose()?;
            let page = self
                .state
                .store
                .list_endpoints_page(filter.as_ref(), &convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListEndpointsResponse {
                endpoints: page.items.into_iter().map(endpoint).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn list_audit_entries(
        &self,
        request: Request<pb::ListAuditEntriesRequest>,
    ) -> Result<Response<pb::ListAuditEntriesResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let page = self
                .state
                .store
                .list_audit_entries(&convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListAuditEntriesResponse {
                entries: page
                    .items
                    .into_iter()
                    .map(|e| {
                        // `at_ms` is filled beside `at` for one release.
                        #[allow(deprecated)]
                        pb::AuditEntry {
                            id: e.id,
                            at_ms: e.at,
                            at: Some(time::from_millis(e.at)),
                            operator_id: e.operator_id.unwrap_or_default(),
                            action: e.action,
                            target: e.target,
                            detail: e.detail.into_iter().collect(),
                        }
                    })
                    .collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn list_changes(
        &self,
        request: Request<pb::ListChangesRequest>,
    ) -> Result<Response<pb::ListChangesResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let scope = match r.owner_scope.trim() {
                "" => None,
                s => Some(
                    s.parse::<OwnerScope>()
                        .map_err(|e| ApiError::invalid("owner_scope", e))?,
                ),
            };
            let limit = convert::change_limit(r.limit)?;
            let actor = r.actor.trim();
            // The deprecated `since_ms`/`until_ms` are read for one release.
            #[allow(deprecated)]
            let deprecated = (r.since_ms, r.until_ms);
            let (since_ms, until_ms) =
                convert::change_bounds(deprecated, (r.since.as_ref(), r.until.as_ref()))?;
            let (entries, next) = crate::change_log::read(
                &self.state.store,
                scope.as_ref(),
                switchboard_store::ChangeQuery {
                    after: r.after_seq,
                    limit,
                    webhook_id: r.webhook_id.trim(),
                    since_ms,
                    until_ms,
                },
                (!actor.is_empty()).then_some(actor),
            )
            .await?;
            Ok(pb::ListChangesResponse {
                entries: entries.iter().map(pb::ChangeLogEntry::from).collect(),
                next_after_seq: next.unwrap_or(0),
            })
        })
        .await
    }

    async fn verify_change_log(
        &self,
        request: Request<pb::VerifyChangeLogRequest>,
    ) -> Result<Response<pb::VerifyChangeLogResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            Ok(match self.state.store.verify_change_log().await? {
                Ok(head) => pb::VerifyChangeLogResponse {
                    intact: true,
                    head_seq: head.as_ref().map_or(0, |h| h.seq),
                    head_hash: head.map(|h| h.hash).unwrap_or_default(),
                    ..Default::default()
                },
                Err(broken) => pb::VerifyChangeLogResponse {
                    intact: false,
                    broken_seq: broken.seq,
                    broken: broken.to_string(),
                    ..Default::default()
                },
            })
        })
        .await
    }

    async fn create_operator_credential(
        &self,
        request: Request<pb::CreateOperatorCredentialRequest>,
    ) -> Result<Response<pb::CreateOperatorCredentialResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let minted = self
                .state
                .store
                .create_operator_credential(&request.get_ref().name, Some(&op.id))
                .await?;
            Ok(pb::CreateOperatorCredentialResponse {
                credential: Some(operator_credential(minted.credential)),
                token: minted.token,
            })
        })
        .await
    }

    async fn list_operator_credentials(
        &self,
        request: Request<pb::ListOperatorCredentialsRequest>,
    ) -> Result<Response<pb::ListOperatorCredentialsResponse>, Status> {
        respond(async {
            self.operator(request.metadata()).await?;
            let r = request.get_ref();
            let page = self
                .state
                .store
                .list_operator_credentials_page(&convert::page(&r.cursor, r.limit))
                .await?;
            Ok(pb::ListOperatorCredentialsResponse {
                credentials: page.items.into_iter().map(operator_credential).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn revoke_operator_credential(
        &self,
        request: Request<pb::RevokeOperatorCredentialRequest>,
    ) -> Result<Response<pb::RevokeOperatorCredentialResponse>, Status> {
        respond(async {
            let op = self.operator(request.metadata()).await?;
            let revoked = self
                .state
                .store
                .revoke_operator_credential(&request.get_ref().id, &op.id)
                .await?;
            Ok(pb::RevokeOperatorCredentialResponse {
                credential: Some(operator_credential(revoked)),
            })
        })
        .await
    }
}
