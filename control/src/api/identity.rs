//! The `Identity` service: who a credential is and what it can do right now, for the MCP
//! gateway to list exactly the tools that will work.

use switchboard_proto::control::v1 as pb;
use switchboard_proto::control::v1::identity_server::Identity;
use tonic::{Request, Response, Status};

use super::auth::{authenticate, identify, required_role};
use super::respond;
use crate::state::ControlState;

pub struct IdentityApi {
    state: ControlState,
}

impl IdentityApi {
    pub fn new(state: ControlState) -> Self {
        Self { state }
    }
}

#[tonic::async_trait]
impl Identity for IdentityApi {
    async fn who_am_i(
        &self,
        request: Request<pb::WhoAmIRequest>,
    ) -> Result<Response<pb::WhoAmIResponse>, Status> {
        respond(async {
            let endpoint = if request.get_ref().uncharged {
                identify(&self.state, request.metadata()).await?
            } else {
                authenticate(&self.state, request.metadata()).await?
            };
            let role = self
                .state
                .store
                .role_in_scope(&endpoint.human_login, &endpoint.owner_scope)
                .await?;
            let usable_verbs = endpoint
                .verbs
                .iter()
                .filter(|v| role.is_some_and(|r| r >= required_role(v)))
                .cloned()
                .collect();
            Ok(pb::WhoAmIResponse {
                endpoint_id: endpoint.id.clone(),
                endpoint_name: endpoint.name.clone(),
                human: endpoint.human_login.clone(),
                owner_scope: endpoint.owner_scope.to_string(),
                role: role.map(|r| r.as_str().to_string()).unwrap_or_default(),
                verbs: endpoint.verbs.clone(),
                usable_verbs,
            })
        })
        .await
    }
}
