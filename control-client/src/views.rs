//! Control's answers as the JSON objects people and agents read: each MCP tool returns one
//! (as `structuredContent`, with these types' schemas as its `outputSchema`, behind the
//! `schema` feature) and the CLI's `--output json` prints the same one, so both surfaces show
//! one shape. Control's `*_json` text fields arrive here parsed, as real JSON; ids, versions
//! and times keep control's names.

use serde::Serialize;
use serde_json::{Map, Value};
use switchboard_model::{Label, RecordedDecision};

/// A JSON object.
pub type Object = Map<String, Value>;

/// Who counts as trusted for `.actor.trusted` (logins, compared exactly).
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TrustedActorsOut {
    pub humans: Vec<String>,
    pub agents: Vec<String>,
    pub bots: Vec<String>,
}

/// A webhook (never with its secret).
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WebhookOut {
    /// `wh_` and 32 hex characters.
    pub id: String,
    /// What people call it, shown beside the id; empty when unnamed (rename_webhook sets it).
    pub name: String,
    /// The owner scope it belongs to: `human:<login>` or `team:<slug>`.
    pub owner_scope: String,
    /// forgejo, gitea, github, cairn or generic.
    pub source_type: String,
    /// The queues rules may route to; the first is the default queue. Set by an operator.
    pub grant: Vec<String>,
    /// The first queue of the grant.
    pub default_queue: String,
    /// Deliveries with a missing or wrong signature are refused at the door.
    pub reject_unverified: bool,
    /// The saved configuration's version; pass it as expected_version to rule writes.
    pub config_version: i64,
    /// sha256 (hex) of the saved configuration.
    pub config_digest: String,
    /// The path deliveries are POSTed to on control's ingest address.
    pub ingest_path: String,
    /// First-class trusted actors, when set.
    pub trusted_actors: Option<TrustedActorsOut>,
    /// Installed rule packs' provenance, keyed by pack name.
    pub installed_packs: Object,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// Who may put a plan live: `self` (the endpoint that planned confirms it) or `person`
    /// (a confirm waits for people's acceptance on the console). Set by an operator.
    pub confirm_policy: String,
    /// What a guard does on a breach when its plan does not say: `revert` or `alert`; empty:
    /// the default, revert.
    pub guard_on_breach: String,
    /// How many distinct people must accept a plan, per risk (set by an operator, or the
    /// default when `approval_rule_default`).
    pub approval_rule: Option<switchboard_model::approval::ApprovalRule>,
    /// True when no operator set a rule and `approval_rule` is the default.
    pub approval_rule_default: bool,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CreateWebhookOut {
    pub webhook: WebhookOut,
    /// The signing secret, shown this once: configure the forge with it now.
    pub secret: String,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListWebhooksOut {
    /// The webhooks of your owner scope, oldest first.
    pub webhooks: Vec<WebhookOut>,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GetWebhookOut {
    pub webhook: WebhookOut,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DeleteWebhookOut {
    /// The id that was deleted, with its events, todos and history.
    pub webhook_id: String,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RotateWebhookSecretOut {
    pub webhook: WebhookOut,
    /// The new signing secret, shown this once: configure the forge with it now.
    pub secret: String,
}

/// A stored delivery without its headers and body.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EventSummaryOut {
    /// `ev_` and 32 hex characters.
    pub id: String,
    pub webhook_id: String,
    /// The forge's delivery id.
    pub delivery_id: String,
    /// forgejo, gitea, github, cairn or generic.
    pub source: String,
    /// `<event>` or `<event>.<action>`, e.g. `pull_request.opened`.
    pub kind: String,
    /// The signature checked out against the webhook's secret.
    pub verified: bool,
    /// Milliseconds since the Unix epoch.
    pub received_at_ms: i64,
    /// False until a router decided.
    pub routed: bool,
    /// The routing decision: {decision, queue?, rule_id?, fault_code?, reason?,
    /// by_default_action?}; null while not routed.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
    pub decision: Option<RecordedDecision>,
    /// The fault {rule_id, code, reason} when a rule faulted; null otherwise.
    pub fault: Option<Value>,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListWebhookEventsOut {
    /// Newest first.
    pub events: Vec<EventSummaryOut>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub next_cursor: Option<String>,
    /// How long and how many of this webhook's events are kept: the window that remains.
    pub retention: Option<RetentionOut>,
}

/// What a webhook's stored events cover. Events past the age or the count are purged in the
/// background, except one not yet routed and one an open todo still needs.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RetentionOut {
    /// Events received longer ago than this are purged.
    pub max_age_days: i64,
    /// Past this many stored events, the webhook's oldest are purged.
    pub max_events_per_webhook: u64,
    /// Events received before this instant (ms since the epoch) are past the age bound.
    pub kept_since_ms: i64,
    /// The webhook's oldest stored event (ms since the epoch); null when it has none.
    pub oldest_event_at_ms: Option<i64>,
}

/// One HTTP header of a delivery, name as received.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HeaderOut {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GetWebhookEventOut {
    pub event: EventSummaryOut,
    /// The headers in the order received.
    pub headers: Vec<HeaderOut>,
    /// The body parsed as JSON, when it is JSON; null otherwise (see `body`).
    pub payload: Option<Value>,
    /// The body when it is not JSON: as text when it is UTF-8, else base64 (see
    /// `body_encoding`); null when `payload` holds it.
    pub body: Option<String>,
    /// `utf-8` or `base64` when `body` is set; null otherwise.
    pub body_encoding: Option<String>,
}

/// Whether the configuration that decided an event can be shown.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RecordedVersionOut {
    /// The version is recorded and the history holds it: `rules` explain the decision.
    Known,
    /// No version is recorded (decided before versions were recorded, or not routed yet).
    Unknown,
    /// The version is recorded but the configuration history no longer holds it.
    NotInHistory,
}

/// How one rule, evaluated alone, answered the delivery.
#[derive(Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum RuleOutcomeOut {
    Matched,
    NotMatched,
    Fault,
}

/// One rule of the recorded version and its outcome for the delivery.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExplainedRuleOut {
    /// 0-based position in the recorded configuration.
    pub index: u32,
    pub rule_id: String,
    pub outcome: RuleOutcomeOut,
    /// The rule's action as a decision label: `queue:<name>`, `drop` or `quarantine`.
    pub action: String,
    /// For a fault: rule_fault, not_granted, budget_exceeded, ...; null otherwise.
    pub fault_code: Option<String>,
    /// For a fault: a short reason (never payload text); null otherwise.
    pub reason: Option<String>,
    /// The rule the recorded decision names.
    pub deciding: bool,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExplainWebhookEventOut {
    pub event_id: String,
    pub webhook_id: String,
    /// `<event>` or `<event>.<action>`.
    pub kind: String,
    /// The decision recorded on the event: {decision, queue?, rule_id?, fault_code?, reason?,
    /// by_default_action?}; null while not routed.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
    pub recorded_decision: Option<RecordedDecision>,
    pub recorded_version_status: RecordedVersionOut,
    /// The configuration version the decision was recorded under; null: unknown.
    pub recorded_version: Option<i64>,
    /// sha256 (hex) of that configuration; null: unknown.
    pub recorded_digest: Option<String>,
    /// The recorded version's rules in order up to and including the deciding rule (every
    /// rule when the default decided), each evaluated alone over this delivery; empty unless
    /// recorded_version_status is `known`.
    pub rules: Vec<ExplainedRuleOut>,
    /// The recorded version evaluated whole, again, now; null unless the version is known.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
    pub reevaluated_decision: Option<RecordedDecision>,
    /// The re-evaluation decides otherwise than the recorded decision (a rule reads the time
    /// or changing state, a fault came or went, or the grant changed).
    pub reevaluation_differs: bool,
    /// The webhook's configuration version now.
    pub current_version: i64,
    pub current_digest: String,
    /// What the current configuration decides for this delivery.
    #[cfg_attr(feature = "schema", schemars(with = "Value"))]
    pub current_decision: RecordedDecision,
    /// The current decision differs from the recorded one (or nothing is recorded yet).
    pub current_differs: bool,
    /// Each trial running beside the deciding configuration when the delivery arrived, with
    /// its candidate's decision for it (evaluated again now).
    pub trials: Vec<ExplainedTrialOut>,
}

/// A trial's candidate over an explained delivery.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ExplainedTrialOut {
    pub trial_id: String,
    /// The plan whose candidate it tries.
    pub plan_id: String,
    /// The candidate's decision: {decision, queue?, rule_id?, fault_code?, reason?, by_default_action?}.
    #[cfg_attr(feature = "schema", schemars(with = "Value"))]
    pub decision: RecordedDecision,
    /// It decides otherwise than the recorded decision.
    pub differs: bool,
}

