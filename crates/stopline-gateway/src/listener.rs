//! The gateway's HTTP/1 accept loop, with a bound on how long a client may take to send its
//! request headers (docs/reference.md §6: 10 s), and the one dispatch it does before the router: a
//! `POST /mcp/<server>` goes straight to the MCP proxy's handler when one is mounted
//! ([`McpPost`]), without the router's matching, extractors and middleware (the read-only
//! MCP path's profile, BENCHMARKS.md).
//!
//! `axum::serve` has no header-read deadline, so a client that sends half a request line kept a
//! connection (and its task) open for as long as it liked; enough of them exhaust the gateway's
//! descriptors. hyper's own `header_read_timeout` closes such a connection. Bodies and streamed
//! responses (SSE) are not bounded here: a call in flight is the gateway's to finish. This module
//! judges nothing: both ways lead to a handler that authenticates and governs the request.

use crate::timeline::{Mark, Timeline};
use axum::response::Response;
use axum::Router;
use futures::future::BoxFuture;
use futures::future::Either;
use hyper::body::Incoming;
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// How long a client may take to send the complete request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The MCP proxy's `POST /mcp/<server>` handler, served on hyper directly.
pub trait McpPost: Send + Sync + 'static {
    /// Serve one `POST` whose path [`mcp_post_server`] accepted (read the server from it
    /// again; it is the same). It does everything the routed handler does: it must be the
    /// very handler the router mounts at `POST /mcp/{server}`.
    fn post(&self, request: hyper::Request<Incoming>) -> BoxFuture<'static, Response>;
}

/// The server a request is a `POST /mcp/<server>` for, when it is one the router would route
/// to that handler with exactly this name: the method is `POST` and the path is `/mcp/`
/// followed by one non-empty segment with no `%` (the router percent-decodes a segment; such a
/// path, like every other, is left to the router, which decodes it). A trailing slash, an
/// empty segment (`/mcp//x`), more segments, any other method (`HEAD` included): `None`, and
/// the router answers as it always did.
pub fn mcp_post_server<'p>(method: &hyper::Method, path: &'p str) -> Option<&'p str> {
    if method != hyper::Method::POST {
        return None;
    }
    let server = path.strip_prefix("/mcp/")?;
    (!server.is_empty() && !server.bytes().any(|b| b == b'/' || b == b'%')).then_some(server)
}

/// Serve `router` (and `mcp`, when given) on `listener` until `shutdown` resolves; then stop
/// accepting (connections already accepted finish on their own tasks).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    mcp: Option<Arc<dyn McpPost>>,
    timeline: Arc<Timeline>,
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
        let (routed, mcp) = (TowerToHyperService::new(router.clone()), mcp.clone());
        let timeline = timeline.clone();
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            // A drill's timeline (`crate::timeline`): when the request reached its handler and
            // when its answer was ready.
            let marked = timeline
                .is_on()
                .then(|| crate::timeline::request_id(request.headers()))
                .flatten()
                .map(|request| {
                    let at = Instant::now();
                    timeline.mark(Mark::Received { request, at });
                    (timeline.clone(), request)
                });
            let fast = mcp
                .as_ref()
                .filter(|_| mcp_post_server(request.method(), request.uri().path()).is_some());
            let answer = match fast {
                Some(mcp) => Either::Left(futures::FutureExt::map(mcp.post(request), Ok)),
                None => Either::Right(routed.call(request)),
            };
            async move {
                let answered = answer.await;
                if let (Some((timeline, request)), Ok(response)) = (marked, &answered) {
                    timeline.mark(Mark::Answered {
                        request,
                        at: Instant::now(),
                        status: response.status().as_u16(),
                    });
                }
                answered
            }
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    #[test]
    fn only_a_plain_post_to_one_server_segment_skips_the_router() {
        assert_eq!(mcp_post_server(&Method::POST, "/mcp/bench"), Some("bench"));
        assert_eq!(
            mcp_post_server(&Method::POST, "/mcp/a.b-c_d"),
            Some("a.b-c_d")
        );
        for path in [
            "/mcp/",
            "/mcp",
            "/mcp//x",
            "/mcp/x/",
            "/mcp/x/y",
            "/mcp/ev%65rything",
            "/mcp/%2e%2e",
            "//mcp/x",
            "/MCP/x",
            "/v1/engage",
            "",
        ] {
            assert_eq!(mcp_post_server(&Method::POST, path), None, "{path}");
        }
        for method in [
            Method::GET,
            Method::HEAD,
            Method::DELETE,
            Method::PUT,
            Method::OPTIONS,
        ] {
            assert_eq!(mcp_post_server(&method, "/mcp/bench"), None, "{method}");
        }
    }
}
