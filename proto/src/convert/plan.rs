//! The typed plan, listing and confirm result as gRPC messages, both ways. Control sends
//! them; the MCP gateway reads them back into the same types and serializes those, so the
//! JSON an agent reads and the messages a service reads cannot drift apart.

use std::collections::BTreeMap;

use serde_json::Value;
use switchboard_model::diff::{DefaultActionChange, ParamDiff, RuleDiff, VersionDiff};
use switchboard_model::listing::{
    InstalledStatus, ListedPack, Listing, PackRule, PackVersion, ParamCheckSummary,
};
use switchboard_model::manifest::{Placement, Requires};
use switchboard_model::plan::{
    Applied, AppliedPack, ConfirmArguments, ConfirmWith, FixtureOutcome, Pending, Plan, PlanKind,
    PlanPack, PlanState, Report, Retention, RuleReport, RuleShift, TOKEN_PLACEHOLDER, TodosPerDay,
    Totals, Transition,
};
use switchboard_model::provenance::DriftState;
use switchboard_model::provenance::{Drift, InstalledBy, InstalledPack, ReplaySummary};
use switchboard_model::trial::TrialReport;
use switchboard_model::{Action, Label};

use crate::control::v1 as pb;
use crate::convert::json::{from_struct, to_struct};
use crate::convert::time;

impl From<PlanKind> for pb::PlanKind {
    fn from(k: PlanKind) -> Self {
        match k {
            PlanKind::Install => pb::PlanKind::Install,
            PlanKind::Upgrade => pb::PlanKind::Upgrade,
            PlanKind::Downgrade => pb::PlanKind::Downgrade,
            PlanKind::Reinstall => pb::PlanKind::Reinstall,
            PlanKind::Remove => pb::PlanKind::Remove,
            PlanKind::Rules => pb::PlanKind::Rules,
        }
    }
}

/// A wire plan kind as the typed one (unknown: install).
pub fn plan_kind(k: i32) -> PlanKind {
    match pb::PlanKind::try_from(k).unwrap_or(pb::PlanKind::Unspecified) {
        pb::PlanKind::Upgrade => PlanKind::Upgrade,
        pb::PlanKind::Downgrade => PlanKind::Downgrade,
        pb::PlanKind::Reinstall => PlanKind::Reinstall,
        pb::PlanKind::Remove => PlanKind::Remove,
        pb::PlanKind::Rules => PlanKind::Rules,
        pb::PlanKind::Install | pb::PlanKind::Unspecified => PlanKind::Install,
    }
}

impl From<&Plan> for pb::Plan {
    // The deprecated RFC 3339 text fields are filled beside their Timestamps for one release.
    #[allow(deprecated)]
    fn from(p: &Plan) -> Self {
        pb::Plan {
            kind: pb::PlanKind::from(p.kind) as i32,
            webhook_id: p.webhook_id.clone(),
            pack: Some(pb::PlanPack {
                name: p.pack.name.clone(),
                version: p.pack.version.clone(),
                from_version: p.pack.from_version.clone(),
            }),
            report: Some(pb::ReplayReport::from(&p.report)),
            fixtures: p
                .fixtures
                .iter()
                .map(|f| pb::FixtureOutcome {
                    name: f.name.clone(),
                    want: f.want.to_string(),
                    got: f.got.to_string(),
                    rule: f.rule.clone(),
                    passed: f.passed,
                })
                .collect(),
            rule_diff: Some(pb::RuleDiff::from(&p.rule_diff)),
            param_diff: Some(pb::ParamDiff {
                added: p.param_diff.added.clone(),
                changed: p.param_diff.changed.clone(),
                removed: p.param_diff.removed.clone(),
                adopted: p.param_diff.adopted.clone(),
                orphaned: p.param_diff.orphaned.clone(),
                kept: p.param_diff.kept.clone(),
                owners: p
                    .param_diff
                    .owners
                    .iter()
                    .map(|(k, names)| {
                        (
                            k.clone(),
                            pb::PackNames {
                                names: names.clone(),
                            },
                        )
                    })
                    .collect(),
            }),
            version_diff: p.version_diff.as_ref().map(|v| pb::VersionDiff {
                from: v.from.clone(),
                to: v.to.clone(),
                rules_added: v.rules_added.clone(),
                rules_removed: v.rules_removed.clone(),
                rules_changed: v.rules_changed.clone(),
                params_added: v.params_added.clone(),
                params_removed: v.params_removed.clone(),
                params_changed: v.params_changed.clone(),
            }),
            proven: p.proven,
            expires_at: p.expires_at.clone(),
            expires_at_time: time::from_rfc3339_opt(&p.expires_at),
            plan_token: p.plan_token.clone().unwrap_or_default(),
            confirm_with: Some(pb::ConfirmWith {
                tool: p.confirm_with.tool.clone(),
                webhook_id: p.confirm_with.arguments.webhook_id.clone(),
                name: p.pack.name.clone(),
                allow_unproven: p.confirm_with.arguments.allow_unproven == Some(true),
                note: p.confirm_with.note.clone(),
                allow_insufficient_trial: p.confirm_with.arguments.allow_insufficient_trial
                    == Some(true),
            }),
            trial: p.trial.as_ref().map(pb::RuleTrial::from),
            trial_sufficient: p.trial_sufficient,
            guard: p.guard.as_ref().map(pb::GuardPlan::from),
        }
    }
}

