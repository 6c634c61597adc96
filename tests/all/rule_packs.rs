//! SPEC-0031 scenarios, end to end through the control gRPC API with a real router process,
//! on SQLite and (when configured) PostgreSQL. Each test is named after its scenario.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{
    Actor, Clock, NewEndpoint, NewEvent, NewWebhook, SourceType, Webhook,
};
use switchboard_control::{OwnerScope, Store};
use switchboard_packs::Catalog;
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::webhook_rules_client::WebhookRulesClient;
use switchboard_proto::control::v1::{
    InstallRulePackRequest, ListRulePacksRequest, ListWebhookRulesRequest, RemoveRulePackRequest,
    SetWebhookRulesRequest, TestReplay, TestWebhookRulesRequest, UpdateWebhookRuleRequest,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Status;
use tonic::transport::Channel;

use crate::control_harness::{TestDb, on_every_backend};
use crate::pack_api::{Bearer, Svc};
use crate::support::{Payload, RouterProcess, payload};

pub(crate) struct Env {
    pub(crate) store: Store,
    /// The state control serves with, for what a person does in the console (none when
    /// control is a process of its own).
    pub(crate) state: Option<ControlState>,
    _router: RouterProcess,
    channel: Channel,
    /// Where control's gRPC listens (`host:port`).
    pub(crate) addr: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

pub(crate) struct Options {
    pub(crate) capabilities: Capabilities,
    pub(crate) limits: Limits,
    pub(crate) catalog: Catalog,
    /// The store's clock (control's and the test's); the system clock when `None`.
    pub(crate) clock: Option<Clock>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            capabilities: Capabilities::default(),
            limits: Limits::default(),
            catalog: Catalog::builtin(),
            clock: None,
        }
    }
}

impl Options {
    /// An instance without SPEC-0026 (no `trusted_actors` capability): trusted-actors@1 is
    /// the version to plan there.
    fn without_trusted_actors() -> Self {
        Self {
            capabilities: Capabilities {
                trusted_actors: false,
            },
            ..Self::default()
        }
    }
}

impl Env {
    pub(crate) async fn start(db: &TestDb, options: Options) -> Env {
        let router = tokio::task::spawn_blocking(|| RouterProcess::spawn(&["--children", "2"]))
            .await
            .expect("router");
        let routers = Routers::new(
            RouterSource::Static(vec![router.addr.clone()]),
            Duration::from_secs(30),
        )
        .await;
        let store = match options.clock {
            Some(clock) => db.store.clone().with_clock(clock),
            None => db.store.clone(),
        };
        let state = ControlState {
            trials: switchboard_control::trials::Trials::start(
                store.clone(),
                routers.clone(),
                Default::default(),
            ),
            console_base: None,
            store: store.clone(),
            routers,
            capabilities: options.capabilities,
            limits: options.limits,
            catalog: Arc::new(options.catalog),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let routes = switchboard_control::api::routes(state.clone());
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
            store,
            state: Some(state),
            _router: router,
            channel,
            addr: addr.to_string(),
            _stop: stop,
        }
    }

    /// The channel to control, for a client of any service.
    pub(crate) fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub(crate) fn packs(&self, credential: &str) -> RulePacksClient<Svc> {
        RulePacksClient::with_interceptor(self.channel.clone(), Bearer(credential.to_string()))
    }

    pub(crate) fn rules(&self, credential: &str) -> WebhookRulesClient<Svc> {
        WebhookRulesClient::with_interceptor(self.channel.clone(), Bearer(credential.to_string()))
    }

