//! `confirm`: applying exactly the plan a token names, once, or refusing it.

use super::*;
use switchboard_model::approval;
use switchboard_model::{ChangeProvenance, ConfigurationChange, ProposedBy};

impl RulePacks {
    /// Applies exactly the candidate a plan described, in one transaction under the
    /// webhook's row lock; the store consumes the token in the same transaction. On a webhook
    /// whose `confirm_policy` is `person`, a confirm that passes every check saves nothing and
    /// puts the plan before a person instead (issue 20). Counted by outcome (`applied`,
    /// `pending_approval` or the refusal's code).
    pub(super) async fn confirm(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        check: ConfirmCheck<'_>,
        allow: Allow,
    ) -> Result<PackAnswer, PackError> {
        let result = self
            .confirm_checked(caller, webhook_id, token, check, allow)
            .await;
        let outcome = match &result {
            Ok(PackAnswer::Pending(_)) => "pending_approval",
            Ok(_) => "applied",
            Err(e) => e.reason.as_str(),
        };
        switchboard_telemetry::metrics().plan_confirm(outcome);
        result
    }

    /// `confirm_rule_pack_plan`: the plan a token names, confirmed without repeating its
    /// arguments.
    pub async fn confirm_token(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        allow: Allow,
    ) -> Result<PackAnswer, PackError> {
        self.confirm(caller, webhook_id, token, ConfirmCheck::Token, allow)
            .await
    }

