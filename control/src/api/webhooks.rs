//! The `Webhooks` service (the `webhooks` verb family, SPEC-0006): webhooks and their stored
//! deliveries, always inside the caller's owner scope.

use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::webhooks_server::Webhooks;
use tonic::{Request, Response, Status};

use super::auth::authorize;
use super::convert;
use super::respond;
use crate::error::Error;
use crate::state::ControlState;
use crate::store::NewWebhook;

pub struct WebhooksApi {
    state: ControlState,
}

impl WebhooksApi {
    pub fn new(state: ControlState) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl Webhooks for WebhooksApi {
    async fn create_webhook(
        &self,
        request: Request<pb::CreateWebhookRequest>,
    ) -> Result<Response<pb::CreateWebhookResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "create_webhook").await?;
            let req = request.get_ref();
            let source_type = convert::source_type_from(req.source_type)?;
            let name = convert::webhook_name(&req.name)?;
            // An agent's grant must lie within the queues an operator allowed the scope
            // (`grant_not_allowed` otherwise, nothing created): agents never widen a grant.
            let created = self
                .state
                .store
                .create_webhook_within_allowance(NewWebhook {
                    owner_scope: caller.scope().clone(),
                    source_type,
                    secret: req.secret.clone(),
                    grant: req.grant.clone(),
                    reject_unverified: req.reject_unverified,
                    name,
                    configuration: None,
                    actor: caller.actor(),
                })
                .await?;
            tracing::info!(webhook = %created.id, endpoint = %caller.endpoint.id, "webhook created");
            Ok(pb::CreateWebhookResponse {
                webhook: Some(convert::webhook(&created)),
                secret: created.secret.clone(),
            })
        })
        .await
    }

    async fn list_webhooks(
        &self,
        request: Request<pb::ListWebhooksRequest>,
    ) -> Result<Response<pb::ListWebhooksResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "list_webhooks").await?;
            let r = request.get_ref();
            let store = &self.state.store;
            let (webhooks, next_cursor) = match convert::page_or_all(&r.cursor, r.limit) {
                Some(page) => {
                    let paged = store.list_webhooks_page(caller.scope(), &page).await?;
                    (paged.items, paged.next_cursor.unwrap_or_default())
                }
                None => (store.list_webhooks(caller.scope()).await?, String::new()),
            };
            Ok(pb::ListWebhooksResponse {
                webhooks: webhooks.iter().map(convert::webhook).collect(),
                next_cursor,
            })
        })
        .await
    }

    async fn get_webhook(
        &self,
        request: Request<pb::GetWebhookRequest>,
    ) -> Result<Response<pb::GetWebhookResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "get_webhook").await?;
            let found = self
                .state
                .store
                .get_webhook(caller.scope(), &request.get_ref().webhook_id)
                .await?;
            Ok(pb::GetWebhookResponse {
                webhook: Some(convert::webhook(&found)),
            })
        })
        .await
    }

    async fn delete_webhook(
        &self,
        request: Request<pb::DeleteWebhookRequest>,
    ) -> Result<Response<pb::DeleteWebhookResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "delete_webhook").await?;
            let id = &request.get_ref().webhook_id;
            self.state
                .store
                .by_endpoint(&caller.endpoint.id, &caller.endpoint.human_login)
                .delete_webhook_by_endpoint(caller.scope(), id)
                .await?;
            tracing::info!(webhook = %id, endpoint = %caller.endpoint.id, "webhook deleted");
            Ok(pb::DeleteWebhookResponse {
                webhook_id: id.clone(),
            })
        })
        .await
    }

    async fn rotate_webhook_secret(
        &self,
        request: Request<pb::RotateWebhookSecretRequest>,
    ) -> Result<Response<pb::RotateWebhookSecretResponse>, Status> {
        respond(async {
            let caller =
                authorize(&self.state, request.metadata(), "rotate_webhook_secret").await?;
            let req = request.get_ref();
            let rotated = self
                .state
                .store
                .rotate_webhook_secret(caller.scope(), &req.webhook_id, req.secret.clone())
                .await?;
            tracing::info!(webhook = %rotated.id, endpoint = %caller.endpoint.id, "webhook secret rotated");
            Ok(pb::RotateWebhookSecretResponse {
                webhook: Some(convert::webhook(&rotated)),
                secret: rotated.secret.clone(),
            })
        })
        .await
    }

    async fn rename_webhook(
        &self,
        request: Request<pb::RenameWebhookRequest>,
    ) -> Result<Response<pb::RenameWebhookResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "rename_webhook").await?;
            let req = request.get_ref();
            let name = convert::webhook_name(&req.name)?;
            let renamed = self
                .state
                .store
                .by_endpoint(&caller.endpoint.id, &caller.endpoint.human_login)
                .set_webhook_name(caller.scope(), &req.webhook_id, name.as_ref())
                .await?;
            tracing::info!(webhook = %renamed.id, endpoint = %caller.endpoint.id, "webhook renamed");
            Ok(pb::RenameWebhookResponse {
                webhook: Some(convert::webhook(&renamed)),
            })
        })
        .await
    }

    async fn list_webhook_events(
        &self,
        request: Request<pb::ListWebhookEventsRequest>,
    ) -> Result<Response<pb::ListWebhookEventsResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "list_webhook_events").await?;
            let req = request.get_ref();
            let page = self
                .state
                .store
                .list_events(
                    caller.scope(),
                    &req.webhook_id,
                    &convert::page(&req.cursor, req.limit),
                )
                .await?;
            // Listed first, so the webhook is known to be the caller's.
            let window = self
                .state
                .store
                .retention_window(self.state.limits.retention, &req.webhook_id)
                .await?;
            Ok(pb::ListWebhookEventsResponse {
                events: page.items.iter().map(convert::event_summary).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
                retention: Some(convert::retention_window(&window)),
            })
        })
        .await
    }

    async fn get_webhook_event(
        &self,
        request: Request<pb::GetWebhookEventRequest>,
    ) -> Result<Response<pb::GetWebhookEventResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "get_webhook_event").await?;
            let req = request.get_ref();
            let event = self
                .state
                .store
                .get_event(caller.scope(), &req.event_id)
                .await?;
            // Checked after the one scoped read, so a wrong webhook costs the same as a wrong event.
            if !req.webhook_id.is_empty() && req.webhook_id != event.webhook_id {
                return Err(Error::NotFound { resource: "event" }.into());
            }
            Ok(convert::event(&event))
        })
        .await
    }

    async fn explain_webhook_event(
        &self,
        request: Request<pb::ExplainWebhookEventRequest>,
    ) -> Result<Response<pb::ExplainWebhookEventResponse>, Status> {
        respond(async {
            let caller =
                authorize(&self.state, request.metadata(), "explain_webhook_event").await?;
            super::explain::explain(&self.state, &caller, &request.get_ref().event_id).await
        })
        .await
    }

    async fn redrive_webhook_events(
        &self,
        request: Request<pb::RedriveWebhookEventsRequest>,
    ) -> Result<Response<pb::RedrivePlan>, Status> {
        respond(async {
            let caller =
                authorize(&self.state, request.metadata(), "redrive_webhook_events").await?;
            super::redrive::plan(&self.state, &caller, request.get_ref()).await
        })
        .await
    }

    async fn confirm_webhook_redrive(
        &self,
        request: Request<pb::ConfirmWebhookRedriveRequest>,
    ) -> Result<Response<pb::ConfirmWebhookRedriveResponse>, Status> {
        respond(async {
            let caller =
                authorize(&self.state, request.metadata(), "confirm_webhook_redrive").await?;
            super::redrive::confirm(&self.state, &caller, request.get_ref()).await
        })
        .await
    }
}
