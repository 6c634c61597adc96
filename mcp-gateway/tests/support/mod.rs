//! Test support: a fake control (Identity, Webhooks, RulePacks) served over real gRPC, a
//! gateway in front of it, and a small raw HTTP/1.1 client that can send whatever a hostile
//! or broken client would.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use serde_json::{Value, json};
use switchboard_mcp_gateway::{BoundGateway, GatewayConfig};
use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::identity_server::{Identity, IdentityServer};
use switchboard_proto::control::v1::rule_packs_server::{RulePacks, RulePacksServer};
use switchboard_proto::control::v1::webhook_rules_server::{WebhookRules, WebhookRulesServer};
use switchboard_proto::control::v1::webhooks_server::{Webhooks, WebhooksServer};
use switchboard_proto::convert::time;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::{Code, Request, Response, Status};
use tonic_types::{ErrorDetails, StatusExt};

/// Every verb of control's allowlist table.
pub const ALL_VERBS: &[&str] = &[
    "create_webhook",
    "list_webhooks",
    "get_webhook",
    "delete_webhook",
    "list_webhook_events",
    "get_webhook_event",
    "explain_webhook_event",
    "rotate_webhook_secret",
    "rename_webhook",
    "list_webhook_rules",
    "list_webhook_changes",
    "set_webhook_rules",
    "update_webhook_rule",
    "delete_webhook_rule",
    "test_webhook_rules",
    "plan_webhook_rules",
    "list_rule_packs",
    "install_rule_pack",
    "remove_rule_pack",
    "get_rule_pack_plan",
    "get_rule_guard",
    "confirm_rule_pack_plan",
    "list_webhook_history",
    "redrive_webhook_events",
    "confirm_webhook_redrive",
    "start_rule_trial",
    "stop_rule_trial",
    "get_rule_trial",
    "list_rule_trials",
    "promote_rule_trial",
    "list_todos",
    "claim_todo",
    "release_todo",
    "complete_todo",
];

/// The credentials the fake control knows.
pub const ALL: &str = "sbe_all";
pub const FEW: &str = "sbe_few";
pub const SPENT: &str = "sbe_spent";

fn status(code: Code, reason: &str, message: &str, metadata: &[(&str, String)]) -> Status {
    let mut details = ErrorDetails::new();
    details.set_error_info(
        reason,
        "switchboard",
        metadata
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<HashMap<_, _>>(),
    );
    Status::with_error_details(code, format!("{reason}: {message}"), details)
}

/// What the fake saw and how it behaves.
#[derive(Default)]
pub struct Seen {
    /// The `authorization` metadata of every call, in order.
    pub authorizations: Mutex<Vec<String>>,
    pub who_am_i_calls: AtomicUsize,
    /// Each WhoAmI's `uncharged` flag, in order.
    pub who_am_i_uncharged: Mutex<Vec<bool>>,
    /// Set when a slow install's stream was dropped by the gateway.
    pub slow_stream_dropped: AtomicBool,
    pub slow_events_sent: AtomicUsize,
}

#[derive(Clone, Default)]
pub struct FakeControl {
    pub seen: Arc<Seen>,
}

impl FakeControl {
    fn bearer<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let value = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        if let Ok(mut seen) = self.seen.authorizations.lock() {
            seen.push(value.clone());
        }
        match value.strip_prefix("Bearer ") {
            Some(b) if [ALL, FEW, SPENT].contains(&b) => Ok(b.to_string()),
            _ => Err(status(
                Code::Unauthenticated,
                "unauthenticated",
                "the credential is unknown or revoked",
                &[],
            )),
        }
    }
}

fn webhook() -> pb::Webhook {
    pb::Webhook {
        id: "wh_00000000000000000000000000000001".into(),
        name: "alice's site".into(),
        owner_scope: "human:alice".into(),
        source_type: pb::SourceType::Github as i32,
        grant: vec!["forge".into(), "review".into()],
        default_queue: "forge".into(),
        reject_unverified: false,
        config_version: 3,
        config_digest: "ab".repeat(32),
        ingest_path: "/hooks/wh_00000000000000000000000000000001".into(),
        trusted_actors: None,
        installed_packs: vec![pb::InstalledPack {
            name: "drop-ci-noise".into(),
            version: "1.0.0".into(),
            ..Default::default()
        }],
        created_at: Some(time::from_millis(1_795_996_750_000)),
        confirm_policy: "self".into(),
        guard_on_breach: String::new(),
        approval_rule: None,
        approval_rule_default: true,
        // The gateway reads the Timestamps only; the deprecated fields stay empty here.
        ..Default::default()
    }
}

