//! The worker registration (docs/reference.md §9, `runs/<run>/workers/<agent>.json`): what a
//! supervisor says about the agent it runs, rewritten on every change of state, and what an
//! engage's own reach, `status`, the live-run census and the owner console read back.
//!
//! One type for every writer and reader, so a field is named once: before it, the registration
//! was built with `json!` in two crates and read by string key, and a mistyped key in engage's
//! direct kill silently skipped a group. Two shapes share the type:
//!
//! - **Written by the supervisor** ([`WorkerRegistration::observed`] is `Some`): every field,
//!   `null` where the supervisor has nothing to say (no group, no kill yet, no exit code).
//! - **Stood for by an entry of `runs.live/`** while no registration names it (`observed` is
//!   `None`, `indexed_only: true`): a worker `starting`, with the entry's project and group.
//!   It exists only in memory and in `status`; it is never written to `runs/`.
//!
//! Keys come out sorted because every writer goes through `serde_json::Value` (the store's
//! `replace_json`, a receipt's `to_json`); the golden files in `tests/golden/` hold each shape
//! as the product wrote it before this type and prove the bytes unchanged. A registration older
//! than a field reads with that field absent (and shows it `null`); a state this build does not
//! know reads as [`WorkerState::Unknown`], which is never finished (fail closed: it is still
//! reached and still counted as not quiescent).
//! A field that does not parse as its type reads as absent, so one malformed field never makes
//! a registration unreadable and its group unreached by engage's direct kill.

use crate::refusal::RefusalCode;
use crate::subject::Subject;
use crate::Name;
use serde::{Deserialize, Serialize, Serializer};
use std::path::PathBuf;

/// The registration's schema name.
pub const SCHEMA: &str = "worker-registration.v1";

/// A registered worker's state, as of its supervisor's last observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    /// An entry of `runs.live/` with no registration naming it yet: the worker may be starting.
    Starting,
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
    /// A state this build does not know (a newer writer's): never finished.
    #[serde(other)]
    Unknown,
}

impl WorkerState {
    /// True when nothing of the worker is running (`quiescent` or `exited`): the only states
    /// that let an entry leave `runs.live/` and a covered worker count as stopped.
    pub fn finished(self) -> bool {
        matches!(self, WorkerState::Quiescent | WorkerState::Exited)
    }

    /// The state named `name` ([`WorkerState::Unknown`] for a name this build does not know).
    pub fn named(name: &str) -> WorkerState {
        WorkerState::ALL
            .into_iter()
            .find(|state| state.as_str() == name)
            .unwrap_or(WorkerState::Unknown)
    }

    /// Every state a registration names.
    pub const ALL: [WorkerState; 7] = [
        WorkerState::Starting,
        WorkerState::Running,
        WorkerState::Freezing,
        WorkerState::Frozen,
        WorkerState::Killing,
        WorkerState::Quiescent,
        WorkerState::Exited,
    ];

    /// The name as written.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Running => "running",
            WorkerState::Freezing => "freezing",
            WorkerState::Frozen => "frozen",
            WorkerState::Killing => "killing",
            WorkerState::Quiescent => "quiescent",
            WorkerState::Exited => "exited",
            WorkerState::Unknown => "unknown",
        }
    }
}

/// One worker's registration.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRegistration {
    /// The schema name ([`SCHEMA`]).
    pub schema: String,
    /// The run.
    pub run: String,
    /// The agent.
    pub agent: String,
    /// The canonical project root.
    pub project: Option<String>,
    /// The worker's group (cgroup2 containment); `None` under the subreaper.
    pub cgroup: Option<PathBuf>,
    /// The supervising `stopline run` process.
    pub supervisor_pid: Option<u32>,
    /// The state.
    pub state: WorkerState,
    /// The entry of `runs.live/` this worker instance was started under (`None` on a home
    /// whose index could not be built, and in registrations older than the index).
    pub live_entry: Option<String>,
    /// What the supervisor observed: `None` for the stand-in of an entry of `runs.live/`.
    pub observed: Option<Observed>,
}

