//! `install_rule_pack` and `remove_rule_pack` without `confirm`: the candidate validated,
//! its param checks run, replayed, its fixtures routed, and the plan stored (REQ-3, REQ-4, REQ-7).

use super::*;
use switchboard_proto::control::v1::{ParamFailure, RefusalDetails, RuleFault};

impl RulePacks {
    /// `install_rule_pack`: a plan without `confirm`, the apply with it (REQ-3).
    pub async fn install(
        &self,
        caller: &Caller,
        args: InstallArgs,
        progress: Option<Progress>,
    ) -> Result<PackAnswer, PackError> {
        if let Some(token) = &args.confirm {
            return self
                .confirm(
                    caller,
                    &args.webhook_id,
                    token,
                    ConfirmCheck::Install(&args),
                    Allow {
                        unproven: args.allow_unproven,
                        insufficient_trial: false,
                    },
                )
                .await;
        }
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, &args.webhook_id)
            .await?;
        let caps = self.capabilities();
        let cp = self
            .catalog
            .resolve(&args.name, args.version.as_deref(), &caps)
            .map_err(|e| match e {
                ResolveError::UnknownPack(n) => PackError::new(
                    Reason::NotFound,
                    format!("no pack named {n}; call list_rule_packs"),
                    Details::none().fact("resource", "pack").fact("name", n),
                ),
                ResolveError::UnknownVersion { name, version } => PackError::new(
                    Reason::NotFound,
                    format!("{name} has no version {version}; call list_rule_packs"),
                    Details::none()
                        .fact("resource", "pack")
                        .fact("name", name)
                        .fact("version", version),
                ),
                ResolveError::UnavailableVersion {
                    name,
                    version,
                    reason,
                    upgrade_note,
                } => PackError::new(
                    Reason::UnavailableVersion,
                    format!("{name}@{version} is not available: {reason}"),
                    {
                        let details = Details::none()
                            .fact("name", name)
                            .fact("version", version)
                            .fact("reason", reason);
                        match upgrade_note {
                            Some(note) => details.fact("upgrade_note", note),
                            None => details,
                        }
                    },
                ),
            })?;
        let pack = cp.pack.clone();
        let saved: Configuration = webhook.configuration.clone();
        let prov = webhook.provenance.clone();
        let request = InstallRequest {
            params: args.params.clone().unwrap_or_default(),
            replaces: args.replaces.clone().unwrap_or_default(),
            overwrite_local_edits: args.overwrite_local_edits,
            keep_params: args.keep_params.clone().unwrap_or_default(),
        };
        let candidate =
            install_candidate(&saved, &prov, &pack, &request, &|n, v| self.manifest(n, v))?;
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.replayer
            .validate_candidate(&candidate.configuration, &ctx)
            .await?;
        self.run_param_checks(&pack, &candidate.configuration, &ctx)
            .await?;
        let installed = prov
            .iter()
            .find(|p| p.name == pack.name)
            .map(|p| p.version.as_str());
        let kind = match pack.semver() {
            Some(to) => switchboard_packs::plan::plan_kind_of_install(installed, &to),
            None if installed.is_some() => PlanKind::Reinstall,
            None => PlanKind::Install,
        };
        let binding = Binding::Install {
            params: args.params.clone().unwrap_or_default(),
            replaces: request.replaces,
            overwrite_local_edits: args.overwrite_local_edits,
            keep_params: request.keep_params,
        };
        self.plan(
            caller,
            PlanRequest {
                webhook: &webhook,
                ctx: &ctx,
                pack: Some(&pack),
                kind,
                candidate,
                window: &args.replay,
                binding,
                trial: None,
                guard: &args.guard,
            },
            progress,
        )
        .await
    }

    /// `remove_rule_pack`: planned and confirmed exactly as an install (REQ-7).
    pub async fn remove(
        &self,
        caller: &Caller,
        args: RemoveArgs,
        progress: Option<Progress>,
    ) -> Result<PackAnswer, PackError> {
        if let Some(token) = &args.confirm {
            return self
                .confirm(
                    caller,
                    &args.webhook_id,
                    token,
                    ConfirmCheck::Remove(&args),
                    Allow {
                        unproven: args.allow_unproven,
                        insufficient_trial: false,
                    },
                )
                .await;
        }
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, &args.webhook_id)
            .await?;
        let saved: Configuration = webhook.configuration.clone();
        let prov = webhook.provenance.clone();
        let keep_params = args.keep_params.clone().unwrap_or_default();
        let candidate = removal_candidate(&saved, &prov, &args.name, &keep_params, &|n, v| {
            self.manifest(n, v)
        })?;
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.replayer
            .validate_candidate(&candidate.configuration, &ctx)
            .await?;
        let installed = prov.iter().find(|p| p.name == args.name).cloned();
        let pack = installed
            .as_ref()
            .and_then(|i| self.manifest(&i.name, &i.version));
        self.plan(
            caller,
            PlanRequest {
                webhook: &webhook,
                ctx: &ctx,
                pack: pack.as_ref(),
                kind: PlanKind::Remove,
                candidate,
                window: &args.replay,
                binding: Binding::Remove {
                    remove: args.name,
                    keep_params,
                },
                trial: None,
                guard: &args.guard,
            },
            progress,
        )
        .await
    }

    /// `plan_webhook_rules` (issue 45): a hand-written configuration (`candidate`, already
    /// validated as a save would be) planned like a pack's change — replayed, stored with a
    /// token a confirm applies and a trial may start from. No pack: the installed packs'
    /// provenance stays as it is (hand edits of their rules show as drift, as after any
    /// save), and no rule is a pack rule, so faults are reported, never refused.
    pub async fn plan_rules(
        &self,
        caller: &Caller,
        webhook: &Webhook,
        candidate: Configuration,
        window: &ReplayWindow,
        guard: &GuardOptions,
        progress: Option<Progress>,
    ) -> Result<PackAnswer, PackError> {
        let ctx = routing_context(webhook, &self.state.capabilities);
        let rules = sha256_hex(&canonical(
            &serde_json::to_value(&candidate).unwrap_or_default(),
        ));
        let candidate = Candidate {
            pack_name: String::new(),
            pack_version: String::new(),
            rule_diff: switchboard_packs::merge::rule_diff(&webhook.configuration, &candidate, &[]),
            configuration: candidate,
            provenance: webhook.provenance.clone(),
            param_diff: Default::default(),
            version_diff: None,
            pack_rule_ids: Vec::new(),
            trusted_actors: None,
        };
        self.plan(
            caller,
            PlanRequest {
                webhook,
                ctx: &ctx,
                pack: None,
                kind: PlanKind::Rules,
                candidate,
                window,
                binding: Binding::Rules { rules },
                trial: None,
                guard,
            },
            progress,
        )
        .await
    }

    /// Evaluates every param check with the candidate's params, in the sandbox like any rule.
    pub(super) async fn run_param_checks(
        &self,
        pack: &Pack,
        candidate: &Configuration,
        ctx: &RoutingContext,
    ) -> Result<(), PackError> {
        let mut failures = Vec::new();
        for check in &pack.param_checks {
            let items: Vec<Value> = match &check.each {
                Some(param) => candidate
                    .params
                    .get(param)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
                None => vec![Value::Null],
            };
            if items.is_empty() {
                continue;
            }
            let probe = Configuration {
                rules: vec![switchboard_model::Rule {
                    id: Some(check.id.clone()),
                    description: None,
                    when: switchboard_packs::admission::param_check_expression(&check.expr),
                    action: switchboard_model::Action::Drop,
                }],
                default_action: None,
                params: candidate.params.clone(),
            };
            let deliveries: Vec<StoredDelivery> = items
                .iter()
                .enumerate()
                .map(|(i, item)| StoredDelivery {
                    event_id: format!("param-check-{i}"),
                    source: "generic".into(),
                    kind: "param_check".into(),
                    body: serde_json::to_vec(item).unwrap_or_default().into(),
                    verified: true,
                    delivery_id: format!("param-check-{i}"),
                    ..Default::default()
                })
                .collect();
            let wire = WireConfiguration::from(&probe);
            let results = self
                .state
                .routers
                .evaluate(switchboard_proto::router::v1::EvaluateRequest {
                    context: Some(ctx.clone()),
                    configurations: vec![wire],
                    deliveries,
                    budget_ms: 0,
                    // A pack's own checks, not a tenant's rules: shared interactive work.
                    work_class: WorkClass::Interactive as i32,
                    ..Default::default()
                })
                .await?;
            for (i, r) in results.iter().enumerate() {
                let Some(d) = r.decisions.first() else {
                    continue;
                };
                let failed = d.outcome != Outcome::Default as i32;
                if failed {
                    failures.push(ParamFailure {
                        param_check: check.id.clone(),
                        message: check.message.clone(),
                        param: check.each.clone().unwrap_or_default(),
                        element: check
                            .each
                            .as_ref()
                            .and_then(|_| items.get(i))
                            .map(switchboard_proto::convert::json::to_value),
                        fault: if d.outcome == Outcome::Fault as i32 {
                            d.reason.clone()
                        } else {
                            String::new()
                        },
                    });
                }
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        let first = &failures[0];
        let message = format!(
            "param check {} failed: {}{}",
            first.param_check,
            first.message,
            first
                .element
                .clone()
                .map(|e| format!(
                    " ({} {})",
                    first.param,
                    switchboard_proto::convert::json::from_value(e)
                ))
                .unwrap_or_default()
        );
        // Each failure names its field: the param checked, or the params as a whole.
        let mut details = Details::none();
        for f in &failures {
            let field = if f.param.is_empty() {
                "params".to_string()
            } else {
                format!("params.{}", f.param)
            };
            details = details.field(field, f.message.clone());
        }
        Err(PackError::new(
            Reason::InvalidParams,
            message,
            details.lists(RefusalDetails {
                failures,
                ..RefusalDetails::default()
            }),
        ))
    }

    /// Replays, routes fixtures, refuses faulting pack rules, and stores the plan.
    pub(super) async fn plan(
        &self,
        caller: &Caller,
        request: PlanRequest<'_>,
        progress: Option<Progress>,
    ) -> Result<PackAnswer, PackError> {
        let PlanRequest {
            webhook,
            ctx,
            pack,
            kind,
            candidate,
            window,
            binding,
            trial,
            guard,
        } = request;
        // Out-of-range guard options are refused before anything is replayed.
        let checked = |forecast: &switchboard_model::trial::Forecast| {
            GuardPlan::new(forecast, guard, webhook.guard_on_breach)
                .map_err(|e| PackError::from(Error::invalid(e.field, e.message)))
        };
        checked(&switchboard_model::trial::Forecast::default())?;
        let saved: Configuration = webhook.configuration.clone();
        // The candidate is replayed with the trusted actors it would set (trusted-actors@2),
        // the saved configuration with the webhook's current ones.
        let candidate_ctx = match &candidate.trusted_actors {
            Some(actors) => routing_context(
                &Webhook {
                    trusted_actors: Some(actors.clone()),
                    ..webhook.clone()
                },
                &self.state.capabilities,
            ),
            None => ctx.clone(),
        };
        let outcome = self
            .replayer
            .replay(
                caller,
                &webhook.id,
                &webhook.owner_scope,
                ReplayContexts {
                    saved: ctx,
                    candidate: &candidate_ctx,
                },
                &saved,
                &candidate.configuration,
                window,
                progress,
            )
            .await?;
        // Fixtures through the candidate, with the production router. A fixture's `want`
        // holds under its own params (over the schema defaults), so each is routed through the
        // candidate with the pack's params as the fixture gives them — everything else (other
        // packs' and hand-written rules, other params) as planned — and, for a pack that sets
        // the webhook's trusted actors, with the trusted actors those params set.
        let mut fixtures = Vec::new();
        let mut fixture_faults: Vec<(String, String)> = Vec::new();
        if kind != PlanKind::Remove
            && let Some(pack) = pack
            && !pack.fixtures.is_empty()
        {
            // Fixtures that share params share one Evaluate call (a call takes one context and
            // at most two configurations).
            let mut groups: Vec<(Configuration, Vec<usize>)> = Vec::new();
            for (n, f) in pack.fixtures.iter().enumerate() {
                let mut config = candidate.configuration.clone();
                config
                    .params
                    .extend(pack.fixture_configuration(&f.params).params);
                match groups.iter_mut().find(|(c, _)| *c == config) {
                    Some((_, members)) => members.push(n),
                    None => groups.push((config, vec![n])),
                }
            }
            let calls = groups.iter().map(|(config, members)| {
                let mut context = ctx.clone();
                if pack.sets_trusted_actors.is_some() && context.trusted_actors_capability {
                    context.trusted_actors =
                        switchboard_packs::fixtures::fixture_context(pack, config).trusted_actors;
                }
                self.state
                    .routers
                    .evaluate(switchboard_proto::router::v1::EvaluateRequest {
                        context: Some(context),
                        configurations: vec![WireConfiguration::from(config)],
                        deliveries: members
                            .iter()
                            .map(|&n| {
                                switchboard_packs::fixtures::fixture_delivery(&pack.fixtures[n], n)
                            })
                            .collect(),
                        budget_ms: 0,
                        // The candidate holds the tenant's own rules: its share, not a
                        // shared line.
                        work_class: WorkClass::Interactive as i32,
                        tenant: webhook.owner_scope.to_string(),
                        ..Default::default()
                    })
            });
            let answers = futures::future::try_join_all(calls).await?;
            let mut decided: Vec<Option<Decision>> = vec![None; pack.fixtures.len()];
            for ((_, members), results) in groups.iter().zip(answers) {
                for (&n, r) in members.iter().zip(results) {
                    decided[n] = r.decisions.into_iter().next();
                }
            }
            for (f, d) in pack.fixtures.iter().zip(decided) {
                let got = d.as_ref().map(routed).unwrap_or(Routed {
                    label: Label::Fault,
                    rule_id: None,
                });
                // Every admitted pack's fixtures want a label (`check_pack`).
                let want: Label<'static> = f.want.parse().map_err(|e| {
                    Error::internal(format!("{} fixture {}: {e}", pack.label(), f.name))
                })?;
                if got.label == Label::Fault
                    && let Some(rule) = &got.rule_id
                    && candidate.pack_rule_ids.contains(rule)
                {
                    fixture_faults.push((rule.clone(), format!("fixture:{}", f.name)));
                }
                let default_queue = ctx.grant.first().map(String::as_str).unwrap_or_default();
                let passed =
                    switchboard_packs::admission::fixture_passes(&want, &got.label, default_queue);
                fixtures.push(FixtureOutcome {
                    name: f.name.clone(),
                    want,
                    got: got.label,
                    rule: got.rule_id,
                    passed,
                });
            }
        }
        // The replay's faults first, then the fixtures', grouped by rule (REQ-4).
        let faults = switchboard_packs::plan::rule_faults(
            outcome.pack_faults(&candidate.pack_rule_ids).chain(
                fixture_faults
                    .iter()
                    .map(|(rule, id)| (id.as_str(), rule.as_str())),
            ),
        );
        if !faults.is_empty() {
            // Every faulting rule is named, each with its examples (a stopped replay's too).
            let named: Vec<String> = faults
                .iter()
                .map(|f| {
                    format!(
                        "pack rule {} faults on {} replayed deliveries or fixtures (e.g. {})",
                        f.rule,
                        f.count,
                        f.event_ids.join(", ")
                    )
                })
                .collect();
            return Err(PackError::new(
                Reason::PackRuleFaults,
                format!(
                    "{}; the plan is refused — inspect them with get_webhook_event",
                    named.join("; ")
                ),
                Details::none().lists(RefusalDetails {
                    faults: faults
                        .into_iter()
                        .map(|f| RuleFault {
                            rule: f.rule,
                            count: u32::try_from(f.count).unwrap_or(u32::MAX),
                            event_ids: f.event_ids,
                        })
                        .collect(),
                    ..RefusalDetails::default()
                }),
            ));
        }
        let mut report = replay::report_of(
            &outcome,
            &candidate.configuration,
            &candidate.provenance,
            self.state.capabilities.trusted_actors,
        );
        let source_types = pack
            .map(|p| p.requires.source_types.clone())
            .unwrap_or_default();
        let is_proven = proven(&outcome.replayed, &source_types, outcome.truncated);
        let (token, token_hash) = new_plan_token()?;
        let now = self.state.store.clock().now_ms();
        let expires_at = now + PLAN_TTL.as_millis() as i64;
        let mut provenance_after = candidate.provenance.clone();
        if let Some(p) = pack
            && kind != PlanKind::Remove
            && let Some(entry) = provenance_after.iter_mut().find(|e| e.name == p.name)
        {
            entry.proven = is_proven;
            entry.truncated = outcome.truncated;
            entry.replay = ReplaySummary {
                events_replayed: report.events_replayed,
                window_from: report.window_from.clone(),
                window_to: report.window_to.clone(),
                changed: report.changed,
                replayed_at: rfc3339(now),
            };
        }
        let name = candidate.pack_name.clone();
        let version = candidate.pack_version.clone();
        let from_version = webhook
            .provenance
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.version.clone());
        report.retention = Some(self.replayer.retention(&webhook.id).await?);
        let guard = checked(&switchboard_model::trial::Forecast::of(&report))?;
        let mut plan = Plan {
            report,
            kind,
            webhook_id: webhook.id.clone(),
            pack: PlanPack {
                name: name.clone(),
                version: version.clone(),
                from_version,
            },
            fixtures,
            rule_diff: candidate.rule_diff.clone(),
            param_diff: candidate.param_diff.clone(),
            version_diff: candidate.version_diff.clone(),
            proven: is_proven,
            nothing_saved: true,
            expires_at: rfc3339(expires_at),
            confirm_with: ConfirmWith {
                tool: CONFIRM_TOOL.into(),
                arguments: ConfirmArguments {
                    webhook_id: webhook.id.clone(),
                    plan_token: TOKEN_PLACEHOLDER.into(),
                    allow_unproven: (!is_proven).then_some(true),
                    allow_insufficient_trial: None,
                },
                note: format!(
                    "Nothing was saved. To apply exactly this plan, call {CONFIRM_TOOL} with this webhook_id and the plan_token, before {}. The token is bound to this webhook, your owner scope, {}this candidate; it is refused as plan_stale if the webhook's configuration changes first.{}",
                    rfc3339(expires_at),
                    if kind == PlanKind::Rules {
                        String::new()
                    } else {
                        format!("{name}@{version}, these params and ")
                    },
                    if is_proven {
                        ""
                    } else {
                        " This plan is unproven (no delivery of the pack's source types was replayed, or the replay was truncated): the confirm needs allow_unproven: true."
                    }
                ),
            },
            plan_token: None,
            trial: None,
            trial_sufficient: None,
            guard: Some(guard),
        };
        let binding_json = serde_json::to_value(&binding).unwrap_or_default();
        let binding_digest = sha256_hex(&canonical(&binding_json));
        let mut stored = StoredPlan {
            plan: plan.clone(),
            apply: Apply {
                configuration: candidate.configuration.clone(),
                provenance: provenance_after,
                trusted_actors: candidate.trusted_actors.clone(),
                proven: is_proven,
                truncated: outcome.truncated,
                kind,
                binding_digest: binding_digest.clone(),
                // Each confirm argument is checked against its own planned value (REQ-3).
                binding: Some(binding),
                trial: None,
            },
        };
        if let Some(report) = trial {
            carry_trial(&mut plan, &mut stored.apply, report);
            stored.plan = plan.clone();
        }
        self.state
            .store
            .insert_plan(NewPlan {
                webhook_id: webhook.id.clone(),
                owner_scope: caller.scope.clone(),
                token_hash,
                pack_name: name,
                pack_version: version,
                params_digest: binding_digest,
                candidate: candidate.configuration.clone(),
                base_config_version: webhook.config_version,
                expires_at,
                plan: stored,
            })
            .await?;
        plan.plan_token = Some(token);
        Ok(PackAnswer::Plan(Box::new(plan)))
    }
}

pub(super) fn uuid_like() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

/// What a plan is made from: the webhook as read, the candidate and how it was asked for.
pub(super) struct PlanRequest<'a> {
    pub webhook: &'a Webhook,
    pub ctx: &'a RoutingContext,
    /// The pack installed, or (for a removal) the installed version's manifest if known.
    pub pack: Option<&'a Pack>,
    pub kind: PlanKind,
    pub candidate: Candidate,
    pub window: &'a ReplayWindow,
    /// The arguments a confirm is checked against.
    pub binding: Binding,
    /// A promotion's trial report (`promote_rule_trial`), carried and bound by the plan.
    pub trial: Option<switchboard_model::trial::TrialReport>,
    /// What the caller asks of the plan's guard.
    pub guard: &'a GuardOptions,
}
