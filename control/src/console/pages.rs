//! Loading what a page shows, for the person asking, and rendering it. Another scope's plan,
//! trial or webhook, a malformed id and an unknown one all answer the one not-found page.

use axum::http::StatusCode;
use axum::response::Response;
use switchboard_console::{
    Activity, EventRow, HistoryRow, InboxItem, Notice, PlanView, RuleRow, TrialView, WebhookView,
};
use switchboard_model::{Configuration, Label, WebhookName};
use switchboard_packs::plan::{PlanState, StoredPlan};

use super::Console;
use super::person::Person;
use crate::error::Reason;
use crate::rule_packs::{Caller, rfc3339};
use crate::scope::{OwnerScope, Role};
use crate::store::{ConfirmPolicy, Page, Plan, Webhook};

use super::answer::{html, internal, message};

fn not_found(person: &Person) -> Response {
    message(
        StatusCode::NOT_FOUND,
        Some(&person.chrome()),
        "Not found",
        "There is no such page for you: it does not exist, or it is not in one of your scopes.",
    )
}

fn finish(c: &Console, person: &Person, response: Response) -> Response {
    person.finish(response, c.settings.secure_cookies)
}

/// The plan `plan_id` if it is in one of the person's scopes, with its webhook.
async fn load_plan(
    c: &Console,
    person: &Person,
    plan_id: &str,
) -> Result<(Plan, Webhook), Response> {
    let scopes = c
        .state
        .store
        .scopes_with_role(&person.login, Role::Viewer)
        .await
        .map_err(|e| internal(&e))?;
    let plan = match c.state.store.plan_for_person(plan_id, &scopes).await {
        Ok(plan) => plan,
        Err(crate::Error::NotFound { .. }) => return Err(not_found(person)),
        Err(e) => return Err(internal(&e)),
    };
    let webhook = match c
        .state
        .store
        .get_webhook(&plan.owner_scope, &plan.webhook_id)
        .await
    {
        Ok(w) => w,
        Err(crate::Error::NotFound { .. }) => return Err(not_found(person)),
        Err(e) => return Err(internal(&e)),
    };
    Ok((plan, webhook))
}

pub(super) async fn inbox(c: &Console, person: &Person, said: Option<Notice>) -> Response {
    let store = &c.state.store;
    let load = async {
        // Every plan the person may read; those outside the scopes they edit are read-only.
        let scopes = store.scopes_with_role(&person.login, Role::Viewer).await?;
        let editors = store.scopes_with_role(&person.login, Role::Editor).await?;
        let mut items = Vec::new();
        // One read of the approvals for every listed plan, and one of each webhook.
        let mut approvals = store.pending_approvals(&scopes).await?;
        let mut webhooks = std::collections::HashMap::new();
        let mut endpoints = std::collections::HashMap::new();
        for plan in store.pending_plans(&scopes).await? {
            let webhook = match webhooks.entry(plan.webhook_id.clone()) {
                std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
                std::collections::hash_map::Entry::Vacant(slot) => slot.insert(
                    store
                        .get_webhook(&plan.owner_scope, &plan.webhook_id)
                        .await?,
                ),
            };
            let kind = plan.plan.apply.kind;
            // A reason is given exactly when the plan is stale.
            let (_, stale_reason) = plan
                .facts()
                .state(store.clock().now_ms(), webhook.config_version);
            let given = approvals.remove(&plan.id).unwrap_or_default();
            let tally =
                crate::rule_packs::approval_tally(&plan, webhook, &webhook.configuration, &given);
            let report = &plan.plan.plan.report;
            let endpoint = plan.proposed_by_endpoint.clone().unwrap_or_default();
            let endpoint_name = match endpoints.get(&endpoint) {
                Some(name) => String::clone(name),
                None => {
                    let name = endpoint_name(store, &endpoint).await?;
                    endpoints.insert(endpoint.clone(), name.clone());
                    name
                }
            };
            items.push(InboxItem {
                approvals: (tally.counted, tally.required),
                read_only: !editors.contains(&plan.owner_scope),
                replayed: report.events_replayed,
                changed: report.changed,
                lost_work: report.lost_work(),
                from_version: plan.plan.plan.pack.from_version.clone(),
                kind,
                stale: stale_reason,
                webhook_name: webhook.display_name().to_string(),
                owner_scope: plan.owner_scope.to_string(),
                proposed_by_endpoint: endpoint,
                proposed_by_endpoint_name: endpoint_name,
                proposed_by_human: plan.proposed_by_human.clone().unwrap_or_default(),
                proposed_at: plan.pending_at.map(rfc3339).unwrap_or_default(),
                approval_expires_at: rfc3339(plan.approval_expires_at.unwrap_or(plan.expires_at)),
                plan_id: plan.id,
                webhook_id: plan.webhook_id,
                pack_name: plan.pack_name,
                pack_version: plan.pack_version,
            });
        }
        Ok::<_, crate::Error>(items)
    };
    match load.await {
        Ok(items) => finish(
            c,
            person,
            html(
                StatusCode::OK,
                switchboard_console::inbox(
                    &person.chrome(),
                    &items,
                    store.clock().now_ms(),
                    said.as_ref(),
                ),
            ),
        ),
        Err(e) => internal(&e),
    }
}

