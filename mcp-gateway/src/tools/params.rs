//! What each tool takes. The input schemas agents see are generated from these types, so a
//! field's doc comment is what an agent reads to fill it in: say what it is, where to get it,
//! and what happens when it is left out. Unknown fields are refused.
//!
//! A configuration and a rule patch are the JSON an agent writes here; the gateway reads them
//! into control's typed messages at the edge (`switchboard_proto::convert::json`), reporting a shape
//! problem itself. Params are the tenant's own values and travel as a `Struct`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use switchboard_proto::control::v1 as pb;

/// No arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Where deliveries come from; decides how signatures are checked and how the event kind is read.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Forgejo (`X-Forgejo-Signature`, `X-Forgejo-Event`).
    Forgejo,
    /// Gitea (`X-Gitea-Signature`, `X-Gitea-Event`).
    Gitea,
    /// GitHub (`X-Hub-Signature-256`, `X-GitHub-Event`).
    Github,
    /// The internal agent hand-off system (Cairn).
    Cairn,
    /// Anything else that POSTs JSON.
    Generic,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhookParams {
    /// The forge (or system) that will POST deliveries to the webhook.
    pub source_type: SourceKind,
    /// The queues rules may route to, in order; the first is the default queue (where a
    /// delivery goes when no rule decides). 1–64 characters each: lower-case letters, digits,
    /// '.', '_' or '-'. Example: ["forge", "review", "triage"]. Each must be a queue an
    /// operator allowed your owner scope (grant_not_allowed otherwise).
    pub grant: Vec<String>,
    /// The signing secret the forge is configured with (16–256 characters). Leave it out to
    /// have 256 random bits generated; either way it is returned once, in this call's result.
    #[serde(default)]
    pub secret: Option<String>,
    /// true: deliveries with a missing or wrong signature are refused at the door (401,
    /// nothing stored). false (default): they are stored with verified=false and rules decide.
    #[serde(default)]
    pub reject_unverified: bool,
    /// A name people will know it by, shown beside its id in listings and the console
    /// (1–80 characters, no control characters). Example: "acme/payments (prod)".
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookIdParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameWebhookParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The new name (1–80 characters, no control characters); an empty string clears it.
    pub name: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateWebhookSecretParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The new signing secret (16–256 characters). Leave it out to have 256 random bits
    /// generated. Returned once; configure the forge with it right away.
    #[serde(default)]
    pub secret: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWebhookEventsParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// `next_cursor` from the previous page; leave it out for the newest events.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Events per page, 1–200 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetWebhookEventParams {
    /// The event's id: `ev_` and 32 hex characters, as list_webhook_events shows it.
    pub event_id: String,
    /// Optional: when given, the event must belong to this webhook.
    #[serde(default)]
    pub webhook_id: Option<String>,
}

/// Which events a redrive selects; every field narrows.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveFilterParams {
    /// Any of `quarantine`, `fault`, `pending` (not routed yet) and `drop` (to recover work a
    /// change dropped). Default: quarantine, fault and pending. A delivery that already has a
    /// todo is never selected.
    #[serde(default)]
    pub decisions: Vec<String>,
    /// Received at or after this (ms since the epoch).
    pub since_ms: Option<i64>,
    /// Received at or before this (ms since the epoch).
    pub until_ms: Option<i64>,
    /// Only these events of the webhook.
    #[serde(default)]
    pub event_ids: Vec<String>,
    /// Only events decided by this configuration version (list_webhook_history shows them).
    pub config_version: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveWebhookEventsParams {
    pub webhook_id: String,
    #[serde(default)]
    pub filter: RedriveFilterParams,
    /// Events to plan at most. Default 100, at most 1000.
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmWebhookRedriveParams {
    /// The webhook the redrive was planned for.
    pub webhook_id: String,
    /// The plan_token redrive_webhook_events returned.
    pub plan_token: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExplainWebhookEventParams {
    /// The event's id: `ev_` and 32 hex characters, as list_webhook_events shows it.
    pub event_id: String,
}

/// A routing configuration, exactly as saved and listed.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct ConfigurationSchema {
    /// The rules, tried in order: the first whose `when` outputs `true` decides. At most 32.
    rules: Vec<RuleSchema>,
    /// What decides when no rule matches; left out, the webhook's default queue (the first
    /// queue of its grant) takes the delivery.
    #[serde(default)]
    default_action: Option<ActionSchema>,
    /// Values every `when` expression sees as `$params` (a JSON object, at most 64 KiB).
    #[serde(default)]
    params: Option<Map<String, Value>>,
}

/// One routing rule.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RuleSchema {
    /// The rule's id, matching `^[a-z0-9]+(-{1,2}[a-z0-9]+)*$`, at most 64 characters, unique
    /// in the configuration. `--` is reserved for rules installed by rule packs. Leave it out
    /// to have one minted (`r-<n>`).
    #[serde(default)]
    id: Option<String>,
    /// What the rule is for, in a sentence.
    #[serde(default)]
    description: Option<String>,
    /// A jq expression over the delivery's envelope (`.kind`, `.action`, `.payload`,
    /// `.headers`, `.verified`, `.actor`); the rule matches when its first output is `true`.
    /// At most 4 KiB; no `def`, `input`, `env`, `$ENV`, `debug`, `halt` or unbounded generators.
    when: String,
    /// Where a matching delivery goes.
    action: ActionSchema,
}