/// One event a redrive selected.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RedriveEventOut {
    pub event_id: String,
    pub kind: String,
    pub received_at_ms: i64,
    /// `quarantine`, `fault` or `pending`.
    pub before: String,
    /// The decision recorded now; null for a pending event.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
    pub before_decision: Option<RecordedDecision>,
    /// The decision label the current configuration gives it.
    pub after: Label<'static>,
    #[cfg_attr(feature = "schema", schemars(with = "Value"))]
    pub after_decision: Option<RecordedDecision>,
    /// A confirm records it (the label differs, or the event is pending).
    pub changes: bool,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RedriveTransitionOut {
    pub from: String,
    pub to: Label<'static>,
    pub count: u64,
    /// Up to 20 of the events that move.
    pub example_event_ids: Vec<String>,
}

/// How to apply a redrive plan.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RedriveConfirmWithOut {
    /// `confirm_webhook_redrive`.
    pub tool: String,
    pub webhook_id: String,
    pub plan_token: String,
    pub note: String,
}

/// A redrive plan: nothing was changed.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RedrivePlanOut {
    pub webhook_id: String,
    /// The configuration the events were evaluated under; a save since makes the plan stale.
    pub config_version: i64,
    pub config_digest: String,
    /// The selected events, oldest first.
    pub events: Vec<RedriveEventOut>,
    /// Selected events per state before and per decision label after.
    pub totals_before: Map<String, Value>,
    pub totals_after: Map<String, Value>,
    /// Events a confirm would record.
    pub changes: u64,
    /// Lost work (to `drop`) first, then by count.
    pub transitions: Vec<RedriveTransitionOut>,
    /// More events matched than the limit: redrive again after confirming.
    pub truncated: bool,
    /// The token is refused after this (RFC 3339).
    pub expires_at: String,
    pub plan_token: String,
    pub confirm_with: RedriveConfirmWithOut,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RedriveOutcomeOut {
    pub event_id: String,
    pub before: String,
    pub after: String,
    /// False: routed since the plan saw it (or deleted), left as it is.
    pub applied: bool,
    pub todo_id: Option<String>,
    /// The todo is new; false: the delivery already had it.
    pub todo_created: bool,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ConfirmWebhookRedriveOut {
    pub webhook_id: String,
    /// The redrive's record, which keeps each event's decision from before.
    pub redrive_id: String,
    pub config_version: i64,
    pub config_digest: String,
    pub events: Vec<RedriveOutcomeOut>,
    pub applied: u64,
    /// Events routed since the plan saw them, left as they are.
    pub skipped: u64,
    pub todos_created: u64,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListWebhookRulesOut {
    pub webhook_id: String,
    /// The saved configuration: {rules: [{id, description?, when, action}], default_action?,
    /// params}.
    pub configuration: Object,
    /// The saved version; pass it as expected_version to make a write conditional.
    pub version: i64,
    /// sha256 (hex) of the configuration's canonical JSON.
    pub digest: String,
    /// The queues rules may route to; the first is the default queue.
    pub grant: Vec<String>,
    /// Installed rule packs' provenance, keyed by pack name.
    pub installed_packs: Object,
    /// Whether `.actor` and the quarantine action exist on this instance.
    pub trusted_actors_capability: bool,
}

/// The outcome of a rule write.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SaveRulesOut {
    pub webhook_id: String,
    /// The version now saved.
    pub version: i64,
    /// sha256 (hex) of the configuration now saved.
    pub digest: String,
    /// True when nothing changed: the result equals the saved configuration.
    pub duplicate: bool,
    /// Ids given to rules that had none, in rule order.
    pub minted_rule_ids: Vec<String>,
    /// The configuration now saved.
    pub configuration: Object,
}

/// A dry run's outcome: the saved configuration's and the candidate's decisions for one
/// delivery, or (with replay) the report over many.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TestWebhookRulesOut {
    pub webhook_id: String,
    /// The event that was routed; null for a made-up payload.
    pub event_id: Option<String>,
    /// The kind the delivery was routed as.
    pub kind: String,
    /// The saved configuration's version.
    pub saved_version: i64,
    /// The saved configuration's decision: {decision, queue?, rule_id?, fault_code?, reason?};
    /// null for a replay (see replay_report).
    #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
    pub saved_decision: Option<RecordedDecision>,
    /// The candidate's decision; null without a candidate.
    #[cfg_attr(feature = "schema", schemars(with = "Option<Value>"))]
    pub candidate_decision: Option<RecordedDecision>,
    /// True when the candidate decides differently from the saved configuration.
    pub changed: bool,
    /// The candidate as it would be saved (ids minted); null without one.
    pub candidate_configuration: Option<Object>,
    /// sha256 (hex) of the candidate; null without one.
    pub candidate_digest: Option<String>,
    /// Ids given to candidate rules that had none, in rule order.
    pub minted_rule_ids: Vec<String>,
    /// With replay: the report over the replayed deliveries (events_replayed, window, decision
    /// totals before and after, changed, transitions with example event ids, per-rule first
    /// matches and faults with never_matched flagged, todos per day, rule diff). Nothing is
    /// saved and there is no plan_token. Null without replay.
    pub replay_report: Option<Object>,
}

