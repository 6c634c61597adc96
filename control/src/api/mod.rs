//! The control gRPC API, `switchboard.control.v1`: what agents (through the MCP gateway) and
//! other services call. One module per service; [`auth`] decides who may call what, and
//! [`status`] is the one place errors become gRPC statuses.
//!
//! Every call: bearer credential → endpoint's request budget → verb allowlist → role in the
//! endpoint's owner scope → the work, confined to that scope.

pub mod auth;
pub mod convert;
pub mod explain;
pub mod identity;
pub mod operators;
pub mod redrive;
pub mod rule_packs;
pub mod rule_trials;
pub mod rules;
pub mod status;
pub mod streaming;
pub mod todos;
pub mod webhooks;

use std::future::Future;

use switchboard_proto::control::v1::identity_server::IdentityServer;
use switchboard_proto::control::v1::operators_server::OperatorsServer;
use switchboard_proto::control::v1::rule_packs_server::RulePacksServer;
use switchboard_proto::control::v1::rule_trials_server::RuleTrialsServer;
use switchboard_proto::control::v1::todos_server::TodosServer;
use switchboard_proto::control::v1::webhook_rules_server::WebhookRulesServer;
use switchboard_proto::control::v1::webhooks_server::WebhooksServer;
use tonic::service::{Routes, RoutesBuilder};
use tonic::{Response, Status};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use self::identity::IdentityApi;
use self::operators::OperatorsApi;
use self::rule_packs::RulePacksApi;
use self::rule_trials::RuleTrialsApi;
use self::rules::WebhookRulesApi;
use self::status::ApiError;
use self::todos::TodosApi;
use self::webhooks::WebhooksApi;
use crate::state::ControlState;

/// The fully qualified names of the API's services, as health checks and reflection name them.
pub const SERVICE_NAMES: [&str; 7] = [
    "switchboard.control.v1.Webhooks",
    "switchboard.control.v1.WebhookRules",
    "switchboard.control.v1.Todos",
    "switchboard.control.v1.Identity",
    "switchboard.control.v1.RulePacks",
    "switchboard.control.v1.Operators",
    "switchboard.control.v1.RuleTrials",
];

/// Runs one call's work and turns its error, if any, into the status the caller sees.
pub(crate) async fn respond<T>(
    work: impl Future<Output = Result<T, ApiError>>,
) -> Result<Response<T>, Status> {
    work.await.map(Response::new).map_err(Status::from)
}

/// The four API services, without health or reflection: what `server::BoundControl::serve`
/// takes as its `grpc_routes` (it adds `grpc.health.v1` and reflection itself, and a path may
/// be routed only once). Report their health with [`report_health`].
pub fn routes(state: ControlState) -> Routes {
    let mut routes = Routes::builder();
    add_services(&mut routes, state);
    routes.routes()
}

fn add_services(routes: &mut RoutesBuilder, state: ControlState) {
    routes
        .add_service(WebhooksServer::new(WebhooksApi::new(state.clone())))
        .add_service(WebhookRulesServer::new(WebhookRulesApi::new(state.clone())))
        .add_service(TodosServer::new(TodosApi::new(state.clone())))
        .add_service(RulePacksServer::new(RulePacksApi::new(
            state.clone(),
            crate::rule_packs::RulePacks::new(state.clone(), state.catalog.clone()),
        )))
        .add_service(OperatorsServer::new(OperatorsApi::new(state.clone())))
        .add_service(RuleTrialsServer::new(RuleTrialsApi::new(
            state.clone(),
            crate::rule_packs::RulePacks::new(state.clone(), state.catalog.clone()),
        )))
        .add_service(IdentityServer::new(IdentityApi::new(state)));
}

/// Sets the health of the server as a whole and of each API service.
pub async fn report_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    for name in SERVICE_NAMES {
        health.set_service_status(name, status).await;
    }
}

/// Everything to serve the control API on its own: the four services, `grpc.health.v1` and
/// server reflection, and the handle that reports health.
pub struct ControlApi {
    pub routes: Routes,
    /// Every service starts SERVING; report NOT_SERVING with [`report_health`] when shutting
    /// down, so balancers stop sending before in-flight calls end.
    pub health: HealthReporter,
}

impl ControlApi {
    pub fn new(state: ControlState) -> ControlApi {
        let (health, health_service) = tonic_health::server::health_reporter();
        // A fresh reporter's lock is free, so this completes at once, runtime or not.
        futures::executor::block_on(report_health(&health, ServingStatus::Serving));
        let mut routes = Routes::builder();
        routes.add_service(health_service);
        add_services(&mut routes, state);
        match switchboard_proto::reflection::services(&SERVICE_NAMES) {
            Ok((v1, v1alpha)) => {
                routes.add_service(v1).add_service(v1alpha);
            }
            Err(e) => tracing::error!(error = %e, "server reflection is unavailable"),
        }
        ControlApi {
            routes: routes.routes(),
            health,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::server::NamedService;

    #[test]
    fn service_names_match_the_generated_servers() {
        assert_eq!(
            SERVICE_NAMES,
            [
                <WebhooksServer<WebhooksApi> as NamedService>::NAME,
                <WebhookRulesServer<WebhookRulesApi> as NamedService>::NAME,
                <TodosServer<TodosApi> as NamedService>::NAME,
                <IdentityServer<IdentityApi> as NamedService>::NAME,
                <RulePacksServer<RulePacksApi> as NamedService>::NAME,
                <OperatorsServer<OperatorsApi> as NamedService>::NAME,
                <RuleTrialsServer<RuleTrialsApi> as NamedService>::NAME,
            ]
        );
    }
}