/// Where a matched delivery goes: `{"queue": "<name>"}` (a queue of the webhook's grant),
/// `{"drop": true}`, or `{"quarantine": true}` (with the trusted_actors capability).
#[derive(JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
#[allow(dead_code)]
pub enum ActionSchema {
    /// Route to a queue of the webhook's grant: a todo is created.
    Queue {
        /// The queue's name; it must be in the webhook's grant.
        queue: String,
    },
    /// Drop the delivery: no todo.
    Drop {
        /// Always true.
        #[schemars(extend("const" = true))]
        drop: bool,
    },
    /// Quarantine the delivery (needs the trusted_actors capability).
    Quarantine {
        /// Always true.
        #[schemars(extend("const" = true))]
        quarantine: bool,
    },
}

/// The fields of one rule to change; fields left out keep their saved value.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct RulePatchSchema {
    /// A new id for the rule (renames it).
    #[serde(default)]
    id: Option<String>,
    /// A new description; null removes it.
    #[serde(default)]
    description: Option<String>,
    /// A new jq expression.
    #[serde(default)]
    when: Option<String>,
    /// A new action.
    #[serde(default)]
    action: Option<ActionSchema>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetWebhookRulesParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The whole new configuration; it replaces the saved one. Every problem is reported at
    /// once (`invalid_configuration`); try it first with test_webhook_rules.
    #[schemars(with = "ConfigurationSchema")]
    pub configuration: Value,
    /// Save only if the saved configuration is still at this version (list_webhook_rules
    /// shows it); otherwise the call fails with `version_mismatch`. Recommended.
    #[serde(default)]
    pub expected_version: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateWebhookRuleParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The id of the rule to change, as list_webhook_rules shows it.
    pub rule_id: String,
    /// The fields to change; fields left out keep their saved value.
    #[schemars(with = "RulePatchSchema")]
    pub rule: Value,
    /// Save only if the saved configuration is still at this version; otherwise
    /// `version_mismatch`.
    #[serde(default)]
    pub expected_version: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeleteWebhookRuleParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The id of the rule to remove, as list_webhook_rules shows it.
    pub rule_id: String,
    /// Save only if the saved configuration is still at this version; otherwise
    /// `version_mismatch`.
    #[serde(default)]
    pub expected_version: Option<i64>,
}

/// A delivery made up for a dry run.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestPayloadParams {
    /// The delivery's body as the forge would send it (a JSON document).
    pub body: Value,
    /// `<event>` or `<event>.<action>`, e.g. `pull_request.opened`. Left out: read from the
    /// forge's event header in `headers` and the body's `action`.
    #[serde(default)]
    pub kind: Option<String>,
    /// HTTP headers as the forge would send them, name → value, e.g.
    /// {"X-GitHub-Event": "pull_request"}.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Whether the delivery counts as signed (default true).
    #[serde(default)]
    pub verified: Option<bool>,
    /// The forge's delivery id; generated when left out.
    #[serde(default)]
    pub delivery_id: Option<String>,
}

