//! The control gRPC API as an end-to-end test calls it: an owner with a vended endpoint, that
//! endpoint's bearer on every call, and a streaming rule-pack call (InstallRulePack,
//! RemoveRulePack) run to its result. Shared so each rule-pack scenario file does not carry
//! its own copy.

use std::net::SocketAddr;

use serde_json::Value;
use switchboard_control::store::NewEndpoint;
use switchboard_control::{OwnerScope, Store};
use switchboard_proto::control::v1::rule_packs_client::RulePacksClient;
use switchboard_proto::control::v1::rule_trials_client::RuleTrialsClient;
use switchboard_proto::control::v1::webhook_rules_client::WebhookRulesClient;
use switchboard_proto::control::v1::webhooks_client::WebhooksClient;
use switchboard_proto::control::v1::{InstallRulePackRequest, RulePackEvent};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status, Streaming};

/// `authorization: Bearer <credential>` on every call.
#[derive(Clone)]
pub struct Bearer(pub String);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let value = format!("Bearer {}", self.0)
            .parse()
            .map_err(|_| Status::internal("header"))?;
        request.metadata_mut().insert("authorization", value);
        Ok(request)
    }
}

pub type Svc = InterceptedService<Channel, Bearer>;

/// A human, their own owner scope, and an endpoint of theirs allowed `verbs`; returns the
/// scope and the endpoint's credential.
pub async fn owner(store: &Store, login: &str, verbs: &[&str]) -> (OwnerScope, String) {
    store.create_human(login, None).await.expect("human");
    let scope = OwnerScope::human(login);
    let vended = store
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

/// One endpoint's view of control's gRPC API.
pub struct Api {
    channel: Channel,
    credential: String,
}

impl Api {
    pub async fn connect(grpc: SocketAddr, credential: &str) -> Api {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .expect("url")
            .connect()
            .await
            .expect("connects");
        Api {
            channel,
            credential: credential.to_string(),
        }
    }

    fn bearer(&self) -> Bearer {
        Bearer(self.credential.clone())
    }

    pub fn webhooks(&self) -> WebhooksClient<Svc> {
        WebhooksClient::with_interceptor(self.channel.clone(), self.bearer())
    }

    pub fn rules(&self) -> WebhookRulesClient<Svc> {
        WebhookRulesClient::with_interceptor(self.channel.clone(), self.bearer())
    }

    pub fn packs(&self) -> RulePacksClient<Svc> {
        RulePacksClient::with_interceptor(self.channel.clone(), self.bearer())
    }

    pub fn trials(&self) -> RuleTrialsClient<Svc> {
        RuleTrialsClient::with_interceptor(self.channel.clone(), self.bearer())
    }

    /// InstallRulePack (a plan, or with `confirm` its apply) run to its result JSON.
    pub async fn install(&self, req: InstallRulePackRequest) -> Result<Value, Status> {
        let stream = self.packs().install_rule_pack(req).await?.into_inner();
        result_of(stream).await
    }
}

/// The result JSON a rule-pack stream ends with, after its progress events.
pub async fn result_of(stream: Streaming<RulePackEvent>) -> Result<Value, Status> {
    crate::support::typed::pack_result(stream).await
}
