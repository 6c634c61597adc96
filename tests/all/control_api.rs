//! The control gRPC API (`switchboard.control.v1`) end to end: a real `switchboard router`
//! process validates and evaluates, control serves in-process on 127.0.0.1:0 over a store on
//! a temp SQLite file — and on a fresh PostgreSQL schema when `SWITCHBOARD_TEST_DATABASE_URL`
//! is set. Every test runs on both backends, unchanged.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};
use switchboard_control::api::ControlApi;
use switchboard_control::routing::{RouterSource, Routers};
use switchboard_control::state::{Capabilities, ControlState, Limits};
use switchboard_control::store::{
    Actor, Event, NewEndpoint, NewEvent, NewTodo, NewWebhook, Page, RecordDecision,
    SaveConfiguration, SourceType, Todo, Webhook,
};
use switchboard_control::{Clock, OwnerScope, Role, Store, StoreOptions};
use switchboard_model::{Disposition, Label, RecordedDecision, RecordedFault};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::identity_client::IdentityClient;
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::rule_trials_client::RuleTrialsClient;
use switchboard_proto::control::v1::todos_client::TodosClient;
use switchboard_proto::control::v1::webhook_rules_client::WebhookRulesClient;
use switchboard_proto::control::v1::webhooks_client::WebhooksClient;
use switchboard_testkit::database::{Backend, TestDatabase};
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_types::StatusExt;

use crate::support::{RouterProcess, ms, payload, stored, text};

// ---------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------

/// Where the manual clock starts: every test moves time by hand.
const START_MS: i64 = 1_800_000_000_000;

/// A fresh database of `backend` (testkit's) and a store on it; `None` for PostgreSQL when
/// `SWITCHBOARD_TEST_DATABASE_URL` is unset.
async fn open(backend: Backend) -> Option<(Store, TestDatabase)> {
    let database = TestDatabase::create(backend).await?;
    let options = StoreOptions {
        max_connections: 4,
        sealing_key: Some(crate::support::secret_key()),
        ..StoreOptions::default()
    };
    let store = Store::connect_with(database.url(), options)
        .await
        .expect("open the store");
    Some((store, database))
}

/// What a test gets: the store (for fixtures and for looking at what is stored), the clock,
/// the router process, and a channel to the control API.
pub struct Api {
    pub store: Store,
    pub clock: Clock,
    pub router: RouterProcess,
    /// What the API serves from: routing an event as ingest does takes it.
    pub state: ControlState,
    channel: Channel,
}

/// Puts an `authorization` header (any text, well formed or not) on every call.
#[derive(Clone)]
pub struct Authorization(Option<String>);

impl Interceptor for Authorization {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            let value = value.parse().map_err(|_| Status::internal("test header"))?;
            request.metadata_mut().insert("authorization", value);
        }
        Ok(request)
    }
}

type Svc = InterceptedService<Channel, Authorization>;

/// One client per service, all sending the same authorization.
pub struct Clients {
    pub webhooks: WebhooksClient<Svc>,
    pub rules: WebhookRulesClient<Svc>,
    pub todos: TodosClient<Svc>,
    pub identity: IdentityClient<Svc>,
    pub packs: RulePacksClient<Svc>,
    pub trials: RuleTrialsClient<Svc>,
}

impl Api {
    fn with_header(&self, header: Option<String>) -> Clients {
        let auth = Authorization(header);
        Clients {
            webhooks: WebhooksClient::with_interceptor(self.channel.clone(), auth.clone()),
            rules: WebhookRulesClient::with_interceptor(self.channel.clone(), auth.clone()),
            todos: TodosClient::with_interceptor(self.channel.clone(), auth.clone()),
            identity: IdentityClient::with_interceptor(self.channel.clone(), auth.clone()),
            packs: RulePacksClient::with_interceptor(self.channel.clone(), auth.clone()),
            trials: RuleTrialsClient::with_interceptor(self.channel.clone(), auth),
        }
    }

    /// Clients calling as the endpoint whose credential this is.
    fn client(&self, credential: &str) -> Clients {
        self.with_header(Some(format!("Bearer {credential}")))
    }
}

async fn run<F, Fut>(backend: Backend, requests_per_minute: u32, test: F)
where
    F: FnOnce(Api) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some((store, db)) = open(backend).await else {
        return;
    };
    let clock = Clock::manual(START_MS);
    let store = store.with_clock(clock.clone());
    let router = tokio::task::spawn_blocking(|| RouterProcess::spawn(&["--children", "1"]))
        .await
        .expect("router starts");
    let routers = Routers::new(
        RouterSource::Static(vec![router.addr.clone()]),
        Duration::from_secs(20),
    )
    .await;
    let state = ControlState {
        trials: switchboard_control::trials::Trials::start(
            store.clone(),
            routers.clone(),
            Default::default(),
        ),
        console_base: None,
        catalog: std::sync::Arc::new(switchboard_packs::Catalog::builtin()),
        store: store.clone(),
        routers,
        capabilities: Capabilities::default(),
        limits: Limits {
            requests_per_endpoint_per_minute: requests_per_minute,
            ..Limits::default()
        },
    };
    let api = ControlApi::new(state.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_routes(api.routes)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = stopped.await;
            }),
    );
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect()
        .await
        .expect("connect to control");
    let api = Api {
        store: store.clone(),
        clock,
        router,
        state,
        channel,
    };
    let after = async move {
        let _ = stop.send(());
        let _ = server.await;
        store.close().await;
    };
    db.run(test(api), after).await;
}

/// Every test on SQLite and on PostgreSQL; `name = limit` sets the per-endpoint request limit.
macro_rules! api_suite {
    ($($test:ident $(= $limit:expr)?),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                super::run(super::Backend::Sqlite, api_suite!(@limit $($limit)?), super::$test).await;
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                super::run(super::Backend::Postgres, api_suite!(@limit $($limit)?), super::$test).await;
            })*
        }
    };
    (@limit) => { 10_000 };
    (@limit $limit:expr) => { $limit };
}

api_suite! {
    calls_need_a_valid_credential,
    verbs_off_the_allowlist_are_refused,
    roles_gate_every_verb,
    other_scopes_unknown_and_malformed_ids_are_one_not_found,
    the_authorization_matrix_is_docs_authorization_md,
    set_rules_mints_ids_and_records_history,
    typed_configurations_decisions_and_history_read_back_as_saved,
    every_problem_is_reported_at_once,
    pack_rule_ids_are_reserved,
    rules_cannot_widen_the_grant,
    expected_version_guards_every_write,
    rules_are_updated_and_deleted_by_id,
    history_lists_newest_first_in_pages,
    dry_runs_route_events_and_payloads_and_write_nothing,
    webhooks_are_created_read_rotated_and_deleted,
    events_list_newest_first_and_read_exactly,
    retention_purges_in_batches_and_listings_say_what_window_remains,
    todos_are_listed_claimed_and_completed,
    todo_claims_are_leases,
    two_endpoints_race_to_claim_and_one_wins,
    a_claim_expiring_while_its_holder_completes_has_one_outcome,
    each_endpoint_is_rate_limited = 3,
    a_stopped_router_changes_nothing,
    health_and_reflection_are_served,
    explain_names_the_version_and_the_rules_that_decided,
    redrive_plans_then_routes_each_event_once,
    redrive_recovers_what_a_change_dropped_by_version_and_time_once_each,
    every_time_is_a_timestamp_beside_its_deprecated_field,
    a_time_bound_is_a_timestamp_or_the_deprecated_millis_never_two_times,
}

// ---------------------------------------------------------------------------------------
// Fixtures and assertions
// ---------------------------------------------------------------------------------------

const GRANT: [&str; 3] = ["forge", "review", "triage"];
const EVERY_FAMILY: [&str; 5] = [
    "webhooks",
    "webhook-rules",
    "rule-pack-confirm",
    "rule-trials",
    "todos",
];

async fn human(store: &Store, login: &str) -> OwnerScope {
    store.create_human(login, None).await.expect("human");
    OwnerScope::human(login)
}

async fn vend(store: &Store, login: &str, scope: &OwnerScope, verbs: &[&str]) -> String {
    store
        .vend_endpoint(NewEndpoint {
            name: format!("{login}-agent"),
            human_login: login.into(),
            owner_scope: scope.clone(),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        })
        .await
        .expect("vend")
        .credential
}

async fn webhook(store: &Store, scope: &OwnerScope) -> Webhook {
    store
        .create_webhook(NewWebhook {
            owner_scope: scope.clone(),
            source_type: SourceType::Github,
            secret: None,
            grant: GRANT.iter().map(|q| q.to_string()).collect(),
            reject_unverified: false,
            name: None,
            configuration: None,
            actor: Actor::operator(),
        })
        .await
        .expect("webhook")
}

/// Saves a configuration as an operator (or a confirmed pack install) would, bypassing the API.
async fn seed_configuration(
    store: &Store,
    w: &Webhook,
    configuration: Value,
    packs: Option<switchboard_model::provenance::Provenance>,
) {
    store
        .save_configuration(
            &w.owner_scope,
            &w.id,
            SaveConfiguration {
                configuration: crate::support::typed(configuration),
                actor: Actor::operator(),
                change: switchboard_model::ConfigurationChange::op("seed"),
                installed_packs: packs,
                ..SaveConfiguration::default()
            },
        )
        .await
        .expect("seed configuration");
}

/// A real GitHub payload stored as ingest stores it; the clock moves a second after each.
async fn github_event(api: &Api, w: &Webhook, file: &str, n: usize) -> Event {
    let p = payload("github", file);
    let d = stored(&p, n);
    let event = api
        .store
        .insert_event(NewEvent {
            webhook_id: w.id.clone(),
            delivery_id: d.delivery_id.clone(),
            kind: d.kind.clone(),
            headers: d
                .headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect(),
            body: p.body.clone().into(),
            verified: true,
        })
        .await
        .expect("event");
    api.clock.advance(Duration::from_secs(1));
    event
}

async fn todo_for(api: &Api, event: &Event, queue: &str) -> Todo {
    let todo = api
        .store
        .record_decision(
            &event.id,
            RecordDecision {
                decision: RecordedDecision::to_queue(queue),
                fault: None,
                todo: Some(NewTodo {
                    queue: queue.into(),
                    rule_id: None,
                }),
                decided_by: None,
            },
        )
        .await
        .expect("decision")
        .expect("a todo")
        .todo;
    api.clock.advance(Duration::from_secs(1));
    todo
}

#[track_caller]
fn ok<T: Debug>(result: Result<Response<T>, Status>) -> T {
    match result {
        Ok(r) => r.into_inner(),
        Err(s) => panic!("expected success, got {:?}: {}", s.code(), s.message()),
    }
}

fn reason_of(s: &Status) -> String {
    s.get_error_details()
        .error_info()
        .map(|i| i.reason.clone())
        .unwrap_or_default()
}

/// Asserts the call failed with `code` and `reason` (in the details and leading the message).
#[track_caller]
fn refused<T: Debug>(result: Result<Response<T>, Status>, code: Code, reason: &str) -> Status {
    let status = match result {
        Ok(r) => panic!("expected {code:?} {reason}, got {:?}", r.into_inner()),
        Err(s) => s,
    };
    assert_eq!(
        (status.code(), reason_of(&status).as_str()),
        (code, reason),
        "{}",
        status.message()
    );
    assert!(
        status.message().starts_with(&format!("{reason}: ")),
        "{}",
        status.message()
    );
    status
}

/// Asserts `invalid_argument` naming `field`.
#[track_caller]
fn invalid<T: Debug>(result: Result<Response<T>, Status>, field: &str) -> Status {
    let s = refused(result, Code::InvalidArgument, "invalid_argument");
    let details = s.get_error_details();
    assert_eq!(
        details.error_info().map(|i| i.metadata["field"].as_str()),
        Some(field),
        "{}",
        s.message()
    );
    assert_eq!(
        details
            .bad_request()
            .map(|b| b.field_violations[0].field.as_str()),
        Some(field)
    );
    s
}

/// The problems of an `invalid_configuration` refusal, from its typed `RefusalDetails`.
#[track_caller]
fn problems<T: Debug>(result: Result<Response<T>, Status>) -> Vec<Value> {
    let s = refused(result, Code::InvalidArgument, "invalid_configuration");
    // The problems are data in the details, not text to parse.
    let refusal = switchboard_proto::refusal::refusal_of(&s).expect("RefusalDetails");
    let details = switchboard_proto::message_json::sparse_message_json(&refusal)
        .expect("RefusalDetails prints as JSON");
    let list = details["problems"]
        .as_array()
        .cloned()
        .expect("a problem list");
    assert!(!s.message().contains("[{"), "{}", s.message());
    assert_eq!(
        s.get_error_details()
            .bad_request()
            .map(|b| b.field_violations.len()),
        Some(list.len()),
        "every problem is also a field violation"
    );
    list
}

