//! SPEC-0031 scenarios, end to end through the control gRPC API with a real router process,
//! on SQLite and (when configured) PostgreSQL. Each test is named after its scenario.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{Actor, NewEndpoint, NewEvent, NewWebhook, SourceType, Webhook};
use switchboard_control::{OwnerScope, Store};
use switchboard_packs::Catalog;
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::webhook_rules_client::WebhookRulesClient;
use switchboard_proto::control::v1::{
    InstallRulePackRequest, ListRulePacksRequest, ListWebhookRulesRequest, RemoveRulePackRequest,
    SetWebhookRulesRequest, TestReplay, TestWebhookRulesRequest, UpdateWebhookRuleRequest,
    rule_pack_event,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use crate::control_harness::{TestDb, on_every_backend};
use crate::support::{RouterProcess, payload};

#[derive(Clone)]
struct Bearer(String);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let value = format!("Bearer {}", self.0)
            .parse()
            .map_err(|_| Status::internal("header"))?;
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

type Svc = InterceptedService<Channel, Bearer>;

struct Env {
    store: Store,
    _router: RouterProcess,
    channel: Channel,
    _stop: tokio::sync::oneshot::Sender<()>,
}

struct Options {
    capabilities: Capabilities,
    limits: Limits,
    catalog: Catalog,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            capabilities: Capabilities::default(),
            limits: Limits::default(),
            catalog: Catalog::builtin(),
        }
    }
}

impl Env {
    async fn start(db: &TestDb, options: Options) -> Env {
        let router = tokio::task::spawn_blocking(|| RouterProcess::spawn(&["--children", "2"]))
            .await
            .expect("router");
        let routers = Routers::new(
            RouterSource::Static(vec![router.addr.clone()]),
            Duration::from_secs(30),
        )
        .await;
        let state = ControlState {
            store: db.store.clone(),
            routers,
            capabilities: options.capabilities,
            limits: options.limits,
            catalog: Arc::new(options.catalog),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let routes = switchboard_control::api::routes(state);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_routes(routes)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                    let _ = stopped.await;
                })
                .await;
        });
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
            .expect("connects");
        Env {
            store: db.store.clone(),
            _router: router,
            channel,
            _stop: stop,
        }
    }

    fn packs(&self, credential: &str) -> RulePacksClient<Svc> {
        RulePacksClient::with_interceptor(self.channel.clone(), Bearer(credential.to_string()))
    }

    fn rules(&self, credential: &str) -> WebhookRulesClient<Svc> {
        WebhookRulesClient::with_interceptor(self.channel.clone(), Bearer(credential.to_string()))
    }

    /// A human, their own scope, and an endpoint with `verbs`.
    async fn owner(&self, login: &str, verbs: &[&str]) -> (OwnerScope, String) {
        self.store.create_human(login, None).await.expect("human");
        let scope = OwnerScope::human(login);
        let vended = self
            .store
            .vend_endpoint(NewEndpoint {
                name: format!("{login}-agent"),
                human_login: login.into(),
                owner_scope: scope.clone(),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
            })
            .await
            .expect("vend");
        (scope, vended.credential)
    }

    async fn webhook(&self, scope: &OwnerScope, configuration: Option<Value>) -> Webhook {
        self.store
            .create_webhook(NewWebhook {
                owner_scope: scope.clone(),
                source_type: SourceType::Github,
                secret: None,
                grant: vec!["forge".into(), "review".into(), "triage".into()],
                reject_unverified: false,
                configuration,
                actor: Actor::operator(),
            })
            .await
            .expect("webhook")
    }

    /// Stores a real payload as a delivery of `webhook`, as ingest would have.
    async fn deliver(&self, webhook: &Webhook, forge: &str, file: &str, n: usize) -> String {
        let p = payload(forge, file);
        let d = crate::support::stored(&p, n);
        let event = self
            .store
            .insert_event(NewEvent {
                webhook_id: webhook.id.clone(),
                delivery_id: format!("{}-{n}", webhook.id),
                kind: d.kind,
                headers: d.headers.into_iter().map(|h| (h.name, h.value)).collect(),
                body: p.body,
                verified: true,
            })
            .await
            .expect("event");
        event.id
    }

    async fn saved(&self, credential: &str, webhook: &Webhook) -> Value {
        let r = self
            .rules(credential)
            .list_webhook_rules(ListWebhookRulesRequest {
                webhook_id: webhook.id.clone(),
            })
            .await
            .expect("list rules")
            .into_inner();
        serde_json::to_value(format!("{r:?}")).unwrap_or_default()
    }
}

