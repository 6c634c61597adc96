//! Trials on live deliveries (issue 45), with a real router and real ingest: a running
//! trial counts what its candidate decides beside the live decision for every delivery,
//! writes nothing (no todo, no once-key, no quarantine, the live decision unchanged), and
//! ends itself as stale when the saved configuration moves.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use switchboard_control::store::{NewTrial, Page, SourceType, Store, TodoFilter};
use switchboard_model::Label;
use switchboard_model::trial::{Forecast, TrialEnd, TrialLimits};

use switchboard_control::state::Limits;
use switchboard_model::plan::Report;
use switchboard_model::trial::{TrialReport, TrialState};
use switchboard_proto::control::v1::rule_pack_event::Event;
use switchboard_proto::control::v1::{
    ConfirmRulePackPlanRequest, ExplainWebhookEventRequest, GetRuleTrialRequest,
    InstallRulePackRequest, ListRuleTrialsRequest, PromoteRuleTrialRequest, StartRuleTrialRequest,
    StopRuleTrialRequest, TestReplay, TestWebhookRulesRequest,
};
use tonic::Status;

use crate::control_harness::{
    Control, ControlSetup, TestDb, eventually, human, on_every_backend, save_rules, signed, webhook,
};
use crate::ingest::{router, routing_config};
use crate::pack_api::{Api, owner, result_of};
use crate::support::payloads;

on_every_backend! {
    a_trial_counts_what_its_candidate_decides_on_live_deliveries_and_writes_nothing,
    a_trial_of_a_plan_equals_its_replay_flags_the_unforeseen_and_promotes_exactly_its_candidate,
    a_short_trial_is_insufficient_a_moved_configuration_makes_its_promotion_stale_and_other_scopes_see_nothing,
    a_candidate_over_its_budget_on_every_delivery_faults_in_the_trial_and_never_in_the_live_decision,
    a_trial_survives_a_kill_9_of_control_and_of_a_router_and_never_invents_a_count,
    hand_written_rules_are_planned_tried_beside_the_live_rules_and_promoted_exactly,
}

async fn todos_everywhere(store: &Store, scope: &switchboard_control::OwnerScope) -> usize {
    let mut n = 0;
    for queue in crate::control_harness::grant() {
        let mut page = Page::first(200);
        loop {
            let listed = store
                .list_todos(scope, &queue, TodoFilter::All, &page)
                .await
                .expect("todos");
            n += listed.items.len();
            match listed.next_cursor {
                Some(cursor) => page = Page::after(cursor, 200),
                None => break,
            }
        }
    }
    n
}

async fn a_trial_counts_what_its_candidate_decides_on_live_deliveries_and_writes_nothing(
    db: TestDb,
) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(routing_config()),
    )
    .await;
    // The candidate drops what the live rules send to review, and sends issues to triage.
    let candidate = crate::support::typed(json!({"rules": [
        {"id": "prs", "when": ".event == \"pull_request\"", "action": {"drop": true}},
        {"id": "issues", "when": ".event == \"issues\"", "action": {"queue": "triage"}},
        {"id": "pings", "when": ".event == \"ping\"", "action": {"drop": true}}
    ], "params": {}}));
    let trial = start_by_hand(&db.store, &scope, &hook, &candidate).await;

    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let mut want: BTreeMap<(Label<'static>, Label<'static>), u64> = BTreeMap::new();
    let mut live_todos = 0;
    for (n, p) in github.iter().enumerate() {
        let headers = signed("github", &p.event, &format!("d-{n}"), &hook.secret, &p.body);
        let answer = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(answer.status, 202, "{}: {answer:?}", p.file);
        let answer = answer.json();
        let live: Label<'static> = answer["decision"]
            .as_str()
            .expect("decided")
            .parse()
            .expect("a label");
        // The live decision is the saved configuration's, whatever the trial decides.
        let after = match p.event.as_str() {
            "pull_request" => {
                assert_eq!(live, Label::queue("review"), "{}", p.file);
                Label::Drop
            }
            "issues" => Label::queue("triage").into_owned(),
            _ => live.clone(),
        };
        live_todos += usize::from(answer["todo_id"].is_string());
        if after != live {
            *want.entry((live, after)).or_default() += 1;
        }
    }
    assert!(want.len() >= 2, "the deliveries move two ways: {want:?}");

    let total = github.len() as u64;
    eventually(
        Duration::from_secs(20),
        "the trial counted every delivery",
        || async {
            db.store
                .get_trial(&scope, &trial.id)
                .await
                .is_ok_and(|t| t.observed.seen == total)
        },
    )
    .await;
    let read = db.store.get_trial(&scope, &trial.id).await.expect("trial");
    assert_eq!(
        read.observed.evaluated, total,
        "none shed on an idle control"
    );
    assert_eq!(read.observed.transitions, want);
    for (mv, ids) in &read.examples {
        assert_eq!(ids.len() as u64, want[mv].min(20), "{mv:?}");
    }
    // Only the live decisions made work.
    assert_eq!(todos_everywhere(&db.store, &scope).await, live_todos);

    // The saved configuration moves: the next delivery ends the trial as stale, uncounted.
    let mut triage = routing_config();
    triage["rules"][0]["action"] = json!({"queue": "triage"});
    save_rules(&db.store, &scope, &hook.id, triage).await;
    let p = &github[0];
    let headers = signed("github", &p.event, "d-after", &hook.secret, &p.body);
    assert_eq!(
        control.deliver(&hook.id, &headers, &p.body).await.status,
        202
    );
    eventually(
        Duration::from_secs(20),
        "the trial ended as stale",
        || async {
            db.store
                .get_trial(&scope, &trial.id)
                .await
                .is_ok_and(|t| t.end == Some(TrialEnd::Stale))
        },
    )
    .await;
    let ended = db.store.get_trial(&scope, &trial.id).await.expect("trial");
    assert_eq!(
        ended.observed.seen, total,
        "nothing counted beside other rules"
    );
    control.stop().await;
}