/// One saved version of a configuration.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HistoryRecordOut {
    pub version: i64,
    /// The endpoint that saved it; null for an operator.
    pub actor_endpoint_id: Option<String>,
    /// The endpoint's human; null for an operator.
    pub actor_human: Option<String>,
    /// What the change was, e.g. {"op": "update_webhook_rule", "rule_id": "r-1"}.
    pub change: Value,
    /// Where the change came from (a pack, a plan); null when none was recorded.
    pub provenance: Option<Value>,
    /// sha256 of the configuration before; null for version 1.
    pub digest_before: Option<String>,
    /// sha256 of the configuration after.
    pub digest_after: String,
    /// The configuration as saved at this version (roll back by passing it to
    /// set_webhook_rules).
    pub configuration: Object,
    /// Milliseconds since the Unix epoch.
    pub saved_at_ms: i64,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListWebhookHistoryOut {
    /// Newest first.
    pub records: Vec<HistoryRecordOut>,
    /// Pass as `cursor` for older versions; null on the last page.
    pub next_cursor: Option<String>,
}

/// One change-log entry as its owners read it (list_webhook_changes): the entry itself, and
/// its hash (the next entry's `prev_hash`).
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ChangeOut {
    #[serde(flatten)]
    pub entry: switchboard_model::change_log::ChangeEntry,
    /// SHA-256 of the entry's canonical JSON.
    pub hash: String,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListWebhookChangesOut {
    /// Oldest first.
    pub changes: Vec<ChangeOut>,
    /// Pass as `after_seq` for the next page; null when nothing more matched.
    pub next_after_seq: Option<u64>,
}

/// The rule-pack catalog and, for a webhook, what is installed there.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListRulePacksOut {
    /// Every pack with its versions (availability, params_schema, requirements, rules) and,
    /// listed for a webhook, what is installed there (null when not installed): version,
    /// upgrade_available, proven, last replay and drift.
    pub packs: Vec<switchboard_model::listing::ListedPack>,
}

