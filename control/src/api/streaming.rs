//! Server-streamed calls that report replay progress, then one result: install, remove and
//! `test_webhook_rules` with `replay`. The work runs in its own task; a caller that goes away
//! (cancels) closes the stream, which drops the work and so stops the replay.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use super::status::ApiError;
use crate::rule_packs::Progress;

/// The stream a streamed call returns.
pub type EventStream<E> = Pin<Box<dyn tokio_stream::Stream<Item = Result<E, Status>> + Send>>;

/// Runs `work` with a progress callback; each report becomes `progress_event(replayed,
/// total)` (dropped, not queued, if the caller reads slowly), and the result the events
/// `result_event(result)` or the error's status.
pub fn with_progress<T, E, F>(
    work: impl FnOnce(Progress) -> F + Send + 'static,
    progress_event: fn(u64, u64) -> E,
    result_event: fn(T) -> E,
) -> EventStream<E>
where
    F: Future<Output = Result<T, ApiError>> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Result<E, Status>>(32);
    let progress_tx = tx.clone();
    let progress: Progress = Arc::new(move |replayed, total| {
        let _ = progress_tx.try_send(Ok(progress_event(replayed, total)));
    });
    tokio::spawn(async move {
        let run = work(progress);
        tokio::select! {
            result = run => match result {
                Ok(value) => {
                    let _ = tx.send(Ok(result_event(value))).await;
                }
                Err(e) => {
                    let _ = tx.send(Err(Status::from(e))).await;
                }
            },
            _ = tx.closed() => {
                tracing::info!("a streamed call was cancelled by the caller; its replay stopped");
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}
