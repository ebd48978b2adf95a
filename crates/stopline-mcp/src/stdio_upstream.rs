//! A stdio MCP server behind the HTTP proxy (`[mcp.<server>] command = [...]`).
//!
//! Each MCP session gets its own child process ([`crate::stdio_session`]), started on
//! `initialize` and stopped on `DELETE`. A `POST` writes its governed frame to the child's stdin
//! as one line per member (never a batch) and answers with an SSE stream of what the child
//! routes back to it, through the same pump (and the same stop cut) as an HTTP upstream: it
//! reads on after the agent goes away, and answers the agent at once at EMERGENCY. A child that
//! dies ends every stream of its session; the operations still open are then left in doubt.

use crate::govern::{Member, Tracker};
use crate::governor::{Caller, Outcome};
use crate::http::McpState;
use crate::jsonrpc::{Incoming, Message};
use crate::pump::{self, Pump};
use crate::reply::{json_reply, refusal_reply, stream_body};
use crate::sse::message_event;
pub use crate::stdio_session::StdioSessions;
use crate::stdio_session::{start, Start};
use crate::upstream::{upstream_failed, Exchange};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::channel::mpsc;
use futures::StreamExt;
use std::sync::Arc;
use stopline_core::{Refusal, RefusalCode};
use tokio::io::AsyncWriteExt;

fn session_key(server: &str, headers: &HeaderMap) -> Option<String> {
    Some(format!(
        "{server}\0{}",
        headers.get("mcp-session-id")?.to_str().ok()?
    ))
}

fn no_session() -> Response {
    let mut reply = refusal_reply(
        None,
        &Refusal::new(RefusalCode::BadRequest, "unknown or missing Mcp-Session-Id"),
    );
    *reply.status_mut() = StatusCode::NOT_FOUND;
    reply
}

fn sse(
    state: &Arc<McpState>,
    caller: &Caller,
    tracker: Tracker,
    local: Vec<Message>,
    rx: mpsc::Receiver<Message>,
    session: Option<String>,
) -> Response {
    let prelude = local
        .iter()
        .map(|m| message_event(&Incoming::Single(m.clone()).to_bytes()))
        .collect();
    let events = rx
        .map(|m| Ok::<_, std::convert::Infallible>(message_event(&Incoming::Single(m).to_bytes())));
    let stream = pump::spawn(
        events,
        Pump {
            tracker,
            cut: state.governor.cut(caller),
            prelude,
            cut_wait: state.governor.cut_outcome_wait(),
            resume: None,
        },
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    if let Some(id) = session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        headers.insert("mcp-session-id", id);
    }
    (StatusCode::OK, headers, stream_body(stream)).into_response()
}

/// Forward one member to the session's stdio child (starting it on `initialize`).
pub(crate) async fn post_stdio(
    exchange: Exchange,
    command: Vec<String>,
    mut member: Member,
) -> Response {
    let Exchange {
        state,
        server,
        caller,
        headers,
        initialize,
    } = exchange;
    let local: Vec<Message> = Vec::new();
    let pending = member.take_pending();
    let forward = member.frame();
    let command = command.as_slice();
    let (session, new_id) = match session_key(&server, &headers) {
        Some(key) => match state.stdio.get(&key) {
            Some(session) => (session, None),
            None => return no_session(),
        },
        None if initialize => {
            let config = state.servers.get(&*server).cloned().unwrap_or_default();
            match state.stdio.claim(&server, command, &config) {
                Ok(spawned) => {
                    let id = spawned.id.clone();
                    let key = format!("{server}\0{id}");
                    let what = Start {
                        config: &config,
                        governor: state.governor.clone(),
                        caller: caller.clone(),
                    };
                    let session = start(what, &state.stdio, spawned, key.clone());
                    state
                        .stdio
                        .sessions
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, session.clone());
                    let mut bound = HeaderMap::new();
                    bound.insert("mcp-session-id", HeaderValue::from_str(&id).expect("hex"));
                    state.sessions.bind(&server, &bound, &caller);
                    (session, Some(id))
                }
                Err(error) => {
                    let ids: Vec<_> = pending.values().map(|p| p.id.clone()).collect();
                    pending
                        .into_values()
                        .for_each(|p| p.admission.finish(Outcome::UpstreamUnreachable));
                    return upstream_failed(ids, local, &error.to_string());
                }
            }
        }
        None => return no_session(),
    };
    session.touch();
    let (tx, rx) = mpsc::channel(64);
    for key in pending.keys() {
        session
            .routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), tx.clone());
    }
    drop(tx);
    let mut line = forward.to_bytes();
    line.push(b'\n');
    let written = {
        let mut stdin = session.stdin.lock().await;
        let result = stdin.write_all(&line).await;
        result.and(stdin.flush().await)
    };
    let mut tracker = Tracker::new(state.catalog.clone(), &server);
    if let Err(error) = written {
        for key in pending.keys() {
            session
                .routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
        }
        let ids: Vec<_> = pending.values().map(|p| p.id.clone()).collect();
        let reason = format!("writing to the stdio server failed: {error}");
        pending
            .into_values()
            .for_each(|p| p.admission.finish(Outcome::InDoubt(reason.clone())));
        return upstream_failed(ids, local, &error.to_string());
    }
    let no_requests = pending.is_empty();
    tracker.track(pending);
    if no_requests {
        return match Incoming::from_messages(local, false) {
            Some(frame) => json_reply(200, frame.to_bytes()),
            None => StatusCode::ACCEPTED.into_response(),
        };
    }
    sse(&state, &caller, tracker, local, rx, new_id)
}

/// Open the session's server-to-client stream.
pub async fn get_stdio(
    state: &Arc<McpState>,
    server: &str,
    caller: &Caller,
    headers: &HeaderMap,
) -> Response {
    let Some(session) = session_key(server, headers).and_then(|k| state.stdio.get(&k)) else {
        return no_session();
    };
    session.touch();
    let (tx, rx) = mpsc::channel(64);
    *session
        .server_stream
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(tx);
    let tracker = Tracker::new(state.catalog.clone(), server);
    sse(state, caller, tracker, Vec::new(), rx, None)
}

/// End the session: its child's process group is killed.
pub async fn delete_stdio(state: &Arc<McpState>, server: &str, headers: &HeaderMap) -> Response {
    let removed = session_key(server, headers).and_then(|k| {
        state
            .stdio
            .sessions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&k)
    });
    match removed {
        Some(session) => {
            session.end();
            StatusCode::OK.into_response()
        }
        None => no_session(),
    }
}
