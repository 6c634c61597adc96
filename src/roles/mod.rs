//! One module per role of the `switchboard` binary, each with its flags and its `run`.

pub mod admin;
pub mod control;
pub mod gateway;
pub mod packs;
pub mod router;
pub mod up;

use std::net::SocketAddr;

use clap::Args;

/// `/metrics` on a listener of its own (docs/running.md, "Metrics").
#[derive(Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Address to serve Prometheus `/metrics` on (port 0 picks a free port; the URL is
    /// printed). Off when unset. A listener of its own, never the public one: the page names
    /// tenants and queues.
    #[arg(long, env = "SWITCHBOARD_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
}

impl MetricsArgs {
    /// Binds and serves `/metrics` in the background, when asked to; prints its URL.
    pub async fn start(&self) -> anyhow::Result<Option<SocketAddr>> {
        let Some(addr) = self.metrics_listen else {
            return Ok(None);
        };
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        println!("metrics url: http://{addr}/metrics");
        tokio::spawn(async move {
            let forever = std::future::pending::<()>();
            if let Err(e) = switchboard_telemetry::scrape::serve(listener, forever).await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
        Ok(Some(addr))
    }
}

/// A future that resolves on SIGTERM or Ctrl-C (SIGINT). The handlers are installed when this
/// is called, not when the future is first polled: call it before printing the lines that tell
/// a supervisor the process is up, so a signal sent right after them is never the default
/// (fatal) one.
#[cfg(unix)]
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
            }
            (Ok(mut one), Err(_)) | (Err(_), Ok(mut one)) => {
                one.recv().await;
            }
            (Err(e), Err(_)) => {
                tracing::warn!(error = %e, "no signal handlers; stop the process by killing it");
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(not(unix))]
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
