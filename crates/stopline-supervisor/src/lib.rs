//! The supervisor: runs agent processes so that a stop reaches every process they run, and
//! observes them stop.
//!
//! An agent is started inside its own cgroup v2 group, joined before its first instruction
//! ([`spawn()`]), optionally as another user (one uid per live agent, [`uid`]) and inside a
//! network namespace whose only way out is the gateway ([`netns`]), in a session of its own with
//! no controlling terminal, no new privileges, ceilings and private mounts ([`confine`],
//! [`limits`]). A [`Worker`] ties that group to a run and enforces a stop level on it:
//! `halt-noncritical` freezes the group (confirmed by `frozen 1`), `halt-all` and `emergency`
//! kill it (confirmed only by a fresh observation of `populated 0`). Without cgroup v2 the
//! [`reaper`] fallback walks and kills every descendant by pidfd and says it is the weaker
//! method.
//!
//! This crate never reads or writes the control directory and never decides a stop level: the
//! caller hands [`Worker::enforce`] the level it read from the store. It never kills a process
//! it cannot attribute to a group or a reaper it created.
#![allow(clippy::disallowed_methods)] // the supervisor owns the agents' processes and their cgroup control files
#![deny(missing_docs)]
// `pre_exec` hooks, `setns`, ioctls and the passwd lookups need `unsafe`; every block carries a
// `// SAFETY:` comment saying why it holds.
#![allow(unsafe_code)]

pub mod cgroup;
mod cgroup_error;
pub mod confine;
pub mod events;
mod failpoint;
mod forward;
pub mod frozen;
pub mod hierarchy;
pub mod kill_probe;
pub mod limits;
pub mod netns;
pub mod operator;
pub mod proc;
pub mod reaper;
pub mod spawn;
pub mod status;
pub mod uid;
pub mod user;
pub mod worker;

pub use cgroup::{CgroupError, Group, GroupObservation, KillIssued, KillReport, Method};
pub use confine::{
    ignore_job_control_signals, ConfineError, Confinement, PrivateMounts, ProcessLimits,
};
pub use hierarchy::{supervised_cgroup_of, Hierarchy};
pub use kill_probe::{kill_samples, BenchError, KillSamples};
pub use limits::{AppliedLimits, LimitMethod, Limits};
pub use netns::{GatewayNamespace, NetnsError};
pub use reaper::{Reaper, ReaperError};
pub use spawn::{command, spawn, CommandSpec, SpawnError, SpawnOptions, Spawned, StdioMode};
pub use status::{Enforcement, EnforcementAction, StopPhase, WorkerState, WorkerStatus};
pub use uid::{UidError, UidLease, UidRange};
pub use user::{UserError, UserIdentity};
pub use worker::{Containment, Worker, WorkerError, WorkerSpec};