fn codes(problems: &[Value]) -> Vec<String> {
    problems
        .iter()
        .map(|p| p["code"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{text:?} is not JSON: {e}"))
}

fn rule_ids(configuration_json: &str) -> Vec<String> {
    json_of(configuration_json)["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn set(
    webhook_id: &str,
    configuration: Value,
    expected_version: Option<i64>,
) -> pb::SetWebhookRulesRequest {
    pb::SetWebhookRulesRequest {
        webhook_id: webhook_id.into(),
        configuration: crate::support::typed::config(&configuration),
        expected_version,
    }
}

fn update(
    webhook_id: &str,
    rule_id: &str,
    patch: Value,
    expected_version: Option<i64>,
) -> pb::UpdateWebhookRuleRequest {
    pb::UpdateWebhookRuleRequest {
        webhook_id: webhook_id.into(),
        rule_id: rule_id.into(),
        patch: crate::support::typed::patch(&patch),
        expected_version,
    }
}

fn delete_rule(
    webhook_id: &str,
    rule_id: &str,
    expected_version: Option<i64>,
) -> pb::DeleteWebhookRuleRequest {
    pb::DeleteWebhookRuleRequest {
        webhook_id: webhook_id.into(),
        rule_id: rule_id.into(),
        expected_version,
    }
}

async fn version_and_history(store: &Store, w: &Webhook) -> (i64, usize) {
    let now = store
        .get_webhook(&w.owner_scope, &w.id)
        .await
        .expect("webhook");
    let history = store
        .list_history(&w.owner_scope, &w.id, &Page::first(200))
        .await
        .expect("history");
    (now.config_version, history.items.len())
}

fn routes_prs_to_review() -> Value {
    json!({"rules": [{"id": "prs", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}}], "params": {}})
}

// ---------------------------------------------------------------------------------------
// Authentication, allowlist, roles
// ---------------------------------------------------------------------------------------

async fn calls_need_a_valid_credential(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let get = || pb::GetWebhookRequest {
        webhook_id: w.id.clone(),
    };
    ok(api.client(&credential).webhooks.get_webhook(get()).await);

    // No header at all: every service refuses, naming how to authenticate.
    let mut none = api.with_header(None);
    let missing = refused(
        none.webhooks.get_webhook(get()).await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    assert!(
        missing.message().contains("Bearer"),
        "{}",
        missing.message()
    );
    refused(
        none.rules
            .list_webhook_rules(pb::ListWebhookRulesRequest {
                webhook_id: w.id.clone(),
            })
            .await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    refused(
        none.todos
            .list_todos(pb::ListTodosRequest {
                queue: "forge".into(),
                ..Default::default()
            })
            .await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    refused(
        none.identity.who_am_i(pb::WhoAmIRequest::default()).await,
        Code::Unauthenticated,
        "unauthenticated",
    );

    // Malformed headers are no credential.
    for header in [
        format!("Basic {credential}"),
        "Bearer".to_string(),
        "Bearer    ".to_string(),
        credential.clone(),
    ] {
        refused(
            api.with_header(Some(header))
                .webhooks
                .get_webhook(get())
                .await,
            Code::Unauthenticated,
            "unauthenticated",
        );
    }

    // Unknown and revoked credentials answer alike.
    let unknown = refused(
        api.client(&format!("sbe_{}", "0".repeat(64)))
            .webhooks
            .get_webhook(get())
            .await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    let endpoint = api
        .store
        .authenticate(&credential)
        .await
        .expect("lookup")
        .expect("known");
    api.store
        .revoke_endpoint(&endpoint.id)
        .await
        .expect("revoke");
    let revoked = refused(
        api.client(&credential).webhooks.get_webhook(get()).await,
        Code::Unauthenticated,
        "unauthenticated",
    );
    assert_eq!(unknown.message(), revoked.message());
    refused(
        api.client(&credential)
            .identity
            .who_am_i(pb::WhoAmIRequest::default())
            .await,
        Code::Unauthenticated,
        "unauthenticated",
    );
}

async fn verbs_off_the_allowlist_are_refused(api: Api) {
    let alice = human(&api.store, "alice").await;
    let w = webhook(&api.store, &alice).await;
    let credential = vend(&api.store, "alice", &alice, &["todos", "get_webhook"]).await;
    let mut c = api.client(&credential);

    ok(c.webhooks
        .get_webhook(pb::GetWebhookRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    ok(c.todos
        .list_todos(pb::ListTodosRequest {
            queue: "forge".into(),
            ..Default::default()
        })
        .await);

    let denied = refused(
        c.webhooks
            .list_webhooks(pb::ListWebhooksRequest::default())
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    assert!(
        denied.message().contains("list_webhooks"),
        "{}",
        denied.message()
    );
    refused(
        c.rules
            .set_webhook_rules(set(&w.id, routes_prs_to_review(), None))
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    refused(
        c.webhooks
            .create_webhook(pb::CreateWebhookRequest {
                source_type: pb::SourceType::Github as i32,
                grant: vec!["forge".into()],
                ..Default::default()
            })
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    // Refused before anything was touched.
    assert_eq!(version_and_history(&api.store, &w).await, (1, 1));
    assert_eq!(
        api.store.list_webhooks(&alice).await.expect("list").len(),
        1
    );

    let me = ok(c.identity.who_am_i(pb::WhoAmIRequest::default()).await);
    assert_eq!(
        me.verbs,
        vec![
            "get_webhook",
            "list_todos",
            "claim_todo",
            "release_todo",
            "complete_todo"
        ]
    );
    assert_eq!(me.usable_verbs, me.verbs);
    assert_eq!(
        (me.human.as_str(), me.owner_scope.as_str(), me.role.as_str()),
        ("alice", "human:alice", "admin")
    );
}

async fn roles_gate_every_verb(api: Api) {
    let store = &api.store;
    for login in ["dana", "ed", "vic"] {
        human(store, login).await;
    }
    store.create_team("ops", "Operations").await.expect("team");
    for (login, role) in [
        ("dana", Role::Admin),
        ("ed", Role::Editor),
        ("vic", Role::Viewer),
    ] {
        store
            .set_membership("ops", login, role)
            .await
            .expect("membership");
    }
    let ops = OwnerScope::team("ops");
    let w = webhook(store, &ops).await;
    let event = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let todo = todo_for(&api, &event, "forge").await;
    let admin = vend(store, "dana", &ops, &EVERY_FAMILY).await;
    let editor = vend(store, "ed", &ops, &EVERY_FAMILY).await;
    let viewer = vend(store, "vic", &ops, &EVERY_FAMILY).await;
    let create = || pb::CreateWebhookRequest {
        source_type: pb::SourceType::Gitea as i32,
        grant: vec!["forge".into()],
        ..Default::default()
    };

    // Viewer: reads only.
    let mut v = api.client(&viewer);
    assert_eq!(
        ok(v.webhooks
            .list_webhooks(pb::ListWebhooksRequest::default())
            .await)
        .webhooks
        .len(),
        1
    );
    ok(v.rules
        .list_webhook_rules(pb::ListWebhookRulesRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    ok(v.webhooks
        .get_webhook_event(pb::GetWebhookEventRequest {
            event_id: event.id.clone(),
            ..Default::default()
        })
        .await);
    let denied = refused(
        v.rules
            .set_webhook_rules(set(&w.id, routes_prs_to_review(), None))
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    assert!(denied.message().contains("editor"), "{}", denied.message());
    refused(
        v.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                event_id: event.id.clone(),
                ..Default::default()
            })
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    refused(
        v.todos
            .claim_todo(pb::ClaimTodoRequest {
                todo_id: todo.id.clone(),
            })
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    refused(
        v.todos
            .release_todo(pb::ReleaseTodoRequest {
                todo_id: todo.id.clone(),
            })
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    refused(
        v.webhooks.create_webhook(create()).await,
        Code::PermissionDenied,
        "permission_denied",
    );
    let me = ok(v.identity.who_am_i(pb::WhoAmIRequest::default()).await);
    assert_eq!(me.role, "viewer");
    assert!(
        me.usable_verbs
            .iter()
            .all(|v| v.starts_with("list_") || v.starts_with("get_") || v.starts_with("explain_")),
        "{:?}",
        me.usable_verbs
    );
    assert_eq!(me.verbs.len(), switchboard_model::Verb::ALL.len());

    // Editor: rules, dry runs and todos, but not webhooks themselves.
    let mut e = api.client(&editor);
    assert_eq!(
        ok(e.rules
            .set_webhook_rules(set(&w.id, routes_prs_to_review(), None))
            .await)
        .version,
        2
    );
    ok(e.todos
        .claim_todo(pb::ClaimTodoRequest {
            todo_id: todo.id.clone(),
        })
        .await);
    ok(e.todos
        .release_todo(pb::ReleaseTodoRequest {
            todo_id: todo.id.clone(),
        })
        .await);
    let denied = refused(
        e.webhooks.create_webhook(create()).await,
        Code::PermissionDenied,
        "permission_denied",
    );
    assert!(denied.message().contains("admin"), "{}", denied.message());
    refused(
        e.webhooks
            .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
                webhook_id: w.id.clone(),
                secret: None,
            })
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    refused(
        e.webhooks
            .delete_webhook(pb::DeleteWebhookRequest {
                webhook_id: w.id.clone(),
            })
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );

    // Admin: manages webhooks, in the team's scope, within the queues an operator allowed it.
    store
        .set_grant_allowance(&ops, &["forge".to_string()])
        .await
        .expect("allow");
    let mut a = api.client(&admin);
    let created = ok(a.webhooks.create_webhook(create()).await);
    assert_eq!(created.webhook.expect("webhook").owner_scope, "team:ops");
    ok(a.webhooks
        .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
            webhook_id: w.id.clone(),
            secret: None,
        })
        .await);

    // A human who leaves the team takes every verb of their endpoint along.
    store.remove_membership("ops", "ed").await.expect("leave");
    let denied = refused(
        e.webhooks
            .list_webhooks(pb::ListWebhooksRequest::default())
            .await,
        Code::PermissionDenied,
        "permission_denied",
    );
    assert!(denied.message().contains("no role"), "{}", denied.message());
    let me = ok(e.identity.who_am_i(pb::WhoAmIRequest::default()).await);
    assert_eq!((me.role.as_str(), me.usable_verbs.len()), ("", 0));
}

// ---------------------------------------------------------------------------------------
// Tenancy
// ---------------------------------------------------------------------------------------

/// The status of a call that must fail.
#[track_caller]
fn status_of<T: Debug>(result: Result<Response<T>, Status>) -> Status {
    match result {
        Ok(r) => panic!("expected a refusal, got {:?}", r.into_inner()),
        Err(s) => s,
    }
}

/// Asserts every status is the same `not_found` for `resource`: code, message and details.
#[track_caller]
fn one_not_found(verb: &str, resource: &str, statuses: &[(String, Status)]) {
    let want = format!("not_found: {resource} not found");
    for (case, s) in statuses {
        assert_eq!(
            (s.code(), s.message()),
            (Code::NotFound, want.as_str()),
            "{verb} with {case}"
        );
        assert_eq!(
            s.details(),
            statuses[0].1.details(),
            "{verb} with {case}: details differ"
        );
        assert_eq!(reason_of(s), "not_found");
    }
}

async fn other_scopes_unknown_and_malformed_ids_are_one_not_found(api: Api) {
    let alice = human(&api.store, "alice").await;
    let bob = human(&api.store, "bob").await;
    let alice_credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let mine = webhook(&api.store, &alice).await;
    let theirs = webhook(&api.store, &bob).await;
    let rules = json!({"rules": [{"id": "r-1", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}}], "params": {}});
    seed_configuration(&api.store, &mine, rules.clone(), None).await;
    seed_configuration(&api.store, &theirs, rules.clone(), None).await;
    let my_event = github_event(&api, &mine, "pull_request.opened.json", 1).await;
    let their_event = github_event(&api, &theirs, "pull_request.opened.json", 2).await;
    let my_todo = todo_for(&api, &my_event, "forge").await;
    let their_todo = todo_for(&api, &their_event, "forge").await;
    let their_before = api
        .store
        .get_webhook(&bob, &theirs.id)
        .await
        .expect("theirs");
    let mut c = api.client(&alice_credential);

    let webhook_ids = [
        ("another scope's id", theirs.id.clone()),
        ("an unknown id", format!("wh_{}", "0".repeat(32))),
        (
            "a malformed id",
            "wh_'; DROP TABLE webhooks; --".to_string(),
        ),
        ("an empty id", String::new()),
    ];
    let mut by_verb: Vec<(&str, Vec<(String, Status)>)> = vec![
        ("get_webhook", vec![]),
        ("rotate_webhook_secret", vec![]),
        ("delete_webhook", vec![]),
        ("list_webhook_events", vec![]),
        ("list_webhook_rules", vec![]),
        ("set_webhook_rules", vec![]),
        ("update_webhook_rule", vec![]),
        ("delete_webhook_rule", vec![]),
        ("test_webhook_rules", vec![]),
        ("list_webhook_history", vec![]),
    ];
    for (case, id) in &webhook_ids {
        let statuses = [
            status_of(
                c.webhooks
                    .get_webhook(pb::GetWebhookRequest {
                        webhook_id: id.clone(),
                    })
                    .await,
            ),
            status_of(
                c.webhooks
                    .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
                        webhook_id: id.clone(),
                        secret: None,
                    })
                    .await,
            ),
            status_of(
                c.webhooks
                    .delete_webhook(pb::DeleteWebhookRequest {
                        webhook_id: id.clone(),
                    })
                    .await,
            ),
            status_of(
                c.webhooks
                    .list_webhook_events(pb::ListWebhookEventsRequest {
                        webhook_id: id.clone(),
                        ..Default::default()
                    })
                    .await,
            ),
            status_of(
                c.rules
                    .list_webhook_rules(pb::ListWebhookRulesRequest {
                        webhook_id: id.clone(),
                    })
                    .await,
            ),
            status_of(
                c.rules
                    .set_webhook_rules(set(id, rules.clone(), None))
                    .await,
            ),
            status_of(
                c.rules
                    .update_webhook_rule(update(id, "r-1", json!({"when": "false"}), None))
                    .await,
            ),
            status_of(
                c.rules
                    .delete_webhook_rule(delete_rule(id, "r-1", None))
                    .await,
            ),
            status_of(
                c.rules
                    .test_webhook_rules(pb::TestWebhookRulesRequest {
                        webhook_id: id.clone(),
                        event_id: their_event.id.clone(),
                        ..Default::default()
                    })
                    .await,
            ),
            status_of(
                c.rules
                    .list_webhook_history(pb::ListWebhookHistoryRequest {
                        webhook_id: id.clone(),
                        ..Default::default()
                    })
                    .await,
            ),
        ];
        for ((_, seen), s) in by_verb.iter_mut().zip(statuses) {
            seen.push((case.to_string(), s));
        }
    }
    for (verb, statuses) in &by_verb {
        one_not_found(verb, "webhook", statuses);
    }

    let event_ids = [
        ("another scope's id", their_event.id.clone()),
        ("an unknown id", format!("ev_{}", "0".repeat(32))),
        ("a malformed id", "ev_' OR '1'='1".to_string()),
        ("an empty id", String::new()),
    ];
    let mut get_event = vec![];
    let mut get_event_of_mine = vec![];
    let mut dry_run = vec![];
    let mut explain = vec![];
    for (case, id) in &event_ids {
        explain.push((
            case.to_string(),
            status_of(
                c.webhooks
                    .explain_webhook_event(pb::ExplainWebhookEventRequest {
                        event_id: id.clone(),
                    })
                    .await,
            ),
        ));
        get_event.push((
            case.to_string(),
            status_of(
                c.webhooks
                    .get_webhook_event(pb::GetWebhookEventRequest {
                        event_id: id.clone(),
                        webhook_id: String::new(),
                    })
                    .await,
            ),
        ));
        get_event_of_mine.push((
            case.to_string(),
            status_of(
                c.webhooks
                    .get_webhook_event(pb::GetWebhookEventRequest {
                        event_id: id.clone(),
                        webhook_id: mine.id.clone(),
                    })
                    .await,
            ),
        ));
        // An empty event_id is no event named at all: that is a bad argument, tested below.
        if !id.is_empty() {
            dry_run.push((
                case.to_string(),
                status_of(
                    c.rules
                        .test_webhook_rules(pb::TestWebhookRulesRequest {
                            webhook_id: mine.id.clone(),
                            event_id: id.clone(),
                            ..Default::default()
                        })
                        .await,
                ),
            ));
        }
    }
    // My own event named under a webhook it is not on reads like any other missing event.
    get_event.push((
        "my event under another webhook".into(),
        status_of(
            c.webhooks
                .get_webhook_event(pb::GetWebhookEventRequest {
                    event_id: my_event.id.clone(),
                    webhook_id: theirs.id.clone(),
                })
                .await,
        ),
    ));
    one_not_found("get_webhook_event", "event", &get_event);
    one_not_found(
        "get_webhook_event (webhook given)",
        "event",
        &get_event_of_mine,
    );
    one_not_found("test_webhook_rules (event_id)", "event", &dry_run);
    one_not_found("explain_webhook_event", "event", &explain);

    let todo_ids = [
        ("another scope's id", their_todo.id.clone()),
        ("an unknown id", format!("td_{}", "0".repeat(32))),
        ("a malformed id", "td_%00\u{1}".to_string()),
        ("an empty id", String::new()),
    ];
    let mut claims = vec![];
    let mut releases = vec![];
    let mut completions = vec![];
    for (case, id) in &todo_ids {
        releases.push((
            case.to_string(),
            status_of(
                c.todos
                    .release_todo(pb::ReleaseTodoRequest {
                        todo_id: id.clone(),
                    })
                    .await,
            ),
        ));
        claims.push((
            case.to_string(),
            status_of(
                c.todos
                    .claim_todo(pb::ClaimTodoRequest {
                        todo_id: id.clone(),
                    })
                    .await,
            ),
        ));
        completions.push((
            case.to_string(),
            status_of(
                c.todos
                    .complete_todo(pb::CompleteTodoRequest {
                        todo_id: id.clone(),
                    })
                    .await,
            ),
        ));
    }
    one_not_found("claim_todo", "todo", &claims);
    one_not_found("release_todo", "todo", &releases);
    one_not_found("complete_todo", "todo", &completions);

    // Nothing of bob's moved, and nothing of bob's is listed for alice.
    let their_after = api
        .store
        .get_webhook(&bob, &theirs.id)
        .await
        .expect("still there");
    assert_eq!(
        (
            their_after.config_version,
            &their_after.secret,
            &their_after.configuration
        ),
        (
            their_before.config_version,
            &their_before.secret,
            &their_before.configuration
        )
    );
    let their_todo_after = api
        .store
        .get_todo(&bob, &their_todo.id)
        .await
        .expect("todo");
    assert_eq!(their_todo_after, their_todo);
    api.store
        .get_event(&bob, &their_event.id)
        .await
        .expect("event");
    let listed = ok(c
        .webhooks
        .list_webhooks(pb::ListWebhooksRequest::default())
        .await);
    assert_eq!(
        listed
            .webhooks
            .iter()
            .map(|w| w.id.as_str())
            .collect::<Vec<_>>(),
        vec![mine.id.as_str()]
    );
    let todos = ok(c
        .todos
        .list_todos(pb::ListTodosRequest {
            queue: "forge".into(),
            filter: pb::TodoFilter::All as i32,
            ..Default::default()
        })
        .await);
    assert_eq!(
        todos
            .todos
            .iter()
            .map(|t| t.id.as_str())
            .collect::<Vec<_>>(),
        vec![my_todo.id.as_str()]
    );

    // The same calls on alice's own ids work, so the refusals above are about scope.
    ok(c.webhooks
        .get_webhook(pb::GetWebhookRequest {
            webhook_id: mine.id.clone(),
        })
        .await);
    ok(c.webhooks
        .get_webhook_event(pb::GetWebhookEventRequest {
            event_id: my_event.id.clone(),
            webhook_id: mine.id.clone(),
        })
        .await);
    ok(c.rules
        .update_webhook_rule(update(&mine.id, "r-1", json!({"when": "false"}), None))
        .await);
    ok(c.todos
        .claim_todo(pb::ClaimTodoRequest {
            todo_id: my_todo.id.clone(),
        })
        .await);
}

// ---------------------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------------------

async fn set_rules_mints_ids_and_records_history(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let endpoint = api
        .store
        .authenticate(&credential)
        .await
        .expect("lookup")
        .expect("known");
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);
    let config = json!({
        "rules": [
            {"when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
            {"id": "r-1", "description": "new issues", "when": ".kind == \"issues.opened\"", "action": {"queue": "triage"}},
            {"when": ".verified | not", "action": {"drop": true}}
        ],
        "params": {"bots": ["dependabot[bot]"]}
    });

    let saved = ok(c
        .rules
        .set_webhook_rules(set(&w.id, config.clone(), None))
        .await);
    assert_eq!(saved.minted_rule_ids, vec!["r-2", "r-3"]);
    assert_eq!((saved.version, saved.duplicate), (2, false));
    assert_eq!(
        rule_ids(&crate::support::typed::config_text(&saved.configuration)),
        vec!["r-2", "r-1", "r-3"]
    );
    assert_eq!(saved.digest.len(), 64);

    let listed = ok(c
        .rules
        .list_webhook_rules(pb::ListWebhookRulesRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    assert_eq!(
        (
            listed.version,
            &listed.digest,
            json_of(&crate::support::typed::config_text(&listed.configuration))
        ),
        (
            2,
            &saved.digest,
            json_of(&crate::support::typed::config_text(&saved.configuration))
        )
    );
    assert_eq!(listed.grant, GRANT);
    assert_eq!(
        json_of(&crate::support::typed::packs_text(&listed.installed_packs)),
        json!([])
    );
    assert!(listed.trusted_actors_capability);

    // The same id-less input mints the same ids: nothing to save.
    let again = ok(c.rules.set_webhook_rules(set(&w.id, config, None)).await);
    assert_eq!(
        (
            again.duplicate,
            again.version,
            &again.digest,
            &again.minted_rule_ids
        ),
        (true, 2, &saved.digest, &saved.minted_rule_ids)
    );
    // So is the saved configuration sent back as it was listed.
    let same = ok(c
        .rules
        .set_webhook_rules(pb::SetWebhookRulesRequest {
            webhook_id: w.id.clone(),
            configuration: listed.configuration.clone(),
            expected_version: Some(2),
        })
        .await);
    assert!(same.duplicate && same.minted_rule_ids.is_empty());

    let history = ok(c
        .rules
        .list_webhook_history(pb::ListWebhookHistoryRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await)
    .records;
    assert_eq!(
        history.iter().map(|h| h.version).collect::<Vec<_>>(),
        vec![2, 1]
    );
    let v2 = &history[0];
    assert_eq!(
        (v2.actor_endpoint_id.as_str(), v2.actor_human.as_str()),
        (endpoint.id.as_str(), "alice")
    );
    assert_eq!(
        json_of(&crate::support::typed::change_text(&v2.change)),
        json!({"op": "set_webhook_rules", "minted_rule_ids": ["r-2", "r-3"]})
    );
    assert_eq!(v2.digest_before, history[1].digest_after);
    assert_eq!(v2.digest_after, saved.digest);
    assert_eq!(
        json_of(&crate::support::typed::config_text(&v2.configuration)),
        json_of(&crate::support::typed::config_text(&saved.configuration))
    );
    assert_eq!(
        json_of(&crate::support::typed::change_text(&history[1].change))["op"],
        "create_webhook"
    );
    assert_eq!(history[1].digest_before, "");
}

async fn every_problem_is_reported_at_once(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);
    let bad = json!({
        "rules": [
            {"id": "reads-input", "when": "input", "action": {"drop": true}},
            {"id": "Bad_Id", "when": "true", "action": {"drop": true}},
            {"id": "dup", "when": "true", "action": {"drop": true}},
            {"id": "dup", "when": ".kind == \"push\"", "action": {"drop": true}},
            {"id": "widen", "when": "true", "action": {"queue": "payroll"}},
            {"id": "mine--pack", "when": "true", "action": {"drop": true}},
            {"id": "loops", "when": "def f: f; f", "action": {"drop": true}},
            {"id": "long", "when": format!(".kind == \"{}\"", "x".repeat(5000)), "action": {"drop": true}},
            {"when": "env.HOME", "action": {"drop": true}}
        ],
        "default_action": {"queue": "elsewhere"},
        "params": {"big": "x".repeat(70_000)}
    });
    let found = problems(c.rules.set_webhook_rules(set(&w.id, bad, None)).await);
    let found_codes = codes(&found);
    for want in [
        "forbidden_builtin",
        "invalid_rule_id",
        "duplicate_rule_id",
        "not_granted",
        "reserved_rule_id",
        "forbidden_syntax",
        "expression_too_long",
        "params_too_large",
    ] {
        assert!(
            found_codes.iter().any(|c| c == want),
            "{want} not in {found_codes:?}"
        );
    }
    assert_eq!(
        found_codes.iter().filter(|c| *c == "not_granted").count(),
        2,
        "{found:#?}"
    );
    // Each names where it is; the minted id of the id-less rule is named too.
    let fields: Vec<&str> = found.iter().filter_map(|p| p["field"].as_str()).collect();
    for want in [
        "rules[1].id",
        "rules[3].id",
        "rules[4].action",
        "rules[5].id",
        "default_action",
        "params",
    ] {
        assert!(fields.contains(&want), "{want} not in {fields:?}");
    }
    assert!(
        found
            .iter()
            .any(|p| p["rule_id"] == "r-9" && p["rule_index"] == 8),
        "{found:#?}"
    );

    // Too many rules is one more problem among the others.
    let rules: Vec<Value> = (0..33)
        .map(|i| json!({"id": format!("rule-{i}"), "when": if i == 0 { "inputs" } else { "true" }, "action": {"drop": true}}))
        .collect();
    let found = codes(&problems(
        c.rules
            .set_webhook_rules(set(&w.id, json!({"rules": rules}), None))
            .await,
    ));
    assert!(
        found.contains(&"too_many_rules".to_string())
            && found.contains(&"forbidden_builtin".to_string()),
        "{found:?}"
    );

    // No configuration at all. (A JSON shape that is no configuration never reaches control:
    // the gateway reads an agent's JSON into the message and refuses it, tested there.)
    invalid(
        c.rules
            .set_webhook_rules(pb::SetWebhookRulesRequest {
                webhook_id: w.id.clone(),
                configuration: None,
                expected_version: None,
            })
            .await,
        "configuration",
    );
    assert_eq!(
        version_and_history(&api.store, &w).await,
        (1, 1),
        "nothing was saved"
    );
}

async fn pack_rule_ids_are_reserved(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);

    let by_hand =
        json!({"rules": [{"id": "drop-ci-noise--bots", "when": "true", "action": {"drop": true}}]});
    let found = problems(
        c.rules
            .set_webhook_rules(set(&w.id, by_hand.clone(), None))
            .await,
    );
    assert_eq!(codes(&found), vec!["reserved_rule_id"]);
    assert_eq!(
        (found[0]["field"].as_str(), found[0]["rule_index"].as_i64()),
        (Some("rules[0].id"), Some(0))
    );

    // A confirmed pack install put this rule on the webhook: it can be edited and removed.
    let installed = json!({"rules": [{"id": "drop-ci-noise--bots", "when": ".payload.sender.type == \"Bot\"", "action": {"drop": true}}], "params": {}});
    seed_configuration(
        &api.store, &w, installed,
        // Which rules a pack installed is in their ids (`<pack>--`); no provenance needed.
        None,
    )
    .await;
    let edited = ok(c
        .rules
        .update_webhook_rule(update(
            &w.id,
            "drop-ci-noise--bots",
            json!({"description": "edited by hand"}),
            None,
        ))
        .await);
    assert_eq!(edited.version, 3);
    let mut kept = json_of(&crate::support::typed::config_text(&edited.configuration));
    kept["rules"]
        .as_array_mut()
        .expect("rules")
        .push(json!({"when": ".kind == \"push\"", "action": {"queue": "forge"}}));
    let with_mine = ok(c.rules.set_webhook_rules(set(&w.id, kept, Some(3))).await);
    assert_eq!(with_mine.minted_rule_ids, vec!["r-2"]);
    let renamed = problems(
        c.rules
            .update_webhook_rule(update(&w.id, "r-2", json!({"id": "mine--push"}), None))
            .await,
    );
    assert_eq!(codes(&renamed), vec!["reserved_rule_id"]);
    ok(c.rules
        .delete_webhook_rule(delete_rule(&w.id, "drop-ci-noise--bots", None))
        .await);
    // Once removed, it cannot come back by hand.
    let found = problems(c.rules.set_webhook_rules(set(&w.id, by_hand, None)).await);
    assert_eq!(codes(&found), vec!["reserved_rule_id"]);
    assert_eq!(version_and_history(&api.store, &w).await, (5, 5));
}

async fn rules_cannot_widen_the_grant(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);

    let found = problems(
        c.rules
            .set_webhook_rules(set(
                &w.id,
                json!({"rules": [{"when": "true", "action": {"queue": "payroll"}}]}),
                None,
            ))
            .await,
    );
    assert_eq!(codes(&found), vec!["not_granted"]);
    assert_eq!(found[0]["field"], "rules[0].action");
    let found = problems(
        c.rules
            .set_webhook_rules(set(
                &w.id,
                json!({"rules": [], "default_action": {"queue": "payroll"}}),
                None,
            ))
            .await,
    );
    assert_eq!(
        (codes(&found), found[0]["field"].clone()),
        (vec!["not_granted".to_string()], json!("default_action"))
    );

    let inside = json!({"rules": [
        {"id": "to-triage", "when": ".kind == \"issues.opened\"", "action": {"queue": "triage"}},
        {"id": "hold", "when": ".verified | not", "action": {"quarantine": true}}
    ], "default_action": {"queue": "review"}});
    assert_eq!(
        ok(c.rules.set_webhook_rules(set(&w.id, inside, None)).await).version,
        2
    );
    let found = problems(
        c.rules
            .update_webhook_rule(update(
                &w.id,
                "to-triage",
                json!({"action": {"queue": "payroll"}}),
                None,
            ))
            .await,
    );
    assert_eq!(codes(&found), vec!["not_granted"]);
    assert_eq!(version_and_history(&api.store, &w).await, (2, 2));
}

async fn expected_version_guards_every_write(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);

    assert_eq!(
        ok(c.rules
            .set_webhook_rules(set(&w.id, routes_prs_to_review(), Some(1)))
            .await)
        .version,
        2
    );
    let stale = refused(
        c.rules
            .set_webhook_rules(set(&w.id, json!({"rules": []}), Some(1)))
            .await,
        Code::Aborted,
        "version_mismatch",
    );
    assert!(stale.message().contains("version 2"), "{}", stale.message());
    assert_eq!(
        stale
            .get_error_details()
            .error_info()
            .map(|i| i.metadata["current_version"].clone()),
        Some("2".to_string())
    );
    // RFC-0003: duplicates are checked before expected_version, so the retry of the save
    // that succeeded (same configuration, the version it started from) is a duplicate.
    let retried = ok(c
        .rules
        .set_webhook_rules(set(&w.id, routes_prs_to_review(), Some(1)))
        .await);
    assert!(retried.duplicate, "{retried:?}");
    assert_eq!(retried.version, 2);
    refused(
        c.rules
            .update_webhook_rule(update(&w.id, "prs", json!({"when": "false"}), Some(1)))
            .await,
        Code::Aborted,
        "version_mismatch",
    );
    refused(
        c.rules
            .delete_webhook_rule(delete_rule(&w.id, "prs", Some(7)))
            .await,
        Code::Aborted,
        "version_mismatch",
    );
    assert_eq!(version_and_history(&api.store, &w).await, (2, 2));
    let updated = ok(c
        .rules
        .update_webhook_rule(update(&w.id, "prs", json!({"when": "false"}), Some(2)))
        .await);
    assert_eq!(updated.version, 3);
    let deleted = ok(c
        .rules
        .delete_webhook_rule(delete_rule(&w.id, "prs", Some(3)))
        .await);
    assert_eq!(
        (
            deleted.version,
            rule_ids(&crate::support::typed::config_text(&deleted.configuration)).len()
        ),
        (4, 0)
    );
}

async fn rules_are_updated_and_deleted_by_id(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);
    let first = ok(c.rules
        .set_webhook_rules(set(
            &w.id,
            json!({"rules": [
                {"when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
                {"description": "issues", "when": ".kind == \"issues.opened\"", "action": {"queue": "triage"}}
            ]}),
            None,
        ))
        .await);
    assert_eq!(first.minted_rule_ids, vec!["r-1", "r-2"]);

    let updated = ok(c
        .rules
        .update_webhook_rule(update(
            &w.id,
            "r-1",
            json!({"when": ".kind == \"pull_request.reopened\""}),
            None,
        ))
        .await);
    assert_eq!(updated.version, 3);
    let config = json_of(&crate::support::typed::config_text(&updated.configuration));
    assert_eq!(
        config["rules"][0]["when"],
        ".kind == \"pull_request.reopened\""
    );
    assert_eq!(config["rules"][0]["action"], json!({"queue": "review"}));

    let renamed = ok(c
        .rules
        .update_webhook_rule(update(
            &w.id,
            "r-2",
            json!({"id": "triage-issues", "description": null}),
            None,
        ))
        .await);
    assert_eq!(
        rule_ids(&crate::support::typed::config_text(&renamed.configuration)),
        vec!["r-1", "triage-issues"]
    );
    assert!(
        json_of(&crate::support::typed::config_text(&renamed.configuration))["rules"][1]
            .get("description")
            .is_none()
    );

    let unchanged = ok(c
        .rules
        .update_webhook_rule(update(&w.id, "r-1", json!({}), None))
        .await);
    assert_eq!((unchanged.duplicate, unchanged.version), (true, 4));

    let missing = refused(
        c.rules
            .update_webhook_rule(update(&w.id, "nope", json!({"when": "true"}), None))
            .await,
        Code::NotFound,
        "not_found",
    );
    assert_eq!(missing.message(), "not_found: rule not found");
    invalid(
        c.rules
            .update_webhook_rule(pb::UpdateWebhookRuleRequest {
                webhook_id: w.id.clone(),
                rule_id: "r-1".into(),
                patch: Some(pb::RulePatch {
                    action: Some("default".into()),
                    ..Default::default()
                }),
                expected_version: None,
            })
            .await,
        "patch",
    );
    let problems_found = problems(
        c.rules
            .update_webhook_rule(update(&w.id, "r-1", json!({"when": "halt"}), None))
            .await,
    );
    assert_eq!(problems_found[0]["rule_id"], "r-1");

    let deleted = ok(c
        .rules
        .delete_webhook_rule(delete_rule(&w.id, "r-1", None))
        .await);
    assert_eq!(
        (
            deleted.version,
            rule_ids(&crate::support::typed::config_text(&deleted.configuration))
        ),
        (5, vec!["triage-issues".to_string()])
    );
    refused(
        c.rules
            .delete_webhook_rule(delete_rule(&w.id, "r-1", None))
            .await,
        Code::NotFound,
        "not_found",
    );

    let history = ok(c
        .rules
        .list_webhook_history(pb::ListWebhookHistoryRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await)
    .records;
    let changes: Vec<Value> = history
        .iter()
        .map(|h| json_of(&crate::support::typed::change_text(&h.change)))
        .collect();
    assert_eq!(
        changes[0],
        json!({"op": "delete_webhook_rule", "rule_id": "r-1"})
    );
    assert_eq!(
        changes[1],
        json!({"op": "update_webhook_rule", "rule_id": "r-2", "fields": ["description", "id"], "new_rule_id": "triage-issues"})
    );
    assert_eq!(
        changes[2],
        json!({"op": "update_webhook_rule", "rule_id": "r-1", "fields": ["when"]})
    );
}

async fn history_lists_newest_first_in_pages(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let mut c = api.client(&credential);
    for queue in ["forge", "review", "triage", "forge"] {
        api.clock.advance(Duration::from_secs(1));
        ok(c.rules
            .set_webhook_rules(set(
                &w.id,
                json!({"rules": [], "default_action": {"queue": queue}}),
                None,
            ))
            .await);
    }
    let mut versions = vec![];
    let mut records = vec![];
    let mut cursor = String::new();
    loop {
        let page = ok(c
            .rules
            .list_webhook_history(pb::ListWebhookHistoryRequest {
                webhook_id: w.id.clone(),
                cursor: cursor.clone(),
                limit: 2,
            })
            .await);
        assert!(page.records.len() <= 2);
        versions.push(page.records.iter().map(|r| r.version).collect::<Vec<_>>());
        records.extend(page.records);
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    assert_eq!(versions, vec![vec![5, 4], vec![3, 2], vec![1]]);
    for pair in records.windows(2) {
        assert_eq!(pair[0].digest_before, pair[1].digest_after, "digests chain");
        assert!(ms(&pair[0].saved_at) > ms(&pair[1].saved_at));
    }
    // Rolling back is saving an earlier version again.
    let v3 = records.iter().find(|r| r.version == 3).expect("v3");
    let back = ok(c
        .rules
        .set_webhook_rules(pb::SetWebhookRulesRequest {
            webhook_id: w.id.clone(),
            configuration: v3.configuration.clone(),
            expected_version: Some(5),
        })
        .await);
    assert_eq!((back.version, &back.digest), (6, &v3.digest_after));
    invalid(
        c.rules
            .list_webhook_history(pb::ListWebhookHistoryRequest {
                webhook_id: w.id.clone(),
                cursor: "not-a-cursor".into(),
                limit: 0,
            })
            .await,
        "cursor",
    );
    invalid(
        c.rules
            .list_webhook_history(pb::ListWebhookHistoryRequest {
                webhook_id: w.id.clone(),
                cursor: String::new(),
                limit: 201,
            })
            .await,
        "limit",
    );
}

/// Issue 19: a configuration given as a message is saved as the agent's JSON it stands for,
/// bad ones are refused naming the field, and listings, history and dry runs answer typed
/// messages that read back as the configuration saved.
async fn typed_configurations_decisions_and_history_read_back_as_saved(api: Api) {
    use switchboard_proto::convert::json;
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let pr = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let mut c = api.client(&credential);
    let config = json!({
        "rules": [
            {"id": "prs", "description": "pull requests", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
            {"when": ".verified | not", "action": {"drop": true}}
        ],
        "default_action": {"quarantine": true},
        "params": {"bots": ["dependabot[bot]"], "limit": 3}
    });
    let typed = json::configuration(&config);
    let saved = ok(c
        .rules
        .set_webhook_rules(pb::SetWebhookRulesRequest {
            webhook_id: w.id.clone(),
            configuration: Some(typed.clone()),
            ..Default::default()
        })
        .await);
    assert_eq!(saved.minted_rule_ids.len(), 1, "{saved:?}");
    let as_saved = json::configuration_json(saved.configuration.clone().expect("typed"));
    assert_eq!(as_saved["rules"][0], config["rules"][0]);
    assert_eq!(as_saved["rules"][1]["id"], saved.minted_rule_ids[0]);
    assert_eq!(as_saved["rules"][1]["when"], config["rules"][1]["when"]);
    assert_eq!(as_saved["default_action"], json!({"quarantine": true}));
    assert_eq!(as_saved["params"], config["params"]);

    let listed = ok(c
        .rules
        .list_webhook_rules(pb::ListWebhookRulesRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    assert_eq!(
        json::configuration_json(listed.configuration.clone().expect("typed")),
        as_saved
    );
    assert_eq!(listed.version, saved.version);

    let history = ok(c
        .rules
        .list_webhook_history(pb::ListWebhookHistoryRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await)
    .records;
    let newest = history.first().expect("a history record");
    assert_eq!(newest.version, saved.version);
    assert_eq!(
        json::change_json(newest.change.as_ref().expect("a change"))["op"],
        "set_webhook_rules"
    );
    assert_eq!(
        json::configuration_json(newest.configuration.clone().expect("typed")),
        as_saved
    );

    let tested = ok(c
        .rules
        .test_webhook_rules(pb::TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            event_id: pr.id.clone(),
            configuration: Some(json::configuration(&json!({"rules": [
                {"when": "true", "action": {"drop": true}}
            ]}))),
            ..Default::default()
        })
        .await);
    assert_eq!(
        json::decision_json(tested.saved_decision.as_ref().expect("a decision")),
        json!({"decision": "queue:review", "queue": "review", "rule_id": "prs"})
    );
    let candidate =
        json::configuration_json(tested.candidate_configuration.clone().expect("typed"));
    assert_eq!(candidate["rules"][0]["id"], tested.minted_rule_ids[0]);
    assert_eq!(
        tested
            .candidate_decision
            .as_ref()
            .map(|d| d.decision.as_str()),
        Some("drop")
    );

    // A label that is no action is refused, naming the field.
    let mut bad = typed.clone();
    bad.rules[0].action = "default".into();
    invalid(
        c.rules
            .set_webhook_rules(pb::SetWebhookRulesRequest {
                webhook_id: w.id.clone(),
                configuration: Some(bad),
                ..Default::default()
            })
            .await,
        "configuration",
    );
}

async fn dry_runs_route_events_and_payloads_and_write_nothing(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let other = webhook(&api.store, &alice).await;
    seed_configuration(&api.store, &w, routes_prs_to_review(), None).await;
    let pr = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let issue = github_event(&api, &w, "issues.opened.json", 2).await;
    let elsewhere = github_event(&api, &other, "pull_request.opened.json", 3).await;
    let before = version_and_history(&api.store, &w).await;
    let mut c = api.client(&credential);
    let drop_prs =
        json!({"rules": [{"when": ".kind == \"pull_request.opened\"", "action": {"drop": true}}]});

    // A stored event, saved and candidate side by side; the candidate's id-less rule is minted.
    let r = ok(c
        .rules
        .test_webhook_rules(pb::TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            event_id: pr.id.clone(),
            configuration: crate::support::typed::config(&drop_prs),
            ..Default::default()
        })
        .await);
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&r.saved_decision)),
        json!({"decision": "queue:review", "queue": "review", "rule_id": "prs"})
    );
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&r.candidate_decision)),
        json!({"decision": "drop", "rule_id": "r-1"})
    );
    assert!(r.changed);
    assert_eq!(
        (r.kind.as_str(), r.event_id.as_str(), r.saved_version),
        ("pull_request.opened", pr.id.as_str(), 2)
    );
    assert_eq!(r.minted_rule_ids, vec!["r-1"]);
    assert_eq!(
        rule_ids(&crate::support::typed::config_text(
            &r.candidate_configuration
        )),
        vec!["r-1"]
    );
    assert_eq!(r.candidate_digest.len(), 64);

    // The saved configuration alone.
    let r = ok(c
        .rules
        .test_webhook_rules(pb::TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            event_id: issue.id.clone(),
            ..Default::default()
        })
        .await);
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&r.saved_decision)),
        json!({"decision": "default", "queue": "forge"})
    );
    assert_eq!(
        (
            crate::support::typed::decision_text(&r.candidate_decision).as_str(),
            r.changed
        ),
        ("", false)
    );

    // A payload made up by the caller: the kind comes from its forge header and action.
    let comment = payload("github", "issue_comment.created.json");
    let r = ok(c.rules
        .test_webhook_rules(pb::TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            payload: Some(pb::TestPayload {
                payload_json: String::from_utf8(comment.body.clone()).expect("utf-8"),
                headers: vec![pb::Header {
                    name: "X-GitHub-Event".into(),
                    value: "issue_comment".into(),
                }],
                ..Default::default()
            }),
            configuration: crate::support::typed::config(&json!({"rules": [{"id": "comments", "when": ".kind == \"issue_comment.created\" and .payload.comment.user.login != null", "action": {"queue": "triage"}}]})),
            ..Default::default()
        })
        .await);
    assert_eq!(r.kind, "issue_comment.created");
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&r.saved_decision))["decision"],
        "default"
    );
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&r.candidate_decision)),
        json!({"decision": "queue:triage", "queue": "triage", "rule_id": "comments"})
    );
    // Unsigned, with an explicit kind; and a rule that faults says so.
    let r = ok(c
        .rules
        .test_webhook_rules(pb::TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            payload: Some(pb::TestPayload {
                payload_json: String::from_utf8(comment.body.clone()).expect("utf-8"),
                kind: "issue_comment.created".into(),
                verified: Some(false),
                ..Default::default()
            }),
            configuration: crate::support::typed::config(&json!({"rules": [
                {"id": "unsigned", "when": ".verified | not", "action": {"drop": true}}
            ]})),
            ..Default::default()
        })
        .await);
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&r.candidate_decision)),
        json!({"decision": "drop", "rule_id": "unsigned"})
    );
    let r = ok(c
        .rules
        .test_webhook_rules(pb::TestWebhookRulesRequest {
            webhook_id: w.id.clone(),
            event_id: pr.id.clone(),
            configuration: crate::support::typed::config(&json!({"rules": [
                {"id": "adds-text", "when": ".payload.number + \"x\"", "action": {"drop": true}}
            ]})),
            ..Default::default()
        })
        .await);
    let fault = json_of(&crate::support::typed::decision_text(&r.candidate_decision));
    assert_eq!(
        (fault["decision"].as_str(), fault["rule_id"].as_str()),
        (Some("fault"), Some("adds-text")),
        "{fault}"
    );
    assert!(r.changed);

    // Bad requests, each named.
    let both = pb::TestWebhookRulesRequest {
        webhook_id: w.id.clone(),
        event_id: pr.id.clone(),
        payload: Some(pb::TestPayload {
            payload_json: "{}".into(),
            kind: "push".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    invalid(c.rules.test_webhook_rules(both).await, "event_id");
    invalid(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                ..Default::default()
            })
            .await,
        "event_id",
    );
    // A replay answers the REQ-5 report (the rule-pack tests cover it) and writes nothing.
    let replay = pb::TestWebhookRulesRequest {
        webhook_id: w.id.clone(),
        replay: Some(pb::TestReplay {
            limit: 10,
            ..Default::default()
        }),
        ..Default::default()
    };
    let replayed = c
        .rules
        .test_webhook_rules(replay.clone())
        .await
        .expect("replay")
        .into_inner();
    assert!(crate::support::typed::replay_report(&replayed)["events_replayed"].is_u64());
    // Streamed, the same replay reports progress up to the window's total, then the report.
    let mut stream = c
        .rules
        .test_webhook_rules_stream(replay)
        .await
        .expect("streamed replay")
        .into_inner();
    let mut progress = Vec::new();
    let mut streamed = None;
    while let Some(event) = stream.message().await.expect("an event") {
        match event.event {
            Some(pb::test_webhook_rules_event::Event::Progress(p)) => {
                progress.push((p.replayed, p.total))
            }
            Some(pb::test_webhook_rules_event::Event::Result(r)) => streamed = Some(r),
            None => {}
        }
    }
    let streamed = streamed.expect("the stream ends with the response");
    let report = crate::support::typed::replay_report(&streamed);
    let replayed_count = report["events_replayed"].as_u64().expect("events_replayed");
    assert!(replayed_count > 0, "{report}");
    let last = progress.last().copied().expect("progress was reported");
    assert_eq!(last, (replayed_count, replayed_count), "{progress:?}");
    assert!(
        progress.windows(2).all(|w| w[0].0 <= w[1].0),
        "{progress:?}"
    );
    invalid(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                payload: Some(pb::TestPayload {
                    payload_json: "{not json".into(),
                    kind: "push".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await,
        "payload.payload_json",
    );
    invalid(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                payload: Some(pb::TestPayload {
                    payload_json: "{}".into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await,
        "payload.kind",
    );
    let found = problems(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                event_id: pr.id.clone(),
                configuration: crate::support::typed::config(
                    &json!({"rules": [{"when": "input", "action": {"queue": "payroll"}}]}),
                ),
                ..Default::default()
            })
            .await,
    );
    assert_eq!(found.len(), 2, "{found:#?}");
    // Another webhook's event, even the same owner's, is not this webhook's.
    let s = refused(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                event_id: elsewhere.id.clone(),
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "not_found",
    );
    assert_eq!(s.message(), "not_found: event not found");

    // Nothing was written: no version, no history, no todo, no decision on the events.
    assert_eq!(version_and_history(&api.store, &w).await, before);
    for queue in GRANT {
        let todos = api
            .store
            .list_todos(
                &alice,
                queue,
                switchboard_control::store::TodoFilter::All,
                &Page::default(),
            )
            .await
            .expect("todos");
        assert!(todos.items.is_empty(), "{queue}");
    }
    let events = api
        .store
        .list_events(&alice, &w.id, &Page::default())
        .await
        .expect("events");
    assert_eq!(events.items.len(), 2);
    assert!(
        events
            .items
            .iter()
            .all(|e| !e.routed && e.decision.is_none())
    );
}

// ---------------------------------------------------------------------------------------
// Webhooks and events
// ---------------------------------------------------------------------------------------

async fn webhooks_are_created_read_rotated_and_deleted(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let endpoint = api
        .store
        .authenticate(&credential)
        .await
        .expect("lookup")
        .expect("known");
    let mut c = api.client(&credential);
    api.store
        .set_grant_allowance(&alice, &["forge".into(), "review".into(), "triage".into()])
        .await
        .expect("allow");

    let created = ok(c
        .webhooks
        .create_webhook(pb::CreateWebhookRequest {
            source_type: pb::SourceType::Forgejo as i32,
            grant: vec!["forge".into(), "triage".into()],
            secret: None,
            reject_unverified: true,
            name: " payments (prod) ".into(),
        })
        .await);
    let w = created.webhook.clone().expect("webhook");
    assert_eq!(w.name, "payments (prod)", "a name is trimmed");
    assert_eq!(created.secret.len(), 64, "256 generated bits, hex");
    assert!(w.id.starts_with("wh_") && w.id.len() == 35, "{}", w.id);
    assert_eq!(w.ingest_path, format!("/hooks/{}", w.id));
    assert_eq!(
        (
            w.owner_scope.as_str(),
            w.source_type,
            w.default_queue.as_str(),
            w.config_version,
            w.reject_unverified
        ),
        (
            "human:alice",
            pb::SourceType::Forgejo as i32,
            "forge",
            1,
            true
        )
    );
    let stored_secret = api
        .store
        .get_webhook(&alice, &w.id)
        .await
        .expect("stored")
        .secret;
    assert_eq!(stored_secret, created.secret);
    api.clock.advance(Duration::from_secs(1));

    let given = ok(c
        .webhooks
        .create_webhook(pb::CreateWebhookRequest {
            source_type: pb::SourceType::Github as i32,
            grant: vec!["review".into()],
            secret: Some("a-forge-side-secret-0001".into()),
            reject_unverified: false,
            name: String::new(),
        })
        .await);
    assert_eq!(given.secret, "a-forge-side-secret-0001");
    assert_eq!(given.webhook.as_ref().expect("webhook").name, "", "unnamed");

    // Reads never carry a secret.
    let got = ok(c
        .webhooks
        .get_webhook(pb::GetWebhookRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    assert_eq!(got.webhook.as_ref(), Some(&w));
    let listed = ok(c
        .webhooks
        .list_webhooks(pb::ListWebhooksRequest::default())
        .await);
    assert_eq!(
        listed
            .webhooks
            .iter()
            .map(|x| x.id.as_str())
            .collect::<Vec<_>>(),
        vec![
            w.id.as_str(),
            given.webhook.as_ref().expect("webhook").id.as_str()
        ]
    );
    // In pages: the same webhooks, one at a time, the last page without a cursor.
    let first = ok(c
        .webhooks
        .list_webhooks(pb::ListWebhooksRequest {
            cursor: String::new(),
            limit: 1,
        })
        .await);
    assert_eq!(first.webhooks, listed.webhooks[..1]);
    assert!(!first.next_cursor.is_empty(), "a second page");
    let second = ok(c
        .webhooks
        .list_webhooks(pb::ListWebhooksRequest {
            cursor: first.next_cursor.clone(),
            limit: 1,
        })
        .await);
    assert_eq!(second.webhooks, listed.webhooks[1..]);
    assert_eq!(second.next_cursor, "", "the last page");
    assert_eq!(listed.next_cursor, "", "the unpaged answer is whole");
    invalid(
        c.webhooks
            .list_webhooks(pb::ListWebhooksRequest {
                cursor: "not-a-cursor".into(),
                limit: 1,
            })
            .await,
        "cursor",
    );
    invalid(
        c.webhooks
            .list_webhooks(pb::ListWebhooksRequest {
                cursor: String::new(),
                limit: 201,
            })
            .await,
        "limit",
    );
    let rules = ok(c
        .rules
        .list_webhook_rules(pb::ListWebhookRulesRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    for text in [
        format!("{got:?}"),
        format!("{listed:?}"),
        format!("{rules:?}"),
    ] {
        assert!(!text.contains(&created.secret) && !text.contains("a-forge-side-secret-0001"));
    }
    let history = api
        .store
        .list_history(&alice, &w.id, &Page::default())
        .await
        .expect("history");
    assert_eq!(
        history.items[0].actor.endpoint_id.as_deref(),
        Some(endpoint.id.as_str())
    );

    // Names (issue 48): an editor renames, a blank name clears, a bad one is refused on
    // `name` with nothing changed; the configuration does not move.
    let renamed = ok(c
        .webhooks
        .rename_webhook(pb::RenameWebhookRequest {
            webhook_id: w.id.clone(),
            name: "payments (staging)".into(),
        })
        .await);
    let renamed = renamed.webhook.expect("webhook");
    assert_eq!(
        (renamed.name.as_str(), renamed.config_version),
        ("payments (staging)", w.config_version)
    );
    for bad in ["two\nlines".to_string(), "x".repeat(81)] {
        invalid(
            c.webhooks
                .rename_webhook(pb::RenameWebhookRequest {
                    webhook_id: w.id.clone(),
                    name: bad,
                })
                .await,
            "name",
        );
    }
    invalid(
        c.webhooks
            .create_webhook(pb::CreateWebhookRequest {
                source_type: pb::SourceType::Github as i32,
                grant: vec!["forge".into()],
                name: "tab\there".into(),
                ..Default::default()
            })
            .await,
        "name",
    );
    assert_eq!(
        api.store
            .get_webhook(&alice, &w.id)
            .await
            .expect("stored")
            .display_name(),
        "payments (staging)"
    );
    let cleared = ok(c
        .webhooks
        .rename_webhook(pb::RenameWebhookRequest {
            webhook_id: w.id.clone(),
            name: "  ".into(),
        })
        .await);
    assert_eq!(cleared.webhook.expect("webhook").name, "");

    // Rotation returns the new secret once.
    let rotated = ok(c
        .webhooks
        .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
            webhook_id: w.id.clone(),
            secret: None,
        })
        .await);
    assert_ne!(rotated.secret, created.secret);
    assert_eq!(rotated.secret.len(), 64);
    assert_eq!(
        api.store
            .get_webhook(&alice, &w.id)
            .await
            .expect("stored")
            .secret,
        rotated.secret
    );
    let chosen = ok(c
        .webhooks
        .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
            webhook_id: w.id.clone(),
            secret: Some("another-forge-secret-02".into()),
        })
        .await);
    assert_eq!(chosen.secret, "another-forge-secret-02");
    invalid(
        c.webhooks
            .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
                webhook_id: w.id.clone(),
                secret: Some("short".into()),
            })
            .await,
        "secret",
    );

    // Bad arguments name their field.
    let create = |source_type: pb::SourceType, grant: &[&str], secret: Option<&str>| {
        pb::CreateWebhookRequest {
            source_type: source_type as i32,
            grant: grant.iter().map(|q| q.to_string()).collect(),
            secret: secret.map(str::to_string),
            reject_unverified: false,
            name: String::new(),
        }
    };
    invalid(
        c.webhooks
            .create_webhook(create(pb::SourceType::Github, &[], None))
            .await,
        "grant",
    );
    invalid(
        c.webhooks
            .create_webhook(create(pb::SourceType::Github, &["Not A Queue"], None))
            .await,
        "grant",
    );
    invalid(
        c.webhooks
            .create_webhook(create(pb::SourceType::Github, &["a", "a"], None))
            .await,
        "grant",
    );
    invalid(
        c.webhooks
            .create_webhook(create(pb::SourceType::Unspecified, &["forge"], None))
            .await,
        "source_type",
    );
    invalid(
        c.webhooks
            .create_webhook(pb::CreateWebhookRequest {
                source_type: 42,
                grant: vec!["forge".into()],
                ..Default::default()
            })
            .await,
        "source_type",
    );
    invalid(
        c.webhooks
            .create_webhook(create(pb::SourceType::Github, &["forge"], Some("short")))
            .await,
        "secret",
    );
    // Grants are an operator's (issue 18 item 9): a queue outside the scope's allowance is
    // refused with the queues named, and nothing is created.
    let outside = refused(
        c.webhooks
            .create_webhook(create(pb::SourceType::Github, &["forge", "pager"], None))
            .await,
        Code::PermissionDenied,
        "grant_not_allowed",
    );
    let info = outside
        .get_error_details()
        .error_info()
        .cloned()
        .expect("error info");
    assert_eq!(info.metadata["owner_scope"], "human:alice");
    let lists = switchboard_proto::refusal::refusal_of(&outside).expect("RefusalDetails");
    assert_eq!(lists.outside, ["pager"]);
    assert_eq!(lists.allowed, ["forge", "review", "triage"]);
    api.store
        .clear_grant_allowance(&alice)
        .await
        .expect("clear");
    let none = refused(
        c.webhooks
            .create_webhook(create(pb::SourceType::Github, &["forge"], None))
            .await,
        Code::PermissionDenied,
        "grant_not_allowed",
    );
    assert!(
        none.message()
            .contains("human:alice has no grant allowance"),
        "{}",
        none.message()
    );
    assert_eq!(
        api.store.list_webhooks(&alice).await.expect("list").len(),
        2
    );

    // Delete takes the webhook away.
    let deleted = ok(c
        .webhooks
        .delete_webhook(pb::DeleteWebhookRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    assert_eq!(deleted.webhook_id, w.id);
    refused(
        c.webhooks
            .get_webhook(pb::GetWebhookRequest {
                webhook_id: w.id.clone(),
            })
            .await,
        Code::NotFound,
        "not_found",
    );
    refused(
        c.webhooks
            .delete_webhook(pb::DeleteWebhookRequest {
                webhook_id: w.id.clone(),
            })
            .await,
        Code::NotFound,
        "not_found",
    );
    assert_eq!(
        ok(c.webhooks
            .list_webhooks(pb::ListWebhooksRequest::default())
            .await)
        .webhooks
        .len(),
        1
    );
}

/// Issue 16: the retention pass purges what is past the age in batches (never an event whose
/// todo is open), and `list_webhook_events` says which window remains.
async fn retention_purges_in_batches_and_listings_say_what_window_remains(api: Api) {
    use switchboard_control::retention::{RetentionOptions, purge_once};
    use switchboard_control::store::Retention;

    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let files = [
        "pull_request.opened.json",
        "issues.opened.json",
        "push.json",
        "status.json",
    ];
    let mut events = vec![];
    for (n, file) in files.iter().enumerate() {
        let e = github_event(&api, &w, file, n + 1).await;
        // The first has an open todo; the others were dropped.
        let todo = (n == 0).then(|| NewTodo {
            queue: "forge".into(),
            rule_id: None,
        });
        let decision = if todo.is_some() {
            "queue:forge"
        } else {
            "drop"
        };
        api.store
            .record_decision(
                &e.id,
                RecordDecision {
                    decision: RecordedDecision::new(decision.parse().expect("a label")),
                    fault: None,
                    todo,
                    decided_by: None,
                },
            )
            .await
            .expect("decided");
        events.push(e);
        api.clock.advance(Duration::from_secs(60));
    }
    let mut c = api.client(&credential);
    let listed = |c: &mut Clients| {
        let mut webhooks = c.webhooks.clone();
        let id = w.id.clone();
        async move {
            ok(webhooks
                .list_webhook_events(pb::ListWebhookEventsRequest {
                    webhook_id: id,
                    ..Default::default()
                })
                .await)
        }
    };
    let before = listed(&mut c).await;
    let window = before.retention.expect("the window is told");
    assert_eq!(window.max_age_ms, 30 * 86_400_000, "the documented default");
    assert_eq!(window.max_events_per_webhook, 100_000);
    assert_eq!(
        ms(&window.kept_since),
        Some(api.clock.now_ms() - 30 * 86_400_000)
    );
    assert_eq!(ms(&window.oldest_event_at), Some(events[0].received_at));

    // A pass with a 150 s age and batches of one: the oldest dropped event goes.
    let state = ControlState {
        trials: switchboard_control::trials::Trials::start(
            api.store.clone(),
            Routers::new(RouterSource::Static(vec![]), Duration::from_secs(1)).await,
            Default::default(),
        ),
        console_base: None,
        catalog: std::sync::Arc::new(switchboard_packs::Catalog::builtin()),
        store: api.store.clone(),
        routers: Routers::new(RouterSource::Static(vec![]), Duration::from_secs(1)).await,
        capabilities: Capabilities::default(),
        limits: Limits {
            retention: Retention {
                max_age: Duration::from_secs(150),
                max_events_per_webhook: 100_000,
            },
            ..Limits::default()
        },
    };
    let options = RetentionOptions {
        batch: 1,
        pause: Duration::ZERO,
        ..RetentionOptions::default()
    };
    // Two plans: one expired more than a day ago (past the grace), one live.
    for (token, expires_at) in [
        ("old", api.clock.now_ms() - 25 * 3_600_000),
        ("live", api.clock.now_ms() + 3_600_000),
    ] {
        api.store
            .insert_plan(switchboard_control::store::NewPlan {
                webhook_id: w.id.clone(),
                owner_scope: alice.clone(),
                token_hash: format!("hash-{token}"),
                pack_name: "drop-ci-noise".into(),
                pack_version: "2.0.0".into(),
                params_digest: String::new(),
                candidate: switchboard_model::Configuration::default(),
                base_config_version: 1,
                expires_at,
                plan: switchboard_model::plan::StoredPlan::default(),
            })
            .await
            .expect("a plan");
    }
    let purged = purge_once(&state, &options).await.expect("a pass");
    assert_eq!((purged.by_age, purged.by_count), (1, 0), "{purged:?}");
    assert_eq!(
        purged.plans, 1,
        "the plan a day past its expiry, not the live one"
    );
    assert!(api.store.plan_by_token("hash-live", &alice).await.is_ok());
    assert!(api.store.plan_by_token("hash-old", &alice).await.is_err());
    let after = listed(&mut c).await;
    let ids: Vec<&str> = after.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        [&events[3].id, &events[2].id, &events[0].id].map(String::as_str),
        "the todo's event stays past the age"
    );
    assert_eq!(
        ms(&after.retention.expect("told").oldest_event_at),
        Some(events[0].received_at)
    );
    // The count bound: one per webhook leaves the newest and the open todo's event.
    let state = ControlState {
        console_base: None,
        limits: Limits {
            retention: Retention {
                max_age: Duration::from_secs(86_400),
                max_events_per_webhook: 1,
            },
            ..Limits::default()
        },
        ..state
    };
    let purged = purge_once(&state, &options).await.expect("a pass");
    assert_eq!((purged.by_age, purged.by_count), (0, 1), "{purged:?}");
    let ids: Vec<String> = listed(&mut c)
        .await
        .events
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(ids, [events[3].id.clone(), events[0].id.clone()]);

    // Redrive plans: one never confirmed goes a day past its expiry; a confirmed one stays
    // (the record of what it replaced), and so does one not yet expired.
    let current = api.store.get_webhook(&alice, &w.id).await.expect("webhook");
    let redrive = |token: &str, expires_at: i64| switchboard_control::store::NewRedrive {
        webhook_id: w.id.clone(),
        owner_scope: alice.clone(),
        token_hash: format!("redrive-{token}"),
        base_config_version: current.config_version,
        base_config_digest: current.config_digest.clone(),
        entries: vec![],
        expires_at,
    };
    let soon = api.clock.now_ms() + 60_000;
    let confirmed = api
        .store
        .insert_redrive(redrive("confirmed", soon))
        .await
        .expect("a redrive");
    api.store
        .confirm_redrive(&alice, &w.id, "redrive-confirmed")
        .await
        .expect("confirmed");
    let abandoned = api
        .store
        .insert_redrive(redrive("abandoned", soon))
        .await
        .expect("a redrive");
    let live = api
        .store
        .insert_redrive(redrive("live", api.clock.now_ms() + 48 * 3_600_000))
        .await
        .expect("a redrive");
    api.clock.advance(Duration::from_secs(23 * 3600));
    let purged = purge_once(&state, &options).await.expect("a pass");
    assert_eq!(purged.redrives, 0, "still within the grace: {purged:?}");
    api.clock.advance(Duration::from_secs(2 * 3600));
    let purged = purge_once(&state, &options).await.expect("a pass");
    assert_eq!(purged.redrives, 1, "{purged:?}");
    assert!(api.store.get_redrive(&alice, &confirmed.id).await.is_ok());
    assert!(api.store.get_redrive(&alice, &live.id).await.is_ok());
    assert!(matches!(
        api.store.get_redrive(&alice, &abandoned.id).await,
        Err(switchboard_control::Error::NotFound { .. })
    ));
}

async fn events_list_newest_first_and_read_exactly(api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let other = webhook(&api.store, &alice).await;
    let files = [
        "pull_request.opened.json",
        "issues.opened.json",
        "push.json",
        "status.json",
        "check_run.completed.failure.json",
    ];
    let mut events = vec![];
    for (n, file) in files.iter().enumerate() {
        events.push(github_event(&api, &w, file, n + 1).await);
    }
    // A body that is not UTF-8 comes back byte for byte too.
    let raw = api
        .store
        .insert_event(NewEvent {
            webhook_id: w.id.clone(),
            delivery_id: "raw-1".into(),
            kind: "generic".into(),
            headers: vec![
                ("Content-Type".into(), "application/octet-stream".into()),
                ("X-Odd".into(), "  spaced  ".into()),
            ],
            body: vec![0xff, 0x00, 0xfe, b'{', 0x80].into(),
            verified: false,
        })
        .await
        .expect("raw event");
    api.store
        .record_decision(
            &events[0].id,
            RecordDecision {
                decision: RecordedDecision::new(Label::Drop).by_rule("r-1"),
                fault: None,
                todo: None,
                decided_by: None,
            },
        )
        .await
        .expect("decision");
    let mut c = api.client(&credential);

    let mut pages = vec![];
    let mut cursor = String::new();
    loop {
        let page = ok(c
            .webhooks
            .list_webhook_events(pb::ListWebhookEventsRequest {
                webhook_id: w.id.clone(),
                cursor: cursor.clone(),
                limit: 2,
            })
            .await);
        pages.push(page.events.iter().map(|e| e.id.clone()).collect::<Vec<_>>());
        if page.next_cursor.is_empty() {
            break;
        }
        cursor = page.next_cursor;
    }
    let newest_first: Vec<String> = std::iter::once(raw.id.clone())
        .chain(events.iter().rev().map(|e| e.id.clone()))
        .collect();
    assert_eq!(pages.concat(), newest_first);
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![2, 2, 2]
    );

    let all = ok(c
        .webhooks
        .list_webhook_events(pb::ListWebhookEventsRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await)
    .events;
    let first = all.iter().find(|e| e.id == events[0].id).expect("listed");
    assert_eq!(
        (
            first.kind.as_str(),
            first.source,
            first.verified,
            first.routed
        ),
        (
            "pull_request.opened",
            pb::SourceType::Github as i32,
            true,
            true
        )
    );
    assert_eq!(
        json_of(&crate::support::typed::decision_text(&first.decision)),
        json!({"decision": "drop", "rule_id": "r-1"})
    );
    assert_eq!(first.delivery_id, events[0].delivery_id);
    let unrouted = all.iter().find(|e| e.id == events[1].id).expect("listed");
    assert_eq!(
        (
            unrouted.routed,
            crate::support::typed::decision_text(&unrouted.decision).as_str()
        ),
        (false, "")
    );

    for e in events.iter().chain([&raw]) {
        let got = ok(c
            .webhooks
            .get_webhook_event(pb::GetWebhookEventRequest {
                event_id: e.id.clone(),
                webhook_id: w.id.clone(),
            })
            .await);
        assert_eq!(got.body.as_ref(), e.body.as_ref(), "{}", e.id);
        assert_eq!(
            got.headers
                .iter()
                .map(|h| (h.name.clone(), h.value.clone()))
                .collect::<Vec<_>>(),
            e.headers
        );
        assert_eq!(got.event.expect("summary").kind, e.kind);
    }
    assert_eq!(events[2].body, payload("github", "push.json").body);
    refused(
        c.webhooks
            .get_webhook_event(pb::GetWebhookEventRequest {
                event_id: events[0].id.clone(),
                webhook_id: other.id.clone(),
            })
            .await,
        Code::NotFound,
        "not_found",
    );
    invalid(
        c.webhooks
            .list_webhook_events(pb::ListWebhookEventsRequest {
                webhook_id: w.id.clone(),
                cursor: "garbage".into(),
                limit: 0,
            })
            .await,
        "cursor",
    );
    invalid(
        c.webhooks
            .list_webhook_events(pb::ListWebhookEventsRequest {
                webhook_id: w.id.clone(),
                cursor: String::new(),
                limit: 500,
            })
            .await,
        "limit",
    );
    let empty = ok(c
        .webhooks
        .list_webhook_events(pb::ListWebhookEventsRequest {
            webhook_id: other.id.clone(),
            ..Default::default()
        })
        .await);
    assert!(empty.events.is_empty() && empty.next_cursor.is_empty());
}

// ---------------------------------------------------------------------------------------
// Todos
// ---------------------------------------------------------------------------------------

async fn todos_are_listed_claimed_and_completed(api: Api) {
    let alice = human(&api.store, "alice").await;
    let one = vend(&api.store, "alice", &alice, &["todos"]).await;
    let two = vend(&api.store, "alice", &alice, &["todos"]).await;
    let one_id = api
        .store
        .authenticate(&one)
        .await
        .expect("lookup")
        .expect("known")
        .id;
    let w = webhook(&api.store, &alice).await;
    let e1 = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let e2 = github_event(&api, &w, "issues.opened.json", 2).await;
    let e3 = github_event(&api, &w, "push.json", 3).await;
    let t1 = todo_for(&api, &e1, "forge").await;
    let t2 = todo_for(&api, &e2, "forge").await;
    let t3 = todo_for(&api, &e3, "triage").await;
    let (mut a, mut b) = (api.client(&one), api.client(&two));
    let list =
        |queue: &str, filter: pb::TodoFilter, cursor: &str, limit: u32| pb::ListTodosRequest {
            queue: queue.into(),
            filter: filter as i32,
            cursor: cursor.into(),
            limit,
        };
    let ids = |todos: &[pb::Todo]| todos.iter().map(|t| t.id.clone()).collect::<Vec<_>>();

    let forge = ok(a
        .todos
        .list_todos(list("forge", pb::TodoFilter::Unspecified, "", 0))
        .await)
    .todos;
    assert_eq!(
        ids(&forge),
        vec![t1.id.clone(), t2.id.clone()],
        "oldest first"
    );
    assert_eq!(
        (
            forge[0].state,
            forge[0].event_id.as_str(),
            forge[0].webhook_id.as_str(),
            forge[0].queue.as_str()
        ),
        (
            pb::TodoState::Open as i32,
            e1.id.as_str(),
            w.id.as_str(),
            "forge"
        )
    );
    assert_eq!(
        ids(&ok(a
            .todos
            .list_todos(list("triage", pb::TodoFilter::Open, "", 0))
            .await)
        .todos),
        vec![t3.id.clone()]
    );
    let page = ok(a
        .todos
        .list_todos(list("forge", pb::TodoFilter::Open, "", 1))
        .await);
    assert_eq!(ids(&page.todos), vec![t1.id.clone()]);
    let page = ok(a
        .todos
        .list_todos(list("forge", pb::TodoFilter::Open, &page.next_cursor, 1))
        .await);
    assert_eq!(
        (ids(&page.todos), page.next_cursor.as_str()),
        (vec![t2.id.clone()], "")
    );

    let claimed = ok(a
        .todos
        .claim_todo(pb::ClaimTodoRequest {
            todo_id: t1.id.clone(),
        })
        .await)
    .todo
    .expect("todo");
    assert_eq!(
        (claimed.state, claimed.claimed_by.as_str()),
        (pb::TodoState::Claimed as i32, one_id.as_str())
    );
    assert!(claimed.claimed_at.is_some());
    assert_eq!(
        text(&claimed.claim_expires_at_time),
        switchboard_model::rfc3339_millis(api.clock.now_ms() + 30 * 60 * 1000),
        "a claim lasts the default lease"
    );
    ok(a.todos
        .claim_todo(pb::ClaimTodoRequest {
            todo_id: t1.id.clone(),
        })
        .await);
    let conflict = refused(
        b.todos
            .claim_todo(pb::ClaimTodoRequest {
                todo_id: t1.id.clone(),
            })
            .await,
        Code::FailedPrecondition,
        "conflict",
    );
    assert!(
        conflict.message().contains("claimed by another endpoint"),
        "{}",
        conflict.message()
    );
    refused(
        b.todos
            .complete_todo(pb::CompleteTodoRequest {
                todo_id: t1.id.clone(),
            })
            .await,
        Code::FailedPrecondition,
        "conflict",
    );
    let unclaimed = ok(b
        .todos
        .list_todos(list("forge", pb::TodoFilter::Unclaimed, "", 0))
        .await)
    .todos;
    assert_eq!(ids(&unclaimed), vec![t2.id.clone()]);

    let done = ok(a
        .todos
        .complete_todo(pb::CompleteTodoRequest {
            todo_id: t1.id.clone(),
        })
        .await)
    .todo
    .expect("todo");
    assert_eq!(
        (done.state, done.completed_by.as_str()),
        (pb::TodoState::Completed as i32, one_id.as_str())
    );
    ok(a.todos
        .complete_todo(pb::CompleteTodoRequest {
            todo_id: t1.id.clone(),
        })
        .await);
    refused(
        b.todos
            .claim_todo(pb::ClaimTodoRequest {
                todo_id: t1.id.clone(),
            })
            .await,
        Code::FailedPrecondition,
        "conflict",
    );
    // An unclaimed todo can be completed outright.
    ok(b.todos
        .complete_todo(pb::CompleteTodoRequest {
            todo_id: t2.id.clone(),
        })
        .await);

    assert!(
        ok(a.todos
            .list_todos(list("forge", pb::TodoFilter::Open, "", 0))
            .await)
        .todos
        .is_empty()
    );
    let everything = ok(a
        .todos
        .list_todos(list("forge", pb::TodoFilter::All, "", 0))
        .await)
    .todos;
    assert_eq!(ids(&everything), vec![t1.id.clone(), t2.id.clone()]);
    assert!(
        everything
            .iter()
            .all(|t| t.state == pb::TodoState::Completed as i32)
    );

    invalid(
        a.todos
            .list_todos(list("", pb::TodoFilter::Open, "", 0))
            .await,
        "queue",
    );
    invalid(
        a.todos
            .list_todos(list("Forge!", pb::TodoFilter::Open, "", 0))
            .await,
        "queue",
    );
    invalid(
        a.todos
            .list_todos(pb::ListTodosRequest {
                queue: "forge".into(),
                filter: 9,
                ..Default::default()
            })
            .await,
        "filter",
    );
    invalid(
        a.todos
            .list_todos(list("forge", pb::TodoFilter::Open, "x", 0))
            .await,
        "cursor",
    );
}

/// `n` fresh todos in `forge` on `w`, oldest first.
async fn forge_todos(api: &Api, w: &Webhook, n: usize) -> Vec<Todo> {
    let mut todos = Vec::new();
    for i in 0..n {
        let event = github_event(api, w, "issues.opened.json", 100 + i).await;
        todos.push(todo_for(api, &event, "forge").await);
    }
    todos
}

/// The endpoint id behind `credential`.
async fn endpoint_id(api: &Api, credential: &str) -> String {
    api.store
        .authenticate(credential)
        .await
        .expect("lookup")
        .expect("known")
        .id
}

fn claim(id: &str) -> pb::ClaimTodoRequest {
    pb::ClaimTodoRequest { todo_id: id.into() }
}

fn release(id: &str) -> pb::ReleaseTodoRequest {
    pb::ReleaseTodoRequest { todo_id: id.into() }
}

fn complete(id: &str) -> pb::CompleteTodoRequest {
    pb::CompleteTodoRequest { todo_id: id.into() }
}

fn unclaimed() -> pb::ListTodosRequest {
    pb::ListTodosRequest {
        queue: "forge".into(),
        filter: pb::TodoFilter::Unclaimed as i32,
        ..Default::default()
    }
}

/// Issue 21 through the API: a claim is a lease with its expiry listed; the holder renews
/// and releases it; past it the todo is back in its queue, another endpoint takes it, and the
/// lapsed holder's completion is refused saying why. A webhook's own lease wins.
async fn todo_claims_are_leases(api: Api) {
    let alice = human(&api.store, "alice").await;
    let one = vend(&api.store, "alice", &alice, &["todos"]).await;
    let two = vend(&api.store, "alice", &alice, &["todos"]).await;
    let (one_id, two_id) = (endpoint_id(&api, &one).await, endpoint_id(&api, &two).await);
    let w = webhook(&api.store, &alice).await;
    let t = forge_todos(&api, &w, 3).await;
    let (mut a, mut b) = (api.client(&one), api.client(&two));
    let at = |ms: i64| switchboard_model::rfc3339_millis(ms);
    const LEASE_MS: i64 = 30 * 60 * 1000;

    // A claim and what the listing shows of it: holder and expiry.
    let claimed = ok(a.todos.claim_todo(claim(&t[0].id)).await)
        .todo
        .expect("todo");
    let expires = api.clock.now_ms() + LEASE_MS;
    assert_eq!(text(&claimed.claim_expires_at_time), at(expires));
    let listed = ok(a
        .todos
        .list_todos(pb::ListTodosRequest {
            queue: "forge".into(),
            ..Default::default()
        })
        .await)
    .todos;
    assert_eq!(
        (
            listed[0].state,
            listed[0].claimed_by.as_str(),
            text(&listed[0].claim_expires_at_time).as_str()
        ),
        (
            pb::TodoState::Claimed as i32,
            one_id.as_str(),
            at(expires).as_str()
        )
    );
    assert_eq!(
        listed[1].claim_expires_at_time, None,
        "unclaimed: no expiry"
    );

    // Renewing: the holder claims again before the end, from now.
    api.clock.advance(Duration::from_secs(20 * 60));
    let renewed = ok(a.todos.claim_todo(claim(&t[0].id)).await)
        .todo
        .expect("todo");
    let expires = api.clock.now_ms() + LEASE_MS;
    assert_eq!(text(&renewed.claim_expires_at_time), at(expires));
    assert_eq!(renewed.claimed_at, claimed.claimed_at);
    api.clock.advance(Duration::from_secs(20 * 60));
    let conflict = refused(
        b.todos.claim_todo(claim(&t[0].id)).await,
        Code::FailedPrecondition,
        "conflict",
    );
    assert!(
        conflict.message().contains(&at(expires)),
        "the conflict says until when: {}",
        conflict.message()
    );

    // Releasing: another endpoint's release is refused, the holder's puts the todo back in
    // its queue, and releasing what nobody holds changes nothing.
    refused(
        b.todos.release_todo(release(&t[0].id)).await,
        Code::FailedPrecondition,
        "conflict",
    );
    let released = ok(a.todos.release_todo(release(&t[0].id)).await)
        .todo
        .expect("todo");
    assert_eq!(
        (
            released.state,
            released.claimed_by.as_str(),
            text(&released.claim_expires_at_time).as_str()
        ),
        (pb::TodoState::Open as i32, "", "")
    );
    ok(a.todos.release_todo(release(&t[0].id)).await);
    ok(b.todos.release_todo(release(&t[1].id)).await);
    let ids = |todos: Vec<pb::Todo>| todos.into_iter().map(|t| t.id).collect::<Vec<_>>();
    assert_eq!(
        ids(ok(b.todos.list_todos(unclaimed()).await).todos),
        vec![t[0].id.clone(), t[1].id.clone(), t[2].id.clone()]
    );

    // Expiry: past the lease the todo is listed unclaimed (open, naming the lapsed holder).
    ok(a.todos.claim_todo(claim(&t[1].id)).await);
    assert_eq!(
        ids(ok(b.todos.list_todos(unclaimed()).await).todos),
        vec![t[0].id.clone(), t[2].id.clone()]
    );
    api.clock.advance(Duration::from_millis(LEASE_MS as u64));
    let lapsed = ok(b.todos.list_todos(unclaimed()).await).todos;
    let lapsed = lapsed
        .iter()
        .find(|todo| todo.id == t[1].id)
        .expect("the lapsed claim is back in its queue");
    assert_eq!(
        (lapsed.state, lapsed.claimed_by.as_str()),
        (pb::TodoState::Open as i32, one_id.as_str())
    );
    // Another endpoint takes it; the lapsed holder's completion is refused, saying why.
    let taken = ok(b.todos.claim_todo(claim(&t[1].id)).await)
        .todo
        .expect("todo");
    assert_eq!(
        (taken.state, taken.claimed_by.as_str()),
        (pb::TodoState::Claimed as i32, two_id.as_str())
    );
    let refused_completion = refused(
        a.todos.complete_todo(complete(&t[1].id)).await,
        Code::FailedPrecondition,
        "conflict",
    );
    assert!(
        refused_completion.message().contains("expired")
            && refused_completion
                .message()
                .contains("claimed by another endpoint"),
        "{}",
        refused_completion.message()
    );
    ok(b.todos.complete_todo(complete(&t[1].id)).await);

    // Lapsed and taken by nobody: still the holder's to complete.
    ok(a.todos.claim_todo(claim(&t[2].id)).await);
    api.clock.advance(Duration::from_secs(60 * 60));
    let done = ok(a.todos.complete_todo(complete(&t[2].id)).await)
        .todo
        .expect("todo");
    assert_eq!(
        (done.state, done.completed_by.as_str()),
        (pb::TodoState::Completed as i32, one_id.as_str())
    );

    // A webhook's own lease (an operator's setting) wins over the instance default.
    api.store
        .set_claim_ttl(&alice, &w.id, Some(Duration::from_secs(90)))
        .await
        .expect("claim ttl");
    let short = ok(b.todos.claim_todo(claim(&t[0].id)).await)
        .todo
        .expect("todo");
    assert_eq!(
        text(&short.claim_expires_at_time),
        at(api.clock.now_ms() + 90_000)
    );
    api.clock.advance(Duration::from_secs(90));
    ok(a.todos.claim_todo(claim(&t[0].id)).await);
}

/// Two endpoints claiming the same todo at once, over the real API: exactly one wins, the
/// other gets `conflict`, and the listing names the winner.
async fn two_endpoints_race_to_claim_and_one_wins(api: Api) {
    let alice = human(&api.store, "alice").await;
    let one = vend(&api.store, "alice", &alice, &["todos"]).await;
    let two = vend(&api.store, "alice", &alice, &["todos"]).await;
    let ids = [endpoint_id(&api, &one).await, endpoint_id(&api, &two).await];
    let w = webhook(&api.store, &alice).await;
    let todos = forge_todos(&api, &w, 8).await;
    let mut wins = [0, 0];
    for (round, todo) in todos.iter().enumerate() {
        // Half the rounds race for a todo whose earlier claim lapsed: back in its queue, it
        // is raced for like a fresh one.
        if round % 2 == 1 {
            let third = vend(&api.store, "alice", &alice, &["todos"]).await;
            ok(api.client(&third).todos.claim_todo(claim(&todo.id)).await);
            api.clock.advance(Duration::from_secs(31 * 60));
        }
        let racers: Vec<_> = [&one, &two]
            .into_iter()
            .map(|credential| {
                let mut c = api.client(credential);
                let id = todo.id.clone();
                tokio::spawn(async move { c.todos.claim_todo(claim(&id)).await })
            })
            .collect();
        let mut outcomes = Vec::new();
        for racer in racers {
            outcomes.push(racer.await.expect("the call ran"));
        }
        let winners: Vec<usize> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.is_ok().then_some(i))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: {outcomes:?}");
        let winner = winners[0];
        let loser = outcomes
            .into_iter()
            .nth(1 - winner)
            .expect("two racers")
            .expect_err("the other lost");
        assert_eq!(
            (loser.code(), reason_of(&loser).as_str()),
            (Code::FailedPrecondition, "conflict")
        );
        let held = api.store.get_todo(&alice, &todo.id).await.expect("todo");
        assert_eq!(held.claimed_by.as_deref(), Some(ids[winner].as_str()));
        wins[winner] += 1;
    }
    assert_eq!(wins[0] + wins[1], todos.len());
}

