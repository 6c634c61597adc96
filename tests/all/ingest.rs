//! Ingest end to end: real forge payloads signed as each forge signs them, POSTed to control
//! serving in-process, routed by a real `switchboard router` process to todos. Every test runs
//! on SQLite and, when `SWITCHBOARD_TEST_DATABASE_URL` is set, on PostgreSQL.

use std::time::Duration;

use serde_json::json;
use switchboard_control::ingest::RetryOptions;
use switchboard_control::ingest::signature::sign;
use switchboard_control::state::{Capabilities, Limits};
use switchboard_control::store::{Page, SourceType, Todo, TodoFilter, Webhook};
use switchboard_control::{Clock, OwnerScope, Store};

use crate::control_harness::{
    Control, ControlSetup, TestDb, eventually, forge_headers, human, on_every_backend, post,
    router_on, signed, webhook,
};
use crate::support::{RouterProcess, kind_of, payload, payloads};

on_every_backend! {
    real_payloads_of_every_forge_route_to_todos,
    deliveries_arriving_together_share_router_calls,
    a_delivery_decided_in_time_is_stored_with_its_decision_in_one_write,
    a_webhook_changed_by_another_replica_is_read_again_before_a_delivery_is_stored,
    each_forge_is_verified_by_its_own_header,
    a_bad_signature_is_stored_unverified_and_routed,
    malformed_signature_headers_are_never_a_server_error,
    reject_unverified_answers_401_and_stores_nothing,
    a_redelivery_creates_no_second_todo,
    unknown_malformed_and_deleted_ids_answer_one_404,
    ingest_is_rate_limited_per_webhook,
    a_router_stopped_mid_ingest_loses_nothing,
    faults_quarantine_with_trusted_actors_else_go_to_the_default_queue,
    hostile_bodies_and_headers_never_fail_ingest,
    cairn_and_generic_kinds,
}

pub(crate) fn router() -> RouterProcess {
    RouterProcess::spawn(&["--children", "1"])
}

pub(crate) async fn todos(store: &Store, scope: &OwnerScope, queue: &str) -> Vec<Todo> {
    store
        .list_todos(scope, queue, TodoFilter::All, &Page::first(200))
        .await
        .expect("list todos")
        .items
}

pub(crate) async fn events_of(store: &Store, scope: &OwnerScope, webhook_id: &str) -> usize {
    store
        .list_events(scope, webhook_id, &Page::first(200))
        .await
        .expect("list events")
        .items
        .len()
}

/// The decision [`routing_config`] gives a delivery of `event` (the forge's event header).
pub(crate) fn decision_for(event: &str) -> &'static str {
    match event {
        "pull_request" => "queue:review",
        "ping" => "drop",
        _ => "default",
    }
}

/// A human `alice` and a GitHub webhook of hers routed by [`routing_config`].
pub(crate) async fn alices_routed_github_webhook(store: &Store) -> (OwnerScope, Webhook) {
    let scope = human(store, "alice").await;
    let hook = webhook(store, &scope, SourceType::Github, Some(routing_config())).await;
    (scope, hook)
}

pub(crate) fn routing_config() -> serde_json::Value {
    json!({"rules": [
        {"id": "prs", "when": ".event == \"pull_request\"", "action": {"queue": "review"}},
        {"id": "pings", "when": ".event == \"ping\"", "action": {"drop": true}}
    ], "params": {}})
}

/// Deliveries that arrive together share router calls (control/src/routing/coalesce.rs), and
/// each still gets its own decision, event and todo.
pub async fn deliveries_arriving_together_share_router_calls(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let github: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
        .collect();
    let before = control.routers.evaluate_calls();
    let posts = github.iter().enumerate().map(|(n, p)| {
        let headers = signed(
            "github",
            &p.event,
            &format!("together-{n}"),
            &hook.secret,
            &p.body,
        );
        let control = &control;
        let hook = &hook;
        async move { (p, control.deliver(&hook.id, &headers, &p.body).await) }
    });
    let answers = futures::future::join_all(posts).await;
    let mut event_ids = std::collections::BTreeSet::new();
    for (p, resp) in &answers {
        assert_eq!(resp.status, 202, "{}: {resp:?}", p.file);
        let answer = resp.json();
        let want = decision_for(&p.event);
        assert_eq!(answer["decision"], want, "{}", p.file);
        let id = answer["event_id"].as_str().expect("event id").to_string();
        let event = db.store.get_event(&scope, &id).await.expect("stored");
        assert_eq!(event.body, p.body, "{}", p.file);
        assert_eq!(
            event
                .decision
                .as_ref()
                .expect("decision")
                .decision
                .to_string(),
            want
        );
        event_ids.insert(id);
    }
    assert_eq!(event_ids.len(), github.len(), "one event per delivery");
    let calls = control.routers.evaluate_calls() - before;
    assert!(
        calls < github.len() as u64,
        "{calls} router calls for {} deliveries arriving together",
        github.len()
    );
}

