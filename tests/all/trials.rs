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

use crate::control_harness::{
    Control, ControlSetup, TestDb, eventually, human, on_every_backend, save_rules, signed, webhook,
};
use crate::ingest::{router, routing_config};
use crate::support::payloads;

on_every_backend! {
    a_trial_counts_what_its_candidate_decides_on_live_deliveries_and_writes_nothing,
}

async fn todos_everywhere(store: &Store, scope: &switchboard_control::OwnerScope) -> usize {
    let mut n = 0;
    for queue in crate::control_harness::grant() {
        n += store
            .list_todos(scope, &queue, TodoFilter::All, &Page::first(200))
            .await
            .expect("todos")
            .items
            .len();
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
    let trial = db
        .store
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
            },
            1,
        )
        .await
        .expect("a trial starts");

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
