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
//! The book is memory: a gateway that restarts forgets it, so every earlier task is refused
//! `task_not_owned` (fail closed), and a send it left open is found unresolved (its writer is
//! gone) until reconciled. A send that blocks until its task ends (`SendMessage` without
//! `returnImmediately`) shows its task id only in its answer: cut before it, the gateway
//! cannot name the task to cancel, and the operation is in doubt after `cut_outcome_wait_s`
//! unless the answer arrives; streaming sends name their task in their first event.

use crate::a2a_book::{Cancel, Ended, OpenSend, Settle};
use crate::a2a_wire::{self, Kind, TaskSeen, Version};
use crate::admit::{Admission, Outcome, Plan};
use crate::caller::Caller;
use crate::config::A2aAgent;
use crate::error::GatewayError;
use crate::exchange::{Answer, DetachedCall, Keeper, Meter};
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
use std::sync::{Arc, Mutex};
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
    let seen = Arc::new(Mutex::new(None));
    let meter = A2aMeter {
        gov: gov.clone(),
        caller: caller.clone(),
        name: name.to_string(),
        version,
        opens: is_send,
        buffer: Vec::new(),
        seen: seen.clone(),
    };
    let keeper: Option<Box<dyn Keeper>> = is_send.then(|| {
        Box::new(SendKeeper {
            gov: gov.clone(),
            name: name.to_string(),
            seen,
        }) as Box<dyn Keeper>
    });
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

/// Reads every answer and stream event for the task it speaks of: writes a task a send opened
/// in the book (and starts its watcher), and settles the sends parked on a task seen ending.
struct A2aMeter {
    gov: Governor,
    caller: Caller,
    name: String,
    version: Version,
    /// A send's exchange: the tasks it shows are the caller's.
    opens: bool,
    buffer: Vec<u8>,
    /// The last task seen, for the send's keeper.
    seen: Arc<Mutex<Option<TaskSeen>>>,
}

fn ended(seen: &TaskSeen) -> Option<Ended> {
    if !seen.is_terminal() {
        None
    } else if seen.is_canceled() {
        Some(Ended::Canceled)
    } else if seen.state.as_deref() == Some("completed") {
        Some(Ended::Completed)
    } else {
        Some(Ended::Failed)
    }
}

impl A2aMeter {
    fn observe(&self, response: &Value) {
        let Some(seen) = a2a_wire::task_in_response(response) else {
            return;
        };
        if seen.id.len() > stopline_core::refusal::MAX_RECORDED_BYTES {
            return;
        }
        let book = self.gov.a2a_tasks();
        if self.opens {
            if let Some(task_ended) = book.opened(&self.name, &seen.id, &chain_root(&self.caller)) {
                if !seen.is_terminal() {
                    watch(
                        self.gov.clone(),
                        self.caller.clone(),
                        self.name.clone(),
                        self.version,
                        seen.id.clone(),
                        task_ended,
                    );
                }
            }
        }
        if let Some(how) = ended(&seen) {
            for send in book.ended(&self.name, &seen.id, how) {
                finish_open(send, Ok(how));
            }
        }
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
    }
}

impl Meter for A2aMeter {
    fn feed(&mut self, chunk: &[u8]) {
        self.buffer.extend_from_slice(chunk);
        for event in a2a_wire::take_events(&mut self.buffer) {
            self.observe(&event);
        }
        // A stream that never ends a line is not let to grow the buffer without bound.
        if self.buffer.len() > 1 << 20 {
            self.buffer.clear();
        }
    }

    fn whole(&self, body: &[u8]) -> Option<Budgets> {
        if let Ok(response) = serde_json::from_slice::<Value>(body) {
            self.observe(&response);
        }
        // A send counts one tool call whatever its answer (the reservation's bound).
        Some([(BudgetKind::ToolCalls, 1.0)].into())
    }

    fn streamed(&self) -> Option<Budgets> {
        Some([(BudgetKind::ToolCalls, 1.0)].into())
    }
}

/// Finishes a send: at once when its task ended (or it opened none), else parked in the book.
struct SendKeeper {
    gov: Governor,
    name: String,
    seen: Arc<Mutex<Option<TaskSeen>>>,
}