/// What install_rule_pack and remove_rule_pack answer: the plan (nothing saved), the same type
/// control builds it from.
pub type PlanOut = switchboard_model::plan::Plan;

/// A trial and its report (start_rule_trial, stop_rule_trial, get_rule_trial): deliveries
/// seen, evaluated and shed, the plan's report over them (before: the live decision, after:
/// the candidate's), and each transition's forecast beside what was observed.
pub type RuleTrialOut = switchboard_model::trial::TrialReport;

/// A guard's report (get_rule_guard): the trial report read the change's way round (before:
/// the replaced configuration's decision, after: the confirmed one's), with the guard's
/// terms, any breach, the revert and the recovery.
pub type RuleGuardOut = switchboard_model::guard::GuardReport;

/// A webhook's trials (list_rule_trials), newest first.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListRuleTrialsOut {
    /// Running and ended, each with its report.
    pub trials: Vec<switchboard_model::trial::TrialReport>,
}

/// What confirm_rule_pack_plan answers: the applied result (saved: true), or on a webhook
/// whose confirm_policy is `person` the pending approval (nothing saved).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ConfirmOut {
    Applied(Box<switchboard_model::plan::Applied>),
    Pending(Box<switchboard_model::plan::Pending>),
}

/// An object that is one of the two: applied or pending approval.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for ConfirmOut {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ConfirmOut".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let applied = generator.subschema_for::<switchboard_model::plan::Applied>();
        let pending = generator.subschema_for::<switchboard_model::plan::Pending>();
        schemars::json_schema!({
            "type": "object",
            "description": "The applied result: saved: true, version, digest, pack and provenance; or, on a webhook whose confirm_policy is person, saved: false, state: pending_approval and the console_url where a person accepts it.",
            "oneOf": [applied, pending],
        })
    }
}