    /// A human, their own scope, and an endpoint with `verbs`.
    pub(crate) async fn owner(&self, login: &str, verbs: &[&str]) -> (OwnerScope, String) {
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

    pub(crate) async fn webhook(
        &self,
        scope: &OwnerScope,
        configuration: Option<Value>,
    ) -> Webhook {
        self.store
            .create_webhook(NewWebhook {
                owner_scope: scope.clone(),
                source_type: SourceType::Github,
                secret: None,
                grant: vec!["forge".into(), "review".into(), "triage".into()],
                reject_unverified: false,
                name: None,
                configuration: configuration.map(crate::support::typed),
                actor: Actor::operator(),
            })
            .await
            .expect("webhook")
    }

    /// Another endpoint of `login` (who already exists) in their own scope.
    async fn endpoint(&self, login: &str, name: &str, verbs: &[&str]) -> String {
        self.store
            .vend_endpoint(NewEndpoint {
                name: name.into(),
                human_login: login.into(),
                owner_scope: OwnerScope::human(login),
                verbs: verbs.iter().map(|v| v.to_string()).collect(),
            })
            .await
            .expect("vend")
            .credential
    }

    /// A webhook of `source` that may route to `grant` (the first is the default queue).
    async fn webhook_with(
        &self,
        scope: &OwnerScope,
        source: SourceType,
        grant: &[&str],
        configuration: Option<Value>,
    ) -> Webhook {
        self.store
            .create_webhook(NewWebhook {
                owner_scope: scope.clone(),
                source_type: source,
                secret: None,
                grant: grant.iter().map(|q| q.to_string()).collect(),
                reject_unverified: false,
                name: None,
                configuration: configuration.map(crate::support::typed),
                actor: Actor::operator(),
            })
            .await
            .expect("webhook")
    }

    /// Stores a real payload as a delivery of `webhook`, as ingest would have.
    pub(crate) async fn deliver(
        &self,
        webhook: &Webhook,
        forge: &str,
        file: &str,
        n: usize,
    ) -> String {
        self.deliver_as(webhook, &payload(forge, file), true, n)
            .await
    }

    /// Stores `p` (a real payload, perhaps edited) as delivery `n` of `webhook`, with the
    /// headers its forge sends and the given verification result.
    async fn deliver_as(&self, webhook: &Webhook, p: &Payload, verified: bool, n: usize) -> String {
        let d = crate::support::stored(p, n);
        let event = self
            .store
            .insert_event(NewEvent {
                webhook_id: webhook.id.clone(),
                delivery_id: format!("{}-{n}", webhook.id),
                kind: d.kind,
                headers: d.headers.into_iter().map(|h| (h.name, h.value)).collect(),
                body: p.body.clone().into(),
                verified,
            })
            .await
            .expect("event");
        event.id
    }

    /// The saved configuration as `list_webhook_rules` answers it, and its version.
    async fn configuration(&self, credential: &str, webhook: &Webhook) -> (Value, i64) {
        let r = self
            .rules(credential)
            .list_webhook_rules(ListWebhookRulesRequest {
                webhook_id: webhook.id.clone(),
            })
            .await
            .expect("list rules")
            .into_inner();
        let config = serde_json::from_str(&crate::support::typed::config_text(&r.configuration))
            .expect("configuration json");
        (config, r.version)
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

pub(crate) const ALL: &[&str] = &["webhooks", "webhook-rules", "rule-pack-confirm", "todos"];

/// Runs an install (or its confirm) to the end, returning the result JSON or the status.
pub(crate) async fn install(
    env: &Env,
    credential: &str,
    req: InstallRulePackRequest,
) -> Result<Value, Status> {
    let stream = env
        .packs(credential)
        .install_rule_pack(req)
        .await?
        .into_inner();
    crate::support::typed::pack_result(stream).await
}

pub(crate) async fn remove(
    env: &Env,
    credential: &str,
    req: RemoveRulePackRequest,
) -> Result<Value, Status> {
    let stream = env
        .packs(credential)
        .remove_rule_pack(req)
        .await?
        .into_inner();
    crate::support::typed::pack_result(stream).await
}

pub(crate) fn plan_req(webhook: &Webhook, name: &str) -> InstallRulePackRequest {
    InstallRulePackRequest {
        webhook_id: webhook.id.clone(),
        name: name.into(),
        ..Default::default()
    }
}

pub(crate) fn confirm_req(
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
pub(crate) fn reason(s: &Status) -> String {
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
    crate::support::typed::listing(&r)
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
    a_stored_configuration_that_does_not_read_is_an_internal_error_not_no_rules,
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
    empty_unknown_and_other_owners_webhook_ids_are_one_not_found_for_pack_verbs,
    an_endpoint_without_the_verb,
    another_tenants_deliveries_never_enter_a_replay,
    a_hand_written_rule_gets_the_same_evidence,
    id_less_candidates_replay,
    many_concurrent_confirms_of_one_token_exactly_one_succeeds,
    a_plan_carries_no_payload_text_or_header_values,
    the_rebinding_trap_is_caught,
    a_mistyped_allowlist_is_refused_before_replay,
    a_cross_family_pair_map,
    under_confirm_policy_person_an_agents_confirm_waits_for_a_person,
    under_confirm_policy_person_an_agent_cannot_edit_rules_directly,
    a_plan_only_endpoint_plans_but_its_confirm_is_refused,
    same_family_pairs_are_refused_at_install,
    an_operator_adds_external_packs,
    a_version_that_needs_a_missing_capability,
    installing_a_second_pack_keeps_the_first,
    order_is_enforced,
    a_shared_param_changes_for_both_packs,
    adopting_a_pasted_in_configuration,
    each_confirm_argument_is_checked_on_its_own,
    a_confirm_racing_set_webhook_rules,
    a_trusted_actors_plan_replays_with_the_actors_it_sets,
    an_older_installed_version_offers_its_upgrade,
    a_pack_whose_manifest_left_the_catalog_is_listed_and_removed,
    an_upgrade_removes_the_params_it_orphans_unless_the_owner_keeps_them,
    the_11th_replay_inside_any_60_s_is_refused,
    a_python_grpc_client_reads_a_plan_without_parsing_json,
);

/// Issue 19's typed contract from another language: Python's grpcio (with protos compiled
/// by grpcio-tools from this repository's files) reads the plan's fields (kind, totals,
/// transitions with the rules before and after, fixtures, the token) straight from the
/// messages, and they are the plan this test reads through the Rust types. Needs the test
/// virtualenv (scripts/mcp-venv, which `.ci/run` creates); without it the test says so.
async fn a_python_grpc_client_reads_a_plan_without_parsing_json(db: TestDb) {
    let Some(python) = crate::support::python() else {
        return;
    };
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let config =
        json!({"rules": [{"id": "everything", "when": "true", "action": {"queue": "forge"}}]});
    let w = env.webhook(&scope, Some(config)).await;
    history(&env, &w).await;
    let read = crate::support::grpc_script(
        &python,
        "read_plan.py",
        &["--addr", &env.addr, "--token", &cred, "--webhook", &w.id],
        &[],
    )
    .await;
    // The same plan again (nothing was saved), read through the Rust types.
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    assert_eq!(read["kind"], "PLAN_KIND_INSTALL");
    assert_eq!(read["pack"], "drop-ci-noise");
    assert_eq!(read["version"], plan["pack"]["version"]);
    assert_eq!(read["events_replayed"], plan["events_replayed"]);
    assert_eq!(read["changed"], plan["changed"]);
    assert_eq!(read["totals_before"], plan["totals"]["before"]);
    assert_eq!(read["totals_after"], plan["totals"]["after"]);
    let first = &plan["transitions"][0];
    assert_eq!(read["first_transition"]["from"], first["from"], "{read}");
    assert_eq!(read["first_transition"]["to"], first["to"]);
    assert_eq!(read["first_transition"]["count"], first["count"]);
    assert_eq!(read["first_transition"]["by_rules"], first["by_rules"]);
    let rules: Vec<&Value> = plan["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| &r["id"])
        .collect();
    assert_eq!(read["rules"], json!(rules));
    let passed = plan["fixtures"]
        .as_array()
        .expect("fixtures")
        .iter()
        .filter(|f| f["passed"] == true)
        .count();
    assert!(passed > 0, "{plan}");
    assert_eq!(read["fixtures_passed"], passed);
    assert_eq!(read["proven"], plan["proven"]);
    assert_eq!(read["token_prefix"], "sbp_");
    // The expiry read as a google.protobuf.Timestamp by protoc's Python code: the time the
    // deprecated text names.
    let expires_ms = read["expires_at_ms"].as_i64().expect("a Timestamp");
    assert_eq!(
        switchboard_model::rfc3339_millis(expires_ms),
        read["expires_at"].as_str().expect("the text"),
        "{read}"
    );
    assert_eq!(read["confirm_tool"], "confirm_rule_pack_plan");
    assert_eq!(read["progress_events"], true);
}

/// Issue 18 item 6, through the API: "10 replays per endpoint per minute" is a sliding window.
/// Five plans 30 s into a minute and five at 59 s; at 61 s a fixed window would have started
/// afresh, but the 11th inside 60 s is refused (`rate_limited`, with how long to wait), and
/// once the first five are 60 s old, five more go through and no sixth.
async fn the_11th_replay_inside_any_60_s_is_refused(db: TestDb) {
    let clock = Clock::manual(1_800_000_030_000);
    let env = Env::start(
        &db,
        Options {
            clock: Some(clock.clone()),
            ..Options::default()
        },
    )
    .await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    env.deliver(&w, "github", "push.json", 0).await;
    let plans = |n: usize, when: &'static str| {
        let (env, cred, w) = (&env, &cred, &w);
        async move {
            for i in 0..n {
                install(env, cred, plan_req(w, "drop-ci-noise"))
                    .await
                    .unwrap_or_else(|e| panic!("plan {i} {when}: {e:?}"));
            }
        }
    };
    plans(5, "at 30 s").await;
    clock.advance(Duration::from_secs(29));
    plans(5, "at 59 s").await;
    clock.advance(Duration::from_secs(2));
    let refused = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect_err("the 11th replay inside 60 s, across a minute boundary");
    assert_eq!(reason(&refused), "rate_limited", "{refused:?}");
    assert!(
        refused.message().contains("retry after"),
        "{}",
        refused.message()
    );
    // The first five started at 30 s: 60 s later they no longer count.
    clock.advance(Duration::from_secs(30));
    plans(5, "at 91 s").await;
    let sixth = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect_err("ten inside the last 60 s again");
    assert_eq!(reason(&sixth), "rate_limited", "{sixth:?}");
}

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
            configuration: crate::support::typed::config(&json!({"rules": [{"id": "mine", "when": ".event == \"push\"", "action": {"queue": "forge"}}]})),
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
    assert!(
        !after
            .configuration
            .canonical_json()
            .contains("drop-ci-noise--")
    );
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
            patch: crate::support::typed::patch(
                &json!({"when": "false", "action": {"drop": true}}),
            ),
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
            patch: crate::support::typed::patch(
                &json!({"when": "false", "action": {"drop": true}}),
            ),
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
    assert!(
        !after
            .configuration
            .canonical_json()
            .contains("drop-ci-noise--")
    );
}

/// Issue 18: the pack verbs answer an empty webhook id as every verb does: the one
/// `not_found` of an unknown id or another owner's, with the same message.
async fn empty_unknown_and_other_owners_webhook_ids_are_one_not_found_for_pack_verbs(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (_, cred) = env.owner("alice", ALL).await;
    let (bob, _) = env.owner("bob", ALL).await;
    let bobs = env.webhook(&bob, None).await;
    let mut answers = Vec::new();
    for id in ["", "wh_00000000000000000000000000000000", bobs.id.as_str()] {
        let install_err = install(
            &env,
            &cred,
            InstallRulePackRequest {
                webhook_id: id.into(),
                name: "drop-ci-noise".into(),
                ..Default::default()
            },
        )
        .await
        .expect_err("install");
        let remove_err = remove(
            &env,
            &cred,
            RemoveRulePackRequest {
                webhook_id: id.into(),
                name: "drop-ci-noise".into(),
                ..Default::default()
            },
        )
        .await
        .expect_err("remove");
        for err in [install_err, remove_err] {
            assert_eq!(err.code(), tonic::Code::NotFound, "{id:?}: {err:?}");
            answers.push(err.message().to_string());
        }
    }
    answers.dedup();
    assert_eq!(answers.len(), 1, "{answers:?}");
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

pub(crate) async fn replay_report(env: &Env, cred: &str, w: &Webhook, candidate: Value) -> Value {
    let r = env
        .rules(cred)
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            replay: Some(TestReplay {
                limit: 200,
                ..Default::default()
            }),
            configuration: crate::support::typed::config(&candidate),
            ..Default::default()
        })
        .await
        .expect("replay")
        .into_inner();
    crate::support::typed::replay_report(&r)
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
    req.params = crate::support::typed::params(&json!({ param: "alice" }));
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
    serde_json::from_str(&crate::support::typed::decision_text(&r.saved_decision))
        .expect("decision")
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

fn pair_params(same_family: bool) -> Value {
    json!({
        "identity": "reviewer-b",
        "pairs": [{"author": "author-a", "reviewer": "reviewer-b"}],
        "families": {"author-a": "claude", "reviewer-b": if same_family { "claude" } else { "gpt" }},
        "require_cross_family": true,
    })
}

async fn a_cross_family_pair_map(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    env.deliver(&w, "github", "pull_request.review_requested.json", 1)
        .await;
    let mut req = plan_req(&w, "no-self-review");
    req.params = crate::support::typed::params(&pair_params(false));
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
    req.params = crate::support::typed::params(&pair_params(true));
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

/// The rule ids of a configuration, in order.
fn rule_ids(config: &Value) -> Vec<String> {
    config["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["id"].as_str().expect("rule id").to_string())
        .collect()
}

/// Issue 44: a stored configuration is read once, with one policy. A row that does not read
/// back (edited outside control) is an internal error that names nothing inside — never an
/// empty configuration a plan would replay against, a listing would show without its packs'
/// rules, or a confirm would save over.
async fn a_stored_configuration_that_does_not_read_is_an_internal_error_not_no_rules(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env
        .webhook(
            &scope,
            Some(json!({"rules": [{"id": "prs", "when": ".event == \"pull_request\"", "action": {"queue": "review"}}]})),
        )
        .await;
    history(&env, &w).await;
    sqlx::query("UPDATE webhooks SET configuration = $1 WHERE id = $2")
        .bind(r#"{"rules": 5}"#)
        .bind(w.id.as_str())
        .execute(env.store.pool())
        .await
        .expect("a row edited outside control");
    let err = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect_err("no plan over a configuration that does not read");
    assert_eq!(err.code(), tonic::Code::Internal, "{err:?}");
    assert!(
        !err.message().contains("rules"),
        "nothing inside is named: {err:?}"
    );
    let listed = env
        .packs(&cred)
        .list_rule_packs(ListRulePacksRequest {
            webhook_id: w.id.clone(),
        })
        .await
        .expect_err("no listing that shows no rules");
    assert_eq!(listed.code(), tonic::Code::Internal, "{listed:?}");
    let replay = env
        .rules(&cred)
        .test_webhook_rules(TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            replay: Some(TestReplay {
                limit: 10,
                ..Default::default()
            }),
            configuration: crate::support::typed::config(&json!({"rules": []})),
            ..Default::default()
        })
        .await
        .expect_err("no replay against an empty saved configuration");
    assert_eq!(replay.code(), tonic::Code::Internal, "{replay:?}");
}

/// The structured details a rule-pack refusal carries, as a client reads them.
pub(crate) fn details(s: &Status) -> Value {
    // As every client reads them: from the typed details (never JSON inside ErrorInfo).
    let read = switchboard_control_client::error::CallError::from_status(s).details;
    if read.is_empty() {
        Value::Null
    } else {
        Value::Object(read)
    }
}

/// Saves `config` with `set_webhook_rules`, as another session (or a person pasting) would.
async fn set_rules(
    env: &Env,
    cred: &str,
    w: &Webhook,
    config: &Value,
) -> Result<switchboard_proto::control::v1::SaveRulesResponse, Status> {
    env.rules(cred)
        .set_webhook_rules(SetWebhookRulesRequest {
            webhook_id: w.id.clone(),
            configuration: crate::support::typed::config(config),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner())
}

/// The queues the fleet's webhook may route to (handoff-lanes names every one).
const FLEET_GRANT: &[&str] = &[
    "triage",
    "hold",
    "lane-router",
    "lane-control",
    "lane-gateway",
    "lane-docs",
    "lane-ops",
];

/// A `switchboard control` process on 127.0.0.1:0, with its stderr (JSON log lines) kept.
/// Killed when dropped.
pub(crate) struct ControlProcess {
    child: std::process::Child,
    pub(crate) grpc: String,
    /// Where ingest listens (`host:port`).
    pub(crate) http: String,
    stderr: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ControlProcess {
    pub(crate) fn spawn(database_url: &str, router: &str, env: &[(&str, &str)]) -> ControlProcess {
        use std::io::{BufRead, BufReader};
        let mut command = std::process::Command::new(crate::support::binary());
        command
            .args([
                "control",
                "--database-url",
                database_url,
                "--http-listen",
                "127.0.0.1:0",
                "--routers",
                router,
            ])
            .env(
                crate::support::SECRET_KEY_ENV,
                crate::support::secret_key_hex(),
            )
            .env("SWITCHBOARD_GRPC_LISTEN", "127.0.0.1:0")
            .env("SWITCHBOARD_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("control starts");
        let stderr = Arc::new(std::sync::Mutex::new(Vec::new()));
        let err = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                sink.lock().expect("log lines").push(line);
            }
        });
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut seen = Vec::new();
        let mut http = String::new();
        let grpc = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => match line.strip_prefix("control grpc listening on ") {
                    Some(addr) => break addr.trim().to_string(),
                    None => {
                        if let Some(addr) = line.strip_prefix("ingest listening on http://") {
                            http = addr.trim().to_string();
                        }
                        seen.push(line)
                    }
                },
                Err(e) => panic!(
                    "control printed no grpc address ({e}); stdout {seen:?}; stderr {:?}",
                    stderr.lock().expect("log lines")
                ),
            }
        };
        ControlProcess {
            child,
            grpc,
            http,
            stderr,
        }
    }

    /// The JSON log lines at `level` so far.
    pub(crate) fn logged(&self, level: &str) -> Vec<Value> {
        self.stderr
            .lock()
            .expect("log lines")
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["level"] == level)
            .collect()
    }
}

impl ControlProcess {
    /// SIGKILL: the process ends where it is, nothing flushed.
    pub(crate) fn kill_9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ControlProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `pack` as an operator's pack directory: `<root>/<name>/<version>/pack.json` and
/// one `fixtures/<fixture name>.json` per fixture.
pub(crate) fn write_pack_dir(root: &std::path::Path, pack: &switchboard_packs::Pack) {
    let dir = root.join(&pack.name).join(&pack.version);
    std::fs::create_dir_all(dir.join("fixtures")).expect("pack dir");
    let mut manifest = pack.clone();
    manifest.fixtures.clear();
    std::fs::write(
        dir.join("pack.json"),
        serde_json::to_vec_pretty(&manifest).expect("manifest json"),
    )
    .expect("write pack.json");
    for f in &pack.fixtures {
        std::fs::write(
            dir.join("fixtures").join(format!("{}.json", f.name)),
            serde_json::to_vec_pretty(f).expect("fixture json"),
        )
        .expect("write fixture");
    }
}

/// The log lines that say `pack` was skipped.
fn skipped<'a>(errors: &'a [Value], pack: &str) -> Option<&'a Value> {
    errors.iter().find(|l| {
        l["fields"]["pack"] == pack
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("skipped"))
    })
}

