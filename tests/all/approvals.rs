//! Issue 47: approvals that separate duties, end to end through control with a real router,
//! on SQLite and (when configured) PostgreSQL. A team's webhook under `confirm_policy:
//! person`; alice's agent proposes; bob, carol and dan are the team's other editors.

use serde_json::Value;
use switchboard_control::rule_packs::{Accepted, RulePacks};
use switchboard_control::store::{ConfirmPolicy, NewEndpoint, Webhook};
use switchboard_control::{OwnerScope, Role};
use switchboard_model::approval::{ApprovalRule, NotCounted, Risk};
use switchboard_model::change_log::{ChangeEntry, ChangeKind};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::operators_client::OperatorsClient;

use crate::control_harness::{TestDb, on_every_backend};
use crate::rule_packs::{ALL, Env, Options, confirm_req, install, plan_req, remove};

on_every_backend!(
    a_plan_that_loses_work_needs_two_people_and_the_proposer_does_not_count,
    a_re_plan_starts_at_zero_and_a_reject_ends_it,
    two_people_giving_the_last_approval_at_once_apply_the_plan_once,
    an_operators_approval_rule_decides_and_is_in_the_change_log,
    owners_read_their_scopes_change_log_and_no_other,
    an_applied_plan_shows_the_approvals_it_was_counted_with,
);

