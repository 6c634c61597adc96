//! `promote_rule_trial` (issue 45): making a trial's candidate live is a plan like any other
//! — the candidate replayed beside the saved configuration, the pack's fixtures routed — that
//! also carries the trial's report, frozen by ending the trial as `promoted`. Its token binds
//! the trial's digest as well as the candidate's, so a confirm applies exactly the candidate
//! that was tried, on exactly that evidence, and is stale if either moved.

use super::*;
use switchboard_model::plan::TrialBinding;
use switchboard_model::trial::{TrialEnd, TrialReport};

impl RulePacks {
    /// Ends the trial as promoted (one already ended keeps its end) and plans its candidate.
    /// `plan_stale` when the saved configuration is no longer the one the trial ran beside.
    pub async fn promote_trial(
        &self,
        caller: &Caller,
        trial_id: &str,
        window: ReplayWindow,
        guard: GuardOptions,
        progress: Option<Progress>,
    ) -> Result<PackAnswer, PackError> {
        let trial_id = trial_id.trim();
        let trial = self.state.store.get_trial(&caller.scope, trial_id).await?;
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, &trial.webhook_id)
            .await?;
        if trial.end == Some(TrialEnd::Stale) || webhook.config_digest != trial.base_config_digest {
            return Err(PackError::new(
                Reason::PlanStale,
                "the webhook's configuration changed since the trial started: its evidence compares the candidate with rules that are no longer live; plan again and start a new trial",
                Details::none()
                    .fact("trial_id", &trial.id)
                    .stale(StaleCause::TrialChanged, format!("trial:{}", trial.id)),
            ));
        }
        let Some(stored) = trial.plan.clone() else {
            return Err(PackError::new(
                Reason::PlanStale,
                "this trial was started before trials kept their plan, so it cannot be promoted; plan again and start a new trial",
                Details::none()
                    .fact("trial_id", &trial.id)
                    .stale(StaleCause::TrialChanged, format!("trial:{}", trial.id)),
            ));
        };
        let Some(binding) = stored.apply.binding.clone() else {
            return Err(PackError::new(
                Reason::PlanStale,
                "the trial's plan was made by an older release and cannot be promoted; plan again and start a new trial",
                Details::none()
                    .fact("trial_id", &trial.id)
                    .stale(StaleCause::TrialChanged, format!("trial:{}", trial.id)),
            ));
        };
        let trial = if trial.running() {
            let ended = self
                .state
                .store
                .end_trial(&caller.scope, &trial.id, TrialEnd::Promoted)
                .await?;
            self.state.trials.forget(&ended.webhook_id);
            ended
        } else {
            trial
        };
        let report = crate::trials::report(&self.state.trials_ctx(), &trial);
        let plan = &stored.plan;
        let apply = &stored.apply;
        let pack_rule_ids = apply
            .provenance
            .iter()
            .find(|p| p.name == plan.pack.name)
            .filter(|_| apply.kind != PlanKind::Remove)
            .map(|p| p.rule_ids.clone())
            .unwrap_or_default();
        let candidate = Candidate {
            pack_name: plan.pack.name.clone(),
            pack_version: plan.pack.version.clone(),
            configuration: trial.candidate.clone(),
            provenance: apply.provenance.clone(),
            rule_diff: plan.rule_diff.clone(),
            param_diff: plan.param_diff.clone(),
            version_diff: plan.version_diff.clone(),
            pack_rule_ids,
            trusted_actors: apply.trusted_actors.clone(),
        };
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.replayer
            .validate_candidate(&candidate.configuration, &ctx)
            .await?;
        let pack = self.manifest(&plan.pack.name, &plan.pack.version);
        self.plan(
            caller,
            PlanRequest {
                webhook: &webhook,
                ctx: &ctx,
                pack: pack.as_ref(),
                kind: apply.kind,
                candidate,
                window: &window,
                binding,
                trial: Some(report),
                guard: &guard,
            },
            progress,
        )
        .await
    }

    /// A promotion's trial at confirm: still the evidence the plan carries, and enough unless
    /// the confirm opts in. `plan_stale` when the trial's counts moved (or it is gone).
    pub(super) async fn check_trial(
        &self,
        scope: &crate::scope::OwnerScope,
        binding: &TrialBinding,
        allow_insufficient_trial: bool,
    ) -> Result<(), PackError> {
        let trial = match self.state.store.get_trial(scope, &binding.trial_id).await {
            Ok(trial) => trial,
            Err(Error::NotFound { .. }) => return Err(stale(StaleCause::TrialChanged)),
            Err(e) => return Err(e.into()),
        };
        if crate::trials::report(&self.state.trials_ctx(), &trial).digest != binding.digest {
            return Err(stale(StaleCause::TrialChanged));
        }
        if !binding.sufficient && !allow_insufficient_trial {
            return Err(PackError::new(
                Reason::InsufficientTrial,
                "the trial behind this plan is insufficient (too few deliveries, or a transition the replay predicted was never observed; see the plan's trial.insufficient); confirm again with allow_insufficient_trial: true to apply it anyway",
                Details::none().fact("trial_id", &binding.trial_id),
            ));
        }
        Ok(())
    }
}

/// Sets a plan's trial section and binds the trial to its token.
pub(super) fn carry_trial(plan: &mut Plan, apply: &mut Apply, report: TrialReport) {
    let sufficient = report.sufficient;
    apply.trial = Some(TrialBinding {
        trial_id: report.trial_id.clone(),
        digest: report.digest.clone(),
        sufficient,
    });
    plan.trial_sufficient = Some(sufficient);
    if !sufficient {
        plan.confirm_with.arguments.allow_insufficient_trial = Some(true);
        plan.confirm_with.note.push_str(
            " The trial behind this plan is insufficient (see trial.insufficient): the confirm needs allow_insufficient_trial: true.",
        );
    }
    plan.confirm_with.note.push_str(&format!(
        " The token is bound to trial {} as reported here too; it is refused as plan_stale if the trial's counts change.",
        report.trial_id
    ));
    plan.trial = Some(report);
}