impl From<pb::Plan> for Plan {
    fn from(p: pb::Plan) -> Self {
        let pack = p.pack.unwrap_or_default();
        let rule_diff = p.rule_diff.unwrap_or_default();
        let param_diff = p.param_diff.unwrap_or_default();
        let confirm = p.confirm_with.unwrap_or_default();
        Plan {
            report: p.report.map(Report::from).unwrap_or_default(),
            kind: plan_kind(p.kind),
            webhook_id: p.webhook_id,
            pack: PlanPack {
                name: pack.name,
                version: pack.version,
                from_version: pack.from_version,
            },
            fixtures: p
                .fixtures
                .into_iter()
                .filter_map(|f| {
                    Some(FixtureOutcome {
                        want: label(&f.want)?,
                        got: label(&f.got)?,
                        name: f.name,
                        rule: f.rule,
                        passed: f.passed,
                    })
                })
                .collect(),
            rule_diff: RuleDiff::from(rule_diff),
            param_diff: ParamDiff {
                added: param_diff.added,
                changed: param_diff.changed,
                removed: param_diff.removed,
                adopted: param_diff.adopted,
                orphaned: param_diff.orphaned,
                kept: param_diff.kept,
                owners: param_diff
                    .owners
                    .into_iter()
                    .map(|(k, v)| (k, v.names))
                    .collect(),
            },
            version_diff: p.version_diff.map(|v| VersionDiff {
                from: v.from,
                to: v.to,
                rules_added: v.rules_added,
                rules_removed: v.rules_removed,
                rules_changed: v.rules_changed,
                params_added: v.params_added,
                params_removed: v.params_removed,
                params_changed: v.params_changed,
            }),
            proven: p.proven,
            nothing_saved: true,
            expires_at: time::to_rfc3339_or_empty(p.expires_at_time.as_ref()),
            confirm_with: ConfirmWith {
                tool: confirm.tool,
                arguments: ConfirmArguments {
                    webhook_id: confirm.webhook_id,
                    plan_token: TOKEN_PLACEHOLDER.into(),
                    allow_unproven: confirm.allow_unproven.then_some(true),
                    allow_insufficient_trial: confirm.allow_insufficient_trial.then_some(true),
                },
                note: confirm.note,
            },
            plan_token: (!p.plan_token.is_empty()).then_some(p.plan_token),
            trial: p.trial.map(TrialReport::from),
            trial_sufficient: p.trial_sufficient,
            guard: p.guard.map(switchboard_model::guard::GuardPlan::from),
        }
    }
}

impl From<&RuleDiff> for pb::RuleDiff {
    fn from(d: &RuleDiff) -> Self {
        pb::RuleDiff {
            added: d.added.clone(),
            removed: d.removed.clone(),
            changed: d.changed.clone(),
            replaced: d.replaced.clone(),
            default_action: d.default_action.as_ref().map(|d| pb::DefaultActionChange {
                before: d.before.as_ref().map(Label::to_string),
                after: d.after.as_ref().map(Label::to_string),
            }),
        }
    }
}