async fn an_operator_adds_external_packs(db: TestDb) {
    let builtin = Catalog::builtin();
    let base = builtin
        .find("drop-ci-noise", "1.0.0")
        .expect("drop-ci-noise@1")
        .pack
        .clone();
    assert!(!base.fixtures.is_empty());
    let dir = tempfile::tempdir().expect("temp dir");
    // A valid pack: drop-ci-noise's rules and fixtures under another name.
    let mut good = base.clone();
    good.name = "ext-noise".into();
    write_pack_dir(dir.path(), &good);
    // A pack that contradicts its fixtures: its CI rule never matches, so the fixtures that
    // expect CI noise to be dropped route to the default instead.
    let mut broken = base.clone();
    broken.name = "ext-broken".into();
    for r in &mut broken.rules {
        if r.id.as_deref() == Some("ci-noise") {
            r.when = "false".into();
        }
    }
    write_pack_dir(dir.path(), &broken);
    // A pack that would shadow a built-in.
    let mut shadow = base.clone();
    shadow.version = "9.0.0".into();
    write_pack_dir(dir.path(), &shadow);
    // Issue 18: three packs only the repository's own admission refuses (one check for
    // built-ins and external packs): a rule no fixture is decided by, a fixture decided by
    // another rule than it names, a param check outside the expression restrictions.
    let mut uncovered = base.clone();
    uncovered.name = "ext-uncovered".into();
    uncovered.rules.push(switchboard_model::Rule {
        id: Some("never".into()),
        description: Some("matches nothing, so no fixture shows it working".into()),
        when: "false".into(),
        action: switchboard_model::Action::Drop,
    });
    write_pack_dir(dir.path(), &uncovered);
    let mut wrong_rule = base.clone();
    wrong_rule.name = "ext-wrong-rule".into();
    let named = wrong_rule
        .fixtures
        .iter_mut()
        .find(|f| f.rule.as_deref() == Some("ci-noise"))
        .expect("a fixture decided by ci-noise");
    named.rule = Some("deleted".into());
    write_pack_dir(dir.path(), &wrong_rule);
    let mut bad_check = base.clone();
    bad_check.name = "ext-bad-check".into();
    bad_check.param_checks.push(switchboard_packs::ParamCheck {
        id: "reads-env".into(),
        expr: "env | length > 0".into(),
        message: "never allowed".into(),
        each: None,
    });
    write_pack_dir(dir.path(), &bad_check);

    let router = tokio::task::spawn_blocking(|| RouterProcess::spawn(&["--children", "1"]))
        .await
        .expect("router");
    let sources = format!("file://{}", dir.path().display());
    let (url, router_addr) = (db.url.clone(), router.addr.clone());
    let control = tokio::task::spawn_blocking(move || {
        ControlProcess::spawn(
            &url,
            &router_addr,
            &[("SWITCHBOARD_RULE_PACK_SOURCES", &sources)],
        )
    })
    .await
    .expect("control");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", control.grpc))
        .expect("url")
        .connect()
        .await
        .expect("connects");
    let (stop, _) = tokio::sync::oneshot::channel();
    let env = Env {
        store: db.store.clone(),
        state: None,
        _router: router,
        channel,
        addr: control.grpc.clone(),
        _stop: stop,
    };
    let (scope, cred) = env.owner("alice", ALL).await;

    // The valid pack is listed with source: external; the others are not in the catalog.
    let l = listing(&env, &cred, None).await;
    let ext = pack(&l, "ext-noise");
    assert_eq!(ext["source"], "external", "{ext}");
    assert_eq!(ext["versions"][0]["version"], "1.0.0");
    assert_eq!(ext["versions"][0]["available"], true);
    let names: Vec<&str> = l["packs"]
        .as_array()
        .expect("packs")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        !names.contains(&"ext-broken"),
        "the failing pack is skipped: {names:?}"
    );
    for p in l["packs"].as_array().expect("packs") {
        if p["name"] != "ext-noise" {
            assert_eq!(p["source"], "builtin", "{p}");
        }
    }
    // Never shadowing a built-in: drop-ci-noise is still only the built-in versions.
    let versions: Vec<&str> = pack(&l, "drop-ci-noise")["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .filter_map(|v| v["version"].as_str())
        .collect();
    let builtin_versions: Vec<&str> = builtin
        .versions("drop-ci-noise")
        .iter()
        .map(|v| v.pack.version.as_str())
        .collect();
    assert_eq!(versions, builtin_versions);

    // Skipped with a logged error naming each pack.
    let errors = control.logged("ERROR");
    let failing = skipped(&errors, "ext-broken@1.0.0")
        .unwrap_or_else(|| panic!("no error names ext-broken: {errors:?}"));
    assert!(
        failing["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("fixture")),
        "the reason names the failing fixture: {failing}"
    );
    let shadowing = skipped(&errors, "drop-ci-noise@9.0.0")
        .unwrap_or_else(|| panic!("no error names the shadowing pack: {errors:?}"));
    assert!(
        shadowing["fields"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("built-in")),
        "{shadowing}"
    );
    assert!(skipped(&errors, "ext-noise@1.0.0").is_none(), "{errors:?}");
    for (name, says) in [
        ("ext-uncovered@1.0.0", "no fixture is decided by rule never"),
        (
            "ext-wrong-rule@1.0.0",
            "want rule deleted to decide, got ci-noise",
        ),
        ("ext-bad-check@1.0.0", "param_check reads-env"),
    ] {
        let e =
            skipped(&errors, name).unwrap_or_else(|| panic!("no error names {name}: {errors:?}"));
        let reason = e["fields"]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(says), "{name}: {reason}");
        assert!(
            !names.contains(&name.split('@').next().unwrap_or_default()),
            "{names:?}"
        );
    }

    // It installs only through plan-then-confirm, like a built-in.
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "ext-noise"))
        .await
        .expect("plan");
    assert_eq!(plan["pack"]["name"], "ext-noise");
    assert_eq!(plan["nothing_saved"], true);
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .config_version,
        w.config_version
    );
    let done = install(&env, &cred, confirm_req(&w, "ext-noise", &plan, false))
        .await
        .expect("confirm");
    assert_eq!(done["saved"], true);
    let (config, _) = env.configuration(&cred, &w).await;
    assert!(rule_ids(&config).contains(&"ext-noise--ci-noise".to_string()));
    let l = listing(&env, &cred, Some(&w)).await;
    assert_eq!(pack(&l, "ext-noise")["installed"]["version"], "1.0.0");
}