/// A claim expiring while its holder completes: the holder's completion and another
/// endpoint's claim race at once on the lapsed todo. Exactly one lands — completed by the
/// holder (the claim refused) or claimed by the other (the completion refused) — never both.
async fn a_claim_expiring_while_its_holder_completes_has_one_outcome(api: Api) {
    let alice = human(&api.store, "alice").await;
    let holder = vend(&api.store, "alice", &alice, &["todos"]).await;
    let other = vend(&api.store, "alice", &alice, &["todos"]).await;
    let (holder_id, other_id) = (
        endpoint_id(&api, &holder).await,
        endpoint_id(&api, &other).await,
    );
    let w = webhook(&api.store, &alice).await;
    let todos = forge_todos(&api, &w, 8).await;
    for todo in &todos {
        ok(api.client(&holder).todos.claim_todo(claim(&todo.id)).await);
    }
    api.clock.advance(Duration::from_secs(30 * 60));
    let mut outcomes = (0, 0);
    for todo in &todos {
        let mut h = api.client(&holder);
        let mut o = api.client(&other);
        let (id_h, id_o) = (todo.id.clone(), todo.id.clone());
        let completing = tokio::spawn(async move { h.todos.complete_todo(complete(&id_h)).await });
        let claiming = tokio::spawn(async move { o.todos.claim_todo(claim(&id_o)).await });
        let completed = completing.await.expect("the call ran");
        let claimed = claiming.await.expect("the call ran");
        let now = api.store.get_todo(&alice, &todo.id).await.expect("todo");
        match (completed, claimed) {
            (Ok(_), Err(refusal)) => {
                assert_eq!(reason_of(&refusal), "conflict");
                assert!(
                    refusal.message().contains("already completed"),
                    "{}",
                    refusal.message()
                );
                assert_eq!(now.completed_by.as_deref(), Some(holder_id.as_str()));
                outcomes.0 += 1;
            }
            (Err(refusal), Ok(_)) => {
                assert_eq!(reason_of(&refusal), "conflict");
                assert!(
                    refusal.message().contains("expired"),
                    "{}",
                    refusal.message()
                );
                assert_eq!(
                    (now.completed_at, now.claimed_by.as_deref()),
                    (None, Some(other_id.as_str()))
                );
                outcomes.1 += 1;
            }
            (completed, claimed) => {
                panic!("exactly one must land: completed {completed:?}, claimed {claimed:?}")
            }
        }
    }
    assert_eq!(outcomes.0 + outcomes.1, todos.len());
}