    async fn confirm_checked(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        check: ConfirmCheck<'_>,
        allow: Allow,
    ) -> Result<PackAnswer, PackError> {
        let token_hash = sha256_hex(token);
        let plan = self
            .state
            .store
            .plan_by_token(&token_hash, &caller.scope)
            .await?;
        let mismatch = |field: &str| {
            PackError::new(
                Reason::InvalidArgument,
                format!("{field} does not match the plan's; omit it or pass the planned value"),
                Details::none()
                    .fact("field", field)
                    .field(field, "does not match the plan's"),
            )
        };
        if plan.webhook_id != webhook_id {
            return Err(mismatch("webhook_id"));
        }
        let now = self.state.store.clock().now_ms();
        if plan.used_at.is_some() || plan.rejected_at.is_some() || plan.expires_at <= now {
            // Against its own base version: whether the webhook moved on is asked below.
            let cause = StaleCause::of(&plan.facts(), now, plan.base_config_version);
            return Err(stale(cause.unwrap_or(StaleCause::Expired)));
        }
        let apply = &plan.plan.apply;
        match check {
            ConfirmCheck::Install(args) => {
                if apply.kind == PlanKind::Remove || plan.pack_name != args.name {
                    return Err(mismatch("name"));
                }
                if let Some(v) = &args.version
                    && !switchboard_packs::catalog::version_matches(&plan.pack_version, v)
                {
                    return Err(mismatch("version"));
                }
                confirm_arguments_match(apply, args).map_err(mismatch)?;
            }
            ConfirmCheck::Remove(args) => {
                if apply.kind != PlanKind::Remove || plan.pack_name != args.name {
                    return Err(mismatch("name"));
                }
                if let Some(keep) = &args.keep_params
                    && as_set(keep) != as_set(planned_keep_params(apply))
                {
                    return Err(mismatch("keep_params"));
                }
            }
            ConfirmCheck::Token => {}
        }
        let (proven, truncated) = (apply.proven, apply.truncated);
        if (!proven || truncated) && !allow.unproven {
            return Err(PackError::new(
                Reason::Unproven,
                "this plan is unproven (no delivery of the pack's source types was replayed, or the replay was truncated); confirm again with allow_unproven: true to apply it anyway",
                Details::none()
                    .fact("proven", proven)
                    .fact("truncated", truncated),
            ));
        }
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, webhook_id)
            .await?;
        if webhook.config_version != plan.base_config_version {
            return Err(stale(StaleCause::ConfigurationChanged));
        }
        if let Some(trial) = &apply.trial {
            self.check_trial(&caller.scope, trial, allow.insufficient_trial)
                .await?;
        }
        let proposer = Actor {
            endpoint_id: Some(caller.endpoint_id.clone()),
            human_login: Some(caller.human.clone()),
        };
        if webhook.confirm_policy == ConfirmPolicy::Person {
            // ADR-0028: an agent's acceptance puts nothing live.
            let until = self.state.store.clock().now_ms()
                + i64::try_from(self.state.limits.approval_ttl.as_millis()).unwrap_or(i64::MAX);
            let pending = self
                .state
                .store
                .mark_plan_pending(&token_hash, &caller.scope, &proposer, until)
                .await?;
            let approvals = self.approvals(&pending, &webhook).await?;
            return Ok(PackAnswer::Pending(Box::new(
                self.pending(&pending, approvals),
            )));
        }
        self.save_plan(plan, &webhook, token_hash, proposer, None)
            .await
            .map(|a| PackAnswer::Applied(Box::new(a)))
    }

    /// A person accepts a plan awaiting them (issues 20, 47): the acceptance is recorded as
    /// an approval bound to the plan's digest, and exactly that plan is applied once the
    /// webhook's approval rule is met ([`switchboard_model::approval::tally`]), with the same
    /// single-use, stale and expiry checks as a confirm, the person as the actor, and
    /// provenance naming who proposed and who approved. `scopes` are the person's (with the
    /// editor role, checked by the caller); another scope's plan is `not_found`. Two people
    /// giving the last approval at once apply it once: the save consumes the plan's token.
    pub async fn accept(
        &self,
        person: &str,
        scopes: &[OwnerScope],
        plan_id: &str,
    ) -> Result<Accepted, PackError> {
        let mut plan = self.state.store.plan_for_person(plan_id, scopes).await?;
        let now = self.state.store.clock().now_ms();
        let webhook = self
            .state
            .store
            .get_webhook(&plan.owner_scope, &plan.webhook_id)
            .await?;
        if plan.used_at.is_none() && plan.base_config_version != webhook.config_version {
            // Another person's acceptance may have applied this very plan between the two
            // reads: read it again, so they are told it is applied, not that it went stale.
            plan = self.state.store.plan_for_person(plan_id, scopes).await?;
        }
        let (state, _) = plan.facts().state(now, webhook.config_version);
        if state != PlanState::PendingApproval {
            return Err(PackError::new(
                Reason::PlanStale,
                format!(
                    "the plan is {}, not awaiting a person; only a pending plan can be accepted",
                    state.as_str()
                ),
                Details::none().fact("state", state.as_str()).stale(
                    StaleCause::of(&plan.facts(), now, webhook.config_version)
                        .unwrap_or(StaleCause::NotPending),
                    "plan",
                ),
            ));
        }
        if let Some(trial) = &plan.plan.apply.trial {
            // The person sees the trial beside the replay: accepting is their opt-in.
            self.check_trial(&plan.owner_scope, trial, true).await?;
        }
        let digest = approval::plan_digest(&plan.plan, &plan.candidate_digest);
        let given = match self
            .state
            .store
            .record_approval(&plan.id, &plan.owner_scope, person, &digest)
            .await
        {
            Ok(given) => given,
            Err(e) => {
                let e = PackError::from(e);
                if !self
                    .applied_by_another(&e, &plan.id, &plan.owner_scope)
                    .await?
                {
                    return Err(e);
                }
                let given = self.state.store.plan_approvals(&plan.id).await?;
                let tally = approval_tally(&plan, &webhook, &webhook.configuration, &given);
                return Ok(Accepted::AppliedByAnother(tally));
            }
        };
        let tally = approval_tally(&plan, &webhook, &webhook.configuration, &given);
        if !tally.met() {
            switchboard_telemetry::metrics().plan_confirm("approval_recorded");
            return Ok(Accepted::Waiting(tally));
        }
        let token_hash = self.state.store.plan_token_hash(&plan.id).await?;
        let approval = Approval {
            proposed_by: Actor {
                endpoint_id: plan.proposed_by_endpoint.clone(),
                human_login: plan.proposed_by_human.clone(),
            },
            approved_by: person.to_string(),
            approvers: tally.approvers(),
            plan_digest: digest,
        };
        let actor = Actor {
            endpoint_id: None,
            human_login: Some(person.to_string()),
        };
        let plan_id = plan.id.clone();
        let scope = plan.owner_scope.clone();
        let result = self
            .save_plan(plan, &webhook, token_hash, actor, Some(approval))
            .await;
        let outcome = result
            .as_ref()
            .map_or_else(|e| e.reason.as_str(), |_| "accepted");
        switchboard_telemetry::metrics().plan_confirm(outcome);
        match result {
            Ok(applied) => Ok(Accepted::Applied(Box::new(applied), tally)),
            Err(e) if self.applied_by_another(&e, &plan_id, &scope).await? => {
                Ok(Accepted::AppliedByAnother(tally))
            }
            Err(e) => Err(e),
        }
    }

    /// Whether `e`, refusing a person's acceptance as stale, is another person's approval
    /// having met the rule at the same moment and applied the plan.
    async fn applied_by_another(
        &self,
        e: &PackError,
        plan_id: &str,
        scope: &OwnerScope,
    ) -> Result<bool, PackError> {
        if e.reason != Reason::PlanStale {
            return Ok(false);
        }
        let again = self
            .state
            .store
            .plan_for_person(plan_id, std::slice::from_ref(scope))
            .await?;
        Ok(again.used_at.is_some())
    }

    /// Where a plan's approvals stand under its webhook's rule (issue 47). Its risks are
    /// counted against the configuration it replaces: the webhook's saved one while it is
    /// pending, and once applied the version it was planned against (the saved one has moved
    /// on to the plan's own), so what counted at the final accept is what is shown after.
    pub async fn approvals(
        &self,
        plan: &crate::store::Plan,
        webhook: &Webhook,
    ) -> Result<approval::Tally, PackError> {
        let given = self.state.store.plan_approvals(&plan.id).await?;
        let replaced = match plan.used_at {
            Some(_) => self
                .state
                .store
                .history_version(
                    &plan.owner_scope,
                    &plan.webhook_id,
                    plan.base_config_version,
                )
                .await?
                .map(|h| h.configuration),
            None => None,
        };
        let before = replaced.as_ref().unwrap_or(&webhook.configuration);
        Ok(approval_tally(plan, webhook, before, &given))
    }

    /// A person rejects a plan awaiting them, saying why; it can never be applied after.
    pub async fn reject(
        &self,
        person: &str,
        scopes: &[OwnerScope],
        plan_id: &str,
        reason: &str,
    ) -> Result<(), PackError> {
        let plan = self.state.store.plan_for_person(plan_id, scopes).await?;
        self.state
            .store
            .reject_plan(&plan.id, &plan.owner_scope, person, reason)
            .await?;
        switchboard_telemetry::metrics().plan_confirm("rejected");
        Ok(())
    }

    /// Where a plan stands (`get_rule_pack_plan`): read-only; another scope's token is
    /// `not_found`, like an unknown one.
    pub async fn plan_status(&self, caller: &Caller, token: &str) -> Result<PlanStatus, PackError> {
        let plan = self
            .state
            .store
            .plan_by_token(&sha256_hex(token), &caller.scope)
            .await?;
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, &plan.webhook_id)
            .await?;
        let (state, stale_reason) = plan
            .facts()
            .state(self.state.store.clock().now_ms(), webhook.config_version);
        let kind = plan.plan.apply.kind;
        let guard = match plan.used_at {
            Some(_) => self
                .state
                .store
                .guard_of_plan(&caller.scope, &plan.id)
                .await?
                .map(|g| crate::trials::guards::report(&self.state.trials_ctx(), &g)),
            None => None,
        };
        let approvals = match plan.pending_at {
            Some(_) => Some(self.approvals(&plan, &webhook).await?),
            None => None,
        };
        Ok(PlanStatus {
            guard,
            approvals,
            console_url: (state == PlanState::PendingApproval)
                .then(|| self.state.console_plan_url(&plan.id)),
            state,
            stale_reason,
            kind,
            plan,
        })
    }

    /// The answer to a confirm that put `plan` before a person.
    fn pending(&self, plan: &crate::store::Plan, approvals: approval::Tally) -> Pending {
        Pending {
            saved: false,
            state: PlanState::PendingApproval,
            plan_id: plan.id.clone(),
            webhook_id: plan.webhook_id.clone(),
            kind: plan.plan.apply.kind,
            pack: AppliedPack {
                name: plan.pack_name.clone(),
                version: plan.pack_version.clone(),
            },
            console_url: self.state.console_plan_url(&plan.id),
            approval_expires_at: rfc3339(plan.approval_expires_at.unwrap_or(plan.expires_at)),
            approvals,
        }
    }

    /// Saves a checked plan's candidate on `webhook` (as the caller just read it), consuming
    /// its token in the same transaction. The pack is recorded as installed by whoever proposed
    /// it: the confirming endpoint, or the endpoint a person approved.
    async fn save_plan(
        &self,
        mut plan: crate::store::Plan,
        webhook: &Webhook,
        token_hash: String,
        actor: Actor,
        approval: Option<Approval>,
    ) -> Result<Applied, PackError> {
        let apply = std::mem::take(&mut plan.plan.apply);
        let kind = apply.kind;
        let (proven, truncated) = (apply.proven, apply.truncated);
        let proposer = approval.as_ref().map_or(&actor, |a| &a.proposed_by);
        let installed_by = InstalledBy {
            endpoint: proposer.endpoint_id.clone().unwrap_or_default(),
            human: proposer.human_login.clone().unwrap_or_default(),
        };
        let configuration: Configuration = std::mem::take(&mut plan.candidate);
        // No widening: validated against the grant again at apply.
        self.replayer
            .validate_candidate(
                &configuration,
                &routing_context(webhook, &self.state.capabilities),
            )
            .await?;
        let now = rfc3339(self.state.store.clock().now_ms());
        let mut installed = apply.provenance;
        if let Some(entry) = installed.iter_mut().find(|e| e.name == plan.pack_name) {
            entry.installed_at = now.clone();
            entry.installed_by = installed_by;
        }
        // Set when the plan sets them; left as they are otherwise.
        let trusted_actors = apply.trusted_actors.map(Some);
        let op = kind.verb();
        let provenance = ChangeProvenance {
            plan: plan.id.clone(),
            pack: plan.pack_name.clone(),
            version: plan.pack_version.clone(),
            proven,
            truncated,
            proposed_by: approval.as_ref().map(|a| ProposedBy {
                endpoint: a.proposed_by.endpoint_id.clone(),
                human: a.proposed_by.human_login.clone(),
            }),
            approved_by: approval.as_ref().map(|a| a.approved_by.clone()),
            approvers: approval
                .as_ref()
                .map(|a| a.approvers.clone())
                .unwrap_or_default(),
            plan_digest: approval.as_ref().map(|a| a.plan_digest.clone()),
            trial: apply.trial.as_ref().map(|t| t.trial_id.clone()),
            ..ChangeProvenance::default()
        };
        // What the guard holds the change to: the plan's replay, as the person saw it, and
        // the guard they accepted with it.
        let forecast = switchboard_model::trial::Forecast::of(&plan.plan.plan.report);
        let guard = plan.plan.plan.guard.clone();
        let started_by = actor
            .human_login
            .clone()
            .or_else(|| actor.endpoint_id.clone())
            .unwrap_or_default();
        let saved = self
            .state
            .store
            .save_configuration(
                &plan.owner_scope,
                &plan.webhook_id,
                SaveConfiguration {
                    expected_version: Some(plan.base_config_version),
                    configuration: configuration.clone(),
                    actor,
                    change: ConfigurationChange {
                        // A hand-written plan's change names no pack.
                        pack: (!plan.pack_name.is_empty()).then(|| plan.pack_name.clone()),
                        version: (!plan.pack_name.is_empty()).then(|| plan.pack_version.clone()),
                        kind: Some(kind.as_str().to_string()),
                        ..ConfigurationChange::op(op)
                    },
                    provenance: Some(provenance),
                    installed_packs: Some(installed.clone()),
                    trusted_actors,
                    plan_token_hash: Some(token_hash),
                },
            )
            .await?;
        // Issue 46: the replaced configuration now runs in the shadow of the saved one.
        let guard = crate::trials::guards::start(
            &self.state.store,
            crate::trials::guards::Confirmed {
                webhook,
                plan_id: &plan.id,
                forecast,
                guard,
                confirmed_version: saved.version,
                confirmed_digest: &saved.digest,
                started_by: &started_by,
            },
        )
        .await;
        self.state.trials.forget(&plan.webhook_id);
        Ok(Applied {
            saved: true,
            kind,
            webhook_id: plan.webhook_id.clone(),
            version: saved.version,
            digest: saved.digest,
            provenance: installed.into_iter().find(|e| e.name == plan.pack_name),
            pack: AppliedPack {
                name: plan.pack_name,
                version: plan.pack_version,
            },
            guard_id: guard.map(|g| g.id),
        })
    }
}

