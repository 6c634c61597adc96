//! Form-encoded deliveries end to end (issue 16): each forge's real payloads sent as
//! `application/x-www-form-urlencoded` (`payload=<JSON>`), signed as that forge signs forms,
//! are verified, classified, routed by a real router process and queued exactly as their JSON
//! twins; the stored event keeps the form body as received. Gitea's GET deliveries get one
//! documented 405. Every test runs on SQLite and, with `SWITCHBOARD_TEST_DATABASE_URL`, on
//! PostgreSQL.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::ingest::RetryOptions;
use switchboard_control::store::{SourceType, Webhook};
use switchboard_control::{OwnerScope, Store};

use crate::control_harness::{
    Control, ControlSetup, HttpResponse, TestDb, http_raw, human, on_every_backend, post, signed,
    webhook,
};
use crate::ingest::{decision_for, events_of, router, routing_config, todos};
use crate::support::{Payload, kind_of, payload, payloads};
use switchboard_testkit::forge_headers::form_body;

on_every_backend! {
    form_deliveries_are_routed_as_their_json_twins,
    a_gitea_form_signed_over_the_form_body_is_unverified,
    a_stored_form_delivery_routes_later_as_it_would_live,
    odd_form_bodies_are_stored_as_received_and_never_fail,
    get_deliveries_answer_one_405_for_every_id,
}

const FORM: &str = "application/x-www-form-urlencoded";
const FORM_UTF8: &str = "application/x-www-form-urlencoded; charset=utf-8";

/// `headers` with their `Content-Type` replaced by `content_type`.
fn with_content_type(headers: Vec<(String, String)>, content_type: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = headers
        .into_iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("content-type"))
        .collect();
    out.push(("Content-Type".to_string(), content_type.to_string()));
    out
}

/// The JSON twin of `p`: its body, signed over it, as `forge_headers` sends it.
fn json_twin(p: &Payload, delivery_id: &str, secret: &str) -> (Vec<(String, String)>, Vec<u8>) {
    let headers = signed(p.forge, &p.event, delivery_id, secret, &p.body);
    (headers, p.body.clone())
}

/// The form twin of `p`: `payload=<JSON>`, signed as `p.forge` signs form deliveries (GitHub
/// over the form body as delivered; Gitea and Forgejo over the JSON inside it).
fn form_twin(
    p: &Payload,
    delivery_id: &str,
    secret: &str,
    content_type: &str,
) -> (Vec<(String, String)>, Vec<u8>) {
    let body = form_body(&p.body);
    let signed_over = if p.forge == "github" { &body } else { &p.body };
    let headers = signed(p.forge, &p.event, delivery_id, secret, signed_over);
    (with_content_type(headers, content_type), body)
}

/// [`routing_config`] and rules that read `.payload`, so a payload not seen as its JSON
/// (a form body as text) decides differently or faults.
fn payload_config() -> Value {
    let mut config = routing_config();
    let rules = config["rules"].as_array_mut().expect("rules");
    rules[0]["when"] = json!(".event == \"pull_request\" and .payload.action == .action");
    rules.push(json!({
        "id": "actionless",
        "when": "(.payload | type) == \"object\" and (.payload | has(\"action\") | not)",
        "action": {"queue": "triage"}
    }));
    config
}

/// The decision [`payload_config`] gives the JSON `body` of `event`.
fn expected_decision(event: &str, body: &[u8]) -> &'static str {
    let has_action = serde_json::from_slice::<Value>(body)
        .ok()
        .is_some_and(|v| v.get("action").is_some());
    match decision_for(event) {
        "default" if !has_action => "queue:triage",
        decision => decision,
    }
}

/// What one delivery came to: its answer, the stored event's body and headers, and the
/// queue of its todo if it made one.
struct Outcome {
    verified: Value,
    kind: Value,
    decision: Value,
    queue: Option<String>,
    stored_body: Vec<u8>,
    stored_headers: Vec<(String, String)>,
}

async fn outcome(store: &Store, scope: &OwnerScope, resp: &HttpResponse, what: &str) -> Outcome {
    assert_eq!(resp.status, 202, "{what}: {resp:?}");
    let answer = resp.json();
    let event_id = answer["event_id"].as_str().expect("event id");
    let event = store.get_event(scope, event_id).await.expect("stored");
    assert!(event.routed, "{what}");
    assert_eq!(
        event
            .decision
            .as_ref()
            .expect("decision")
            .decision
            .to_string(),
        answer["decision"],
        "{what}"
    );
    let queue = match answer["todo_id"].as_str() {
        Some(id) => Some(store.get_todo(scope, id).await.expect("todo").queue),
        None => None,
    };
    Outcome {
        verified: answer["verified"].clone(),
        kind: answer["kind"].clone(),
        decision: answer["decision"].clone(),
        queue,
        stored_body: event.body.to_vec(),
        stored_headers: event.headers,
    }
}