pub(super) async fn plan(
    c: &Console,
    person: &Person,
    plan_id: &str,
    notice: Option<Notice>,
    status: StatusCode,
) -> Response {
    let (plan, webhook) = match load_plan(c, person, plan_id).await {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let stored: &StoredPlan = &plan.plan;
    let (state, stale_reason) = plan
        .facts()
        .state(c.state.store.clock().now_ms(), webhook.config_version);
    let may_decide = match c
        .state
        .store
        .role_in_scope(&person.login, &plan.owner_scope)
        .await
    {
        Ok(role) => role.is_some_and(|r| r >= Role::Editor),
        Err(e) => return internal(&e),
    };
    let chrome = person.chrome();
    let decision = plan
        .decided_by
        .clone()
        .map(|by| switchboard_console::Decision {
            by,
            rejected: plan.rejected_at.and(plan.reject_reason.clone()),
        });
    let guard = match plan.used_at {
        Some(_) => match c
            .state
            .store
            .guard_of_plan(&plan.owner_scope, &plan.id)
            .await
        {
            Ok(g) => g.map(|g| crate::trials::guards::report(&c.state.trials_ctx(), &g)),
            Err(e) => return internal(&e),
        },
        None => None,
    };
    let approvals = match plan.pending_at {
        Some(_) => match c.packs.approvals(&plan, &webhook).await {
            Ok(tally) => Some(tally),
            Err(e) => return internal(&crate::Error::internal(e.message)),
        },
        None => None,
    };
    let endpoint = plan.proposed_by_endpoint.clone().unwrap_or_default();
    let proposed_by_endpoint_name = match endpoint_name(&c.state.store, &endpoint).await {
        Ok(name) => name,
        Err(e) => return internal(&e),
    };
    let view = PlanView {
        proposed_by_endpoint_name,
        approvals,
        guard,
        chrome: &chrome,
        plan_id: plan.id.clone(),
        owner_scope: plan.owner_scope.to_string(),
        webhook_name: webhook.display_name().to_string(),
        plan: &stored.plan,
        candidate: Some(&stored.apply.configuration),
        now_ms: c.state.store.clock().now_ms(),
        state,
        stale_reason,
        proposed_by_endpoint: endpoint,
        proposed_by_human: plan.proposed_by_human.clone().unwrap_or_default(),
        approval_expires_at: plan.approval_expires_at.map(rfc3339).unwrap_or_default(),
        decision,
        may_decide,
        notice,
    };
    finish(
        c,
        person,
        html(status, switchboard_console::plan_page(&view)),
    )
}

/// The name an endpoint was vended with; empty for none, or one that is gone (its id then
/// stands alone).
async fn endpoint_name(store: &crate::store::Store, id: &str) -> Result<String, crate::Error> {
    if id.is_empty() {
        return Ok(String::new());
    }
    match store.get_endpoint(id).await {
        Ok(e) => Ok(e.name),
        Err(crate::Error::NotFound { .. }) => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// What a person decides.
pub(super) enum Verdict {
    Accept,
    Reject(String),
}

/// Accept or reject: only an editor (or admin) of the plan's scope; the plan page again,
/// saying what happened or why nothing did.
pub(super) async fn decide(
    c: &Console,
    person: &Person,
    plan_id: &str,
    verdict: Verdict,
) -> Response {
    let (plan, _) = match load_plan(c, person, plan_id).await {
        Ok(found) => found,
        Err(refusal) => return refusal,
    };
    let editors = match c
        .state
        .store
        .scopes_with_role(&person.login, Role::Editor)
        .await
    {
        Ok(scopes) => scopes,
        Err(e) => return internal(&e),
    };
    if !editors.contains(&plan.owner_scope) {
        return message(
            StatusCode::FORBIDDEN,
            Some(&person.chrome()),
            "Not yours to decide",
            "Accepting or rejecting this plan needs the editor role in its scope; nothing was done.",
        );
    }
    let result = match verdict {
        Verdict::Accept => c
            .packs
            .accept(&person.login, &editors, &plan.id)
            .await
            .map(|accepted| Notice::done(accepted_notice(&person.login, &accepted))),
        Verdict::Reject(reason) => c
            .packs
            .reject(&person.login, &editors, &plan.id, &reason)
            .await
            .map(|()| Notice::done("Rejected: this plan can never be applied.")),
    };
    match result {
        Ok(notice) => self::plan(c, person, plan_id, Some(notice), StatusCode::OK).await,
        Err(e) if e.reason == Reason::NotFound => not_found(person),
        Err(e) if e.reason == Reason::Internal => internal(&crate::Error::internal(e.message)),
        Err(e) => {
            let notice = Notice::refused(format!("Nothing was done: {}", e.message));
            self::plan(c, person, plan_id, Some(notice), StatusCode::CONFLICT).await
        }
    }
}

/// What a person's acceptance did, in their words: applied, or recorded and how many more
/// approvals are needed (and whether theirs counted).
fn accepted_notice(person: &str, accepted: &crate::rule_packs::Accepted) -> String {
    use crate::rule_packs::Accepted;
    match accepted {
        Accepted::Applied(applied, _) => format!(
            "Accepted: the plan is live; the webhook's configuration is now version {}.",
            applied.version
        ),
        Accepted::AppliedByAnother(_) => {
            "Approved: another person's approval met the rule at the same moment; the plan is live."
                .to_string()
        }
        Accepted::Waiting(t) => {
            let mine = t.given.iter().find(|g| g.person == person);
            let counted = mine.is_some_and(|g| g.counts);
            let head = if counted {
                "Approved".to_string()
            } else {
                "Your approval is recorded but does not count: you are the person the proposing agent acts for".to_string()
            };
            format!(
                "{head}; {} of {} approvals count, {} more needed from someone other than {}.",
                t.counted,
                t.required,
                t.still_needed,
                t.cannot_come_from.join(", ")
            )
        }
    }
}

/// The plan and its webhook when the person is an editor (or admin) of its scope; else the
/// page saying `doing` (`Dismissing a plan`) needs that role and nothing was done.
async fn plan_for_editor(
    c: &Console,
    person: &Person,
    plan_id: &str,
    verb: &str,
    doing: &str,
) -> Result<(Plan, Webhook), Response> {
    let (plan, webhook) = load_plan(c, person, plan_id).await?;
    match c
        .state
        .store
        .role_in_scope(&person.login, &plan.owner_scope)
        .await
    {
        Ok(Some(role)) if role >= Role::Editor => Ok((plan, webhook)),
        Ok(_) => Err(message(
            StatusCode::FORBIDDEN,
            Some(&person.chrome()),
            &format!("Not yours to {verb}"),
            &format!("{doing} needs the editor role in the plan's scope; nothing was done."),
        )),
        Err(e) => Err(internal(&e)),
    }
}

/// Dismisses a stale plan from the inbox: an editor of its scope only, and only a plan that
/// can no longer be accepted; the inbox again, saying what happened.
pub(super) async fn dismiss(c: &Console, person: &Person, plan_id: &str) -> Response {
    let (plan, webhook) =
        match plan_for_editor(c, person, plan_id, "dismiss", "Dismissing a plan").await {
            Ok(found) => found,
            Err(refusal) => return refusal,
        };
    let store = &c.state.store;
    let (state, _) = plan
        .facts()
        .state(store.clock().now_ms(), webhook.config_version);
    if state != PlanState::Stale {
        let said = Notice::refused(format!(
            "Nothing was done: only a plan that can no longer be accepted is dismissed; this one is {}.",
            state.words()
        ));
        return self::inbox(c, person, Some(said)).await;
    }
    match store
        .dismiss_plan(&plan.id, &plan.owner_scope, &person.login)
        .await
    {
        Ok(()) => {
            tracing::info!(plan = %plan.id, person = %person.login, "console: stale plan dismissed");
            let said = Notice::done(format!(
                "Dismissed: {} on {} leaves every inbox; the plan itself is kept.",
                plan.plan
                    .plan
                    .kind
                    .title(&plan.pack_name, &plan.pack_version),
                switchboard_console::webhook_title(&plan.webhook_id, webhook.display_name())
            ));
            self::inbox(c, person, Some(said)).await
        }
        Err(crate::Error::NotFound { .. }) => {
            let said =
                Notice::refused("Nothing was done: the plan was decided or dismissed already.");
            self::inbox(c, person, Some(said)).await
        }
        Err(e) => internal(&e),
    }
}

/// Applies the recovery a guard's revert left waiting for a person (issue 46): an editor of
/// the plan's scope only; the plan page again, saying what was recovered or why nothing was.
pub(super) async fn recover(c: &Console, person: &Person, plan_id: &str) -> Response {
    let (plan, _) =
        match plan_for_editor(c, person, plan_id, "recover", "Recovering lost work").await {
            Ok(found) => found,
            Err(refusal) => return refusal,
        };
    let store = &c.state.store;
    let guard = match store.guard_of_plan(&plan.owner_scope, &plan.id).await {
        Ok(Some(g)) => g,
        Ok(None) => return not_found(person),
        Err(e) => return internal(&e),
    };
    let (notice, status) = match crate::trials::guards::apply_recovery(store, &guard).await {
        Ok(r) if r.state == switchboard_model::guard::RecoveryState::Applied => {
            tracing::info!(plan = %plan.id, guard = %guard.id, person = %person.login, todos = r.todos_created, "recovery applied by a person");
            (
                Notice::done(format!(
                    "Recovered: {} deliveries re-routed, {} todos made.",
                    r.applied, r.todos_created
                )),
                StatusCode::OK,
            )
        }
        Ok(_) => (
            Notice::refused(
                "Nothing was recovered: the webhook changed since the revert, so this recovery is stale. Redrive its dropped deliveries by version.",
            ),
            StatusCode::CONFLICT,
        ),
        Err(crate::Error::NotFound { .. }) => return not_found(person),
        Err(crate::Error::FailedPrecondition { .. }) => (
            Notice::refused(
                "Nothing was done: this recovery was already applied or is no longer waiting.",
            ),
            StatusCode::CONFLICT,
        ),
        Err(e) => return internal(&e),
    };
    self::plan(c, person, plan_id, Some(notice), status).await
}

/// The trial `trial_id` if it is in one of the person's scopes (viewer or more); else the
/// one not-found page.
pub(super) async fn trial(c: &Console, person: &Person, trial_id: &str) -> Response {
    let store = &c.state.store;
    let scopes = match store.scopes_with_role(&person.login, Role::Viewer).await {
        Ok(scopes) => scopes,
        Err(e) => return internal(&e),
    };
    let trial = match store.trial_for_person(trial_id, &scopes).await {
        Ok(t) => t,
        Err(crate::Error::NotFound { .. }) => return not_found(person),
        Err(e) => return internal(&e),
    };
    let report = crate::trials::report(&c.state.trials_ctx(), &trial);
    let webhook_name = match store
        .get_webhook(&trial.owner_scope, &trial.webhook_id)
        .await
    {
        Ok(w) => w.display_name().to_string(),
        Err(crate::Error::NotFound { .. }) => String::new(),
        Err(e) => return internal(&e),
    };
    let chrome = person.chrome();
    let view = TrialView {
        chrome: &chrome,
        webhook_name,
        owner_scope: trial.owner_scope.to_string(),
        report: &report,
    };
    finish(
        c,
        person,
        html(StatusCode::OK, switchboard_console::trial_page(&view)),
    )
}

/// How many days of deliveries the webhook page charts.
const ACTIVITY_DAYS: u32 = 7;

/// The trials the webhook page lists: every running one, then the newest ended ones, up to
/// this many in all.
const LISTED_TRIALS: usize = 20;

pub(super) async fn webhook(c: &Console, person: &Person, webhook_id: &str) -> Response {
    match find_webhook(c, person, webhook_id).await {
        Ok(w) => webhook_page(c, person, &w, None, StatusCode::OK).await,
        Err(refusal) => refusal,
    }
}

/// The webhook among the person's scopes, or the page an unknown one gets (another scope's
/// webhook answers exactly the same).
async fn find_webhook(c: &Console, person: &Person, webhook_id: &str) -> Result<Webhook, Response> {
    let store = &c.state.store;
    let scopes = store
        .scopes_with_role(&person.login, Role::Viewer)
        .await
        .map_err(|e| internal(&e))?;
    for scope in &scopes {
        match store.get_webhook(scope, webhook_id).await {
            Ok(w) => return Ok(w),
            Err(crate::Error::NotFound { .. }) => {}
            Err(e) => return Err(internal(&e)),
        }
    }
    Err(not_found(person))
}

async fn webhook_page(
    c: &Console,
    person: &Person,
    w: &Webhook,
    notice: Option<Notice>,
    status: StatusCode,
) -> Response {
    match webhook_view(c, person, w, notice).await {
        Ok(view) => finish(
            c,
            person,
            html(
                status,
                switchboard_console::webhook_page(&person.chrome(), &view),
            ),
        ),
        Err(e) => internal(&e),
    }
}

/// How many events the events page lists at once.
const EVENTS_PER_PAGE: u32 = 50;

/// The events page: the webhook's events, filtered, each with what decided it.
pub(super) async fn events(
    c: &Console,
    person: &Person,
    webhook_id: &str,
    q: &super::EventsQuery,
) -> Response {
    let w = match find_webhook(c, person, webhook_id).await {
        Ok(w) => w,
        Err(refusal) => return refusal,
    };
    let store = &c.state.store;
    let day = |text: &str, name: &str| -> Result<Option<i64>, String> {
        if text.trim().is_empty() {
            return Ok(None);
        }
        text.trim()
            .parse::<jiff::civil::Date>()
            .ok()
            .and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok())
            .map(|z| Some(z.timestamp().as_millisecond()))
            .ok_or_else(|| {
                format!("Nothing is listed: {name} {text:?} is not a date (YYYY-MM-DD).")
            })
    };
    let decision = match q.decision.as_str() {
        "" => Ok(None),
        word => crate::store::DecisionClass::parse(word)
            .map(Some)
            .ok_or_else(|| format!("Nothing is listed: {word:?} is not a decision to filter by.")),
    };
    let filter = (|| {
        Ok::<_, String>(crate::store::EventFilter {
            decision: decision?,
            kind: Some(q.kind.trim().to_string()).filter(|k| !k.is_empty()),
            since_ms: day(&q.since, "from")?,
            // The last day is included: up to the start of the day after it.
            until_ms: day(&q.until, "to")?.map(|ms| ms + 24 * 3_600_000),
        })
    })();
    let filter_view = switchboard_console::EventsFilter {
        decision: q.decision.clone(),
        kind: q.kind.clone(),
        since: q.since.clone(),
        until: q.until.clone(),
    };
    let mut view = switchboard_console::EventsView {
        webhook_id: w.id.clone(),
        webhook_name: w.display_name().to_string(),
        owner_scope: w.owner_scope.to_string(),
        filter: filter_view,
        now_ms: store.clock().now_ms(),
        ..Default::default()
    };
    let status = match filter {
        Err(problem) => {
            view.problem = Some(problem);
            StatusCode::UNPROCESSABLE_ENTITY
        }
        Ok(filter) => {
            let page = Page {
                cursor: Some(q.cursor.clone()).filter(|c| !c.is_empty()),
                limit: Some(EVENTS_PER_PAGE),
            };
            match store
                .list_events_where(&w.owner_scope, &w.id, &filter, &page)
                .await
            {
                Ok(listed) => {
                    view.rows = listed
                        .items
                        .into_iter()
                        .map(|(e, version)| EventRow {
                            version,
                            ..event_row(e)
                        })
                        .collect();
                    view.next = listed.next_cursor.map(|cursor| {
                        let mut url = form_urlencoded::Serializer::new(String::new());
                        url.append_pair("decision", &q.decision)
                            .append_pair("kind", &q.kind)
                            .append_pair("since", &q.since)
                            .append_pair("until", &q.until)
                            .append_pair("cursor", &cursor);
                        format!("/console/webhooks/{}/events?{}", w.id, url.finish())
                    });
                    StatusCode::OK
                }
                Err(crate::Error::InvalidArgument { .. }) => {
                    view.problem = Some(
                        "Nothing is listed: that page of events is not one this listing made."
                            .into(),
                    );
                    StatusCode::UNPROCESSABLE_ENTITY
                }
                Err(e) => return internal(&e),
            }
        }
    };
    finish(
        c,
        person,
        html(
            status,
            switchboard_console::events_page(&person.chrome(), &view),
        ),
    )
}

/// An event as the webhook page and the events page list it.
fn event_row(e: crate::store::EventSummary) -> EventRow {
    let decision = e.decision.as_ref();
    EventRow {
        decision: decision.map_or("pending".into(), |d| d.decision.to_string()),
        rule_id: decision.and_then(|d| d.rule_id.clone()),
        id: e.id,
        received_at: rfc3339(e.received_at),
        kind: e.kind,
        verified: e.verified,
        version: None,
    }
}

/// The webhook `webhook_id` if the person edits its scope: else the not-found page (not in
/// their scopes) or a refusal saying `changing` needs the editor role.
async fn webhook_to_edit(
    c: &Console,
    person: &Person,
    webhook_id: &str,
    changing: &str,
) -> Result<Webhook, Response> {
    let w = find_webhook(c, person, webhook_id).await?;
    match c
        .state
        .store
        .role_in_scope(&person.login, &w.owner_scope)
        .await
    {
        Ok(Some(role)) if role >= Role::Editor => Ok(w),
        Ok(_) => Err(message(
            StatusCode::FORBIDDEN,
            Some(&person.chrome()),
            "Not yours to change",
            &format!(
                "{changing} needs the editor role in the webhook's scope; nothing was changed."
            ),
        )),
        Err(e) => Err(internal(&e)),
    }
}

/// Names the webhook, or clears its name: an editor of its scope only (issue 48).
pub(super) async fn rename_webhook(
    c: &Console,
    person: &Person,
    webhook_id: &str,
    name: &str,
) -> Response {
    let w = match webhook_to_edit(c, person, webhook_id, "Renaming a webhook").await {
        Ok(w) => w,
        Err(refusal) => return refusal,
    };
    let name = match WebhookName::parse(name) {
        Ok(name) => name,
        Err(problem) => {
            let notice = Notice::refused(format!("Nothing was changed: {problem}."));
            return webhook_page(
                c,
                person,
                &w,
                Some(notice),
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;
        }
    };
    match c
        .state
        .store
        .by_person(&person.login)
        .set_webhook_name(&w.owner_scope, &w.id, name.as_ref())
        .await
    {
        Ok(updated) => {
            tracing::info!(person = %person.login, webhook = %w.id, "console: webhook renamed");
            let notice = Notice::done(match &updated.name {
                Some(name) => format!("Saved: the webhook is now called {name}."),
                None => "Saved: the webhook has no name now.".to_string(),
            });
            webhook_page(c, person, &updated, Some(notice), StatusCode::OK).await
        }
        Err(crate::Error::NotFound { .. }) => not_found(person),
        Err(e) => internal(&e),
    }
}

/// Sets the webhook's confirm policy: an editor of its scope only.
pub(super) async fn set_confirm_policy(
    c: &Console,
    person: &Person,
    webhook_id: &str,
    policy: &str,
) -> Response {
    let w = match webhook_to_edit(c, person, webhook_id, "Changing who confirms plans").await {
        Ok(w) => w,
        Err(refusal) => return refusal,
    };
    let policy: ConfirmPolicy = match policy.parse() {
        Ok(p) => p,
        Err(problem) => {
            let notice = Notice::refused(format!("Nothing was changed: {problem}."));
            return webhook_page(
                c,
                person,
                &w,
                Some(notice),
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;
        }
    };
    match c
        .state
        .store
        .by_person(&person.login)
        .set_confirm_policy(&w.owner_scope, &w.id, policy)
        .await
    {
        Ok(updated) => {
            tracing::info!(person = %person.login, webhook = %w.id, %policy, "console: confirm policy set");
            let notice = Notice::done(format!("Saved: who confirms plans is now {policy}."));
            webhook_page(c, person, &updated, Some(notice), StatusCode::OK).await
        }
        Err(crate::Error::NotFound { .. }) => not_found(person),
        Err(e) => internal(&e),
    }
}

async fn webhook_view(
    c: &Console,
    person: &Person,
    w: &Webhook,
    notice: Option<Notice>,
) -> Result<WebhookView, crate::Error> {
    let store = &c.state.store;
    let scope: &OwnerScope = &w.owner_scope;
    let configuration: Configuration = w.configuration.clone();
    let rules = configuration
        .rules
        .iter()
        .map(|r| RuleRow {
            id: r.id.clone().unwrap_or_default(),
            description: r.description.clone(),
            when: r.when.clone(),
            action: r.action.label().to_string(),
        })
        .collect();
    let caller = Caller {
        endpoint_id: String::new(),
        human: person.login.clone(),
        scope: scope.clone(),
    };
    let installed = match c.packs.list(&caller, Some(&w.id)).await {
        Ok(listing) => listing
            .packs
            .into_iter()
            .filter_map(|p| Some((p.name, p.installed.flatten()?)))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e.message, "console: listing installed packs failed");
            Vec::new()
        }
    };
    let page = Page {
        cursor: None,
        limit: Some(20),
    };
    let saved = store.list_history(scope, &w.id, &page).await?.items;
    let now = store.clock().now_ms();
    let since = Activity::start_of(now, ACTIVITY_DAYS);
    let counts: Vec<_> = store
        .decisions_per_hour(scope, &w.id, since)
        .await?
        .into_iter()
        .map(|(hour, label, n)| {
            // A label this build does not know counts as "other" rather than hiding.
            let label = label.map(|l| l.parse::<Label>().unwrap_or(Label::Default));
            (hour, label, n)
        })
        .collect();
    let activity = Activity::from_counts(
        now,
        ACTIVITY_DAYS,
        &counts,
        store.versions_saved_since(scope, &w.id, since).await?,
    );
    let history = saved
        .into_iter()
        .map(|h| {
            let who = |endpoint: &Option<String>, human: &Option<String>| {
                switchboard_model::change_log::ChangeActor {
                    endpoint: endpoint.clone(),
                    human: human.clone(),
                    operator: None,
                }
                .describe()
            };
            let provenance = h.provenance.clone().unwrap_or_default();
            HistoryRow {
                version: h.version,
                saved_at: rfc3339(h.saved_at),
                change: h.change.summary(),
                saved_by: who(&h.actor.endpoint_id, &h.actor.human_login),
                proposed_by: provenance
                    .proposed_by
                    .as_ref()
                    .map(|p| who(&p.endpoint, &p.human)),
                approved_by: if provenance.approvers.is_empty() {
                    provenance.approved_by
                } else {
                    Some(provenance.approvers.join(", "))
                },
                trial: provenance.trial,
            }
        })
        .collect();
    let events = store
        .list_events(scope, &w.id, &page)
        .await?
        .items
        .into_iter()
        .map(event_row)
        .collect();
    // The newest page from the store, and any trial still running beyond it (a few at most
    // run at once); every running one is kept, then ended ones to the limit.
    let mut listed = store
        .list_trials_page(scope, &w.id, &Page::first(LISTED_TRIALS as u32))
        .await?
        .items;
    for t in store.running_trials(&w.id).await? {
        if t.guard.is_none() && !listed.iter().any(|l| l.id == t.id) {
            listed.push(store.get_trial(scope, &t.id).await?);
        }
    }
    listed.sort_by(|a, b| (b.started_at, &b.id).cmp(&(a.started_at, &a.id)));
    let mut trials = Vec::new();
    let running = listed.iter().filter(|t| t.running()).count();
    let mut ended_room = LISTED_TRIALS.saturating_sub(running);
    for t in listed {
        if !t.running() {
            if ended_room == 0 {
                continue;
            }
            ended_room -= 1;
        }
        trials.push(crate::trials::report(&c.state.trials_ctx(), &t));
    }
    let changes = store
        .webhook_changes(&w.id, 20)
        .await?
        .iter()
        .map(change_row)
        .collect();
    Ok(WebhookView {
        activity,
        approval_rule: w.approval_rule(),
        approval_rule_default: w.approval_rule.is_none(),
        changes,
        webhook_id: w.id.clone(),
        name: w.display_name().to_string(),
        owner_scope: w.owner_scope.to_string(),
        source_type: w.source_type.as_str().to_string(),
        config_version: w.config_version,
        confirm_policy: w.confirm_policy.to_string(),
        grant: w.grant.clone(),
        rules,
        default_action: configuration
            .default_action
            .as_ref()
            .map(|a| a.label().to_string()),
        installed,
        history,
        events,
        trials: switchboard_console::trial_rows(&trials),
        may_edit: store
            .role_in_scope(&person.login, scope)
            .await?
            .is_some_and(|r| r >= Role::Editor),
        notice,
        guard: store
            .newest_guard(scope, &w.id)
            .await?
            .map(|g| crate::trials::guards::report(&c.state.trials_ctx(), &g)),
    })
}

/// A change-log entry as the webhook page lists it; an entry that does not read says so
/// rather than hiding (`switchboard admin changes verify` names why).
fn change_row(sealed: &switchboard_model::change_log::Sealed) -> switchboard_console::ChangeRow {
    let hash = sealed.hash.chars().take(12).collect();
    let Ok(entry) =
        serde_json::from_str::<switchboard_model::change_log::ChangeEntry>(&sealed.text)
    else {
        return switchboard_console::ChangeRow {
            seq: sealed.seq,
            kind: "unreadable".into(),
            hash,
            ..Default::default()
        };
    };
    let actor = entry.actor.describe();
    let detail = |k: &str| entry.detail.get(k).cloned().unwrap_or_default();
    let what = match entry.version {
        Some(v) => format!("version {v}: {}", detail("op")),
        None => {
            let mut words = vec![detail("action")];
            words.extend(
                entry
                    .detail
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "action" | "target"))
                    .map(|(k, v)| format!("{k}={v}")),
            );
            words.join(" ")
        }
    };
    switchboard_console::ChangeRow {
        seq: entry.seq,
        at: rfc3339(entry.at_ms),
        kind: serde_json::to_value(entry.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        actor,
        proposed_by: entry.detail.get("proposed_by").cloned(),
        approvers: entry.approvers.clone(),
        what,
        hash,
    }
}
