//! The tool catalog: one tool per [`Verb`], each a thin call of one control RPC. Schemas come
//! from the typed params in [`params`] and the outputs, the shared client's views
//! (`switchboard_control_client::views`, which the CLI's `--output json` prints too); the
//! names and annotations are the verbs' (`switchboard_model::verb`), set deliberately per verb
//! and pinned by golden files (`tests/snapshots/`).

pub mod calls;
pub mod params;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};

use rmcp::handler::server::tool::{schema_for_input, schema_for_output, schema_for_type};
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use schemars::JsonSchema;
use serde_json::Value;
use switchboard_control_client::CallError;
use switchboard_control_client::views as out;
use switchboard_model::Verb;

use self::params as p;

/// One verb as a tool: what it is called, what it does, and what it touches. The name and
/// the annotations are the [`Verb`]'s, so control and the gateway read one table.
pub struct ToolSpec {
    pub verb: Verb,
    pub title: &'static str,
    pub description: &'static str,
    input: fn() -> Arc<JsonObject>,
    output: fn() -> Arc<JsonObject>,
    /// Parses the arguments into the tool's params, runs its handler, and serializes its
    /// output: the types of all three are the schemas' types, checked by the compiler.
    pub call: fn(calls::Call, JsonObject) -> ToolFuture,
}

/// What a tool call comes to.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, CallError>> + Send>>;

fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let schema = schema_for_input::<T>()
        .unwrap_or_else(|e| panic!("the input schema of {}: {e}", std::any::type_name::<T>()));
    Arc::new(tidy(inline(schema.as_ref().clone())))
}

/// The serialize-side schema, keeping the type's doc comment as the root description (it
/// says what the result is, where the fields alone do not).
fn output<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    let mut schema = schema_for_output::<T>().as_ref().clone();
    if let Some(description) = schema_for_type::<T>().get("description") {
        schema.insert("description".into(), description.clone());
    }
    Arc::new(tidy(inline(schema)))
}

/// Replaces every `{"$ref": "#/$defs/X"}` with X itself and drops `$defs`: some MCP clients
/// do not resolve references. (No tool's types are recursive; a reference met again inside
/// itself would be left as it is, and the test that no schema has one would fail.)
fn inline(mut schema: JsonObject) -> JsonObject {
    let defs = match schema.remove("$defs") {
        Some(Value::Object(defs)) => defs,
        _ => return schema,
    };
    fn walk(value: &mut Value, defs: &JsonObject, seen: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                let target = map
                    .get("$ref")
                    .and_then(Value::as_str)
                    .and_then(|r| r.strip_prefix("#/$defs/"))
                    .map(str::to_string);
                if let Some(name) = target
                    && !seen.contains(&name)
                    && let Some(Value::Object(def)) = defs.get(&name)
                {
                    map.remove("$ref");
                    // The referring site's own keys (a field's description) win.
                    for (k, v) in def {
                        map.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                    seen.push(name);
                    walk(value, defs, seen);
                    seen.pop();
                    return;
                }
                for child in map.values_mut() {
                    walk(child, defs, seen);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, defs, seen)),
            _ => {}
        }
    }
    let mut root = Value::Object(std::mem::take(&mut schema));
    walk(&mut root, &defs, &mut Vec::new());
    match root {
        Value::Object(map) => map,
        _ => schema,
    }
}