/// The fields only a supervisor writes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Observed {
    /// The agent's root process.
    #[serde(default, deserialize_with = "lenient")]
    pub pid: Option<u32>,
    /// `cgroup2`, or the weaker `subreaper`.
    #[serde(default, deserialize_with = "lenient")]
    pub method: Option<String>,
    /// The agent runs as the caller's own uid (`--unconfined`).
    #[serde(default, deserialize_with = "lenient")]
    pub unconfined: Option<bool>,
    /// `--user`, `None` when unconfined.
    #[serde(default, deserialize_with = "lenient")]
    pub user: Option<String>,
    /// `gateway-only` or `host`.
    #[serde(default, deserialize_with = "lenient")]
    pub net: Option<String>,
    /// The process and memory ceilings and how each was applied.
    #[serde(default, deserialize_with = "lenient")]
    pub limits: Option<RegisteredLimits>,
    /// Phase one of a stop: when the kill was issued (RFC 3339).
    #[serde(default, deserialize_with = "lenient")]
    pub kill_issued_at: Option<String>,
    /// Phase two: when quiescence was first observed after the kill (RFC 3339).
    #[serde(default, deserialize_with = "lenient")]
    pub quiescent_observed_at: Option<String>,
    /// The root process's exit code, once reaped (`None` if killed by a signal or running).
    #[serde(default, deserialize_with = "lenient")]
    pub exit_code: Option<i32>,
    /// Why the worker is being (or was) stopped.
    #[serde(default, deserialize_with = "lenient")]
    pub stop_cause: Option<StopCauseRecord>,
    /// When the supervisor wrote this registration (RFC 3339).
    #[serde(default, deserialize_with = "lenient")]
    pub updated_at: Option<String>,
    /// The labels signed into the worker's token (its card's `labels`), so an engage of a
    /// `label:` scope reaches its group; absent when it has none.
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub labels: Option<Vec<crate::Label>>,
}

/// A worker's ceilings as registered: each limit and how it was applied (`cgroup` or
/// `rlimit`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RegisteredLimits {
    /// The process ceiling.
    pub pids: Option<u64>,
    /// How it was applied.
    pub pids_method: Option<String>,
    /// The memory ceiling in MiB.
    pub memory_mb: Option<u64>,
    /// How it was applied.
    pub memory_method: Option<String>,
}

/// Why a worker is being stopped, as its registration and the stop evidence record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopCauseRecord {
    /// Latches cover the run at a killing level.
    Latch {
        /// The covering latches' ids.
        latches: Vec<String>,
        /// The highest covering level.
        level: String,
    },
    /// The control state could not be trusted or read: a stop order.
    ControlState {
        /// The refusal code of the fault.
        code: RefusalCode,
        /// `read_timeout` when a whole read did not finish in time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<String>,
        /// The message.
        message: String,
    },
    /// The supervisor's own check panicked: a stop order.
    CheckPanicked {
        /// The panic's message.
        message: String,
    },
    /// The wall-clock budget ran out.
    WallClock {
        /// The agent latch the breaker engaged, if it could.
        latch: Option<String>,
        /// The budget in seconds.
        budget_s: f64,
    },
    /// The agent's root process exited and left processes behind in its group.
    AgentExitedLeavingProcesses,
    /// The operator stopped the run with a signal to the supervisor.
    OperatorSignal {
        /// The signal's name.
        signal: String,
    },
}

impl WorkerRegistration {
    /// A registration as a supervisor writes it, with only the names and the state filled in
    /// (the caller sets the rest).
    pub fn new(run: &str, agent: &str, state: WorkerState) -> WorkerRegistration {
        WorkerRegistration {
            schema: SCHEMA.into(),
            run: run.into(),
            agent: agent.into(),
            project: None,
            cgroup: None,
            supervisor_pid: None,
            state,
            live_entry: None,
            observed: Some(Observed::default()),
        }
    }

    /// The stand-in for an entry of `runs.live/` that no registration names yet: a worker
    /// `starting`, with the project and group the entry expected.
    pub fn starting(
        run: &str,
        agent: &str,
        supervisor_pid: u32,
        live_entry: &str,
        project: Option<String>,
        cgroup: Option<PathBuf>,
    ) -> WorkerRegistration {
        WorkerRegistration {
            schema: SCHEMA.into(),
            run: run.into(),
            agent: agent.into(),
            project,
            cgroup,
            supervisor_pid: Some(supervisor_pid),
            state: WorkerState::Starting,
            live_entry: Some(live_entry.into()),
            observed: None,
        }
    }