async fn a_version_that_needs_a_missing_capability(db: TestDb) {
    let env = Env::start(&db, Options::without_trusted_actors()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let l = listing(&env, &cred, None).await;
    let versions = pack(&l, "trusted-actors")["versions"]
        .as_array()
        .expect("versions")
        .clone();
    let v2 = versions
        .iter()
        .find(|v| v["version"] == "2.0.0")
        .expect("trusted-actors@2 listed");
    assert_eq!(v2["available"], false, "{v2}");
    assert_eq!(v2["missing_capabilities"], json!(["trusted_actors"]));
    // Version 1 is not superseded where version 2 cannot run.
    let v1 = versions
        .iter()
        .find(|v| v["version"] == "1.0.0")
        .expect("trusted-actors@1 listed");
    assert_eq!(v1["available"], true, "{v1}");
    assert_eq!(v1["retired"], false);

    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let mut req = plan_req(&w, "trusted-actors");
    req.version = "2".into();
    let err = install(&env, &cred, req).await.expect_err("unavailable");
    assert_eq!(reason(&err), "unavailable_version", "{err:?}");
    assert!(err.message().contains("trusted_actors"), "{err:?}");
    assert_eq!(details(&err)["version"], "2.0.0");
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .config_version,
        w.config_version,
        "nothing saved"
    );
    // Without a version, the highest available one is planned.
    let plan = install(&env, &cred, plan_req(&w, "trusted-actors"))
        .await
        .expect("plan v1");
    assert_eq!(plan["pack"]["version"], "1.0.0");
}

async fn installing_a_second_pack_keeps_the_first(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let hand_written = json!({
        "rules": [
            {"id": "home-issues", "when": ".event == \"issues\" and .payload.repository.full_name == $params.home_repo", "action": {"queue": "triage"}},
            {"id": "pushes", "when": ".event == \"push\"", "action": {"queue": "forge"}},
        ],
        "params": {"home_repo": "Codertocat/Hello-World"},
    });
    let w = env.webhook(&scope, Some(hand_written)).await;
    history(&env, &w).await;
    env.deliver(&w, "github", "pull_request.review_requested.json", 20)
        .await;
    let mut req = plan_req(&w, "no-self-review");
    req.params = crate::support::typed::params(&json!({"identity": "reviewer-b"}));
    let plan = install(&env, &cred, req)
        .await
        .expect("plan no-self-review");
    install(&env, &cred, confirm_req(&w, "no-self-review", &plan, false))
        .await
        .expect("confirm no-self-review");
    let (before, version) = env.configuration(&cred, &w).await;
    let before_ids = rule_ids(&before);
    assert!(
        before_ids
            .iter()
            .any(|id| id.starts_with("no-self-review--"))
    );
    assert_eq!(before["params"]["identity"], "reviewer-b");

    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan drop-ci-noise");
    install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("confirm drop-ci-noise");
    let (after, after_version) = env.configuration(&cred, &w).await;
    assert_eq!(after_version, version + 1);
    // Every rule that was there is still there, unchanged and in its prior relative order.
    let kept: Vec<&Value> = after["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| {
            !r["id"]
                .as_str()
                .unwrap_or_default()
                .starts_with("drop-ci-noise--")
        })
        .collect();
    let prior: Vec<&Value> = before["rules"].as_array().expect("rules").iter().collect();
    assert_eq!(kept, prior, "{after}");
    // And every param, with its value.
    for (key, value) in before["params"].as_object().expect("params") {
        assert_eq!(&after["params"][key], value, "param {key}");
    }
    // The new pack's rules are one block, before the hand-written rules (prepend).
    let ids = rule_ids(&after);
    let pos = |id: &str| ids.iter().position(|x| x == id).expect(id);
    let added: Vec<usize> = ids
        .iter()
        .enumerate()
        .filter(|(_, id)| id.starts_with("drop-ci-noise--"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(added.len(), 4, "{ids:?}");
    assert!(added.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    assert!(added[added.len() - 1] < pos("home-issues"), "{ids:?}");
    let l = listing(&env, &cred, Some(&w)).await;
    for name in ["no-self-review", "drop-ci-noise"] {
        assert_eq!(pack(&l, name)["installed"]["drift"]["state"], "none", "{l}");
    }
}

async fn order_is_enforced(db: TestDb) {
    let env = Env::start(&db, Options::without_trusted_actors()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env
        .webhook_with(&scope, SourceType::Github, FLEET_GRANT, None)
        .await;
    history(&env, &w).await;
    let err = install(&env, &cred, plan_req(&w, "handoff-lanes"))
        .await
        .expect_err("requires trusted-actors");
    assert_eq!(reason(&err), "requires_pack", "{err:?}");
    assert!(err.message().contains("trusted-actors"), "{err:?}");
    assert_eq!(
        details(&err),
        json!({"pack": "handoff-lanes", "requires": ["trusted-actors"]})
    );
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .config_version,
        w.config_version,
        "nothing saved"
    );
    // With trusted-actors installed, handoff-lanes plans, and follows it.
    let plan = install(&env, &cred, plan_req(&w, "trusted-actors"))
        .await
        .expect("plan trusted-actors");
    install(&env, &cred, confirm_req(&w, "trusted-actors", &plan, false))
        .await
        .expect("confirm trusted-actors");
    let plan = install(&env, &cred, plan_req(&w, "handoff-lanes"))
        .await
        .expect("plan handoff-lanes");
    install(&env, &cred, confirm_req(&w, "handoff-lanes", &plan, false))
        .await
        .expect("confirm handoff-lanes");
    let (config, _) = env.configuration(&cred, &w).await;
    let ids = rule_ids(&config);
    let last_required = ids
        .iter()
        .rposition(|id| id.starts_with("trusted-actors--"))
        .expect("trusted-actors rules");
    let first_dependent = ids
        .iter()
        .position(|id| id.starts_with("handoff-lanes--"))
        .expect("handoff-lanes rules");
    assert!(last_required < first_dependent, "{ids:?}");

    // Issue 18: the mirror of requires_pack. trusted-actors cannot be removed while
    // handoff-lanes, which requires it, is installed; once handoff-lanes is gone, it can.
    let version = env
        .store
        .get_webhook(&scope, &w.id)
        .await
        .expect("webhook")
        .config_version;
    let remove_req = |name: &str| RemoveRulePackRequest {
        webhook_id: w.id.clone(),
        name: name.into(),
        ..Default::default()
    };
    let err = remove(&env, &cred, remove_req("trusted-actors"))
        .await
        .expect_err("required by handoff-lanes");
    assert_eq!(reason(&err), "required_by_pack", "{err:?}");
    assert!(err.message().contains("handoff-lanes"), "{err:?}");
    assert_eq!(
        details(&err),
        json!({"pack": "trusted-actors", "required_by": ["handoff-lanes"]})
    );
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("webhook")
            .config_version,
        version,
        "nothing saved"
    );
    let plan = remove(&env, &cred, remove_req("handoff-lanes"))
        .await
        .expect("plan the dependent's removal");
    let mut confirm = remove_req("handoff-lanes");
    confirm.confirm = plan["plan_token"].as_str().expect("token").to_string();
    confirm.allow_unproven = true;
    remove(&env, &cred, confirm)
        .await
        .expect("handoff-lanes removed");
    remove(&env, &cred, remove_req("trusted-actors"))
        .await
        .expect("nothing requires trusted-actors now: it plans");
}

async fn a_shared_param_changes_for_both_packs(db: TestDb) {
    let env = Env::start(&db, Options::without_trusted_actors()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env
        .webhook_with(&scope, SourceType::Github, FLEET_GRANT, None)
        .await;
    // Codertocat opened this issue; mallory opened the other.
    let codertocat = env.deliver(&w, "github", "issues.opened.json", 1).await;
    let mut p = payload("github", "issues.opened.json");
    let mut body: Value = serde_json::from_slice(&p.body).expect("json");
    body["issue"]["user"]["login"] = json!("mallory");
    p.body = serde_json::to_vec(&body).expect("json");
    let mallory = env.deliver_as(&w, &p, true, 2).await;
    env.deliver(&w, "github", "push.json", 3).await;

    let mut req = plan_req(&w, "trusted-actors");
    req.params = crate::support::typed::params(&json!({"trusted_humans": ["mira"]}));
    let plan = install(&env, &cred, req)
        .await
        .expect("plan trusted-actors");
    install(&env, &cred, confirm_req(&w, "trusted-actors", &plan, false))
        .await
        .expect("confirm trusted-actors");

    let mut req = plan_req(&w, "handoff-lanes");
    req.params = crate::support::typed::params(&json!({"trusted_humans": ["mira", "Codertocat"]}));
    let plan = install(&env, &cred, req).await.expect("plan handoff-lanes");
    // The param diff names both packs.
    assert_eq!(
        plan["param_diff"]["changed"],
        json!(["trusted_humans"]),
        "{plan}"
    );
    assert_eq!(
        plan["param_diff"]["owners"]["trusted_humans"],
        json!(["trusted-actors", "handoff-lanes"]),
        "{plan}"
    );
    // The combined effect: trusted-actors' gate now admits Codertocat's issue, and
    // handoff-lanes routes it (no repo prefix: triage). Mallory's stays dropped.
    let admitted = plan["transitions"]
        .as_array()
        .expect("transitions")
        .iter()
        .find(|t| t["from"] == "drop" && t["to"] == "queue:triage")
        .unwrap_or_else(|| panic!("no drop → triage group: {plan}"));
    assert_eq!(admitted["count"], 1);
    assert_eq!(admitted["example_event_ids"], json!([codertocat]));
    for t in plan["transitions"].as_array().expect("transitions") {
        assert!(
            !t["example_event_ids"]
                .as_array()
                .expect("ids")
                .contains(&json!(mallory)),
            "mallory's issue does not change: {t}"
        );
    }
    let rule = |id: &str| {
        plan["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no rule {id}: {plan}"))
    };
    assert_eq!(
        rule("trusted-actors--issue-untrusted-author")["first_matches"],
        1
    );
    assert_eq!(rule("handoff-lanes--issue-triage")["first_matches"], 1);
    install(&env, &cred, confirm_req(&w, "handoff-lanes", &plan, false))
        .await
        .expect("confirm handoff-lanes");
    let (config, _) = env.configuration(&cred, &w).await;
    assert_eq!(
        config["params"]["trusted_humans"],
        json!(["mira", "Codertocat"])
    );
}

/// The fleet's 27 hand-written rules and their params (the configuration pasted in by hand
/// before packs existed), kept as test data beside the fleet cases.
fn fleet_hand_written() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/router/tests/data/routing/fleet/hand-written.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_json::from_str(&text).expect("hand-written.json")
}

