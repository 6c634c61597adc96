//! The `Todos` service (the `todos` verb family): the work queue decisions produce, listed by
//! queue and taken one at a time, each claim a lease (`store::todos`).

use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::todos_server::Todos;
use tonic::{Request, Response, Status};

use super::auth::authorize;
use super::convert;
use super::respond;
use super::status::ApiError;
use crate::state::ControlState;
use crate::store::{TodoFilter, is_queue_name};

pub struct TodosApi {
    state: ControlState,
}

impl TodosApi {
    pub fn new(state: ControlState) -> Self {
        Self { state }
    }
}

fn filter(value: i32) -> Result<TodoFilter, ApiError> {
    match pb::TodoFilter::try_from(value) {
        Ok(pb::TodoFilter::Unspecified | pb::TodoFilter::Open) => Ok(TodoFilter::Open),
        Ok(pb::TodoFilter::Unclaimed) => Ok(TodoFilter::Unclaimed),
        Ok(pb::TodoFilter::All) => Ok(TodoFilter::All),
        Err(_) => Err(ApiError::invalid("filter", "one of open, unclaimed, all")),
    }
}

#[tonic::async_trait]
impl Todos for TodosApi {
    async fn list_todos(
        &self,
        request: Request<pb::ListTodosRequest>,
    ) -> Result<Response<pb::ListTodosResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "list_todos").await?;
            let req = request.get_ref();
            if !is_queue_name(&req.queue) {
                return Err(ApiError::invalid(
                    "queue",
                    "name a queue: 1–64 lower-case letters, digits, '.', '_' or '-'",
                ));
            }
            let page = self
                .state
                .store
                .list_todos(
                    caller.scope(),
                    &req.queue,
                    filter(req.filter)?,
                    &convert::page(&req.cursor, req.limit),
                )
                .await?;
            let now = self.state.store.clock().now_ms();
            Ok(pb::ListTodosResponse {
                todos: page.items.iter().map(|t| convert::todo(t, now)).collect(),
                next_cursor: page.next_cursor.unwrap_or_default(),
            })
        })
        .await
    }

    async fn claim_todo(
        &self,
        request: Request<pb::ClaimTodoRequest>,
    ) -> Result<Response<pb::ClaimTodoResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "claim_todo").await?;
            let todo = self
                .state
                .store
                .claim_todo(
                    caller.scope(),
                    &request.get_ref().todo_id,
                    &caller.endpoint.id,
                    self.state.limits.claim_ttl,
                )
                .await?;
            Ok(pb::ClaimTodoResponse {
                todo: Some(convert::todo(&todo, self.state.store.clock().now_ms())),
            })
        })
        .await
    }

    async fn release_todo(
        &self,
        request: Request<pb::ReleaseTodoRequest>,
    ) -> Result<Response<pb::ReleaseTodoResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "release_todo").await?;
            let todo = self
                .state
                .store
                .release_todo(
                    caller.scope(),
                    &request.get_ref().todo_id,
                    &caller.endpoint.id,
                )
                .await?;
            Ok(pb::ReleaseTodoResponse {
                todo: Some(convert::todo(&todo, self.state.store.clock().now_ms())),
            })
        })
        .await
    }

    async fn complete_todo(
        &self,
        request: Request<pb::CompleteTodoRequest>,
    ) -> Result<Response<pb::CompleteTodoResponse>, Status> {
        respond(async {
            let caller = authorize(&self.state, request.metadata(), "complete_todo").await?;
            let todo = self
                .state
                .store
                .complete_todo(
                    caller.scope(),
                    &request.get_ref().todo_id,
                    &caller.endpoint.id,
                )
                .await?;
            Ok(pb::CompleteTodoResponse {
                todo: Some(convert::todo(&todo, self.state.store.clock().now_ms())),
            })
        })
        .await
    }
}
