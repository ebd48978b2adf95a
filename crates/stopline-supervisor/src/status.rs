//! What a worker reports: its state and status (the `workers` of the status receipt), the two
//! phases of stop evidence, and the outcome of one enforcement.
//!
//! Plain serde data. Nothing here observes anything; every value is filled in by
//! [`crate::Worker`] from a fresh observation, and must never be constructed to claim a state
//! that was not observed.

use crate::cgroup::{KillReport, Method};
use crate::limits::AppliedLimits;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use stopline_core::Level;

/// The worker's state, as of its last observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// Processes are alive and not held.
    Running,
    /// A freeze was ordered and is not yet confirmed.
    Freezing,
    /// `frozen 1` observed (or, for the subreaper, every process stopped).
    Frozen,
    /// A kill was issued and quiescence is not yet observed.
    Killing,
    /// A kill was issued and quiescence was observed.
    Quiescent,
    /// No kill was issued and nothing is alive: the agent ended by itself.
    Exited,
}

/// What a status receipt says about a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The run.
    pub run_id: String,
    /// The agent.
    pub agent: String,
    /// The agent's root process.
    pub pid: u32,
    /// The group's path, for the cgroup2 method.
    pub cgroup: Option<PathBuf>,
    /// `cgroup2`, or the weaker `subreaper`.
    pub method: Method,
    /// The agent runs as the caller's own uid (`--unconfined`).
    pub unconfined: bool,
    /// The state as of the last observation.
    pub state: WorkerState,
    /// Phase one: when the kill was issued.
    pub kill_issued_at: Option<DateTime<Utc>>,
    /// Phase two: when quiescence was first observed after the kill.
    pub quiescent_observed_at: Option<DateTime<Utc>>,
    /// The root process's exit code, once reaped (`None` if killed by a signal or still running).
    pub exit_code: Option<i32>,
    /// The process and memory ceilings and how each was applied (`cgroup` or `rlimit`).
    pub limits: AppliedLimits,
}

/// One phase of stop evidence, reported once each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum StopPhase {
    /// Phase one: the kill order was issued; nothing is confirmed.
    KillIssued {
        /// When.
        issued_at: DateTime<Utc>,
        /// How.
        method: Method,
    },
    /// Phase two: quiescence was freshly observed.
    QuiescentObserved {
        /// When the kill was issued.
        issued_at: DateTime<Utc>,
        /// When quiescence was observed.
        observed_at: DateTime<Utc>,
        /// How.
        method: Method,
    },
}

/// What one call of [`crate::Worker::enforce`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnforcementAction {
    /// Nothing needed doing.
    None,
    /// A frozen worker was thawed (`frozen 0` observed).
    Thawed,
    /// The worker is frozen (`frozen 1` observed, now or before).
    Frozen,
    /// A freeze was ordered but not yet confirmed; call again.
    FreezePending,
    /// A kill is issued and quiescence is not yet observed; call again.
    KillPending,
    /// The kill is confirmed by an observation of quiescence.
    Quiescent,
}

/// The result of one call of [`crate::Worker::enforce`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The level enforced.
    pub level: Option<Level>,
    /// What was done.
    pub action: EnforcementAction,
    /// The latest kill report, when a kill is in progress or done.
    pub kill: Option<KillReport>,
    /// The worker's status after the call.
    pub status: WorkerStatus,
}