const ALL: &[&str] = &["webhooks", "webhook-rules", "todos"];

/// Runs an install (or its confirm) to the end, returning the result JSON or the status.
async fn install(
    env: &Env,
    credential: &str,
    req: InstallRulePackRequest,
) -> Result<Value, Status> {
    let mut stream = env
        .packs(credential)
        .install_rule_pack(req)
        .await?
        .into_inner();
    loop {
        match stream.message().await? {
            Some(ev) => {
                if let Some(rule_pack_event::Event::ResultJson(j)) = ev.event {
                    return Ok(serde_json::from_str(&j).expect("result json"));
                }
            }
            None => return Err(Status::internal("stream ended without a result")),
        }
    }
}

async fn remove(env: &Env, credential: &str, req: RemoveRulePackRequest) -> Result<Value, Status> {
    let mut stream = env
        .packs(credential)
        .remove_rule_pack(req)
        .await?
        .into_inner();
    while let Some(ev) = stream.message().await? {
        if let Some(rule_pack_event::Event::ResultJson(j)) = ev.event {
            return Ok(serde_json::from_str(&j).expect("result json"));
        }
    }
    Err(Status::internal("stream ended without a result"))
}

fn plan_req(webhook: &Webhook, name: &str) -> InstallRulePackRequest {
    InstallRulePackRequest {
        webhook_id: webhook.id.clone(),
        name: name.into(),
        ..Default::default()
    }
}

fn confirm_req(
    webhook: &Webhook,
    name: &str,
    plan: &Value,
    allow_unproven: bool,
) -> InstallRulePackRequest {
    InstallRulePackRequest {
        webhook_id: webhook.id.clone(),
        name: name.into(),
        confirm: plan["plan_token"].as_str().expect("token").to_string(),
        allow_unproven,
        ..Default::default()
    }
}

/// The stable reason a status carries (`plan_stale: …` → `plan_stale`).
fn reason(s: &Status) -> String {
    s.message()
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string()
}

async fn listing(env: &Env, credential: &str, webhook: Option<&Webhook>) -> Value {
    let r = env
        .packs(credential)
        .list_rule_packs(ListRulePacksRequest {
            webhook_id: webhook.map(|w| w.id.clone()).unwrap_or_default(),
        })
        .await
        .expect("list packs")
        .into_inner();
    serde_json::from_str(&r.result_json).expect("json")
}

fn pack<'a>(listing: &'a Value, name: &str) -> &'a Value {
    listing["packs"]
        .as_array()
        .expect("packs")
        .iter()
        .find(|p| p["name"] == name)
        .expect("pack listed")
}

/// A few real deliveries of every kind drop-ci-noise reads.
async fn history(env: &Env, w: &Webhook) -> Vec<String> {
    let mut ids = Vec::new();
    let files = [
        "check_run.completed.json",
        "check_run.completed.failure.json",
        "workflow_job.queued.json",
        "status.json",
        "issue_comment.created.json",
        "issue_comment.deleted.json",
        "issues.opened.json",
        "pull_request.opened.json",
    ];
    for (n, f) in files.iter().enumerate() {
        ids.push(env.deliver(w, "github", f, n).await);
    }
    ids
}

on_every_backend!(
    no_external_packs_by_default,
    the_first_call_saves_nothing,
    a_stale_plan_is_refused,
    a_plan_cannot_be_reused,
    a_brand_new_webhook,
    a_truncated_replay_applies_only_by_opt_in,
    lost_work_is_shown_first,
    a_dead_rule_is_flagged_not_blocked,
    drift_is_visible,
    upgrade_over_a_hand_edit,
    removal_is_replayed_too,
    a_token_does_not_cross_owners,
    an_endpoint_without_the_verb,
    another_tenants_deliveries_never_enter_a_replay,
    a_hand_written_rule_gets_the_same_evidence,
    id_less_candidates_replay,
    many_concurrent_confirms_of_one_token_exactly_one_succeeds,
    a_plan_carries_no_payload_text_or_header_values,
    the_rebinding_trap_is_caught,
    a_mistyped_allowlist_is_refused_before_replay,
    a_cross_family_pair_map,
    same_family_pairs_are_refused_at_install,
);

