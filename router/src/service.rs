//! The router's gRPC service: `Validate`, `Evaluate` and `EvaluateStream`, all answered by
//! sandbox children.
//! Nothing here parses tenant jq; the request limits below are checked before a child sees
//! anything.

use std::sync::Arc;
use std::time::Duration;

use switchboard_proto::router::v1::router_server::Router;
use switchboard_proto::router::v1::{
    EvaluateRequest, EvaluateResponse, StoredDelivery, ValidateRequest, ValidateResponse,
};
use tonic::{Request, Response, Status, Streaming};

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
        let configuration = req
            .configuration
            .ok_or_else(|| Status::invalid_argument("configuration: required"))?;
        let ctx = req.context.unwrap_or_default();
        let resp = self
            .pool
            .validate(&configuration, &ctx)
            .await
            .map_err(unavailable)?;
        Ok(Response::new(resp))
    }

    async fn evaluate(
        &self,
        request: Request<EvaluateRequest>,
    ) -> Result<Response<EvaluateResponse>, Status> {
        let req = request.into_inner();
        let work = work_of(&req)?;
        check_deliveries(0, &req.deliveries)?;
        let ctx = req.context.unwrap_or_default();
        let resp = self
            .pool
            .evaluate_as(&ctx, &req.configurations, &req.deliveries, &work)
            .await
            .map_err(unavailable)?;
        Ok(Response::new(resp))
    }

    async fn evaluate_stream(
        &self,
        request: Request<Streaming<EvaluateRequest>>,
    ) -> Result<Response<EvaluateResponse>, Status> {
        let mut stream = request.into_inner();
        let first = stream.message().await?.ok_or_else(|| {
            Status::invalid_argument("the stream ended before its first message (the call)")
        })?;
        let work = work_of(&first)?;
        let pool = self.pool.clone();
        if work.class != Some(Class::Replay) {
            return evaluate_parts(pool, first, work, stream).await;
        }
        // A replay's parts are decoded on the background runtime's low-priority threads, so
        // on a busy machine live calls are decoded and answered first (issue 43).
        switchboard_background::background()
            .run(evaluate_parts(pool, first, work, stream))
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?
    }
}

/// A streamed call's parts, each queued as it arrives (children start on the first part while
/// the next is on its way), then the answer for all of them.
async fn evaluate_parts(
    pool: Arc<SandboxPool>,
    first: EvaluateRequest,
    work: Work,
    mut stream: Streaming<EvaluateRequest>,
) -> Result<Response<EvaluateResponse>, Status> {
    let ctx = first.context.clone().unwrap_or_default();
    let mut evaluation = pool.begin(&ctx, &first.configurations, &work);
    let mut part = first.deliveries;
    loop {
        check_deliveries(evaluation.deliveries(), &part)?;
        evaluation.push(&part).map_err(unavailable)?;
        match stream.message().await? {
            None => break,
            Some(next) => {
                deliveries_only(&next)?;
                part = next.deliveries;
            }
        }
    }
    let resp = evaluation.finish().await.map_err(unavailable)?;
    Ok(Response::new(resp))
}

/// What a call asks for besides its deliveries, checked before a child sees any of it.
fn work_of(req: &EvaluateRequest) -> Result<Work, Status> {
    if req.configurations.is_empty() || req.configurations.len() > 2 {
        return Err(Status::invalid_argument(
            "configurations: one (saved) or two (saved, candidate) are required",
        ));
    }
    if req.budget_ms > MAX_BUDGET_MS {
        return Err(Status::invalid_argument(format!(
            "budget_ms: at most {MAX_BUDGET_MS}"
        )));
    }
    Ok(Work {
        budget: (req.budget_ms > 0).then(|| Duration::from_millis(u64::from(req.budget_ms))),
        class: Some(Class::from_wire(req.work_class)),
        tenant: req.tenant.clone(),
        max_child_faults: req.max_child_faults,
    })
}

/// The call's limits on its deliveries; `before` of the call's deliveries came earlier (in a
/// stream's previous messages), so counts and indices are the whole call's.
fn check_deliveries(before: usize, deliveries: &[StoredDelivery]) -> Result<(), Status> {
    let total = before + deliveries.len();
    if total > MAX_DELIVERIES_PER_CALL {
        return Err(Status::invalid_argument(format!(
            "deliveries: at most {MAX_DELIVERIES_PER_CALL} per call, got {total}"
        )));
    }
    if let Some((i, _)) = deliveries
        .iter()
        .enumerate()
        .find(|(_, d)| d.body.len() > MAX_BODY_BYTES)
    {
        return Err(Status::invalid_argument(format!(
            "deliveries[{}].body: over {MAX_BODY_BYTES} bytes",
            before + i
        )));
    }
    Ok(())
}

/// A stream's messages after the first carry deliveries and nothing else: a call is set
/// once, so no part of it can be evaluated under different terms than another.
fn deliveries_only(req: &EvaluateRequest) -> Result<(), Status> {
    let EvaluateRequest {
        context,
        configurations,
        deliveries: _,
        budget_ms,
        work_class,
        tenant,
        max_child_faults,
    } = req;
    if context.is_some()
        || !configurations.is_empty()
        || *budget_ms != 0
        || *work_class != 0
        || !tenant.is_empty()
        || *max_child_faults != 0
    {
        return Err(Status::invalid_argument(
            "EvaluateStream: only the first message sets the call; later messages carry deliveries only",
        ));
    }
    Ok(())
}