/// Every real payload of every forge, delivered as JSON and as a form with distinct delivery
/// ids: the same `verified`, kind, decision and todo queue; the form stored as sent.
pub async fn form_deliveries_are_routed_as_their_json_twins(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let all = payloads();
    let mut queued = std::collections::BTreeMap::<String, usize>::new();
    for forge in ["github", "gitea", "forgejo"] {
        let source: SourceType = forge.parse().expect("source");
        let hook = webhook(&db.store, &scope, source, Some(payload_config())).await;
        let mine: Vec<&Payload> = all.iter().filter(|p| p.forge == forge).collect();
        assert!(mine.len() >= 8, "{forge}: {} payloads", mine.len());
        for (n, p) in mine.into_iter().enumerate() {
            let what = format!("{forge}/{}", p.file);
            let content_type = if n % 2 == 0 { FORM } else { FORM_UTF8 };
            let (json_headers, json_body) =
                json_twin(p, &format!("{forge}-json-{n}"), &hook.secret);
            let (form_headers, form_body) =
                form_twin(p, &format!("{forge}-form-{n}"), &hook.secret, content_type);
            let resp = control.deliver(&hook.id, &json_headers, &json_body).await;
            let json = outcome(&db.store, &scope, &resp, &what).await;
            let resp = control.deliver(&hook.id, &form_headers, &form_body).await;
            let form = outcome(&db.store, &scope, &resp, &what).await;

            assert_eq!(json.verified, true, "{what}");
            assert_eq!(json.kind, kind_of(&p.event, &p.body), "{what}");
            assert_eq!(
                json.decision,
                expected_decision(&p.event, &p.body),
                "{what}"
            );
            assert_eq!(form.verified, json.verified, "{what}");
            assert_eq!(form.kind, json.kind, "{what}");
            assert_eq!(form.decision, json.decision, "{what}");
            assert_eq!(form.queue, json.queue, "{what}");
            if let Some(q) = &form.queue {
                *queued.entry(q.clone()).or_default() += 1;
            }

            // Stored as received: the form body byte for byte, its Content-Type kept.
            assert_eq!(json.stored_body, p.body, "{what}");
            assert_eq!(form.stored_body, form_body, "{what}");
            assert!(
                form.stored_headers
                    .iter()
                    .any(|(n, v)| n == "content-type" && v == content_type),
                "{what}: {:?}",
                form.stored_headers
            );
        }
    }
    // Every rule had its turn, the ones on `.payload` included.
    assert!(
        queued.get("review").copied().unwrap_or(0) > 10
            && queued.get("triage").copied().unwrap_or(0) >= 3
            && queued.get("forge").copied().unwrap_or(0) > 10,
        "{queued:?}"
    );
    for (queue, count) in &queued {
        assert_eq!(
            todos(&db.store, &scope, queue).await.len(),
            count * 2,
            "todos in {queue}: one per twin"
        );
    }
    control.stop().await;
}

/// Gitea and Forgejo sign a form's JSON, not its body: a form signed over the body (the wrong
/// thing) is unverified, in every header they sign with. GitHub signs the body: a GitHub form
/// signed over the JSON is unverified.
pub async fn a_gitea_form_signed_over_the_form_body_is_unverified(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    for (forge, file) in [
        ("gitea", "issues.opened.json"),
        ("gitea", "pull_request.opened.json"),
        ("forgejo", "pull_request.reopened.json"),
        ("github", "issues.opened.json"),
    ] {
        let hook = webhook(
            &db.store,
            &scope,
            forge.parse().expect("source"),
            Some(payload_config()),
        )
        .await;
        let p = payload(forge, file);
        let body = form_body(&p.body);
        let wrong: &[u8] = if forge == "github" { &p.body } else { &body };
        let headers = with_content_type(
            signed(
                forge,
                &p.event,
                &format!("{forge}-wrong"),
                &hook.secret,
                wrong,
            ),
            FORM,
        );
        let resp = control.deliver(&hook.id, &headers, &body).await;
        let wrongly = outcome(&db.store, &scope, &resp, file).await;
        assert_eq!(wrongly.verified, false, "{forge}/{file}");
        // Unverified, yet still read as its JSON: the kind and the rules see the payload.
        assert_eq!(wrongly.kind, kind_of(&p.event, &p.body), "{forge}/{file}");
        assert_eq!(
            wrongly.decision,
            expected_decision(&p.event, &p.body),
            "{forge}/{file}"
        );

        let (headers, body) = form_twin(&p, &format!("{forge}-right"), &hook.secret, FORM);
        let resp = control.deliver(&hook.id, &headers, &body).await;
        let rightly = outcome(&db.store, &scope, &resp, file).await;
        assert_eq!(rightly.verified, true, "{forge}/{file}");
    }
    control.stop().await;
}

