//! Rule packs in control (SPEC-0031): listing, plan → replay → confirm for installs,
//! upgrades and removals, and replays of hand-written candidates (REQ-8). The pure parts
//! (merge, report, drift) live in `switchboard-packs`; this module does the I/O: the store,
//! the replay lease and rate limit, and the routers.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use switchboard_model::Configuration;
use switchboard_model::TrustedActors;
use switchboard_packs::merge::{
    Candidate, InstallRequest, MergeError, install_candidate, removal_candidate,
};
use switchboard_packs::plan::{Replayed, Report, Routed, aggregate, pack_rule_faults, proven};
use switchboard_packs::provenance::{self, InstalledBy, ReplaySummary, drift};
use switchboard_packs::{Catalog, Pack, ResolveError};
use switchboard_proto::router::v1::{
    Configuration as WireConfiguration, Decision, Outcome, RoutingContext, StoredDelivery,
    WorkClass,
};

use crate::error::Error;
use crate::error::Reason;
use crate::ingest::route::{routing_context, stored_delivery};
use crate::routing::RoutingError;
use crate::scope::OwnerScope;
use crate::state::ControlState;
use crate::store::Actor;
use crate::store::{NewPlan, new_plan_token};
use crate::store::{REPLAYS_PER_MINUTE, SaveConfiguration, Webhook};

/// Replay window defaults (REQ-4).
pub const DEFAULT_REPLAY_LIMIT: u32 = 200;
pub const MAX_REPLAY_LIMIT: u32 = 1000;
/// A plan token lives this long.
pub const PLAN_TTL: Duration = Duration::from_secs(15 * 60);

/// A rule-pack failure an agent can act on: a SPEC-0031 code, a message naming what was
/// wrong and the next call to make, and structured details. Never payload text.
#[derive(Debug)]
pub struct PackError {
    pub reason: Reason,
    pub message: String,
    pub details: Value,
}

impl PackError {
    fn new(reason: Reason, message: impl Into<String>, details: Value) -> Self {
        Self {
            reason,
            message: message.into(),
            details,
        }
    }
}

impl From<Error> for PackError {
    fn from(e: Error) -> Self {
        match &e {
            Error::NotFound { .. } => PackError::new(Reason::NotFound, e.to_string(), Value::Null),
            Error::FailedPrecondition { reason, .. }
                if *reason == crate::error::PLAN_STALE
                    || *reason == crate::error::VERSION_MISMATCH =>
            {
                PackError::new(
                    Reason::PlanStale,
                    "the plan is stale: the webhook's configuration changed, the token expired, or it was used; plan again",
                    Value::Null,
                )
            }
            Error::InvalidArgument { field, message } => PackError::new(
                Reason::InvalidArgument,
                e.to_string(),
                json!({"field": field, "message": message}),
            ),
            Error::ResourceExhausted { retry_after } => PackError::new(
                Reason::RateLimited,
                e.to_string(),
                json!({"retry_after_ms": retry_after.as_millis() as u64}),
            ),
            Error::Internal { context } => {
                tracing::error!(context = %context, "rule pack operation failed");
                PackError::new(Reason::Internal, "internal error", Value::Null)
            }
            _ => PackError::new(e.reason(), e.to_string(), Value::Null),
        }
    }
}

impl From<RoutingError> for PackError {
    fn from(e: RoutingError) -> Self {
        // The detail names routers' addresses: it goes to the log, never to the caller.
        tracing::warn!(error = %e.log_text(), "a rule-pack call found no router");
        PackError::new(
            Reason::RouterUnavailable,
            format!("{e}; nothing was changed, retry shortly"),
            Value::Null,
        )
    }
}

impl From<MergeError> for PackError {
    fn from(e: MergeError) -> Self {
        let details = match &e {
            MergeError::RequiresPack { pack, missing } => {
                json!({"pack": pack, "requires": missing})
            }
            MergeError::RequiredByPack { pack, dependents } => {
                json!({"pack": pack, "required_by": dependents})
            }
            MergeError::DefaultConflict { holder } => json!({"holder": holder}),
            MergeError::TooManyRules {
                total,
                max,
                packs,
                hand_written,
            } => json!({
                "total": total, "max": max, "hand_written": hand_written,
                "packs": packs.iter().map(|(n, c)| json!({"name": n, "rules": c})).collect::<Vec<_>>(),
            }),
            MergeError::InvalidParams { param, message } => {
                json!({"param": param, "message": message})
            }
            MergeError::InvalidArgument { field, message } => {
                json!({"field": field, "message": message})
            }
            MergeError::LocalEdits { pack, rules } => {
                json!({"pack": pack, "rules": rules, "next": "plan again with overwrite_local_edits: true to replace the edits"})
            }
            MergeError::NotInstalled(name) => json!({"pack": name}),
        };
        PackError::new(e.reason(), e.to_string(), details)
    }
}

/// Who is calling: an endpoint, the human it acts for, and its owner scope.
#[derive(Clone, Debug)]
pub struct Caller {
    pub endpoint_id: String,
    pub human: String,
    pub scope: OwnerScope,
}

/// `replay: {limit?, since?}`.
#[derive(Clone, Debug, Default)]
pub struct ReplayWindow {
    pub limit: Option<u32>,
    /// Milliseconds since the epoch.
    pub since: Option<i64>,
}