// ---------------------------------------------------------------------------------------
// Limits, failures, serving
// ---------------------------------------------------------------------------------------

/// Runs with `requests_per_endpoint_per_minute = 3`.
async fn each_endpoint_is_rate_limited(api: Api) {
    let alice = human(&api.store, "alice").await;
    let one = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let two = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let mut a = api.client(&one);
    for _ in 0..3 {
        ok(a.identity.who_am_i(pb::WhoAmIRequest::default()).await);
    }
    let limited = refused(
        a.webhooks
            .list_webhooks(pb::ListWebhooksRequest::default())
            .await,
        Code::ResourceExhausted,
        "rate_limited",
    );
    let details = limited.get_error_details();
    let delay = details
        .retry_info()
        .and_then(|r| r.retry_delay)
        .expect("a retry delay");
    assert!(
        delay > Duration::ZERO && delay <= Duration::from_secs(60),
        "{delay:?}"
    );
    let ms: u64 = details.error_info().expect("info").metadata["retry_after_ms"]
        .parse()
        .expect("ms");
    assert_eq!(Duration::from_millis(ms), delay);
    // Every call counts, refused ones too.
    refused(
        a.identity.who_am_i(pb::WhoAmIRequest::default()).await,
        Code::ResourceExhausted,
        "rate_limited",
    );

    // Another endpoint has its own budget.
    ok(api
        .client(&two)
        .identity
        .who_am_i(pb::WhoAmIRequest::default())
        .await);
    // The next window brings the budget back.
    api.clock.advance(Duration::from_secs(60));
    ok(a.webhooks
        .list_webhooks(pb::ListWebhooksRequest::default())
        .await);
}