async fn no_external_packs_by_default(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (_, cred) = env.owner("alice", ALL).await;
    let l = listing(&env, &cred, None).await;
    let packs = l["packs"].as_array().expect("packs");
    assert!(!packs.is_empty());
    assert!(packs.iter().all(|p| p["source"] == "builtin"), "{l}");
}

async fn the_first_call_saves_nothing(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let before = env.saved(&cred, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    assert!(
        plan["plan_token"].as_str().is_some_and(|t| !t.is_empty()),
        "{plan}"
    );
    assert_eq!(plan["nothing_saved"], true);
    assert!(
        plan["confirm_with"]["note"]
            .as_str()
            .unwrap_or_default()
            .contains("Nothing was saved")
    );
    assert_eq!(env.saved(&cred, &w).await, before);
    let stored = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
    assert_eq!(stored.config_version, w.config_version);
}

async fn a_stale_plan_is_refused(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    // Another session adds a rule.
    env.rules(&cred)
        .set_webhook_rules(SetWebhookRulesRequest {
            webhook_id: w.id.clone(),
            configuration_json: json!({"rules": [{"id": "mine", "when": ".event == \"push\"", "action": {"queue": "forge"}}]}).to_string(),
            ..Default::default()
        })
        .await
        .expect("set rules");
    let version = env
        .store
        .get_webhook(&scope, &w.id)
        .await
        .expect("webhook")
        .config_version;
    let err = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect_err("stale");
    assert_eq!(reason(&err), "plan_stale", "{err:?}");
    let after = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
    assert_eq!(after.config_version, version, "nothing saved");
    assert!(!after.configuration.to_string().contains("drop-ci-noise--"));
}

async fn a_plan_cannot_be_reused(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    assert_eq!(plan["proven"], true, "{plan}");
    let done = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("confirm");
    assert_eq!(done["saved"], true);
    let again = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect_err("reuse");
    assert_eq!(reason(&again), "plan_stale");
    let l = listing(&env, &cred, Some(&w)).await;
    assert_eq!(pack(&l, "drop-ci-noise")["installed"]["version"], "2.0.0");
}

async fn a_brand_new_webhook(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    assert_eq!(plan["proven"], false);
    assert_eq!(plan["events_replayed"], 0);
    let refused = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect_err("unproven");
    assert_eq!(reason(&refused), "unproven");
    let done = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect("confirm");
    assert_eq!(done["provenance"]["proven"], false);
    let l = listing(&env, &cred, Some(&w)).await;
    assert_eq!(pack(&l, "drop-ci-noise")["installed"]["proven"], false);
}

async fn a_truncated_replay_applies_only_by_opt_in(db: TestDb) {
    let limits = Limits {
        replay_budget: Duration::from_millis(1),
        ..Limits::default()
    };
    let env = Env::start(
        &db,
        Options {
            limits,
            ..Default::default()
        },
    )
    .await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    assert_eq!(plan["truncated"], true, "{plan}");
    assert_eq!(plan["proven"], false);
    let refused = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect_err("opt-in");
    assert_eq!(reason(&refused), "unproven");
    let done = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect("confirm");
    assert_eq!(done["provenance"]["proven"], false);
    assert_eq!(done["provenance"]["truncated"], true);
}

async fn lost_work_is_shown_first(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let config =
        json!({"rules": [{"id": "everything", "when": "true", "action": {"queue": "forge"}}]});
    let w = env.webhook(&scope, Some(config)).await;
    let ids = history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let first = &plan["transitions"][0];
    assert_eq!(first["from"], "queue:forge", "{plan}");
    assert_eq!(first["to"], "drop");
    assert!(first["count"].as_u64().unwrap_or(0) >= 3, "{first}");
    for id in first["example_event_ids"].as_array().expect("examples") {
        assert!(ids.contains(&id.as_str().unwrap_or_default().to_string()));
    }
    assert_eq!(plan["totals"]["before"]["queue:forge"], 8);
}

async fn a_dead_rule_is_flagged_not_blocked(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    for n in 0..5 {
        env.deliver(&w, "github", "issues.opened.json", n).await;
    }
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let dead: Vec<&Value> = plan["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| r["never_matched"] == true)
        .collect();
    assert!(
        dead.iter()
            .any(|r| r["id"] == "drop-ci-noise--bot-comments" && r["from_pack"] == "drop-ci-noise"),
        "{plan}"
    );
    install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("still confirmable");
}

async fn drift_is_visible(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("confirm");
    let l = listing(&env, &cred, Some(&w)).await;
    assert_eq!(
        pack(&l, "drop-ci-noise")["installed"]["drift"]["state"],
        "none"
    );
    env.rules(&cred)
        .update_webhook_rule(UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "drop-ci-noise--deleted".into(),
            rule_json: json!({"when": "false", "action": {"drop": true}}).to_string(),
            ..Default::default()
        })
        .await
        .expect("edit");
    let l = listing(&env, &cred, Some(&w)).await;
    let drift = &pack(&l, "drop-ci-noise")["installed"]["drift"];
    assert_eq!(drift["state"], "edited", "{l}");
    assert_eq!(drift["edited"], json!(["drop-ci-noise--deleted"]));
}

async fn upgrade_over_a_hand_edit(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let mut req = plan_req(&w, "drop-ci-noise");
    req.version = "1".into();
    let plan = install(&env, &cred, req).await.expect("plan v1");
    install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("confirm v1");
    env.rules(&cred)
        .update_webhook_rule(UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "drop-ci-noise--ci-noise".into(),
            rule_json: json!({"when": "false", "action": {"drop": true}}).to_string(),
            ..Default::default()
        })
        .await
        .expect("edit");
    let mut v2 = plan_req(&w, "drop-ci-noise");
    v2.version = "2".into();
    let refused = install(&env, &cred, v2.clone())
        .await
        .expect_err("local edits");
    assert_eq!(reason(&refused), "local_edits");
    assert!(
        refused.message().contains("drop-ci-noise--ci-noise"),
        "{refused:?}"
    );
    v2.overwrite_local_edits = true;
    let plan = install(&env, &cred, v2).await.expect("plan v2");
    assert_eq!(plan["kind"], "upgrade");
    assert!(
        plan["rule_diff"]["changed"]
            .as_array()
            .expect("changed")
            .contains(&json!("drop-ci-noise--ci-noise")),
        "{plan}"
    );
    assert!(
        plan["rule_diff"]["added"]
            .as_array()
            .expect("added")
            .contains(&json!("drop-ci-noise--bot-reviews"))
    );
    assert_eq!(plan["version_diff"]["from"], "1.0.0");
    assert_eq!(plan["version_diff"]["rules_added"], json!(["bot-reviews"]));
}