#[tonic::async_trait]
impl Identity for FakeControl {
    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        self.seen.who_am_i_calls.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut flags) = self.seen.who_am_i_uncharged.lock() {
            flags.push(request.get_ref().uncharged);
        }
        let bearer = self.bearer(&request)?;
        if bearer == SPENT {
            let mut details = ErrorDetails::with_retry_info(Some(Duration::from_millis(2500)));
            details.set_error_info(
                "rate_limited",
                "switchboard",
                HashMap::from([("retry_after_ms".to_string(), "2500".to_string())]),
            );
            return Err(Status::with_error_details(
                Code::ResourceExhausted,
                "rate_limited: rate limit reached, retry after 2500 ms",
                details,
            ));
        }
        let verbs: Vec<String> = if bearer == ALL {
            ALL_VERBS.iter().map(|v| v.to_string()).collect()
        } else {
            [
                "list_webhooks",
                "get_webhook",
                "list_rule_packs",
                "list_webhook_rules",
            ]
            .iter()
            .map(|v| v.to_string())
            .collect()
        };
        Ok(Response::new(pb::WhoAmIResponse {
            endpoint_id: format!("ep_{bearer}"),
            endpoint_name: bearer.clone(),
            human: "alice".into(),
            owner_scope: "human:alice".into(),
            role: "admin".into(),
            usable_verbs: verbs.clone(),
            verbs,
        }))
    }
}