async fn a_stopped_router_changes_nothing(mut api: Api) {
    let alice = human(&api.store, "alice").await;
    let credential = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let w = webhook(&api.store, &alice).await;
    let event = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let mut c = api.client(&credential);
    assert_eq!(
        ok(c.rules
            .set_webhook_rules(set(&w.id, routes_prs_to_review(), None))
            .await)
        .version,
        2
    );

    api.router.child.kill().expect("kill the router");
    api.router.child.wait().expect("reap the router");
    let s = refused(
        c.rules
            .set_webhook_rules(set(&w.id, json!({"rules": []}), None))
            .await,
        Code::Unavailable,
        "router_unavailable",
    );
    assert!(!s.message().contains(&api.router.addr), "{}", s.message());
    refused(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                event_id: event.id.clone(),
                ..Default::default()
            })
            .await,
        Code::Unavailable,
        "router_unavailable",
    );
    assert_eq!(version_and_history(&api.store, &w).await, (2, 2));
    // Reads need no router.
    let listed = ok(c
        .rules
        .list_webhook_rules(pb::ListWebhookRulesRequest {
            webhook_id: w.id.clone(),
        })
        .await);
    assert_eq!(
        rule_ids(&crate::support::typed::config_text(&listed.configuration)),
        vec!["prs"]
    );
}

async fn health_and_reflection_are_served(api: Api) {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;

    let mut health = HealthClient::new(api.channel.clone());
    for service in std::iter::once("").chain(switchboard_control::api::SERVICE_NAMES) {
        let status = ok(health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await)
        .status;
        assert_eq!(status, ServingStatus::Serving as i32, "{service:?}");
    }
    // Exactly what control serves, through v1 and v1alpha: not the router's service.
    let (v1, v1alpha) = crate::support::reflected_services(api.channel.clone()).await;
    let want: std::collections::BTreeSet<String> = switchboard_control::api::SERVICE_NAMES
        .into_iter()
        .chain(crate::support::REFLECTED_BY_EVERY_ROLE)
        .map(str::to_string)
        .collect();
    assert_eq!(v1, want);
    assert_eq!(v1alpha, want);

    // The services alone compose with a server that brings its own health and reflection.
    let routers = Routers::new(
        RouterSource::Static(vec![api.router.addr.clone()]),
        Duration::from_secs(1),
    )
    .await;
    let state = ControlState {
        trials: switchboard_control::trials::Trials::start(
            api.store.clone(),
            routers.clone(),
            Default::default(),
        ),
        console_base: None,
        catalog: std::sync::Arc::new(switchboard_packs::Catalog::builtin()),
        store: api.store.clone(),
        routers,
        capabilities: Capabilities::default(),
        limits: Limits::default(),
    };
    let (_, health_service) = tonic_health::server::health_reporter();
    let reflection_service = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(switchboard_proto::FILE_DESCRIPTOR_SET)
        .build_v1()
        .expect("reflection");
    let _server = tonic::transport::Server::builder()
        .add_routes(switchboard_control::api::routes(state))
        .add_service(health_service)
        .add_service(reflection_service);
}