async fn removal_is_replayed_too(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("confirm");
    let version = env
        .store
        .get_webhook(&scope, &w.id)
        .await
        .expect("webhook")
        .config_version;
    let removal = remove(
        &env,
        &cred,
        RemoveRulePackRequest {
            webhook_id: w.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        },
    )
    .await
    .expect("plan removal");
    assert_eq!(removal["kind"], "remove");
    let back: u64 = removal["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .filter(|t| t["from"] == "drop")
        .map(|t| t["count"].as_u64().unwrap_or(0))
        .sum();
    assert!(back >= 3, "{removal}");
    assert!(
        removal["todos_per_day"]["after"].as_f64() > removal["todos_per_day"]["before"].as_f64()
    );
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .config_version,
        version,
        "nothing changed"
    );
    let done = remove(
        &env,
        &cred,
        RemoveRulePackRequest {
            webhook_id: w.id.clone(),
            name: "drop-ci-noise".into(),
            confirm: removal["plan_token"].as_str().expect("token").into(),
            ..Default::default()
        },
    )
    .await
    .expect("confirm removal");
    assert_eq!(done["saved"], true);
    let after = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
    assert!(!after.configuration.to_string().contains("drop-ci-noise--"));
}

async fn a_token_does_not_cross_owners(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope_a, cred_a) = env.owner("alice", ALL).await;
    let (_, cred_b) = env.owner("bob", ALL).await;
    let w = env.webhook(&scope_a, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred_a, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let err = install(&env, &cred_b, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect_err("cross owner");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    let unknown = install(&env, &cred_b, plan_req(&w, "drop-ci-noise"))
        .await
        .expect_err("other scope webhook");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
    assert_eq!(
        env.store
            .get_webhook(&scope_a, &w.id)
            .await
            .expect("webhook")
            .config_version,
        w.config_version
    );
}

async fn an_endpoint_without_the_verb(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", &["webhooks", "list_rule_packs"]).await;
    let w = env.webhook(&scope, None).await;
    let err = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    listing(&env, &cred, Some(&w)).await;
}

async fn another_tenants_deliveries_never_enter_a_replay(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope_a, cred_a) = env.owner("alice", ALL).await;
    let (scope_b, _) = env.owner("bob", ALL).await;
    let wa = env
        .webhook(
            &scope_a,
            Some(json!({"rules": [{"id": "all", "when": "true", "action": {"queue": "forge"}}]})),
        )
        .await;
    let wb = env.webhook(&scope_b, None).await;
    let a_ids = history(&env, &wa).await;
    for n in 0..12 {
        env.deliver(&wb, "github", "check_run.completed.json", 100 + n)
            .await;
    }
    let plan = install(&env, &cred_a, plan_req(&wa, "drop-ci-noise"))
        .await
        .expect("plan");
    assert_eq!(plan["events_replayed"], a_ids.len() as u64);
    for t in plan["transitions"].as_array().expect("transitions") {
        for id in t["example_event_ids"].as_array().expect("ids") {
            assert!(
                a_ids.contains(&id.as_str().unwrap_or_default().to_string()),
                "{id} is not alice's"
            );
        }
    }
}

