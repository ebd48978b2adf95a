//! Remote A2A agents behind the gateway (docs/reference.md §8 "A2A"): `POST /a2a/<name>` (the
//! JSON-RPC binding, streaming included) and `GET /a2a/<name>/.well-known/agent-card.json`.
//!
//! A remote agent is outside the environment: a stop cannot kill it, and its cancel "will be
//! attempted, but success is not guaranteed" (A2A). So the stop is made at the boundary:
//!
//! - Every request is authenticated by the agent's stopline token and admitted like any call.
//!   A message send is an operation on `a2a:<name>` (prepared and fsynced before dispatch; it
//!   counts `tool_calls`), other methods are noncritical work with no operation. The request
//!   goes upstream as the agent wrote it, with `[a2a.<name>] headers` (the remote's own
//!   credentials) added; refusals travel as JSON-RPC errors (HTTP 200; in the SSE stream when
//!   the agent asked for one), as the MCP proxy's do.
//! - Every task a send opens is written in the [`TaskBook`](crate::a2a_book::TaskBook) against
//!   the root of the caller's delegation chain the moment the gateway sees its id. A task method
//!   (get, cancel, subscribe, push configuration, a send that continues a task) on a task the
//!   chain did not open is refused `task_not_owned` and counts toward `unauthorized_calls`;
//!   `ListTasks`, which would show other chains' tasks, is refused the same way.
//! - A send's operation stays open while its task is: it is finished when the gateway sees the
//!   task end (committed, failed, or cancelled), in the answer, a stream event, or a later
//!   `GetTask`/`CancelTask` answer.
//! - At a HALT_ALL or EMERGENCY covering the chain (`stopline_core::call::must_end_remote`),
//!   new sends are refused by admission, every open stream is cut (the agent gets the refusal
//!   event at once; `exchange.rs`), and each open task's watcher sends the version's cancel
//!   method upstream, waiting at most `cut_outcome_wait_s`. The remote confirmed (the task is
//!   cancelled): the sends on it are finished `cancelled`. It did not: they are left in doubt,
//!   "remote cancel not confirmed", in `status` and `ops list` until the owner reconciles them,
//!   and (as any tool operation in doubt) they block the chain's further sends to that agent.
//!   Nothing the remote sends after the cut reaches the agent. At HALT_NONCRITICAL sends queue.
//!
//! This file judges and hands on requests; `a2a_task.rs` follows the tasks (meter, keeper,
//! watcher, the cancel at a stop), `a2a_book.rs` remembers them, `a2a_wire.rs` reads the wire.
//!
//! The book is durable: the task a send opens is recorded on its operation (a `task` journal
//! line, queued before the answer naming it is handed on), and a gateway starting on the home
//! rebuilds the book from the journals' open operations (`a2a_task::rebuild`): the tasks are
//! their chains' again, and those whose sends are still unresolved (in doubt, their writer
//! gone) are watched and cancelled at a stop covering the chain, as if seen live. A task the
//! journals no longer name is refused `task_not_owned` (fail closed).
//!
//! A send that blocks until its task ends (`SendMessage` without
//! `returnImmediately`) shows its task id only in its answer: cut before it, the gateway
//! cannot name the task to cancel, and the operation is in doubt after `cut_outcome_wait_s`
//! unless the answer arrives; streaming sends name their task in their first event.

use crate::a2a_wire::{self, Kind, Version};
use crate::admit::Plan;
use crate::caller::Caller;
use crate::config::A2aAgent;
use crate::error::GatewayError;
use crate::exchange::{Answer, DetachedCall};
use crate::governor::Governor;
use crate::outgoing::Outgoing;
use crate::request::bearer;
use crate::response_book::chain_root;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::time::Duration;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::ops::BlockScope;
use stopline_core::{Refusal, RefusalCode};

/// The operation target (and adapter breaker) of A2A agent `name`.
fn target(name: &str) -> String {
    format!("a2a:{name}")
}

/// How a refused or failed request is answered: a JSON-RPC error, in an SSE event when the
/// agent asked for a stream.
fn rpc_answer(stream: bool, status: StatusCode, body: Value) -> Response {
    if stream {
        let event = a2a_wire::sse_event(&body);
        (status, [(header::CONTENT_TYPE, "text/event-stream")], event).into_response()
    } else {
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            body.to_string(),
        )
            .into_response()
    }
}

