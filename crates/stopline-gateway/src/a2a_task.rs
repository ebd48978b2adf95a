//! The life of an A2A task the gateway saw a send open (`a2a.rs` has the rules): the meter that
//! reads every answer and stream event for the task it speaks of, the keeper that keeps a send
//! open while its task runs, and the watcher that cancels the task at its remote when a stop
//! ends its chain's remote work, settling its sends with the answer. Nothing here judges a
//! request; it only follows what the remote said.

use crate::a2a_book::{Cancel, Ended, OpenSend, Settle};
use crate::a2a_wire::{self, TaskSeen, Version};
use crate::admit::{Admission, Outcome};
use crate::caller::Caller;
use crate::config::A2aAgent;
use crate::exchange::{Keeper, Meter};
use crate::governor::Governor;
use crate::outgoing::Outgoing;
use crate::response_book::chain_root;
use crate::waiters::{wait_until, Interest};
use axum::body::Bytes;
use axum::http::{HeaderValue, Method};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::call::must_end_remote;
use stopline_core::ops::Operation;
use stopline_core::view::Authority;
use stopline_core::{Name, Subject};

/// Reads every answer and stream event for the task it speaks of: writes a task a send opened
/// in the book (and starts its watcher), and settles the sends parked on a task seen ending.
pub(crate) struct A2aMeter {
    gov: Governor,
    caller: Caller,
    name: String,
    version: Version,
    /// A send's exchange: the tasks it shows are the caller's.
    opens: bool,
    /// The send's operation, until its `task` record is written.
    op: Mutex<Option<String>>,
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
            let root = chain_root(&self.caller);
            let opened = book.opened(&self.name, &seen.id, &root);
            // Every send that speaks of its chain's task records it once (a send that
            // continues a task too: its operation may outlive the one that opened it).
            let mut op = self.op.lock().unwrap_or_else(|e| e.into_inner());
            if op.is_some() && (opened.is_some() || book.owned_by(&self.name, &seen.id, &root)) {
                if let Some(op) = op.take() {
                    record_task(&self.gov, &op, &seen.id, self.version, &self.caller);
                }
            }
            drop(op);
            if let Some(task_ended) = opened {
                if !seen.is_terminal() {
                    watch(
                        self.gov.clone(),
                        Watched::Caller(self.caller.clone()),
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
pub(crate) struct SendKeeper {
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

/// Write the `task` record of send `op`, which `caller` made and which opened `task`, with the
/// caller's whole subject (chain, projects, runs, labels: whom a stop covering the send covers):
/// queued at once (before the answer that names the task is handed on), not waited for. Waiting is not needed for safety:
/// the remote task exists from the send's dispatch, so a crash before the record is durable
/// loses nothing a record could have saved that a crash one instant before the answer came
/// would not also lose — the send's operation, prepared before dispatch, is then found in
/// doubt, and the agent's later use of the task id is refused `task_not_owned` (fail closed).
fn record_task(gov: &Governor, op: &str, task: &str, version: Version, caller: &Caller) {
    let durable = gov.journal().submit_task(
        op,
        task,
        version.header_value().unwrap_or("1.0"),
        caller.subject(),
    );
    let (op, task) = (op.to_string(), task.to_string());
    tokio::spawn(async move {
        if let Err(error) = durable.await {
            tracing::warn!(%error, op, task, "cannot record the remote A2A task a send opened: a restart will not know it");
        }
    });
}

/// A send a restarted gateway found open in a journal, with the task it opened: finished by
/// recording its outcome (or its doubt) in this gateway's journal.
struct Recovered {
    gov: Governor,
    op: String,
}

impl Recovered {
    fn finish(self, result: Result<Ended, String>) {
        let journal = self.gov.journal();
        let durable = match result {
            Ok(Ended::Completed) => journal.submit_outcome(&self.op, "committed"),
            Ok(Ended::Failed) => journal.submit_outcome(&self.op, "failed"),
            Ok(Ended::Canceled) => journal.submit_outcome(&self.op, "cancelled"),
            Err(why) => journal.submit_in_doubt(&self.op, &why),
        };
        let op = self.op;
        tokio::spawn(async move {
            if let Err(error) = durable.await {
                tracing::warn!(%error, op, "cannot record what became of a recovered A2A send");
            }
        });
    }
}

/// Finish a send the book held. Only this module puts sends in the book: the `Admission`s
/// a2a.rs admitted, and the sends [`rebuild`] recovered from the journals.
fn finish_open(send: OpenSend, result: Result<Ended, String>) {
    match send.downcast::<Admission>() {
        Ok(admission) => admission.finish(outcome_of(result)),
        Err(send) => send
            .downcast::<Recovered>()
            .expect("the A2A task book holds only admissions and recovered sends")
            .finish(result),
    }
}

/// Whose remote work a watcher watches.
enum Watched {
    /// The caller whose send opened the task.
    Caller(Caller),
    /// A task rebuilt from the journals: the subject its `task` record names (or, in a record
    /// of an older gateway, the chain its send's `prepared` record names), judged with the
    /// authority current when the gateway started.
    Rebuilt(Subject, Authority),
}

/// While `task` is open, wait for a stop that ends the caller's remote work; then cancel it.
fn watch(
    gov: Governor,
    watched: Watched,
    name: String,
    version: Version,
    task: String,
    task_ended: tokio::sync::oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        let cut = async {
            match &watched {
                Watched::Caller(caller) => gov.subscribe_remote_cuts(caller).cut().await,
                Watched::Rebuilt(subject, authority) => {
                    let registration = gov.wait_on_view_uncalled(Interest::EndRemote);
                    wait_until(&registration, || {
                        must_end_remote(&gov.snapshot().view, subject, *authority, gov.now_ms())
                    })
                    .await
                }
            }
        };
        tokio::select! {
            refusal = cut => {
                tracing::info!(task, agent = %name, code = %refusal.code, "cancelling a remote A2A task at a stop");
                cancel_at_stop(&gov, &name, version, &task).await;
            }
            _ = task_ended => {}
        }
    });
}

/// Rebuild the task book from `ops` (the journals' open operations, read at the gateway's
/// start): each `a2a:<name>` send with a `task` record has its task owned again by the chain
/// its `prepared` record names. A send still unresolved whose writer is gone is parked on its
/// task, and the task is watched and cancelled at a stop covering the subject the `task` record
/// names (its chain, projects, runs and labels: a project's or a run's stop too), as a task
/// seen live is (a live writer's sends are its own to follow). A send's outcome does not say its
/// task ended (the owner may have reconciled it), so a finished send's task is only owned
/// again. How many open tasks are watched.
pub(crate) fn rebuild(gov: &Governor, ops: &BTreeMap<String, Operation>) -> usize {
    let authority = Authority {
        issue_epoch: gov.snapshot().view.epoch.seq,
    };
    let book = gov.a2a_tasks();
    let sends = || {
        ops.values().filter_map(|op| {
            let name = op.target.strip_prefix("a2a:")?;
            let remote = op.task.as_ref()?;
            let root = op.root.as_deref().or(op.agent.as_deref())?;
            Some((op, name, remote, root))
        })
    };
    // First every task's owner, then the sends left open on them.
    let mut fresh = HashMap::new();
    for (_, name, remote, root) in sends() {
        if let Some(task_ended) = book.opened(name, &remote.id, root) {
            fresh.insert((name.to_string(), remote.id.clone()), task_ended);
        }
    }
    let mut open = 0;
    for (op, name, remote, root) in sends() {
        let task = &remote.id;
        if op.outcome.is_some()
            || !book.owned_by(name, task, root)
            || stopline_store::ops::writer_alive(&op.writer)
        {
            continue;
        }
        let recovered = Recovered {
            gov: gov.clone(),
            op: op.op.clone(),
        };
        if let Settle::Now(send, result) = book.settle_or_park(name, task, Box::new(recovered)) {
            finish_open(send, result);
            continue;
        }
        let Some(task_ended) = fresh.remove(&(name.to_string(), task.clone())) else {
            continue; // already watched, for another send on it
        };
        let subject = remote.subject.clone().unwrap_or_else(|| {
            let mut chain: Vec<Name> = Name::parse(root).into_iter().collect();
            if let Some(agent) = op.agent.as_deref().filter(|a| *a != root) {
                chain.extend(Name::parse(agent));
            }
            Subject::proven(chain, Vec::new(), Vec::new())
        });
        tracing::info!(task, agent = %name, op = %op.op, root, "an open remote A2A task rebuilt from the journal");
        watch(
            gov.clone(),
            Watched::Rebuilt(subject, authority),
            name.to_string(),
            Version::from_label(remote.version.as_deref()),
            task.clone(),
            task_ended,
        );
        open += 1;
    }
    open
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

/// The meter of one exchange with A2A agent `name`, and for a send (`opens`) the keeper of its
/// operation: the meter writes the tasks a send opens against `caller`'s chain.
pub(crate) fn follow(
    gov: &Governor,
    caller: &Caller,
    name: &str,
    version: Version,
    opens: bool,
    op: Option<&str>,
) -> (A2aMeter, Option<Box<dyn Keeper>>) {
    let seen = Arc::new(Mutex::new(None));
    let meter = A2aMeter {
        gov: gov.clone(),
        caller: caller.clone(),
        name: name.to_string(),
        version,
        opens,
        op: Mutex::new(op.map(String::from)),
        buffer: Vec::new(),
        seen: seen.clone(),
    };
    let keeper = opens.then(|| {
        Box::new(SendKeeper {
            gov: gov.clone(),
            name: name.to_string(),
            seen,
        }) as Box<dyn Keeper>
    });
    (meter, keeper)
}
