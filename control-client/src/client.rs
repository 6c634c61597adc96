//! Control's gRPC API, called with the caller's own bearer: one lazily connected channel and
//! one method per RPC a surface makes. Every surface dials control the same way ([`channel`]),
//! so an address means the same thing to the CLI, `switchboard admin` and the gateway.

use std::time::Duration;

use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::identity_client::IdentityClient;
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::rule_trials_client::RuleTrialsClient;
use switchboard_proto::control::v1::todos_client::TodosClient;
use switchboard_proto::control::v1::webhook_rules_client::WebhookRulesClient;
use switchboard_proto::control::v1::webhooks_client::WebhooksClient;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status, Streaming};

use crate::bearer::Bearer;

/// Largest gRPC message taken from control: control's own limit, so a large event body or
/// history page is never cut off here.
pub const MAX_GRPC_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// A lazily connected channel to control at `addr` (`http://host:port` or `host:port`): a
/// surface starts, and says "control did not answer" per call, while control is still coming
/// up. The one way every surface dials control.
pub fn channel(addr: &str) -> Result<Channel, tonic::transport::Error> {
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    Ok(Endpoint::from_shared(url)?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect_lazy())
}

/// Control's API over one lazily connected [`channel`]; cheap to clone.
#[derive(Clone)]
pub struct ControlClient {
    channel: Channel,
    timeout: Duration,
}

/// How long a unary call may take, and how long a plan's streamed replay may take in all
/// (control's replay budget is 30 s; the rest is margin for validation and fixtures).
pub const UNARY_TIMEOUT: Duration = Duration::from_secs(30);
pub const STREAM_TIMEOUT: Duration = Duration::from_secs(120);

impl ControlClient {
    /// `addr` is `http://host:port` or `host:port`.
    pub fn connect_lazy(addr: &str) -> Result<ControlClient, String> {
        Ok(ControlClient {
            channel: channel(addr).map_err(|e| format!("invalid control address {addr:?}: {e}"))?,
            timeout: UNARY_TIMEOUT,
        })
    }

    fn request<T>(
        &self,
        bearer: &Bearer,
        message: T,
        timeout: Duration,
    ) -> Result<Request<T>, Status> {
        let mut request = Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", bearer.metadata()?);
        switchboard_telemetry::propagation::inject(request.metadata_mut());
        bearer.count_call();
        request.set_timeout(timeout);
        Ok(request)
    }