/// The replay window: the webhook's most recent stored deliveries.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayParams {
    /// How many of the most recent deliveries to replay, 1–1000 (default 200).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// Only deliveries received at or after this time, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub since_ms: Option<i64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestWebhookRulesParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// Route one stored event of this webhook again (from list_webhook_events). Give exactly
    /// one of event_id, payload and replay.
    #[serde(default)]
    pub event_id: Option<String>,
    /// Route a delivery you make up. Give exactly one of event_id, payload and replay.
    #[serde(default)]
    pub payload: Option<TestPayloadParams>,
    /// Replay the candidate and the saved configuration side by side over the webhook's
    /// recent stored deliveries. Give exactly one of event_id, payload and replay.
    #[serde(default)]
    pub replay: Option<ReplayParams>,
    /// The candidate configuration to compare with the saved one, validated as a save would
    /// (rules without an id get one). Left out: only the saved configuration is routed.
    #[serde(default)]
    #[schemars(with = "Option<ConfigurationSchema>")]
    pub configuration: Option<Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWebhookHistoryParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// `next_cursor` from the previous page; leave it out for the newest versions.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Versions per page, 1–200 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWebhookChangesParams {
    /// Only this webhook's changes; left out: every webhook of your scope, and the scope's own.
    #[serde(default)]
    pub webhook_id: Option<String>,
    /// `next_after_seq` from the previous page; left out: from the first entry.
    #[serde(default)]
    pub after_seq: Option<u64>,
    /// Entries per page, 1–1000 (default 100).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u32>,
    /// Only changes this actor made or approved: an endpoint id, a person's login or an
    /// operator credential id.
    #[serde(default)]
    pub actor: Option<String>,
    /// Only changes at or after / before these times, in milliseconds since the Unix epoch.
    #[serde(default)]
    pub since_ms: Option<i64>,
    #[serde(default)]
    pub until_ms: Option<i64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListRulePacksParams {
    /// Optional: a webhook of yours, to also see what is installed there (version, upgrade
    /// available, proven, drift).
    #[serde(default)]
    pub webhook_id: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstallRulePackParams {
    /// The webhook to install on: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The pack's name, as list_rule_packs shows it, e.g. `drop-ci-noise`.
    pub name: String,
    /// `2`, `2.1` or `2.1.0`; left out: the newest available version. Installing another
    /// version of an installed pack plans an upgrade or downgrade.
    #[serde(default)]
    pub version: Option<String>,
    /// The pack's params (its params_schema in list_rule_packs). A param left out keeps the
    /// webhook's current value, else the schema default.
    #[serde(default)]
    pub params: Option<Map<String, Value>>,
    /// Ids of hand-written rules on the webhook that the pack takes over: they are removed
    /// before the pack's rules are inserted (a replay with changed: 0 proves nothing changes).
    #[serde(default)]
    pub replaces: Option<Vec<String>>,
    /// The replay window for the plan (default: the 200 most recent deliveries).
    #[serde(default)]
    pub replay: Option<ReplayParams>,
    /// Plan an upgrade even though installed rules of this pack were edited by hand, replacing
    /// those edits (otherwise the plan is refused with `local_edits`, naming them).
    #[serde(default)]
    pub overwrite_local_edits: bool,
    /// Params an upgrade leaves owned by no pack (the plan's `param_diff.orphaned`, e.g.
    /// `require_verified` going from trusted-actors 1 to 2) that should stay on the webhook;
    /// the others are removed with the change.
    #[serde(default)]
    pub keep_params: Option<Vec<String>>,
    /// The guard a confirm starts (default: 1,000 deliveries or 7 days; on a breach, the
    /// webhook's default).
    #[serde(default)]
    pub guard: Option<GuardParams>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanWebhookRulesParams {
    /// The webhook's id: `wh_` and 32 hex characters, as list_webhooks shows it.
    pub webhook_id: String,
    /// The whole new configuration, as set_webhook_rules takes it; rules without an id get
    /// one.
    #[schemars(with = "ConfigurationSchema")]
    pub configuration: Value,
    /// The replay window for the plan (default: the 200 most recent deliveries).
    #[serde(default)]
    pub replay: Option<ReplayParams>,
    /// The guard a confirm starts (default: 1,000 deliveries or 7 days; on a breach, the
    /// webhook's default).
    #[serde(default)]
    pub guard: Option<GuardParams>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveRulePackParams {
    /// The webhook the pack is installed on: `wh_` and 32 hex characters.
    pub webhook_id: String,
    /// The installed pack's name, e.g. `drop-ci-noise`.
    pub name: String,
    /// The replay window for the plan (default: the 200 most recent deliveries).
    #[serde(default)]
    pub replay: Option<ReplayParams>,
    /// Params only this pack owns that should stay on the webhook after the removal (the
    /// plan's `param_diff.orphaned`); the others are removed with it.
    #[serde(default)]
    pub keep_params: Option<Vec<String>>,
    /// The guard a confirm starts.
    #[serde(default)]
    pub guard: Option<GuardParams>,
}

/// What a plan asks of the guard its confirm starts: after the confirm the replaced rules
/// keep running in the shadow on live deliveries, and a change that loses more work than
/// the plan forecast is reverted (or alerted on).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardParams {
    /// The window ends after this many live deliveries (default 1,000).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_deliveries: Option<u64>,
    /// ... or this long after the confirm, in milliseconds (default 7 days, at most 30).
    #[serde(default)]
    pub max_duration_ms: Option<u64>,
    /// `revert` (save the replaced configuration again and recover the lost work) or
    /// `alert` (show and count the breach only); left out: the webhook's default.
    #[serde(default)]
    pub on_breach: Option<switchboard_model::guard::OnBreach>,
}

/// `get_rule_guard`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GuardIdParams {
    /// The webhook's id: `wh_` and 32 hex characters.
    pub webhook_id: String,
    /// The guard's id (`gd_…`, as confirm_rule_pack_plan answers it in guard_id); left out:
    /// the webhook's newest guard.
    #[serde(default)]
    pub guard_id: Option<String>,
}

/// Which todos to list.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TodoFilterArg {
    /// Not completed, claimed or not (the default).
    Open,
    /// Not completed and not held by a claim that has not expired: what an agent may take.
    Unclaimed,
    /// Everything, completed too.
    All,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListTodosParams {
    /// The queue to list, e.g. `review` (a queue of a webhook's grant).
    pub queue: String,
    /// Which todos: `open` (default), `unclaimed` or `all`.
    #[serde(default)]
    pub filter: Option<TodoFilterArg>,
    /// `next_cursor` from the previous page; leave it out for the oldest todos.
    #[serde(default)]
    pub cursor: Option<String>,
    /// Todos per page, 1–200 (default 50).
    #[serde(default)]
    #[schemars(range(min = 1, max = 200))]
    pub limit: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanTokenParams {
    /// A plan_token from install_rule_pack or remove_rule_pack.
    pub plan_token: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmRulePackPlanParams {
    /// The webhook the plan was made for.
    pub webhook_id: String,
    /// The plan_token of the plan to put live.
    pub plan_token: String,
    /// Needed to confirm an unproven or truncated plan. Default false.
    #[serde(default)]
    pub allow_unproven: bool,
    /// Needed to confirm a promotion (promote_rule_trial) whose trial is insufficient
    /// (trial_sufficient: false). Default false.
    #[serde(default)]
    pub allow_insufficient_trial: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRuleTrialParams {
    /// The webhook the plan was made for.
    pub webhook_id: String,
    /// The plan_token of a plan that could still be confirmed (from install_rule_pack,
    /// remove_rule_pack or plan_webhook_rules). It is not used up: the plan can still be
    /// confirmed.
    pub plan_token: String,
    /// End the trial after this many live deliveries. Default: no count limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_deliveries: Option<u64>,
    /// End the trial this many milliseconds after it starts. Default 7 days.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub max_duration_ms: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrialIdParams {
    /// The trial's id: `tr_` and 32 hex characters, as start_rule_trial and list_rule_trials
    /// show it.
    pub trial_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteRuleTrialParams {
    /// The trial's id: `tr_` and 32 hex characters.
    pub trial_id: String,
    /// The replay window of the promotion's plan (default: the 200 most recent deliveries).
    #[serde(default)]
    pub replay: Option<ReplayParams>,
    /// The guard a confirm starts.
    #[serde(default)]
    pub guard: Option<GuardParams>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoIdParams {
    /// The todo's id: `td_` and 32 hex characters, as list_todos shows it.
    pub todo_id: String,
}

/// The source kind as control's enum.
pub fn source_type(kind: SourceKind) -> pb::SourceType {
    match kind {
        SourceKind::Forgejo => pb::SourceType::Forgejo,
        SourceKind::Gitea => pb::SourceType::Gitea,
        SourceKind::Github => pb::SourceType::Github,
        SourceKind::Cairn => pb::SourceType::Cairn,
        SourceKind::Generic => pb::SourceType::Generic,
    }
}

/// The todo filter as control's enum; open when left out.
pub fn todo_filter(filter: Option<TodoFilterArg>) -> pb::TodoFilter {
    match filter {
        None | Some(TodoFilterArg::Open) => pb::TodoFilter::Open,
        Some(TodoFilterArg::Unclaimed) => pb::TodoFilter::Unclaimed,
        Some(TodoFilterArg::All) => pb::TodoFilter::All,
    }
}