/// A delivery its router decides in time is stored once with its decision and todo: one write
/// (issue 22). With `ingest_decide_before_store` at zero it is stored first and its decision
/// recorded after: two writes. The answers, events and todos are the same either way, a
/// redelivery finds its todo both ways, and nothing is left unrouted.
pub async fn a_delivery_decided_in_time_is_stored_with_its_decision_in_one_write(db: TestDb) {
    let router = router();
    let scope = human(&db.store, "alice").await;
    let pr = payload("github", "pull_request.opened.json");
    let ping = payload("github", "ping.json");
    // Time to decide that no loaded machine runs out of, and none at all.
    for (decide_first, writes) in [(Duration::from_secs(5), 1), (Duration::ZERO, 2)] {
        let limits = Limits {
            ingest_deadline: Duration::from_secs(30),
            ingest_decide_before_store: decide_first,
            ..Limits::default()
        };
        let setup = ControlSetup {
            limits,
            ..ControlSetup::default()
        };
        let control = Control::start(&db.store, &[&router.addr], setup).await;
        let hook = webhook(
            &db.store,
            &scope,
            SourceType::Github,
            Some(routing_config()),
        )
        .await;
        let cases = [
            (&pr, "pull_request", "d-1", "queue:review"),
            (&ping, "ping", "d-2", "drop"),
            (&pr, "pull_request", "d-1", "queue:review"),
        ];
        let mut todo_ids = Vec::new();
        for (p, event, delivery, want) in cases {
            let headers = signed("github", event, delivery, &hook.secret, &p.body);
            let before = db.store.group_commit_tally();
            let resp = control.deliver(&hook.id, &headers, &p.body).await;
            assert_eq!(resp.status, 202, "{resp:?}");
            let answer = resp.json();
            assert_eq!(answer["decision"], want, "{answer}");
            let written = db.store.group_commit_tally().writes - before.writes;
            assert_eq!(written, writes, "{decide_first:?}: {answer}");
            let id = answer["event_id"].as_str().expect("event id");
            let stored = db.store.get_event(&scope, id).await.expect("stored");
            assert!(stored.routed, "{answer}");
            assert_eq!(stored.body, p.body);
            assert_eq!(
                stored.decision.expect("decision").decision.to_string(),
                want
            );
            if let Some(todo) = answer["todo_id"].as_str() {
                todo_ids.push((todo.to_string(), answer["redelivery"].clone()));
            }
        }
        assert_eq!(todo_ids.len(), 2, "{todo_ids:?}");
        assert_eq!(
            todo_ids[0].0, todo_ids[1].0,
            "the redelivery found its todo"
        );
        assert_eq!(
            (&todo_ids[0].1, &todo_ids[1].1),
            (&json!(false), &json!(true))
        );
        assert_eq!(events_of(&db.store, &scope, &hook.id).await, 3);
        assert_eq!(db.store.unrouted_count(&hook.id).await.expect("count"), 0);
        control.stop().await;
    }
}