/// CI kinds: the drop-ci-noise pack's business, absent from the plan's replay window.
pub(crate) const CI_KINDS: [&str; 5] = [
    "status",
    "check_run",
    "check_suite",
    "workflow_run",
    "workflow_job",
];
/// Live rules for the CI kinds: to triage.
pub(crate) const CI_RULE: &str = ".event == \"status\" or .event == \"check_run\" or .event == \"check_suite\" or .event == \"workflow_run\" or .event == \"workflow_job\"";

fn trial_of(r: switchboard_proto::control::v1::RuleTrial) -> TrialReport {
    TrialReport::from(r)
}

/// Sends `rounds` rounds of `payloads` through ingest, each delivery its own; returns how many,
/// and how many todos their live decisions made.
pub(crate) async fn send(
    control: &Control,
    hook: &switchboard_control::store::Webhook,
    payloads: &[crate::support::Payload],
    tag: &str,
    rounds: usize,
) -> (usize, usize) {
    let (mut n, mut todos) = (0, 0);
    for round in 0..rounds {
        for p in payloads {
            let id = format!("{tag}-{round}-{n}");
            let headers = signed("github", &p.event, &id, &hook.secret, &p.body);
            let answer = control.deliver(&hook.id, &headers, &p.body).await;
            assert_eq!(answer.status, 202, "{}: {answer:?}", p.file);
            todos += usize::from(answer.json()["todo_id"].is_string());
            n += 1;
        }
    }
    (n, todos)
}

