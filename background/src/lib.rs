//! Work that must yield to live deliveries on a busy machine — a replay's reading of stored
//! deliveries, its encoding and its calls' decoding — runs here, on a runtime of its own
//! whose threads run at a lower CPU priority (a nice value, set per thread). When every core
//! is busy, the kernel runs live ingest's threads first, wherever in the process each runs
//! (issue 43: a cheap 1,000-delivery replay took another tenant's live p99 from 7 ms to
//! 67–128 ms before, all of it outside the sandbox's classes).
//!
//! One per process ([`background`]): it bounds the CPU such work takes to its threads, and
//! the connections made on it (a router client for replays) live as long as the process.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

/// The nice value the background threads run at: the sandbox's replay children's default.
pub const NICE: i32 = 10;

/// The process's background runtime.
pub struct Background {
    /// `None` only while it is being dropped.
    runtime: Option<Runtime>,
    handle: Handle,
}

/// Why background work gave no answer: the runtime was shutting down.
#[derive(Debug, thiserror::Error)]
#[error("background work was cancelled")]
pub struct Cancelled;

impl Background {
    /// A runtime of `threads` worker threads (at least one) named `name`, each at `nice`.
    pub fn start(name: &str, threads: usize, nice: i32) -> std::io::Result<Self> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(name)
            .enable_all()
            .on_thread_start(move || lower_priority(nice))
            .build()?;
        Ok(Self {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        })
    }

    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `work` on the background threads and waits for it; dropping the returned future
    /// cancels the work.
    pub async fn run<F>(&self, work: F) -> Result<F::Output, Cancelled>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let mut task = AbortOnDrop(self.handle().spawn(work));
        match (&mut task.0).await {
            Ok(out) => Ok(out),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Cancelled),
        }
    }
}

impl Drop for Background {
    /// Without waiting: a runtime dropped inside another one may not block.
    fn drop(&mut self) {
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Lowers the calling thread's priority (Linux: a nice value is per thread). Best effort: a
/// thread left at the process's priority only competes as any other would.
fn lower_priority(nice: i32) {
    let tid = rustix::thread::gettid();
    if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
        tracing::debug!(error = %e, "could not lower a background thread's priority");
    }
}

/// The process's background runtime, started on first use with one thread per two cores.
pub fn background() -> &'static Background {
    static BACKGROUND: OnceLock<Background> = OnceLock::new();
    BACKGROUND.get_or_init(|| {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2);
        Background::start("switchboard-background", cores.div_ceil(2), NICE)
            .unwrap_or_else(|e| panic!("cannot start the background runtime: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of_thread(tid: i32) -> Option<i64> {
        let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(") ")?;
        rest.split_whitespace().nth(16)?.parse().ok()
    }

    #[tokio::test]
    async fn work_runs_on_threads_at_the_lower_priority_and_the_caller_keeps_its_own() {
        let bg = Background::start("test-background", 1, 7).expect("starts");
        let there = bg
            .run(async { rustix::thread::gettid().as_raw_nonzero().get() })
            .await
            .expect("answers");
        let here = rustix::thread::gettid().as_raw_nonzero().get();
        assert_ne!(there, here);
        assert_eq!(nice_of_thread(there), Some(7));
        assert_eq!(nice_of_thread(here), Some(0));
    }

    #[tokio::test]
    async fn dropping_the_wait_cancels_the_work() {
        let bg = Background::start("test-background", 1, 0).expect("starts");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waiting = bg.run(async move {
            let _tx = tx;
            std::future::pending::<()>().await
        });
        let _ = tokio::time::timeout(std::time::Duration::from_millis(20), waiting).await;
        // The task was aborted: its sender is dropped, so the receiver ends.
        assert!(rx.await.is_err());
    }
}