async fn adopting_a_pasted_in_configuration(db: TestDb) {
    let env = Env::start(&db, Options::without_trusted_actors()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env
        .webhook_with(&scope, SourceType::Github, FLEET_GRANT, None)
        .await;
    let pasted = fleet_hand_written();
    let saved = set_rules(&env, &cred, &w, &pasted).await.expect("paste");
    assert!(saved.minted_rule_ids.is_empty());
    let (config, _) = env.configuration(&cred, &w).await;
    let hand_ids = rule_ids(&config);
    assert_eq!(hand_ids.len(), 27);
    // A stored history of every real GitHub delivery, some unverified, and a few edits
    // that reach the fleet's other decisions.
    let mut n = 0;
    for p in crate::support::payloads()
        .into_iter()
        .filter(|p| p.forge == "github")
    {
        env.deliver_as(&w, &p, n % 4 != 0, n).await;
        n += 1;
    }
    let edits: [(&str, &[&str], Value); 3] = [
        (
            "issues.opened.json",
            &["issue", "user", "login"],
            json!("mallory"),
        ),
        (
            "issues.opened.json",
            &["repository", "full_name"],
            json!("example/tool"),
        ),
        (
            "issues.labeled.json",
            &["issue", "labels"],
            json!([{"name": "hold"}]),
        ),
    ];
    for (file, path, value) in edits {
        let mut p = payload("github", file);
        let mut body: Value = serde_json::from_slice(&p.body).expect("json");
        let mut at = &mut body;
        for key in path {
            at = &mut at[*key];
        }
        *at = value;
        p.body = serde_json::to_vec(&body).expect("json");
        env.deliver_as(&w, &p, true, n).await;
        n += 1;
    }

    // trusted-actors@1 takes over the four gate rules.
    let gate: Vec<String> = [
        "unverified",
        "cairn-untrusted-actor",
        "issue-untrusted-author",
        "label-untrusted-sender",
    ]
    .map(String::from)
    .to_vec();
    let mut req = plan_req(&w, "trusted-actors");
    req.replaces = gate.clone();
    let plan = install(&env, &cred, req)
        .await
        .expect("plan trusted-actors");
    check_adoption(&plan, &gate, n);
    assert_eq!(
        plan["param_diff"]["adopted"],
        json!([
            "cairn_actors",
            "require_verified",
            "trusted_agents",
            "trusted_humans"
        ]),
        "{plan}"
    );
    install(&env, &cred, confirm_req(&w, "trusted-actors", &plan, false))
        .await
        .expect("confirm trusted-actors");
    let (config, _) = env.configuration(&cred, &w).await;
    assert_eq!(
        config["params"], pasted["params"],
        "params adopted, not reset"
    );

    // handoff-lanes@1 takes over the other 23.
    let lanes: Vec<String> = hand_ids
        .into_iter()
        .filter(|id| !gate.contains(id))
        .collect();
    assert_eq!(lanes.len(), 23);
    let mut req = plan_req(&w, "handoff-lanes");
    req.replaces = lanes.clone();
    let plan = install(&env, &cred, req).await.expect("plan handoff-lanes");
    check_adoption(&plan, &lanes, n);
    assert_eq!(
        plan["param_diff"]["adopted"],
        json!([
            "cairn_actors",
            "hold_labels",
            "lane_queues",
            "repo_prefixes",
            "trusted_agents",
            "trusted_humans"
        ]),
        "{plan}"
    );
    install(&env, &cred, confirm_req(&w, "handoff-lanes", &plan, false))
        .await
        .expect("confirm handoff-lanes");
    let (config, _) = env.configuration(&cred, &w).await;
    assert_eq!(
        config["params"], pasted["params"],
        "params adopted, not reset"
    );
    assert_eq!(config["default_action"], pasted["default_action"]);
    let ids = rule_ids(&config);
    assert_eq!(ids.len(), 27);
    assert!(
        ids.iter()
            .all(|id| id.starts_with("trusted-actors--") || id.starts_with("handoff-lanes--")),
        "{ids:?}"
    );
}

/// Issue 18 (REQ-3: "must match the plan's, or be omitted"): after an adoption plan with
/// `params` and `replaces`, a confirm that repeats the params and omits `replaces` applies the
/// plan; a differing `params`, `replaces` or `overwrite_local_edits`, each given alone, is
/// refused naming it, and leaves the token usable.
async fn each_confirm_argument_is_checked_on_its_own(db: TestDb) {
    let env = Env::start(&db, Options::without_trusted_actors()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env
        .webhook_with(&scope, SourceType::Github, FLEET_GRANT, None)
        .await;
    set_rules(&env, &cred, &w, &fleet_hand_written())
        .await
        .expect("paste");
    let gate: Vec<String> = [
        "unverified",
        "cairn-untrusted-actor",
        "issue-untrusted-author",
        "label-untrusted-sender",
    ]
    .map(String::from)
    .to_vec();
    let params = json!({"require_verified": true});
    let mut req = plan_req(&w, "trusted-actors");
    req.replaces = gate.clone();
    req.params = crate::support::typed::params(&params);
    let plan = install(&env, &cred, req)
        .await
        .expect("plan trusted-actors");
    assert_eq!(plan["rule_diff"]["replaced"], json!(gate), "{plan}");

    let refused = |field: &'static str, req: InstallRulePackRequest| {
        let env = &env;
        let cred = cred.clone();
        async move {
            let err = install(env, &cred, req).await.expect_err(field);
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{field}: {err:?}");
            assert!(
                err.message()
                    .contains(&format!("{field} does not match the plan's")),
                "{field}: {err:?}"
            );
        }
    };
    let mut other_params = confirm_req(&w, "trusted-actors", &plan, true);
    other_params.params = crate::support::typed::params(&json!({"require_verified": false}));
    refused("params", other_params).await;
    let mut fewer = confirm_req(&w, "trusted-actors", &plan, true);
    fewer.replaces = gate[..1].to_vec();
    refused("replaces", fewer).await;
    let mut overwrite = confirm_req(&w, "trusted-actors", &plan, true);
    overwrite.overwrite_local_edits = true;
    refused("overwrite_local_edits", overwrite).await;

    // Params as a Struct and as the deprecated text at once are refused.
    let mut both = confirm_req(&w, "trusted-actors", &plan, true);
    both.params = crate::support::typed::params(&params);
    #[allow(deprecated)]
    {
        both.params_json = Some(params.to_string());
    }
    let err = install(&env, &cred, both).await.expect_err("both forms");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("not both"), "{err:?}");

    // The same params, replaces omitted: the plan's. Given as the deprecated JSON text (what a
    // gateway of the previous release sends), they are the same params as the plan's Struct.
    let mut confirm = confirm_req(&w, "trusted-actors", &plan, true);
    #[allow(deprecated)]
    {
        confirm.params_json = Some(params.to_string());
    }
    install(&env, &cred, confirm)
        .await
        .expect("params repeated, replaces omitted: applied");
    let (config, _) = env.configuration(&cred, &w).await;
    let ids = rule_ids(&config);
    assert!(
        gate.iter().all(|g| !ids.contains(g)),
        "the replaced rules are gone: {ids:?}"
    );
    assert!(
        ids.iter().any(|id| id.starts_with("trusted-actors--")),
        "{ids:?}"
    );
    assert_eq!(config["params"]["require_verified"], true);
}

/// What the spec says of each adoption plan: within 32 rules, the replaced rules listed as
/// replaced (not removed) and absent from the candidate, params adopted rather than
/// changed, and a replay over every stored delivery with `changed: 0`.
fn check_adoption(plan: &Value, replaced: &[String], delivered: usize) {
    let rules = plan["rules"].as_array().expect("rules");
    assert!(rules.len() <= 32, "{} rules", rules.len());
    assert_eq!(plan["rule_diff"]["replaced"], json!(replaced), "{plan}");
    assert_eq!(plan["rule_diff"]["removed"], json!([]), "{plan}");
    for r in rules {
        assert!(
            !replaced.contains(&r["id"].as_str().unwrap_or_default().to_string()),
            "{r}"
        );
    }
    assert_eq!(plan["param_diff"]["added"], json!([]), "{plan}");
    assert_eq!(plan["param_diff"]["changed"], json!([]), "{plan}");
    assert_eq!(plan["events_replayed"], delivered as u64);
    assert_eq!(plan["changed"], 0, "{plan}");
    assert_eq!(plan["totals"]["before"], plan["totals"]["after"]);
    // The replay saw the fleet's decisions, not one kind of answer.
    let before = plan["totals"]["before"].as_object().expect("totals");
    assert!(before.contains_key("drop"), "{before:?}");
    assert!(
        before.keys().filter(|k| k.starts_with("queue:")).count() >= 2,
        "{before:?}"
    );
    assert_eq!(plan["proven"], true);
}