/// Ingest keeps the webhook rows it read (issue 22, `store::webhook_cache`), and a change made
/// through another replica's store is never missed: the next delivery is routed under the new
/// configuration, verified with the new secret, refused under the new switch, and a deleted
/// webhook answers 404. Nothing is stored under the row this control read first.
pub async fn a_webhook_changed_by_another_replica_is_read_again_before_a_delivery_is_stored(
    db: TestDb,
) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let elsewhere = Store::connect(&db.url, &crate::support::secret_key())
        .await
        .expect("another replica's store");
    let pr = payload("github", "pull_request.opened.json");
    let send = |delivery: &'static str, secret: String| {
        let headers = signed("github", "pull_request", delivery, &secret, &pr.body);
        let (control, hook, body) = (&control, &hook, pr.body.clone());
        async move { control.deliver(&hook.id, &headers, &body).await }
    };
    let first = send("d-1", hook.secret.clone()).await.json();
    assert_eq!(first["decision"], "queue:review", "{first}");

    // Pull requests now go to triage.
    let grant = ["forge".to_string(), "review".into(), "triage".into()];
    elsewhere
        .set_webhook_grant(&scope, &hook.id, &grant)
        .await
        .expect("grant elsewhere");
    let mut triage = routing_config();
    triage["rules"][0]["action"] = json!({"queue": "triage"});
    crate::control_harness::save_rules(&elsewhere, &scope, &hook.id, triage).await;
    let second = send("d-2", hook.secret.clone()).await.json();
    assert_eq!(second["decision"], "queue:triage", "{second}");
    let id = second["event_id"].as_str().expect("event id");
    let (_, decided_by) = db
        .store
        .get_event_decided_by(&scope, id)
        .await
        .expect("stored");
    let now = elsewhere.webhook_for_ingest(&hook.id).await.expect("row");
    assert_eq!(decided_by.map(|d| d.version), Some(now.config_version));

    // A new secret, and unverified deliveries refused.
    let rotated = elsewhere
        .rotate_webhook_secret(&scope, &hook.id, None)
        .await
        .expect("rotate elsewhere");
    let verified = send("d-3", rotated.secret.clone()).await.json();
    assert_eq!(verified["verified"], true, "{verified}");
    let unverified = send("d-4", hook.secret.clone()).await.json();
    assert_eq!(unverified["verified"], false, "{unverified}");
    elsewhere
        .set_reject_unverified(&scope, &hook.id, true)
        .await
        .expect("reject elsewhere");
    let refused = send("d-5", hook.secret.clone()).await;
    assert_eq!(refused.status, 401, "{refused:?}");
    let taken = send("d-6", rotated.secret.clone()).await;
    assert_eq!(taken.status, 202, "{taken:?}");
    assert_eq!(
        events_of(&db.store, &scope, &hook.id).await,
        5,
        "d-5 stored nothing"
    );
    // Rotated again while this control's copy refuses unverified deliveries: a delivery signed
    // with the newest secret is taken, not refused on the copy's word.
    let newest = elsewhere
        .rotate_webhook_secret(&scope, &hook.id, None)
        .await
        .expect("rotate again elsewhere");
    let taken = send("d-7", newest.secret.clone()).await;
    assert_eq!(taken.status, 202, "{taken:?}");
    assert_eq!(taken.json()["verified"], true);

    elsewhere
        .delete_webhook(&scope, &hook.id)
        .await
        .expect("delete elsewhere");
    let gone = send("d-8", newest.secret.clone()).await;
    assert_eq!(gone.status, 404, "{gone:?}");
    elsewhere.close().await;
    control.stop().await;
}

pub async fn real_payloads_of_every_forge_route_to_todos(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let mut expected = std::collections::BTreeMap::<String, usize>::new();
    let all = payloads();
    for forge in ["github", "gitea", "forgejo"] {
        let source: SourceType = forge.parse().expect("source");
        let hook = webhook(&db.store, &scope, source, Some(routing_config())).await;
        for (n, p) in all.iter().filter(|p| p.forge == forge).enumerate() {
            let delivery = format!("{forge}-{n}");
            let headers = signed(forge, &p.event, &delivery, &hook.secret, &p.body);
            let resp = control.deliver(&hook.id, &headers, &p.body).await;
            assert_eq!(resp.status, 202, "{}/{}: {:?}", forge, p.file, resp);
            let answer = resp.json();
            let want = decision_for(&p.event);
            assert_eq!(answer["decision"], want, "{}/{}", forge, p.file);
            assert_eq!(answer["verified"], true, "{}/{}", forge, p.file);
            assert_eq!(
                answer["kind"],
                kind_of(&p.event, &p.body),
                "{}/{}",
                forge,
                p.file
            );
            assert_eq!(answer["delivery_id"], delivery.as_str());
            let queue = match want {
                "queue:review" => Some("review"),
                "default" => Some("forge"),
                _ => None,
            };
            if let Some(q) = queue {
                *expected.entry(q.to_string()).or_default() += 1;
                assert!(answer["todo_id"].is_string(), "{}/{}", forge, p.file);
            } else {
                assert!(answer.get("todo_id").is_none());
            }

            // Stored exactly as received, with the decision recorded on it.
            let id = answer["event_id"].as_str().expect("event id");
            let event = db.store.get_event(&scope, id).await.expect("stored");
            assert_eq!(event.body, p.body, "{}/{}", forge, p.file);
            assert!(event.verified && event.routed);
            assert_eq!(
                event
                    .decision
                    .as_ref()
                    .expect("decision")
                    .decision
                    .to_string(),
                want
            );
            for (name, value) in &headers {
                let lower = name.to_ascii_lowercase();
                assert!(
                    event.headers.iter().any(|(n, v)| *n == lower && v == value),
                    "header {name} kept"
                );
            }
        }
    }
    assert!(
        expected["review"] > 10 && expected["forge"] > 20,
        "{expected:?}"
    );
    for (queue, count) in &expected {
        let found = todos(&db.store, &scope, queue).await;
        assert_eq!(found.len(), *count, "todos in {queue}");
        if queue == "review" {
            assert!(found.iter().all(|t| t.rule_id.as_deref() == Some("prs")));
        }
    }
    control.stop().await;
}