/// Who proposed a plan people accepted, who accepted it last (meeting the rule), everyone
/// whose approval counted, and the plan digest they approved.
struct Approval {
    proposed_by: Actor,
    approved_by: String,
    approvers: Vec<String>,
    plan_digest: String,
}

/// What a person's acceptance did.
#[derive(Debug)]
pub enum Accepted {
    /// Their approval met the rule: the plan is live.
    Applied(Box<Applied>, approval::Tally),
    /// Recorded; the rule needs more approvals (or theirs does not count).
    Waiting(approval::Tally),
    /// Recorded, and another person's approval met the rule at the same moment: the plan was
    /// applied once, by that one.
    AppliedByAnother(approval::Tally),
}

impl Accepted {
    /// What was saved, when this acceptance applied the plan.
    pub fn applied(&self) -> Option<&Applied> {
        match self {
            Accepted::Applied(a, _) => Some(a),
            _ => None,
        }
    }

    pub fn tally(&self) -> &approval::Tally {
        match self {
            Accepted::Applied(_, t) | Accepted::Waiting(t) | Accepted::AppliedByAnother(t) => t,
        }
    }
}

/// The one count of a plan's approvals: the webhook's rule (or the default), the plan's risks
/// against `before` — the configuration it replaces ([`RulePacks::approvals`] finds it) — and
/// the proposer's human, who does not count.
pub fn approval_tally(
    plan: &crate::store::Plan,
    webhook: &Webhook,
    before: &switchboard_model::Configuration,
    given: &[approval::Approval],
) -> approval::Tally {
    let rule = webhook.approval_rule();
    let stored = &plan.plan;
    let risks = approval::risks(
        &stored.plan.report,
        stored.apply.kind,
        before,
        &plan.candidate,
    );
    let digest = approval::plan_digest(stored, &plan.candidate_digest);
    approval::tally(
        &rule,
        &risks,
        plan.proposed_by_human.as_deref(),
        &digest,
        given,
    )
}