/// Doc comments wrap at 100 columns; an agent reads each description as one paragraph.
fn tidy(mut schema: JsonObject) -> JsonObject {
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                plain_integer(map);
                for (key, child) in map.iter_mut() {
                    match child {
                        Value::String(text) if key == "description" => {
                            *text = text
                                .split("\n\n")
                                .map(|paragraph| {
                                    paragraph.split('\n').collect::<Vec<_>>().join(" ")
                                })
                                .collect::<Vec<_>>()
                                .join("\n\n");
                        }
                        _ => walk(child),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut root = Value::Object(std::mem::take(&mut schema));
    walk(&mut root);
    match root {
        Value::Object(map) => map,
        _ => schema,
    }
}

/// Rust's integer widths as schemars writes them (`"format": "uint64"`) are formats no JSON
/// Schema validator knows: the TypeScript SDK's ajv warns once per field. The width is said
/// with `minimum`/`maximum` instead, which every validator reads (64-bit ones keep only
/// their sign: their bounds are past what a JSON number holds exactly).
fn plain_integer(map: &mut JsonObject) {
    let bounds: (Option<i64>, Option<i64>) = match map.get("format").and_then(Value::as_str) {
        Some("uint8") => (Some(0), Some(i64::from(u8::MAX))),
        Some("uint16") => (Some(0), Some(i64::from(u16::MAX))),
        Some("uint32") => (Some(0), Some(i64::from(u32::MAX))),
        Some("uint64" | "uint") => (Some(0), None),
        Some("int8") => (Some(i64::from(i8::MIN)), Some(i64::from(i8::MAX))),
        Some("int16") => (Some(i64::from(i16::MIN)), Some(i64::from(i16::MAX))),
        Some("int32") => (Some(i64::from(i32::MIN)), Some(i64::from(i32::MAX))),
        Some("int64" | "int") => (None, None),
        _ => return,
    };
    map.remove("format");
    if let Some(min) = bounds.0 {
        map.entry("minimum").or_insert(Value::from(min));
    }
    if let Some(max) = bounds.1 {
        map.entry("maximum").or_insert(Value::from(max));
    }
}

impl ToolSpec {
    /// The tool's name: its verb's.
    pub fn name(&self) -> &'static str {
        self.verb.as_str()
    }

    /// The tool as `tools/list` shows it. Every tool touches only Switchboard's own state
    /// (open-world is false): nothing outside control is reached.
    pub fn tool(&self) -> Tool {
        Tool::new(self.name(), self.description, (self.input)())
            .with_title(self.title)
            .with_raw_output_schema((self.output)())
            .with_annotations(
                ToolAnnotations::new()
                    .read_only(self.verb.read_only())
                    .destructive(self.verb.destructive())
                    .idempotent(self.verb.idempotent())
                    .open_world(false),
            )
    }
}

/// Whether two texts are equal, at compile time: [`spec!`] checks that a tool's handler is
/// named as its verb.
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// A tool: its verb, its handler in [`calls`] (named as the verb, checked at compile time),
/// its params and output types, title and description.
macro_rules! spec {
    ($verb:ident, $name:ident, $params:ty => $output:ty, $title:literal,
     $description:expr $(,)?) => {
        ToolSpec {
            verb: const {
                assert!(
                    same(Verb::$verb.as_str(), stringify!($name)),
                    concat!(
                        "the handler ",
                        stringify!($name),
                        " is not named as its verb"
                    )
                );
                Verb::$verb
            },
            title: $title,
            description: $description,
            input: input::<$params>,
            output: output::<$output>,
            call: |cx, arguments| {
                Box::pin(async move {
                    let params: $params = calls::parse(cx.tool, arguments)?;
                    let out: $output = calls::$name(&cx, params).await?;
                    calls::to_value(out)
                })
            },
        }
    };
}

/// The description of install_rule_pack: it teaches the two-call install.
pub const INSTALL_RULE_PACK: &str = "Plan installing a rule pack (a named, versioned routing preset) on a webhook; applying it is a second call, \
confirm_rule_pack_plan. This call SAVES NOTHING: it builds the candidate configuration (the pack's rules merged into the saved ones), \
validates it as a save would, replays it side by side with the saved configuration over the webhook's most recent stored deliveries \
(200 by default; see `replay`) and the pack's fixtures, and returns a plan: decision totals before and after, which deliveries change \
(lost work first), per-rule match and fault counts, the rule and param diffs, proven/truncated, and a `plan_token` with its `expires_at`. \
The plan_token is bound to this webhook, your owner scope, the pack version, the params and the candidate, and it EXPIRES IN 15 MINUTES. \
To apply, call confirm_rule_pack_plan {webhook_id, plan_token} (the plan's `confirm_with` spells the call out): \
that applies exactly the planned candidate, nothing else. A confirm is refused with `plan_stale` if the webhook's configuration changed \
after the plan, the token expired, or it was already used (plan again). An unproven plan (no delivery of the pack's source types was \
replayed, or the replay was truncated) needs `allow_unproven: true` on the confirm. Installing another version of an installed pack plans \
an upgrade (hand edits of its rules are refused with `local_edits` unless `overwrite_local_edits: true`); params the change leaves owned by \
no pack are listed in the plan's `param_diff.orphaned` and removed on confirm unless named in `keep_params` here. A pack rule that faults on a \
replayed delivery or fixture (including exceeding the evaluation budget) refuses the plan with `pack_rule_faults` naming the rule; a replay \
whose rules keep exceeding the budget stops early and says why in `stopped` (the plan is then truncated, so unproven). Sends progress \
notifications (deliveries replayed of total) when the request has a progressToken; cancelling the request stops the replay. Call \
list_rule_packs first for names, versions and params.";

/// The description of remove_rule_pack: the same two calls.
pub const REMOVE_RULE_PACK: &str = "Plan removing an installed rule pack from a webhook; applying it is a second call, confirm_rule_pack_plan, as \
for install_rule_pack. This call SAVES NOTHING: it builds the candidate without the pack's rules, its default_action (if it set one) \
and the params only it owns (unless named in `keep_params`; they are listed in `param_diff.orphaned`), replays it against the saved configuration over the webhook's recent stored deliveries, and returns a plan \
(how many deliveries would become todos again, and which) with a `plan_token` bound to this webhook, your owner scope and the candidate, \
expiring in 15 minutes. Call confirm_rule_pack_plan {webhook_id, plan_token} to apply exactly that plan; \
it is refused with `plan_stale` if the configuration changed, the token expired or was used. A pack another installed pack requires \
is refused with `required_by_pack` (remove the dependents first); a pack whose manifest left the catalog (list_rule_packs shows it with \
available: false) is removed from its provenance alone. Sends progress notifications when the request has a progressToken; cancelling \
the request stops the replay.";

/// Every tool, sorted by name (the order `tools/list` shows them in).
pub static CATALOG: LazyLock<Vec<ToolSpec>> = LazyLock::new(|| {
    let mut specs = vec![
        // webhooks
        spec!(CreateWebhook, create_webhook, p::CreateWebhookParams => out::CreateWebhookOut,
            "Create a webhook",
            "Create a webhook in your owner scope (needs the admin role). The grant must lie within the queues an operator allowed your owner scope (agents never widen a grant): otherwise, or when no queues were allowed, it is refused with grant_not_allowed, nothing is created, and details name the queues outside (`outside`) and those allowed (`allowed`). Returns the webhook (its id and ingest_path, where the forge POSTs deliveries) and its signing secret, shown this once: configure the forge with both right away. Every call creates a new webhook."),
        spec!(ListWebhooks, list_webhooks, p::NoParams => out::ListWebhooksOut,
            "List webhooks",
            "List the webhooks of your owner scope, oldest first, each with its name (beside the id), its grant (the queues rules may route to), configuration version and installed rule packs. Never shows secrets. Start here to find a webhook_id."),
        spec!(GetWebhook, get_webhook, p::WebhookIdParams => out::GetWebhookOut,
            "Get a webhook",
            "Get one webhook of your owner scope by id. Never shows the secret. An id that is unknown or belongs to another owner answers not_found."),
        spec!(DeleteWebhook, delete_webhook, p::WebhookIdParams => out::DeleteWebhookOut,
            "Delete a webhook",
            "Delete a webhook with all its stored events, todos and configuration history (needs the admin role). Cannot be undone; the forge's deliveries to it will be refused from now on. Refused (approval_required) on a webhook whose confirm_policy is person."),
        spec!(ListWebhookEvents, list_webhook_events, p::ListWebhookEventsParams => out::ListWebhookEventsOut,
            "List a webhook's stored deliveries",
            "List a webhook's stored deliveries (events), newest first, one page at a time, each with its kind, verified flag and routing decision, without headers and body (get_webhook_event shows those). Pass next_cursor as cursor for older pages."),
        spec!(GetWebhookEvent, get_webhook_event, p::GetWebhookEventParams => out::GetWebhookEventOut,
            "Get one stored delivery",
            "Get one stored delivery with its headers and body exactly as received (the body as parsed JSON in `payload` when it is JSON) and its routing decision. Use it to inspect the event ids a plan or a dry run names."),
        spec!(ExplainWebhookEvent, explain_webhook_event, p::ExplainWebhookEventParams => out::ExplainWebhookEventOut,
            "Explain why a delivery was routed as it was",
            "Explain one stored delivery's routing decision: the configuration version it was decided under, each rule of that version in order up to and including the rule that decided, with its outcome for this delivery (matched, not_matched or fault with its code), whether that version still decides the same today, and what the current configuration decides (current_differs). Saves nothing. A decision recorded before versions were recorded says recorded_version_status `unknown` (the current decision is still given). Use it when a delivery landed somewhere unexpected; change the rules with update_webhook_rule after checking with test_webhook_rules."),
        spec!(RotateWebhookSecret, rotate_webhook_secret, p::RotateWebhookSecretParams => out::RotateWebhookSecretOut,
            "Rotate a webhook's signing secret",
            "Replace a webhook's signing secret (needs the admin role). Returns the new secret once: configure the forge with it now, because deliveries signed with the old secret are stored unverified from this call on."),
        spec!(RenameWebhook, rename_webhook, p::RenameWebhookParams => out::GetWebhookOut,
            "Rename a webhook",
            "Give a webhook of your owner scope a name people will know it by, shown beside its id in listings and the console (needs the editor role); an empty name clears it. Display only: the id stays the webhook's identity, names need not be unique, and routing is untouched. Returns the webhook."),
        // webhook-rules
        spec!(ListWebhookRules, list_webhook_rules, p::WebhookIdParams => out::ListWebhookRulesOut,
            "List a webhook's routing rules",
            "Read a webhook's saved routing configuration: its rules in order (each {id, description?, when: <jq>, action}), default_action, params, the version (pass it as expected_version to writes), the grant (queues rules may route to) and the installed rule packs."),
        spec!(SetWebhookRules, set_webhook_rules, p::SetWebhookRulesParams => out::SaveRulesOut,
            "Replace a webhook's routing configuration",
            "Replace a webhook's whole routing configuration (rules, default_action, params). It is validated as a whole first and every problem is reported at once (invalid_configuration); nothing is saved unless it is valid. Rules without an id get one (minted_rule_ids). Pass expected_version (from list_webhook_rules) so a concurrent change is not overwritten. Saving the configuration already saved changes nothing (duplicate: true). Check a candidate first with test_webhook_rules. On a webhook whose confirm_policy is person it is refused (approval_required): propose the change as a rule pack plan for a person instead."),
        spec!(UpdateWebhookRule, update_webhook_rule, p::UpdateWebhookRuleParams => out::SaveRulesOut,
            "Change one routing rule",
            "Change one rule of a webhook's configuration by id: give only the fields to change (id renames it, description null removes it, when, action). Validated like a whole save. Pass expected_version to make it conditional. Refused (approval_required) on a webhook whose confirm_policy is person."),
        spec!(DeleteWebhookRule, delete_webhook_rule, p::DeleteWebhookRuleParams => out::SaveRulesOut,
            "Remove one routing rule",
            "Remove one rule of a webhook's configuration by id. Pass expected_version to make it conditional. A rule installed by a rule pack is better removed with remove_rule_pack (removing it here shows as drift). Refused (approval_required) on a webhook whose confirm_policy is person."),
        spec!(TestWebhookRules, test_webhook_rules, p::TestWebhookRulesParams => out::TestWebhookRulesOut,
            "Dry-run routing rules",
            "Dry run: route a delivery through the saved configuration and, when given, a candidate configuration, side by side, and report both decisions and whether they differ. Give exactly one of event_id (a stored delivery), payload (one you make up) or replay (the webhook's recent stored deliveries). With replay the answer is replay_report: decision totals before and after, the deliveries whose decision changes (lost work first, with event ids), per-rule first matches and faults with never_matched flagged; the same evidence an install plan gives, without a plan_token. Rules without an id get one, as a save would. Writes nothing: use it before set_webhook_rules."),
        spec!(PlanWebhookRules, plan_webhook_rules, p::PlanWebhookRulesParams => out::PlanOut,
            "Plan a hand-written configuration (saves nothing)",
            "Plan replacing a webhook's whole configuration with a hand-written one, as a rule pack's change is planned: validated as set_webhook_rules would (rules without an id get one), replayed beside the saved configuration over the webhook's stored deliveries, and answered as a plan (kind: rules, no pack) with the same report — totals before and after, transitions with lost work first, per-rule first matches and faults — and a plan_token. SAVES NOTHING: apply it with confirm_rule_pack_plan {webhook_id, plan_token} (on a webhook whose confirm_policy is person, a person accepts it in the console), or first run it beside the live rules on live deliveries with start_rule_trial. Refused as plan_stale at confirm if the configuration changed since."),
        spec!(ListRulePacks, list_rule_packs, p::ListRulePacksParams => out::ListRulePacksOut,
            "List rule packs",
            "List the rule-pack catalog: every pack with its versions, title, summary, params_schema, requirements and whether each version is available on this instance. With webhook_id, also what is installed on that webhook: version, upgrade_available, proven, last replay and drift (rules edited or removed by hand)."),
        spec!(InstallRulePack, install_rule_pack, p::InstallRulePackParams => out::PlanOut,
            "Plan installing a rule pack (saves nothing)",
            INSTALL_RULE_PACK),
        spec!(RemoveRulePack, remove_rule_pack, p::RemoveRulePackParams => out::PlanOut,
            "Plan removing a rule pack (saves nothing)",
            REMOVE_RULE_PACK),
        spec!(GetRulePackPlan, get_rule_pack_plan, p::PlanTokenParams => out::RulePackPlanOut,
            "Read a rule-pack plan's state",
            "Where a plan stands, by its plan_token: planned (its token confirms it), pending_approval (confirmed on a webhook whose confirm_policy is person: people accept or reject it at console_url; approvals says how many distinct people must accept it, how many more are needed and from whom they cannot come — never from the human your endpoint acts for, on a team's webhook), applied, rejected (with the reason), or stale (expired, or the webhook's configuration changed: plan again). Writes nothing."),
        spec!(GetRuleGuard, get_rule_guard, p::GuardIdParams => out::RuleGuardOut,
            "Read a confirmed change's guard",
            "After a confirm, the configuration it replaced keeps running in the shadow on live deliveries until the plan's guard window ends (default 1,000 deliveries or 7 days). This reads that guard: deliveries seen and evaluated; the plan's report over them, read the change's way round (before = the replaced rules' decision, after = the confirmed rules'), transitions with lost work first; the forecast it is held to (the plan's lost work and faults per 100); on_breach (revert or alert); and once it breached, breach (why, with the numbers), reverted_version (the version a revert saved: exactly the replaced configuration) and recovery (the redrive of what the change lost: applied at once, or awaiting_person on a webhook whose confirm_policy is person). Give guard_id (confirm_rule_pack_plan's guard_id) or leave it out for the webhook's newest guard. Writes nothing."),
        spec!(ConfirmRulePackPlan, confirm_rule_pack_plan, p::ConfirmRulePackPlanParams => out::ConfirmOut,
            "Put a rule-pack plan live",
            "Confirm the plan a plan_token names (from install_rule_pack, remove_rule_pack, plan_webhook_rules or promote_rule_trial), without repeating its arguments: applies exactly that plan, once (saved: true). On a webhook whose confirm_policy is person it saves nothing and answers state: pending_approval with the console_url where a person accepts or rejects it; read its state later with get_rule_pack_plan. Refused with plan_stale if the configuration changed, the token expired or was used; an unproven plan needs allow_unproven: true. Needs the confirm_rule_pack_plan verb: an endpoint without it may plan and propose only."),
        spec!(RedriveWebhookEvents, redrive_webhook_events, p::RedriveWebhookEventsParams => out::RedrivePlanOut,
            "Plan re-routing quarantined, faulted or pending events (changes nothing)",
            "After fixing a webhook's rules, plan re-routing its quarantined, faulted or pending (not yet routed) deliveries under the current configuration: each selected event with its decision now (before) and the one it would get (after), totals, and transitions with lost work (to drop) first. Events whose delivery already made a todo are never selected. Changes nothing; returns a plan_token (single use, 15 minutes) and confirm_with naming confirm_webhook_redrive. filter.decisions: any of quarantine, fault, pending (default all); limit default 100, at most 1000."),
        spec!(ConfirmWebhookRedrive, confirm_webhook_redrive, p::ConfirmWebhookRedriveParams => out::ConfirmWebhookRedriveOut,
            "Apply a redrive plan",
            "Apply exactly the redrive plan a plan_token names (from redrive_webhook_events): each event whose decision changes gets the planned decision, and a queue decision makes one todo (never a second for the same delivery). An event routed since the plan (by the retry loop or another redrive) is skipped and reported, never routed twice. Refused with plan_stale if the webhook's configuration changed, the token expired or was used: plan again with redrive_webhook_events."),
        spec!(ListWebhookHistory, list_webhook_history, p::ListWebhookHistoryParams => out::ListWebhookHistoryOut,
            "List a webhook's configuration history",
            "List the saved versions of a webhook's configuration, newest first: who saved each (endpoint and human), what changed, where it came from (a pack, a plan) and the configuration as saved. To roll back, pass an earlier version's configuration to set_webhook_rules."),
        spec!(ListWebhookChanges, list_webhook_changes, p::ListWebhookChangesParams => out::ListWebhookChangesOut,
            "Read the change log of your webhooks",
            "Read the tamper-evident change log for your scope, oldest first: every change to what your webhooks route where, or to who may change it — configuration versions (who proposed, every approver whose approval counted, the plan digest and its evidence, the configuration digest before and after), redrives, confirm policy, approval rules, grants. Each entry carries its seq, the hash of the entry before it (prev_hash) and its own hash, so the chain can be checked. Filter by webhook_id, actor (an endpoint id, a person's login or an operator id) and since_ms/until_ms; page with after_seq = next_after_seq. Writes nothing."),
        // rule-trials
        spec!(StartRuleTrial, start_rule_trial, p::StartRuleTrialParams => out::RuleTrialOut,
            "Try a plan on live deliveries (routes nothing)",
            "Start a trial of a plan: its candidate runs beside the webhook's live rules on every live delivery from now on, and routes nothing (no todo, no quarantine; the live rules still decide everything). Give the plan_token of a plan that could still be confirmed (from install_rule_pack, remove_rule_pack, or plan_webhook_rules for hand-written rules); it is not used up. The trial ends when stopped (stop_rule_trial), after max_deliveries, after max_duration_ms (default 7 days), or by itself as stale when the webhook's configuration changes. Read what it observed with get_rule_trial: the plan's report over live deliveries, and for each transition the rate the plan's replay forecast beside the rate observed, flagging any outside its 95 % interval and any the replay never saw (unforeseen). At most one trial runs per webhook unless an operator allows more (conflict names the running one). Make it live with promote_rule_trial."),
        spec!(StopRuleTrial, stop_rule_trial, p::TrialIdParams => out::RuleTrialOut,
            "Stop a trial",
            "Stop a running trial: its evidence so far stays readable (get_rule_trial, list_rule_trials) and can still be promoted. Stopping one that has ended changes nothing. Routes nothing."),
        spec!(GetRuleTrial, get_rule_trial, p::TrialIdParams => out::RuleTrialOut,
            "Read a trial's report",
            "A trial's report: deliveries seen, evaluated and not_evaluated (shed under load: counted apart, never as unchanged); the plan's report over the evaluated deliveries (totals before = the live decision and after = the candidate's, transitions with lost work first and example event ids, per-rule first matches and faults, todos per day); and evidence: per transition, the plan replay's forecast rate per 100 deliveries beside the observed rate, a 95 % interval, outside, unforeseen (the replay never saw it) and unobserved. sufficient is false, with the reasons in insufficient, when it saw fewer than 200 deliveries or never saw a transition the replay predicted. No payload text. Writes nothing."),
        spec!(ListRuleTrials, list_rule_trials, p::WebhookIdParams => out::ListRuleTrialsOut,
            "List a webhook's trials",
            "List a webhook's trials, running and ended, newest first, each with its report as get_rule_trial gives it. Writes nothing."),
        spec!(PromoteRuleTrial, promote_rule_trial, p::PromoteRuleTrialParams => out::PlanOut,
            "Plan making a trial's candidate live (saves nothing)",
            "Plan making a trial's candidate live: ends the trial (end: promoted; its evidence is frozen) and answers a plan like install_rule_pack's — a fresh replay of exactly the tried candidate — that also carries the trial's report in `trial` and `trial_sufficient`. SAVES NOTHING: apply it with confirm_rule_pack_plan {webhook_id, plan_token}, whose token binds the candidate and the trial's evidence; it is refused with plan_stale if the webhook's configuration or the trial changed since. When trial_sufficient is false the confirm needs allow_insufficient_trial: true (and allow_unproven for an unproven replay). Refused with plan_stale when the webhook's configuration changed since the trial started: plan again and start a new trial."),
        // todos
        spec!(ListTodos, list_todos, p::ListTodosParams => out::ListTodosOut,
            "List a queue's todos",
            "List the todos of one queue in your owner scope, oldest first: work that routing decisions produced, one per delivery. Each shows who holds it (claimed_by) and until when (claim_expires_at). filter unclaimed shows what you may take with claim_todo, todos whose claim expired included."),
        spec!(ClaimTodo, claim_todo, p::TodoIdParams => out::TodoResultOut,
            "Claim a todo",
            "Take a todo for this endpoint, for a lease: the claim lasts until claim_expires_at (30 minutes unless an operator set another), then the todo is back in its queue for anyone. Claim it again before then to renew the lease. If another endpoint holds it, the call fails with conflict: pick another. When done, call complete_todo; to give it up, release_todo."),
        spec!(ReleaseTodo, release_todo, p::TodoIdParams => out::TodoResultOut,
            "Release a claimed todo",
            "Give up this endpoint's claim on a todo: it is back in its queue, unclaimed, for another endpoint to take. Releasing a todo nobody holds changes nothing; one another endpoint holds, or one already completed, fails with conflict."),
        spec!(CompleteTodo, complete_todo, p::TodoIdParams => out::TodoResultOut,
            "Complete a todo",
            "Mark a todo done. It must be unclaimed or claimed by this endpoint; if your claim expired you may still complete it, unless another endpoint claimed it since (then conflict: the work is theirs). Completing it again changes nothing."),
    ];
    specs.sort_by_key(|s| s.name());
    specs
});

/// The spec of a tool by name.
pub fn find(name: &str) -> Option<&'static ToolSpec> {
    CATALOG.iter().find(|s| s.name() == name)
}