pub async fn each_forge_is_verified_by_its_own_header(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let cases = [
        (
            "github",
            "pull_request.opened.json",
            "X-Hub-Signature-256",
            true,
        ),
        (
            "gitea",
            "pull_request.opened.json",
            "X-Gitea-Signature",
            false,
        ),
        (
            "gitea",
            "pull_request.opened.json",
            "X-Hub-Signature-256",
            true,
        ),
        (
            "forgejo",
            "pull_request.reopened.json",
            "X-Forgejo-Signature",
            false,
        ),
        (
            "forgejo",
            "pull_request.reopened.json",
            "X-Hub-Signature-256",
            true,
        ),
    ];
    for (n, (forge, file, header, prefixed)) in cases.into_iter().enumerate() {
        let hook = webhook(&db.store, &scope, forge.parse().unwrap(), None).await;
        let p = payload(forge, file);
        let digest = sign(&hook.secret, &p.body);
        let value = if prefixed {
            format!("sha256={digest}")
        } else {
            digest
        };
        // Only that one signature header, beside the forge's event and delivery headers.
        let mut headers: Vec<(String, String)> =
            forge_headers(forge, &p.event, &format!("d-{n}"), "")
                .into_iter()
                .filter(|(name, _)| !name.to_ascii_lowercase().contains("signature"))
                .collect();
        headers.push((header.to_string(), value));
        let resp = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(resp.status, 202, "{forge} {header}");
        assert_eq!(resp.json()["verified"], true, "{forge} {header}");
    }
    // Gitea's SHA-256 header is not GitHub's: a GitHub webhook reads only X-Hub-Signature-256.
    let hook = webhook(&db.store, &scope, SourceType::Github, None).await;
    let p = payload("github", "issues.opened.json");
    let headers = vec![
        ("X-GitHub-Event".to_string(), "issues".to_string()),
        ("X-Gitea-Signature".to_string(), sign(&hook.secret, &p.body)),
    ];
    let resp = control.deliver(&hook.id, &headers, &p.body).await;
    assert_eq!(resp.json()["verified"], false);
    control.stop().await;
}

pub async fn a_bad_signature_is_stored_unverified_and_routed(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    for forge in ["github", "gitea", "forgejo"] {
        let hook = webhook(
            &db.store,
            &scope,
            forge.parse().unwrap(),
            Some(routing_config()),
        )
        .await;
        let p = payloads()
            .into_iter()
            .find(|p| p.forge == forge && p.event == "pull_request")
            .expect("a pull_request payload");
        // Signed with another secret, as a sender who does not know this webhook's would.
        let headers = signed(
            forge,
            &p.event,
            "bad-1",
            "not the webhook's secret",
            &p.body,
        );
        let resp = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(resp.status, 202);
        let answer = resp.json();
        assert_eq!(answer["verified"], false);
        assert_eq!(
            answer["decision"], "queue:review",
            "rules decide what unverified gets"
        );
        let event = db
            .store
            .get_event(&scope, answer["event_id"].as_str().unwrap())
            .await
            .expect("stored");
        assert!(!event.verified && event.routed);
        assert_eq!(event.body, p.body);
    }
    // Rules can tell: a rule on `.verified` drops what is not verified.
    let hook = webhook(
        &db.store,
        &scope,
        SourceType::Github,
        Some(json!({"rules": [{"id": "unverified", "when": ".verified | not", "action": {"drop": true}}]})),
    )
    .await;
    let p = payload("github", "issues.opened.json");
    let resp = control
        .deliver(
            &hook.id,
            &signed("github", "issues", "x", "wrong secret", &p.body),
            &p.body,
        )
        .await;
    assert_eq!(resp.json()["decision"], "drop");
    let resp = control
        .deliver(
            &hook.id,
            &signed("github", "issues", "y", &hook.secret, &p.body),
            &p.body,
        )
        .await;
    assert_eq!(resp.json()["decision"], "default");
    control.stop().await;
}