impl From<pb::RuleDiff> for RuleDiff {
    fn from(d: pb::RuleDiff) -> Self {
        RuleDiff {
            added: d.added,
            removed: d.removed,
            changed: d.changed,
            replaced: d.replaced,
            default_action: d.default_action.map(|d| DefaultActionChange {
                before: d.before.as_deref().and_then(label),
                after: d.after.as_deref().and_then(label),
            }),
        }
    }
}

/// A label control sent; one this build does not know (a newer control's) is left out, not
/// guessed, as a pack rule's action is.
fn label(text: &str) -> Option<Label<'static>> {
    text.parse().ok()
}

/// Counts by label as the message's map, and back.
fn counts_to(m: &BTreeMap<Label<'static>, u64>) -> std::collections::HashMap<String, u64> {
    m.iter().map(|(l, n)| (l.to_string(), *n)).collect()
}

fn counts_from(m: std::collections::HashMap<String, u64>) -> BTreeMap<Label<'static>, u64> {
    m.into_iter()
        .filter_map(|(l, n)| Some((label(&l)?, n)))
        .collect()
}

impl From<&Report> for pb::ReplayReport {
    // The deprecated RFC 3339 text fields are filled beside their Timestamps for one release.
    #[allow(deprecated)]
    fn from(r: &Report) -> Self {
        pb::ReplayReport {
            events_replayed: r.events_replayed,
            window_from: r.window_from.clone(),
            window_to: r.window_to.clone(),
            window_from_time: r.window_from.as_deref().and_then(time::from_rfc3339_opt),
            window_to_time: r.window_to.as_deref().and_then(time::from_rfc3339_opt),
            totals_before: counts_to(&r.totals.before),
            totals_after: counts_to(&r.totals.after),
            changed: r.changed,
            transitions: r
                .transitions
                .iter()
                .map(|t| pb::Transition {
                    from: t.from.to_string(),
                    to: t.to.to_string(),
                    count: t.count,
                    example_event_ids: t.example_event_ids.clone(),
                    by_rules: t
                        .by_rules
                        .iter()
                        .map(|s| pb::RuleShift {
                            before_rule: s.before_rule.clone(),
                            after_rule: s.after_rule.clone(),
                            count: s.count,
                        })
                        .collect(),
                })
                .collect(),
            rules: r
                .rules
                .iter()
                .map(|x| pb::RuleReport {
                    id: x.id.clone(),
                    first_matches: x.first_matches,
                    faults: x.faults,
                    from_pack: x.from_pack.clone(),
                    never_matched: x.never_matched,
                })
                .collect(),
            todos_per_day: Some(pb::TodosPerDay {
                before: r.todos_per_day.before,
                after: r.todos_per_day.after,
            }),
            truncated: r.truncated,
            stopped: r.stopped.clone(),
            retention: r.retention.as_ref().map(|w| pb::Retention {
                max_age_days: w.max_age_days,
                max_events_per_webhook: w.max_events_per_webhook,
                kept_since: w.kept_since.clone(),
                oldest_stored: w.oldest_stored.clone(),
                kept_since_time: time::from_rfc3339_opt(&w.kept_since),
                oldest_stored_time: w.oldest_stored.as_deref().and_then(time::from_rfc3339_opt),
            }),
        }
    }
}