async fn a_confirm_racing_set_webhook_rules(db: TestDb) {
    let env = Arc::new(Env::start(&db, Options::default()).await);
    let (scope, cred) = env.owner("alice", ALL).await;
    // The candidate a drop-ci-noise plan saves on an empty webhook, from an unraced install.
    let reference = env.webhook(&scope, None).await;
    history(&env, &reference).await;
    let plan = install(&env, &cred, plan_req(&reference, "drop-ci-noise"))
        .await
        .expect("plan");
    install(
        &env,
        &cred,
        confirm_req(&reference, "drop-ci-noise", &plan, false),
    )
    .await
    .expect("confirm");
    let (candidate, _) = env.configuration(&cred, &reference).await;
    assert_eq!(rule_ids(&candidate).len(), 4);

    let (mut confirmed, mut stale) = (0, 0);
    for round in 0..20u64 {
        // A fresh endpoint per round: each has its own 10 replays a minute.
        let cred = env.endpoint("alice", &format!("racer-{round}"), ALL).await;
        let w = env.webhook(&scope, None).await;
        history(&env, &w).await;
        let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
            .await
            .expect("plan");
        let theirs = json!({
            "rules": [{"id": format!("theirs-{round}"), "when": ".event == \"push\"", "action": {"queue": "triage"}}],
            "params": {"round": round},
        });
        // Rounds 0, 4, …: the confirm starts first; 1, 5, …: the set; the rest together.
        let (confirm_delay, set_delay) = match round % 4 {
            0 => (0, 100),
            1 => (100, 0),
            _ => (0, 0),
        };
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let confirm = {
            let (env, cred, barrier) = (env.clone(), cred.clone(), barrier.clone());
            let req = confirm_req(&w, "drop-ci-noise", &plan, false);
            tokio::spawn(async move {
                barrier.wait().await;
                tokio::time::sleep(Duration::from_millis(confirm_delay)).await;
                install(&env, &cred, req).await
            })
        };
        let set = {
            let (env, cred, barrier, w, theirs) = (
                env.clone(),
                cred.clone(),
                barrier,
                w.clone(),
                theirs.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                tokio::time::sleep(Duration::from_millis(set_delay)).await;
                set_rules(&env, &cred, &w, &theirs).await
            })
        };
        let confirm = confirm.await.expect("join");
        let set = set.await.expect("join").expect("the set always saves");
        let set_config: Value =
            serde_json::from_str(&crate::support::typed::config_text(&set.configuration))
                .expect("json");
        assert_eq!(rule_ids(&set_config), [format!("theirs-{round}")]);

        // Whatever won, the configuration now saved is exactly the set's (it came last or
        // alone), and every saved version is exactly one write's configuration.
        let (now, version) = env.configuration(&cred, &w).await;
        assert_eq!(now, set_config, "round {round}");
        let history = env
            .store
            .list_history(&scope, &w.id, &switchboard_control::store::Page::first(10))
            .await
            .expect("history")
            .items;
        let written: Vec<(i64, String, Value)> = history
            .iter()
            .filter(|h| h.version > w.config_version)
            .map(|h| {
                let configuration = serde_json::to_value(&h.configuration).expect("json");
                (h.version, h.change.op.clone(), configuration)
            })
            .rev()
            .collect();
        let stored = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
        let installed = stored.provenance.clone();
        match confirm {
            Ok(done) => {
                confirmed += 1;
                assert_eq!(done["version"], w.config_version + 1, "round {round}");
                assert_eq!(version, w.config_version + 2, "round {round}");
                assert_eq!(
                    written,
                    vec![
                        (
                            w.config_version + 1,
                            "install_rule_pack".to_string(),
                            candidate.clone()
                        ),
                        (
                            w.config_version + 2,
                            "set_webhook_rules".to_string(),
                            set_config.clone()
                        ),
                    ],
                    "round {round}"
                );
                assert_eq!(set.version, w.config_version + 2);
                assert_eq!(installed.len(), 1, "round {round}");
                // The set replaced the pack's rules: the provenance shows them removed.
                let l = listing(&env, &cred, Some(&w)).await;
                assert_eq!(
                    pack(&l, "drop-ci-noise")["installed"]["drift"]["state"],
                    "removed"
                );
            }
            Err(e) => {
                stale += 1;
                assert_eq!(reason(&e), "plan_stale", "round {round}: {e:?}");
                assert_eq!(version, w.config_version + 1, "round {round}");
                assert_eq!(
                    written,
                    vec![(
                        w.config_version + 1,
                        "set_webhook_rules".to_string(),
                        set_config.clone()
                    )],
                    "round {round}"
                );
                assert!(installed.is_empty(), "round {round}: {installed:?}");
            }
        }
    }
    eprintln!("confirm won {confirmed} rounds; plan_stale in {stale}");
    assert_eq!(confirmed + stale, 20);
    assert!(confirmed > 0 && stale > 0, "{confirmed} won, {stale} stale");
}

/// REQ-4 and REQ-9: trusted-actors@2's candidate includes the webhook's first-class trusted
/// actors it sets from its params, so the replay evaluates the candidate with them (and the
/// saved configuration with the webhook's current ones).
async fn a_trusted_actors_plan_replays_with_the_actors_it_sets(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    // Every delivery of the history is sent by Codertocat; one issue is by a stranger too.
    let ids = history(&env, &w).await;
    let mut p = payload("github", "issues.opened.json");
    let mut body: Value = serde_json::from_slice(&p.body).expect("json");
    body["sender"]["login"] = json!("mallory");
    p.body = serde_json::to_vec(&body).expect("json");
    let stranger = env.deliver_as(&w, &p, true, 50).await;
    let mut req = plan_req(&w, "trusted-actors");
    req.params = crate::support::typed::params(&json!({"trusted_humans": ["Codertocat"]}));
    let plan = install(&env, &cred, req).await.expect("plan");
    assert_eq!(plan["pack"]["version"], "2.0.0");
    assert_eq!(plan["events_replayed"], ids.len() as u64 + 1);
    assert_eq!(
        plan["changed"], 1,
        "only the stranger's delivery changes: {plan}"
    );
    assert_eq!(
        plan["transitions"],
        json!([{"from": "default", "to": "quarantine", "count": 1, "example_event_ids": [stranger],
                "by_rules": [{"before_rule": null, "after_rule": "trusted-actors--untrusted-actor", "count": 1}]}])
    );
    // The fixtures pass with the trusted actors their own params set.
    for f in plan["fixtures"].as_array().expect("fixtures") {
        assert_eq!(f["passed"], true, "{f}");
    }
    // Issue 18 item 11: the confirm sets the webhook's first-class trusted actors, and the
    // saved configuration then quarantines the stranger's issue, not Codertocat's.
    install(&env, &cred, confirm_req(&w, "trusted-actors", &plan, false))
        .await
        .expect("confirm");
    let saved = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
    let actors = saved
        .trusted_actors
        .expect("trusted actors set by the confirm");
    assert_eq!(actors.humans, ["Codertocat"], "{actors:?}");
    let decided = dry_run(&env, &cred, &w, "issues.opened", &body).await;
    assert_eq!(decided["decision"], "quarantine", "{decided}");
    body["sender"]["login"] = json!("Codertocat");
    let decided = dry_run(&env, &cred, &w, "issues.opened", &body).await;
    assert_ne!(decided["decision"], "quarantine", "{decided}");
}

/// Issue 18 item 11: an installed older version says an upgrade is available, and to what;
/// once upgraded it says none.
async fn an_older_installed_version_offers_its_upgrade(db: TestDb) {
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let mut req = plan_req(&w, "drop-ci-noise");
    req.version = "1".into();
    let plan = install(&env, &cred, req).await.expect("plan v1");
    let mut confirm = confirm_req(&w, "drop-ci-noise", &plan, false);
    confirm.version = "1".into();
    install(&env, &cred, confirm).await.expect("confirm v1");
    let w = env.store.get_webhook(&scope, &w.id).await.expect("webhook");
    let installed =
        pack(&listing(&env, &cred, Some(&w)).await, "drop-ci-noise")["installed"].clone();
    assert_eq!(installed["version"], "1.0.0", "{installed}");
    assert_eq!(installed["upgrade_available"], true, "{installed}");
    assert_eq!(installed["upgrade_to"], "2.0.0", "{installed}");

    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan the upgrade");
    assert_eq!(plan["kind"], "upgrade");
    install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, false))
        .await
        .expect("confirm the upgrade");
    let installed =
        pack(&listing(&env, &cred, Some(&w)).await, "drop-ci-noise")["installed"].clone();
    assert_eq!(installed["version"], "2.0.0", "{installed}");
    assert_eq!(installed["upgrade_available"], false, "{installed}");
    assert_eq!(installed["upgrade_to"], Value::Null, "{installed}");
}