/// Issue 45's first scenario: a webhook whose history holds no CI delivery; a drop-ci-noise
/// plan; a trial of it over 1,000 live deliveries in which CI deliveries arrive. The trial's
/// decisions equal a replay of the same stored deliveries with the candidate, the CI kinds show
/// up as transitions the replay never saw, nothing but the live decisions made work, and the
/// promotion's confirm saves exactly the tried candidate, naming the trial.
async fn a_trial_of_a_plan_equals_its_replay_flags_the_unforeseen_and_promotes_exactly_its_candidate(
    db: TestDb,
) {
    let router = router();
    let control = Control::start(
        &db.store,
        &[&router.addr],
        ControlSetup {
            limits: Limits {
                ingest_per_webhook_per_minute: 100_000,
                ..Limits::default()
            },
            ..ControlSetup::default()
        },
    )
    .await;
    let (scope, credential) = owner(
        &db.store,
        "alice",
        &[
            "webhooks",
            "webhook-rules",
            "rule-trials",
            "rule-pack-confirm",
        ],
    )
    .await;
    // CI deliveries, when they come, go to triage: a queue the history never fed.
    let mut routing = routing_config();
    routing["rules"]
        .as_array_mut()
        .expect("rules")
        .push(json!({"id": "ci", "when": CI_RULE, "action": {"queue": "triage"}}));
    let hook = webhook(&db.store, &scope, SourceType::Github, Some(routing)).await;
    let api = Api::connect(control.grpc, &credential).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let (ci, rest): (Vec<_>, Vec<_>) = github
        .iter()
        .cloned()
        .partition(|p| CI_KINDS.contains(&p.event.as_str()));
    assert!(!ci.is_empty() && !rest.is_empty());
    // The past: everything but CI.
    send(&control, &hook, &rest, "past", 2).await;
    let plan = api
        .install(InstallRulePackRequest {
            webhook_id: hook.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        })
        .await
        .expect("a plan");
    let token = plan["plan_token"].as_str().expect("token").to_string();

    let started = trial_of(
        api.trials()
            .start_rule_trial(StartRuleTrialRequest {
                webhook_id: hook.id.clone(),
                plan_token: token.clone(),
                max_deliveries: None,
                max_duration_ms: None,
            })
            .await
            .expect("a trial starts")
            .into_inner(),
    );
    assert_eq!(started.state, TrialState::Running);
    assert_eq!(started.deliveries.seen, 0);
    assert_eq!(
        started.forecast_deliveries,
        plan["events_replayed"].as_u64().expect("n")
    );
    // A second trial on the same webhook is refused, naming the first.
    let second = api
        .trials()
        .start_rule_trial(StartRuleTrialRequest {
            webhook_id: hook.id.clone(),
            plan_token: token.clone(),
            ..Default::default()
        })
        .await
        .expect_err("one trial per webhook");
    assert!(second.message().contains(&started.trial_id), "{second:?}");

    // The present: 1,000 live deliveries, CI among them.
    let mut live = Vec::new();
    while live.len() < 1000 {
        live.extend(github.iter().cloned());
    }
    live.truncate(1000);
    let todos_before = todos_everywhere(&db.store, &scope).await;
    let (total, live_todos) = send(&control, &hook, &live, "live", 1).await;
    let total = total as u64;
    eventually(
        Duration::from_secs(60),
        "the trial counted every live delivery",
        || async {
            db.store
                .get_trial(&scope, &started.trial_id)
                .await
                .is_ok_and(|t| t.observed.seen == total)
        },
    )
    .await;
    let report = trial_of(
        api.trials()
            .get_rule_trial(GetRuleTrialRequest {
                trial_id: started.trial_id.clone(),
            })
            .await
            .expect("the report")
            .into_inner(),
    );
    assert_eq!(report.deliveries.seen, total);
    assert_eq!(
        report.deliveries.evaluated, total,
        "none shed on an idle control"
    );
    // A cheap candidate is proven apart, then rides in the live call (one parse, two
    // configurations): most deliveries were evaluated there, and what follows shows they
    // decided exactly as the replay does.
    let places = control
        .trial_places(&started.trial_id)
        .expect("the trial is known running");
    assert_eq!(places.live_call + places.apart, total, "{places:?}");
    assert!(places.apart >= 16, "proven apart first: {places:?}");
    assert!(places.live_call > total / 2, "{places:?}");

    // The same stored deliveries replayed with the candidate decide exactly as the trial did.
    let candidate = db
        .store
        .get_trial(&scope, &started.trial_id)
        .await
        .expect("trial")
        .candidate;
    let replay = api
        .rules()
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: hook.id.clone(),
            configuration: Some((&candidate).into()),
            replay: Some(TestReplay {
                limit: 1000,
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("a replay")
        .into_inner();
    let replayed = Report::from(replay.replay_report.expect("a report"));
    assert_eq!(replayed.events_replayed, total);
    assert_eq!(
        replayed.totals, report.report.totals,
        "100 % equal to the replay"
    );
    let counts = |r: &Report| -> BTreeMap<(Label<'static>, Label<'static>), u64> {
        r.transitions
            .iter()
            .map(|t| ((t.from.clone(), t.to.clone()), t.count))
            .collect()
    };
    assert_eq!(counts(&replayed), counts(&report.report));
    for (a, b) in replayed.rules.iter().zip(&report.report.rules) {
        assert_eq!(
            (&a.id, a.first_matches, a.faults),
            (&b.id, b.first_matches, b.faults)
        );
    }

    // The CI deliveries the plan's replay never held: unforeseen, and shown first among them.
    let unforeseen: Vec<_> = report.evidence.iter().filter(|e| e.unforeseen).collect();
    assert!(!unforeseen.is_empty(), "{:?}", report.evidence);
    assert!(
        unforeseen
            .iter()
            .all(|e| e.forecast_count == 0 && e.outside)
    );
    let triage = Label::queue("triage").into_owned();
    assert!(
        unforeseen
            .iter()
            .any(|e| e.from == triage && e.to == Label::Drop),
        "{unforeseen:?}"
    );
    let ci_dropped = report
        .report
        .transitions
        .iter()
        .find(|t| t.to == Label::Drop && t.from == triage)
        .expect("CI deliveries dropped");
    assert!(!ci_dropped.example_event_ids.is_empty());
    // explain shows what the trial decided for one of them, beside the recorded decision.
    let explained = api
        .webhooks()
        .explain_webhook_event(ExplainWebhookEventRequest {
            event_id: ci_dropped.example_event_ids[0].clone(),
        })
        .await
        .expect("explained")
        .into_inner();
    assert_eq!(explained.trials.len(), 1, "{explained:?}");
    let tried = &explained.trials[0];
    assert_eq!(tried.trial_id, started.trial_id);
    assert!(tried.differs);
    assert_eq!(
        tried.decision.as_ref().map(|d| d.decision.as_str()),
        Some("drop")
    );
    assert_eq!(
        explained
            .recorded_decision
            .as_ref()
            .map(|d| d.decision.as_str()),
        Some("queue:triage")
    );
    // Only the live decisions made work.
    assert_eq!(
        todos_everywhere(&db.store, &scope).await - todos_before,
        live_todos
    );

    // Listed, running.
    let listed = api
        .trials()
        .list_rule_trials(ListRuleTrialsRequest {
            webhook_id: hook.id.clone(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.trials.len(), 1);
    assert_eq!(trial_of(listed.trials[0].clone()).digest, report.digest);

    // Promotion: a plan carrying the trial, its token binding both; the confirm saves exactly
    // the tried candidate.
    let promoted = result_of(
        api.trials()
            .promote_rule_trial(PromoteRuleTrialRequest {
                trial_id: started.trial_id.clone(),
                replay: None,
                guard: None,
            })
            .await
            .expect("promote")
            .into_inner(),
    )
    .await
    .expect("a promotion plan");
    assert_eq!(promoted["trial"]["trial_id"], json!(started.trial_id));
    assert_eq!(promoted["trial"]["end"], json!("promoted"));
    assert_eq!(promoted["trial_sufficient"], json!(true));
    assert_eq!(promoted["trial"]["deliveries"]["evaluated"], json!(total));
    let after_promotion = trial_of(
        api.trials()
            .get_rule_trial(GetRuleTrialRequest {
                trial_id: started.trial_id.clone(),
            })
            .await
            .expect("the report")
            .into_inner(),
    );
    assert_eq!(after_promotion.end, Some(TrialEnd::Promoted));
    let applied = api
        .packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: promoted["plan_token"].as_str().expect("token").into(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied")
        .into_inner();
    let Some(Event::Applied(applied)) = applied.event else {
        panic!("not applied: {applied:?}");
    };
    assert_eq!(
        applied.digest,
        candidate.digest(),
        "exactly the tried candidate"
    );
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(5))
        .await
        .expect("history");
    assert_eq!(
        history.items[0]
            .provenance
            .as_ref()
            .and_then(|p| p.trial.clone()),
        Some(started.trial_id.clone())
    );
    // The old plan's token still names a plan made against the old configuration: stale.
    let stale = api
        .trials()
        .start_rule_trial(StartRuleTrialRequest {
            webhook_id: hook.id.clone(),
            plan_token: token,
            ..Default::default()
        })
        .await
        .expect_err("stale plan");
    assert!(stale.message().starts_with("plan_stale"), "{stale:?}");
    control.stop().await;
}

/// A trial of a few deliveries is insufficient: its promotion's confirm needs the opt-in. A
/// promotion after the saved configuration moved is `plan_stale`. Another scope's trial id is
/// the one `not_found` of an unknown id, and an endpoint without the trial verbs is refused.
async fn a_short_trial_is_insufficient_a_moved_configuration_makes_its_promotion_stale_and_other_scopes_see_nothing(
    db: TestDb,
) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let (scope, credential) = owner(
        &db.store,
        "alice",
        &[
            "webhooks",
            "webhook-rules",
            "rule-trials",
            "rule-pack-confirm",
        ],
    )
    .await;
    let (_, bobs) = owner(&db.store, "bob", &["rule-trials"]).await;
    let (_, plain) = owner(&db.store, "carol", &["webhook-rules"]).await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(routing_config()),
    )
    .await;
    let api = Api::connect(control.grpc, &credential).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    send(&control, &hook, &github, "past", 1).await;
    let start = |token: String| StartRuleTrialRequest {
        webhook_id: hook.id.clone(),
        plan_token: token,
        max_deliveries: Some(5),
        max_duration_ms: None,
    };
    let trial = trial_of(
        api.trials()
            .start_rule_trial(start(plan_token(&api, &hook).await))
            .await
            .expect("started")
            .into_inner(),
    );
    assert_eq!(trial.max_deliveries, Some(5));

    // Tenancy: bob's endpoint gets the one not_found; carol's has no trial verbs.
    let bob = Api::connect(control.grpc, &bobs).await;
    let theirs = bob
        .trials()
        .get_rule_trial(GetRuleTrialRequest {
            trial_id: trial.trial_id.clone(),
        })
        .await
        .expect_err("not bob's");
    let unknown = bob
        .trials()
        .get_rule_trial(GetRuleTrialRequest {
            trial_id: "tr_00000000000000000000000000000000".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(theirs.code(), tonic::Code::NotFound);
    assert_eq!(
        (theirs.code(), theirs.message()),
        (unknown.code(), unknown.message())
    );
    for refused in [
        bob.trials()
            .stop_rule_trial(StopRuleTrialRequest {
                trial_id: trial.trial_id.clone(),
            })
            .await
            .expect_err("not bob's"),
        bob.trials()
            .promote_rule_trial(PromoteRuleTrialRequest {
                trial_id: trial.trial_id.clone(),
                replay: None,
                guard: None,
            })
            .await
            .map(|_| ())
            .err()
            .unwrap_or_else(|| Status::ok("streamed")),
    ] {
        // A streamed call may answer its refusal as the stream's first message.
        if refused.code() != tonic::Code::Ok {
            assert_eq!(refused.code(), tonic::Code::NotFound, "{refused:?}");
        }
    }
    let carol = Api::connect(control.grpc, &plain).await;
    let denied = carol
        .trials()
        .list_rule_trials(ListRuleTrialsRequest {
            webhook_id: hook.id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("no trial verbs");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");

    // Five deliveries end it (max_deliveries); its evidence is too little to promote on alone.
    send(&control, &hook, &github[..5], "live", 1).await;
    eventually(Duration::from_secs(20), "the trial ended", || async {
        db.store
            .get_trial(&scope, &trial.trial_id)
            .await
            .is_ok_and(|t| t.end == Some(TrialEnd::MaxDeliveries))
    })
    .await;
    let promoted = result_of(
        api.trials()
            .promote_rule_trial(PromoteRuleTrialRequest {
                trial_id: trial.trial_id.clone(),
                replay: None,
                guard: None,
            })
            .await
            .expect("promote")
            .into_inner(),
    )
    .await
    .expect("a promotion plan");
    assert_eq!(promoted["trial_sufficient"], json!(false));
    assert_eq!(
        promoted["confirm_with"]["arguments"]["allow_insufficient_trial"],
        json!(true)
    );
    assert_eq!(
        promoted["trial"]["insufficient"][0]["reason"],
        json!("too_few_deliveries")
    );
    let confirm = |allow_insufficient_trial| ConfirmRulePackPlanRequest {
        webhook_id: hook.id.clone(),
        plan_token: promoted["plan_token"].as_str().expect("token").into(),
        allow_unproven: true,
        allow_insufficient_trial,
    };
    let refused = api
        .packs()
        .confirm_rule_pack_plan(confirm(false))
        .await
        .expect_err("insufficient");
    assert!(
        refused.message().starts_with("insufficient_trial"),
        "{refused:?}"
    );

    // The configuration moves before the confirm: the promotion is stale, and so is a new one.
    let mut triage = routing_config();
    triage["rules"][0]["action"] = json!({"queue": "triage"});
    save_rules(&db.store, &scope, &hook.id, triage).await;
    let stale = api
        .packs()
        .confirm_rule_pack_plan(confirm(true))
        .await
        .expect_err("stale");
    assert!(stale.message().starts_with("plan_stale"), "{stale:?}");
    let again = result_of(
        api.trials()
            .promote_rule_trial(PromoteRuleTrialRequest {
                trial_id: trial.trial_id.clone(),
                replay: None,
                guard: None,
            })
            .await
            .expect("the stream")
            .into_inner(),
    )
    .await
    .expect_err("stale promotion");
    assert!(again.message().starts_with("plan_stale"), "{again:?}");

    // A fresh plan and trial; stopped; the stop is idempotent and keeps its first end.
    let fresh = trial_of(
        api.trials()
            .start_rule_trial(start(plan_token(&api, &hook).await))
            .await
            .expect("started")
            .into_inner(),
    );
    let stopped = trial_of(
        api.trials()
            .stop_rule_trial(StopRuleTrialRequest {
                trial_id: fresh.trial_id.clone(),
            })
            .await
            .expect("stopped")
            .into_inner(),
    );
    assert_eq!(
        (stopped.state, stopped.end),
        (TrialState::Ended, Some(TrialEnd::Stopped))
    );
    let twice = trial_of(
        api.trials()
            .stop_rule_trial(StopRuleTrialRequest {
                trial_id: fresh.trial_id.clone(),
            })
            .await
            .expect("stopped again")
            .into_inner(),
    );
    assert_eq!(twice.ended_at, stopped.ended_at);
    control.stop().await;
}

/// A drop-ci-noise plan's token on `hook`.
async fn plan_token(api: &Api, hook: &switchboard_control::store::Webhook) -> String {
    api.install(InstallRulePackRequest {
        webhook_id: hook.id.clone(),
        name: "drop-ci-noise".into(),
        ..Default::default()
    })
    .await
    .expect("a plan")["plan_token"]
        .as_str()
        .expect("token")
        .to_string()
}

/// A trial whose candidate exceeds its budget on every delivery: every live delivery is
/// still decided by the live rules, at once, and makes its todo; the trial counts faults (a
/// few per batch: the router stops a trial call after three) and the rest as not evaluated,
/// never as a decision.
async fn a_candidate_over_its_budget_on_every_delivery_faults_in_the_trial_and_never_in_the_live_decision(
    db: TestDb,
) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(routing_config()),
    )
    .await;
    // The payload copied 8^7 times over, as JSON: far past a 50 ms budget on any delivery.
    let spin = r#"((. as $p | [$p,$p,$p,$p,$p,$p,$p,$p] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | [.,.,.,.,.,.,.,.] | tojson | length) > 0)"#;
    let candidate = crate::support::typed(json!({"rules": [
        {"id": "spin", "when": spin, "action": {"drop": true}}
    ], "params": {}}));
    let trial = start_by_hand(&db.store, &scope, &hook, &candidate).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .take(20)
        .collect();
    for (n, p) in github.iter().enumerate() {
        let headers = signed(
            "github",
            &p.event,
            &format!("spin-{n}"),
            &hook.secret,
            &p.body,
        );
        let answer = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(answer.status, 202, "{}: {answer:?}", p.file);
        let decided = answer.json()["decision"].as_str().map(str::to_string);
        let want = match p.event.as_str() {
            "pull_request" => "queue:review",
            "ping" => "drop",
            _ => "default",
        };
        assert_eq!(decided.as_deref(), Some(want), "{}", p.file);
    }
    let total = github.len() as u64;
    eventually(
        Duration::from_secs(60),
        "the trial saw every delivery",
        || async {
            db.store
                .get_trial(&scope, &trial.id)
                .await
                .is_ok_and(|t| t.observed.seen == total)
        },
    )
    .await;
    let read = db.store.get_trial(&scope, &trial.id).await.expect("trial");
    let faults = read.observed.rules.get("spin").map_or(0, |t| t.faults);
    assert!(faults > 0, "{:?}", read.observed);
    assert_eq!(read.observed.rules["spin"].first_matches, 0);
    assert_eq!(
        faults + read.observed.not_evaluated(),
        total,
        "every delivery a fault or not evaluated: {:?}",
        read.observed
    );
    assert!(
        read.observed
            .totals()
            .after
            .keys()
            .all(|l| *l == Label::Fault),
        "the candidate decided nothing but faults: {:?}",
        read.observed
    );
    // Over its budget, it never entered a live call: every evaluation ran apart.
    let places = control.trial_places(&trial.id).expect("known running");
    assert_eq!(places.live_call, 0, "{places:?}");
    control.stop().await;
}

/// What a trial counted adds up: every evaluated delivery is in exactly one pair, and no
/// more were evaluated than seen.
fn adds_up(t: &switchboard_control::store::Trial) {
    let pairs: u64 =
        t.observed.transitions.values().sum::<u64>() + t.observed.unchanged.values().sum::<u64>();
    assert_eq!(pairs, t.observed.evaluated, "{:?}", t.observed);
    assert!(t.observed.evaluated <= t.observed.seen, "{:?}", t.observed);
}

/// Issue 45: a trial survives a kill -9 of control and of a router. Control killed with
/// deliveries in flight loses the evaluations it had not written, never more: what the trial
/// counted is exact (every evaluated delivery in one pair, nothing counted twice or
/// invented), and a new control goes on counting it. A router killed mid-trial: the trial's
/// calls it dropped are counted as not evaluated. Once the trial ends, every delivery stored
/// while it ran is seen, the ones the killed control never evaluated as not evaluated.
async fn a_trial_survives_a_kill_9_of_control_and_of_a_router_and_never_invents_a_count(
    db: TestDb,
) {
    use crate::rule_packs::ControlProcess;
    let routers = [router(), router()];
    let both = format!("{},{}", routers[0].addr, routers[1].addr);
    let scope = human(&db.store, "alice").await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(routing_config()),
    )
    .await;
    let candidate = crate::support::typed(json!({"rules": [
        {"id": "prs", "when": ".event == \"pull_request\"", "action": {"drop": true}}
    ], "params": {}}));
    let trial = start_by_hand(&db.store, &scope, &hook, &candidate).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let env = [("SWITCHBOARD_INGEST_PER_WEBHOOK_PER_MINUTE", "100000")];
    let post_all = |http: String, tag: &'static str, n: usize| {
        let github = github.clone();
        let hook = hook.clone();
        async move {
            let addr: std::net::SocketAddr = http.parse().expect("ingest address");
            let mut answered = 0;
            for i in 0..n {
                let p = &github[i % github.len()];
                let headers = signed(
                    "github",
                    &p.event,
                    &format!("{tag}-{i}"),
                    &hook.secret,
                    &p.body,
                );
                let answer = crate::control_harness::post(
                    addr,
                    &format!("/hooks/{}", hook.id),
                    &headers,
                    &p.body,
                )
                .await;
                assert_eq!(answer.status, 202, "{answer:?}");
                answered += 1;
            }
            answered
        }
    };

    // Control is killed right after its last answer, evaluations still queued.
    let mut first = ControlProcess::spawn(&db.url, &both, &env);
    let sent = post_all(first.http.clone(), "before", 300).await as u64;
    first.kill_9();
    let after_kill = db.store.get_trial(&scope, &trial.id).await.expect("trial");
    adds_up(&after_kill);
    assert!(
        after_kill.observed.seen <= sent,
        "{:?}",
        after_kill.observed
    );
    assert!(after_kill.running());

    // A new control goes on counting the same trial, exactly.
    let second = ControlProcess::spawn(&db.url, &both, &env);
    let more = post_all(second.http.clone(), "after", 100).await as u64;
    let base = after_kill.observed.seen;
    eventually(
        Duration::from_secs(30),
        "the new control counted its deliveries",
        || async {
            db.store
                .get_trial(&scope, &trial.id)
                .await
                .is_ok_and(|t| t.observed.seen == base + more)
        },
    )
    .await;
    let counted = db.store.get_trial(&scope, &trial.id).await.expect("trial");
    adds_up(&counted);
    assert_eq!(
        counted.observed.evaluated - after_kill.observed.evaluated,
        more,
        "none shed"
    );

    // One router is killed mid-trial: every delivery is still seen; what a dead router
    // dropped is not evaluated, never a decision.
    let mut doomed = routers;
    let survivor_base = counted.observed.seen;
    let killer = {
        let pid = doomed[0].child.id();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        })
    };
    let last = post_all(second.http.clone(), "routerless", 200).await as u64;
    killer.await.expect("killed");
    let _ = doomed[0].child.wait();
    eventually(Duration::from_secs(30), "every delivery seen", || async {
        db.store
            .get_trial(&scope, &trial.id)
            .await
            .is_ok_and(|t| t.observed.seen == survivor_base + last)
    })
    .await;
    let counted = db.store.get_trial(&scope, &trial.id).await.expect("trial");
    adds_up(&counted);

    // Ended, the trial has seen every delivery its webhook stored while it ran: the ones the
    // killed control never evaluated are counted not evaluated, never missing, never decided.
    let ended = db
        .store
        .end_trial(
            &scope,
            &trial.id,
            switchboard_model::trial::TrialEnd::Stopped,
        )
        .await
        .expect("stopped");
    adds_up(&ended);
    assert_eq!(
        ended.observed.seen,
        sent + more + last,
        "{:?}",
        ended.observed
    );
    assert_eq!(
        ended.observed.evaluated, counted.observed.evaluated,
        "ending evaluates nothing"
    );
    assert_eq!(
        ended.observed.not_evaluated(),
        ended.observed.seen - counted.observed.evaluated
    );
    drop(second);
}