/// `install_rule_pack` arguments.
#[derive(Clone, Debug, Default)]
pub struct InstallArgs {
    pub webhook_id: String,
    pub name: String,
    pub version: Option<String>,
    pub params: Option<Map<String, Value>>,
    pub replaces: Option<Vec<String>>,
    pub replay: ReplayWindow,
    pub confirm: Option<String>,
    pub allow_unproven: bool,
    pub overwrite_local_edits: bool,
    /// Params the change orphans that stay on the webhook (`param_diff.orphaned`).
    pub keep_params: Option<Vec<String>>,
}

/// `remove_rule_pack` arguments.
#[derive(Clone, Debug, Default)]
pub struct RemoveArgs {
    pub webhook_id: String,
    pub name: String,
    pub replay: ReplayWindow,
    pub confirm: Option<String>,
    pub allow_unproven: bool,
    /// Params the removal orphans that stay on the webhook.
    pub keep_params: Option<Vec<String>>,
}

/// Reports replay progress: (deliveries replayed, total).
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

/// The rule-pack service of one control process.
#[derive(Clone)]
pub struct RulePacks {
    state: ControlState,
    catalog: Arc<Catalog>,
    /// The total time budget of one replay.
    pub replay_budget: Duration,
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

fn canonical(v: &Value) -> String {
    let mut s = String::new();
    switchboard_model::write_canonical(v, &mut s);
    s
}

fn rfc3339(ms: i64) -> String {
    switchboard_model::rfc3339_millis(ms)
}

/// A decision reduced to what a plan reports.
fn routed(d: &Decision) -> Routed {
    let label = d.label().to_string();
    let rule_id = (!d.rule_id.is_empty() && !d.by_default_action).then(|| d.rule_id.clone());
    Routed { label, rule_id }
}

/// The result of replaying two configurations over a window.
struct ReplayOutcome {
    replayed: Vec<Replayed>,
    truncated: bool,
    /// Why the replay stopped early, when a router stopped a call at its
    /// `max_child_faults` (rules that kept exceeding the budget or crashing the sandbox):
    /// the replay ends there, truncated, and the report says so.
    stopped: Option<String>,
}

impl RulePacks {
    pub fn new(state: ControlState, catalog: Arc<Catalog>) -> Self {
        let replay_budget = state.limits.replay_budget;
        Self {
            state,
            catalog,
            replay_budget,
        }
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    fn capabilities(&self) -> Vec<String> {
        if self.state.capabilities.trusted_actors {
            vec!["trusted_actors".to_string()]
        } else {
            Vec::new()
        }
    }

    fn manifest(&self, name: &str, version: &str) -> Option<Pack> {
        self.catalog.find(name, version).map(|c| c.pack.clone())
    }

    /// `list_rule_packs {webhook_id?}` (REQ-2).
    pub async fn list(
        &self,
        caller: &Caller,
        webhook_id: Option<&str>,
    ) -> Result<Value, PackError> {
        let caps = self.capabilities();
        let webhook = match webhook_id {
            Some(id) => Some(self.state.store.get_webhook(&caller.scope, id).await?),
            None => None,
        };
        let installed = webhook
            .as_ref()
            .map(|w| provenance::from_json(&w.provenance))
            .unwrap_or_default();
        let saved: Configuration = webhook
            .as_ref()
            .and_then(|w| serde_json::from_value(w.configuration.clone()).ok())
            .unwrap_or_default();
        let mut names: Vec<&str> = self
            .catalog
            .packs()
            .iter()
            .map(|p| p.pack.name.as_str())
            .collect();
        names.dedup();
        let mut packs = Vec::new();
        for name in names {
            let versions = self.catalog.versions(name);
            let Some(newest) = versions.last() else {
                continue;
            };
            let version_list: Vec<Value> = versions
                .iter()
                .map(|cp| {
                    let a = self.catalog.availability(cp, &caps);
                    json!({
                        "version": cp.pack.version,
                        "available": a.available,
                        "missing_capabilities": a.missing_capabilities,
                        "retired": a.retired,
                        "superseded_by": a.superseded_by,
                        "upgrade_note": a.upgrade_note,
                        "params_schema": cp.pack.params_schema,
                        "param_checks": cp.pack.param_checks.iter().map(|c| json!({"id": c.id, "message": c.message})).collect::<Vec<_>>(),
                        "requires": cp.pack.requires,
                        "placement": cp.pack.placement,
                        "rules": cp.pack.rules.iter().map(|r| json!({"id": r.id, "description": r.description, "action": r.action})).collect::<Vec<_>>(),
                        "default_action": cp.pack.default_action,
                        "fixtures": cp.pack.fixtures.len(),
                    })
                })
                .collect();
            let mut entry = json!({
                "name": name,
                "title": newest.pack.title,
                "summary": newest.pack.summary,
                "source": newest.source.label(),
                "available": versions.iter().any(|cp| self.catalog.availability(cp, &caps).available),
                "unavailable_reason": Value::Null,
                "versions": version_list,
            });
            if let Some(i) = installed.iter().find(|p| p.name == name) {
                let upgrade = versions.iter().rev().find(|cp| {
                    cp.pack.semver() > semver_of(&i.version)
                        && self.catalog.availability(cp, &caps).available
                });
                entry["installed"] = installed_entry(
                    i,
                    &saved,
                    upgrade.map(|u| u.pack.version.clone()),
                    self.catalog.find(&i.name, &i.version).is_some(),
                );
            } else if webhook.is_some() {
                entry["installed"] = Value::Null;
            }
            packs.push(entry);
        }
        // Installed packs the catalog no longer has at all (an external source dropped at
        // restart): still listed, so an owner sees what routes and can remove it.
        for i in installed
            .iter()
            .filter(|i| self.catalog.versions(&i.name).is_empty())
        {
            packs.push(json!({
                "name": i.name,
                "title": Value::Null,
                "summary": Value::Null,
                "source": Value::Null,
                "available": false,
                "unavailable_reason": gone_from_catalog(i),
                "versions": [],
                "installed": installed_entry(i, &saved, None, false),
            }));
        }
        Ok(json!({"packs": packs}))
    }

    /// `install_rule_pack`: a plan without `confirm`, the apply with it (REQ-3).
    pub async fn install(
        &self,
        caller: &Caller,
        args: InstallArgs,
        progress: Option<Progress>,
    ) -> Result<Value, PackError> {
        if let Some(token) = &args.confirm {
            return self
                .confirm(
                    caller,
                    &args.webhook_id,
                    token,
                    ConfirmCheck::Install(&args),
                    args.allow_unproven,
                )
                .await;
        }
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, &args.webhook_id)
            .await?;
        let caps = self.capabilities();
        let cp = self.catalog.resolve(&args.name, args.version.as_deref(), &caps).map_err(|e| match e {
            ResolveError::UnknownPack(n) => PackError::new(Reason::NotFound, format!("no pack named {n}; call list_rule_packs"), json!({"name": n})),
            ResolveError::UnknownVersion { name, version } => PackError::new(
                Reason::NotFound,
                format!("{name} has no version {version}; call list_rule_packs"),
                json!({"name": name, "version": version}),
            ),
            ResolveError::UnavailableVersion { name, version, reason, upgrade_note } => PackError::new(
                Reason::UnavailableVersion,
                format!("{name}@{version} is not available: {reason}"),
                json!({"name": name, "version": version, "reason": reason, "upgrade_note": upgrade_note}),
            ),
        })?;
        let pack = cp.pack.clone();
        let saved: Configuration =
            serde_json::from_value(webhook.configuration.clone()).unwrap_or_default();
        let prov = provenance::from_json(&webhook.provenance);
        let request = InstallRequest {
            params: args.params.clone().unwrap_or_default(),
            replaces: args.replaces.clone().unwrap_or_default(),
            overwrite_local_edits: args.overwrite_local_edits,
            keep_params: args.keep_params.clone().unwrap_or_default(),
        };
        let candidate =
            install_candidate(&saved, &prov, &pack, &request, &|n, v| self.manifest(n, v))?;
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.validate_candidate(&candidate.configuration, &ctx)
            .await?;
        self.run_param_checks(&pack, &candidate.configuration, &ctx)
            .await?;
        let kind = match prov.iter().find(|p| p.name == pack.name) {
            None => "install",
            Some(prev) if semver_of(&prev.version) < pack.semver() => "upgrade",
            Some(prev) if semver_of(&prev.version) > pack.semver() => "downgrade",
            Some(_) => "reinstall",
        };
        let binding = json!({
            "params": args.params.clone().unwrap_or_default(),
            "replaces": request.replaces,
            "overwrite_local_edits": args.overwrite_local_edits,
            "keep_params": request.keep_params,
        });
        self.plan(
            caller,
            &webhook,
            &ctx,
            Some(&pack),
            kind,
            candidate,
            &args.replay,
            &binding,
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
    ) -> Result<Value, PackError> {
        if let Some(token) = &args.confirm {
            return self
                .confirm(
                    caller,
                    &args.webhook_id,
                    token,
                    ConfirmCheck::Remove(&args),
                    args.allow_unproven,
                )
                .await;
        }
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, &args.webhook_id)
            .await?;
        let saved: Configuration =
            serde_json::from_value(webhook.configuration.clone()).unwrap_or_default();
        let prov = provenance::from_json(&webhook.provenance);
        let keep_params = args.keep_params.clone().unwrap_or_default();
        let candidate = removal_candidate(&saved, &prov, &args.name, &keep_params, &|n, v| {
            self.manifest(n, v)
        })?;
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.validate_candidate(&candidate.configuration, &ctx)
            .await?;
        let installed = prov.iter().find(|p| p.name == args.name).cloned();
        let pack = installed
            .as_ref()
            .and_then(|i| self.manifest(&i.name, &i.version));
        self.plan(
            caller,
            &webhook,
            &ctx,
            pack.as_ref(),
            "remove",
            candidate,
            &args.replay,
            &json!({"remove": args.name, "keep_params": keep_params}),
            progress,
        )
        .await
    }