impl From<pb::ReplayReport> for Report {
    fn from(r: pb::ReplayReport) -> Self {
        let todos = r.todos_per_day.unwrap_or_default();
        Report {
            events_replayed: r.events_replayed,
            window_from: time::to_rfc3339_opt(r.window_from_time.as_ref()),
            window_to: time::to_rfc3339_opt(r.window_to_time.as_ref()),
            totals: Totals {
                before: counts_from(r.totals_before),
                after: counts_from(r.totals_after),
            },
            changed: r.changed,
            transitions: r
                .transitions
                .into_iter()
                .filter_map(|t| {
                    Some(Transition {
                        from: label(&t.from)?,
                        to: label(&t.to)?,
                        count: t.count,
                        example_event_ids: t.example_event_ids,
                        by_rules: t
                            .by_rules
                            .into_iter()
                            .map(|s| RuleShift {
                                before_rule: s.before_rule,
                                after_rule: s.after_rule,
                                count: s.count,
                            })
                            .collect(),
                    })
                })
                .collect(),
            rules: r
                .rules
                .into_iter()
                .map(|x| RuleReport {
                    id: x.id,
                    first_matches: x.first_matches,
                    faults: x.faults,
                    from_pack: x.from_pack,
                    never_matched: x.never_matched,
                })
                .collect(),
            todos_per_day: TodosPerDay {
                before: todos.before,
                after: todos.after,
            },
            truncated: r.truncated,
            stopped: r.stopped,
            retention: r.retention.map(|w| Retention {
                max_age_days: w.max_age_days,
                max_events_per_webhook: w.max_events_per_webhook,
                kept_since: time::to_rfc3339_or_empty(w.kept_since_time.as_ref()),
                oldest_stored: time::to_rfc3339_opt(w.oldest_stored_time.as_ref()),
            }),
        }
    }
}

impl From<&Applied> for pb::Applied {
    fn from(a: &Applied) -> Self {
        pb::Applied {
            kind: pb::PlanKind::from(a.kind) as i32,
            webhook_id: a.webhook_id.clone(),
            version: a.version,
            digest: a.digest.clone(),
            pack_name: a.pack.name.clone(),
            pack_version: a.pack.version.clone(),
            provenance: a.provenance.as_ref().map(pb::InstalledPack::from),
            guard_id: a.guard_id.clone().unwrap_or_default(),
        }
    }
}

impl From<pb::Applied> for Applied {
    fn from(a: pb::Applied) -> Self {
        Applied {
            saved: true,
            kind: plan_kind(a.kind),
            webhook_id: a.webhook_id,
            version: a.version,
            digest: a.digest,
            pack: AppliedPack {
                name: a.pack_name,
                version: a.pack_version,
            },
            provenance: a.provenance.map(InstalledPack::from),
            guard_id: Some(a.guard_id).filter(|g| !g.is_empty()),
        }
    }
}

impl From<PlanState> for pb::PlanState {
    fn from(s: PlanState) -> Self {
        match s {
            PlanState::Planned => pb::PlanState::Planned,
            PlanState::PendingApproval => pb::PlanState::PendingApproval,
            PlanState::Applied => pb::PlanState::Applied,
            PlanState::Rejected => pb::PlanState::Rejected,
            PlanState::Stale => pb::PlanState::Stale,
            PlanState::Reverted => pb::PlanState::Reverted,
        }
    }
}

/// A wire plan state as the typed one (unknown: planned).
pub fn plan_state(s: i32) -> PlanState {
    match pb::PlanState::try_from(s).unwrap_or(pb::PlanState::Unspecified) {
        pb::PlanState::PendingApproval => PlanState::PendingApproval,
        pb::PlanState::Applied => PlanState::Applied,
        pb::PlanState::Rejected => PlanState::Rejected,
        pb::PlanState::Stale => PlanState::Stale,
        pb::PlanState::Reverted => PlanState::Reverted,
        pb::PlanState::Planned | pb::PlanState::Unspecified => PlanState::Planned,
    }
}

impl From<&Pending> for pb::PendingApproval {
    // The deprecated RFC 3339 text fields are filled beside their Timestamps for one release.
    #[allow(deprecated)]
    fn from(p: &Pending) -> Self {
        pb::PendingApproval {
            plan_id: p.plan_id.clone(),
            webhook_id: p.webhook_id.clone(),
            kind: pb::PlanKind::from(p.kind) as i32,
            pack_name: p.pack.name.clone(),
            pack_version: p.pack.version.clone(),
            console_url: p.console_url.clone(),
            approval_expires_at: p.approval_expires_at.clone(),
            approval_expires_at_time: time::from_rfc3339_opt(&p.approval_expires_at),
            approvals: Some(pb::PlanApprovals::from(&p.approvals)),
        }
    }
}

