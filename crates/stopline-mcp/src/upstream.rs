//! Talking to a Streamable HTTP upstream on behalf of a governed exchange.
//!
//! Each member of a frame is forwarded on its own, re-serialized, right after it passed its
//! dispatch re-check. The agent's token never goes upstream. The exchange runs in a detached
//! task that owns its operations (docs/reference.md §8): an agent that goes away does not end it, and the
//! outcome is recorded when the upstream gives it. At EMERGENCY the agent is answered at once
//! and the exchange has `cut_outcome_wait_s` to give its outcome. When the upstream cannot be
//! reached at all the calls end `UpstreamUnreachable` (nothing happened; it feeds the adapter
//! breaker); when the connection fails after that they are in doubt.

pub(crate) use crate::stdio_upstream::post_stdio;
pub use crate::stdio_upstream::{delete_stdio, get_stdio, StdioSessions};

use crate::govern::{refusal_response, Member, Tracker};
use crate::governor::Caller;
use crate::http::{forwarded_headers, McpState};
use crate::jsonrpc::{parse, Id, Incoming, Message, STOPLINE_REFUSED};
use crate::pump::{self, cut_notice, Pump};
use crate::reply::{json_reply, stream_body};
use axum::http::HeaderValue;
use axum::http::{header, HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::Full;
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use stopline_core::Refusal;
use stopline_gateway::client::{body_bytes, body_stream, UpstreamResponse};
use tokio::sync::oneshot;
use tokio::time::Instant;

/// What every member exchange of one governed `POST` shares.
#[derive(Clone)]
pub(crate) struct Exchange {
    pub state: Arc<McpState>,
    pub server: Arc<str>,
    pub caller: Caller,
    /// The agent's headers an upstream gets (`FORWARDED_REQUEST_HEADERS`), never its token.
    pub headers: HeaderMap,
    pub initialize: bool,
}

/// Response headers passed back to the agent (names made at compile time, not parsed from text
/// on every answer).
const RETURNED_HEADERS: [header::HeaderName; 4] = [
    header::CONTENT_TYPE,
    header::HeaderName::from_static("mcp-session-id"),
    header::HeaderName::from_static("mcp-protocol-version"),
    header::CACHE_CONTROL,
];

/// An HTTP upstream's URL, parsed, with the `Host` header every request to it carries, made
/// once: left to the client, it is formatted and validated again on every request (2.6k
/// instructions a call, BENCHMARKS.md's twelfth pass).
#[derive(Debug)]
pub(crate) struct Target {
    uri: Uri,
    /// The URL's host and, unless it is the scheme's default, its port — what the client
    /// would send (`None`: not a valid header value, so the client makes it as before).
    host: Option<HeaderValue>,
    /// The upstream's own headers (`[mcp.<server>] headers`): its credentials, sent on every
    /// request to it and to nothing else.
    headers: HeaderMap,
}

impl Target {
    /// `url` parsed, or why it is not a URL.
    pub fn parse(url: &str) -> Result<Target, axum::http::uri::InvalidUri> {
        let uri: Uri = url.parse()?;
        let host = uri.host().and_then(|host| {
            let default_port = match uri.scheme_str() {
                Some("https") => Some(443),
                Some("http") => Some(80),
                _ => None,
            };
            let value = match uri.port_u16() {
                Some(port) if Some(port) != default_port => format!("{host}:{port}"),
                _ => host.to_string(),
            };
            HeaderValue::from_str(&value).ok()
        });
        Ok(Target {
            uri,
            host,
            headers: HeaderMap::new(),
        })
    }

    /// This target with the upstream's own `headers`.
    pub fn with_headers(mut self, headers: HeaderMap) -> Target {
        self.headers = headers;
        self
    }
}

/// The request to the upstream: `method` to `target` with `forwarded`, the agent's headers an
/// upstream gets (`http::forwarded_headers`: never its token, never `Host`), `Accept`
/// defaulting to `accept` when the agent sent none, and the target's own headers (its
/// credentials) last, so nothing the agent sent can replace them.
fn upstream_request(
    method: Method,
    target: &Target,
    forwarded: HeaderMap,
    accept: &'static str,
    content_type: Option<&'static str>,
    body: Bytes,
) -> hyper::Request<Full<Bytes>> {
    let mut request = hyper::Request::new(Full::new(body));
    *request.method_mut() = method;
    *request.uri_mut() = target.uri.clone();
    *request.headers_mut() = forwarded;
    let out = request.headers_mut();
    if let Some(host) = &target.host {
        out.insert(header::HOST, host.clone());
    }
    if let Some(content_type) = content_type {
        out.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    }
    if !out.contains_key(header::ACCEPT) {
        out.insert(header::ACCEPT, HeaderValue::from_static(accept));
    }
    for (name, value) in &target.headers {
        out.insert(name, value.clone());
    }
    request
}

pub(crate) fn returned_headers(upstream: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(RETURNED_HEADERS.len());
    for name in RETURNED_HEADERS {
        if let Some(value) = upstream.get(&name) {
            out.insert(name, value.clone());
        }
    }
    out
}

/// Errors for requests the upstream never answered because it could not be reached.
pub(crate) fn upstream_failed(
    ids: impl IntoIterator<Item = serde_json::Value>,
    local: Vec<Message>,
    why: &str,
) -> Response {
    let mut messages: Vec<Message> = ids
        .into_iter()
        .map(|id| {
            Message::error(
                id,
                STOPLINE_REFUSED - 1,
                &format!("upstream unavailable: {why}"),
                Some(json!({"code": "upstream_unavailable"})),
            )
        })
        .collect();
    messages.extend(local);
    let batch = messages.len() > 1;
    match Incoming::from_messages(messages, batch) {
        Some(frame) => json_reply(502, frame.to_bytes()),
        None => StatusCode::BAD_GATEWAY.into_response(),
    }
}

/// The agent's answer when a cut lands before the upstream answered: an error for each open
/// request, with HTTP 200 as any refusal of a request (their real answers are still recorded
/// when they come).
pub(crate) fn cut_reply(ids: Vec<Id>, refusal: &Refusal) -> Response {
    let notice = cut_notice(refusal);
    let status = 200;
    let messages: Vec<Message> = ids
        .into_iter()
        .map(|id| refusal_response(id, &notice))
        .collect();
    match Incoming::from_messages(messages, false) {
        Some(frame) => json_reply(status, frame.to_bytes()),
        None => json_reply(
            status,
            Incoming::Single(refusal_response(serde_json::Value::Null, &notice)).to_bytes(),
        ),
    }
}

/// The detached side of one member exchange: the cut signal, the agent's pending reply, and
/// the deadline a cut sets.
pub(crate) struct Detached {
    pub cut: BoxFuture<'static, Refusal>,
    pub reply: Option<oneshot::Sender<Response>>,
    pub deadline: Option<Instant>,
    pub cut_wait: Duration,
}

enum Event<T> {
    Cut(Refusal),
    Deadline,
    Done(T),
}

impl Detached {
    /// Answer the agent with `response`, if it is still waiting.
    pub fn answer(&mut self, response: Response) {
        if let Some(reply) = self.reply.take() {
            let _ = reply.send(response);
        }
    }

    /// Wait for `work`; a cut first answers the agent at once (the exchange goes on). `None`
    /// when a cut exchange reached its deadline.
    pub async fn wait<F: Future>(&mut self, tracker: &mut Tracker, work: F) -> Option<F::Output> {
        tokio::pin!(work);
        loop {
            let cut_pending = self.deadline.is_none();
            let deadline = self.deadline.unwrap_or_else(Instant::now);
            let event = tokio::select! {
                biased;
                refusal = &mut self.cut, if cut_pending => Event::Cut(refusal),
                _ = tokio::time::sleep_until(deadline), if !cut_pending => Event::Deadline,
                out = work.as_mut() => Event::Done(out),
            };
            match event {
                Event::Cut(refusal) => {
                    // The cut itself is the gateway's warning (`logs::cut`, with agent, route
                    // and code); this one only traces (as the model exchange's does): at a stop
                    // every covered call in flight is cut at once, and a second line per cut is
                    // written by the workers answering the others.
                    tracing::debug!(code = %refusal.code, "answering an MCP call at once: {}", refusal.message);
                    self.deadline = Some(Instant::now() + self.cut_wait);
                    let ids = tracker.mute_open();
                    self.answer(cut_reply(ids, &refusal));
                }
                Event::Deadline => return None,
                Event::Done(out) => return Some(out),
            }
        }
    }

    /// Why a cut exchange's open operations are left in doubt.
    pub fn too_late(&self) -> String {
        format!(
            "cut at a stop; the server gave no outcome within cut_outcome_wait_s ({} s)",
            self.cut_wait.as_secs()
        )
    }
}

/// Turn an upstream answer to a `GET` into the agent's response (a stream, or what it said).
pub(crate) async fn answer(
    exchange_state: &Arc<McpState>,
    caller: &Caller,
    mut tracker: Tracker,
    resume: Option<crate::resume::Resume>,
    response: UpstreamResponse,
) -> Response {
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let headers = returned_headers(&parts.headers);
    if is_sse(&headers) {
        let cut = exchange_state.governor.cut(caller);
        let stream = pump::spawn(
            body_stream(body),
            Pump {
                tracker,
                cut,
                prelude: Vec::new(),
                cut_wait: exchange_state.governor.cut_outcome_wait(),
                resume,
            },
        );
        return (status, headers, stream_body(stream)).into_response();
    }
    match body_bytes(body).await {
        Ok(bytes) => (status, headers, bytes).into_response(),
        Err(error) => {
            tracker.finish(&format!("the upstream's answer was lost: {error}"));
            upstream_failed([], Vec::new(), &error.to_string())
        }
    }
}

fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// Forward one member to a Streamable HTTP upstream at `target` (`None`: the configured URL is
/// not one, so nothing can be delivered), waiting only for what the agent gets.
///
/// The exchange is polled on the agent's own task while the agent waits (no task of its own,
/// no hand-off there and back); it is never the agent's to end: an answer given before the
/// exchange ended (a cut's) leaves the rest of it to a task of its own, and so does an agent
/// that goes away first (its connection drops this future: [`Detachable`]'s drop spawns what
/// is left). Either way the outcome is recorded when the upstream gives it (docs/reference.md §8).
pub(crate) async fn post_http(
    exchange: Exchange,
    target: Option<Arc<Target>>,
    member: Member,
) -> Response {
    let (reply, mut answer) = oneshot::channel();
    // The cut is subscribed here, on the request's task, so its log event names the route.
    let cut = exchange.state.governor.cut(&exchange.caller);
    let mut work = Detachable(Some(Box::pin(drive_http(
        exchange, target, member, reply, cut,
    ))));
    // Only the exchange sends the answer, and only while it is polled: after each poll, the
    // answer is there or the exchange is still waiting on something that will wake this task.
    let reply = std::future::poll_fn(|cx| {
        if let Some(running) = work.0.as_mut() {
            if running.as_mut().poll(cx).is_ready() {
                work.0 = None;
            }
        }
        match answer.try_recv() {
            Ok(reply) => Poll::Ready(Some(reply)),
            Err(oneshot::error::TryRecvError::Closed) => Poll::Ready(None),
            Err(oneshot::error::TryRecvError::Empty) if work.0.is_none() => Poll::Ready(None),
            Err(oneshot::error::TryRecvError::Empty) => Poll::Pending,
        }
    })
    .await;
    // Answered before it ended (a cut): the rest goes on in a task of its own.
    drop(work);
    reply.unwrap_or_else(|| StatusCode::BAD_GATEWAY.into_response())
}

/// An exchange polled on the agent's task; dropped before it ended (the agent answered at
/// once, or gone), it goes on in a task of its own.
struct Detachable(Option<BoxFuture<'static, ()>>);

impl Drop for Detachable {
    fn drop(&mut self) {
        if let Some(rest) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(rest);
                }
                // No runtime to run it on (the gateway is going away): dropping it leaves its
                // open operations in doubt (the tracker's drop), never silently committed.
                Err(_) => drop(rest),
            }
        }
    }
}