/// Stored while no router answers, routed later from the stored event: the form twin gets
/// the decision its JSON twin gets, and the one it would have got live.
pub async fn a_stored_form_delivery_routes_later_as_it_would_live(db: TestDb) {
    let scope = human(&db.store, "alice").await;
    let mut hooks = Vec::new();
    for forge in ["github", "gitea", "forgejo"] {
        let source: SourceType = forge.parse().expect("source");
        hooks.push(webhook(&db.store, &scope, source, Some(payload_config())).await);
    }
    let cases: Vec<(&Webhook, Payload)> = [
        (0, "github", "pull_request.opened.json"),
        (0, "github", "push.json"),
        (1, "gitea", "issues.opened.json"),
        (1, "gitea", "create.json"),
        (2, "forgejo", "pull_request.reopened.json"),
        (2, "forgejo", "push.json"),
    ]
    .into_iter()
    .map(|(i, forge, file)| (&hooks[i], payload(forge, file)))
    .collect();

    // No router at all: every delivery is stored, unrouted.
    let dark = Control::start(&db.store, &["127.0.0.1:1"], ControlSetup::default()).await;
    let mut stored = Vec::new();
    for (n, (hook, p)) in cases.iter().enumerate() {
        for (twin, (headers, body)) in [
            (
                "json",
                json_twin(p, &format!("later-json-{n}"), &hook.secret),
            ),
            (
                "form",
                form_twin(p, &format!("later-form-{n}"), &hook.secret, FORM_UTF8),
            ),
        ] {
            let resp = dark.deliver(&hook.id, &headers, &body).await;
            assert_eq!(resp.status, 202, "{}: {resp:?}", p.file);
            let answer = resp.json();
            assert_eq!(answer["decision"], "unrouted", "{}", p.file);
            assert_eq!(answer["verified"], true, "{twin} {}", p.file);
            assert_eq!(
                answer["kind"],
                kind_of(&p.event, &p.body),
                "{twin} {}",
                p.file
            );
            let id = answer["event_id"].as_str().expect("event id").to_string();
            stored.push((twin, p, id));
        }
    }
    dark.stop().await;

    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let options = RetryOptions {
        interval: Duration::from_millis(100),
        min_age: Duration::ZERO,
        batch: 100,
    };
    let n = switchboard_control::ingest::route_unrouted(&control.state(), &options)
        .await
        .expect("a retry pass");
    assert_eq!(n, stored.len());
    for (twin, p, id) in &stored {
        let event = db.store.get_event(&scope, id).await.expect("stored");
        assert!(event.routed, "{twin} {}", p.file);
        assert_eq!(
            event
                .decision
                .as_ref()
                .expect("decision")
                .decision
                .to_string(),
            expected_decision(&p.event, &p.body),
            "{twin} {}",
            p.file
        );
    }
    control.stop().await;
}