    /// `test_webhook_rules` with `replay` (REQ-8): the report, no token, nothing written.
    pub async fn replay_candidate(
        &self,
        caller: &Caller,
        webhook_id: &str,
        mut candidate: Configuration,
        window: &ReplayWindow,
        progress: Option<Progress>,
    ) -> Result<Value, PackError> {
        let webhook = self
            .state
            .store
            .get_webhook(&caller.scope, webhook_id)
            .await?;
        let minted = candidate.mint_rule_ids();
        let ctx = routing_context(&webhook, &self.state.capabilities);
        self.validate_candidate(&candidate, &ctx).await?;
        let saved: Configuration =
            serde_json::from_value(webhook.configuration.clone()).unwrap_or_default();
        let prov = provenance::from_json(&webhook.provenance);
        let outcome = self
            .replay(
                caller,
                &webhook.id,
                &webhook.owner_scope,
                ReplayContexts {
                    saved: &ctx,
                    candidate: &ctx,
                },
                &saved,
                &candidate,
                window,
                progress,
            )
            .await?;
        let ids: Vec<String> = candidate
            .rules
            .iter()
            .filter_map(|r| r.id.clone())
            .collect();
        let from_pack = |id: &str| {
            prov.iter()
                .find(|p| p.rule_ids.iter().any(|r| r == id))
                .map(|p| p.name.clone())
        };
        let report = aggregate(
            &outcome.replayed,
            &ids,
            &from_pack,
            self.state.capabilities.trusted_actors,
            outcome.truncated,
            &rfc3339,
        );
        let mut out = report_json(&report);
        out["stopped"] = json!(outcome.stopped);
        let window = self
            .state
            .store
            .retention_window(self.state.limits.retention, &webhook.id)
            .await?;
        out["retention"] = retention_json(&window);
        out["minted_rule_ids"] = json!(minted);
        out["rule_diff"] =
            serde_json::to_value(switchboard_packs::merge::rule_diff(&saved, &candidate, &[]))
                .unwrap_or_default();
        out["nothing_saved"] = json!(true);
        Ok(out)
    }