    fn webhooks(&self) -> WebhooksClient<Channel> {
        WebhooksClient::new(self.channel.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }

    fn rules(&self) -> WebhookRulesClient<Channel> {
        WebhookRulesClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }

    fn todos(&self) -> TodosClient<Channel> {
        TodosClient::new(self.channel.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }

    fn trials(&self) -> RuleTrialsClient<Channel> {
        RuleTrialsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }

    fn packs(&self) -> RulePacksClient<Channel> {
        RulePacksClient::new(self.channel.clone()).max_decoding_message_size(MAX_GRPC_MESSAGE_BYTES)
    }

    /// Who the bearer is. `charged: false` when the same MCP request goes on to call a verb
    /// (which takes the request's unit of the endpoint's budget itself).
    pub async fn who_am_i(
        &self,
        bearer: &Bearer,
        charged: bool,
    ) -> Result<pb::WhoAmIResponse, Status> {
        let message = pb::WhoAmIRequest {
            uncharged: !charged,
        };
        let request = self.request(bearer, message, self.timeout)?;
        Ok(IdentityClient::new(self.channel.clone())
            .who_am_i(request)
            .await?
            .into_inner())
    }
}

/// One unary RPC per verb: `verb!(method, Client, RequestType, ResponseType)`.
macro_rules! unary {
    ($( $method:ident => $client:ident . $rpc:ident ( $req:ty ) -> $resp:ty ; )*) => {
        impl ControlClient {
            $(
                pub async fn $method(&self, bearer: &Bearer, message: $req) -> Result<$resp, Status> {
                    let request = self.request(bearer, message, self.timeout)?;
                    Ok(self.$client().$rpc(request).await?.into_inner())
                }
            )*
        }
    };
}

unary! {
    create_webhook => webhooks.create_webhook(pb::CreateWebhookRequest) -> pb::CreateWebhookResponse;
    list_webhooks => webhooks.list_webhooks(pb::ListWebhooksRequest) -> pb::ListWebhooksResponse;
    get_webhook => webhooks.get_webhook(pb::GetWebhookRequest) -> pb::GetWebhookResponse;
    delete_webhook => webhooks.delete_webhook(pb::DeleteWebhookRequest) -> pb::DeleteWebhookResponse;
    rotate_webhook_secret => webhooks.rotate_webhook_secret(pb::RotateWebhookSecretRequest) -> pb::RotateWebhookSecretResponse;
    rename_webhook => webhooks.rename_webhook(pb::RenameWebhookRequest) -> pb::RenameWebhookResponse;
    list_webhook_events => webhooks.list_webhook_events(pb::ListWebhookEventsRequest) -> pb::ListWebhookEventsResponse;
    get_webhook_event => webhooks.get_webhook_event(pb::GetWebhookEventRequest) -> pb::GetWebhookEventResponse;
    explain_webhook_event => webhooks.explain_webhook_event(pb::ExplainWebhookEventRequest) -> pb::ExplainWebhookEventResponse;
    redrive_webhook_events => webhooks.redrive_webhook_events(pb::RedriveWebhookEventsRequest) -> pb::RedrivePlan;
    confirm_webhook_redrive => webhooks.confirm_webhook_redrive(pb::ConfirmWebhookRedriveRequest) -> pb::ConfirmWebhookRedriveResponse;
    list_webhook_rules => rules.list_webhook_rules(pb::ListWebhookRulesRequest) -> pb::ListWebhookRulesResponse;
    set_webhook_rules => rules.set_webhook_rules(pb::SetWebhookRulesRequest) -> pb::SaveRulesResponse;
    update_webhook_rule => rules.update_webhook_rule(pb::UpdateWebhookRuleRequest) -> pb::SaveRulesResponse;
    delete_webhook_rule => rules.delete_webhook_rule(pb::DeleteWebhookRuleRequest) -> pb::SaveRulesResponse;
    test_webhook_rules => rules.test_webhook_rules(pb::TestWebhookRulesRequest) -> pb::TestWebhookRulesResponse;
    list_webhook_history => rules.list_webhook_history(pb::ListWebhookHistoryRequest) -> pb::ListWebhookHistoryResponse;
    list_webhook_changes => rules.list_webhook_changes(pb::ListWebhookChangesRequest) -> pb::ListWebhookChangesResponse;
    list_rule_packs => packs.list_rule_packs(pb::ListRulePacksRequest) -> pb::RulePacksResult;
    get_rule_pack_plan => packs.get_rule_pack_plan(pb::GetRulePackPlanRequest) -> pb::RulePackPlanStatus;
    confirm_rule_pack_plan => packs.confirm_rule_pack_plan(pb::ConfirmRulePackPlanRequest) -> pb::RulePackEvent;
    list_todos => todos.list_todos(pb::ListTodosRequest) -> pb::ListTodosResponse;
    claim_todo => todos.claim_todo(pb::ClaimTodoRequest) -> pb::ClaimTodoResponse;
    release_todo => todos.release_todo(pb::ReleaseTodoRequest) -> pb::ReleaseTodoResponse;
    complete_todo => todos.complete_todo(pb::CompleteTodoRequest) -> pb::CompleteTodoResponse;
    start_rule_trial => trials.start_rule_trial(pb::StartRuleTrialRequest) -> pb::RuleTrial;
    stop_rule_trial => trials.stop_rule_trial(pb::StopRuleTrialRequest) -> pb::RuleTrial;
    get_rule_trial => trials.get_rule_trial(pb::GetRuleTrialRequest) -> pb::RuleTrial;
    get_rule_guard => trials.get_rule_guard(pb::GetRuleGuardRequest) -> pb::RuleGuard;
    list_rule_trials => trials.list_rule_trials(pb::ListRuleTrialsRequest) -> pb::ListRuleTrialsResponse;
}

/// The largest page a listing serves: walking a listing asks for these.
const WALK_PAGE: u32 = 200;

/// Every item of a keyset-paged listing: `page(cursor)` answers one page's items and the next
/// cursor, empty after the last page. Any client's pages: this one's, `switchboard admin`'s.
pub async fn walk<T, E, F, Fut>(mut page: F) -> Result<Vec<T>, E>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, String), E>>,
{
    let mut all = Vec::new();
    let mut cursor = String::new();
    loop {
        let (items, next) = page(cursor).await?;
        all.extend(items);
        if next.is_empty() {
            return Ok(all);
        }
        cursor = next;
    }
}

impl ControlClient {
    /// Every webhook of the caller's scope, oldest first: `ListWebhooks` page by page.
    pub async fn all_webhooks(&self, bearer: &Bearer) -> Result<Vec<pb::Webhook>, Status> {
        walk(|cursor| async move {
            let page = self
                .list_webhooks(
                    bearer,
                    pb::ListWebhooksRequest {
                        cursor,
                        limit: WALK_PAGE,
                    },
                )
                .await?;
            Ok((page.webhooks, page.next_cursor))
        })
        .await
    }