async fn drive_http(
    exchange: Exchange,
    target: Option<Arc<Target>>,
    mut member: Member,
    reply: oneshot::Sender<Response>,
    cut: BoxFuture<'static, Refusal>,
) {
    let Exchange {
        state,
        server,
        caller,
        headers,
        initialize,
    } = exchange;
    let mut tracker = Tracker::for_server(state.catalog.clone(), server.clone());
    tracker.track_one(member.pending.take());
    let Some(target) = target else {
        let ids = tracker.open_ids();
        tracker.unreachable();
        let why = format!("the URL of [mcp.{server}] is not a valid URL");
        let _ = reply.send(upstream_failed(ids, Vec::new(), &why));
        return;
    };
    // The session a resumed stream would deliver this member's answer on (SEP-1699).
    let resume_key = crate::resume::session_key(&server, &headers);
    let request = upstream_request(
        Method::POST,
        &target,
        headers,
        "application/json, text/event-stream",
        Some("application/json"),
        member.message.to_bytes().into(),
    );
    let mut task = Detached {
        cut,
        reply: Some(reply),
        deadline: None,
        cut_wait: state.governor.cut_outcome_wait(),
    };
    let response = match task.wait(&mut tracker, state.client.send(request)).await {
        None => return tracker.cut(&task.too_late()),
        Some(Ok(response)) => response,
        Some(Err(error)) => {
            // A refused connection delivered nothing; any other failure may have delivered it.
            let ids = tracker.open_ids();
            if error.is_connect() {
                tracker.unreachable();
            } else {
                tracker.finish(&format!(
                    "the upstream connection failed after dispatch: {error}"
                ));
            }
            return task.answer(upstream_failed(ids, Vec::new(), &error.to_string()));
        }
    };
    let (parts, body) = response.into_parts();
    let status = parts.status;
    let returned = returned_headers(&parts.headers);
    if initialize && status.is_success() {
        state.sessions.bind(&server, &returned, &caller);
    }
    if is_sse(&returned) {
        match (task.reply.take(), task.deadline) {
            (Some(reply), _) => {
                let stream = pump::spawn(
                    body_stream(body),
                    Pump {
                        tracker,
                        cut: task.cut,
                        prelude: Vec::new(),
                        cut_wait: task.cut_wait,
                        resume: resume_key.map(|key| crate::resume::Resume {
                            parked: state.parked.clone(),
                            key,
                            wait: task.cut_wait,
                            resumed: false,
                        }),
                    },
                );
                let _ = reply.send((status, returned, stream_body(stream)).into_response());
            }
            (None, deadline) => pump::drain(
                body_stream(body),
                tracker,
                task.cut_wait,
                deadline.unwrap_or_else(|| Instant::now() + task.cut_wait),
            ),
        }
        return;
    }
    let bytes = match task.wait(&mut tracker, body_bytes(body)).await {
        None => return tracker.cut(&task.too_late()),
        Some(Ok(bytes)) => bytes,
        Some(Err(error)) => {
            tracker.finish(&format!("the upstream's answer was lost: {error}"));
            return task.answer(upstream_failed([], Vec::new(), &error.to_string()));
        }
    };
    if !status.is_client_error() && !tracker.reads_answers() {
        // No operation and no catalog waits on what it says (a read-only call's answer): it is
        // passed on as it came, unread.
        tracker.answered();
    } else if let Some(frame) = (!bytes.is_empty()).then(|| parse(&bytes).ok()).flatten() {
        tracker.observe_frame(&frame);
    }
    if status.is_client_error() {
        // The transport refused the message (unknown session, bad request): it did not run.
        tracker.refused_by_upstream();
    }
    task.answer((status, returned, bytes).into_response());
}