    async fn validate_candidate(
        &self,
        candidate: &Configuration,
        ctx: &RoutingContext,
    ) -> Result<(), PackError> {
        let json = serde_json::to_string(candidate).unwrap_or_default();
        let resp = self.state.routers.validate(&json, ctx).await?;
        if resp.valid {
            return Ok(());
        }
        let problems: Vec<Value> = resp
            .problems
            .iter()
            .map(|p| json!({"rule_id": p.rule_id, "code": p.code, "message": p.message, "field": p.field}))
            .collect();
        Err(PackError::new(
            Reason::InvalidConfiguration,
            format!(
                "the candidate does not validate ({} problems)",
                problems.len()
            ),
            json!({"problems": problems}),
        ))
    }

    /// Evaluates every param check with the candidate's params, in the sandbox like any rule.
    async fn run_param_checks(
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
            let wire = WireConfiguration {
                json: serde_json::to_string(&probe).unwrap_or_default(),
            };
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
                    let mut f = json!({"param_check": check.id, "message": check.message});
                    if let Some(param) = &check.each {
                        f["param"] = json!(param);
                        f["element"] = items.get(i).cloned().unwrap_or(Value::Null);
                    }
                    if d.outcome == Outcome::Fault as i32 {
                        f["fault"] = json!(d.reason);
                    }
                    failures.push(f);
                }
            }
        }
        if failures.is_empty() {
            return Ok(());
        }
        let first = &failures[0];
        let message = format!(
            "param check {} failed: {}{}",
            first["param_check"].as_str().unwrap_or_default(),
            first["message"].as_str().unwrap_or_default(),
            first
                .get("element")
                .map(|e| format!(" ({} {})", first["param"].as_str().unwrap_or_default(), e))
                .unwrap_or_default()
        );
        Err(PackError::new(
            Reason::InvalidParams,
            message,
            json!({"failures": failures}),
        ))
    }

    /// Replays both configurations over the webhook's window, under the lease, the rate
    /// limit and the time budget. Reads only this webhook's events; writes nothing.
    #[allow(clippy::too_many_arguments)]
    async fn replay(
        &self,
        caller: &Caller,
        webhook_id: &str,
        scope: &OwnerScope,
        contexts: ReplayContexts<'_>,
        saved: &Configuration,
        candidate: &Configuration,
        window: &ReplayWindow,
        progress: Option<Progress>,
    ) -> Result<ReplayOutcome, PackError> {
        let limit = window.limit.unwrap_or(DEFAULT_REPLAY_LIMIT);
        if !(1..=MAX_REPLAY_LIMIT).contains(&limit) {
            return Err(PackError::new(
                Reason::InvalidArgument,
                format!("replay.limit must be between 1 and {MAX_REPLAY_LIMIT}"),
                json!({"field": "replay.limit"}),
            ));
        }
        let holder = format!("{}:{}", caller.endpoint_id, uuid_like());
        let lease_ttl = self.replay_budget + Duration::from_secs(30);
        if !self
            .state
            .store
            .try_acquire_replay_lease(webhook_id, &holder, lease_ttl)
            .await?
        {
            return Err(PackError::new(
                Reason::Busy,
                "another replay of this webhook is running; retry when it finishes",
                json!({"retry_after_ms": 2000}),
            ));
        }
        // Released however the replay ends, cancellation included.
        let mut lease = LeaseGuard {
            store: self.state.store.clone(),
            webhook_id: webhook_id.to_string(),
            holder,
            armed: true,
        };
        let started = std::time::Instant::now();
        let result = async {
            self.state
                .store
                .try_take_sliding(
                    &caller.endpoint_id,
                    "replay",
                    REPLAYS_PER_MINUTE,
                    Duration::from_secs(60),
                )
                .await?;
            // Bounded in bytes as well as in count: a window of big bodies is cut short, and
            // the plan says so (truncated, so unproven).
            let loaded = self
                .state
                .store
                .recent_events_within(
                    scope,
                    webhook_id,
                    limit,
                    window.since,
                    crate::store::LOAD_BYTES,
                )
                .await?;
            let events = loaded.events;
            let deliveries: Vec<StoredDelivery> = events.iter().map(stored_delivery).collect();
            let configs = [
                WireConfiguration {
                    json: serde_json::to_string(saved).unwrap_or_default(),
                },
                WireConfiguration {
                    json: serde_json::to_string(candidate).unwrap_or_default(),
                },
            ];
            let total = deliveries.len() as u64;
            let chunk = self.state.limits.replay_chunk.max(1);
            let budget_ms = self.state.limits.evaluation_budget.as_millis() as u32;
            let deadline = tokio::time::Instant::now() + self.replay_budget;
            let mut calls = futures::stream::FuturesOrdered::new();
            let chunks = switchboard_model::body::chunk_ranges(
                deliveries.iter().map(|d| d.body.len()),
                chunk,
                switchboard_model::body::CHUNK_BYTES,
            );
            for range in chunks {
                let start = range.start;
                let part = &deliveries[range];
                let request = |ctx: &RoutingContext, configurations: &[WireConfiguration]| {
                    switchboard_proto::router::v1::EvaluateRequest {
                        context: Some(ctx.clone()),
                        configurations: configurations.to_vec(),
                        deliveries: part.to_vec(),
                        budget_ms,
                        work_class: WorkClass::Replay as i32,
                        tenant: scope.to_string(),
                        max_child_faults: self.state.limits.replay_max_child_faults,
                    }
                };
                // One call evaluates both configurations when they share a context; otherwise
                // each gets its own call and the decisions are paired up again.
                let (first, second) = if contexts.saved == contexts.candidate {
                    (request(contexts.saved, &configs), None)
                } else {
                    (
                        request(contexts.saved, &configs[..1]),
                        Some(request(contexts.candidate, &configs[1..])),
                    )
                };
                let routers = self.state.routers.clone();
                calls.push_back(async move {
                    let result = match second {
                        None => routers.evaluate(first).await,
                        Some(second) => {
                            let (before, after) =
                                futures::join!(routers.evaluate(first), routers.evaluate(second));
                            before.and_then(|before| {
                                after.map(|after| {
                                    before
                                        .into_iter()
                                        .zip(after)
                                        .map(|(mut b, a)| {
                                            b.decisions.extend(a.decisions.into_iter().take(1));
                                            b
                                        })
                                        .collect::<Vec<_>>()
                                })
                            })
                        }
                    };
                    (start, result)
                });
            }
            let mut replayed = Vec::with_capacity(deliveries.len());
            let mut truncated = loaded.capped;
            let mut stopped = None;
            let mut done = 0u64;
            use futures::StreamExt;
            while stopped.is_none() {
                match tokio::time::timeout_at(deadline, calls.next()).await {
                    Err(_) => {
                        truncated = true;
                        break;
                    }
                    Ok(None) => break,
                    Ok(Some((start, result))) => {
                        let results = result?;
                        for (k, r) in results.iter().enumerate() {
                            let e = &events[start + k];
                            let (Some(before), Some(after)) =
                                (r.decisions.first(), r.decisions.get(1))
                            else {
                                continue;
                            };
                            // The router stopped the call: this delivery was not replayed,
                            // and the calls still queued are dropped (cancelled) below.
                            if let Some(d) = [before, after]
                                .into_iter()
                                .find(|d| d.fault_code == switchboard_model::fault::NOT_EVALUATED)
                            {
                                stopped.get_or_insert_with(|| d.reason.clone());
                                truncated = true;
                                continue;
                            }
                            replayed.push(Replayed {
                                event_id: e.id.clone(),
                                received_at_ms: e.received_at,
                                source: e.source.to_string(),
                                before: routed(before),
                                after: routed(after),
                            });
                        }
                        done += results.len() as u64;
                        if let Some(p) = &progress {
                            p(done, total);
                        }
                    }
                }
            }
            Ok::<_, PackError>(ReplayOutcome {
                replayed,
                truncated,
                stopped,
            })
        }
        .await;
        lease.release().await;
        if let Ok(outcome) = &result {
            switchboard_telemetry::metrics().replay("replay", started.elapsed(), outcome.truncated);
        }
        result
    }

    /// Replays, routes fixtures, refuses faulting pack rules, and stores the plan.
    #[allow(clippy::too_many_arguments)]
    async fn plan(
        &self,
        caller: &Caller,
        webhook: &Webhook,
        ctx: &RoutingContext,
        pack: Option<&Pack>,
        kind: &str,
        candidate: Candidate,
        window: &ReplayWindow,
        binding: &Value,
        progress: Option<Progress>,
    ) -> Result<Value, PackError> {
        let saved: Configuration =
            serde_json::from_value(webhook.configuration.clone()).unwrap_or_default();
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
        if kind != "remove"
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
                        configurations: vec![WireConfiguration {
                            json: serde_json::to_string(config).unwrap_or_default(),
                        }],
                        deliveries: members
                            .iter()
                            .map(|&n| {
                                switchboard_packs::fixtures::fixture_delivery(&pack.fixtures[n], n)
                            })
                            .collect(),
                        budget_ms: 0,
                        work_class: WorkClass::Interactive as i32,
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
                    label: "fault".into(),
                    rule_id: None,
                });
                if got.label == "fault"
                    && let Some(rule) = &got.rule_id
                    && candidate.pack_rule_ids.contains(rule)
                {
                    fixture_faults.push((rule.clone(), format!("fixture:{}", f.name)));
                }
                let default_queue = ctx.grant.first().map(String::as_str).unwrap_or_default();
                let passed = switchboard_packs::admission::fixture_passes(
                    &f.want,
                    &got.label,
                    default_queue,
                );
                fixtures.push(json!({"name": f.name, "want": f.want, "got": got.label, "rule": got.rule_id, "passed": passed}));
            }
        }
        let mut faults = pack_rule_faults(&outcome.replayed, &candidate.pack_rule_ids);
        for (rule, id) in fixture_faults {
            match faults.iter_mut().find(|f| f.rule == rule) {
                Some(f) => {
                    f.count += 1;
                    if f.event_ids.len() < switchboard_packs::plan::MAX_EXAMPLES {
                        f.event_ids.push(id);
                    }
                }
                None => faults.push(switchboard_packs::plan::RuleFaults {
                    rule,
                    count: 1,
                    event_ids: vec![id],
                }),
            }
        }
        if !faults.is_empty() {
            let first = &faults[0];
            return Err(PackError::new(
                Reason::PackRuleFaults,
                format!(
                    "pack rule {} faults on {} replayed deliveries or fixtures (e.g. {}); the plan is refused — inspect them with get_webhook_event",
                    first.rule,
                    first.count,
                    first.event_ids.join(", ")
                ),
                json!({"faults": faults}),
            ));
        }
        let ids: Vec<String> = candidate
            .configuration
            .rules
            .iter()
            .filter_map(|r| r.id.clone())
            .collect();
        let prov = &candidate.provenance;
        let from_pack = |id: &str| {
            prov.iter()
                .find(|p| p.rule_ids.iter().any(|r| r == id))
                .map(|p| p.name.clone())
        };
        let report = aggregate(
            &outcome.replayed,
            &ids,
            &from_pack,
            self.state.capabilities.trusted_actors,
            outcome.truncated,
            &rfc3339,
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
            && kind != "remove"
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
        let from_version = provenance::from_json(&webhook.provenance)
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.version.clone());
        let mut plan = report_json(&report);
        plan["stopped"] = json!(outcome.stopped);
        let window = self
            .state
            .store
            .retention_window(self.state.limits.retention, &webhook.id)
            .await?;
        plan["retention"] = retention_json(&window);
        plan["kind"] = json!(kind);
        plan["webhook_id"] = json!(webhook.id);
        plan["pack"] = json!({"name": name, "version": version, "from_version": from_version});
        plan["fixtures"] = json!(fixtures);
        plan["rule_diff"] = serde_json::to_value(&candidate.rule_diff).unwrap_or_default();
        plan["param_diff"] = serde_json::to_value(&candidate.param_diff).unwrap_or_default();
        plan["version_diff"] = serde_json::to_value(&candidate.version_diff).unwrap_or_default();
        plan["proven"] = json!(is_proven);
        plan["nothing_saved"] = json!(true);
        plan["expires_at"] = json!(rfc3339(expires_at));
        let verb = if kind == "remove" {
            "remove_rule_pack"
        } else {
            "install_rule_pack"
        };
        plan["confirm_with"] = json!({
            "tool": verb,
            "arguments": {"webhook_id": webhook.id, "name": name, "confirm": "<plan_token>", "allow_unproven": if is_proven { Value::Null } else { json!(true) }},
            "note": format!(
                "Nothing was saved. To apply exactly this plan, call {verb} again with confirm: the plan_token, before {}. The token is bound to this webhook, your owner scope, {name}@{version}, these params and this candidate; it is refused as plan_stale if the webhook's configuration changes first.{}",
                rfc3339(expires_at),
                if is_proven { "" } else { " This plan is unproven (no delivery of the pack's source types was replayed, or the replay was truncated): the confirm needs allow_unproven: true." }
            ),
        });
        let stored_candidate = json!({
            "configuration": candidate.configuration,
            "provenance": provenance_after,
            "trusted_actors": candidate.trusted_actors,
            "proven": is_proven,
            "truncated": outcome.truncated,
            "kind": kind,
            "binding_digest": sha256_hex(&canonical(binding)),
            // Each confirm argument is checked against its own planned value (REQ-3).
            "binding": binding,
        });
        self.state
            .store
            .insert_plan(NewPlan {
                webhook_id: webhook.id.clone(),
                owner_scope: caller.scope.clone(),
                token_hash,
                pack_name: name,
                pack_version: version,
                params_digest: sha256_hex(&canonical(binding)),
                candidate: serde_json::to_value(&candidate.configuration).unwrap_or_default(),
                base_config_version: webhook.config_version,
                expires_at,
                plan: {
                    let mut stored = plan.clone();
                    stored["apply"] = stored_candidate;
                    stored
                },
            })
            .await?;
        plan["plan_token"] = json!(token);
        Ok(plan)
    }

    /// Applies exactly the candidate a plan described, in one transaction under the
    /// webhook's row lock; the store consumes the token in the same transaction. Counted by
    /// outcome (`applied` or the refusal's code).
    async fn confirm(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        check: ConfirmCheck<'_>,
        allow_unproven: bool,
    ) -> Result<Value, PackError> {
        let result = self
            .apply_plan(caller, webhook_id, token, check, allow_unproven)
            .await;
        let outcome = result
            .as_ref()
            .map_or_else(|e| e.reason.as_str(), |_| "applied");
        switchboard_telemetry::metrics().plan_confirm(outcome);
        result
    }

    async fn apply_plan(
        &self,
        caller: &Caller,
        webhook_id: &str,
        token: &str,
        check: ConfirmCheck<'_>,
        allow_unproven: bool,
    ) -> Result<Value, PackError> {
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
        let kind = plan.plan["apply"]
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        match check {
            ConfirmCheck::Install(args) => {
                if kind == "remove" || plan.pack_name != args.name {
                    return Err(mismatch("name"));
                }
                if let Some(v) = &args.version
                    && !switchboard_packs::catalog::version_matches(&plan.pack_version, v)
                {
                    return Err(mismatch("version"));
                }
                confirm_arguments_match(&plan.plan["apply"], args).map_err(mismatch)?;
            }
            ConfirmCheck::Remove(args) => {
                if kind != "remove" || plan.pack_name != args.name {
                    return Err(mismatch("name"));
                }
                if let Some(keep) = &args.keep_params
                    && json!(keep) != planned_keep_params(&plan.plan["apply"])
                {
                    return Err(mismatch("keep_params"));
                }
            }
        }
        let proven = plan.plan["apply"]
            .get("proven")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let truncated = plan.plan["apply"]
            .get("truncated")
            .and_then(Value::as_bool)
            .unwrap_or(false);
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
        self.validate_candidate(
            &configuration,
            &routing_context(&webhook, &self.state.capabilities),
        )
        .await?;
        let now = rfc3339(self.state.store.clock().now_ms());
        let mut installed =
            provenance::from_json(plan.plan["apply"].get("provenance").unwrap_or(&Value::Null));
        if let Some(entry) = installed.iter_mut().find(|e| e.name == plan.pack_name) {
            entry.installed_at = now.clone();
            entry.installed_by = InstalledBy {
                endpoint: caller.endpoint_id.clone(),
                human: caller.human.clone(),
            };
        }
        // Set when the plan sets them; left as they are otherwise.
        let trusted_actors = plan.plan["apply"]
            .get("trusted_actors")
            .filter(|v| !v.is_null())
            .map(|v| Some(TrustedActors::from_value(v)));
        let op = if kind == "remove" {
            "remove_rule_pack"
        } else {
            "install_rule_pack"
        };
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
                    change: json!({"op": op, "pack": plan.pack_name, "version": plan.pack_version, "kind": kind}),
                    provenance: Some(json!({"plan": plan.id, "pack": plan.pack_name, "version": plan.pack_version, "proven": proven, "truncated": truncated})),
                    installed_packs: Some(serde_json::to_value(&installed).unwrap_or_default()),
                    trusted_actors,
                    plan_token_hash: Some(token_hash),
                },
            )
            .await?;
        let entry = installed.iter().find(|e| e.name == plan.pack_name);
        Ok(json!({
            "saved": true,
            "kind": kind,
            "webhook_id": webhook_id,
            "version": saved.version,
            "digest": saved.digest,
            "pack": {"name": plan.pack_name, "version": plan.pack_version},
            "provenance": entry,
        }))
    }
}

