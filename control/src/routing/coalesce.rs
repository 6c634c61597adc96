//! Sharing router calls between deliveries that arrive together ("natural batching").
//!
//! Ingest routes each delivery as it arrives. One gRPC call per delivery costs the
//! router more per delivery than the evaluation itself (docs/benchmarks.md). So deliveries for
//! the same routing context and configuration queue behind the call in flight and go together
//! in the next one: no added wait when control is idle, fewer and larger calls when it is
//! busy. Each queue is drained by a task of its own, so a caller that goes away (a sender that
//! hangs up) never strands the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prost::Message;
use switchboard_proto::router::v1::{
    Configuration, DeliveryDecisions, EvaluateRequest, RoutingContext, StoredDelivery, WorkClass,
};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::{Routers, RoutingError};

/// The most deliveries one shared call carries.
pub const MAX_SHARED_CALL: usize = 64;

/// What must be equal for deliveries to share a call.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Key {
    /// Calls are shared within one tenant only: turns at the router and its CPU accounting
    /// are per tenant.
    tenant: String,
    context: Vec<u8>,
    /// Each configuration's message bytes.
    configurations: Vec<Vec<u8>>,
    budget_ms: u32,
}

struct Waiter {
    delivery: StoredDelivery,
    answer: oneshot::Sender<Result<DeliveryDecisions, RoutingError>>,
    /// The caller's span: a shared call is traced under the first waiter's.
    span: tracing::Span,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiter>,
}

/// The queues of deliveries waiting for a call, one per [`Key`] with a call in flight.
#[derive(Default)]
pub struct Coalescer(Mutex<HashMap<Key, Queue>>);

impl Routers {
    /// Evaluates one delivery, in a call it may share with others of the same context and
    /// configurations (module docs).
    pub async fn evaluate_one(
        self: &Arc<Self>,
        ctx: &RoutingContext,
        configurations: &[Configuration],
        delivery: StoredDelivery,
        budget_ms: u32,
        tenant: &str,
    ) -> Result<DeliveryDecisions, RoutingError> {
        let key = Key {
            tenant: tenant.to_string(),
            context: ctx.encode_to_vec(),
            configurations: configurations.iter().map(|c| c.encode_to_vec()).collect(),
            budget_ms,
        };
        let (answer, answered) = oneshot::channel();
        let waiter = Waiter {
            delivery,
            answer,
            span: tracing::Span::current(),
        };
        let lead = {
            let mut queues = self.coalescer.0.lock().unwrap_or_else(|e| e.into_inner());
            match queues.get_mut(&key) {
                Some(queue) => {
                    queue.waiting.push(waiter);
                    false
                }
                None => {
                    queues.insert(
                        key.clone(),
                        Queue {
                            waiting: vec![waiter],
                        },
                    );
                    true
                }
            }
        };
        if lead {
            let routers = Arc::clone(self);
            let ctx = ctx.clone();
            let configurations = configurations.to_vec();
            tokio::spawn(async move { routers.drain(key, ctx, configurations).await });
        }
        answered.await.unwrap_or_else(|_| {
            Err(RoutingError::Unavailable(
                "the shared call was dropped".into(),
            ))
        })
    }

    /// Calls for the queue of `key` until it is empty, then removes it.
    async fn drain(&self, key: Key, ctx: RoutingContext, configurations: Vec<Configuration>) {
        loop {
            let batch: Vec<Waiter> = {
                let mut queues = self.coalescer.0.lock().unwrap_or_else(|e| e.into_inner());
                let Some(queue) = queues.get_mut(&key) else {
                    return;
                };
                if queue.waiting.is_empty() {
                    queues.remove(&key);
                    return;
                }
                // At most MAX_SHARED_CALL deliveries and, past the first, CHUNK_BYTES of bodies.
                let n = switchboard_model::body::chunk_ranges(
                    queue.waiting.iter().map(|w| w.delivery.body.len()),
                    MAX_SHARED_CALL,
                    switchboard_model::body::CHUNK_BYTES,
                )
                .first()
                .map_or(1, |first| first.end);
                queue.waiting.drain(..n).collect()
            };
            let span = batch[0].span.clone();
            // The deliveries move into the request; each waiter keeps its event id.
            let (waiters, deliveries): (Vec<_>, Vec<_>) = batch
                .into_iter()
                .map(|w| ((w.delivery.event_id.clone(), w.answer), w.delivery))
                .unzip();
            let request = EvaluateRequest {
                context: Some(ctx.clone()),
                configurations: configurations.clone(),
                deliveries,
                budget_ms: key.budget_ms,
                work_class: WorkClass::Live as i32,
                tenant: key.tenant.clone(),
                max_child_faults: 0,
            };
            match self.evaluate_hedged(request).instrument(span).await {
                Ok(results) => {
                    let mut by_event: HashMap<String, DeliveryDecisions> = results
                        .into_iter()
                        .map(|r| (r.event_id.clone(), r))
                        .collect();
                    for (event_id, answer) in waiters {
                        let decided = by_event.remove(&event_id).ok_or_else(|| {
                            RoutingError::Refused(format!(
                                "the router answered no decision for {event_id}"
                            ))
                        });
                        let _ = answer.send(decided);
                    }
                }
                Err(e) => {
                    for (_, answer) in waiters {
                        let _ = answer.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}