    /// True when nothing of the worker is running ([`WorkerState::finished`]).
    pub fn finished(&self) -> bool {
        self.state.finished()
    }

    /// The registered root pid, when a supervisor wrote one.
    pub fn pid(&self) -> Option<u32> {
        self.observed.as_ref().and_then(|o| o.pid)
    }

    /// The subject the worker stands for (its agent, project and run, each only when valid).
    pub fn subject(&self) -> Subject {
        let name = |s: &str| Name::parse(s).ok();
        Subject::proven(
            name(&self.agent).into_iter().collect(),
            self.project.iter().map(PathBuf::from).collect(),
            name(&self.run).into_iter().collect(),
        )
        .with_labels(
            self.observed
                .as_ref()
                .and_then(|o| o.labels.clone())
                .unwrap_or_default(),
        )
    }
}

/// The registration as written: the supervisor's fields always (`null` when empty), the
/// stand-in's `indexed_only` instead of them.
/// Fields in sorted order, so even a direct serialization of the stand-in is sorted.
#[derive(Serialize)]
struct Written<'a> {
    agent: &'a str,
    cgroup: &'a Option<PathBuf>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    indexed_only: bool,
    live_entry: &'a Option<String>,
    project: &'a Option<String>,
    run: &'a str,
    schema: &'a str,
    state: WorkerState,
    supervisor_pid: &'a Option<u32>,
    #[serde(flatten)]
    observed: &'a Option<Observed>,
}

impl Serialize for WorkerRegistration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Written {
            schema: &self.schema,
            run: &self.run,
            agent: &self.agent,
            project: &self.project,
            cgroup: &self.cgroup,
            supervisor_pid: &self.supervisor_pid,
            state: self.state,
            live_entry: &self.live_entry,
            indexed_only: self.observed.is_none(),
            observed: &self.observed,
        }
        .serialize(serializer)
    }
}

/// The registration as read: every field optional, the supervisor's fields
/// present unless the stand-in's `indexed_only` says there are none.
#[derive(Deserialize)]
struct Read {
    #[serde(default, deserialize_with = "lenient")]
    schema: Option<String>,
    // Absent names read as empty, as they always did (no valid name: the worker's subject
    // names none): a registration without them still names its pid and group.
    #[serde(default, deserialize_with = "lenient")]
    run: String,
    #[serde(default, deserialize_with = "lenient")]
    agent: String,
    #[serde(default, deserialize_with = "lenient")]
    project: Option<String>,
    #[serde(default)]
    cgroup: Option<PathBuf>,
    #[serde(default, deserialize_with = "lenient")]
    supervisor_pid: Option<u32>,
    #[serde(default = "unknown", deserialize_with = "lenient_state")]
    state: WorkerState,
    #[serde(default, deserialize_with = "lenient")]
    live_entry: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    indexed_only: bool,
    #[serde(flatten)]
    observed: Observed,
}

fn unknown() -> WorkerState {
    WorkerState::Unknown
}

/// A field that does not parse as its type reads as absent (its default): one malformed field
/// never makes the whole registration unreadable, above all never hides its group from engage's
/// direct kill (fail closed: the group is still reached; only `cgroup` itself must be a path).
fn lenient<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned + Default,
{
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

/// [`lenient`] for the state: one that is not a string reads as [`WorkerState::Unknown`].
fn lenient_state<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<WorkerState, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(WorkerState::deserialize(value).unwrap_or(WorkerState::Unknown))
}

impl<'de> Deserialize<'de> for WorkerRegistration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = Read::deserialize(deserializer)?;
        Ok(WorkerRegistration {
            schema: read.schema.unwrap_or_else(|| SCHEMA.into()),
            run: read.run,
            agent: read.agent,
            project: read.project,
            cgroup: read.cgroup,
            supervisor_pid: read.supervisor_pid,
            state: read.state,
            live_entry: read.live_entry,
            observed: (!read.indexed_only).then_some(read.observed),
        })
    }
}