/// Holds a webhook's replay lease; releasing it when dropped, even when the caller went away
/// mid-replay and the replay future was dropped.
struct LeaseGuard {
    store: crate::store::Store,
    webhook_id: String,
    holder: String,
    armed: bool,
}

impl LeaseGuard {
    async fn release(&mut self) {
        self.armed = false;
        let _ = self
            .store
            .release_replay_lease(&self.webhook_id, &self.holder)
            .await;
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, webhook_id, holder) = (
            self.store.clone(),
            self.webhook_id.clone(),
            self.holder.clone(),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.release_replay_lease(&webhook_id, &holder).await;
            });
        }
    }
}

/// The routing contexts of a replay's two sides: they differ when the candidate sets the
/// webhook's trusted actors.
#[derive(Clone, Copy)]
struct ReplayContexts<'a> {
    saved: &'a RoutingContext,
    candidate: &'a RoutingContext,
}

/// What a confirm must agree with.
enum ConfirmCheck<'a> {
    Install(&'a InstallArgs),
    Remove(&'a RemoveArgs),
}

/// An installed pack as `list_rule_packs {webhook_id}` shows it, from its provenance alone
/// (its manifest may have left the catalog).
fn installed_entry(
    i: &provenance::InstalledPack,
    saved: &Configuration,
    upgrade_to: Option<String>,
    in_catalog: bool,
) -> Value {
    json!({
        "version": i.version,
        "available": in_catalog,
        "unavailable_reason": (!in_catalog).then(|| gone_from_catalog(i)),
        "upgrade_available": upgrade_to.is_some(),
        "upgrade_to": upgrade_to,
        "proven": i.proven,
        "truncated": i.truncated,
        "last_replay": i.replay.replayed_at,
        "installed_at": i.installed_at,
        "installed_by": i.installed_by,
        "rule_ids": i.rule_ids,
        "owned_params": i.owned_params,
        "drift": drift(i, saved),
    })
}

/// Why an installed version has no manifest here, and what an owner can still do.
fn gone_from_catalog(i: &provenance::InstalledPack) -> String {
    format!(
        "{}@{} is no longer in this instance's catalog (the source that provided it is not configured, or it stopped offering that version); its rules keep routing as installed, remove_rule_pack still removes them, and installing another listed version upgrades it",
        i.name, i.version
    )
}

fn semver_of(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v).ok()
}