fn refused(id: &Value, stream: bool, refusal: &Refusal) -> Response {
    rpc_answer(
        stream,
        StatusCode::OK,
        a2a_wire::refusal_response(id, refusal),
    )
}

fn upstream_failed(id: &Value, stream: bool, why: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32603, "message": format!("upstream_error: {why}"),
                  "data": {"code": "upstream_error", "message": why}},
    });
    rpc_answer(stream, StatusCode::OK, body)
}

/// `POST /a2a/{name}`.
pub async fn post(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let gov = &state.gov;
    let caller = match gov.authenticate(bearer(&headers)) {
        Ok(caller) => caller,
        Err(refusal) => return GatewayError::Refused(refusal).into_response(),
    };
    let version = Version::from_header(
        headers
            .get(a2a_wire::VERSION_HEADER)
            .and_then(|v| v.to_str().ok()),
    );
    let request = match a2a_wire::parse_request(&body, version) {
        Ok(request) => request,
        Err(a2a_wire::Malformed(why)) => {
            return rpc_answer(
                false,
                StatusCode::BAD_REQUEST,
                a2a_wire::malformed_response(&why),
            )
        }
    };
    let stream = matches!(
        request.kind,
        Kind::Send { stream: true, .. } | Kind::OnTask { stream: true, .. }
    );
    let Some(agent) = gov.config().a2a.get(&name).cloned() else {
        gov.note_refused_egress(&caller, &format!("unknown A2A agent {name}"));
        let refusal = gov.refused(Refusal::new(
            RefusalCode::EgressRefused,
            format!("no A2A agent {name:?} is configured"),
        ));
        return refused(&request.id, stream, &refusal);
    };
    match call(gov, &caller, &name, &agent, &headers, &request, body).await {
        Ok(Answer::Whole {
            status,
            content_type,
            body,
        }) => (status, [(header::CONTENT_TYPE, content_type)], body).into_response(),
        Ok(Answer::Stream {
            status,
            content_type,
            body,
        }) => (status, [(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(GatewayError::Refused(refusal)) => refused(&request.id, stream, &refusal),
        Err(error) => upstream_failed(&request.id, stream, &error.to_string()),
    }
}

/// Judge, admit and hand upstream one request.
#[allow(clippy::too_many_arguments)]
async fn call(
    gov: &Governor,
    caller: &Caller,
    name: &str,
    agent: &A2aAgent,
    headers: &HeaderMap,
    request: &a2a_wire::Request,
    body: Bytes,
) -> Result<Answer, GatewayError> {
    let version = request.version;
    let root = chain_root(caller);
    let book = gov.a2a_tasks();
    let not_owned = |what: String| -> GatewayError {
        gov.note_unauthorized(caller, &format!("task_not_owned {} {what}", target(name)));
        let refusal = Refusal::new(RefusalCode::TaskNotOwned, what);
        crate::logs::refused(
            caller.agent(),
            Some(&target(name)),
            &refusal,
            std::time::Instant::now(),
        );
        gov.refused(refusal).into()
    };
    let named_task = match &request.kind {
        Kind::Send { task, .. } => task.clone(),
        Kind::OnTask { task, .. } => Some(task.clone()),
        Kind::NotOwnable => {
            return Err(not_owned(format!(
            "{} names no task of this agent's chain (a task list would show other agents' tasks)",
            request.method
        )))
        }
        Kind::Other => None,
        Kind::Unknown => {
            let refusal = Refusal::new(
                RefusalCode::BadRequest,
                format!(
                    "{:?} is not an A2A method the gateway serves",
                    request.method
                ),
            );
            return Err(gov.refused(refusal).into());
        }
    };
    if let Some(task) = &named_task {
        if task.len() > stopline_core::refusal::MAX_RECORDED_BYTES
            || !book.owned_by(name, task, &root)
        {
            return Err(not_owned(format!(
                "task {task:?} of A2A agent {name:?} was not opened by this agent's chain through this gateway"
            )));
        }
    }
    let is_send = matches!(request.kind, Kind::Send { .. });
    let own_cancel = matches!(request.kind, Kind::OnTask { cancel: true, .. });
    let request_id = match &request.id {
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
    .filter(|id| id.len() <= stopline_core::refusal::MAX_RECORDED_BYTES);
    let plan = Plan {
        // The agent's own cancel only stops work: critical, so a noncritical halt holds nothing
        // back from it (at HALT_ALL the gateway cancels the chain's tasks itself).
        class: if own_cancel {
            stopline_core::TaskClass::Critical
        } else {
            gov.class_for(caller, false)
        },
        target: is_send.then(|| target(name)),
        record: is_send,
        blocks: BlockScope::Agent,
        budget: if is_send {
            [(BudgetKind::ToolCalls, 1.0)].into()
        } else {
            Budgets::new()
        },
        upstream: Some(target(name)),
        request_id,
        surface: "a2a",
    };
    let admission = gov.admit(caller, plan).await?;
    let mut outgoing = Outgoing::new(Method::POST, &agent.url, agent.timeout, body)?;
    {
        let out = outgoing.request.headers_mut();
        let accept = headers
            .get(header::ACCEPT)
            .cloned()
            .unwrap_or_else(|| HeaderValue::from_static("application/json, text/event-stream"));
        out.insert(header::ACCEPT, accept);
        if let Some(value) = headers.get(a2a_wire::VERSION_HEADER) {
            out.insert(a2a_wire::VERSION_HEADER, value.clone());
        }
        for (key, value) in agent.headers.0.iter() {
            out.insert(key.clone(), value.clone());
        }
    }
    let (meter, keeper) =
        crate::a2a_task::follow(gov, caller, name, version, is_send, admission.op_id());
    let id = request.id.clone();
    let stream = matches!(
        request.kind,
        Kind::Send { stream: true, .. } | Kind::OnTask { stream: true, .. }
    );
    let detached = DetachedCall {
        admission,
        request: outgoing,
        stream,
        meter: Box::new(meter),
        stream_refusal: Box::new(move |refusal| {
            Bytes::from(a2a_wire::sse_event(&a2a_wire::refusal_response(
                &id, refusal,
            )))
        }),
        companions: None,
        keeper,
        cut_at_halt: true,
    };
    gov.model_exchange(caller, detached).await
}

/// `GET /a2a/{name}/.well-known/agent-card.json`: the remote's card, read through the gateway
/// with its URLs rewritten to this gateway's `/a2a/<name>` (the `Host` the agent called). It
/// needs a valid token and nothing more: reading a card asks the remote to do nothing, and a
/// stopped agent's client must reach the send it is refused, so the agent sees the refusal
/// rather than a card that cannot be read.
pub async fn card(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    match card_of(&state.gov, &name, &headers).await {
        Ok(card) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            card.to_string(),
        )
            .into_response(),
        Err(error) => error.into_response(),
    }
}

async fn card_of(gov: &Governor, name: &str, headers: &HeaderMap) -> Result<Value, GatewayError> {
    let caller = gov.authenticate(bearer(headers))?;
    let Some(agent) = gov.config().a2a.get(name).cloned() else {
        gov.note_refused_egress(&caller, &format!("unknown A2A agent {name}"));
        return Err(gov
            .refused(Refusal::new(
                RefusalCode::EgressRefused,
                format!("no A2A agent {name:?} is configured"),
            ))
            .into());
    };
    let mut outgoing = Outgoing::new(
        Method::GET,
        &agent.card_url,
        Duration::from_secs(10),
        Bytes::new(),
    )?;
    for (key, value) in agent.headers.0.iter() {
        outgoing
            .request
            .headers_mut()
            .insert(key.clone(), value.clone());
    }
    let (status, _, body) = outgoing
        .send_whole(gov.upstream_client())
        .await
        .map_err(|why| {
            GatewayError::Upstream(format!(
                "the card of A2A agent {name} could not be read: {why}"
            ))
        })?;
    let mut card: Value = match serde_json::from_slice(&body) {
        Ok(card) if status.is_success() => card,
        _ => {
            return Err(GatewayError::Upstream(format!(
                "A2A agent {name} answered its card with HTTP {status} and no card"
            )))
        }
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .map(String::from)
        .unwrap_or_else(|| gov.config().base.listen.clone());
    a2a_wire::rewrite_card(&mut card, &format!("http://{host}/a2a/{name}"));
    Ok(card)
}