async fn replay_report(env: &Env, cred: &str, w: &Webhook, candidate: Value) -> Value {
    let r = env
        .rules(cred)
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            replay: Some(TestReplay {
                limit: 200,
                since_ms: 0,
            }),
            configuration_json: candidate.to_string(),
            ..Default::default()
        })
        .await
        .expect("replay")
        .into_inner();
    serde_json::from_str(&r.replay_report_json).expect("report")
}

async fn a_hand_written_rule_gets_the_same_evidence(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    // Wrong kind list: check runs are `check_run.*`, never `check.*`.
    let candidate = json!({"rules": [{"id": "drop-checks", "when": ".kind == \"check.completed\"", "action": {"drop": true}}]});
    let report = replay_report(&env, &cred, &w, candidate).await;
    let rule = &report["rules"][0];
    assert_eq!(rule["id"], "drop-checks");
    assert_eq!(rule["first_matches"], 0);
    assert_eq!(rule["never_matched"], true);
    assert_eq!(report["events_replayed"], 8);
    assert!(report.get("plan_token").is_none());
}

async fn id_less_candidates_replay(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let candidate =
        json!({"rules": [{"when": ".event == \"issues\"", "action": {"queue": "triage"}}]});
    let report = replay_report(&env, &cred, &w, candidate).await;
    assert_eq!(report["minted_rule_ids"], json!(["r-1"]));
    assert_eq!(report["rules"][0]["id"], "r-1");
    assert_eq!(report["rules"][0]["first_matches"], 1);
    let bad = env
        .rules(&cred)
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            event_id: "ev".into(),
            replay: Some(TestReplay::default()),
            ..Default::default()
        })
        .await
        .expect_err("two sources");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
}