// ---------------------------------------------------------------------------------------
// The authorization matrix (docs/authorization.md)
// ---------------------------------------------------------------------------------------

/// What one call answered: `ok`, or the reason it was refused with.
fn outcome<T>(result: Result<Response<T>, Status>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(s) => s
            .get_error_details()
            .error_info()
            .map(|i| i.reason.clone())
            .unwrap_or_else(|| format!("{:?}", s.code())),
    }
}

/// What a streaming call answered: `ok` once its stream ended well, or the reason it was
/// refused with, at the call or in the stream.
async fn stream_outcome<T>(result: Result<Response<tonic::Streaming<T>>, Status>) -> String {
    let mut stream = match result {
        Ok(r) => r.into_inner(),
        Err(s) => return outcome::<()>(Err(s)),
    };
    loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => return "ok".into(),
            Err(s) => return outcome::<()>(Err(s)),
        }
    }
}

/// Every verb, called by every kind of caller on every class of id, against the real API;
/// the outcomes are docs/authorization.md (`UPDATE_GOLDEN=1` rewrites it). Each "own" call
/// gets fresh resources, so what one call changes never decides another's outcome.
async fn the_authorization_matrix_is_docs_authorization_md(api: Api) {
    let store = &api.store;
    for login in ["dana", "ed", "vic", "wes", "olga"] {
        human(store, login).await;
    }
    store.create_team("ops", "Operations").await.expect("team");
    store.create_team("other", "Others").await.expect("team");
    for (team, login, role) in [
        ("ops", "dana", Role::Admin),
        ("ops", "ed", Role::Editor),
        ("ops", "vic", Role::Viewer),
        ("ops", "wes", Role::Editor),
        ("other", "olga", Role::Admin),
    ] {
        store
            .set_membership(team, login, role)
            .await
            .expect("membership");
    }
    let ops = OwnerScope::team("ops");
    let other = OwnerScope::team("other");
    for scope in [&ops, &other] {
        store
            .set_grant_allowance(scope, &GRANT.map(str::to_string))
            .await
            .expect("allowance");
    }
    let callers = [
        ("admin", vend(store, "dana", &ops, &EVERY_FAMILY).await),
        ("editor", vend(store, "ed", &ops, &EVERY_FAMILY).await),
        ("viewer", vend(store, "vic", &ops, &EVERY_FAMILY).await),
        (
            "editor, todos only",
            vend(store, "wes", &ops, &["todos"]).await,
        ),
        (
            "the other team's admin",
            vend(store, "olga", &other, &EVERY_FAMILY).await,
        ),
    ];
    let rules = json!({"rules": [
        {"id": "r-1", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
        {"id": "r-2", "when": "false", "action": {"drop": true}},
    ]});
    // What a call acts on: a fresh webhook of a scope with rules, an event and a todo, so
    // what one call changes (a delete, a claim) never decides another's outcome.
    struct Own {
        webhook: String,
        event: String,
        todo: String,
        trial: String,
    }
    let fresh = |scope: OwnerScope| {
        let rules = rules.clone();
        let api = &api;
        async move {
            let w = webhook(&api.store, &scope).await;
            seed_configuration(&api.store, &w, rules, None).await;
            let event = github_event(api, &w, "pull_request.opened.json", 1).await;
            let todo = todo_for(api, &event, "forge").await;
            let trial = api
                .store
                .start_trial(
                    switchboard_control::store::NewTrial {
                        webhook_id: w.id.clone(),
                        owner_scope: scope.clone(),
                        plan_id: "pl_matrix".into(),
                        candidate: w.configuration.clone(),
                        base_config_digest: w.config_digest.clone(),
                        forecast: Default::default(),
                        limits: Default::default(),
                        started_by: "matrix".into(),
                        plan: Default::default(),
                    },
                    1,
                )
                .await
                .expect("a trial");
            // A confirmed change's guard (issue 46), for get_rule_guard's cells.
            api.store
                .start_guard(switchboard_control::store::NewGuard {
                    webhook_id: w.id.clone(),
                    owner_scope: scope.clone(),
                    plan_id: "pl_matrix".into(),
                    replaced: w.configuration.clone(),
                    confirmed_digest: w.config_digest.clone(),
                    forecast: Default::default(),
                    limits: Default::default(),
                    started_by: "matrix".into(),
                    terms: Default::default(),
                })
                .await
                .expect("a guard");
            Own {
                webhook: w.id,
                event: event.id,
                todo: todo.id,
                trial: trial.id,
            }
        }
    };
    let classes = ["ops'", "the other team's", "unknown", "malformed"];
    // The id of `class` for a call: (webhook, event, todo, trial).
    let ids = |class: &str, own: &Own, theirs: &Own| -> (String, String, String, String) {
        match class {
            "ops'" => (
                own.webhook.clone(),
                own.event.clone(),
                own.todo.clone(),
                own.trial.clone(),
            ),
            "the other team's" => (
                theirs.webhook.clone(),
                theirs.event.clone(),
                theirs.todo.clone(),
                theirs.trial.clone(),
            ),
            "unknown" => (
                format!("wh_{}", "0".repeat(32)),
                format!("ev_{}", "0".repeat(32)),
                format!("td_{}", "0".repeat(32)),
                format!("tr_{}", "0".repeat(32)),
            ),
            _ => (
                "wh_'; DROP TABLE webhooks; --".into(),
                "../ev".into(),
                "td_\u{0}".into(),
                "tr_'; --".into(),
            ),
        }
    };
    let verbs_with_ids = [
        "get_webhook",
        "rotate_webhook_secret",
        "rename_webhook",
        "delete_webhook",
        "list_webhook_events",
        "get_webhook_event",
        "explain_webhook_event",
        "list_webhook_rules",
        "set_webhook_rules",
        "update_webhook_rule",
        "delete_webhook_rule",
        "test_webhook_rules",
        "plan_webhook_rules",
        "list_webhook_history",
        "list_webhook_changes",
        "claim_todo",
        "release_todo",
        "complete_todo",
        "list_rule_packs",
        "install_rule_pack",
        "remove_rule_pack",
        "redrive_webhook_events",
        "list_rule_trials",
        "get_rule_trial",
        "stop_rule_trial",
        "get_rule_guard",
    ];
    let verbs_without = ["who_am_i", "list_webhooks", "create_webhook", "list_todos"];
    // The verbs whose id is a plan's token: each cell gets a fresh plan on a fresh webhook,
    // made by an endpoint of its own (replays are rate-limited per endpoint).
    let plan_verbs = [
        "get_rule_pack_plan",
        "confirm_rule_pack_plan",
        "confirm_webhook_redrive",
        "start_rule_trial",
    ];
    // A redrive plan (issue 21 item 6) of a fresh webhook, made by an admin of its scope.
    let redriven = |scope: OwnerScope, planner: &'static str| {
        let api = &api;
        async move {
            let own = fresh(scope.clone()).await;
            let credential = vend(&api.store, planner, &scope, &EVERY_FAMILY).await;
            let plan = api
                .client(&credential)
                .webhooks
                .redrive_webhook_events(pb::RedriveWebhookEventsRequest {
                    webhook_id: own.webhook.clone(),
                    ..Default::default()
                })
                .await
                .expect("a redrive plan")
                .into_inner();
            (own.webhook, plan.plan_token)
        }
    };
    let planned = |scope: OwnerScope, planner: &'static str| {
        let api = &api;
        async move {
            let own = fresh(scope.clone()).await;
            // Its trial ended, so a start_rule_trial cell starts the webhook's only one.
            api.store
                .end_trial(
                    &scope,
                    &own.trial,
                    switchboard_model::trial::TrialEnd::Stopped,
                )
                .await
                .expect("the fresh trial ends");
            let credential = vend(&api.store, planner, &scope, &EVERY_FAMILY).await;
            let plan = crate::support::typed::pack_result(
                api.client(&credential)
                    .packs
                    .install_rule_pack(pb::InstallRulePackRequest {
                        webhook_id: own.webhook.clone(),
                        name: "drop-ci-noise".into(),
                        ..Default::default()
                    })
                    .await
                    .expect("a plan")
                    .into_inner(),
            )
            .await
            .expect("a plan");
            let token = plan["plan_token"].as_str().expect("a token").to_string();
            (own.webhook, token)
        }
    };

    let mut table = String::from("| verb | caller |");
    for class in classes {
        table.push_str(&format!(" {class} id |"));
    }
    table.push_str("\n| --- | --- |");
    for _ in classes {
        table.push_str(" --- |");
    }
    table.push('\n');
    for verb in verbs_with_ids {
        for (caller, credential) in &callers {
            let mut c = api.client(credential);
            table.push_str(&format!("| `{verb}` | {caller} |"));
            for class in classes {
                let own = fresh(ops.clone()).await;
                let theirs = fresh(other.clone()).await;
                let (wh, ev, td, tr) = ids(class, &own, &theirs);
                let got = match verb {
                    "get_webhook" => outcome(
                        c.webhooks
                            .get_webhook(pb::GetWebhookRequest { webhook_id: wh })
                            .await,
                    ),
                    "rotate_webhook_secret" => outcome(
                        c.webhooks
                            .rotate_webhook_secret(pb::RotateWebhookSecretRequest {
                                webhook_id: wh,
                                secret: None,
                            })
                            .await,
                    ),
                    "rename_webhook" => outcome(
                        c.webhooks
                            .rename_webhook(pb::RenameWebhookRequest {
                                webhook_id: wh,
                                name: "ops (matrix)".into(),
                            })
                            .await,
                    ),
                    "delete_webhook" => outcome(
                        c.webhooks
                            .delete_webhook(pb::DeleteWebhookRequest { webhook_id: wh })
                            .await,
                    ),
                    "list_webhook_events" => outcome(
                        c.webhooks
                            .list_webhook_events(pb::ListWebhookEventsRequest {
                                webhook_id: wh,
                                ..Default::default()
                            })
                            .await,
                    ),
                    "get_webhook_event" => outcome(
                        c.webhooks
                            .get_webhook_event(pb::GetWebhookEventRequest {
                                event_id: ev,
                                ..Default::default()
                            })
                            .await,
                    ),
                    "explain_webhook_event" => outcome(
                        c.webhooks
                            .explain_webhook_event(pb::ExplainWebhookEventRequest { event_id: ev })
                            .await,
                    ),
                    "list_webhook_rules" => outcome(
                        c.rules
                            .list_webhook_rules(pb::ListWebhookRulesRequest { webhook_id: wh })
                            .await,
                    ),
                    "set_webhook_rules" => outcome(
                        c.rules
                            .set_webhook_rules(set(&wh, rules.clone(), None))
                            .await,
                    ),
                    "update_webhook_rule" => outcome(
                        c.rules
                            .update_webhook_rule(update(&wh, "r-1", json!({"when": "true"}), None))
                            .await,
                    ),
                    "delete_webhook_rule" => outcome(
                        c.rules
                            .delete_webhook_rule(delete_rule(&wh, "r-2", None))
                            .await,
                    ),
                    "test_webhook_rules" => outcome(
                        c.rules
                            .test_webhook_rules(pb::TestWebhookRulesRequest {
                                webhook_id: wh,
                                event_id: ev,
                                ..Default::default()
                            })
                            .await,
                    ),
                    // A plan of the rules the webhook has (its one event is the replay).
                    "plan_webhook_rules" => {
                        stream_outcome(
                            c.rules
                                .plan_webhook_rules(pb::PlanWebhookRulesRequest {
                                    webhook_id: wh,
                                    configuration: Some(pb::Configuration::from(
                                        &crate::support::typed(rules.clone()),
                                    )),
                                    replay: None,
                                    guard: None,
                                })
                                .await,
                        )
                        .await
                    }
                    "list_webhook_history" => outcome(
                        c.rules
                            .list_webhook_history(pb::ListWebhookHistoryRequest {
                                webhook_id: wh,
                                ..Default::default()
                            })
                            .await,
                    ),
                    // One webhook's change log: another scope's webhook is `not_found`.
                    "list_webhook_changes" => outcome(
                        c.rules
                            .list_webhook_changes(pb::ListWebhookChangesRequest {
                                webhook_id: wh,
                                ..Default::default()
                            })
                            .await,
                    ),
                    "list_rule_packs" => outcome(
                        c.packs
                            .list_rule_packs(pb::ListRulePacksRequest { webhook_id: wh })
                            .await,
                    ),
                    // A plan (no confirm): what the verb's first call is. The pack needs no
                    // params; the webhook's one event is its replay.
                    "install_rule_pack" => {
                        stream_outcome(
                            c.packs
                                .install_rule_pack(pb::InstallRulePackRequest {
                                    webhook_id: wh,
                                    name: "drop-ci-noise".into(),
                                    ..Default::default()
                                })
                                .await,
                        )
                        .await
                    }
                    // Removing a pack that is not installed: past authorization, the answer
                    // is the pack's own `not_found`, for every id class alike.
                    "remove_rule_pack" => {
                        stream_outcome(
                            c.packs
                                .remove_rule_pack(pb::RemoveRulePackRequest {
                                    webhook_id: wh,
                                    name: "drop-ci-noise".into(),
                                    ..Default::default()
                                })
                                .await,
                        )
                        .await
                    }
                    "redrive_webhook_events" => outcome(
                        c.webhooks
                            .redrive_webhook_events(pb::RedriveWebhookEventsRequest {
                                webhook_id: wh,
                                ..Default::default()
                            })
                            .await,
                    ),
                    "list_rule_trials" => outcome(
                        c.trials
                            .list_rule_trials(pb::ListRuleTrialsRequest {
                                webhook_id: wh,
                                ..Default::default()
                            })
                            .await,
                    ),
                    // The webhook's newest guard: past authorization, another scope's webhook
                    // is the one `not_found`.
                    "get_rule_guard" => outcome(
                        c.trials
                            .get_rule_guard(pb::GetRuleGuardRequest {
                                webhook_id: wh,
                                guard_id: String::new(),
                            })
                            .await,
                    ),
                    "get_rule_trial" => outcome(
                        c.trials
                            .get_rule_trial(pb::GetRuleTrialRequest { trial_id: tr })
                            .await,
                    ),
                    "stop_rule_trial" => outcome(
                        c.trials
                            .stop_rule_trial(pb::StopRuleTrialRequest { trial_id: tr })
                            .await,
                    ),
                    "claim_todo" => outcome(
                        c.todos
                            .claim_todo(pb::ClaimTodoRequest { todo_id: td })
                            .await,
                    ),
                    // Releasing what the same caller claimed first (refused or not, the
                    // release's own outcome is what is recorded).
                    "release_todo" => {
                        let _ = c
                            .todos
                            .claim_todo(pb::ClaimTodoRequest {
                                todo_id: td.clone(),
                            })
                            .await;
                        outcome(
                            c.todos
                                .release_todo(pb::ReleaseTodoRequest { todo_id: td })
                                .await,
                        )
                    }
                    _ => {
                        // Completing needs a claim first: by the same caller (refused or
                        // not, the completion's own outcome is what is recorded).
                        let _ = c
                            .todos
                            .claim_todo(pb::ClaimTodoRequest {
                                todo_id: td.clone(),
                            })
                            .await;
                        outcome(
                            c.todos
                                .complete_todo(pb::CompleteTodoRequest { todo_id: td })
                                .await,
                        )
                    }
                };
                table.push_str(&format!(" {got} |"));
            }
            table.push('\n');
        }
    }
    for verb in plan_verbs {
        for (caller, credential) in &callers {
            let mut c = api.client(credential);
            table.push_str(&format!("| `{verb}` | {caller} |"));
            for class in classes {
                let redrive = verb == "confirm_webhook_redrive";
                let (webhook, token) = match class {
                    "ops'" if redrive => redriven(ops.clone(), "dana").await,
                    "the other team's" if redrive => redriven(other.clone(), "olga").await,
                    "ops'" => planned(ops.clone(), "dana").await,
                    "the other team's" => planned(other.clone(), "olga").await,
                    "unknown" => (
                        format!("wh_{}", "0".repeat(32)),
                        format!("sbp_{}", "0".repeat(43)),
                    ),
                    _ => ("wh_'; --".into(), "sbp_../\u{0}".into()),
                };
                let got = if redrive {
                    outcome(
                        c.webhooks
                            .confirm_webhook_redrive(pb::ConfirmWebhookRedriveRequest {
                                webhook_id: webhook,
                                plan_token: token,
                            })
                            .await,
                    )
                } else if verb == "start_rule_trial" {
                    outcome(
                        c.trials
                            .start_rule_trial(pb::StartRuleTrialRequest {
                                webhook_id: webhook,
                                plan_token: token,
                                ..Default::default()
                            })
                            .await,
                    )
                } else if verb == "get_rule_pack_plan" {
                    outcome(
                        c.packs
                            .get_rule_pack_plan(pb::GetRulePackPlanRequest { plan_token: token })
                            .await,
                    )
                } else {
                    outcome(
                        c.packs
                            .confirm_rule_pack_plan(pb::ConfirmRulePackPlanRequest {
                                webhook_id: webhook,
                                plan_token: token,
                                allow_unproven: true,
                                allow_insufficient_trial: false,
                            })
                            .await,
                    )
                };
                table.push_str(&format!(" {got} |"));
            }
            table.push('\n');
        }
    }
    for verb in verbs_without {
        for (caller, credential) in &callers {
            let mut c = api.client(credential);
            let got = match verb {
                "who_am_i" => outcome(c.identity.who_am_i(pb::WhoAmIRequest::default()).await),
                "list_webhooks" => outcome(
                    c.webhooks
                        .list_webhooks(pb::ListWebhooksRequest::default())
                        .await,
                ),
                "create_webhook" => outcome(
                    c.webhooks
                        .create_webhook(pb::CreateWebhookRequest {
                            source_type: pb::SourceType::Gitea as i32,
                            grant: vec!["forge".into()],
                            ..Default::default()
                        })
                        .await,
                ),
                _ => outcome(
                    c.todos
                        .list_todos(pb::ListTodosRequest {
                            queue: "forge".into(),
                            ..Default::default()
                        })
                        .await,
                ),
            };
            table.push_str(&format!("| `{verb}` | {caller} | {got} (no id) | | | |\n"));
        }
    }
    // The indistinguishability the matrix shows, checked too: for every caller and verb, an
    // id of a scope not the caller's answers exactly as an unknown or a malformed one.
    for line in table.lines().skip(2).filter(|l| !l.contains("(no id)")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let foreign = if cells[2] == "the other team's admin" {
            cells[3]
        } else {
            cells[4]
        };
        assert!(
            foreign == cells[5] && cells[5] == cells[6],
            "another scope's id is distinguishable: {line}"
        );
    }
    crate::support::assert_golden_section("docs/authorization.md", "authorization", &table);
}

// ---------------------------------------------------------------------------------------
// Explain (issue 21 item 3)
// ---------------------------------------------------------------------------------------