pub async fn malformed_signature_headers_are_never_a_server_error(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let p = payload("gitea", "issues.opened.json");
    let good = |secret: &str| sign(secret, &p.body);
    let long = "a".repeat(8000);
    for forge in ["github", "gitea", "forgejo"] {
        let hook = webhook(&db.store, &scope, forge.parse().unwrap(), None).await;
        let right = good(&hook.secret);
        let values: Vec<String> = vec![
            String::new(),
            "sha256=".into(),
            "sha256=abc".into(),
            format!("sha256={}", &right[..63]),
            format!("sha256={}", &right[..62]),
            format!("sha256={right}ff"),
            format!("sha256={}zz", &right[..62]),
            format!("sha1={right}"),
            format!("SHA256={right}"),
            format!("md5 {right}"),
            "zz".repeat(32),
            right[..40].to_string(),
            long.clone(),
        ];
        for (n, value) in values.iter().enumerate() {
            let mut headers: Vec<(String, String)> =
                forge_headers(forge, "issues", &format!("m-{n}"), "")
                    .into_iter()
                    .filter(|(name, _)| !name.to_ascii_lowercase().contains("signature"))
                    .collect();
            for name in [
                "X-Hub-Signature-256",
                "X-Gitea-Signature",
                "X-Forgejo-Signature",
            ] {
                headers.push((name.to_string(), value.clone()));
            }
            let resp = control.deliver(&hook.id, &headers, &p.body).await;
            assert_eq!(resp.status, 202, "{forge} {value:?}: {resp:?}");
            assert_eq!(resp.json()["verified"], false, "{forge} {value:?}");
        }
        // No signature header at all.
        let headers = vec![("X-GitHub-Event".to_string(), "issues".to_string())];
        let resp = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(resp.status, 202);
        assert_eq!(resp.json()["verified"], false);
        assert_eq!(
            events_of(&db.store, &scope, &hook.id).await,
            values.len() + 1
        );
    }
    control.stop().await;
}

pub async fn reject_unverified_answers_401_and_stores_nothing(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let hook = webhook(&db.store, &scope, SourceType::Github, None).await;
    db.store
        .set_reject_unverified(&scope, &hook.id, true)
        .await
        .expect("switch on");
    let p = payload("github", "pull_request.opened.json");
    for headers in [
        signed("github", "pull_request", "r-1", "wrong secret", &p.body),
        forge_headers("github", "pull_request", "r-2", ""),
        vec![("X-GitHub-Event".to_string(), "pull_request".to_string())],
    ] {
        let resp = control.deliver(&hook.id, &headers, &p.body).await;
        assert_eq!(resp.status, 401, "{resp:?}");
        assert_eq!(resp.json()["error"], "unauthenticated");
    }
    assert_eq!(
        events_of(&db.store, &scope, &hook.id).await,
        0,
        "nothing stored"
    );
    assert!(todos(&db.store, &scope, "forge").await.is_empty());

    let headers = signed("github", "pull_request", "r-3", &hook.secret, &p.body);
    let resp = control.deliver(&hook.id, &headers, &p.body).await;
    assert_eq!(resp.status, 202);
    assert_eq!(resp.json()["verified"], true);
    assert_eq!(events_of(&db.store, &scope, &hook.id).await, 1);
    control.stop().await;
}

