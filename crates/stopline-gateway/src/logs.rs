//! What the gateway logs, through `tracing` (docs/reference.md §8's operator view; docs/runbook.md "Logs").
//!
//! Every refusing admission decision, every stream cut, every breaker trip, acknowledgement and
//! view fault is one event with the fields `agent`, `route` (the HTTP path the call came in
//! on), `code` (the stopline refusal code) and `latency_ms` where they apply (a refusal also
//! names the `operation` target, `mcp:<server>:<tool>` or `model:<model>`), and is also a
//! `stopline.refusal` span (`crate::telemetry`, the one module of the crate this one uses). The
//! route is kept in a task-local for the request ([`with_route`], a middleware over the whole
//! router, and [`in_route`] for the MCP handler served before it), so the admission path names
//! it without every handler passing it down. With `serve --access-log`, every call handed
//! upstream is one more event at its end ([`admitted`]).

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use std::time::Instant;
use stopline_core::Refusal;

tokio::task_local! {
    static ROUTE: Arc<str>;
}

/// The route of the request being served on this task (`-` outside one: a detached exchange,
/// a background thread).
pub fn route() -> Arc<str> {
    ROUTE
        .try_with(Arc::clone)
        .unwrap_or_else(|_| Arc::from("-"))
}

/// Middleware: serve the request with its path as [`route`].
pub async fn with_route(request: Request, next: Next) -> Response {
    let path: Arc<str> = Arc::from(request.uri().path());
    ROUTE.scope(path, next.run(request)).await
}

/// Run `work` (a request's handling, served without the router's middleware) with `path` as
/// [`route`].
pub async fn in_route<F: std::future::Future>(path: Arc<str>, work: F) -> F::Output {
    ROUTE.scope(path, work).await
}

/// Milliseconds since `started`, to the microsecond.
pub fn ms_since(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0
}

/// A call refused at admission (and its `stopline.refusal` span, `crate::telemetry`).
pub fn refused(agent: &str, target: Option<&str>, refusal: &Refusal, started: Instant) {
    crate::telemetry::refused(
        agent,
        &route(),
        target,
        refusal.code.as_str(),
        &refusal.message,
        started,
    );
    tracing::info!(
        agent = if agent.is_empty() { "-" } else { agent },
        route = %route(),
        operation = target.unwrap_or("-"),
        code = %refusal.code,
        latency_ms = ms_since(started),
        "call refused: {}",
        refusal.message
    );
}

/// A call admitted and handed upstream, at its end (the access log, `serve --access-log`):
/// `status` is how it ended (`committed`, `failed`, `cancelled`, `unreachable`, `in_doubt`) and
/// `latency_ms` the time from admission to that end. Its own target, `stopline::access`, so a
/// filter can keep or drop it apart from the rest (`STOPLINE_LOG=info,stopline::access=off`).
pub fn admitted(agent: &str, route: &str, target: Option<&str>, status: &str, started: Instant) {
    tracing::info!(
        target: "stopline::access",
        agent = if agent.is_empty() { "-" } else { agent },
        route,
        operation = target.unwrap_or("-"),
        status,
        latency_ms = ms_since(started),
        "call admitted"
    );
}

/// A caller refused before it is known (its token did not verify).
pub fn unauthenticated(refusal: &Refusal) {
    crate::telemetry::refused(
        "-",
        &route(),
        None,
        refusal.code.as_str(),
        &refusal.message,
        Instant::now(),
    );
    tracing::info!(
        agent = "-",
        route = %route(),
        code = %refusal.code,
        latency_ms = 0.0,
        "caller refused: {}",
        refusal.message
    );
}

/// A call already admitted, answered at once by a stop (its exchange goes on detached);
/// `latency_ms` is how long the call had run.
pub fn cut(agent: &str, route: &str, refusal: &Refusal, since: Instant) {
    tracing::warn!(
        agent = if agent.is_empty() { "-" } else { agent },
        route,
        code = %refusal.code,
        latency_ms = ms_since(since),
        "stream cut: {}",
        refusal.message
    );
}