/// Where a plan stands (get_rule_pack_plan).
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RulePackPlanOut {
    pub plan_id: String,
    pub webhook_id: String,
    /// planned (its token confirms it), pending_approval (a person has yet to decide),
    /// applied, rejected, or stale (plan again).
    pub state: switchboard_model::plan::PlanState,
    /// Why it is stale: expired, approval_expired or configuration_changed.
    pub stale_reason: Option<String>,
    pub pack: switchboard_model::plan::AppliedPack,
    pub kind: switchboard_model::plan::PlanKind,
    /// RFC 3339: when the token stops confirming (a pending plan: the approval deadline).
    pub expires_at: String,
    /// Where a person reviews it, while it is pending.
    pub console_url: Option<String>,
    /// Who proposed it (endpoint, human), who decided it, and why it was rejected.
    pub proposed_by_endpoint: Option<String>,
    pub proposed_by_human: Option<String>,
    pub decided_by: Option<String>,
    pub reject_reason: Option<String>,
    /// Once applied: the guard its confirm started (as get_rule_guard gives it), with any
    /// breach, the revert and the recovery.
    pub guard: Option<switchboard_model::guard::GuardReport>,
    /// Once put before a person: how many distinct people must accept it, the approvals
    /// given (and whether each counts), how many more are needed and from whom they cannot
    /// come.
    pub approvals: Option<switchboard_model::approval::Tally>,
}

/// A todo: work a queue decision produced.
#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TodoOut {
    /// `td_` and 32 hex characters.
    pub id: String,
    pub webhook_id: String,
    /// The stored delivery it came from (get_webhook_event shows it).
    pub event_id: String,
    pub delivery_id: String,
    pub queue: String,
    /// The rule that routed it; null when the default queue took it.
    pub rule_id: Option<String>,
    /// open (in its queue: never claimed, released, or its claim expired), claimed or
    /// completed.
    pub state: String,
    /// Milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// The endpoint that claimed it; null while unclaimed. In state open, the endpoint whose
    /// claim expired.
    pub claimed_by: Option<String>,
    pub claimed_at_ms: Option<i64>,
    /// RFC 3339: when the claim expires and the todo is back in its queue (claim it again
    /// before then to renew); null while unclaimed.
    pub claim_expires_at: Option<String>,
    /// The endpoint that completed it; null until completed.
    pub completed_by: Option<String>,
    pub completed_at_ms: Option<i64>,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ListTodosOut {
    /// Oldest first.
    pub todos: Vec<TodoOut>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TodoResultOut {
    pub todo: TodoOut,
}