impl From<pb::PendingApproval> for Pending {
    fn from(p: pb::PendingApproval) -> Self {
        Pending {
            saved: false,
            state: PlanState::PendingApproval,
            plan_id: p.plan_id,
            webhook_id: p.webhook_id,
            kind: plan_kind(p.kind),
            pack: AppliedPack {
                name: p.pack_name,
                version: p.pack_version,
            },
            console_url: p.console_url,
            approval_expires_at: time::to_rfc3339_or_empty(p.approval_expires_at_time.as_ref()),
            approvals: p.approvals.map(Into::into).unwrap_or_default(),
        }
    }
}

fn placement_to(p: Option<Placement>) -> i32 {
    (match p {
        None => pb::Placement::Unspecified,
        Some(Placement::Prepend) => pb::Placement::Prepend,
        Some(Placement::Append) => pb::Placement::Append,
    }) as i32
}

fn placement_from(p: i32) -> Option<Placement> {
    match pb::Placement::try_from(p).unwrap_or(pb::Placement::Unspecified) {
        pb::Placement::Prepend => Some(Placement::Prepend),
        pb::Placement::Append => Some(Placement::Append),
        pb::Placement::Unspecified => None,
    }
}

fn requires_to(r: &Requires) -> pb::PackRequires {
    pb::PackRequires {
        source_types: r.source_types.clone(),
        capabilities: r.capabilities.clone(),
        packs: r.packs.clone(),
    }
}

fn requires_from(r: pb::PackRequires) -> Requires {
    Requires {
        source_types: r.source_types,
        capabilities: r.capabilities,
        packs: r.packs,
    }
}

impl From<&InstalledPack> for pb::InstalledPack {
    // The deprecated RFC 3339 text fields are filled beside their Timestamps for one release.
    #[allow(deprecated)]
    fn from(i: &InstalledPack) -> Self {
        pb::InstalledPack {
            name: i.name.clone(),
            version: i.version.clone(),
            rule_ids: i.rule_ids.clone(),
            owned_params: i.owned_params.clone(),
            installed_at: i.installed_at.clone(),
            installed_at_time: time::from_rfc3339_opt(&i.installed_at),
            installed_by_endpoint: i.installed_by.endpoint.clone(),
            installed_by_human: i.installed_by.human.clone(),
            proven: i.proven,
            truncated: i.truncated,
            events_replayed: i.replay.events_replayed,
            window_from: i.replay.window_from.clone(),
            window_to: i.replay.window_to.clone(),
            window_from_time: i
                .replay
                .window_from
                .as_deref()
                .and_then(time::from_rfc3339_opt),
            window_to_time: i
                .replay
                .window_to
                .as_deref()
                .and_then(time::from_rfc3339_opt),
            changed: i.replay.changed,
            replayed_at: i.replay.replayed_at.clone(),
            replayed_at_time: time::from_rfc3339_opt(&i.replay.replayed_at),
            digest: i.digest.clone(),
            rule_digests: i.rule_digests.clone().into_iter().collect(),
            sets_default_action: i.sets_default_action,
            requires: i.requires.as_ref().map(requires_to),
            placement: placement_to(i.placement),
        }
    }
}

impl From<pb::InstalledPack> for InstalledPack {
    fn from(i: pb::InstalledPack) -> Self {
        InstalledPack {
            name: i.name,
            version: i.version,
            rule_ids: i.rule_ids,
            digest: i.digest,
            rule_digests: i.rule_digests.into_iter().collect(),
            sets_default_action: i.sets_default_action,
            owned_params: i.owned_params,
            requires: i.requires.map(requires_from),
            placement: placement_from(i.placement),
            installed_at: time::to_rfc3339_or_empty(i.installed_at_time.as_ref()),
            installed_by: InstalledBy {
                endpoint: i.installed_by_endpoint,
                human: i.installed_by_human,
            },
            proven: i.proven,
            truncated: i.truncated,
            replay: ReplaySummary {
                events_replayed: i.events_replayed,
                window_from: time::to_rfc3339_opt(i.window_from_time.as_ref()),
                window_to: time::to_rfc3339_opt(i.window_to_time.as_ref()),
                changed: i.changed,
                replayed_at: time::to_rfc3339_or_empty(i.replayed_at_time.as_ref()),
            },
        }
    }
}

