//! What a supervised run writes while it runs: the worker's registration
//! (`runs/<run>/workers/<agent>.json`, rewritten on every change of state) and the two phases of
//! stop evidence in the evidence log (kill issued, unconfirmed; then quiescence observed).
//!
//! Every write goes through the store. A write that fails is logged and kept as a warning; it
//! never delays or prevents a kill, and a registration is never written claiming a state the
//! worker did not report from a fresh observation.

use serde_json::{json, Map, Value};
use stopline_store::Store;
use stopline_supervisor::{StopPhase, WorkerState, WorkerStatus};

/// Why a worker is being stopped, as recorded in evidence and registration.
#[derive(Debug, Clone, PartialEq)]
pub enum StopCause {
    /// Latches cover the run at a killing level.
    Latch {
        /// The covering latches' ids.
        latches: Vec<String>,
        /// The highest covering level.
        level: String,
        /// The latch the stop names (the highest level covering the run, the latest of
        /// those; docs/reference.md §4), for the run's stop message.
        named: Option<stopline_core::latch::LatchRef>,
    },
    /// The control state could not be trusted (faults in the view): a stop order.
    ControlState {
        /// The first fault's code.
        code: stopline_core::RefusalCode,
        /// Its message.
        message: String,
    },
    /// A whole read of the control state did not finish within `read_timeout_ms` (docs/reference.md §5):
    /// a stop order that freezes (the order read before it, or a later one, kills at
    /// emergency).
    ReadFault {
        /// What did not finish, and within what.
        message: String,
    },
    /// The supervisor's own check panicked: a stop order.
    CheckPanicked(String),
    /// The wall-clock budget ran out.
    WallClock {
        /// The agent latch the breaker engaged, if it could.
        latch: Option<String>,
        /// The budget in seconds.
        budget_s: f64,
    },
    /// The agent's root process exited and left processes behind in its group.
    AgentExited,
    /// The operator stopped the run: `SIGINT` (Ctrl-C), `SIGTERM` or `SIGHUP` reached the
    /// supervisor.
    Operator {
        /// The signal's name (`SIGINT`, …).
        signal: String,
    },
}

impl StopCause {
    /// The cause as JSON for records.
    pub fn to_json(&self) -> Value {
        match self {
            StopCause::Latch { latches, level, .. } => {
                json!({"kind": "latch", "latches": latches, "level": level})
            }
            StopCause::ControlState { code, message } => {
                json!({"kind": "control_state", "code": code, "message": message})
            }
            StopCause::ReadFault { message } => json!({
                "kind": "control_state",
                "code": stopline_core::RefusalCode::ControlIo,
                "fault": "read_timeout",
                "message": message,
            }),
            StopCause::CheckPanicked(message) => {
                json!({"kind": "check_panicked", "message": message})
            }
            StopCause::WallClock { latch, budget_s } => {
                json!({"kind": "wall_clock", "latch": latch, "budget_s": budget_s})
            }
            StopCause::AgentExited => json!({"kind": "agent_exited_leaving_processes"}),
            StopCause::Operator { signal } => json!({"kind": "operator_signal", "signal": signal}),
        }
    }

    /// The latch ids the cause names.
    pub fn latches(&self) -> Vec<String> {
        match self {
            StopCause::Latch { latches, .. } => latches.clone(),
            StopCause::WallClock { latch, .. } => latch.iter().cloned().collect(),
            _ => Vec::new(),
        }
    }
}

/// The fields of a registration that do not come from the worker's status.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// The canonical project root.
    pub project: String,
    /// `--user`, or null when unconfined.
    pub user: Option<String>,
    /// `gateway-only` or `host`.
    pub net: String,
    /// The supervising `stopline run` process.
    pub supervisor_pid: u32,
    /// The run's entry in `runs.live/` (`None` on a home whose index could not be built).
    pub live_entry: Option<String>,
}

/// Writes registrations and stop evidence for one worker.
pub struct Recorder {
    store: Store,
    facts: RunFacts,
    last: Option<Value>,
    /// Writes that failed (reported at the end of the run).
    pub warnings: Vec<String>,
}

