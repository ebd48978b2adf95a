//! What a supervised run writes while it runs: the worker's registration
//! (`runs/<run>/workers/<agent>.json`, rewritten on every change of state) and the two phases of
//! stop evidence in the evidence log (kill issued, unconfirmed; then quiescence observed).
//!
//! Every write goes through the store. A write that fails is logged and kept as a warning; it
//! never delays or prevents a kill, and a registration is never written claiming a state the
//! worker did not report from a fresh observation.

use serde_json::{json, Map};
use stopline_core::worker::{
    self, Observed, RegisteredLimits, StopCauseRecord, WorkerRegistration,
};
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
    /// The cause as registrations and stop evidence record it.
    pub fn to_record(&self) -> StopCauseRecord {
        match self.clone() {
            StopCause::Latch { latches, level, .. } => StopCauseRecord::Latch { latches, level },
            StopCause::ControlState { code, message } => StopCauseRecord::ControlState {
                code,
                fault: None,
                message,
            },
            StopCause::ReadFault { message } => StopCauseRecord::ControlState {
                code: stopline_core::RefusalCode::ControlIo,
                fault: Some("read_timeout".into()),
                message,
            },
            StopCause::CheckPanicked(message) => StopCauseRecord::CheckPanicked { message },
            StopCause::WallClock { latch, budget_s } => {
                StopCauseRecord::WallClock { latch, budget_s }
            }
            StopCause::AgentExited => StopCauseRecord::AgentExitedLeavingProcesses,
            StopCause::Operator { signal } => StopCauseRecord::OperatorSignal { signal },
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
    /// The labels signed into the worker's token (registered so a `label:` engage reaches it).
    pub labels: Vec<stopline_core::Label>,
}

/// Writes registrations and stop evidence for one worker.
pub struct Recorder {
    store: Store,
    facts: RunFacts,
    last: Option<WorkerRegistration>,
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

    /// The registration for `status` (without `updated_at`).
    fn body(&self, status: &WorkerStatus, cause: Option<&StopCause>) -> WorkerRegistration {
        let limits = &status.limits;
        WorkerRegistration {
            schema: worker::SCHEMA.into(),
            run: status.run_id.clone(),
            agent: status.agent.clone(),
            project: Some(self.facts.project.clone()),
            cgroup: status.cgroup.clone(),
            supervisor_pid: Some(self.facts.supervisor_pid),
            state: registered_state(status.state),
            live_entry: self.facts.live_entry.clone(),
            observed: Some(Observed {
                pid: Some(status.pid),
                method: Some(status.method.as_str().into()),
                unconfined: Some(status.unconfined),
                user: self.facts.user.clone(),
                net: Some(self.facts.net.clone()),
                limits: Some(RegisteredLimits {
                    pids: limits.pids,
                    pids_method: limits.pids_method.map(limit_method),
                    memory_mb: limits.memory_mb,
                    memory_method: limits.memory_method.map(limit_method),
                }),
                kill_issued_at: status.kill_issued_at.map(timestamp),
                quiescent_observed_at: status.quiescent_observed_at.map(timestamp),
                exit_code: status.exit_code,
                stop_cause: cause.map(StopCause::to_record),
                updated_at: None,
                labels: (!self.facts.labels.is_empty()).then(|| self.facts.labels.clone()),
            }),
        }
    }

    /// Write the registration if anything in it changed since the last write.
    pub fn register(&mut self, status: &WorkerStatus, cause: Option<&StopCause>) {
        let body = self.body(status, cause);
        if self.last.as_ref() == Some(&body) {
            return;
        }
        let mut record = body.clone();
        if let Some(observed) = record.observed.as_mut() {
            observed.updated_at = Some(stopline_store::env::rfc3339(self.store.now_ms()));
        }
        match self
            .store
            .runs()
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
        fields.insert("cause".into(), json!(cause.to_record()));
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

/// The supervisor's state as a registration names it.
fn registered_state(state: WorkerState) -> worker::WorkerState {
    match state {
        WorkerState::Running => worker::WorkerState::Running,
        WorkerState::Freezing => worker::WorkerState::Freezing,
        WorkerState::Frozen => worker::WorkerState::Frozen,
        WorkerState::Killing => worker::WorkerState::Killing,
        WorkerState::Quiescent => worker::WorkerState::Quiescent,
        WorkerState::Exited => worker::WorkerState::Exited,
    }
}

/// How a ceiling was applied, as a registration names it.
fn limit_method(method: stopline_supervisor::LimitMethod) -> String {
    match method {
        stopline_supervisor::LimitMethod::Cgroup => "cgroup",
        stopline_supervisor::LimitMethod::Rlimit => "rlimit",
    }
    .into()
}

/// A supervisor's instant as registrations have always written it (chrono's serde form:
/// RFC 3339 in UTC, `Z`, as many fractional digits as the instant needs).
pub(crate) fn timestamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    //! The worker registration as this recorder writes it, in each state, against the golden
    //! files in `crates/stopline-core/tests/golden/` (docs/reference.md §9).

    use super::*;
    use chrono::{TimeZone, Utc};
    use std::path::PathBuf;
    use std::sync::Arc;
    use stopline_supervisor::{AppliedLimits, LimitMethod, Method};

    /// A clock that stands still, so `updated_at` is the golden's.
    struct Still;
    impl stopline_store::env::Env for Still {
        fn now_ms(&self) -> i64 {
            1_796_612_909_638
        }
        fn random_hex(&self, bytes: usize) -> String {
            "ab".repeat(bytes)
        }
        fn pid(&self) -> u32 {
            24_077
        }
    }

    pub(crate) fn golden(name: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../stopline-core/tests/golden")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn status(state: WorkerState) -> WorkerStatus {
        WorkerStatus {
            run_id: "r1".into(),
            agent: "coder".into(),
            pid: 24_080,
            cgroup: Some("/sys/fs/cgroup/stopline/run-r1.coder".into()),
            method: Method::Cgroup2,
            unconfined: false,
            state,
            kill_issued_at: None,
            quiescent_observed_at: None,
            exit_code: None,
            limits: AppliedLimits {
                pids: Some(512),
                pids_method: Some(LimitMethod::Cgroup),
                memory_mb: None,
                memory_method: None,
            },
        }
    }

    fn recorder_for(home: &std::path::Path, user: Option<&str>, live: Option<&str>) -> Recorder {
        let store = Store::with_io(home, Arc::new(stopline_store::fs::RealFs), Arc::new(Still));
        Recorder::new(
            store,
            RunFacts {
                project: "/home/op/project".into(),
                user: user.map(str::to_string),
                net: "gateway-only".into(),
                supervisor_pid: 24_077,
                live_entry: live.map(str::to_string),
                labels: Vec::new(),
            },
        )
    }

    fn written(home: &std::path::Path) -> String {
        std::fs::read_to_string(home.join("runs/r1/workers/coder.json")).unwrap()
    }

    /// Running, then killing (phase one), then quiescent (phase two): each registration is the
    /// golden's bytes; and a worker that ended by itself, unconfined and without an index.
    #[test]
    fn registrations_are_written_as_the_goldens() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let live = "r1@coder@24077@abababababababab.json";
        let mut recorder = recorder_for(&home, Some("agent-coder"), Some(live));
        recorder.register(&status(WorkerState::Running), None);
        assert_eq!(written(&home), golden("worker-registration-running.json"));
        let cause = StopCause::Latch {
            latches: vec!["latch_6cb99b14af3c4d6b".into()],
            level: "emergency".into(),
            named: None,
        };
        let issued_at = Utc.timestamp_millis_opt(1_796_612_909_700).unwrap();
        let observed_at = Utc.timestamp_millis_opt(1_796_612_909_712).unwrap();
        recorder.phase(
            &status(WorkerState::Running),
            &StopPhase::KillIssued {
                issued_at,
                method: Method::Cgroup2,
            },
            &cause,
        );
        assert_eq!(written(&home), golden("worker-registration-killing.json"));
        recorder.phase(
            &status(WorkerState::Killing),
            &StopPhase::QuiescentObserved {
                issued_at,
                observed_at,
                method: Method::Cgroup2,
            },
            &cause,
        );
        assert_eq!(written(&home), golden("worker-registration-quiescent.json"));
        assert!(recorder.warnings.is_empty(), "{:?}", recorder.warnings);

        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let mut recorder = recorder_for(&home, None, None);
        let mut exited = status(WorkerState::Exited);
        exited.cgroup = None;
        exited.method = Method::Subreaper;
        exited.unconfined = true;
        exited.exit_code = Some(0);
        exited.limits.pids_method = Some(LimitMethod::Rlimit);
        recorder.register(&exited, Some(&StopCause::AgentExited));
        assert_eq!(written(&home), golden("worker-registration-exited.json"));
    }
}