/// A plan's state, for `get_rule_pack_plan`.
pub struct PlanStatus {
    pub plan: crate::store::Plan,
    pub state: PlanState,
    pub stale_reason: Option<StaleReason>,
    pub kind: PlanKind,
    /// Where a person reviews it, while it is pending.
    pub console_url: Option<String>,
    /// Once applied: the guard its confirm started.
    pub guard: Option<switchboard_model::guard::GuardReport>,
    /// Once put before a person: where its approvals stand (issue 47).
    pub approvals: Option<approval::Tally>,
}

/// What a confirm opts into: a plan that is unproven, and one whose trial is insufficient.
#[derive(Clone, Copy, Debug, Default)]
pub struct Allow {
    pub unproven: bool,
    pub insufficient_trial: bool,
}

/// The one refusal of a plan that can no longer be applied, naming why.
pub(super) fn stale(cause: StaleCause) -> PackError {
    PackError::new(
        Reason::PlanStale,
        format!("the plan is stale: {}; plan again", cause.words()),
        Details::none().stale(cause, "plan"),
    )
}

/// What a confirm must agree with.
pub(super) enum ConfirmCheck<'a> {
    Install(&'a InstallArgs),
    Remove(&'a RemoveArgs),
    /// `confirm_rule_pack_plan`: the token alone names the plan.
    Token,
}

/// REQ-3: each confirm argument must match the plan's or be omitted, on its own: an omitted
/// `params` or `replaces` is the plan's, whatever the others are, and `overwrite_local_edits`
/// given (true) must have been planned. Names the first argument that differs. Plans stored
/// before the binding was kept whole carry only its digest; they are checked as they were.
pub(super) fn confirm_arguments_match(
    apply: &Apply,
    args: &InstallArgs,
) -> Result<(), &'static str> {
    let Some(binding) = &apply.binding else {
        if args.keep_params.as_ref().is_some_and(|k| !k.is_empty()) {
            return Err("keep_params");
        }
        if args.params.is_none() && args.replaces.is_none() {
            return Ok(());
        }
        let given = json!({
            "params": args.params.clone().unwrap_or_default(),
            "replaces": args.replaces.clone().unwrap_or_default(),
            "overwrite_local_edits": args.overwrite_local_edits,
        });
        return if sha256_hex(&canonical(&given)) == apply.binding_digest {
            Ok(())
        } else if args.params.is_some() {
            Err("params")
        } else {
            Err("replaces")
        };
    };
    let Binding::Install {
        params,
        replaces,
        overwrite_local_edits,
        keep_params,
    } = binding
    else {
        return Err("name");
    };
    if let Some(given) = &args.params
        && canonical(&Value::Object(given.clone())) != canonical(&Value::Object(params.clone()))
    {
        return Err("params");
    }
    if let Some(given) = &args.replaces
        && given != replaces
    {
        return Err("replaces");
    }
    if args.overwrite_local_edits && !overwrite_local_edits {
        return Err("overwrite_local_edits");
    }
    if let Some(keep) = &args.keep_params
        && as_set(keep) != as_set(keep_params)
    {
        return Err("keep_params");
    }
    Ok(())
}

