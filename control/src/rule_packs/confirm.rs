//! `confirm`: applying exactly the plan a token names, once, or refusing it.

use super::*;

impl RulePacks {
    /// Applies exactly the candidate a plan described, in one transaction under the
    /// webhook's row lock; the store consumes the token in the same transaction. Counted by
    /// outcome (`applied` or the refusal's code).
    pub(super) async fn confirm(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        check: ConfirmCheck<'_>,
        allow_unproven: bool,
    ) -> Result<Applied, PackError> {
        let result = self
            .apply_plan(caller, webhook_id, token, check, allow_unproven)
            .await;
        let outcome = result
            .as_ref()
            .map_or_else(|e| e.reason.as_str(), |_| "applied");
        switchboard_telemetry::metrics().plan_confirm(outcome);
        result
    }

    pub(super) async fn apply_plan(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        check: ConfirmCheck<'_>,
        allow_unproven: bool,
    ) -> Result<Applied, PackError> {
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
                json!({"field": field}),
            )
        };
        if plan.webhook_id != webhook_id {
            return Err(mismatch("webhook_id"));
        }
        let stale = || {
            PackError::new(
                Reason::PlanStale,
                "the plan is stale: it was already used, it expired, or the webhook's configuration changed; plan again",
                Value::Null,
            )
        };
        if plan.used_at.is_some() || plan.expires_at <= self.state.store.clock().now_ms() {
            return Err(stale());
        }
        let stored: StoredPlan = serde_json::from_value(plan.plan.clone())
            .map_err(|e| Error::internal(format!("stored plan: {e}")))?;
        let apply = stored.apply;
        let kind = apply.kind;
        match check {
            ConfirmCheck::Install(args) => {
                if kind == PlanKind::Remove || plan.pack_name != args.name {
                    return Err(mismatch("name"));
                }
                if let Some(v) = &args.version
                    && !switchboard_packs::catalog::version_matches(&plan.pack_version, v)
                {
                    return Err(mismatch("version"));
                }
                confirm_arguments_match(&apply, args).map_err(mismatch)?;
            }
            ConfirmCheck::Remove(args) => {
                if kind != PlanKind::Remove || plan.pack_name != args.name {
                    return Err(mismatch("name"));
                }
                if let Some(keep) = &args.keep_params
                    && as_set(keep) != as_set(planned_keep_params(&apply))
                {
                    return Err(mismatch("keep_params"));
                }
            }
        }
        let (proven, truncated) = (apply.proven, apply.truncated);
        if (!proven || truncated) && !allow_unproven {
            return Err(PackError::new(
                Reason::Unproven,
                "this plan is unproven (no delivery of the pack's source types was replayed, or the replay was truncated); confirm again with allow_unproven: true to apply it anyway",
                json!({"proven": proven, "truncated": truncated}),
            ));
        }
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, webhook_id)
            .await?;
        let configuration: Configuration = serde_json::from_value(plan.candidate.clone())
            .map_err(|e| Error::internal(format!("stored candidate: {e}")))?;
        // No widening: validated against the grant again at apply.
        self.replayer
            .validate_candidate(
                &configuration,
                &routing_context(&webhook, &self.state.capabilities),
            )
            .await?;
        let now = rfc3339(self.state.store.clock().now_ms());
        let mut installed = apply.provenance;
        if let Some(entry) = installed.iter_mut().find(|e| e.name == plan.pack_name) {
            entry.installed_at = now.clone();
            entry.installed_by = InstalledBy {
                endpoint: caller.endpoint_id.clone(),
                human: caller.human.clone(),
            };
        }
        // Set when the plan sets them; left as they are otherwise.
        let trusted_actors = apply.trusted_actors.map(Some);
        let op = kind.verb();
        let saved = self
            .state
            .store
            .save_configuration(
                &caller.scope,
                webhook_id,
                SaveConfiguration {
                    expected_version: Some(plan.base_config_version),
                    configuration: serde_json::to_value(&configuration).unwrap_or_default(),
                    actor: Actor { endpoint_id: Some(caller.endpoint_id.clone()), human_login: Some(caller.human.clone()) },
                    change: json!({"op": op, "pack": plan.pack_name, "version": plan.pack_version, "kind": kind.as_str()}),
                    provenance: Some(json!({"plan": plan.id, "pack": plan.pack_name, "version": plan.pack_version, "proven": proven, "truncated": truncated})),
                    installed_packs: Some(serde_json::to_value(&installed).unwrap_or_default()),
                    trusted_actors,
                    plan_token_hash: Some(token_hash),
                },
            )
            .await?;
        Ok(Applied {
            saved: true,
            kind,
            webhook_id: webhook_id.to_string(),
            version: saved.version,
            digest: saved.digest,
            provenance: installed.into_iter().find(|e| e.name == plan.pack_name),
            pack: AppliedPack {
                name: plan.pack_name,
                version: plan.pack_version,
            },
        })
    }
}

/// What a confirm must agree with.
pub(super) enum ConfirmCheck<'a> {
    Install(&'a InstallArgs),
    Remove(&'a RemoveArgs),
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
