//! Serving control's HTTP listener (ingest and its health routes) with the bounds a public
//! webhook endpoint needs and `axum::serve` does not expose: at most `max_connections` open
//! connections (past it a clear `503` and close, at once), a header read timeout, and a
//! graceful drain. The body's pace is checked by the handler (`body.rs`), and the work slots
//! every webhook shares are taken only after the body is read (`mod.rs`), so slow or stalled
//! clients cost a connection each, never another webhook's deliveries.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use super::body::BodyPace;

/// The listener's bounds.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// A request's headers must arrive within this (HTTP/1).
    pub header_timeout: Duration,
    /// How fast a body must arrive ([`BodyPace`]).
    pub body: BodyPace,
    /// The biggest body taken (413 past it), at most
    /// [`switchboard_model::body::MAX_BODY_BYTES_CEILING`].
    pub max_body_bytes: usize,
    /// Longest wait for open requests at shutdown.
    pub drain_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            header_timeout: Duration::from_secs(5),
            body: BodyPace::default(),
            max_body_bytes: switchboard_model::body::DEFAULT_MAX_BODY_MB * 1024 * 1024,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// The answer to a connection over the bound, before its request is read.
fn refusal_body() -> String {
    serde_json::json!({
        "error": crate::error::Reason::Unavailable.as_str(),
        "message": "too many open connections; retry shortly",
    })
    .to_string()
}

/// Answers 503 on a connection over the bound and closes it, reading (and dropping) what the
/// client sent for a moment first so the close does not reset the answer away.
async fn refuse(mut stream: TcpStream) {
    let body = refusal_body();
    let head = format!(
        "HTTP/1.1 {} Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        crate::error::Reason::Unavailable.http_status(),
        body.len()
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 16 * 1024];
        let mut left = 256 * 1024usize;
        while left > 0 {
            let n = stream.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            left = left.saturating_sub(n);
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), answer).await;
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains open connections for at
/// most `limits.drain_timeout`.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!(error = %e, "accepting an http connection failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            switchboard_telemetry::metrics().ingest_refusal("connections");
            tokio::spawn(refuse(stream));
            continue;
        };
        let app = app.clone();
        // The peer's address, for the console's trusted auth proxy (`ConnectInfo`).
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            app.clone().oneshot(request)
        });
        let builder = Arc::clone(&builder);
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("http connections still open after the drain timeout; closing them");
    }
    Ok(())
}
