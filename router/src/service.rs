//! The router's gRPC service: `Validate` and `Evaluate`, both answered by sandbox children.
//! Nothing here parses tenant jq; the request limits below are checked before a child sees
//! anything.

use std::sync::Arc;
use std::time::Duration;

use switchboard_proto::router::v1::router_server::Router;
use switchboard_proto::router::v1::{
    EvaluateRequest, EvaluateResponse, ValidateRequest, ValidateResponse,
};
use tonic::{Request, Response, Status};

use crate::sandbox::{Class, SandboxError, SandboxPool, Work};

/// Most deliveries in one Evaluate call; control sends replays in chunks well below this.
pub const MAX_DELIVERIES_PER_CALL: usize = 5_000;
/// The biggest body a router evaluates: the most any deployment's ingest may accept.
pub const MAX_BODY_BYTES: usize = switchboard_model::body::MAX_BODY_BYTES_CEILING;
/// Largest budget a caller may ask for, per envelope and configuration.
pub const MAX_BUDGET_MS: u32 = 10_000;

pub struct RouterService {
    pool: Arc<SandboxPool>,
}

impl RouterService {
    pub fn new(pool: Arc<SandboxPool>) -> Self {
        Self { pool }
    }
}

fn unavailable(e: SandboxError) -> Status {
    Status::unavailable(e.to_string())
}

#[tonic::async_trait]
impl Router for RouterService {
    async fn validate(
        &self,
        request: Request<ValidateRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        let req = request.into_inner();
        let json = req
            .configuration
            .map(|c| c.json)
            .ok_or_else(|| Status::invalid_argument("configuration: required"))?;
        let ctx = req.context.unwrap_or_default();
        let resp = self.pool.validate(&json, &ctx).await.map_err(unavailable)?;
        Ok(Response::new(resp))
    }

    async fn evaluate(
        &self,
        request: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateResponse>, Status> {
        let req = request.into_inner();
        if req.configurations.is_empty() || req.configurations.len() > 2 {
            return Err(Status::invalid_argument(
                "configurations: one (saved) or two (saved, candidate) are required",
            ));
        }
        if req.deliveries.len() > MAX_DELIVERIES_PER_CALL {
            return Err(Status::invalid_argument(format!(
                "deliveries: at most {MAX_DELIVERIES_PER_CALL} per call, got {}",
                req.deliveries.len()
            )));
        }
        if let Some((i, _)) = req
            .deliveries
            .iter()
            .enumerate()
            .find(|(_, d)| d.body.len() > MAX_BODY_BYTES)
        {
            return Err(Status::invalid_argument(format!(
                "deliveries[{i}].body: over {MAX_BODY_BYTES} bytes"
            )));
        }
        if req.budget_ms > MAX_BUDGET_MS {
            return Err(Status::invalid_argument(format!(
                "budget_ms: at most {MAX_BUDGET_MS}"
            )));
        }
        let work = Work {
            budget: (req.budget_ms > 0).then(|| Duration::from_millis(u64::from(req.budget_ms))),
            class: Some(Class::from_wire(req.work_class)),
            tenant: req.tenant,
            max_child_faults: req.max_child_faults,
        };
        let ctx = req.context.unwrap_or_default();
        let resp = self
            .pool
            .evaluate_as(&ctx, &req.configurations, &req.deliveries, &work)
            .await
            .map_err(unavailable)?;
        Ok(Response::new(resp))
    }
}