/// A trial of `candidate` on `hook`, started through the store (no plan): what the live
/// runner sees of any trial.
async fn start_by_hand(
    store: &Store,
    scope: &switchboard_control::OwnerScope,
    hook: &switchboard_control::store::Webhook,
    candidate: &switchboard_model::Configuration,
) -> switchboard_control::store::Trial {
    store
        .start_trial(
            NewTrial {
                webhook_id: hook.id.clone(),
                owner_scope: scope.clone(),
                plan_id: "pl_test".into(),
                candidate: candidate.clone(),
                base_config_digest: hook.config_digest.clone(),
                forecast: Forecast::default(),
                limits: TrialLimits::default(),
                started_by: "alice".into(),
                plan: Default::default(),
            },
            1,
        )
        .await
        .expect("a trial starts")
}

/// Issue 45: a hand-written candidate (as `test_webhook_rules` would try it) becomes a plan of
/// its own (`plan_webhook_rules`, kind `rules`, no pack), a trial starts from its token and
/// counts it on live deliveries, and the promotion's confirm saves exactly the tried
/// configuration (the id minted for a rule without one included), naming the trial. A rules
/// plan also confirms directly, like a pack's.
async fn hand_written_rules_are_planned_tried_beside_the_live_rules_and_promoted_exactly(
    db: TestDb,
) {
    use switchboard_proto::control::v1 as pb;
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let (scope, credential) = owner(
        &db.store,
        "alice",
        &[
            "webhooks",
            "webhook-rules",
            "rule-trials",
            "rule-pack-confirm",
        ],
    )
    .await;
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(routing_config()),
    )
    .await;
    let api = Api::connect(control.grpc, &credential).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    send(&control, &hook, &github, "past", 1).await;

    // The candidate drops pull requests and sends issues to triage; one rule has no id.
    let candidate = crate::support::typed(json!({"rules": [
        {"id": "prs", "when": ".event == \"pull_request\"", "action": {"drop": true}},
        {"when": ".event == \"issues\"", "action": {"queue": "triage"}}
    ], "params": {}}));
    let plan_of = |configuration: &switchboard_model::Configuration| {
        let rules = api.rules();
        let request = pb::PlanWebhookRulesRequest {
            webhook_id: hook.id.clone(),
            configuration: Some(pb::Configuration::from(configuration)),
            replay: None,
            guard: None,
        };
        async move {
            let mut rules = rules;
            // A refusal before the replay is the call's; one during it, the stream's.
            result_of(rules.plan_webhook_rules(request).await?.into_inner()).await
        }
    };
    let plan = plan_of(&candidate).await.expect("a plan");
    assert_eq!(plan["kind"], json!("rules"), "{plan}");
    assert_eq!(plan["pack"]["name"], json!(""));
    assert_eq!(plan["nothing_saved"], json!(true));
    assert!(
        plan["events_replayed"].as_u64().expect("replayed") >= github.len() as u64,
        "{plan}"
    );
    assert!(
        plan["transitions"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["to"] == json!("drop"))),
        "the replay shows the pull requests dropped: {plan}"
    );
    let token = plan["plan_token"].as_str().expect("token").to_string();

    let trial = trial_of(
        api.trials()
            .start_rule_trial(StartRuleTrialRequest {
                webhook_id: hook.id.clone(),
                plan_token: token,
                max_deliveries: None,
                max_duration_ms: None,
            })
            .await
            .expect("a trial of hand-written rules starts")
            .into_inner(),
    );
    let (sent, _) = send(&control, &hook, &github, "live", 1).await;
    eventually(
        Duration::from_secs(20),
        "the trial counted every delivery",
        || async {
            db.store
                .get_trial(&scope, &trial.trial_id)
                .await
                .is_ok_and(|t| t.observed.evaluated == sent as u64)
        },
    )
    .await;
    let tried = db
        .store
        .get_trial(&scope, &trial.trial_id)
        .await
        .expect("trial");
    assert!(
        tried
            .observed
            .transitions
            .keys()
            .any(|(from, to)| *from == Label::queue("review") && *to == Label::Drop),
        "{:?}",
        tried.observed
    );

    let promoted = result_of(
        api.trials()
            .promote_rule_trial(PromoteRuleTrialRequest {
                trial_id: trial.trial_id.clone(),
                replay: None,
                guard: None,
            })
            .await
            .expect("promote")
            .into_inner(),
    )
    .await
    .expect("a promotion plan");
    assert_eq!(promoted["kind"], json!("rules"));
    assert_eq!(promoted["trial"]["trial_id"], json!(trial.trial_id));
    let applied = api
        .packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: promoted["plan_token"].as_str().expect("token").into(),
            allow_unproven: true,
            // Fewer deliveries than a sufficient trial needs.
            allow_insufficient_trial: true,
        })
        .await
        .expect("applied")
        .into_inner();
    assert!(
        matches!(applied.event, Some(Event::Applied(_))),
        "{applied:?}"
    );
    let saved = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    assert_eq!(
        saved.configuration, tried.candidate,
        "exactly the tried rules"
    );
    assert!(
        saved.configuration.rules[1]
            .id
            .as_deref()
            .is_some_and(|id| !id.is_empty()),
        "the minted id is the planned one"
    );
    let history = db
        .store
        .list_history(&scope, &hook.id, &Page::first(1))
        .await
        .expect("history");
    let last = &history.items[0];
    assert_eq!(last.change.op, "plan_webhook_rules");
    assert_eq!(last.change.pack, None, "no pack");
    assert_eq!(
        last.provenance.as_ref().and_then(|p| p.trial.clone()),
        Some(trial.trial_id.clone())
    );

    // Directly: a rules plan back to the old rules, confirmed, saves them.
    let back = plan_of(&crate::support::typed(routing_config()))
        .await
        .expect("a plan back");
    api.packs()
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: hook.id.clone(),
            plan_token: back["plan_token"].as_str().expect("token").into(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("applied");
    let saved = db.store.get_webhook(&scope, &hook.id).await.expect("hook");
    assert_eq!(saved.configuration, crate::support::typed(routing_config()));

    // Checked as a save is: an invalid candidate is refused before any replay.
    let invalid = plan_of(&crate::support::typed(json!({"rules": [
        {"id": "bad", "when": ".event ==", "action": {"drop": true}}
    ]})))
    .await
    .expect_err("invalid");
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument, "{invalid:?}");
    control.stop().await;
}