impl Keeper for SendKeeper {
    fn finish(self: Box<Self>, admission: Admission, outcome: Outcome, used: Option<Budgets>) {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(seen) = seen else {
            return admission.finish_with_usage(outcome, used);
        };
        if let Some(how) = ended(&seen) {
            return admission.finish_with_usage(outcome_of(Ok(how)), used);
        }
        match self
            .gov
            .a2a_tasks()
            .settle_or_park(&self.name, &seen.id, Box::new(admission))
        {
            Settle::Parked => {
                tracing::debug!(task = %seen.id, agent = %self.name, "an A2A send stays open while its task runs");
            }
            Settle::Now(send, result) => finish_open(send, result),
        }
    }
}

fn outcome_of(result: Result<Ended, String>) -> Outcome {
    match result {
        Ok(Ended::Completed) => Outcome::Committed,
        Ok(Ended::Failed) => Outcome::Failed,
        Ok(Ended::Canceled) => Outcome::Cancelled,
        Err(why) => Outcome::InDoubt(why),
    }
}

/// Finish a send the book held. Only this module puts sends in the book, each an `Admission`.
fn finish_open(send: OpenSend, result: Result<Ended, String>) {
    let admission = send
        .downcast::<Admission>()
        .expect("the A2A task book holds only the admissions a2a.rs put in it");
    admission.finish(outcome_of(result));
}

/// While `task` is open, wait for a stop that ends the caller's remote work; then cancel it.
fn watch(
    gov: Governor,
    caller: Caller,
    name: String,
    version: Version,
    task: String,
    task_ended: tokio::sync::oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        let mut cuts = gov.subscribe_remote_cuts(&caller);
        tokio::select! {
            refusal = cuts.cut() => {
                tracing::info!(task, agent = %name, code = %refusal.code, "cancelling a remote A2A task at a stop");
                cancel_at_stop(&gov, &name, version, &task).await;
            }
            _ = task_ended => {}
        }
    });
}

/// Send the cancel method for `task` (bounded by `cut_outcome_wait_s`) and settle the sends on
/// it with the answer: `cancelled` when the remote confirms, in doubt ("remote cancel not
/// confirmed") otherwise.
async fn cancel_at_stop(gov: &Governor, name: &str, version: Version, task: &str) {
    let book = gov.a2a_tasks();
    if !book.cancel_sent(name, task) {
        return;
    }
    let wait = gov.config().cut_outcome_wait();
    let answer = match gov.config().a2a.get(name) {
        Some(agent) => send_cancel(gov, agent, version, task, wait).await,
        None => Err(format!("[a2a.{name}] is no longer configured")),
    };
    let cancel = match answer {
        Ok(seen) if seen.as_ref().is_some_and(TaskSeen::is_canceled) => Cancel::Confirmed,
        Ok(seen) => Cancel::NotConfirmed(format!(
            "remote cancel not confirmed: A2A agent {name} answered the cancel of task {task} with state {:?}",
            seen.and_then(|s| s.state)
        )),
        Err(why) => Cancel::NotConfirmed(format!(
            "remote cancel not confirmed: the cancel of task {task} at A2A agent {name}: {why}"
        )),
    };
    tracing::info!(task, agent = %name, ?cancel, "remote A2A cancel answered");
    let result = match &cancel {
        Cancel::Confirmed => Ok(Ended::Canceled),
        Cancel::NotConfirmed(why) => Err(why.clone()),
        Cancel::NotSent | Cancel::Sent => Err("remote cancel not confirmed".into()),
    };
    for send in book.cancel_answered(name, task, cancel) {
        finish_open(send, result.clone());
    }
}

/// The version's cancel method for `task`, sent to `agent`; the task its answer shows.
async fn send_cancel(
    gov: &Governor,
    agent: &A2aAgent,
    version: Version,
    task: &str,
    wait: Duration,
) -> Result<Option<TaskSeen>, String> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": format!("stopline-cancel-{task}"),
        "method": version.cancel_method(),
        "params": {"id": task},
    });
    let mut outgoing = Outgoing::new(
        Method::POST,
        &agent.url,
        wait,
        Bytes::from(body.to_string()),
    )
    .map_err(|e| e.to_string())?;
    {
        let out = outgoing.request.headers_mut();
        if let Some(value) = version.header_value() {
            out.insert(a2a_wire::VERSION_HEADER, HeaderValue::from_static(value));
        }
        for (key, value) in agent.headers.0.iter() {
            out.insert(key.clone(), value.clone());
        }
    }
    let (status, _, body) = outgoing.send_whole(gov.upstream_client()).await?;
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let response: Value =
        serde_json::from_slice(&body).map_err(|e| format!("the answer is not JSON: {e}"))?;
    if let Some(error) = response.get("error") {
        return Err(format!("the remote refused it: {error}"));
    }
    Ok(a2a_wire::task_in_response(&response))
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