fn uuid_like() -> String {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    hex::encode(b)
}

/// REQ-3: each confirm argument must match the plan's or be omitted, on its own: an omitted
/// `params` or `replaces` is the plan's, whatever the others are, and `overwrite_local_edits`
/// given (true) must have been planned. Names the first argument that differs. Plans stored
/// before the binding was kept whole carry only its digest; they are checked as they were.
fn confirm_arguments_match(apply: &Value, args: &InstallArgs) -> Result<(), &'static str> {
    let Some(binding) = apply.get("binding") else {
        let planned = apply
            .get("binding_digest")
            .and_then(Value::as_str)
            .unwrap_or_default();
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
        return if sha256_hex(&canonical(&given)) == planned {
            Ok(())
        } else if args.params.is_some() {
            Err("params")
        } else {
            Err("replaces")
        };
    };
    if let Some(params) = &args.params
        && canonical(&Value::Object(params.clone())) != canonical(&binding["params"])
    {
        return Err("params");
    }
    if let Some(replaces) = &args.replaces
        && json!(replaces) != binding["replaces"]
    {
        return Err("replaces");
    }
    if args.overwrite_local_edits && binding["overwrite_local_edits"] != json!(true) {
        return Err("overwrite_local_edits");
    }
    // A set of param names: the same names in another order are the same argument.
    let as_set = |v: &Value| -> std::collections::BTreeSet<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    if let Some(keep) = &args.keep_params
        && as_set(&json!(keep)) != as_set(&planned_keep_params(apply))
    {
        return Err("keep_params");
    }
    Ok(())
}