/// Version 1 of the explained webhook: two rules that do not match a pull request before the
/// one that does.
fn explained_v1() -> Value {
    json!({"rules": [
        {"id": "issues", "when": ".kind == \"issues.opened\"", "action": {"queue": "triage"}},
        {"id": "pushes", "when": ".kind == \"push\"", "action": {"drop": true}},
        {"id": "prs", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
    ], "params": {}})
}

/// Routes `event` exactly as ingest does (the webhook row read for this routing, a real router,
/// the decision recorded with the configuration it was made under); returns the label.
async fn route_as_ingest(api: &Api, event: &Event) -> String {
    let w = api
        .store
        .webhook_for_ingest(&event.webhook_id)
        .await
        .expect("webhook");
    match switchboard_control::ingest::route::route_one(&api.state, &w, event).await {
        switchboard_control::ingest::Routed::Decided { label, .. } => label.to_string(),
        other => panic!("{} was not routed: {other:?}", event.id),
    }
}

fn explain_request(event_id: &str) -> pb::ExplainWebhookEventRequest {
    pb::ExplainWebhookEventRequest {
        event_id: event_id.into(),
    }
}

/// One explained rule as `(index, id, outcome, action, deciding)`.
fn explained_rules(
    r: &pb::ExplainWebhookEventResponse,
) -> Vec<(u32, &str, pb::RuleOutcome, &str, bool)> {
    r.rules
        .iter()
        .map(|rule| {
            (
                rule.index,
                rule.rule_id.as_str(),
                pb::RuleOutcome::try_from(rule.outcome).expect("a known outcome"),
                rule.action.as_str(),
                rule.deciding,
            )
        })
        .collect()
}

fn label_of(d: &Option<pb::Decision>) -> Option<&str> {
    d.as_ref().map(|d| d.decision.as_str())
}

async fn explain_names_the_version_and_the_rules_that_decided(api: Api) {
    use pb::RuleOutcome::{Matched, NotMatched};
    let store = &api.store;
    for login in ["ed", "vic", "bob"] {
        human(store, login).await;
    }
    store.create_team("ops", "Operations").await.expect("team");
    for (login, role) in [("ed", Role::Editor), ("vic", Role::Viewer)] {
        store
            .set_membership("ops", login, role)
            .await
            .expect("membership");
    }
    let ops = OwnerScope::team("ops");
    let editor = vend(store, "ed", &ops, &EVERY_FAMILY).await;
    // A viewer holding only the read verbs it needs: explaining is a read.
    let viewer = vend(store, "vic", &ops, &["explain_webhook_event"]).await;
    let w = store
        .create_webhook(NewWebhook {
            owner_scope: ops.clone(),
            source_type: SourceType::Github,
            secret: None,
            grant: GRANT.iter().map(|q| q.to_string()).collect(),
            reject_unverified: false,
            name: None,
            configuration: Some(crate::support::typed(explained_v1())),
            actor: Actor::operator(),
        })
        .await
        .expect("webhook");
    assert_eq!(w.config_version, 1);

    // Routed under version 1.
    let pr_v1 = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let issue_v1 = github_event(&api, &w, "issues.opened.json", 2).await;
    assert_eq!(route_as_ingest(&api, &pr_v1).await, "queue:review");
    assert_eq!(route_as_ingest(&api, &issue_v1).await, "queue:triage");
    // Decided before decisions recorded their configuration (a row from before 0010).
    let old = github_event(&api, &w, "pull_request.opened.json", 3).await;
    store
        .record_decision(
            &old.id,
            RecordDecision {
                decision: RecordedDecision::to_queue("review").by_rule("prs"),
                fault: None,
                todo: None,
                decided_by: None,
            },
        )
        .await
        .expect("an old decision");

    // The rules change: pull requests are dropped from version 2 on.
    let mut c = api.client(&editor);
    let saved = ok(c
        .rules
        .update_webhook_rule(pb::UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "prs".into(),
            patch: Some(pb::RulePatch {
                action: Some("drop".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await);
    assert_eq!(saved.version, 2);
    let pr_v2 = github_event(&api, &w, "pull_request.opened.json", 4).await;
    let comment_v2 = github_event(&api, &w, "issue_comment.created.json", 5).await;
    assert_eq!(route_as_ingest(&api, &pr_v2).await, "drop");
    assert_eq!(route_as_ingest(&api, &comment_v2).await, "default");
    let unrouted = github_event(&api, &w, "pull_request.opened.json", 6).await;

    // The old event: its version-1 deciding rule, every earlier rule's outcome, and what
    // version 2 decides now. Asked by the viewer.
    let mut v = api.client(&viewer);
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&pr_v1.id))
        .await);
    assert_eq!(
        (r.event_id.as_str(), r.webhook_id.as_str(), r.kind.as_str()),
        (pr_v1.id.as_str(), w.id.as_str(), "pull_request.opened")
    );
    assert_eq!(r.recorded_version_status(), pb::RecordedVersion::Known);
    assert_eq!(r.recorded_version, Some(1));
    assert_eq!(r.recorded_digest.as_deref(), Some(w.config_digest.as_str()));
    assert_eq!(label_of(&r.recorded_decision), Some("queue:review"));
    assert_eq!(
        explained_rules(&r),
        vec![
            (0, "issues", NotMatched, "queue:triage", false),
            (1, "pushes", NotMatched, "drop", false),
            (2, "prs", Matched, "queue:review", true),
        ]
    );
    assert!(
        r.rules
            .iter()
            .all(|rule| rule.fault_code.is_none() && rule.reason.is_none())
    );
    assert_eq!(label_of(&r.reevaluated_decision), Some("queue:review"));
    assert!(!r.reevaluation_differs);
    assert_eq!(
        (r.current_version, r.current_digest.as_str()),
        (2, saved.digest.as_str())
    );
    let current = r.current_decision.as_ref().expect("current decision");
    assert_eq!(
        (current.decision.as_str(), current.rule_id.as_deref()),
        ("drop", Some("prs"))
    );
    assert!(r.current_differs);

    // A rule that decided first: nothing after it is reported.
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&issue_v1.id))
        .await);
    assert_eq!(
        explained_rules(&r),
        vec![(0, "issues", Matched, "queue:triage", true)]
    );
    assert_eq!(label_of(&r.current_decision), Some("queue:triage"));
    assert!(!r.current_differs);

    // A new event names version 2, whose rule now drops it.
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&pr_v2.id))
        .await);
    assert_eq!(
        (r.recorded_version, r.recorded_digest.as_deref()),
        (Some(2), Some(saved.digest.as_str()))
    );
    assert_eq!(
        explained_rules(&r),
        vec![
            (0, "issues", NotMatched, "queue:triage", false),
            (1, "pushes", NotMatched, "drop", false),
            (2, "prs", Matched, "drop", true),
        ]
    );
    assert!(!r.current_differs && !r.reevaluation_differs);

    // The default decided: every rule is reported, none deciding.
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&comment_v2.id))
        .await);
    assert_eq!(label_of(&r.recorded_decision), Some("default"));
    assert_eq!(
        explained_rules(&r),
        vec![
            (0, "issues", NotMatched, "queue:triage", false),
            (1, "pushes", NotMatched, "drop", false),
            (2, "prs", NotMatched, "drop", false),
        ]
    );

    // From before the migration: unknown, and still the current decision.
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&old.id))
        .await);
    assert_eq!(r.recorded_version_status(), pb::RecordedVersion::Unknown);
    assert_eq!(
        (r.recorded_version, r.recorded_digest.as_deref()),
        (None, None)
    );
    assert!(r.rules.is_empty() && r.reevaluated_decision.is_none());
    assert_eq!(label_of(&r.recorded_decision), Some("queue:review"));
    assert_eq!(label_of(&r.current_decision), Some("drop"));
    assert!(r.current_differs);

    // Not routed yet: nothing recorded, the current decision given.
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&unrouted.id))
        .await);
    assert_eq!(r.recorded_version_status(), pb::RecordedVersion::Unknown);
    assert!(r.recorded_decision.is_none());
    assert_eq!(label_of(&r.current_decision), Some("drop"));
    assert!(r.current_differs);

    // A recorded decision version 1 no longer makes (as a rule reading the time would): the
    // re-evaluation says so.
    let odd = github_event(&api, &w, "pull_request.opened.json", 7).await;
    let decided_by = |version: i64, digest: &str| switchboard_control::store::DecidedBy {
        version,
        digest: digest.into(),
    };
    store
        .record_decision(
            &odd.id,
            RecordDecision {
                decision: RecordedDecision::new(Label::Quarantine).by_rule("prs"),
                fault: None,
                todo: None,
                decided_by: Some(decided_by(1, &w.config_digest)),
            },
        )
        .await
        .expect("decision");
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&odd.id))
        .await);
    assert_eq!(label_of(&r.reevaluated_decision), Some("queue:review"));
    assert!(r.reevaluation_differs);
    assert_eq!(r.rules.last().map(|rule| rule.deciding), Some(true));

    // A version the history does not hold: said so, no rules, the current decision given.
    let lost = github_event(&api, &w, "pull_request.opened.json", 8).await;
    store
        .record_decision(
            &lost.id,
            RecordDecision {
                decision: RecordedDecision::new(Label::Drop).by_rule("prs"),
                fault: None,
                todo: None,
                decided_by: Some(decided_by(99, "0".repeat(64).as_str())),
            },
        )
        .await
        .expect("decision");
    let r = ok(v
        .webhooks
        .explain_webhook_event(explain_request(&lost.id))
        .await);
    assert_eq!(
        r.recorded_version_status(),
        pb::RecordedVersion::NotInHistory
    );
    assert_eq!(r.recorded_version, Some(99));
    assert!(r.rules.is_empty() && r.reevaluated_decision.is_none());
    assert_eq!(label_of(&r.current_decision), Some("drop"));
    assert!(!r.current_differs);

    // Explaining wrote nothing.
    assert_eq!(version_and_history(store, &w).await, (2, 2));

    // Another scope's event answers exactly like an unknown id.
    let bob = OwnerScope::human("bob");
    let bobs = webhook(store, &bob).await;
    let theirs = github_event(&api, &bobs, "pull_request.opened.json", 9).await;
    assert_eq!(route_as_ingest(&api, &theirs).await, "default");
    let foreign = refused(
        v.webhooks
            .explain_webhook_event(explain_request(&theirs.id))
            .await,
        Code::NotFound,
        "not_found",
    );
    let unknown = refused(
        v.webhooks
            .explain_webhook_event(explain_request(&format!("ev_{}", "0".repeat(32))))
            .await,
        Code::NotFound,
        "not_found",
    );
    assert_eq!(foreign.message(), unknown.message());
}

// ---------------------------------------------------------------------------------------
// Redrive (issue 21 item 6)
// ---------------------------------------------------------------------------------------

fn redrive(webhook_id: &str, decisions: &[&str], limit: u32) -> pb::RedriveWebhookEventsRequest {
    pb::RedriveWebhookEventsRequest {
        webhook_id: webhook_id.into(),
        filter: Some(pb::RedriveFilter {
            decisions: decisions.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }),
        limit,
    }
}

fn confirm_redrive(webhook_id: &str, plan: &pb::RedrivePlan) -> pb::ConfirmWebhookRedriveRequest {
    pb::ConfirmWebhookRedriveRequest {
        webhook_id: webhook_id.into(),
        plan_token: plan.plan_token.clone(),
    }
}

async fn todos_of(store: &Store, w: &Webhook) -> i64 {
    use sqlx::Row;
    sqlx::query("SELECT COUNT(*) AS n FROM todos WHERE webhook_id = $1")
        .bind(w.id.as_str())
        .fetch_one(store.pool())
        .await
        .expect("count todos")
        .try_get("n")
        .expect("n")
}

async fn label_now(store: &Store, scope: &OwnerScope, event: &Event) -> Option<String> {
    let e = store.get_event(scope, &event.id).await.expect("event");
    e.routed
        .then(|| e.decision.map(|d| d.decision.to_string()))
        .flatten()
}

/// Issue 46 item 4: a change that dropped work by mistake is recovered by redrive. `drop` is
/// selected only when asked for; the configuration version that decided, and the time, narrow
/// the selection; a delivery that has a todo is never selected; the events are re-routed
/// oldest first, each once; of 10 concurrent confirms of one plan exactly one applies.
async fn redrive_recovers_what_a_change_dropped_by_version_and_time_once_each(api: Api) {
    let store = &api.store;
    human(store, "ed").await;
    store.create_team("ops", "Operations").await.expect("team");
    store
        .set_membership("ops", "ed", Role::Editor)
        .await
        .expect("membership");
    let ops = OwnerScope::team("ops");
    let editor = vend(store, "ed", &ops, &EVERY_FAMILY).await;
    let c = api.client(&editor);
    let w = store
        .create_webhook(NewWebhook {
            owner_scope: ops.clone(),
            source_type: SourceType::Github,
            secret: None,
            grant: GRANT.iter().map(|q| q.to_string()).collect(),
            reject_unverified: false,
            name: None,
            configuration: Some(crate::support::typed(json!({"rules": [
                {"id": "prs", "when": ".kind == \"pull_request.opened\"", "action": {"queue": "review"}},
            ], "params": {}}))),
            actor: Actor::operator(),
        })
        .await
        .expect("webhook");
    let set_prs = |action: &str| {
        let mut rules = c.rules.clone();
        let request = pb::UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "prs".into(),
            patch: Some(pb::RulePatch {
                action: Some(action.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        async move { ok(rules.update_webhook_rule(request).await).version }
    };
    // Version 1 queues pull requests; version 2 drops them by mistake; version 3 is the fix.
    let kept = github_event(&api, &w, "pull_request.opened.json", 1).await;
    assert_eq!(route_as_ingest(&api, &kept).await, "queue:review");
    assert_eq!(set_prs("drop").await, 2);
    let mut dropped = Vec::new();
    for n in 2..=4 {
        let e = github_event(&api, &w, "pull_request.opened.json", n).await;
        assert_eq!(route_as_ingest(&api, &e).await, "drop");
        dropped.push(e);
    }
    assert_eq!(set_prs("queue:review").await, 3);
    let after_fix = github_event(&api, &w, "pull_request.opened.json", 5).await;
    assert_eq!(route_as_ingest(&api, &after_fix).await, "queue:review");
    assert_eq!(todos_of(store, &w).await, 2);

    let plan_of = |filter: pb::RedriveFilter| {
        let mut webhooks = c.webhooks.clone();
        let request = pb::RedriveWebhookEventsRequest {
            webhook_id: w.id.clone(),
            filter: Some(filter),
            limit: 0,
        };
        async move { webhooks.redrive_webhook_events(request).await }
    };
    let ids = |plan: &pb::RedrivePlan| -> Vec<String> {
        plan.events.iter().map(|e| e.event_id.clone()).collect()
    };
    // Not asked for, drops are not selected.
    assert!(
        ok(plan_of(pb::RedriveFilter::default()).await)
            .events
            .is_empty()
    );
    let drops_of = |version: i64| pb::RedriveFilter {
        decisions: vec!["drop".into()],
        config_version: Some(version),
        ..Default::default()
    };
    assert!(ok(plan_of(drops_of(1)).await).events.is_empty());
    // By time: the last two of version 2's drops.
    let later = ok(plan_of(pb::RedriveFilter {
        since: Some(switchboard_proto::convert::time::from_millis(
            dropped[1].received_at,
        )),
        ..drops_of(2)
    })
    .await);
    assert_eq!(ids(&later), [dropped[1].id.clone(), dropped[2].id.clone()]);
    invalid(plan_of(drops_of(0)).await, "filter.config_version");

    // Version 2's drops, oldest first, each to review now.
    let plan = ok(plan_of(drops_of(2)).await);
    assert_eq!(
        ids(&plan),
        dropped.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    );
    assert!(
        plan.events
            .iter()
            .all(|e| e.before == "drop" && e.after == "queue:review" && e.changes)
    );
    // Ten confirms at once: one applies, the others are refused; one todo per delivery.
    let confirms = (0..10).map(|_| {
        let mut webhooks = c.webhooks.clone();
        let request = confirm_redrive(&w.id, &plan);
        async move { webhooks.confirm_webhook_redrive(request).await }
    });
    let answers = futures::future::join_all(confirms).await;
    let applied: Vec<_> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    assert_eq!(applied.len(), 1, "{answers:?}");
    for refused in answers.iter().filter_map(|a| a.as_ref().err()) {
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
    }
    let done = applied[0].get_ref();
    assert_eq!((done.applied, done.skipped, done.todos_created), (3, 0, 3));
    assert_eq!(
        done.events
            .iter()
            .map(|o| o.event_id.clone())
            .collect::<Vec<_>>(),
        ids(&plan),
        "in arrival order"
    );
    assert_eq!(todos_of(store, &w).await, 5);
    for e in &dropped {
        assert_eq!(
            label_now(store, &ops, e).await.as_deref(),
            Some("queue:review")
        );
    }
    // Recovered work has its todo: never selected again.
    assert!(
        ok(plan_of(pb::RedriveFilter {
            decisions: vec!["drop".into(), "quarantine".into()],
            ..Default::default()
        })
        .await)
        .events
        .is_empty()
    );
    // Issue 47: the applied redrive is one entry of the change log, and the log verifies.
    let entries = store.list_changes(None, 0, 1000).await.expect("the log");
    let redrives: Vec<switchboard_model::change_log::ChangeEntry> = entries
        .iter()
        .map(|e| serde_json::from_str(&e.text).expect("an entry"))
        .filter(|e: &switchboard_model::change_log::ChangeEntry| {
            e.kind == switchboard_model::change_log::ChangeKind::Redrive
        })
        .collect();
    assert_eq!(
        redrives.len(),
        1,
        "one entry for the one confirm that applied"
    );
    assert_eq!(
        redrives[0].detail.get("applied").map(String::as_str),
        Some("3")
    );
    // It names who applied it: ed's endpoint, acting for ed.
    assert_eq!(redrives[0].actor.human.as_deref(), Some("ed"));
    assert!(
        redrives[0]
            .actor
            .endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("ep_")),
        "{:?}",
        redrives[0].actor
    );
    assert!(store.verify_change_log().await.expect("read").is_ok());
}

async fn redrive_plans_then_routes_each_event_once(api: Api) {
    use sqlx::Row;
    let store = &api.store;
    for login in ["ed", "bob"] {
        human(store, login).await;
    }
    store.create_team("ops", "Operations").await.expect("team");
    store
        .set_membership("ops", "ed", Role::Editor)
        .await
        .expect("membership");
    let ops = OwnerScope::team("ops");
    let editor = vend(store, "ed", &ops, &EVERY_FAMILY).await;
    let mut c = api.client(&editor);
    // Version 1 quarantines pull requests by mistake.
    let w = store
        .create_webhook(NewWebhook {
            owner_scope: ops.clone(),
            source_type: SourceType::Github,
            secret: None,
            grant: GRANT.iter().map(|q| q.to_string()).collect(),
            reject_unverified: false,
            name: None,
            configuration: Some(crate::support::typed(json!({"rules": [
                {"id": "issues", "when": ".kind == \"issues.opened\"", "action": {"queue": "triage"}},
                {"id": "prs", "when": ".kind == \"pull_request.opened\"", "action": {"quarantine": true}},
            ], "params": {}}))),
            actor: Actor::operator(),
        })
        .await
        .expect("webhook");
    let pr1 = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let pr2 = github_event(&api, &w, "pull_request.opened.json", 2).await;
    let issue = github_event(&api, &w, "issues.opened.json", 3).await;
    assert_eq!(route_as_ingest(&api, &pr1).await, "quarantine");
    assert_eq!(route_as_ingest(&api, &pr2).await, "quarantine");
    assert_eq!(route_as_ingest(&api, &issue).await, "queue:triage");
    // A fault recorded as quarantined (trusted actors), and one not routed yet.
    let faulted = github_event(&api, &w, "pull_request.opened.json", 4).await;
    store
        .record_decision(
            &faulted.id,
            RecordDecision {
                decision: RecordedDecision {
                    fault_code: Some("rule_fault".into()),
                    ..RecordedDecision::new(Label::Fault).by_rule("prs")
                },
                fault: Some(RecordedFault {
                    code: "rule_fault".into(),
                    disposition: Some(Disposition::Quarantine),
                    reason: "x".into(),
                    rule_id: Some("prs".into()),
                }),
                todo: None,
                decided_by: None,
            },
        )
        .await
        .expect("a fault");
    let pending = github_event(&api, &w, "pull_request.opened.json", 5).await;
    assert_eq!(todos_of(store, &w).await, 1);

    // Bad filters name their field.
    invalid(
        c.webhooks
            .redrive_webhook_events(redrive(&w.id, &["queue:triage"], 0))
            .await,
        "filter.decisions",
    );
    invalid(
        c.webhooks
            .redrive_webhook_events(redrive(&w.id, &[], 1001))
            .await,
        "limit",
    );
    invalid(
        c.webhooks
            .redrive_webhook_events(pb::RedriveWebhookEventsRequest {
                webhook_id: w.id.clone(),
                filter: Some(pb::RedriveFilter {
                    since: Some(switchboard_proto::convert::time::from_millis(2)),
                    until: Some(switchboard_proto::convert::time::from_millis(1)),
                    ..Default::default()
                }),
                limit: 0,
            })
            .await,
        "filter.until",
    );

    // The rule is fixed: pull requests go to review (version 2).
    let saved = ok(c
        .rules
        .update_webhook_rule(pb::UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "prs".into(),
            patch: Some(pb::RulePatch {
                action: Some("queue:review".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await);
    assert_eq!(saved.version, 2);

    // The plan: every quarantined, faulted and pending event, oldest first, what it was and
    // what version 2 gives it; the event with a todo is not selected. Nothing changes.
    let plan = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &[], 0))
        .await);
    let rows: Vec<(&str, &str, &str, bool)> = plan
        .events
        .iter()
        .map(|e| {
            (
                e.event_id.as_str(),
                e.before.as_str(),
                e.after.as_str(),
                e.changes,
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (pr1.id.as_str(), "quarantine", "queue:review", true),
            (pr2.id.as_str(), "quarantine", "queue:review", true),
            (faulted.id.as_str(), "fault", "queue:review", true),
            (pending.id.as_str(), "pending", "queue:review", true),
        ]
    );
    assert_eq!(
        (plan.config_version, plan.config_digest.as_str()),
        (2, saved.digest.as_str())
    );
    assert_eq!(plan.totals_before.get("quarantine"), Some(&2));
    assert_eq!(plan.totals_before.get("fault"), Some(&1));
    assert_eq!(plan.totals_before.get("pending"), Some(&1));
    assert_eq!(plan.totals_after.get("queue:review"), Some(&4));
    assert_eq!(plan.changes, 4);
    assert!(!plan.truncated);
    assert!(plan.plan_token.starts_with("sbp_"));
    let with = plan.confirm_with.as_ref().expect("confirm_with");
    assert_eq!(
        (with.tool.as_str(), with.webhook_id.as_str()),
        ("confirm_webhook_redrive", w.id.as_str())
    );
    assert_eq!(
        label_now(store, &ops, &pr1).await.as_deref(),
        Some("quarantine")
    );
    assert_eq!(label_now(store, &ops, &pending).await, None);
    assert_eq!(todos_of(store, &w).await, 1);

    // The filter and limit narrow: one quarantined event, more there.
    let one = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &["quarantine"], 1))
        .await);
    assert_eq!(one.events.len(), 1);
    assert_eq!(one.events[0].event_id, pr1.id);
    assert!(one.truncated);

    // Another scope's webhook, and an unknown one, answer alike.
    let bob = OwnerScope::human("bob");
    let bobs = webhook(store, &bob).await;
    let foreign = refused(
        c.webhooks
            .redrive_webhook_events(redrive(&bobs.id, &[], 0))
            .await,
        Code::NotFound,
        "not_found",
    );
    let unknown = refused(
        c.webhooks
            .redrive_webhook_events(redrive(&format!("wh_{}", "0".repeat(32)), &[], 0))
            .await,
        Code::NotFound,
        "not_found",
    );
    assert_eq!(foreign.message(), unknown.message());
    // The token under another webhook id is no plan at all.
    refused(
        c.webhooks
            .confirm_webhook_redrive(confirm_redrive(&bobs.id, &plan))
            .await,
        Code::NotFound,
        "not_found",
    );
    // Bob's own endpoint with ed's token: not found either.
    let bobs_agent = vend(store, "bob", &bob, &EVERY_FAMILY).await;
    refused(
        api.client(&bobs_agent)
            .webhooks
            .confirm_webhook_redrive(confirm_redrive(&w.id, &plan))
            .await,
        Code::NotFound,
        "not_found",
    );

    // A second plan over the same events, made before the first is confirmed.
    let rival = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &[], 0))
        .await);
    assert_eq!(rival.changes, 4);

    // The confirm routes each event once, one todo per queue decision.
    let done = ok(c
        .webhooks
        .confirm_webhook_redrive(confirm_redrive(&w.id, &plan))
        .await);
    assert_eq!((done.applied, done.skipped, done.todos_created), (4, 0, 4));
    assert!(
        done.events
            .iter()
            .all(|o| o.applied && o.todo_created && o.todo_id.is_some())
    );
    assert_eq!(todos_of(store, &w).await, 5);
    for e in [&pr1, &pr2, &faulted, &pending] {
        assert_eq!(
            label_now(store, &ops, e).await.as_deref(),
            Some("queue:review")
        );
    }
    // Explain sees the version the redrive recorded.
    let why = ok(c
        .webhooks
        .explain_webhook_event(explain_request(&pr1.id))
        .await);
    assert_eq!(
        (why.recorded_version, why.recorded_digest.as_deref()),
        (Some(2), Some(saved.digest.as_str()))
    );
    // The redrive's record keeps the decision it replaced.
    let (record, outcomes) = store
        .get_redrive(&ops, &done.redrive_id)
        .await
        .expect("the redrive's record");
    let before = record
        .entries
        .iter()
        .find(|e| e.event_id == pr1.id)
        .and_then(|e| e.before_decision.clone())
        .expect("the old decision");
    assert_eq!(before.decision, "quarantine");
    assert_eq!(outcomes.map(|o| o.len()), Some(4));
    assert!(matches!(
        store.get_redrive(&bob, &done.redrive_id).await,
        Err(switchboard_control::Error::NotFound { .. })
    ));

    // A second confirm of the same token is refused, naming the call to make.
    let again = refused(
        c.webhooks
            .confirm_webhook_redrive(confirm_redrive(&w.id, &plan))
            .await,
        Code::FailedPrecondition,
        "plan_stale",
    );
    assert!(
        again.message().contains("redrive_webhook_events"),
        "{}",
        again.message()
    );

    // The rival plan saw the events before they were routed: each is skipped, none doubled.
    let late = ok(c
        .webhooks
        .confirm_webhook_redrive(confirm_redrive(&w.id, &rival))
        .await);
    assert_eq!((late.applied, late.skipped, late.todos_created), (0, 4, 0));
    assert_eq!(todos_of(store, &w).await, 5);

    // A pending event that ingest's retry loop routes between plan and confirm is skipped.
    let racing = github_event(&api, &w, "pull_request.opened.json", 6).await;
    let planned = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &["pending"], 0))
        .await);
    assert_eq!(planned.events.len(), 1);
    assert_eq!(route_as_ingest(&api, &racing).await, "queue:review");
    let raced = ok(c
        .webhooks
        .confirm_webhook_redrive(confirm_redrive(&w.id, &planned))
        .await);
    assert_eq!((raced.applied, raced.skipped), (0, 1));
    assert_eq!(todos_of(store, &w).await, 6);

    // A plan made before a rule change is stale: nothing is routed.
    let quarantined = github_event(&api, &w, "pull_request.opened.json", 7).await;
    store
        .record_decision(
            &quarantined.id,
            RecordDecision {
                decision: RecordedDecision::new(Label::Quarantine).by_rule("prs"),
                fault: None,
                todo: None,
                decided_by: None,
            },
        )
        .await
        .expect("a quarantine");
    let before_change = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &[], 0))
        .await);
    assert_eq!(before_change.events.len(), 1);
    ok(c.rules
        .update_webhook_rule(pb::UpdateWebhookRuleRequest {
            webhook_id: w.id.clone(),
            rule_id: "prs".into(),
            patch: Some(pb::RulePatch {
                action: Some("drop".into()),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await);
    let stale = refused(
        c.webhooks
            .confirm_webhook_redrive(confirm_redrive(&w.id, &before_change))
            .await,
        Code::FailedPrecondition,
        "plan_stale",
    );
    assert!(
        stale.message().contains("redrive_webhook_events"),
        "{}",
        stale.message()
    );
    assert_eq!(
        label_now(store, &ops, &quarantined).await.as_deref(),
        Some("quarantine")
    );
    // Planned again: lost work (to drop) is shown first.
    let dropping = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &[], 0))
        .await);
    assert_eq!(
        dropping
            .transitions
            .iter()
            .map(|t| (t.from.as_str(), t.to.as_str(), t.count))
            .collect::<Vec<_>>(),
        vec![("quarantine", "drop", 1)]
    );
    // Two plans over the same events confirmed at once: each event is routed by one of them.
    let other = ok(c
        .webhooks
        .redrive_webhook_events(redrive(&w.id, &[], 0))
        .await);
    let mut c2 = api.client(&editor);
    let (first, second) = tokio::join!(
        c.webhooks
            .confirm_webhook_redrive(confirm_redrive(&w.id, &dropping)),
        c2.webhooks
            .confirm_webhook_redrive(confirm_redrive(&w.id, &other)),
    );
    let (first, second) = (ok(first), ok(second));
    assert_eq!(first.applied + second.applied, 1, "{first:?} {second:?}");
    assert_eq!(first.skipped + second.skipped, 1);
    assert_eq!(
        label_now(store, &ops, &quarantined).await.as_deref(),
        Some("drop")
    );
    let row = sqlx::query("SELECT COUNT(*) AS n FROM redrives WHERE webhook_id = $1")
        .bind(w.id.as_str())
        .fetch_one(store.pool())
        .await
        .expect("count");
    assert!(row.try_get::<i64, _>("n").expect("n") >= 6);
}