pub async fn a_redelivery_creates_no_second_todo(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let hook = webhook(&db.store, &scope, SourceType::Gitea, Some(routing_config())).await;
    let p = payload("gitea", "pull_request.opened.json");
    let headers = signed(
        "gitea",
        "pull_request",
        "f2e1-redelivered",
        &hook.secret,
        &p.body,
    );
    let first = control.deliver(&hook.id, &headers, &p.body).await.json();
    let second = control.deliver(&hook.id, &headers, &p.body).await.json();
    assert_eq!(first["decision"], "queue:review");
    assert_eq!(second["decision"], "queue:review");
    assert_ne!(
        first["event_id"], second["event_id"],
        "each delivery is a stored fact"
    );
    assert_eq!(
        first["todo_id"], second["todo_id"],
        "the once-key found the first todo"
    );
    assert_eq!(first["redelivery"], false);
    assert_eq!(second["redelivery"], true);
    assert_eq!(todos(&db.store, &scope, "review").await.len(), 1);
    assert_eq!(events_of(&db.store, &scope, &hook.id).await, 2);

    // Concurrent redeliveries too: one todo.
    let headers = signed("gitea", "pull_request", "f2e1-burst", &hook.secret, &p.body);
    let sends = (0..8).map(|_| control.deliver(&hook.id, &headers, &p.body));
    let answers = futures::future::join_all(sends).await;
    assert!(answers.iter().all(|a| a.status == 202));
    let ids: std::collections::BTreeSet<String> = answers
        .iter()
        .map(|a| a.json()["todo_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(todos(&db.store, &scope, "review").await.len(), 2);
    control.stop().await;
}

pub async fn unknown_malformed_and_deleted_ids_answer_one_404(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let alice = human(&db.store, "alice").await;
    let bob = human(&db.store, "bob").await;
    let live = webhook(&db.store, &alice, SourceType::Github, None).await;
    let deleted = webhook(&db.store, &bob, SourceType::Github, None).await;
    db.store
        .delete_webhook(&bob, &deleted.id)
        .await
        .expect("delete");
    let p = payload("github", "issues.opened.json");
    // An event id: another kind of resource's id, of another owner.
    let other = control
        .deliver(
            &live.id,
            &signed("github", "issues", "e", &live.secret, &p.body),
            &p.body,
        )
        .await
        .json();
    let event_id = other["event_id"].as_str().unwrap().to_string();

    let long = "a".repeat(5000);
    let paths = [
        format!("/hooks/wh_{}", "0".repeat(32)),
        format!("/hooks/{}", deleted.id),
        format!("/hooks/{event_id}"),
        format!("/hooks/{}", live.id.to_uppercase()),
        format!("/hooks/{} ", live.id).replace(' ', "%20"),
        "/hooks/nope".to_string(),
        "/hooks/wh_".to_string(),
        "/hooks/%ff%fe".to_string(),
        "/hooks/%00".to_string(),
        format!("/hooks/{long}"),
        "/hooks/".to_string(),
        "/hooks".to_string(),
        format!("/hooks/{}/extra", live.id),
        "/elsewhere".to_string(),
    ];
    let mut bodies = std::collections::BTreeSet::new();
    for path in &paths {
        let headers = signed("github", "issues", "x", &live.secret, &p.body);
        let resp = post(control.http, path, &headers, &p.body).await;
        assert_eq!(resp.status, 404, "{path}: {resp:?}");
        bodies.insert(resp.body.clone());
    }
    assert_eq!(bodies.len(), 1, "one 404 body for every case");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(bodies.first().unwrap()).unwrap(),
        json!({"error": "not_found", "message": "webhook not found"})
    );
    assert_eq!(events_of(&db.store, &alice, &live.id).await, 1);
    control.stop().await;
}

pub async fn ingest_is_rate_limited_per_webhook(db: TestDb) {
    let router = router();
    // A clock that stands still, so the minute window cannot turn during the test.
    let store = db
        .store
        .clone()
        .with_clock(Clock::manual(1_800_000_000_000));
    let setup = ControlSetup {
        limits: Limits {
            ingest_per_webhook_per_minute: 3,
            // No backlog: a signed delivery over the rate is refused, not deferred
            // (tests/all/forge_safe.rs has the deferral).
            ingest_backlog_per_webhook: 0,
            ..Limits::default()
        },
        ..ControlSetup::default()
    };
    let control = Control::start(&store, &[&router.addr], setup).await;
    let scope = human(&store, "alice").await;
    let busy = webhook(&store, &scope, SourceType::Github, None).await;
    let quiet = webhook(&store, &scope, SourceType::Github, None).await;
    let p = payload("github", "push.json");
    for n in 0..3 {
        let headers = signed("github", "push", &format!("p-{n}"), &busy.secret, &p.body);
        assert_eq!(
            control.deliver(&busy.id, &headers, &p.body).await.status,
            202
        );
    }
    let headers = signed("github", "push", "p-3", &busy.secret, &p.body);
    let resp = control.deliver(&busy.id, &headers, &p.body).await;
    assert_eq!(resp.status, 429);
    assert_eq!(resp.json()["error"], "rate_limited");
    let retry: u64 = resp
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(
        events_of(&store, &scope, &busy.id).await,
        3,
        "a refused delivery is not stored"
    );

    // Another webhook has its own budget.
    let headers = signed("github", "push", "q-1", &quiet.secret, &p.body);
    assert_eq!(
        control.deliver(&quiet.id, &headers, &p.body).await.status,
        202
    );

    // The next window takes deliveries again.
    store.clock().advance(Duration::from_secs(retry));
    let headers = signed("github", "push", "p-4", &busy.secret, &p.body);
    assert_eq!(
        control.deliver(&busy.id, &headers, &p.body).await.status,
        202
    );
    control.stop().await;
}

pub async fn a_router_stopped_mid_ingest_loses_nothing(db: TestDb) {
    let mut first = router();
    let addr = first.addr.clone();
    let setup = ControlSetup {
        retry: Some(RetryOptions {
            interval: Duration::from_millis(100),
            min_age: Duration::ZERO,
            batch: 100,
        }),
        ..ControlSetup::default()
    };
    let control = Control::start(&db.store, &[&addr], setup).await;
    let (scope, hook) = alices_routed_github_webhook(&db.store).await;
    let prs: Vec<_> = payloads()
        .into_iter()
        .filter(|p| p.forge == "github" && p.event == "pull_request")
        .collect();
    let deliver = |n: usize| {
        let p = &prs[n % prs.len()];
        let headers = signed(
            "github",
            "pull_request",
            &format!("mid-{n}"),
            &hook.secret,
            &p.body,
        );
        let body = p.body.clone();
        let control = &control;
        let id = hook.id.clone();
        async move { control.deliver(&id, &headers, &body).await }
    };

    let resp = deliver(0).await;
    assert_eq!(resp.json()["decision"], "queue:review");

    // The router is killed while deliveries are in flight: every one is still taken.
    let burst = futures::future::join_all((1..=12).map(deliver));
    let kill = async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let _ = first.child.kill();
        let _ = first.child.wait();
    };
    let (answers, ()) = tokio::join!(burst, kill);
    for a in &answers {
        assert_eq!(a.status, 202, "{a:?}");
        let d = a.json()["decision"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(d == "queue:review" || d == "unrouted", "{d}");
    }
    // With no router at all: stored, unrouted, answered.
    for n in 13..=16 {
        let resp = deliver(n).await;
        assert_eq!(resp.status, 202);
        assert_eq!(resp.json()["decision"], "unrouted");
    }
    let unrouted = db.store.unrouted_events(100).await.expect("unrouted");
    assert!(unrouted.len() >= 4, "{}", unrouted.len());

    // A router comes back where it was; the retry task routes the backlog.
    let _second = router_on(&addr);
    eventually(Duration::from_secs(30), "the backlog routed", || async {
        db.store
            .unrouted_events(100)
            .await
            .map(|e| e.is_empty())
            .unwrap_or(false)
    })
    .await;
    let all = todos(&db.store, &scope, "review").await;
    assert_eq!(
        all.len(),
        17,
        "one todo per delivery, none lost, none doubled"
    );
    assert_eq!(events_of(&db.store, &scope, &hook.id).await, 17);
    control.stop().await;
}

pub async fn faults_quarantine_with_trusted_actors_else_go_to_the_default_queue(db: TestDb) {
    let router = router();
    let scope = human(&db.store, "alice").await;
    // `.payload.action` is a string, not a boolean: the rule faults on every pull request.
    let faulty = json!({"rules": [
        {"id": "faulty", "when": ".payload.action", "action": {"queue": "review"}}
    ]});
    let p = payload("github", "pull_request.opened.json");

    let fail_closed = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let hook = webhook(&db.store, &scope, SourceType::Github, Some(faulty.clone())).await;
    let headers = signed("github", "pull_request", "f-1", &hook.secret, &p.body);
    let answer = fail_closed
        .deliver(&hook.id, &headers, &p.body)
        .await
        .json();
    assert_eq!(answer["decision"], "fault");
    assert!(answer.get("todo_id").is_none(), "quarantined: no todo");
    let event = db
        .store
        .get_event(&scope, answer["event_id"].as_str().unwrap())
        .await
        .unwrap();
    let fault = event.fault.expect("marked faulted");
    assert_eq!(fault.rule_id.as_deref(), Some("faulty"));
    assert_eq!(
        fault.disposition,
        Some(switchboard_model::Disposition::Quarantine)
    );
    assert_eq!(event.decision.expect("decided").decision, "fault");
    fail_closed.stop().await;

    let setup = ControlSetup {
        capabilities: Capabilities {
            trusted_actors: false,
        },
        ..ControlSetup::default()
    };
    let open = Control::start(&db.store, &[&router.addr], setup).await;
    let hook = webhook(&db.store, &scope, SourceType::Github, Some(faulty)).await;
    let headers = signed("github", "pull_request", "f-2", &hook.secret, &p.body);
    let answer = open.deliver(&hook.id, &headers, &p.body).await.json();
    assert_eq!(answer["decision"], "fault");
    let todo_id = answer["todo_id"]
        .as_str()
        .expect("a todo on the default queue");
    let todo = db.store.get_todo(&scope, todo_id).await.unwrap();
    assert_eq!(todo.queue, "forge");
    let event = db
        .store
        .get_event(&scope, answer["event_id"].as_str().unwrap())
        .await
        .unwrap();
    assert_eq!(
        event.fault.expect("marked faulted").disposition,
        Some(switchboard_model::Disposition::Default)
    );
    open.stop().await;
}

pub async fn hostile_bodies_and_headers_never_fail_ingest(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let hook = webhook(&db.store, &scope, SourceType::Github, None).await;
    let deep = format!(
        r#"{{"action":"opened","x":{}{}}}"#,
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"not json at all".to_vec(),
        b"payload=%7B%22action%22%3A%22opened%22%7D".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x01],
        deep.into_bytes(),
        br#"{"action":{"nested":"object"}}"#.to_vec(),
        br#"{"action":"a.b.c"}"#.to_vec(),
        br#"[{"action":"opened"}]"#.to_vec(),
    ];
    for (n, body) in bodies.iter().enumerate() {
        let headers = signed("github", "issues", &format!("h-{n}"), &hook.secret, body);
        let resp = control.deliver(&hook.id, &headers, body).await;
        assert_eq!(resp.status, 202, "body {n}: {resp:?}");
        let answer = resp.json();
        let want = if n == 6 { "issues.a_b_c" } else { "issues" };
        assert_eq!(answer["kind"], want, "body {n}");
        assert_eq!(answer["verified"], true);
    }
    // Odd headers: a hostile event name, a delivery id that is not printable, bytes that are
    // not UTF-8; all stored, none a failure.
    let body = br#"{"action":"opened"}"#;
    let mut head = format!(
        "POST /hooks/{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\
         X-GitHub-Event: ../../etc/passwd\r\nX-GitHub-Delivery: has spaces in it\r\n\
         X-Hub-Signature-256: sha256={}\r\n",
        hook.id,
        body.len(),
        sign(&hook.secret, body)
    )
    .into_bytes();
    head.extend_from_slice(b"X-Odd: caf\xe9\r\n\r\n");
    let resp = crate::control_harness::http_raw(control.http, head, body.to_vec()).await;
    assert_eq!(resp.status, 202, "{resp:?}");
    let answer = resp.json();
    assert_eq!(answer["kind"], "______etc_passwd.opened");
    assert!(answer["delivery_id"].as_str().unwrap().starts_with("sb-"));
    let event = db
        .store
        .get_event(&scope, answer["event_id"].as_str().unwrap())
        .await
        .unwrap();
    assert!(
        event
            .headers
            .iter()
            .any(|(n, v)| n == "x-odd" && v == "caf\u{e9}")
    );
    control.stop().await;
}