/// An action as its decision label (`queue:<name>`, `drop`, `quarantine`).
fn action_to(a: &Action) -> String {
    a.label().to_string()
}

/// A decision label back to an action; `None` for anything else.
fn action_from(label: &str) -> Option<Action> {
    match switchboard_model::Label::parse(label).ok()? {
        switchboard_model::Label::Drop => Some(Action::Drop),
        switchboard_model::Label::Quarantine => Some(Action::Quarantine),
        switchboard_model::Label::Queue(q) => Some(Action::Queue(q.to_string())),
        switchboard_model::Label::Default | switchboard_model::Label::Fault => None,
    }
}

impl From<&Listing> for pb::RulePackListing {
    // The deprecated RFC 3339 text fields are filled beside their Timestamps for one release.
    #[allow(deprecated)]
    fn from(l: &Listing) -> Self {
        pb::RulePackListing {
            for_webhook: l.packs.iter().any(|p| p.installed.is_some()),
            packs: l
                .packs
                .iter()
                .map(|p| pb::ListedPack {
                    name: p.name.clone(),
                    title: p.title.clone(),
                    summary: p.summary.clone(),
                    source: p.source.clone(),
                    available: p.available,
                    unavailable_reason: p.unavailable_reason.clone(),
                    versions: p.versions.iter().map(version_to).collect(),
                    installed: p
                        .installed
                        .clone()
                        .flatten()
                        .map(|i| pb::InstalledPackStatus {
                            version: i.version,
                            in_catalog: i.available,
                            unavailable_reason: i.unavailable_reason,
                            upgrade_to: i.upgrade_to,
                            proven: i.proven,
                            truncated: i.truncated,
                            last_replay_time: time::from_rfc3339_opt(&i.last_replay),
                            installed_at_time: time::from_rfc3339_opt(&i.installed_at),
                            last_replay: i.last_replay,
                            installed_at: i.installed_at,
                            installed_by_endpoint: i.installed_by.endpoint,
                            installed_by_human: i.installed_by.human,
                            rule_ids: i.rule_ids,
                            owned_params: i.owned_params,
                            drift: Some(pb::Drift {
                                state: i.drift.state.to_string(),
                                edited: i.drift.edited,
                                removed: i.drift.removed,
                            }),
                        }),
                })
                .collect(),
        }
    }
}

impl From<pb::RulePackListing> for Listing {
    fn from(l: pb::RulePackListing) -> Self {
        let for_webhook = l.for_webhook;
        Listing {
            packs: l
                .packs
                .into_iter()
                .map(|p| ListedPack {
                    name: p.name,
                    title: p.title,
                    summary: p.summary,
                    source: p.source,
                    available: p.available,
                    unavailable_reason: p.unavailable_reason,
                    versions: p.versions.into_iter().map(version_from).collect(),
                    installed: for_webhook.then(|| {
                        p.installed.map(|i| {
                            let drift = i.drift.unwrap_or_default();
                            InstalledStatus {
                                version: i.version,
                                available: i.in_catalog,
                                unavailable_reason: i.unavailable_reason,
                                upgrade_available: i.upgrade_to.is_some(),
                                upgrade_to: i.upgrade_to,
                                proven: i.proven,
                                truncated: i.truncated,
                                last_replay: time::to_rfc3339_or_empty(i.last_replay_time.as_ref()),
                                installed_at: time::to_rfc3339_or_empty(
                                    i.installed_at_time.as_ref(),
                                ),
                                installed_by: InstalledBy {
                                    endpoint: i.installed_by_endpoint,
                                    human: i.installed_by_human,
                                },
                                rule_ids: i.rule_ids,
                                owned_params: i.owned_params,
                                drift: Drift {
                                    state: DriftState::parse(&drift.state).unwrap_or_else(|| {
                                        DriftState::of(&drift.edited, &drift.removed)
                                    }),
                                    edited: drift.edited,
                                    removed: drift.removed,
                                },
                            }
                        })
                    }),
                })
                .collect(),
        }
    }
}