/// Open the upstream's server-to-client stream.
///
/// A `GET` with `Last-Event-ID` resumes a stream (SEP-1699): it takes over the requests parked
/// under its session (`crate::resume`), and records their outcomes as their answers come on it.
pub(crate) async fn get_http(
    state: &Arc<McpState>,
    server: &str,
    caller: &Caller,
    target: Option<Arc<Target>>,
    headers: &HeaderMap,
) -> Response {
    let Some(target) = target else {
        return upstream_failed([], Vec::new(), "the configured url is not a valid URL");
    };
    let request = upstream_request(
        Method::GET,
        &target,
        forwarded_headers(headers),
        "text/event-stream",
        None,
        Bytes::new(),
    );
    match state.client.send(request).await {
        Ok(response) => {
            let mut tracker = Tracker::new(state.catalog.clone(), server);
            let key = crate::resume::session_key(server, headers);
            let resumed = headers.contains_key("last-event-id");
            let resume = key.map(|key| crate::resume::Resume {
                parked: state.parked.clone(),
                key,
                wait: state.governor.cut_outcome_wait(),
                resumed,
            });
            if let Some(resume) = resume.as_ref().filter(|r| r.resumed) {
                for pending in resume.parked.claim(&resume.key) {
                    tracker.track_one(Some(pending));
                }
            }
            answer(state, caller, tracker, resume, response).await
        }
        Err(error) => upstream_failed([], Vec::new(), &error.to_string()),
    }
}