/// The team `ops` (alice, bob, carol, dan editors; vic a viewer), alice's agent in it, and a
/// webhook of the team under `person` with stored deliveries the CI-noise pack would drop.
async fn team(env: &Env) -> (OwnerScope, String, Webhook) {
    let store = &env.store;
    store.create_team("ops", "Operations").await.expect("team");
    for (login, role) in [
        ("alice", Role::Editor),
        ("bob", Role::Editor),
        ("carol", Role::Editor),
        ("dan", Role::Editor),
        ("vic", Role::Viewer),
    ] {
        store.create_human(login, None).await.expect("human");
        store
            .set_membership("ops", login, role)
            .await
            .expect("membership");
    }
    let scope = OwnerScope::team("ops");
    let cred = store
        .vend_endpoint(NewEndpoint {
            name: "alice-agent".into(),
            human_login: "alice".into(),
            owner_scope: scope.clone(),
            verbs: ALL.iter().map(|v| v.to_string()).collect(),
        })
        .await
        .expect("vend")
        .credential;
    let w = env.webhook(&scope, None).await;
    for (n, f) in [
        "check_run.completed.json",
        "workflow_job.queued.json",
        "pull_request.opened.json",
        "issues.opened.json",
    ]
    .iter()
    .enumerate()
    {
        env.deliver(&w, "github", f, n).await;
    }
    store
        .set_confirm_policy(&scope, &w.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    (scope, cred, w)
}

/// alice's agent plans the CI-noise pack and confirms: the pending answer, and the plan.
async fn propose(env: &Env, cred: &str, w: &Webhook) -> (Value, Value) {
    let plan = install(env, cred, plan_req(w, "drop-ci-noise"))
        .await
        .expect("plan");
    let pending = install(env, cred, confirm_req(w, "drop-ci-noise", &plan, true))
        .await
        .expect("a confirm under person answers");
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    (pending, plan)
}

/// alice's agent plans removing the CI-noise pack and confirms: the pending answer.
async fn propose_removal(env: &Env, cred: &str, w: &Webhook) -> Value {
    let req = |confirm: String| pb::RemoveRulePackRequest {
        webhook_id: w.id.clone(),
        name: "drop-ci-noise".into(),
        confirm,
        allow_unproven: true,
        ..Default::default()
    };
    let plan = remove(env, cred, req(String::new()))
        .await
        .expect("plan the removal");
    let token = plan["plan_token"].as_str().expect("token").to_string();
    let pending = remove(env, cred, req(token))
        .await
        .expect("a confirm under person answers");
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    pending
}

/// Sets the webhook's approval rule through the Operators API (a fresh operator credential).
async fn set_rule(env: &Env, webhook_id: &str, rule: Option<&ApprovalRule>) -> pb::Webhook {
    let name = format!("op-{}", rand_suffix());
    let token = env
        .store
        .create_operator_credential(&name, None)
        .await
        .expect("operator")
        .token;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", env.addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut request = tonic::Request::new(pb::SetWebhookApprovalRuleRequest {
        webhook_id: webhook_id.to_string(),
        rule: rule.map(pb::ApprovalRule::from),
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header"),
    );
    OperatorsClient::new(channel)
        .set_webhook_approval_rule(request)
        .await
        .expect("set the rule")
        .into_inner()
        .webhook
        .expect("the webhook")
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn packs(env: &Env) -> RulePacks {
    let state = env.state.clone().expect("in-process control");
    RulePacks::new(state.clone(), state.catalog.clone())
}

async fn accept(packs: &RulePacks, person: &str, plan_id: &str) -> Accepted {
    packs
        .accept(person, &[OwnerScope::team("ops")], plan_id)
        .await
        .unwrap_or_else(|e| panic!("{person} accepts: {}", e.message))
}

async fn version(env: &Env, scope: &OwnerScope, w: &Webhook) -> i64 {
    env.store
        .get_webhook(scope, &w.id)
        .await
        .expect("webhook")
        .config_version
}

/// The change log's entries for the webhook, oldest first.
async fn changes(env: &Env, w: &Webhook) -> Vec<ChangeEntry> {
    env.store
        .list_changes(None, 0, 1000)
        .await
        .expect("changes")
        .iter()
        .map(|s| serde_json::from_str::<ChangeEntry>(&s.text).expect("an entry"))
        .filter(|e| e.webhook_id.as_deref() == Some(w.id.as_str()))
        .collect()
}

async fn a_plan_that_loses_work_needs_two_people_and_the_proposer_does_not_count(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred, w) = team(&env).await;
    let before = version(&env, &scope, &w).await;
    let (pending, plan) = propose(&env, &cred, &w).await;
    let approvals = &pending["approvals"];
    assert_eq!(approvals["required"], 2, "{pending}");
    assert_eq!(approvals["still_needed"], 2, "{pending}");
    assert!(
        approvals["risks"]
            .as_array()
            .is_some_and(|r| r.contains(&Value::from("lost_work"))),
        "{pending}"
    );
    assert_eq!(
        approvals["cannot_come_from"],
        serde_json::json!(["alice"]),
        "{pending}"
    );
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
    let packs = packs(&env);

    // The requester's own approval is recorded but does not count.
    let a = accept(&packs, "alice", &plan_id).await;
    let Accepted::Waiting(t) = &a else {
        panic!("alice alone applies nothing: {a:?}")
    };
    assert_eq!((t.counted, t.still_needed), (0, 2));
    assert_eq!(t.given[0].not_counted, Some(NotCounted::Proposer));
    // bob counts; bob again counts once.
    for _ in 0..2 {
        let b = accept(&packs, "bob", &plan_id).await;
        let Accepted::Waiting(t) = &b else {
            panic!("one counting approval of two applies nothing: {b:?}")
        };
        assert_eq!((t.counted, t.still_needed), (1, 1), "{t:?}");
        assert_eq!(t.given.len(), 2, "{t:?}");
        assert_eq!(t.cannot_come_from, vec!["alice", "bob"]);
    }
    assert_eq!(version(&env, &scope, &w).await, before, "nothing saved yet");
    // What the agent reads: still pending, one more needed, and from whom it cannot come.
    let status = env
        .packs(&cred)
        .get_rule_pack_plan(pb::GetRulePackPlanRequest {
            plan_token: plan["plan_token"].as_str().expect("token").to_string(),
        })
        .await
        .expect("plan state")
        .into_inner();
    assert_eq!(status.state, pb::PlanState::PendingApproval as i32);
    let read = status.approvals.expect("approvals");
    assert_eq!((read.required, read.counted, read.still_needed), (2, 1, 1));
    assert_eq!(read.cannot_come_from, vec!["alice", "bob"]);

    // carol's approval meets the rule: the plan is applied, once.
    let c = accept(&packs, "carol", &plan_id).await;
    let applied = c.applied().expect("carol's approval applies it");
    assert_eq!(applied.version, before + 1);
    assert_eq!(version(&env, &scope, &w).await, before + 1);
    let late = packs
        .accept("dan", &[OwnerScope::team("ops")], &plan_id)
        .await
        .expect_err("applied");
    assert_eq!(late.reason.as_str(), "plan_stale");

    // The change log names the proposer, both approvers and the plan digest they approved.
    let log = changes(&env, &w).await;
    let entry = log
        .iter()
        .rev()
        .find(|e| e.kind == ChangeKind::Configuration && e.version == Some(before + 1))
        .expect("the version's entry");
    assert_eq!(entry.approvers, vec!["bob", "carol"], "{entry:?}");
    assert_eq!(entry.actor.human.as_deref(), Some("carol"));
    assert!(
        entry
            .evidence
            .get("plan_digest")
            .is_some_and(|d| d.len() == 64),
        "{entry:?}"
    );
    assert!(
        entry
            .detail
            .get("proposed_by")
            .is_some_and(|p| p.starts_with("alice via ep_")),
        "{entry:?}"
    );
    assert!(env.store.verify_change_log().await.expect("verify").is_ok());
}