/// Form bodies that carry no usable JSON are stored byte for byte and routed as text, never
/// a failure: no `payload` field, bytes that are not UTF-8, broken escapes, an empty body.
pub async fn odd_form_bodies_are_stored_as_received_and_never_fail(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    // Each body, and what Gitea and Forgejo sign for it: the `payload` field's text when it
    // decodes to UTF-8, else the body.
    let deep = "%5B".repeat(100_000);
    let bodies: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (Vec::new(), Vec::new()),
        (
            b"other=%7B%22action%22%3A%22opened%22%7D".to_vec(),
            b"other=%7B%22action%22%3A%22opened%22%7D".to_vec(),
        ),
        (b"payload=%FF%FE".to_vec(), b"payload=%FF%FE".to_vec()),
        (
            vec![0xff, b'=', 0xfe, b'&', b'&'],
            vec![0xff, b'=', 0xfe, b'&', b'&'],
        ),
        (b"payload=%zz%7B".to_vec(), b"%zz{".to_vec()),
        (b"payload=".to_vec(), Vec::new()),
        (b"payload=not+json".to_vec(), b"not json".to_vec()),
        (
            format!("payload={deep}").into_bytes(),
            "[".repeat(100_000).into_bytes(),
        ),
    ];
    for forge in ["github", "gitea", "forgejo"] {
        let hook = webhook(
            &db.store,
            &scope,
            forge.parse().expect("source"),
            Some(payload_config()),
        )
        .await;
        for (n, (body, json)) in bodies.iter().enumerate() {
            let signed_over = if forge == "github" { body } else { json };
            let headers = with_content_type(
                signed(
                    forge,
                    "issues",
                    &format!("odd-{n}"),
                    &hook.secret,
                    signed_over,
                ),
                FORM,
            );
            let resp = control.deliver(&hook.id, &headers, body).await;
            let odd = outcome(&db.store, &scope, &resp, &format!("{forge} body {n}")).await;
            assert_eq!(odd.kind, "issues", "{forge} body {n}");
            assert_eq!(odd.verified, true, "{forge} body {n}");
            assert_eq!(odd.decision, "default", "{forge} body {n}");
            assert_eq!(&odd.stored_body, body, "{forge} body {n}");
        }
        assert_eq!(events_of(&db.store, &scope, &hook.id).await, bodies.len());
    }
    control.stop().await;
}

/// `GET /hooks/<id>?payload=<JSON>` (Gitea's GET method) and any other method but POST: one
/// 405 with `Allow: POST`, the same for a webhook that exists and for any other id; nothing
/// stored. Other paths keep their one 404.
pub async fn get_deliveries_answer_one_405_for_every_id(db: TestDb) {
    let router = router();
    let control = Control::start(&db.store, &[&router.addr], ControlSetup::default()).await;
    let scope = human(&db.store, "alice").await;
    let live = webhook(&db.store, &scope, SourceType::Gitea, Some(routing_config())).await;
    let gone = webhook(&db.store, &scope, SourceType::Gitea, None).await;
    db.store
        .delete_webhook(&scope, &gone.id)
        .await
        .expect("delete");
    let p = payload("gitea", "issues.opened.json");
    let query = String::from_utf8(form_body(&p.body)).expect("ASCII");
    let ids = [
        live.id.clone(),
        gone.id.clone(),
        format!("wh_{}", "0".repeat(32)),
        live.id.to_uppercase(),
        "nope".to_string(),
        "%ff%fe".to_string(),
        "a".repeat(5000),
    ];
    let expected = json!({
        "error": "method_not_allowed",
        "message": "deliveries are POSTed; set the forge's HTTP method to POST"
    });
    let mut answers = std::collections::BTreeSet::new();
    for id in &ids {
        for (method, target) in [
            ("GET", format!("/hooks/{id}?{query}")),
            ("GET", format!("/hooks/{id}")),
            ("PUT", format!("/hooks/{id}")),
            ("DELETE", format!("/hooks/{id}")),
        ] {
            // With Gitea's own headers, signed over the JSON as Gitea signs GET deliveries.
            let mut head = format!(
                "{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n"
            );
            for (name, value) in signed("gitea", &p.event, "get-1", &live.secret, &p.body) {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            let resp = http_raw(control.http, head.into_bytes(), Vec::new()).await;
            assert_eq!(resp.status, 405, "{method} {id}: {resp:?}");
            assert_eq!(resp.header("allow"), Some("POST"), "{method} {id}");
            assert_eq!(resp.json(), expected, "{method} {id}");
            let mut headers: Vec<(String, String)> = resp
                .headers
                .iter()
                .filter(|(name, _)| name != "date")
                .cloned()
                .collect();
            headers.sort();
            answers.insert((resp.status, headers, resp.body.clone()));
        }
    }
    assert_eq!(answers.len(), 1, "one answer for every id: {answers:?}");
    assert_eq!(events_of(&db.store, &scope, &live.id).await, 0);

    // Other paths keep the one 404; a POST to the webhook still delivers.
    for path in ["/hooks", "/hooks/", "/elsewhere"] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let resp = http_raw(control.http, head.into_bytes(), Vec::new()).await;
        assert_eq!(resp.status, 404, "{path}: {resp:?}");
        assert_eq!(
            resp.json(),
            json!({"error": "not_found", "message": "webhook not found"})
        );
    }
    let headers = signed("gitea", &p.event, "post-1", &live.secret, &p.body);
    let resp = post(
        control.http,
        &format!("/hooks/{}", live.id),
        &headers,
        &p.body,
    )
    .await;
    assert_eq!(resp.status, 202, "{resp:?}");
    assert_eq!(resp.json()["verified"], true);
    control.stop().await;
}