/// Param names as a set: the same names in another order are the same argument.
fn as_set(names: &[String]) -> std::collections::BTreeSet<&str> {
    names.iter().map(String::as_str).collect()
}

/// The plan's `keep_params`: none for plans stored before the argument existed.
pub(super) fn planned_keep_params(apply: &Apply) -> &[String] {
    apply.binding.as_ref().map_or(&[], Binding::keep_params)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(json: Value) -> Apply {
        serde_json::from_value(json).expect("an apply")
    }

    fn args(params: Option<Value>, replaces: Option<&[&str]>, overwrite: bool) -> InstallArgs {
        InstallArgs {
            params: params.and_then(|p| p.as_object().cloned()),
            replaces: replaces.map(|r| r.iter().map(|s| s.to_string()).collect()),
            overwrite_local_edits: overwrite,
            ..InstallArgs::default()
        }
    }

    #[test]
    fn each_confirm_argument_is_checked_against_its_own_planned_value() {
        let binding = json!({"params": {"a": 1, "b": [2]}, "replaces": ["x", "y"], "overwrite_local_edits": false});
        let apply =
            apply(json!({"binding": binding, "binding_digest": sha256_hex(&canonical(&binding))}));
        let check = |a: InstallArgs| confirm_arguments_match(&apply, &a);
        assert_eq!(check(args(None, None, false)), Ok(()));
        // Key order does not matter; omitted replaces is the plan's.
        assert_eq!(
            check(args(Some(json!({"b": [2], "a": 1})), None, false)),
            Ok(())
        );
        assert_eq!(check(args(None, Some(&["x", "y"]), false)), Ok(()));
        assert_eq!(
            check(args(Some(json!({"a": 2, "b": [2]})), None, false)),
            Err("params")
        );
        assert_eq!(check(args(None, Some(&["y", "x"]), false)), Err("replaces"));
        assert_eq!(check(args(None, None, true)), Err("overwrite_local_edits"));
    }

    #[test]
    fn keep_params_is_a_set_in_any_order() {
        let binding = json!({"params": {}, "replaces": [], "overwrite_local_edits": false,
                             "keep_params": ["cairn_actors", "require_verified"]});
        let apply = apply(json!({"binding": binding}));
        let keep = |k: &[&str]| InstallArgs {
            keep_params: Some(k.iter().map(|s| s.to_string()).collect()),
            ..InstallArgs::default()
        };
        let check = |a: InstallArgs| confirm_arguments_match(&apply, &a);
        assert_eq!(check(keep(&["require_verified", "cairn_actors"])), Ok(()));
        assert_eq!(check(keep(&["cairn_actors", "require_verified"])), Ok(()));
        assert_eq!(check(keep(&["cairn_actors"])), Err("keep_params"));
        assert_eq!(
            check(InstallArgs::default()),
            Ok(()),
            "omitted is the plan's"
        );
    }

    #[test]
    fn a_plan_stored_with_only_the_digest_is_checked_as_before() {
        let binding =
            json!({"params": {"a": 1}, "replaces": ["x"], "overwrite_local_edits": false});
        let apply = apply(json!({"binding_digest": sha256_hex(&canonical(&binding))}));
        let check = |a: InstallArgs| confirm_arguments_match(&apply, &a);
        assert_eq!(check(args(None, None, false)), Ok(()));
        assert_eq!(
            check(args(Some(json!({"a": 1})), Some(&["x"]), false)),
            Ok(())
        );
        assert_eq!(
            check(args(Some(json!({"a": 2})), Some(&["x"]), false)),
            Err("params")
        );
    }
}