async fn a_re_plan_starts_at_zero_and_a_reject_ends_it(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred, w) = team(&env).await;
    let before = version(&env, &scope, &w).await;
    let packs = packs(&env);
    let (first, _) = propose(&env, &cred, &w).await;
    let first_id = first["plan_id"].as_str().expect("plan id").to_string();
    let b = accept(&packs, "bob", &first_id).await;
    assert_eq!(b.tally().counted, 1);

    // The agent plans again: the new plan has no approvals, whatever the first had.
    let (second, _) = propose(&env, &cred, &w).await;
    let second_id = second["plan_id"].as_str().expect("plan id").to_string();
    assert_ne!(first_id, second_id);
    assert_eq!(second["approvals"]["counted"], 0, "{second}");
    assert_eq!(second["approvals"]["still_needed"], 2, "{second}");
    let c = accept(&packs, "carol", &second_id).await;
    assert!(
        matches!(&c, Accepted::Waiting(t) if t.counted == 1),
        "bob's approval of the first plan does not carry over: {c:?}"
    );

    // A reject by anyone with the role ends it: no approval after applies it.
    packs
        .reject("dan", &[OwnerScope::team("ops")], &second_id, "not now")
        .await
        .expect("reject");
    let after = packs
        .accept("bob", &[OwnerScope::team("ops")], &second_id)
        .await
        .expect_err("rejected");
    assert_eq!(after.reason.as_str(), "plan_stale");
    assert_eq!(version(&env, &scope, &w).await, before, "nothing applied");
}

async fn two_people_giving_the_last_approval_at_once_apply_the_plan_once(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred, w) = team(&env).await;
    let packs = packs(&env);
    // Five rounds: each a new plan of the same change, whose last two approvals race.
    for round in 0..5 {
        let before = version(&env, &scope, &w).await;
        // The install and the removal in turn, so each round has a change to make.
        let pending = if round % 2 == 0 {
            propose(&env, &cred, &w).await.0
        } else {
            propose_removal(&env, &cred, &w).await
        };
        let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
        let required = pending["approvals"]["required"].as_u64().expect("required");
        assert_eq!(required, 2, "round {round}: {pending}");
        accept(&packs, "bob", &plan_id).await;
        let ops = [OwnerScope::team("ops")];
        let (c, d) = tokio::join!(
            packs.accept("carol", &ops, &plan_id),
            packs.accept("dan", &ops, &plan_id)
        );
        let applied = [&c, &d]
            .iter()
            .filter(|a| matches!(a, Ok(Accepted::Applied(..))))
            .count();
        assert_eq!(applied, 1, "round {round}: {c:?} / {d:?}");
        // The other is told it is applied: by another at the same moment, or, when the
        // winner had finished before the other read the plan, as a plan applied already —
        // never as a plan gone stale.
        for other in [&c, &d] {
            match other {
                Ok(Accepted::Applied(..) | Accepted::AppliedByAnother(_)) => {}
                Err(e) => {
                    assert_eq!(e.reason.as_str(), "plan_stale", "round {round}: {e:?}");
                    assert!(e.message.contains("the plan is applied"), "{e:?}");
                }
                Ok(waiting) => panic!("round {round}: {waiting:?}"),
            }
        }
        assert_eq!(
            version(&env, &scope, &w).await,
            before + 1,
            "round {round}: saved exactly once"
        );
    }
    assert!(env.store.verify_change_log().await.expect("verify").is_ok());
}