// ---------------------------------------------------------------------------------------
// Times (issue 49 item 5)
// ---------------------------------------------------------------------------------------

/// Reads a rule-pack stream to its last event: the plan, the applied result or the pending.
async fn pack_event(
    stream: Result<Response<tonic::Streaming<pb::RulePackEvent>>, Status>,
) -> pb::rule_pack_event::Event {
    let mut stream = ok(stream);
    let mut last = None;
    while let Some(ev) = stream.message().await.expect("the stream") {
        if let Some(e) = ev.event {
            last = Some(e);
        }
    }
    last.expect("a result")
}

/// Every time the API answers is a google.protobuf.Timestamp naming the same millisecond as
/// the deprecated `*_ms` or RFC 3339 text field beside it, which is still filled for one
/// release: a webhook's creation, an event's receipt and its retention window, a todo's
/// creation, claim, lease and completion, a history record, a change-log entry, a plan's and
/// a plan status's expiry with the replay's retention, a trial's start, end and deadline, and
/// an installed pack's provenance and listing.
#[allow(deprecated)]
async fn every_time_is_a_timestamp_beside_its_deprecated_field(api: Api) {
    use pb::rule_pack_event::Event as PackEvent;
    let alice = human(&api.store, "alice").await;
    let cred = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let mut c = api.client(&cred);
    let w = webhook(&api.store, &alice).await;

    let got = ok(c
        .webhooks
        .get_webhook(pb::GetWebhookRequest {
            webhook_id: w.id.clone(),
        })
        .await)
    .webhook
    .expect("webhook");
    assert_eq!(ms(&got.created_at), Some(got.created_at_ms));
    assert_eq!(got.created_at_ms, w.created_at);

    // An event, its summary, its retention window.
    let event = github_event(&api, &w, "pull_request.opened.json", 1).await;
    let listed = ok(c
        .webhooks
        .list_webhook_events(pb::ListWebhookEventsRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await);
    let summary = &listed.events[0];
    assert_eq!(ms(&summary.received_at), Some(summary.received_at_ms));
    assert_eq!(summary.received_at_ms, event.received_at);
    let window = listed.retention.expect("retention");
    assert_eq!(ms(&window.kept_since), Some(window.kept_since_ms));
    assert_eq!(ms(&window.oldest_event_at), Some(window.oldest_event_at_ms));
    let one = ok(c
        .webhooks
        .get_webhook_event(pb::GetWebhookEventRequest {
            event_id: event.id.clone(),
            ..Default::default()
        })
        .await)
    .event
    .expect("event");
    assert_eq!(ms(&one.received_at), Some(event.received_at));

    // A todo: created, claimed with a lease, completed.
    let todo = todo_for(&api, &event, "forge").await;
    let open = ok(c
        .todos
        .list_todos(pb::ListTodosRequest {
            queue: "forge".into(),
            ..Default::default()
        })
        .await)
    .todos
    .remove(0);
    assert_eq!(ms(&open.created_at), Some(open.created_at_ms));
    assert_eq!(open.created_at_ms, todo.created_at);
    assert_eq!(
        (
            &open.claimed_at,
            &open.completed_at,
            &open.claim_expires_at_time
        ),
        (&None, &None, &None),
        "unclaimed: no claim, no lease, no completion"
    );
    let claimed = ok(c.todos.claim_todo(claim(&todo.id)).await)
        .todo
        .expect("todo");
    assert_eq!(ms(&claimed.claimed_at), Some(claimed.claimed_at_ms));
    assert_eq!(claimed.claimed_at_ms, api.clock.now_ms());
    assert_eq!(
        text(&claimed.claim_expires_at_time),
        claimed.claim_expires_at
    );
    assert!(!claimed.claim_expires_at.is_empty());
    api.clock.advance(Duration::from_secs(5));
    let done = ok(c.todos.complete_todo(complete(&todo.id)).await)
        .todo
        .expect("todo");
    assert_eq!(ms(&done.completed_at), Some(done.completed_at_ms));
    assert_eq!(done.completed_at_ms, api.clock.now_ms());

    // A plan, its status, its trial.
    let PackEvent::Plan(plan) = pack_event(
        c.packs
            .install_rule_pack(pb::InstallRulePackRequest {
                webhook_id: w.id.clone(),
                name: "drop-ci-noise".into(),
                ..Default::default()
            })
            .await,
    )
    .await
    else {
        panic!("a plan")
    };
    assert_eq!(text(&plan.expires_at_time), plan.expires_at);
    assert!(ms(&plan.expires_at_time) > Some(api.clock.now_ms()));
    let report = plan.report.clone().expect("report");
    assert_eq!(
        text(&report.window_from_time),
        report.window_from.unwrap_or_default()
    );
    assert_eq!(
        text(&report.window_to_time),
        report.window_to.unwrap_or_default()
    );
    let retention = report.retention.expect("retention");
    assert_eq!(text(&retention.kept_since_time), retention.kept_since);
    assert_eq!(
        text(&retention.oldest_stored_time),
        retention.oldest_stored.unwrap_or_default()
    );
    let status = ok(c
        .packs
        .get_rule_pack_plan(pb::GetRulePackPlanRequest {
            plan_token: plan.plan_token.clone(),
        })
        .await);
    assert_eq!(status.expires_at_time, plan.expires_at_time);
    assert_eq!(text(&status.expires_at_time), status.expires_at);

    let trial = ok(c
        .trials
        .start_rule_trial(pb::StartRuleTrialRequest {
            webhook_id: w.id.clone(),
            plan_token: plan.plan_token.clone(),
            ..Default::default()
        })
        .await);
    assert_eq!(text(&trial.started_at_time), trial.started_at);
    assert_eq!(ms(&trial.started_at_time), Some(api.clock.now_ms()));
    assert_eq!(text(&trial.ends_at_time), trial.ends_at);
    assert_eq!((&trial.ended_at_time, &trial.ended_at), (&None, &None));
    api.clock.advance(Duration::from_secs(5));
    let stopped = ok(c
        .trials
        .stop_rule_trial(pb::StopRuleTrialRequest {
            trial_id: trial.trial_id.clone(),
        })
        .await);
    assert_eq!(ms(&stopped.ended_at_time), Some(api.clock.now_ms()));
    assert_eq!(Some(text(&stopped.ended_at_time)), stopped.ended_at);

    // Confirmed: the installed pack's provenance, its listing, the history, the change log.
    let applied = pack_event(
        c.packs
            .install_rule_pack(pb::InstallRulePackRequest {
                webhook_id: w.id.clone(),
                name: "drop-ci-noise".into(),
                confirm: plan.plan_token.clone(),
                allow_unproven: true,
                ..Default::default()
            })
            .await,
    )
    .await;
    assert!(matches!(applied, PackEvent::Applied(_)), "{applied:?}");
    let got = ok(c
        .webhooks
        .get_webhook(pb::GetWebhookRequest {
            webhook_id: w.id.clone(),
        })
        .await)
    .webhook
    .expect("webhook");
    let pack = &got.installed_packs[0];
    assert!(pack.installed_at_time.is_some());
    assert_eq!(text(&pack.installed_at_time), pack.installed_at);
    assert_eq!(text(&pack.replayed_at_time), pack.replayed_at);
    assert_eq!(
        text(&pack.window_from_time),
        pack.window_from.clone().unwrap_or_default()
    );
    assert_eq!(
        text(&pack.window_to_time),
        pack.window_to.clone().unwrap_or_default()
    );
    let listing = ok(c
        .packs
        .list_rule_packs(pb::ListRulePacksRequest {
            webhook_id: w.id.clone(),
        })
        .await)
    .listing
    .expect("listing");
    let installed = listing
        .packs
        .iter()
        .find_map(|p| p.installed.clone())
        .expect("installed");
    assert_eq!(text(&installed.installed_at_time), installed.installed_at);
    assert_eq!(text(&installed.last_replay_time), installed.last_replay);
    assert!(installed.installed_at_time.is_some());

    let history = ok(c
        .rules
        .list_webhook_history(pb::ListWebhookHistoryRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await)
    .records;
    assert!(history.len() >= 2, "{history:?}");
    for h in &history {
        assert_eq!(ms(&h.saved_at), Some(h.saved_at_ms));
    }
    let changes = ok(c
        .rules
        .list_webhook_changes(pb::ListWebhookChangesRequest {
            webhook_id: w.id.clone(),
            ..Default::default()
        })
        .await)
    .entries;
    assert!(!changes.is_empty());
    for e in &changes {
        assert_eq!(ms(&e.at), Some(e.at_ms));
    }
}

/// A request's time bound is read as a Timestamp or as the deprecated milliseconds: the same
/// bound gives the same listing either way and both ways at once; given both ways with
/// different values, or as a Timestamp outside what one may name, the call is refused with
/// `invalid_argument` naming the field.
#[allow(deprecated)]
async fn a_time_bound_is_a_timestamp_or_the_deprecated_millis_never_two_times(api: Api) {
    use switchboard_proto::convert::time::{Timestamp, from_millis};
    let alice = human(&api.store, "alice").await;
    let cred = vend(&api.store, "alice", &alice, &EVERY_FAMILY).await;
    let mut c = api.client(&cred);
    let w = webhook(&api.store, &alice).await;
    // Three saved versions, a minute apart: three change-log entries after the creation's.
    let mut ats = Vec::new();
    for n in 0..3 {
        api.clock.advance(Duration::from_secs(60));
        ats.push(api.clock.now_ms());
        seed_configuration(
            &api.store,
            &w,
            json!({"rules": [{"id": format!("r-{n}"), "when": "true", "action": {"queue": "forge"}}]}),
            None,
        )
        .await;
    }
    let changes = |req: pb::ListWebhookChangesRequest| {
        let mut rules = c.rules.clone();
        let webhook_id = w.id.clone();
        async move {
            rules
                .list_webhook_changes(pb::ListWebhookChangesRequest { webhook_id, ..req })
                .await
        }
    };
    let seqs = |r: pb::ListWebhookChangesResponse| -> Vec<u64> {
        r.entries.iter().map(|e| e.seq).collect()
    };
    let by_millis = seqs(ok(changes(pb::ListWebhookChangesRequest {
        since_ms: ats[1],
        until_ms: ats[2] + 1,
        ..Default::default()
    })
    .await));
    assert_eq!(
        by_millis.len(),
        2,
        "the second and third versions (until is exclusive)"
    );
    let by_timestamp = seqs(ok(changes(pb::ListWebhookChangesRequest {
        since: Some(from_millis(ats[1])),
        until: Some(from_millis(ats[2] + 1)),
        ..Default::default()
    })
    .await));
    assert_eq!(by_timestamp, by_millis);
    let both = seqs(ok(changes(pb::ListWebhookChangesRequest {
        since_ms: ats[1],
        since: Some(from_millis(ats[1])),
        until: Some(from_millis(ats[2] + 1)),
        ..Default::default()
    })
    .await));
    assert_eq!(both, by_millis, "both ways, agreeing");
    let disagree = invalid(
        changes(pb::ListWebhookChangesRequest {
            since_ms: ats[0],
            since: Some(from_millis(ats[1])),
            ..Default::default()
        })
        .await,
        "since",
    );
    assert!(
        disagree.message().contains("different times"),
        "{}",
        disagree.message()
    );
    invalid(
        changes(pb::ListWebhookChangesRequest {
            until: Some(Timestamp {
                seconds: i64::MAX,
                nanos: 0,
            }),
            ..Default::default()
        })
        .await,
        "until",
    );

    // A replay window and a redrive filter say which field too.
    let event = github_event(&api, &w, "pull_request.opened.json", 1).await;
    invalid(
        c.rules
            .test_webhook_rules(pb::TestWebhookRulesRequest {
                webhook_id: w.id.clone(),
                replay: Some(pb::TestReplay {
                    since_ms: event.received_at,
                    since: Some(from_millis(event.received_at + 1)),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await,
        "replay.since",
    );
    let redrive = |filter: pb::RedriveFilter| pb::RedriveWebhookEventsRequest {
        webhook_id: w.id.clone(),
        filter: Some(filter),
        limit: 0,
    };
    let selected = |plan: pb::RedrivePlan| -> Vec<String> {
        plan.events.iter().map(|e| e.event_id.clone()).collect()
    };
    let by_millis = selected(ok(c
        .webhooks
        .redrive_webhook_events(redrive(pb::RedriveFilter {
            decisions: vec!["pending".into()],
            since_ms: Some(event.received_at),
            ..Default::default()
        }))
        .await));
    assert_eq!(by_millis, std::slice::from_ref(&event.id));
    let planned = ok(c
        .webhooks
        .redrive_webhook_events(redrive(pb::RedriveFilter {
            decisions: vec!["pending".into()],
            since: Some(from_millis(event.received_at)),
            ..Default::default()
        }))
        .await);
    assert_eq!(text(&planned.expires_at_time), planned.expires_at);
    assert_eq!(
        ms(&planned.events[0].received_at),
        Some(planned.events[0].received_at_ms)
    );
    assert_eq!(selected(planned), by_millis);
    invalid(
        c.webhooks
            .redrive_webhook_events(redrive(pb::RedriveFilter {
                until_ms: Some(event.received_at),
                until: Some(from_millis(event.received_at - 1)),
                ..Default::default()
            }))
            .await,
        "filter.until",
    );
}