/// End the upstream session.
pub(crate) async fn delete_http(
    state: &Arc<McpState>,
    target: Option<Arc<Target>>,
    headers: &HeaderMap,
) -> Response {
    let Some(target) = target else {
        return upstream_failed([], Vec::new(), "the configured url is not a valid URL");
    };
    let request = upstream_request(
        Method::DELETE,
        &target,
        forwarded_headers(headers),
        "*/*",
        None,
        Bytes::new(),
    );
    match state.client.send(request).await {
        Ok(response) => {
            let (parts, body) = response.into_parts();
            let returned = returned_headers(&parts.headers);
            let body = body_bytes(body).await.unwrap_or_default();
            (parts.status, returned, body).into_response()
        }
        Err(error) => upstream_failed([], Vec::new(), &error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(url: &str) -> Option<String> {
        let target = Target::parse(url).expect("a URL");
        target.host.map(|h| h.to_str().unwrap().to_string())
    }

    #[test]
    fn a_target_carries_the_host_header_the_client_would_make() {
        for (url, want) in [
            ("http://127.0.0.1:8931/mcp", "127.0.0.1:8931"),
            ("http://example.test/mcp", "example.test"),
            // The scheme's default port is left out, as the client leaves it out.
            ("http://example.test:80/mcp", "example.test"),
            ("https://example.test:443/mcp", "example.test"),
            ("https://example.test:80/mcp", "example.test:80"),
            ("http://[::1]:9000/mcp", "[::1]:9000"),
            // Userinfo is never part of `Host`.
            ("http://user:pw@example.test:81/", "example.test:81"),
        ] {
            assert_eq!(host(url).as_deref(), Some(want), "{url}");
        }
        assert!(Target::parse("not a url").is_err());
    }

    #[test]
    fn the_upstream_request_sends_the_targets_host_and_never_the_agents() {
        let target = Target::parse("http://127.0.0.1:9/mcp").unwrap();
        let mut forwarded = HeaderMap::new();
        forwarded.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        forwarded.insert(header::HOST, HeaderValue::from_static("agent.example"));
        let request = upstream_request(
            Method::POST,
            &target,
            forwarded,
            "*/*",
            Some("application/json"),
            Bytes::new(),
        );
        assert_eq!(request.headers()[header::HOST], "127.0.0.1:9");
        assert_eq!(request.headers()[header::ACCEPT], "application/json");
        assert_eq!(
            request.uri(),
            &"http://127.0.0.1:9/mcp".parse::<Uri>().unwrap()
        );
    }
}