async fn an_operators_approval_rule_decides_and_is_in_the_change_log(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred, w) = team(&env).await;
    let read = env.store.get_webhook(&scope, &w.id).await.expect("w");
    assert_eq!(read.approval_rule, None);
    assert_eq!(read.approval_rule(), ApprovalRule::default());
    // A rule nobody can meet is refused; nothing changes.
    let mut bad = ApprovalRule::default();
    bad.tiers.insert(Risk::LostWork, 0);
    let err = env
        .store
        .set_approval_rule(&scope, &w.id, Some(&bad))
        .await
        .expect_err("0 is refused");
    assert!(err.to_string().contains("tiers.lost_work"), "{err}");
    // Through the Operators API: one person, even for lost work.
    let one = ApprovalRule {
        required: 1,
        tiers: Default::default(),
        proposer_counts: false,
    };
    let webhook = set_rule(&env, &w.id, Some(&one)).await;
    assert!(!webhook.approval_rule_default);
    assert_eq!(webhook.approval_rule.expect("rule").required, 1);
    let log = changes(&env, &w).await;
    let last = log.last().expect("an entry");
    assert_eq!(last.kind, ChangeKind::ApprovalRules, "{last:?}");
    assert_eq!(
        last.detail.get("rule").map(String::as_str),
        Some("required=1"),
        "{last:?}"
    );
    let before = version(&env, &scope, &w).await;
    let (pending, _) = propose(&env, &cred, &w).await;
    assert_eq!(pending["approvals"]["required"], 1, "{pending}");
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
    let packs = packs(&env);
    // Still not the proposer.
    assert!(matches!(
        accept(&packs, "alice", &plan_id).await,
        Accepted::Waiting(_)
    ));
    assert!(accept(&packs, "bob", &plan_id).await.applied().is_some());
    assert_eq!(version(&env, &scope, &w).await, before + 1);
    // Back to the default: logged too.
    let webhook = set_rule(&env, &w.id, None).await;
    assert!(webhook.approval_rule_default);
    let log = changes(&env, &w).await;
    assert_eq!(
        log.last()
            .and_then(|e| e.detail.get("rule"))
            .map(String::as_str),
        Some("default")
    );
}

/// Issue 47 item 3: owners read their scope's change log (`list_webhook_changes`), filtered
/// by webhook, actor and time and paged by seq; another scope's owner sees none of it, and
/// naming the webhook is `not_found` for them.
async fn owners_read_their_scopes_change_log_and_no_other(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred, w) = team(&env).await;
    let (pending, _) = propose(&env, &cred, &w).await;
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
    let packs = packs(&env);
    accept(&packs, "bob", &plan_id).await;
    let applied = accept(&packs, "carol", &plan_id).await;
    let version = applied.applied().expect("applied").version;
    set_rule(&env, &w.id, Some(&ApprovalRule::default())).await;
    let list = |cred: String, req: pb::ListWebhookChangesRequest| {
        let mut rules = pb::webhook_rules_client::WebhookRulesClient::with_interceptor(
            env.channel(),
            crate::pack_api::Bearer(cred),
        );
        async move {
            rules
                .list_webhook_changes(req)
                .await
                .map(|r| r.into_inner())
        }
    };
    let entries = |r: &pb::ListWebhookChangesResponse| -> Vec<ChangeEntry> {
        r.entries
            .iter()
            .map(|e| serde_json::from_str(&e.canonical).expect("an entry"))
            .collect()
    };
    let all = list(cred.clone(), pb::ListWebhookChangesRequest::default())
        .await
        .expect("the owner reads");
    let read = entries(&all);
    assert!(
        read.iter().any(|e| e.kind == ChangeKind::Configuration
            && e.version == Some(version)
            && e.approvers == ["bob", "carol"]),
        "{read:?}"
    );
    assert!(
        read.iter().any(|e| e.kind == ChangeKind::ApprovalRules),
        "an operator's act on the scope's webhook is the owners' to read: {read:?}"
    );
    assert!(
        read.iter()
            .all(|e| e.webhook_id.as_deref() == Some(w.id.as_str())
                || e.owner_scope.as_deref() == Some(scope.to_string().as_str())),
        "{read:?}"
    );
    // By actor: carol's acceptance, and the version bob approved.
    for who in ["carol", "bob"] {
        let mine = list(
            cred.clone(),
            pb::ListWebhookChangesRequest {
                actor: who.into(),
                ..Default::default()
            },
        )
        .await
        .expect("by actor");
        let mine = entries(&mine);
        assert_eq!(mine.len(), 1, "{who}: {mine:?}");
        assert_eq!(mine[0].version, Some(version));
    }
    // Paged by seq: one at a time reads the same entries.
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = list(
            cred.clone(),
            pb::ListWebhookChangesRequest {
                after_seq: after,
                limit: 1,
                ..Default::default()
            },
        )
        .await
        .expect("a page");
        paged.extend(entries(&page));
        if page.next_after_seq == 0 {
            break;
        }
        after = page.next_after_seq;
    }
    assert_eq!(paged, read);
    // A time window after every entry: nothing.
    let later = list(
        cred.clone(),
        pb::ListWebhookChangesRequest {
            since: Some(switchboard_proto::convert::time::from_millis(
                read.last().map_or(0, |e| e.at_ms) + 1,
            )),
            ..Default::default()
        },
    )
    .await
    .expect("a window");
    assert!(later.entries.is_empty());

    // Another scope's owner: none of it, and the webhook is not found.
    let (_, mallory) = env.owner("mallory", crate::rule_packs::ALL).await;
    let theirs = list(mallory.clone(), pb::ListWebhookChangesRequest::default())
        .await
        .expect("mallory reads hers");
    assert!(
        entries(&theirs)
            .iter()
            .all(|e| e.webhook_id.as_deref() != Some(w.id.as_str())),
        "{theirs:?}"
    );
    let named = list(
        mallory,
        pb::ListWebhookChangesRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        },
    )
    .await
    .expect_err("another scope's webhook");
    assert_eq!(named.code(), tonic::Code::NotFound);
}

