//! Talking to a Streamable HTTP upstream on behalf of a governed exchange.
//!
//! The forwarded body is the re-serialized frame, sent right after every member passed its
//! dispatch re-check. The agent's token never goes upstream. When the upstream cannot be reached
//! at all the calls end `UpstreamUnreachable` (nothing happened; it feeds the adapter breaker);
//! when the connection fails after that they are in doubt.

pub use crate::stdio_upstream::{delete_stdio, get_stdio, post_stdio, StdioSessions};

use crate::govern::{Pending, Tracker};
use crate::governor::{Caller, Outcome};
use crate::http::{McpState, FORWARDED_REQUEST_HEADERS};
use crate::jsonrpc::{parse, Incoming, Message, STOPLINE_REFUSED};
use crate::pump::{self, Pump};
use crate::reply::{json_reply, merge, stream_body};
use crate::sse::message_event;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One governed `POST`, ready to be forwarded.
pub(crate) struct Exchange {
    pub state: Arc<McpState>,
    pub server: String,
    pub caller: Caller,
    pub headers: HeaderMap,
    pub initialize: bool,
    pub batch: bool,
    /// Errors answered locally for refused members.
    pub local: Vec<Message>,
    /// The forwarded requests.
    pub pending: BTreeMap<String, Pending>,
}

/// Response headers passed back to the agent.
const RETURNED_HEADERS: [&str; 4] = [
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "cache-control",
];

fn forward_headers(
    mut request: reqwest::RequestBuilder,
    headers: &HeaderMap,
) -> reqwest::RequestBuilder {
    for name in FORWARDED_REQUEST_HEADERS {
        if let Some(value) = headers.get(name) {
            request = request.header(name, value.as_bytes());
        }
    }
    request
}

pub(crate) fn returned_headers(upstream: &reqwest::header::HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for name in RETURNED_HEADERS {
        if let Some(value) = upstream
            .get(name)
            .and_then(|v| axum::http::HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            out.insert(header::HeaderName::from_static(name), value);
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

/// Turn an upstream answer into the agent's response, tracking what comes back.
pub(crate) async fn answer(
    exchange_state: &Arc<McpState>,
    caller: &Caller,
    mut tracker: Tracker,
    local: Vec<Message>,
    batch: bool,
    response: reqwest::Response,
) -> Response {
    let status =
        StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let headers = returned_headers(response.headers());
    let is_sse = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if is_sse {
        let prelude = local
            .iter()
            .map(|m| message_event(&Incoming::Single(m.clone()).to_bytes()))
            .collect();
        let cut = exchange_state.governor.cut(caller);
        let stream = pump::spawn(
            response.bytes_stream(),
            Pump {
                tracker,
                cut,
                prelude,
            },
        );
        return (status, headers, stream_body(stream)).into_response();
    }
    let bytes = match response.bytes().await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracker.finish(&format!("the upstream's answer was lost: {error}"));
            return upstream_failed([], local, &error.to_string());
        }
    };
    let frame = (!bytes.is_empty()).then(|| parse(&bytes).ok()).flatten();
    if let Some(frame) = &frame {
        tracker.observe_frame(frame);
    }
    if status.is_client_error() {
        // The transport refused the message (unknown session, bad request): it did not run.
        tracker.refused_by_upstream();
    }
    if local.is_empty() {
        return (status, headers, bytes).into_response();
    }
    match merge(frame, local, batch) {
        Some(merged) => json_reply(200, merged.to_bytes()),
        None => (status, headers, bytes).into_response(),
    }
}

/// Forward a governed frame to a Streamable HTTP upstream.
pub(crate) async fn post_http(exchange: Exchange, url: &str, forward: Incoming) -> Response {
    let Exchange {
        state,
        server,
        caller,
        headers,
        initialize,
        batch,
        local,
        pending,
    } = exchange;
    let mut request = forward_headers(state.client.post(url), &headers)
        .header(header::CONTENT_TYPE.as_str(), "application/json");
    if !headers.contains_key(header::ACCEPT) {
        request = request.header(
            header::ACCEPT.as_str(),
            "application/json, text/event-stream",
        );
    }
    let response = match request.body(forward.to_bytes()).send().await {
        Ok(response) => response,
        Err(error) => {
            // A refused connection delivered nothing; any other failure may have delivered it.
            let ids: Vec<_> = pending.values().map(|p| p.id.clone()).collect();
            for pending in pending.into_values() {
                pending.admission.finish(if error.is_connect() {
                    Outcome::UpstreamUnreachable
                } else {
                    Outcome::InDoubt(format!("the upstream connection failed: {error}"))
                });
            }
            return upstream_failed(ids, local, &error.to_string());
        }
    };
    let mut tracker = Tracker::new(state.catalog.clone(), &server);
    tracker.track(pending);
    if initialize && response.status().is_success() {
        let returned = returned_headers(response.headers());
        state.sessions.bind(&server, &returned, &caller);
    }
    answer(&state, &caller, tracker, local, batch, response).await
}

/// Open the upstream's server-to-client stream.
pub(crate) async fn get_http(
    state: &Arc<McpState>,
    caller: &Caller,
    url: &str,
    headers: &HeaderMap,
) -> Response {
    let mut request = forward_headers(state.client.get(url), headers);
    if !headers.contains_key(header::ACCEPT) {
        request = request.header(header::ACCEPT.as_str(), "text/event-stream");
    }
    match request.send().await {
        Ok(response) => {
            let tracker = Tracker::new(state.catalog.clone(), "");
            answer(state, caller, tracker, Vec::new(), false, response).await
        }
        Err(error) => upstream_failed([], Vec::new(), &error.to_string()),
    }
}

/// End the upstream session.
pub(crate) async fn delete_http(state: &Arc<McpState>, url: &str, headers: &HeaderMap) -> Response {
    match forward_headers(state.client.delete(url), headers)
        .send()
        .await
    {
        Ok(response) => {
            let status =
                StatusCode::from_u16(response.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let returned = returned_headers(response.headers());
            let body = response.bytes().await.unwrap_or_default();
            (status, returned, body).into_response()
        }
        Err(error) => upstream_failed([], Vec::new(), &error.to_string()),
    }
}