/// Every tool as `tools/list` would show it to an endpoint allowed every verb.
pub fn all_tools() -> Vec<Tool> {
    CATALOG.iter().map(ToolSpec::tool).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_are_sorted_and_unique() {
        let names: Vec<&str> = CATALOG.iter().map(|s| s.name()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), switchboard_model::Verb::ALL.len());
    }

    /// One tool per verb of the model's table, none missing, none extra.
    #[test]
    fn the_catalog_is_every_verb_once() {
        let mut ours: Vec<Verb> = CATALOG.iter().map(|s| s.verb).collect();
        ours.sort();
        let mut all = Verb::ALL.to_vec();
        all.sort();
        assert_eq!(ours, all);
    }

    #[test]
    fn every_schema_is_an_object() {
        for tool in all_tools() {
            assert_eq!(
                tool.input_schema.get("type"),
                Some(&"object".into()),
                "{}",
                tool.name
            );
            let output = tool.output_schema.expect("output schema");
            assert_eq!(output.get("type"), Some(&"object".into()), "{}", tool.name);
        }
    }

    /// Issue 19 item 5: clients that do not resolve references read every schema whole.
    #[test]
    fn no_schema_has_a_reference() {
        for tool in all_tools() {
            let text = serde_json::to_string(&tool).expect("a tool as JSON");
            assert!(
                !text.contains("\"$ref\"") && !text.contains("\"$defs\""),
                "{} has a reference",
                tool.name
            );
        }
    }

    /// Issue 49 item 6: no schema carries a format a JSON Schema validator does not know
    /// (Rust's integer widths); a 32-bit count says its range with minimum and maximum.
    #[test]
    fn no_schema_has_a_format_validators_do_not_know() {
        const KNOWN: [&str; 5] = ["double", "float", "date-time", "uri", "email"];
        fn formats(value: &Value, found: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    if let Some(Value::String(f)) = map.get("format") {
                        found.push(f.clone());
                    }
                    map.values().for_each(|v| formats(v, found));
                }
                Value::Array(items) => items.iter().for_each(|v| formats(v, found)),
                _ => {}
            }
        }
        let mut bounded = 0;
        for tool in all_tools() {
            let value = serde_json::to_value(&tool).expect("a tool as JSON");
            let mut found = Vec::new();
            formats(&value, &mut found);
            found.retain(|f| !KNOWN.contains(&f.as_str()));
            assert!(found.is_empty(), "{}: {found:?}", tool.name);
            bounded += serde_json::to_string(&value)
                .expect("text")
                .matches("\"maximum\":4294967295")
                .count();
        }
        assert!(bounded > 0, "32-bit counts keep their range");
    }

    /// The plan's output schema is the typed plan, not an opaque object.
    #[test]
    fn the_install_output_schema_names_the_plans_fields() {
        let install = all_tools()
            .into_iter()
            .find(|t| t.name == "install_rule_pack")
            .expect("install_rule_pack");
        let text = serde_json::to_string(&install.output_schema).expect("schema");
        for field in [
            "transitions",
            "by_rules",
            "plan_token",
            "confirm_with",
            "fixtures",
            "param_diff",
            "nothing_saved",
        ] {
            assert!(text.contains(&format!("\"{field}\"")), "{field}");
        }
    }

    /// Issue 20 item 2: a host can tell which calls change things. Planning saves nothing and
    /// is not destructive; only confirm_rule_pack_plan applies, and only it takes a token.
    #[test]
    fn planning_is_not_destructive_and_only_the_confirm_applies() {
        let spec = |name: &str| {
            CATALOG
                .iter()
                .find(|s| s.name() == name)
                .unwrap_or_else(|| panic!("{name}"))
        };
        for planner in ["install_rule_pack", "remove_rule_pack"] {
            let s = spec(planner);
            assert!(!s.verb.destructive(), "{planner} is marked destructive");
            let input = serde_json::to_string(&(s.input)()).expect("schema");
            for moved in ["\"confirm\"", "\"allow_unproven\""] {
                assert!(!input.contains(moved), "{planner} still takes {moved}");
            }
            let output = serde_json::to_string(&(s.output)()).expect("schema");
            assert!(
                !output.contains("\"console_url\""),
                "{planner} answers a confirm's result"
            );
        }
        let confirm = spec("confirm_rule_pack_plan");
        assert!(confirm.verb.destructive() && !confirm.verb.read_only());
        let input = serde_json::to_string(&(confirm.input)()).expect("schema");
        assert!(input.contains("\"plan_token\"") && input.contains("\"allow_unproven\""));
    }

    #[test]
    fn the_install_description_teaches_the_two_calls() {
        for phrase in [
            "SAVES NOTHING",
            "plan_token",
            "bound to this webhook, your owner scope, the pack version, the params and the candidate",
            "15 MINUTES",
            "confirm_rule_pack_plan {webhook_id, plan_token}",
            "plan_stale",
        ] {
            assert!(INSTALL_RULE_PACK.contains(phrase), "{phrase}");
        }
    }
}