async fn many_concurrent_confirms_of_one_token_exactly_one_succeeds(db: TestDb) {
    let env = Arc::new(Env::start(&db, Options::default()).await);
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let mut tasks = Vec::new();
    for _ in 0..12 {
        let (env, cred, req) = (
            env.clone(),
            cred.clone(),
            confirm_req(&w, "drop-ci-noise", &plan, false),
        );
        tasks.push(tokio::spawn(async move { install(&env, &cred, req).await }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(reason(&e), "plan_stale", "{e:?}"),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .config_version,
        w.config_version + 1
    );
}

async fn a_plan_carries_no_payload_text_or_header_values(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let text = plan.to_string();
    for forbidden in [
        "Codertocat",
        "Hello-World",
        "octocat",
        "GitHub-Hookshot",
        "application/json",
        "sha256=",
        "api.github.com",
    ] {
        assert!(
            !text.contains(forbidden),
            "the plan leaks {forbidden:?}: {text}"
        );
    }
}

async fn the_rebinding_trap_is_caught(db: TestDb) {
    let mut catalog = Catalog::builtin();
    let base = catalog.versions("drop-ci-noise")[0].pack.clone();
    let mut trap = base.clone();
    trap.name = "rebinding-trap".into();
    // Inside any(gen; cond), `.` is the generator's string element: `.payload` faults.
    trap.rules = vec![switchboard_model::Rule {
        id: Some("bot-words".into()),
        description: None,
        when: "any((.payload.comment?.body? // \"\") | split(\" \")[]; .payload.sender.login == \"bot\")".into(),
        action: switchboard_model::Action::Drop,
    }];
    trap.fixtures.clear();
    catalog.add_external(trap, "test").expect("add");
    let env = Env::start(
        &db,
        Options {
            catalog,
            ..Default::default()
        },
    )
    .await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    let ids = history(&env, &w).await;
    let err = install(&env, &cred, plan_req(&w, "rebinding-trap"))
        .await
        .expect_err("refused");
    assert_eq!(reason(&err), "pack_rule_faults", "{err:?}");
    assert!(
        err.message().contains("rebinding-trap--bot-words"),
        "{err:?}"
    );
    assert!(
        ids.iter().any(|id| err.message().contains(id.as_str())),
        "names example event ids: {err:?}"
    );
}

async fn a_mistyped_allowlist_is_refused_before_replay(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let name = if Catalog::builtin().versions("trusted-actors").is_empty() {
        "drop-ci-noise"
    } else {
        "trusted-actors"
    };
    let param = if name == "trusted-actors" {
        "trusted_humans"
    } else {
        "bot_actors"
    };
    let mut req = plan_req(&w, name);
    req.params_json = Some(json!({ param: "alice" }).to_string());
    let err = install(&env, &cred, req).await.expect_err("mistyped");
    assert_eq!(reason(&err), "invalid_params", "{err:?}");
    assert!(err.message().contains(param), "{err:?}");
    // No replay ran: the endpoint's 10 replays a minute are all still there.
    for _ in 0..10 {
        install(&env, &cred, plan_req(&w, "drop-ci-noise"))
            .await
            .expect("replay budget intact");
    }
}

/// Routes a made-up delivery through the saved configuration (a dry run; writes nothing).
async fn dry_run(env: &Env, cred: &str, w: &Webhook, kind: &str, body: &Value) -> Value {
    let r = env
        .rules(cred)
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            payload: Some(switchboard_proto::control::v1::TestPayload {
                payload_json: body.to_string(),
                kind: kind.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("dry run")
        .into_inner();
    serde_json::from_str(&r.saved_decision_json).expect("decision")
}

fn review_request(author: &str, reviewer: &str) -> Value {
    let mut body: Value =
        serde_json::from_slice(&payload("github", "pull_request.review_requested.json").body)
            .expect("json");
    body["pull_request"]["user"]["login"] = json!(author);
    body["requested_reviewer"]["login"] = json!(reviewer);
    body["sender"]["login"] = json!(author);
    body
}

fn pair_params(same_family: bool) -> String {
    json!({
        "identity": "reviewer-b",
        "pairs": [{"author": "author-a", "reviewer": "reviewer-b"}],
        "families": {"author-a": "claude", "reviewer-b": if same_family { "claude" } else { "gpt" }},
        "require_cross_family": true,
    })
    .to_string()
}

async fn a_cross_family_pair_map(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    env.deliver(&w, "github", "pull_request.review_requested.json", 1)
        .await;
    let mut req = plan_req(&w, "no-self-review");
    req.params_json = Some(pair_params(false));
    let plan = install(&env, &cred, req).await.expect("plan");
    install(&env, &cred, confirm_req(&w, "no-self-review", &plan, true))
        .await
        .expect("confirm");
    let kind = "pull_request.review_requested";
    let paired = dry_run(
        &env,
        &cred,
        &w,
        kind,
        &review_request("author-a", "reviewer-b"),
    )
    .await;
    assert_eq!(
        paired["decision"], "default",
        "author-a → reviewer-b reaches the pool: {paired}"
    );
    let human = dry_run(
        &env,
        &cred,
        &w,
        kind,
        &review_request("some-human", "reviewer-b"),
    )
    .await;
    assert_eq!(
        human["decision"], "drop",
        "a human author's PR is dropped: {human}"
    );
    let own = dry_run(
        &env,
        &cred,
        &w,
        kind,
        &review_request("reviewer-b", "reviewer-b"),
    )
    .await;
    assert_eq!(
        own["decision"], "drop",
        "reviewer-b's own PR is dropped: {own}"
    );
}

async fn same_family_pairs_are_refused_at_install(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    let mut req = plan_req(&w, "no-self-review");
    req.params_json = Some(pair_params(true));
    let err = install(&env, &cred, req).await.expect_err("same family");
    assert_eq!(reason(&err), "invalid_params", "{err:?}");
    assert!(
        err.message().contains("cross-family-pairs"),
        "names the param check: {err:?}"
    );
    assert!(
        err.message().contains("author-a") && err.message().contains("reviewer-b"),
        "names the pair: {err:?}"
    );
}