/// A plan whose only risk is a new default action needs two people; once applied, the
/// webhook's saved configuration is the plan's own (the default action no longer differs),
/// yet what the agent and the console read is what was counted at the final accept: the
/// risk and the two required, against the version the plan replaced.
async fn an_applied_plan_shows_the_approvals_it_was_counted_with(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred, w) = team(&env).await;
    let current = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
    let mut candidate = current.configuration.clone();
    candidate.default_action = Some(switchboard_model::Action::Queue(
        if candidate.default_action == Some(switchboard_model::Action::Queue("triage".into())) {
            "forge".into()
        } else {
            "triage".into()
        },
    ));
    let stream = env
        .rules(&cred)
        .plan_webhook_rules(pb::PlanWebhookRulesRequest {
            webhook_id: w.id.clone(),
            configuration: Some(pb::Configuration::from(&candidate)),
            replay: None,
            guard: None,
        })
        .await
        .expect("plan")
        .into_inner();
    let plan = crate::support::typed::pack_result(stream)
        .await
        .expect("a plan");
    let token = plan["plan_token"].as_str().expect("token").to_string();
    let pending = env
        .packs(&cred)
        .confirm_rule_pack_plan(pb::ConfirmRulePackPlanRequest {
            webhook_id: w.id.clone(),
            plan_token: token.clone(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("confirm by token")
        .into_inner();
    let Some(pb::rule_pack_event::Event::Pending(p)) = pending.event else {
        panic!("pending expected: {pending:?}");
    };
    let read = || async {
        env.packs(&cred)
            .get_rule_pack_plan(pb::GetRulePackPlanRequest {
                plan_token: token.clone(),
            })
            .await
            .expect("plan state")
            .into_inner()
    };
    let before = read().await.approvals.expect("approvals");
    assert_eq!(before.required, 2, "{before:?}");
    assert_eq!(
        before.risks,
        vec![pb::ApprovalRisk::DefaultAction as i32],
        "{before:?}"
    );

    let packs = packs(&env);
    assert!(matches!(
        accept(&packs, "bob", &p.plan_id).await,
        Accepted::Waiting(_)
    ));
    let applied = accept(&packs, "carol", &p.plan_id).await;
    assert!(applied.applied().is_some(), "{applied:?}");
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .configuration
            .default_action,
        candidate.default_action,
        "live: the saved default action is the plan's"
    );
    let after = read().await;
    assert_eq!(after.state, pb::PlanState::Applied as i32);
    let after = after.approvals.expect("approvals");
    assert_eq!(
        (
            after.required,
            after.counted,
            after.still_needed,
            after.risks
        ),
        (2, 2, 0, before.risks),
        "what was counted, not a recount against the new configuration"
    );
}