pub async fn cairn_and_generic_kinds(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let cairn = webhook(&db.store, &scope, SourceType::Cairn, None).await;
    let generic = webhook(&db.store, &scope, SourceType::Generic, None).await;
    let handoff = br#"{"handoff":{"id":"h-1","from":"planner","to":"reviewer","repo":"acme/api","title":"Review the retry change"},"actor":{"login":"cairn-agent","kind":"agent"}}"#;
    let headers = vec![
        (
            "X-Hub-Signature-256".to_string(),
            format!("sha256={}", sign(&cairn.secret, handoff)),
        ),
        ("X-Switchboard-Delivery".to_string(), "h-1".to_string()),
    ];
    let answer = control.deliver(&cairn.id, &headers, handoff).await.json();
    assert_eq!(answer["kind"], "handoff");
    assert_eq!(answer["delivery_id"], "h-1");
    assert_eq!(answer["verified"], true);
    assert_eq!(answer["decision"], "default");

    let body = br#"{"action":"finished","status":"ok"}"#;
    let headers = vec![
        (
            "X-Hub-Signature-256".to_string(),
            format!("sha256={}", sign(&generic.secret, body)),
        ),
        ("X-Switchboard-Event".to_string(), "deploy".to_string()),
    ];
    let answer = control.deliver(&generic.id, &headers, body).await.json();
    assert_eq!(answer["kind"], "deploy.finished");
    assert_eq!(answer["verified"], true);
    let answer = control.deliver(&generic.id, &[], body).await.json();
    assert_eq!(answer["kind"], "unknown.finished");
    assert_eq!(answer["verified"], false);
    control.stop().await;
}
