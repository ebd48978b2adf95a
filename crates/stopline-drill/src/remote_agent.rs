//! The drill's remote A2A agent: the part of the destination (`POST /a2a`) that stands for an
//! agent outside the environment, reached through the gateway's `[a2a.<name>]`.
//!
//! It speaks the A2A 1.0 JSON-RPC methods the drill's callers send and the gateway forwards:
//! `SendMessage` (answered at once with a message, so it opens no task), `SendStreamingMessage`
//! (opens a long task whose stream yields an artifact every 50 ms until the task is cancelled
//! or [`LONG_TASK`] has passed), and `CancelTask` (the gateway's cancel at a stop: confirmed
//! for a task still running, as a remote that honours cancels does). Every message it receives
//! is an effect, recorded by its JSON-RPC id before anything else is done, exactly as the MCP
//! and model routes record theirs; every cancel is recorded with the task it names. A task
//! whose client went away keeps running (as a real remote's would) until it is cancelled: it
//! only stops producing.
//!
//! It judges nothing and knows nothing of stops: what reached it after the trip is the drill's
//! to count (`matching.rs`).

use crate::effects::{unix_us, EffectKind, EffectLog};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The longest a long task runs when nobody cancels it.
pub const LONG_TASK: Duration = Duration::from_secs(120);

/// How often a long task yields an artifact.
const ARTIFACT_EVERY: Duration = Duration::from_millis(50);

/// One cancel the remote received.
#[derive(Debug, Clone, serde::Serialize)]
pub struct A2aCancel {
    /// The task it named.
    pub task: String,
    /// Unix microseconds at which the remote received it.
    pub at_unix_us: i64,
    /// Whether the remote confirmed it (the task was still running).
    pub confirmed: bool,
}

/// A long task's state at the remote.
#[derive(Debug)]
enum Task {
    /// Running; the sender ends its stream's producer, if the stream is still read.
    Working(Option<oneshot::Sender<()>>),
    /// Cancelled.
    Canceled,
    /// Ran to its end.
    Completed,
}

/// The remote agent: its tasks and the cancels it received, and the effect log it writes the
/// messages it receives into (the destination's).
#[derive(Debug)]
pub struct RemoteAgent {
    effects: Arc<EffectLog>,
    tasks: Mutex<HashMap<String, Task>>,
    cancels: Mutex<Vec<A2aCancel>>,
    next_task: AtomicU64,
}

impl RemoteAgent {
    /// A remote agent with no task yet, recording into `effects`.
    pub fn new(effects: Arc<EffectLog>) -> RemoteAgent {
        RemoteAgent {
            effects,
            tasks: Mutex::default(),
            cancels: Mutex::default(),
            next_task: AtomicU64::new(0),
        }
    }

    /// Every cancel received so far.
    pub fn cancels(&self) -> Vec<A2aCancel> {
        self.cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, Task>> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cancel `task`: true when it was running (the cancel is confirmed).
    fn cancel(&self, task: &str) -> bool {
        let confirmed = match self.tasks().get_mut(task) {
            Some(state @ Task::Working(_)) => {
                if let Task::Working(Some(stop)) = std::mem::replace(state, Task::Canceled) {
                    let _ = stop.send(());
                }
                true
            }
            _ => false,
        };
        self.cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(A2aCancel {
                task: task.to_string(),
                at_unix_us: unix_us(),
                confirmed,
            });
        confirmed
    }
}

fn answer(id: &Value, result: Value) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

fn error(id: &Value, code: i64, message: &str) -> Response {
    Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
        .into_response()
}

fn task_object(task: &str, state: &str) -> Value {
    json!({"id": task, "contextId": format!("{task}-context"), "status": {"state": state}})
}

/// `POST /a2a`.
pub(crate) async fn rpc(State(remote): State<Arc<RemoteAgent>>, body: Bytes) -> Response {
    let request: Value = match serde_json::from_slice(&body) {
        Ok(value) => value,
        Err(_) => return StatusCode::BAD_REQUEST.into_response(),
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    match request["method"].as_str() {
        Some("SendMessage") => {
            remote
                .effects
                .record(id.to_string(), EffectKind::A2aMessage);
            answer(
                &id,
                json!({"message": {"messageId": format!("drill-answer-{id}"),
                    "role": "ROLE_AGENT", "parts": [{"text": "done"}]}}),
            )
        }
        Some("SendStreamingMessage") => {
            remote
                .effects
                .record(id.to_string(), EffectKind::A2aMessage);
            long_task(remote, id)
        }
        Some("CancelTask") => {
            let task = request["params"]["id"].as_str().unwrap_or_default();
            if remote.cancel(task) {
                answer(&id, task_object(task, "TASK_STATE_CANCELED"))
            } else {
                // A2A's TaskNotCancelableError: the task ended, or was never opened here.
                error(&id, -32002, "the task cannot be canceled")
            }
        }
        _ => error(&id, -32601, "method not found"),
    }
}

/// Open a long task and stream it: the task, then an artifact every [`ARTIFACT_EVERY`] until
/// it is cancelled (a final `TASK_STATE_CANCELED` status) or [`LONG_TASK`] has passed (a final
/// `TASK_STATE_COMPLETED`). A client that stops reading ends only the stream, not the task.
fn long_task(remote: Arc<RemoteAgent>, id: Value) -> Response {
    let n = remote.next_task.fetch_add(1, Ordering::Relaxed) + 1;
    let task = format!("drill-task-{n}");
    let (stop, mut stopped) = oneshot::channel();
    remote
        .tasks()
        .insert(task.clone(), Task::Working(Some(stop)));
    let (events, rx) = mpsc::channel::<Result<Bytes, Infallible>>(8);
    tokio::spawn(async move {
        let event = |result: Value| {
            let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
            Ok(Bytes::from(format!("data: {response}\n\n")))
        };
        let status = |state: &str, last: bool| {
            event(
                json!({"statusUpdate": {"taskId": task, "contextId": format!("{task}-context"),
                "status": {"state": state}, "final": last}}),
            )
        };
        if events
            .send(event(
                json!({"task": task_object(&task, "TASK_STATE_WORKING")}),
            ))
            .await
            .is_err()
        {
            return;
        }
        let deadline = tokio::time::Instant::now() + LONG_TASK;
        let mut part = 0u64;
        loop {
            tokio::select! {
                _ = &mut stopped => {
                    let _ = events.send(status("TASK_STATE_CANCELED", true)).await;
                    return;
                }
                _ = tokio::time::sleep(ARTIFACT_EVERY) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                remote.tasks().insert(task.clone(), Task::Completed);
                let _ = events.send(status("TASK_STATE_COMPLETED", true)).await;
                return;
            }
            part += 1;
            let artifact = event(json!({"artifactUpdate": {"taskId": task,
                "contextId": format!("{task}-context"),
                "artifact": {"artifactId": format!("part-{part}"),
                             "parts": [{"text": format!("part {part}")}]}}}));
            if events.send(artifact).await.is_err() {
                // Nobody reads the stream any more; the task stays running until cancelled.
                return;
            }
        }
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/event-stream")],
        Body::from_stream(body),
    )
        .into_response()
}