/// Issue 18 item 3: a control restarted without the source of an installed external pack,
/// and without an installed built-in version, still lists both (`available: false` and why),
/// and removes the external pack from its provenance alone.
async fn a_pack_whose_manifest_left_the_catalog_is_listed_and_removed(db: TestDb) {
    let builtin = Catalog::builtin();
    let mut external = builtin
        .find("drop-ci-noise", "1.0.0")
        .expect("drop-ci-noise@1")
        .pack
        .clone();
    external.name = "ext-noise".into();
    let mut with_external = Catalog::builtin();
    with_external
        .add_external(external.clone(), "file:///packs")
        .expect("admitted");
    let env = Env::start(
        &db,
        Options {
            catalog: with_external,
            ..Options::without_trusted_actors()
        },
    )
    .await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    for (name, version) in [("ext-noise", ""), ("no-self-review", "1")] {
        let mut req = plan_req(&w, name);
        req.version = version.into();
        if name == "no-self-review" {
            req.params = crate::support::typed::params(&json!({"identity": "reviewer-b"}));
        }
        let plan = install(&env, &cred, req).await.expect("plan");
        install(&env, &cred, confirm_req(&w, name, &plan, true))
            .await
            .expect("confirm");
    }
    let (before, _) = env.configuration(&cred, &w).await;
    drop(env);

    // Restarted: the external source is gone and no-self-review@1 was withdrawn.
    let without = Catalog::from_packs(
        builtin
            .packs()
            .iter()
            .filter(|p| p.pack.name != "no-self-review")
            .cloned()
            .collect(),
    );
    let env = Env::start(
        &db,
        Options {
            catalog: without,
            ..Options::without_trusted_actors()
        },
    )
    .await;
    let l = listing(&env, &cred, Some(&w)).await;
    for (name, rules) in [("ext-noise", external.rules.len()), ("no-self-review", 0)] {
        let entry = pack(&l, name);
        assert_eq!(entry["available"], false, "{entry}");
        assert_eq!(entry["versions"], json!([]), "{entry}");
        let why = entry["unavailable_reason"].as_str().expect("why");
        assert!(
            why.contains("no longer in this instance's catalog"),
            "{why}"
        );
        let installed = &entry["installed"];
        assert_eq!(installed["available"], false, "{installed}");
        assert_eq!(installed["drift"]["state"], "none", "{installed}");
        if rules > 0 {
            assert_eq!(
                installed["rule_ids"].as_array().expect("rule ids").len(),
                rules,
                "{installed}"
            );
        }
    }
    // It keeps routing as installed: the saved configuration is untouched by the restart.
    assert_eq!(env.configuration(&cred, &w).await.0, before);

    let mut req = RemoveRulePackRequest {
        webhook_id: w.id.clone(),
        name: "ext-noise".into(),
        ..Default::default()
    };
    let plan = remove(&env, &cred, req.clone())
        .await
        .expect("removal plan");
    assert_eq!(plan["kind"], "remove");
    assert_eq!(plan["pack"]["name"], "ext-noise", "{plan}");
    assert_eq!(plan["pack"]["version"], "1.0.0", "{plan}");
    let removed: Vec<String> = external
        .rules
        .iter()
        .map(|r| format!("ext-noise--{}", r.id.as_deref().unwrap_or_default()))
        .collect();
    assert_eq!(plan["rule_diff"]["removed"], json!(removed), "{plan}");
    req.confirm = plan["plan_token"].as_str().expect("token").into();
    req.allow_unproven = true;
    let applied = remove(&env, &cred, req).await.expect("confirm the removal");
    assert_eq!(applied["saved"], true);
    let (after, _) = env.configuration(&cred, &w).await;
    let ids = rule_ids(&after);
    assert!(
        ids.iter().all(|id| !id.starts_with("ext-noise--")),
        "{ids:?}"
    );
    assert!(
        ids.iter().any(|id| id.starts_with("no-self-review--")),
        "{ids:?}"
    );
    let l = listing(&env, &cred, Some(&w)).await;
    assert!(
        l["packs"]
            .as_array()
            .expect("packs")
            .iter()
            .all(|p| p["name"] != "ext-noise"),
        "{l}"
    );
}

/// Issue 18 item 10: upgrading trusted-actors 1 → 2 orphans `require_verified` and
/// `cairn_actors` (version 2 declares neither, no other pack owns them): the plan lists them,
/// the confirm removes them, and `keep_params` keeps the ones named — bound to the plan.
async fn an_upgrade_removes_the_params_it_orphans_unless_the_owner_keeps_them(db: TestDb) {
    let env = Env::start(&db, Options::without_trusted_actors()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let mut req = plan_req(&w, "trusted-actors");
    req.params = crate::support::typed::params(&json!({"cairn_actors": ["cairn-bot"]}));
    let plan = install(&env, &cred, req).await.expect("plan v1");
    assert_eq!(plan["pack"]["version"], "1.0.0");
    install(&env, &cred, confirm_req(&w, "trusted-actors", &plan, true))
        .await
        .expect("confirm v1");
    drop(env);

    let env = Env::start(&db, Options::default()).await;
    let plan = install(&env, &cred, plan_req(&w, "trusted-actors"))
        .await
        .expect("plan the upgrade");
    assert_eq!(plan["kind"], "upgrade", "{plan}");
    let orphaned = json!(["cairn_actors", "require_verified"]);
    assert_eq!(plan["param_diff"]["orphaned"], orphaned, "{plan}");
    assert_eq!(plan["param_diff"]["removed"], orphaned, "{plan}");
    // Keeping a param at confirm that the plan removes is a different plan.
    let mut keep = confirm_req(&w, "trusted-actors", &plan, true);
    keep.keep_params = vec!["cairn_actors".into()];
    let err = install(&env, &cred, keep)
        .await
        .expect_err("not the plan's");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains("keep_params does not match the plan's"),
        "{err:?}"
    );
    // Keeping a param the upgrade does not orphan is refused at plan.
    let mut stray = plan_req(&w, "trusted-actors");
    stray.keep_params = vec!["trusted_humans".into()];
    let err = install(&env, &cred, stray).await.expect_err("not orphaned");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("keep_params"), "{err:?}");

    let mut req = plan_req(&w, "trusted-actors");
    req.keep_params = vec!["cairn_actors".into()];
    let plan = install(&env, &cred, req).await.expect("plan keeping one");
    assert_eq!(plan["param_diff"]["orphaned"], orphaned, "{plan}");
    assert_eq!(
        plan["param_diff"]["kept"],
        json!(["cairn_actors"]),
        "{plan}"
    );
    assert_eq!(
        plan["param_diff"]["removed"],
        json!(["require_verified"]),
        "{plan}"
    );
    install(&env, &cred, confirm_req(&w, "trusted-actors", &plan, true))
        .await
        .expect("confirm the upgrade, keep_params omitted: the plan's");
    let (config, _) = env.configuration(&cred, &w).await;
    let params = config["params"].as_object().expect("params");
    assert!(!params.contains_key("require_verified"), "{config}");
    assert_eq!(params["cairn_actors"], json!(["cairn-bot"]), "{config}");
    assert!(params.contains_key("trusted_bots"), "{config}");
}

