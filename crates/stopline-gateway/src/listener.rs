//! The gateway's HTTP/1 accept loop, with a bound on how long a client may take to send its
//! request headers (SPEC §12.3: 10 s).
//!
//! `axum::serve` has no header-read deadline, so a client that sends half a request line kept a
//! connection (and its task) open for as long as it liked; enough of them exhaust the gateway's
//! descriptors. hyper's own `header_read_timeout` closes such a connection. Bodies and streamed
//! responses (SSE) are not bounded here: a call in flight is the gateway's to finish. This module
//! never inspects a request; the router does.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::time::Duration;
use tokio::net::TcpListener;

/// How long a client may take to send the complete request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Serve `router` on `listener` until `shutdown` resolves; then stop accepting (connections
/// already accepted finish on their own tasks).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => return Ok(()),
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors or a connection reset before accept: keep serving.
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended");
            }
        });
    }
}