/// The plan's `keep_params`: none for plans stored before the argument existed.
fn planned_keep_params(apply: &Value) -> Value {
    apply
        .get("binding")
        .and_then(|b| b.get("keep_params"))
        .cloned()
        .unwrap_or_else(|| json!([]))
}

fn report_json(r: &Report) -> Value {
    serde_json::to_value(r).unwrap_or_default()
}

/// The window retention leaves a webhook, as replays and plans say it: which deliveries a
/// replay could still see.
fn retention_json(w: &crate::store::RetentionWindow) -> Value {
    json!({
        "max_age_days": w.retention.max_age.as_secs() / 86_400,
        "max_events_per_webhook": w.retention.max_events_per_webhook,
        "kept_since": rfc3339(w.kept_since_ms),
        "oldest_stored": w.oldest_event_at_ms.map(rfc3339),
    })
}

/// The catalog this instance serves: the built-ins, plus the external packs named by
/// `SWITCHBOARD_RULE_PACK_SOURCES` (unset by default: then nothing is read or fetched) that
/// validate and route every fixture to its expected decision through the routers. `file://`
/// directories and `https://` pack documents (`crate::pack_sources`) are read once, here, at
/// start and never refetched; a failing source or pack is skipped with a logged error naming
/// it, and control starts all the same.
pub async fn load_catalog(
    sources: Option<&str>,
    options: &crate::pack_sources::FetchOptions,
    routers: &crate::routing::Routers,
) -> Catalog {
    let mut catalog = Catalog::builtin();
    let Some(spec) = sources.map(str::trim).filter(|s| !s.is_empty()) else {
        return catalog;
    };
    let (packs, skipped) = crate::pack_sources::read_sources(spec, options).await;
    for s in skipped {
        tracing::error!(origin = %s.origin, reason = %s.reason, "external rule pack skipped");
    }
    for (origin, pack) in packs {
        match check_external(&pack, routers).await {
            Ok(()) => match catalog.add_external(pack.clone(), &origin) {
                Ok(()) => {
                    tracing::info!(pack = %pack.label(), origin = %origin, "external rule pack loaded")
                }
                Err(reason) => {
                    tracing::error!(pack = %pack.label(), origin = %origin, reason = %reason, "external rule pack skipped")
                }
            },
            Err(reason) => {
                tracing::error!(pack = %pack.label(), origin = %origin, reason = %reason, "external rule pack skipped")
            }
        }
    }
    catalog
}