#[tonic::async_trait]
impl Webhooks for FakeControl {
    async fn create_webhook(
        &self,
        request: Request<pb::CreateWebhookRequest>,
    ) -> Result<Response<pb::CreateWebhookResponse>, Status> {
        self.bearer(&request)?;
        let r = request.into_inner();
        let mut w = webhook();
        w.grant = r.grant;
        Ok(Response::new(pb::CreateWebhookResponse {
            webhook: Some(w),
            secret: r.secret.unwrap_or_else(|| "s".repeat(32)),
        }))
    }
    async fn list_webhooks(
        &self,
        request: Request<pb::ListWebhooksRequest>,
    ) -> Result<Response<pb::ListWebhooksResponse>, Status> {
        self.bearer(&request)?;
        Ok(Response::new(pb::ListWebhooksResponse {
            webhooks: vec![webhook()],
            next_cursor: String::new(),
        }))
    }
    async fn get_webhook(
        &self,
        request: Request<pb::GetWebhookRequest>,
    ) -> Result<Response<pb::GetWebhookResponse>, Status> {
        self.bearer(&request)?;
        if request.get_ref().webhook_id == webhook().id {
            return Ok(Response::new(pb::GetWebhookResponse {
                webhook: Some(webhook()),
            }));
        }
        Err(status(
            Code::NotFound,
            "not_found",
            "webhook not found",
            &[("resource", "webhook".into())],
        ))
    }
    async fn delete_webhook(
        &self,
        _: Request<pb::DeleteWebhookRequest>,
    ) -> Result<Response<pb::DeleteWebhookResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn rotate_webhook_secret(
        &self,
        _: Request<pb::RotateWebhookSecretRequest>,
    ) -> Result<Response<pb::RotateWebhookSecretResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn rename_webhook(
        &self,
        _: Request<pb::RenameWebhookRequest>,
    ) -> Result<Response<pb::RenameWebhookResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn list_webhook_events(
        &self,
        _: Request<pb::ListWebhookEventsRequest>,
    ) -> Result<Response<pb::ListWebhookEventsResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
    async fn get_webhook_event(
        &self,
        request: Request<pb::GetWebhookEventRequest>,
    ) -> Result<Response<pb::GetWebhookEventResponse>, Status> {
        self.bearer(&request)?;
        Ok(Response::new(pb::GetWebhookEventResponse {
            event: Some(pb::EventSummary {
                id: request.into_inner().event_id,
                webhook_id: webhook().id,
                delivery_id: "d-1".into(),
                source: pb::SourceType::Github as i32,
                kind: "pull_request.opened".into(),
                verified: true,
                received_at: Some(time::from_millis(1)),
                routed: true,
                decision: Some(pb::Decision {
                    decision: "queue:review".into(),
                    queue: Some("review".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            headers: vec![pb::Header {
                name: "X-GitHub-Event".into(),
                value: "pull_request".into(),
            }],
            body: br#"{"action":"opened","number":7}"#.to_vec().into(),
        }))
    }
    /// `ev_1` was decided by version 1's second rule; version 2 decides otherwise. Any other
    /// id is not found.
    async fn redrive_webhook_events(
        &self,
        request: Request<pb::RedriveWebhookEventsRequest>,
    ) -> Result<Response<pb::RedrivePlan>, Status> {
        self.bearer(&request)?;
        let req = request.into_inner();
        let quarantine = pb::Decision {
            decision: "quarantine".into(),
            rule_id: Some("r-1".into()),
            ..Default::default()
        };
        let review = pb::Decision {
            decision: "queue:review".into(),
            queue: Some("review".into()),
            rule_id: Some("r-1".into()),
            ..Default::default()
        };
        Ok(Response::new(pb::RedrivePlan {
            webhook_id: req.webhook_id.clone(),
            config_version: 2,
            config_digest: "d2".into(),
            events: vec![pb::RedriveEvent {
                event_id: "ev_1".into(),
                kind: "pull_request.opened".into(),
                received_at: Some(time::from_millis(1_700_000_000_000)),
                before: "quarantine".into(),
                before_decision: Some(quarantine),
                after: "queue:review".into(),
                after_decision: Some(review),
                changes: true,
                ..Default::default()
            }],
            totals_before: [("quarantine".to_string(), 1)].into(),
            totals_after: [("queue:review".to_string(), 1)].into(),
            changes: 1,
            transitions: vec![pb::Transition {
                from: "quarantine".into(),
                to: "queue:review".into(),
                count: 1,
                example_event_ids: vec!["ev_1".into()],
                by_rules: vec![],
            }],
            truncated: false,
            expires_at_time: time::from_rfc3339("2026-12-04T10:15:00.000Z").ok(),
            plan_token: "sbp_redrive".into(),
            confirm_with: Some(pb::RedriveConfirmWith {
                tool: "confirm_webhook_redrive".into(),
                webhook_id: req.webhook_id,
                note: "Nothing was changed.".into(),
            }),
            ..Default::default()
        }))
    }

    async fn confirm_webhook_redrive(
        &self,
        request: Request<pb::ConfirmWebhookRedriveRequest>,
    ) -> Result<Response<pb::ConfirmWebhookRedriveResponse>, Status> {
        self.bearer(&request)?;
        let req = request.into_inner();
        if req.plan_token != "sbp_redrive" {
            return Err(status(
                Code::FailedPrecondition,
                "plan_stale",
                "the redrive plan is stale",
                &[],
            ));
        }
        Ok(Response::new(pb::ConfirmWebhookRedriveResponse {
            webhook_id: req.webhook_id,
            redrive_id: "rd_1".into(),
            config_version: 2,
            config_digest: "d2".into(),
            events: vec![pb::RedriveOutcome {
                event_id: "ev_1".into(),
                before: "quarantine".into(),
                after: "queue:review".into(),
                applied: true,
                todo_id: Some("td_1".into()),
                todo_created: true,
            }],
            applied: 1,
            skipped: 0,
            todos_created: 1,
        }))
    }

    async fn explain_webhook_event(
        &self,
        request: Request<pb::ExplainWebhookEventRequest>,
    ) -> Result<Response<pb::ExplainWebhookEventResponse>, Status> {
        self.bearer(&request)?;
        let event_id = request.into_inner().event_id;
        if event_id != "ev_1" {
            return Err(status(
                Code::NotFound,
                "not_found",
                "event not found",
                &[("resource", "event".into())],
            ));
        }
        let queue = |q: &str, rule: &str| pb::Decision {
            decision: format!("queue:{q}"),
            queue: Some(q.into()),
            rule_id: Some(rule.into()),
            ..Default::default()
        };
        Ok(Response::new(pb::ExplainWebhookEventResponse {
            event_id,
            webhook_id: webhook().id,
            kind: "pull_request.opened".into(),
            recorded_decision: Some(queue("review", "r-2")),
            recorded_version_status: pb::RecordedVersion::Known as i32,
            recorded_version: Some(1),
            recorded_digest: Some("d1".into()),
            rules: vec![
                pb::ExplainedRule {
                    index: 0,
                    rule_id: "r-1".into(),
                    outcome: pb::RuleOutcome::Fault as i32,
                    action: "drop".into(),
                    fault_code: Some("rule_fault".into()),
                    reason: Some("null (null) has no keys".into()),
                    deciding: false,
                },
                pb::ExplainedRule {
                    index: 1,
                    rule_id: "r-2".into(),
                    outcome: pb::RuleOutcome::Matched as i32,
                    action: "queue:review".into(),
                    fault_code: None,
                    reason: None,
                    deciding: true,
                },
            ],
            reevaluated_decision: Some(queue("review", "r-2")),
            reevaluation_differs: false,
            current_version: 2,
            current_digest: "d2".into(),
            current_decision: Some(queue("forge", "r-9")),
            current_differs: true,
            trials: vec![pb::ExplainedTrial {
                trial_id: "tr_1".into(),
                plan_id: "pl_1".into(),
                decision: Some(pb::Decision {
                    decision: "drop".into(),
                    rule_id: Some("drop-ci-noise--ci-noise".into()),
                    ..Default::default()
                }),
                differs: true,
            }],
        }))
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::RulePackEvent, Status>> + Send>>;

/// Sets a flag when the gateway drops the stream (the client cancelled).
struct DropFlag(Arc<Seen>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.slow_stream_dropped.store(true, Ordering::SeqCst);
    }
}

fn progress(replayed: u64, total: u64) -> pb::RulePackEvent {
    pb::RulePackEvent {
        event: Some(pb::rule_pack_event::Event::Progress(pb::ReplayProgress {
            replayed,
            total,
        })),
    }
}

fn result(plan: pb::Plan) -> pb::RulePackEvent {
    pb::RulePackEvent {
        event: Some(pb::rule_pack_event::Event::Plan(plan)),
    }
}

/// Only `test_webhook_rules` (unary and streamed, each with a fixed answer) is faked.
#[tonic::async_trait]
impl WebhookRules for FakeControl {
    type PlanWebhookRulesStream = EventStream;

    async fn plan_webhook_rules(
        &self,
        _: Request<pb::PlanWebhookRulesRequest>,
    ) -> Result<Response<EventStream>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn list_webhook_rules(
        &self,
        _: Request<pb::ListWebhookRulesRequest>,
    ) -> Result<Response<pb::ListWebhookRulesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn set_webhook_rules(
        &self,
        _: Request<pb::SetWebhookRulesRequest>,
    ) -> Result<Response<pb::SaveRulesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn update_webhook_rule(
        &self,
        _: Request<pb::UpdateWebhookRuleRequest>,
    ) -> Result<Response<pb::SaveRulesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn delete_webhook_rule(
        &self,
        _: Request<pb::DeleteWebhookRuleRequest>,
    ) -> Result<Response<pb::SaveRulesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn test_webhook_rules(
        &self,
        request: Request<pb::TestWebhookRulesRequest>,
    ) -> Result<Response<pb::TestWebhookRulesResponse>, Status> {
        self.bearer(&request)?;
        Ok(Response::new(test_answer(request.get_ref(), "unary")))
    }

    type TestWebhookRulesStreamStream =
        Pin<Box<dyn Stream<Item = Result<pb::TestWebhookRulesEvent, Status>> + Send>>;

    async fn test_webhook_rules_stream(
        &self,
        request: Request<pb::TestWebhookRulesRequest>,
    ) -> Result<Response<Self::TestWebhookRulesStreamStream>, Status> {
        self.bearer(&request)?;
        let progress = |replayed| pb::TestWebhookRulesEvent {
            event: Some(pb::test_webhook_rules_event::Event::Progress(
                pb::ReplayProgress { replayed, total: 2 },
            )),
        };
        let result = pb::TestWebhookRulesEvent {
            event: Some(pb::test_webhook_rules_event::Event::Result(test_answer(
                request.get_ref(),
                "streamed",
            ))),
        };
        let events = vec![Ok(progress(1)), Ok(progress(2)), Ok(result)];
        Ok(Response::new(Box::pin(futures::stream::iter(events))))
    }

    async fn list_webhook_history(
        &self,
        _: Request<pb::ListWebhookHistoryRequest>,
    ) -> Result<Response<pb::ListWebhookHistoryResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn list_webhook_changes(
        &self,
        _: Request<pb::ListWebhookChangesRequest>,
    ) -> Result<Response<pb::ListWebhookChangesResponse>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// A test_webhook_rules answer saying which RPC carried it (in `kind`).
fn test_answer(r: &pb::TestWebhookRulesRequest, via: &str) -> pb::TestWebhookRulesResponse {
    pb::TestWebhookRulesResponse {
        webhook_id: r.webhook_id.clone(),
        kind: via.into(),
        saved_decision: Some(pb::Decision {
            decision: "drop".into(),
            ..Default::default()
        }),
        replay_report: r.replay.map(|_| pb::ReplayReport::default()),
        ..Default::default()
    }
}

#[tonic::async_trait]
impl RulePacks for FakeControl {
    async fn get_rule_pack_plan(
        &self,
        _: Request<pb::GetRulePackPlanRequest>,
    ) -> Result<Response<pb::RulePackPlanStatus>, Status> {
        Err(Status::unimplemented("fake"))
    }

    async fn confirm_rule_pack_plan(
        &self,
        request: Request<pb::ConfirmRulePackPlanRequest>,
    ) -> Result<Response<pb::RulePackEvent>, Status> {
        self.bearer(&request)?;
        if request.get_ref().plan_token == "tok_stale" {
            let mut details = ErrorDetails::new();
            details.set_error_info("plan_stale", "switchboard", HashMap::new());
            details.add_precondition_failure_violation("used", "plan", "it was already applied");
            return Err(Status::with_error_details(
                Code::FailedPrecondition,
                "plan_stale: the plan is stale: it was already applied; plan again",
                details,
            ));
        }
        Err(Status::unimplemented("fake"))
    }

    async fn list_rule_packs(
        &self,
        request: Request<pb::ListRulePacksRequest>,
    ) -> Result<Response<pb::RulePacksResult>, Status> {
        self.bearer(&request)?;
        Ok(Response::new(pb::RulePacksResult {
            listing: Some(pb::RulePackListing {
                for_webhook: false,
                packs: vec![pb::ListedPack {
                    name: "drop-ci-noise".into(),
                    versions: vec![pb::PackVersion {
                        version: "1.0.0".into(),
                        available: true,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }),
        }))
    }

    type InstallRulePackStream = EventStream;

    async fn install_rule_pack(
        &self,
        request: Request<pb::InstallRulePackRequest>,
    ) -> Result<Response<EventStream>, Status> {
        self.bearer(&request)?;
        let r = request.into_inner();
        if !r.confirm.is_empty() {
            return Err(Status::internal(
                "the gateway sent a confirm to a planning call",
            ));
        }
        if r.name == "slow" {
            let seen = self.seen.clone();
            let stream = async_stream(seen);
            return Ok(Response::new(stream));
        }
        if r.name == "faulty" {
            let events: Vec<Result<pb::RulePackEvent, Status>> = vec![
                Ok(progress(1, 2)),
                Err(switchboard_proto::refusal::with_refusal(
                    status(
                        Code::FailedPrecondition,
                        "pack_rule_faults",
                        "pack rule drop-ci-noise--bots faults on 2 replayed deliveries",
                        &[],
                    ),
                    &pb::RefusalDetails {
                        faults: vec![pb::RuleFault {
                            rule: "drop-ci-noise--bots".into(),
                            count: 2,
                            event_ids: vec!["ev_1".into(), "ev_2".into()],
                        }],
                        ..Default::default()
                    },
                )),
            ];
            return Ok(Response::new(Box::pin(futures::stream::iter(events))));
        }
        let plan = pb::Plan {
            kind: pb::PlanKind::Install as i32,
            webhook_id: r.webhook_id.clone(),
            pack: Some(pb::PlanPack {
                name: r.name.clone(),
                version: "1.0.0".into(),
                from_version: None,
            }),
            plan_token: "tok_fresh".into(),
            expires_at_time: time::from_rfc3339("2026-01-01T00:15:00.000Z").ok(),
            // The params as control received them, so a test sees what travelled.
            confirm_with: Some(pb::ConfirmWith {
                note: format!(
                    "params seen: {}",
                    r.params
                        .clone()
                        .map(|p| serde_json::Value::Object(
                            switchboard_proto::convert::json::from_struct(p)
                        ))
                        .unwrap_or_default()
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let events = vec![
            Ok(progress(1, 3)),
            Ok(progress(2, 3)),
            Ok(progress(3, 3)),
            Ok(result(plan)),
        ];
        Ok(Response::new(Box::pin(futures::stream::iter(events))))
    }

    type RemoveRulePackStream = EventStream;

    async fn remove_rule_pack(
        &self,
        _: Request<pb::RemoveRulePackRequest>,
    ) -> Result<Response<EventStream>, Status> {
        Err(Status::unimplemented("fake"))
    }
}

/// A replay that never finishes: one progress event every 50 ms until the stream is dropped.
fn async_stream(seen: Arc<Seen>) -> EventStream {
    let flag = DropFlag(seen.clone());
    Box::pin(futures::stream::unfold((0u64, flag), move |(n, flag)| {
        let seen = seen.clone();
        async move {
            if n > 0 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            seen.slow_events_sent.fetch_add(1, Ordering::SeqCst);
            Some((Ok(progress(n + 1, 1000)), (n + 1, flag)))
        }
    }))
}

/// The fake control on 127.0.0.1:0.
pub async fn fake_control() -> (SocketAddr, FakeControl) {
    let fake = FakeControl::default();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tonic::transport::Server::builder()
        .add_service(IdentityServer::new(fake.clone()))
        .add_service(WebhooksServer::new(fake.clone()))
        .add_service(RulePacksServer::new(fake.clone()))
        .add_service(WebhookRulesServer::new(fake.clone()));
    tokio::spawn(async move {
        let _ = server
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await;
    });
    (addr, fake)
}

/// A gateway in front of a fake control; `tune` adjusts its configuration.
pub async fn gateway(tune: impl FnOnce(&mut GatewayConfig)) -> (SocketAddr, FakeControl) {
    let (control, fake) = fake_control().await;
    let mut config = GatewayConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), control.to_string());
    tune(&mut config);
    let bound = BoundGateway::bind(config).await.expect("gateway binds");
    let addr = bound.local_addr;
    tokio::spawn(async move {
        let _ = bound.serve(std::future::pending()).await;
    });
    (addr, fake)
}

/// An HTTP response as the client saw it.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {:?}", self.status, self.body))
    }

    /// The JSON-RPC messages of the answer: the body itself, or each SSE `data:` line.
    pub fn messages(&self) -> Vec<Value> {
        if self
            .header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream"))
        {
            self.body
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .filter_map(|d| serde_json::from_str(d).ok())
                .collect()
        } else {
            vec![self.json()]
        }
    }

    /// The one JSON-RPC response (with `result` or `error`) among the messages.
    pub fn response(&self) -> Value {
        self.messages()
            .into_iter()
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or_else(|| panic!("no JSON-RPC response in {} {:?}", self.status, self.body))
    }
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&body[..end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        let stop = (start + size).min(body.len());
        out.extend_from_slice(&body[start..stop]);
        body = body.get(stop + 2..).unwrap_or_default();
    }
    out
}

pub fn parse_response(buf: &[u8]) -> HttpResponse {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer: {:?}", String::from_utf8_lossy(buf)));
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let raw = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    HttpResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// A request as bytes: `POST /mcp` with the usual MCP headers plus `extra`.
pub fn mcp_request(addr: SocketAddr, extra: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !extra.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Sends one request and reads the whole answer.
pub async fn send(addr: SocketAddr, request: Vec<u8>) -> HttpResponse {
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&request).await;
        let _ = wr.flush().await;
        wr
    });
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), rd.read_to_end(&mut buf)).await;
    drop(writer.await);
    parse_response(&buf)
}

/// `POST /mcp` with `bearer` (none when empty) and a JSON body.
pub async fn post(addr: SocketAddr, bearer: &str, body: &Value) -> HttpResponse {
    let auth = format!("Bearer {bearer}");
    let mut extra = vec![];
    if !bearer.is_empty() {
        extra.push(("Authorization", auth.as_str()));
    }
    send(addr, mcp_request(addr, &extra, body.to_string().as_bytes())).await
}

pub fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

pub fn list(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"})
}

/// The tool result of a `tools/call` answer, asserting it is one.
pub fn tool_result(response: &HttpResponse) -> Value {
    assert_eq!(response.status, 200, "{response:?}");
    let message = response.response();
    message
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("not a tool result: {message}"))
}

/// The `{"error": {...}}` of an `isError` result: exactly one JSON text block, no
/// structuredContent.
pub fn tool_error(result: &Value) -> Value {
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    let content = result["content"].as_array().expect("content");
    assert_eq!(content.len(), 1, "{result}");
    assert_eq!(content[0]["type"], "text");
    let error: Value = serde_json::from_str(content[0]["text"].as_str().expect("text"))
        .expect("the error text is JSON");
    let error = error["error"].clone();
    assert!(error["code"].is_string(), "{error}");
    assert!(error["message"].is_string(), "{error}");
    assert!(error["details"].is_object(), "{error}");
    error
}