    /// Every trial of a webhook, newest first: `ListRuleTrials` page by page.
    pub async fn all_rule_trials(
        &self,
        bearer: &Bearer,
        webhook_id: &str,
    ) -> Result<Vec<pb::RuleTrial>, Status> {
        walk(|cursor| async move {
            let page = self
                .list_rule_trials(
                    bearer,
                    pb::ListRuleTrialsRequest {
                        webhook_id: webhook_id.to_string(),
                        cursor,
                        limit: WALK_PAGE,
                    },
                )
                .await?;
            Ok((page.trials, page.next_cursor))
        })
        .await
    }

    /// `InstallRulePack`: progress events, then the result. Dropping the stream cancels the
    /// call, which stops control's replay.
    pub async fn install_rule_pack(
        &self,
        bearer: &Bearer,
        message: pb::InstallRulePackRequest,
    ) -> Result<Streaming<pb::RulePackEvent>, Status> {
        let request = self.request(bearer, message, STREAM_TIMEOUT)?;
        Ok(self.packs().install_rule_pack(request).await?.into_inner())
    }

    /// `PlanWebhookRules`: a hand-written configuration planned (issue 45): replay progress,
    /// then the plan.
    pub async fn plan_webhook_rules(
        &self,
        bearer: &Bearer,
        message: pb::PlanWebhookRulesRequest,
    ) -> Result<Streaming<pb::RulePackEvent>, Status> {
        let request = self.request(bearer, message, STREAM_TIMEOUT)?;
        Ok(self.rules().plan_webhook_rules(request).await?.into_inner())
    }

    /// `TestWebhookRulesStream`: with a replay, progress events, then the response.
    pub async fn test_webhook_rules_stream(
        &self,
        bearer: &Bearer,
        message: pb::TestWebhookRulesRequest,
    ) -> Result<Streaming<pb::TestWebhookRulesEvent>, Status> {
        let request = self.request(bearer, message, STREAM_TIMEOUT)?;
        Ok(self
            .rules()
            .test_webhook_rules_stream(request)
            .await?
            .into_inner())
    }

    /// `PromoteRuleTrial`: the promotion's plan, streamed like an install.
    pub async fn promote_rule_trial(
        &self,
        bearer: &Bearer,
        message: pb::PromoteRuleTrialRequest,
    ) -> Result<Streaming<pb::RulePackEvent>, Status> {
        let request = self.request(bearer, message, STREAM_TIMEOUT)?;
        Ok(self
            .trials()
            .promote_rule_trial(request)
            .await?
            .into_inner())
    }

    /// `RemoveRulePack`, streamed like an install.
    pub async fn remove_rule_pack(
        &self,
        bearer: &Bearer,
        message: pb::RemoveRulePackRequest,
    ) -> Result<Streaming<pb::RulePackEvent>, Status> {
        let request = self.request(bearer, message, STREAM_TIMEOUT)?;
        Ok(self.packs().remove_rule_pack(request).await?.into_inner())
    }
}