/// Issue 20 item 1: on a `person` webhook, an endpoint's confirm of a valid plan saves nothing
/// and answers `pending_approval` with the console URL; the plan's state says so; a person
/// (not the agent) puts it live, with the same single-use check, and provenance names both.
/// A rejected plan can never be applied; a pending plan goes stale when the configuration moves.
async fn under_confirm_policy_person_an_agents_confirm_waits_for_a_person(db: TestDb) {
    use switchboard_control::rule_packs::RulePacks;
    use switchboard_control::store::ConfirmPolicy;
    use switchboard_proto::control::v1::{GetRulePackPlanRequest, PlanState};
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    env.store
        .set_confirm_policy(&scope, &w.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    let version_before = env
        .store
        .get_webhook(&scope, &w.id)
        .await
        .expect("w")
        .config_version;
    let state_of = |token: String| {
        let mut packs = env.packs(&cred);
        async move {
            packs
                .get_rule_pack_plan(GetRulePackPlanRequest { plan_token: token })
                .await
                .expect("plan state")
                .into_inner()
        }
    };

    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let token = plan["plan_token"].as_str().expect("token").to_string();
    assert_eq!(
        state_of(token.clone()).await.state,
        PlanState::Planned as i32
    );
    let pending = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect("a confirm under person answers, it does not fail");
    assert_eq!(pending["saved"], false, "{pending}");
    assert_eq!(pending["state"], "pending_approval", "{pending}");
    let plan_id = pending["plan_id"].as_str().expect("plan id").to_string();
    assert_eq!(
        pending["console_url"],
        format!("/console/plans/{plan_id}"),
        "{pending}"
    );
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("w")
            .config_version,
        version_before,
        "nothing saved"
    );
    // Confirming again answers the same pending plan; the agent cannot put it live.
    let again = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect("again");
    assert_eq!(again["plan_id"], plan_id);
    let status = state_of(token.clone()).await;
    assert_eq!(status.state, PlanState::PendingApproval as i32);
    assert_eq!(status.console_url, format!("/console/plans/{plan_id}"));
    assert_eq!(status.proposed_by_human, "alice");

    // Another scope's person sees no such plan; the owner accepts it.
    let state = env.state.clone().expect("in-process control");
    let packs = RulePacks::new(state.clone(), state.catalog.clone());
    let elsewhere = packs
        .accept("mallory", &[OwnerScope::human("mallory")], &plan_id)
        .await
        .expect_err("another scope");
    assert_eq!(elsewhere.reason.as_str(), "not_found");
    let unknown = packs
        .accept("mallory", &[OwnerScope::human("mallory")], "pl_nope")
        .await
        .expect_err("unknown");
    assert_eq!(unknown.reason.as_str(), elsewhere.reason.as_str());
    let applied = packs
        .accept("alice", std::slice::from_ref(&scope), &plan_id)
        .await
        .expect("accepted");
    let applied = applied
        .applied()
        .expect("applied: alice's own scope counts her");
    assert_eq!(applied.version, version_before + 1);
    let status = state_of(token.clone()).await;
    assert_eq!(status.state, PlanState::Applied as i32);
    assert_eq!(status.decided_by, "alice");
    // Single use across both paths.
    let twice = packs
        .accept("alice", std::slice::from_ref(&scope), &plan_id)
        .await
        .expect_err("used");
    assert_eq!(twice.reason.as_str(), "plan_stale");
    let records = env
        .rules(&cred)
        .list_webhook_history(switchboard_proto::control::v1::ListWebhookHistoryRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await
        .expect("history")
        .into_inner()
        .records;
    let newest = records.first().expect("a record");
    let provenance = newest.provenance.clone().expect("provenance");
    assert_eq!(
        (
            provenance.proposed_by_human.as_str(),
            provenance.approved_by.as_str(),
            provenance.proposed_by_endpoint.starts_with("ep_")
        ),
        ("alice", "alice", true),
        "{provenance:?}"
    );
    assert_eq!(
        newest.actor_endpoint_id, "",
        "a person saved it, not an endpoint"
    );

    // A rejected plan never applies; a pending plan goes stale when the configuration moves.
    let remove_plan = remove(
        &env,
        &cred,
        switchboard_proto::control::v1::RemoveRulePackRequest {
            webhook_id: w.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        },
    )
    .await
    .expect("plan a removal");
    let remove_token = remove_plan["plan_token"]
        .as_str()
        .expect("token")
        .to_string();
    let pending = env
        .packs(&cred)
        .confirm_rule_pack_plan(switchboard_proto::control::v1::ConfirmRulePackPlanRequest {
            webhook_id: w.id.clone(),
            plan_token: remove_token.clone(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect("confirm by token")
        .into_inner();
    let Some(switchboard_proto::control::v1::rule_pack_event::Event::Pending(p)) = pending.event
    else {
        panic!("pending expected: {pending:?}");
    };
    packs
        .reject("alice", std::slice::from_ref(&scope), &p.plan_id, "not now")
        .await
        .expect("rejected");
    let status = state_of(remove_token.clone()).await;
    assert_eq!(
        (status.state, status.reject_reason.as_str()),
        (PlanState::Rejected as i32, "not now")
    );
    let refused = packs
        .accept("alice", std::slice::from_ref(&scope), &p.plan_id)
        .await
        .expect_err("rejected");
    assert_eq!(refused.reason.as_str(), "plan_stale");

    let upgrade = remove(
        &env,
        &cred,
        switchboard_proto::control::v1::RemoveRulePackRequest {
            webhook_id: w.id.clone(),
            name: "drop-ci-noise".into(),
            ..Default::default()
        },
    )
    .await
    .expect("plan again");
    let mut confirm = switchboard_proto::control::v1::RemoveRulePackRequest {
        webhook_id: w.id.clone(),
        name: "drop-ci-noise".into(),
        ..Default::default()
    };
    confirm.confirm = upgrade["plan_token"].as_str().expect("token").to_string();
    confirm.allow_unproven = true;
    let pending = remove(&env, &cred, confirm).await.expect("pending");
    let stale_id = pending["plan_id"].as_str().expect("id").to_string();
    // The policy is lifted for an edit meanwhile (under `person` the endpoint could not).
    env.store
        .set_confirm_policy(&scope, &w.id, ConfirmPolicy::SelfConfirm)
        .await
        .expect("policy");
    env.rules(&cred)
        .delete_webhook_rule(switchboard_proto::control::v1::DeleteWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "drop-ci-noise--deleted".into(),
            expected_version: None,
        })
        .await
        .expect("someone edits meanwhile");
    env.store
        .set_confirm_policy(&scope, &w.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    let status = state_of(upgrade["plan_token"].as_str().expect("t").to_string()).await;
    assert_eq!(
        (status.state, status.stale_reason.as_str()),
        (PlanState::Stale as i32, "configuration_changed")
    );
    let stale = packs
        .accept("alice", std::slice::from_ref(&scope), &stale_id)
        .await
        .expect_err("stale");
    assert_eq!(stale.reason.as_str(), "plan_stale");
}

/// ADR-0028 holds for every way into the configuration: on a `person` webhook an endpoint's
/// `set_webhook_rules`, `update_webhook_rule` and `delete_webhook_rule` are each refused
/// `approval_required` (FAILED_PRECONDITION, the webhook named in ErrorInfo), and save nothing:
/// the version and the history stay as they were; `delete_webhook` is refused the same way.
/// Under `self` the same calls save, and the webhook can be deleted.
async fn under_confirm_policy_person_an_agent_cannot_edit_rules_directly(db: TestDb) {
    use switchboard_control::store::ConfirmPolicy;
    use switchboard_proto::control::v1::{
        DeleteWebhookRuleRequest, ListWebhookHistoryRequest, RulePatch, UpdateWebhookRuleRequest,
    };
    use tonic_types::StatusExt;
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", ALL).await;
    let w = env.webhook(&scope, None).await;
    let config = json!({"rules": [
        {"id": "prs", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
        {"id": "ci", "when": ".kind == \"check_run.completed\"", "action": {"drop": true}},
    ]});
    set_rules(&env, &cred, &w, &config)
        .await
        .expect("saved under self");
    env.store
        .set_confirm_policy(&scope, &w.id, ConfirmPolicy::Person)
        .await
        .expect("policy");
    let history_len = |env: &Env| {
        let mut rules = env.rules(&cred);
        let id = w.id.clone();
        async move {
            rules
                .list_webhook_history(ListWebhookHistoryRequest {
                    webhook_id: id,
                    ..Default::default()
                })
                .await
                .expect("history")
                .into_inner()
                .records
                .len()
        }
    };
    let (before, version) = env.configuration(&cred, &w).await;
    let records = history_len(&env).await;

    let mut other = config.clone();
    other["rules"][0]["action"] = json!({"queue": "triage"});
    let set = set_rules(&env, &cred, &w, &other).await;
    let update = env
        .rules(&cred)
        .update_webhook_rule(UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "prs".into(),
            patch: Some(RulePatch {
                description: Some("changed".into()),
                ..Default::default()
            }),
            expected_version: Some(version),
        })
        .await;
    let delete = env
        .rules(&cred)
        .delete_webhook_rule(DeleteWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "ci".into(),
            expected_version: None,
        })
        .await;
    for (verb, refused) in [
        ("set_webhook_rules", set.err()),
        ("update_webhook_rule", update.err()),
        ("delete_webhook_rule", delete.err()),
    ] {
        let refused = refused.unwrap_or_else(|| panic!("{verb}: saved under person"));
        assert_eq!(
            refused.code(),
            tonic::Code::FailedPrecondition,
            "{verb}: {refused:?}"
        );
        let details = refused.get_error_details();
        let info = details.error_info().expect("ErrorInfo");
        assert_eq!(info.reason, "approval_required", "{verb}");
        assert_eq!(info.metadata.get("webhook_id"), Some(&w.id), "{verb}");
        assert!(
            refused.message().starts_with("approval_required: ")
                && refused.message().contains("confirm_policy: person"),
            "{verb}: {}",
            refused.message()
        );
    }
    assert_eq!(
        env.configuration(&cred, &w).await,
        (before.clone(), version),
        "nothing saved"
    );
    assert_eq!(history_len(&env).await, records, "no history written");
    // Nor can the endpoint take the webhook away.
    let mut webhooks =
        switchboard_proto::control::v1::webhooks_client::WebhooksClient::with_interceptor(
            env.channel.clone(),
            Bearer(cred.clone()),
        );
    let delete = switchboard_proto::control::v1::DeleteWebhookRequest {
        webhook_id: w.id.clone(),
    };
    let refused = webhooks
        .delete_webhook(delete.clone())
        .await
        .expect_err("deleted under person");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().starts_with("approval_required: "),
        "{refused:?}"
    );
    assert_eq!(env.configuration(&cred, &w).await.1, version, "still there");

    // Under `self` again, the same edit saves, and the webhook can be deleted.
    env.store
        .set_confirm_policy(&scope, &w.id, ConfirmPolicy::SelfConfirm)
        .await
        .expect("policy");
    let saved = set_rules(&env, &cred, &w, &other)
        .await
        .expect("saved under self");
    assert_eq!(saved.version, version + 1);
    webhooks
        .delete_webhook(delete)
        .await
        .expect("deleted under self");
    let gone = webhooks
        .delete_webhook(switchboard_proto::control::v1::DeleteWebhookRequest {
            webhook_id: w.id.clone(),
        })
        .await
        .expect_err("gone");
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone:?}");
}

/// Issue 20 item 2: an endpoint vended `webhook-rules` without `rule-pack-confirm` plans, reads
/// its plan's state, and is refused the confirm (by either call), which saves nothing.
async fn a_plan_only_endpoint_plans_but_its_confirm_is_refused(db: TestDb) {
    use switchboard_proto::control::v1::{ConfirmRulePackPlanRequest, GetRulePackPlanRequest};
    let env = Env::start(&db, Options::default()).await;
    let (scope, cred) = env.owner("alice", &["webhooks", "webhook-rules"]).await;
    let w = env.webhook(&scope, None).await;
    history(&env, &w).await;
    let plan = install(&env, &cred, plan_req(&w, "drop-ci-noise"))
        .await
        .expect("plan");
    let token = plan["plan_token"].as_str().expect("token").to_string();
    let refused = install(&env, &cred, confirm_req(&w, "drop-ci-noise", &plan, true))
        .await
        .expect_err("plan-only");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains("confirm_rule_pack_plan"),
        "{refused:?}"
    );
    let refused = env
        .packs(&cred)
        .confirm_rule_pack_plan(ConfirmRulePackPlanRequest {
            webhook_id: w.id.clone(),
            plan_token: token.clone(),
            allow_unproven: true,
            allow_insufficient_trial: false,
        })
        .await
        .expect_err("plan-only");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    let state = env
        .packs(&cred)
        .get_rule_pack_plan(GetRulePackPlanRequest { plan_token: token })
        .await
        .expect("a plan-only endpoint reads its plan")
        .into_inner();
    assert_eq!(
        state.state,
        switchboard_proto::control::v1::PlanState::Planned as i32
    );
    assert_eq!(
        env.store
            .get_webhook(&scope, &w.id)
            .await
            .expect("w")
            .config_version,
        1,
        "nothing saved"
    );
}