fn version_to(v: &PackVersion) -> pb::PackVersion {
    pb::PackVersion {
        version: v.version.clone(),
        available: v.available,
        missing_capabilities: v.missing_capabilities.clone(),
        retired: v.retired,
        superseded_by: v.superseded_by.clone(),
        upgrade_note: v.upgrade_note.clone(),
        params_schema: match &v.params_schema {
            Value::Object(m) => Some(to_struct(m)),
            _ => None,
        },
        param_checks: v
            .param_checks
            .iter()
            .map(|c| pb::ParamCheckSummary {
                id: c.id.clone(),
                message: c.message.clone(),
            })
            .collect(),
        requires: Some(requires_to(&v.requires)),
        placement: placement_to(v.placement),
        rules: v
            .rules
            .iter()
            .map(|r| pb::PackRule {
                id: r.id.clone(),
                description: r.description.clone(),
                action: action_to(&r.action),
            })
            .collect(),
        default_action: v.default_action.as_ref().map(action_to),
        fixtures: v.fixtures,
    }
}

fn version_from(v: pb::PackVersion) -> PackVersion {
    PackVersion {
        version: v.version,
        available: v.available,
        missing_capabilities: v.missing_capabilities,
        retired: v.retired,
        superseded_by: v.superseded_by,
        upgrade_note: v.upgrade_note,
        params_schema: v
            .params_schema
            .map(|s| Value::Object(from_struct(s)))
            .unwrap_or(Value::Null),
        param_checks: v
            .param_checks
            .into_iter()
            .map(|c| ParamCheckSummary {
                id: c.id,
                message: c.message,
            })
            .collect(),
        requires: v.requires.map(requires_from).unwrap_or_default(),
        placement: placement_from(v.placement),
        // A rule whose action label is not one this build knows is left out, not guessed.
        rules: v
            .rules
            .into_iter()
            .filter_map(|r| {
                Some(PackRule {
                    action: action_from(&r.action)?,
                    id: r.id,
                    description: r.description,
                })
            })
            .collect(),
        default_action: v.default_action.as_deref().and_then(action_from),
        fixtures: v.fixtures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn golden(name: &str) -> Value {
        let path = format!(
            "{}/../tests/all/golden/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The JSON an agent reads, through the typed plan and the gRPC message and back: the
    /// same JSON, so the two contracts say the same thing.
    #[test]
    fn every_golden_plan_reads_as_a_plan_and_survives_the_wire() {
        let plans = [
            golden("plan-install"),
            golden("plan-upgrade"),
            golden("plan-removal"),
            golden("plan-adoption")["plan"].clone(),
            golden("plan-removal-with-dependents")["dependent_removal"].clone(),
        ];
        for mut json in plans {
            // The goldens write a placeholder for the one time that changes with every run;
            // the message carries times as Timestamps, so a real time goes through instead.
            if json["expires_at"] == "<expires_at>" {
                json["expires_at"] = "2026-11-30T00:42:10.000Z".into();
            }
            let plan: Plan = serde_json::from_value(json.clone()).expect("a plan");
            assert_eq!(serde_json::to_value(&plan).expect("json"), json);
            let back = Plan::from(pb::Plan::from(&plan));
            assert_eq!(serde_json::to_value(&back).expect("json"), json);
        }
        let applied = golden("plan-adoption")["confirm"].clone();
        let typed: Applied = serde_json::from_value(applied.clone()).expect("applied");
        assert_eq!(serde_json::to_value(&typed).expect("json"), applied);
        let back = Applied::from(pb::Applied::from(&typed));
        assert_eq!(serde_json::to_value(&back).expect("json"), applied);
    }

    #[test]
    fn an_action_label_round_trips() {
        for a in [
            Action::Queue("review".into()),
            Action::Drop,
            Action::Quarantine,
        ] {
            assert_eq!(action_from(&action_to(&a)), Some(a));
        }
        assert_eq!(action_from("default"), None);
    }
}
