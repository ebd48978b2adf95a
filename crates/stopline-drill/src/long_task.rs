//! The drill's long A2A task: one agent keeps a streaming send (`SendStreamingMessage`) open
//! through the gateway from the start of the load, reading its events until the stream ends or
//! the drill does, as an agent that delegated long work to a remote agent would.
//!
//! At a HALT_ALL or EMERGENCY the gateway must cut the stream with the refusal at once and send
//! the remote the cancel of the task (docs/reference.md §8 "A2A"); at HALT_NONCRITICAL it leaves
//! remote work running. What this reports: the task the remote opened, how and when the stream
//! ended, and what became of the cancel, as the remote and the send's operation tell it
//! ([`observe`]). A cancel that the remote did not confirm is a result, not a failure: a
//! remote cancel is not guaranteed, which is why the stop is made at the boundary.

use crate::agents::{a2a_send, classify, Answer, Caller, Shared, Targets};
use crate::client::CallerClient;
use crate::remote_agent::A2aCancel;
use http_body_util::BodyExt;
use hyper::header::HeaderValue;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stopline_core::ops::Operation;
use stopline_gateway::a2a_wire;

/// How the long task's stream ended, as its agent saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how", content = "detail")]
pub enum StreamEnd {
    /// With a refusal event carrying this code: the gateway cut it.
    Refused(String),
    /// Without a refusal: the remote ended it, or the connection closed.
    Ended,
    /// It could not be opened or read (why).
    Error(String),
    /// Still open when the drill ended.
    Open,
}

/// What the long task's agent saw.
#[derive(Debug, Clone)]
pub struct LongTask {
    /// Its send's request id (the JSON-RPC id, as the gateway records it).
    pub request_id: String,
    /// The task the remote opened, once an event named it.
    pub task: Option<String>,
    /// Whether an event named the task before the pull (the task was open at the stop).
    pub open_before_pull: bool,
    /// How the stream ended.
    pub end: StreamEnd,
    /// When it ended, if it did.
    pub ended_at: Option<Instant>,
}

/// Open the long task as `caller` and read it until it ends or `shared.stop`; `None` when the
/// drill has no A2A agent to reach.
pub async fn run_long_task(
    client: CallerClient,
    targets: Arc<Targets>,
    caller: Caller,
    shared: Arc<Shared>,
) -> Option<LongTask> {
    let uri = targets.a2a.as_ref()?;
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed) + 1;
    let mut report = LongTask {
        request_id: id.to_string(),
        task: None,
        open_before_pull: false,
        end: StreamEnd::Open,
        ended_at: None,
    };
    let opened = match (
        uri,
        HeaderValue::from_str(&format!("Bearer {}", caller.token)),
    ) {
        (Ok(uri), Ok(authorization)) => {
            client
                .open(uri, &authorization, &[], a2a_send(id, true).into_bytes())
                .await
        }
        (Err(why), _) => Err(why.clone()),
        (_, Err(e)) => Err(format!("the caller's token is not a header value: {e}")),
    };
    let mut body = match opened {
        Ok((200, body)) => body,
        Ok((status, _)) => return Some(ended(report, StreamEnd::Error(format!("HTTP {status}")))),
        Err(why) => return Some(ended(report, StreamEnd::Error(why))),
    };
    let mut buffer = Vec::new();
    loop {
        let frame = tokio::select! {
            frame = body.frame() => frame,
            _ = drill_over(&shared) => return Some(report),
        };
        let frame = match frame {
            None => return Some(ended(report, StreamEnd::Ended)),
            Some(Err(e)) => return Some(ended(report, StreamEnd::Error(e.to_string()))),
            Some(Ok(frame)) => frame,
        };
        let Some(data) = frame.data_ref() else {
            continue;
        };
        buffer.extend_from_slice(data);
        for event in a2a_wire::take_events(&mut buffer) {
            if event.get("error").is_some() {
                let end = match classify(200, event.to_string().as_bytes()) {
                    Answer::Refused(code) => StreamEnd::Refused(code),
                    _ => StreamEnd::Error(event["error"].to_string()),
                };
                return Some(ended(report, end));
            }
            if report.task.is_none() {
                if let Some(seen) = a2a_wire::task_in_response(&event) {
                    report.open_before_pull = shared.pulled.get().is_none();
                    report.task = Some(seen.id);
                    shared.long_task_open.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

fn ended(mut report: LongTask, end: StreamEnd) -> LongTask {
    report.end = end;
    report.ended_at = Some(Instant::now());
    report
}

/// Resolves once the drill tells its callers to end.
async fn drill_over(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What became of the cancel of the long task at its remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RemoteCancel {
    /// The remote confirmed it: the send's operation is finished `cancelled`.
    Confirmed,
    /// The gateway recorded it as not confirmed: the send's operation is in doubt, "remote
    /// cancel not confirmed", for the owner to reconcile.
    NotConfirmed,
    /// The remote received a cancel of the task, but the send's operation does not say
    /// what came of it (yet).
    Received,
    /// No cancel reached the remote.
    NotSent,
}

/// The long task in the drill's record.
#[derive(Debug, Clone, Serialize)]
pub struct LongTaskObserved {
    /// The task the remote opened (`null`: no event named one).
    pub task: Option<String>,
    /// Whether the task was open before the pull.
    pub open_before_pull: bool,
    /// How its stream ended.
    pub end: StreamEnd,
    /// Pull → the stream's end, when it ended after the pull.
    pub ended_after_pull_ms: Option<f64>,
    /// What became of the cancel.
    pub cancel: RemoteCancel,
}

/// The long task's record: `task` as its agent saw it, the cancels the remote received, and
/// the operations of the registry (its send is found by request id among the drill agents'
/// `a2a:` operations, `agent_prefix…`).
pub fn observe(
    task: &LongTask,
    pulled: Option<Instant>,
    cancels: &[A2aCancel],
    ops: &BTreeMap<String, Operation>,
    agent_prefix: &str,
) -> LongTaskObserved {
    let send = ops.values().find(|op| {
        op.target.starts_with("a2a:")
            && op.request_id.as_deref() == Some(task.request_id.as_str())
            && op
                .agent
                .as_deref()
                .is_some_and(|a| a.starts_with(agent_prefix))
    });
    let received = task
        .task
        .as_ref()
        .is_some_and(|t| cancels.iter().any(|c| &c.task == t));
    let cancel = match send {
        Some(op) if op.outcome.as_deref() == Some("cancelled") => RemoteCancel::Confirmed,
        Some(op)
            if op
                .doubt
                .as_deref()
                .is_some_and(|d| d.starts_with("remote cancel not confirmed")) =>
        {
            RemoteCancel::NotConfirmed
        }
        _ if received => RemoteCancel::Received,
        _ => RemoteCancel::NotSent,
    };
    let ended_after_pull_ms = match (task.ended_at, pulled) {
        (Some(end), Some(pull)) if end >= pull => Some(stopline_bench::stats::round_ms(
            (end - pull).as_secs_f64() * 1000.0,
        )),
        _ => None,
    };
    LongTaskObserved {
        task: task.task.clone(),
        open_before_pull: task.open_before_pull,
        end: task.end.clone(),
        ended_after_pull_ms,
        cancel,
    }
}