impl Recorder {
    /// A recorder for one worker.
    pub fn new(store: Store, facts: RunFacts) -> Recorder {
        Recorder {
            store,
            facts,
            last: None,
            warnings: Vec::new(),
        }
    }

    /// The registration body for `status` (without `updated_at`).
    fn body(&self, status: &WorkerStatus, cause: Option<&StopCause>) -> Value {
        json!({
            "schema": "worker-registration.v1",
            "run": status.run_id,
            "agent": status.agent,
            "project": self.facts.project,
            "pid": status.pid,
            "cgroup": status.cgroup,
            "method": status.method,
            "unconfined": status.unconfined,
            "user": self.facts.user,
            "net": self.facts.net,
            "supervisor_pid": self.facts.supervisor_pid,
            "live_entry": self.facts.live_entry,
            "state": status.state,
            "limits": status.limits,
            "kill_issued_at": status.kill_issued_at,
            "quiescent_observed_at": status.quiescent_observed_at,
            "exit_code": status.exit_code,
            "stop_cause": cause.map(StopCause::to_json),
        })
    }

    /// Write the registration if anything in it changed since the last write.
    pub fn register(&mut self, status: &WorkerStatus, cause: Option<&StopCause>) {
        let body = self.body(status, cause);
        if self.last.as_ref() == Some(&body) {
            return;
        }
        let mut record = body.clone();
        record["updated_at"] = stopline_store::env::rfc3339(self.store.now_ms()).into();
        match self
            .store
            .register_worker(&status.run_id, &status.agent, &record)
        {
            Ok(()) => self.last = Some(body),
            Err(error) => self.warn(format!("worker registration not written: {error}")),
        }
    }

    /// Record one phase of stop evidence, and the registration that goes with it (for phase
    /// one, `killing` with `kill_issued_at`, before quiescence is awaited).
    pub fn phase(&mut self, status: &WorkerStatus, phase: &StopPhase, cause: &StopCause) {
        let mut fields = Map::new();
        fields.insert("schema".into(), "stop-observation.v1".into());
        fields.insert("run".into(), status.run_id.clone().into());
        fields.insert("agent".into(), status.agent.clone().into());
        fields.insert("pid".into(), status.pid.into());
        fields.insert("cgroup".into(), json!(status.cgroup));
        fields.insert("cause".into(), cause.to_json());
        fields.insert("latches".into(), json!(cause.latches()));
        let mut registered = status.clone();
        match phase {
            StopPhase::KillIssued { issued_at, method } => {
                fields.insert("phase".into(), "kill_issued".into());
                fields.insert("confirmed".into(), false.into());
                fields.insert("issued_at".into(), json!(issued_at));
                fields.insert("method".into(), json!(method));
                registered.state = WorkerState::Killing;
                registered.kill_issued_at = Some(*issued_at);
            }
            StopPhase::QuiescentObserved {
                issued_at,
                observed_at,
                method,
            } => {
                fields.insert("phase".into(), "quiescent_observed".into());
                fields.insert("confirmed".into(), true.into());
                fields.insert("issued_at".into(), json!(issued_at));
                fields.insert("observed_at".into(), json!(observed_at));
                let elapsed = (*observed_at - *issued_at).num_microseconds().unwrap_or(0);
                fields.insert("elapsed_ms".into(), json!(elapsed as f64 / 1000.0));
                fields.insert("method".into(), json!(method));
                registered.state = WorkerState::Quiescent;
                registered.kill_issued_at = Some(*issued_at);
                registered.quiescent_observed_at = Some(*observed_at);
            }
        }
        if let Err(error) = self.store.evidence().append("stop_observation", fields) {
            self.warn(format!("stop evidence not appended: {error}"));
        }
        self.register(&registered, Some(cause));
    }

    /// Keep `warning` for the end of the run (and log it).
    pub(crate) fn warn(&mut self, warning: String) {
        tracing::error!("{warning}");
        self.warnings.push(warning);
    }
}