/// The built-in validation and fixture routing, through the production routers.
async fn check_external(pack: &Pack, routers: &crate::routing::Routers) -> Result<(), String> {
    use switchboard_packs::admission;
    use switchboard_packs::fixtures::{fixture_context, fixture_delivery};
    let problems = switchboard_packs::manifest::check_pack(pack, None);
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    // The same admission as the repository's own catalog test (`packs/src/admission.rs`):
    // rules and param checks validate, every fixture routes to its decision by its rule, and
    // every rule decides some fixture.
    let mut failures = Vec::new();
    let base = pack.fixture_configuration(&Map::new());
    let ctx = fixture_context(pack, &base);
    for v in admission::to_validate(pack) {
        let resp = routers
            .validate(
                &serde_json::to_string(&v.configuration).unwrap_or_default(),
                &ctx,
            )
            .await
            .map_err(|e| e.to_string())?;
        failures.extend(resp.problems.iter().map(|p| {
            format!(
                "{} {} does not validate: {} ({})",
                v.what, p.rule_id, p.message, p.code
            )
        }));
    }
    let mut covered = std::collections::BTreeSet::new();
    for (n, f) in pack.fixtures.iter().enumerate() {
        let config = pack.fixture_configuration(&f.params);
        let ctx = fixture_context(pack, &config);
        let default_queue = ctx.grant.first().cloned().unwrap_or_default();
        let results = routers
            .evaluate(switchboard_proto::router::v1::EvaluateRequest {
                context: Some(ctx),
                configurations: vec![WireConfiguration {
                    json: serde_json::to_string(&config).unwrap_or_default(),
                }],
                deliveries: vec![fixture_delivery(f, n)],
                budget_ms: 0,
                work_class: WorkClass::Interactive as i32,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let decision = results.first().and_then(|r| r.decisions.first());
        let label = decision.map(|d| routed(d).label).unwrap_or_default();
        let rule_id = decision.map(|d| d.rule_id.as_str()).unwrap_or_default();
        let (judged, local) = admission::judge_fixture(pack, f, &label, rule_id, &default_queue);
        failures.extend(judged);
        covered.extend(local);
    }
    failures.extend(admission::uncovered(pack, &covered));
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let apply = json!({"binding": binding, "binding_digest": sha256_hex(&canonical(&binding))});
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
        let apply = json!({"binding": binding});
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
        let apply = json!({"binding_digest": sha256_hex(&canonical(&binding))});
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
