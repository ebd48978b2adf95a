//! A worker: one agent of one run, its containment (a cgroup v2 group, or the subreaper
//! fallback), and the enforcement of a stop level on it.
//!
//! [`Worker::enforce`] is the whole contract with the caller's loop: hand it the level the store
//! says covers this run (or `None`), as often as you like. `None` thaws a frozen group;
//! `halt-noncritical` freezes it, confirmed by `frozen 1`; `halt-all` and `emergency` kill it,
//! confirmed only by a fresh observation of quiescence. A kill is never undone: once issued, every
//! later call keeps killing until quiescence is observed, whatever level it is given, and a
//! worker never restarts its agent. Stop evidence comes in two phases, each reported exactly once
//! through the `on_phase` callback: kill issued (unconfirmed), then quiescence observed.
//!
//! This module must never read the control directory or decide a level itself, and never reports
//! quiescence it did not observe.

use crate::cgroup::{CgroupError, Group, KillIssued, KillReport, Method};
use crate::hierarchy::Hierarchy;
use crate::limits::{AppliedLimits, Limits};
use crate::reaper::{install_subreaper, Reaper, ReaperError};
use crate::spawn::{spawn, CommandSpec, SpawnError, SpawnOptions};
use crate::status::{Enforcement, EnforcementAction, StopPhase, WorkerState, WorkerStatus};
use chrono::{DateTime, Utc};
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::Duration;
use stopline_core::Level;

/// Errors of a worker.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// A cgroup operation failed.
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The subreaper fallback failed.
    #[error(transparent)]
    Reaper(#[from] ReaperError),
    /// The agent could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// A group of this name exists and still holds live processes.
    #[error("group {0} already exists and is populated")]
    GroupBusy(PathBuf),
    /// Waiting on the agent's root process failed.
    #[error("waiting on the agent: {0}")]
    Wait(std::io::Error),
}

/// How the worker's processes are to be contained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Containment {
    /// cgroup v2 when a cgroup2 mount exists, the subreaper fallback otherwise.
    #[default]
    Auto,
    /// cgroup v2 or nothing.
    Cgroup2,
    /// The subreaper fallback, even where cgroup v2 exists (for tests and odd hosts).
    Subreaper,
}

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The run id (`[a-z0-9][a-z0-9._-]{0,63}`).
    pub run_id: String,
    /// The agent name (`[a-z0-9][a-z0-9._-]{0,63}`).
    pub agent: String,
    /// What to run.
    pub command: CommandSpec,
    /// How to contain it.
    pub containment: Containment,
    /// Whether the agent runs as the caller's own uid (recorded in status).
    pub unconfined: bool,
    /// How long one `enforce` call waits for a kill to be confirmed before returning pending.
    pub kill_timeout: Duration,
    /// How long one `enforce` call waits for a freeze or thaw to be confirmed.
    pub freeze_timeout: Duration,
    /// Process and memory ceilings (default: 4096 processes).
    pub limits: Limits,
}

impl WorkerSpec {
    /// A spec with automatic containment and timeouts of 2 s (kill) and 1 s (freeze).
    pub fn new(run_id: &str, agent: &str, command: CommandSpec) -> WorkerSpec {
        WorkerSpec {
            run_id: run_id.to_owned(),
            agent: agent.to_owned(),
            command,
            containment: Containment::Auto,
            unconfined: false,
            kill_timeout: Duration::from_secs(2),
            freeze_timeout: Duration::from_secs(1),
            limits: Limits::default(),
        }
    }

    /// The group name a run's agent gets under `stopline/`.
    pub fn group_name(&self) -> String {
        format!("run-{}.{}", self.run_id, self.agent)
    }
}

enum Contained {
    Group(Group),
    Reaper(Reaper),
}

/// One supervised agent.
pub struct Worker {
    run_id: String,
    agent: String,
    child: Child,
    pid: u32,
    contained: Contained,
    unconfined: bool,
    state: WorkerState,
    kill: Option<KillIssued>,
    quiescent_at: Option<DateTime<Utc>>,
    exit: Option<ExitStatus>,
    kill_timeout: Duration,
    freeze_timeout: Duration,
    limits: AppliedLimits,
}

impl Worker {
    /// Start the agent contained as `spec` says, inside `netns` when given.
    pub fn start(
        mut spec: WorkerSpec,
        netns: Option<BorrowedFd<'_>>,
    ) -> Result<Worker, WorkerError> {
        let use_cgroup = match spec.containment {
            Containment::Subreaper => None,
            Containment::Cgroup2 => Some(Hierarchy::discover()?),
            Containment::Auto => match Hierarchy::discover() {
                Ok(hierarchy) => Some(hierarchy),
                Err(CgroupError::NoCgroup2) => {
                    tracing::warn!("no cgroup2 mount; falling back to the weaker subreaper");
                    None
                }
                Err(other) => return Err(other.into()),
            },
        };
        let (spawned, contained, limits) = match use_cgroup {
            Some(hierarchy) => {
                let group = fresh_group(&hierarchy, &spec.group_name())?;
                let limits = match crate::limits::apply(
                    &spec.limits,
                    Some(&hierarchy),
                    Some(&group),
                    &mut spec.command.confinement.limits,
                ) {
                    Ok(limits) => limits,
                    Err(error) => {
                        let _ = group.remove();
                        return Err(error.into());
                    }
                };
                let options = SpawnOptions {
                    group: Some(&group),
                    netns,
                    child_subreaper: false,
                };
                match spawn(&spec.command, &options) {
                    Ok(spawned) => (spawned, Contained::Group(group), limits),
                    Err(error) => {
                        let _ = group.remove();
                        return Err(error.into());
                    }
                }
            }
            None => {
                let limits = crate::limits::apply(
                    &spec.limits,
                    None,
                    None,
                    &mut spec.command.confinement.limits,
                )?;
                install_subreaper()?;
                let options = SpawnOptions {
                    group: None,
                    netns,
                    child_subreaper: true,
                };
                let spawned = spawn(&spec.command, &options)?;
                let reaper = Reaper::attach(spawned.pid)?;
                (spawned, Contained::Reaper(reaper), limits)
            }
        };
        Ok(Worker {
            run_id: spec.run_id,
            agent: spec.agent,
            pid: spawned.pid,
            child: spawned.child,
            contained,
            unconfined: spec.unconfined,
            state: WorkerState::Running,
            kill: None,
            quiescent_at: None,
            exit: None,
            kill_timeout: spec.kill_timeout,
            freeze_timeout: spec.freeze_timeout,
            limits,
        })
    }

    /// The agent's root pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The containment method.
    pub fn method(&self) -> Method {
        match self.contained {
            Contained::Group(_) => Method::Cgroup2,
            Contained::Reaper(_) => Method::Subreaper,
        }
    }

    /// The group, for the cgroup2 method.
    pub fn group(&self) -> Option<&Group> {
        match &self.contained {
            Contained::Group(group) => Some(group),
            Contained::Reaper(_) => None,
        }
    }

    /// The root process's handle (its pipes, if any were asked for).
    pub fn child_mut(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Enforce `level`; see [`Worker::enforce_with`].
    pub fn enforce(&mut self, level: Option<Level>) -> Result<Enforcement, WorkerError> {
        self.enforce_with(level, &mut |_| {})
    }

    /// Enforce `level` and report each phase of stop evidence once through `on_phase`.
    /// Idempotent: call it from a loop (on every latch change and every sweep).
    pub fn enforce_with(
        &mut self,
        level: Option<Level>,
        on_phase: &mut dyn FnMut(&StopPhase),
    ) -> Result<Enforcement, WorkerError> {
        let killing = self.kill.is_some() || level.is_some_and(|l| l >= Level::HaltAll);
        let (action, kill) = if killing {
            let report = self.kill_step(on_phase)?;
            let action = if report.confirmed() {
                EnforcementAction::Quiescent
            } else {
                EnforcementAction::KillPending
            };
            (action, Some(report))
        } else if level == Some(Level::HaltNoncritical) {
            (self.freeze_step()?, None)
        } else {
            (self.thaw_step()?, None)
        };
        self.reap_root()?;
        Ok(Enforcement {
            level,
            action,
            kill,
            status: self.status(),
        })
    }

    /// The worker's status as of its last observation.
    pub fn status(&self) -> WorkerStatus {
        WorkerStatus {
            run_id: self.run_id.clone(),
            agent: self.agent.clone(),
            pid: self.pid,
            cgroup: self.group().map(|group| group.path().to_owned()),
            method: self.method(),
            unconfined: self.unconfined,
            state: self.state,
            kill_issued_at: self.kill.as_ref().map(|kill| kill.issued_at),
            quiescent_observed_at: self.quiescent_at,
            exit_code: self.exit.and_then(|status| status.code()),
            limits: self.limits,
        }
    }

    /// True when a fresh observation finds a live process of this worker.
    pub fn is_alive(&mut self) -> Result<bool, WorkerError> {
        match &mut self.contained {
            Contained::Group(group) => Ok(group.events()?.populated),
            Contained::Reaper(reaper) => Ok(!reaper.is_quiescent()?),
        }
    }

    /// The root's exit status, if it has exited (reaping it). Other processes may live on.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>, WorkerError> {
        self.reap_root()?;
        Ok(self.exit)
    }

    /// Remove the worker's group once nothing in it is alive. Refused while populated.
    pub fn release(mut self) -> Result<(), WorkerError> {
        if self.is_alive()? {
            return Err(match &self.contained {
                Contained::Group(group) => CgroupError::Populated(group.path().to_owned()).into(),
                Contained::Reaper(_) => WorkerError::GroupBusy(PathBuf::from("/proc")),
            });
        }
        self.reap_root()?;
        match &self.contained {
            Contained::Group(group) => Ok(group.remove()?),
            Contained::Reaper(_) => Ok(()),
        }
    }

    fn kill_step(
        &mut self,
        on_phase: &mut dyn FnMut(&StopPhase),
    ) -> Result<KillReport, WorkerError> {
        let issued = match &self.kill {
            Some(issued) => issued.clone(),
            None => {
                let issued = match &mut self.contained {
                    Contained::Group(group) => group.issue_kill()?,
                    Contained::Reaper(reaper) => reaper.issue_kill()?,
                };
                self.kill = Some(issued.clone());
                self.state = WorkerState::Killing;
                on_phase(&StopPhase::KillIssued {
                    issued_at: issued.issued_at,
                    method: issued.method,
                });
                issued
            }
        };
        let report = match &mut self.contained {
            Contained::Group(group) => group.await_quiescent(&issued, self.kill_timeout)?,
            Contained::Reaper(reaper) => reaper.await_quiescent(&issued, self.kill_timeout)?,
        };
        match report.confirmed_at {
            Some(observed_at) => {
                self.state = WorkerState::Quiescent;
                if self.quiescent_at.is_none() {
                    self.quiescent_at = Some(observed_at);
                    on_phase(&StopPhase::QuiescentObserved {
                        issued_at: issued.issued_at,
                        observed_at,
                        method: issued.method,
                    });
                }
            }
            None => self.state = WorkerState::Killing,
        }
        Ok(report)
    }

    fn freeze_step(&mut self) -> Result<EnforcementAction, WorkerError> {
        if !self.is_alive()? {
            self.state = WorkerState::Exited;
            return Ok(EnforcementAction::None);
        }
        let result = match &mut self.contained {
            Contained::Group(group) => group.freeze(self.freeze_timeout).map_err(WorkerError::from),
            Contained::Reaper(reaper) => reaper
                .stop_all(self.freeze_timeout)
                .map_err(WorkerError::from),
        };
        match result {
            Ok(_) => {
                self.state = WorkerState::Frozen;
                Ok(EnforcementAction::Frozen)
            }
            Err(WorkerError::Cgroup(CgroupError::NotConfirmed { .. }))
            | Err(WorkerError::Reaper(ReaperError::NotConfirmed { .. })) => {
                self.state = WorkerState::Freezing;
                Ok(EnforcementAction::FreezePending)
            }
            Err(other) => Err(other),
        }
    }

    fn thaw_step(&mut self) -> Result<EnforcementAction, WorkerError> {
        // An engage freezes covered groups itself (docs/reference.md §6), so a group may be frozen
        // without this worker having frozen it: the kernel's `frozen` is asked too.
        let frozen_by_other = match &self.contained {
            Contained::Group(group) => group.events()?.frozen,
            Contained::Reaper(_) => false,
        };
        let was_held =
            frozen_by_other || matches!(self.state, WorkerState::Frozen | WorkerState::Freezing);
        if was_held {
            match &mut self.contained {
                Contained::Group(group) => {
                    group.thaw(self.freeze_timeout)?;
                }
                Contained::Reaper(reaper) => {
                    reaper.continue_all(self.freeze_timeout)?;
                }
            }
        }
        self.state = if self.is_alive()? {
            WorkerState::Running
        } else {
            WorkerState::Exited
        };
        Ok(if was_held {
            EnforcementAction::Thawed
        } else {
            EnforcementAction::None
        })
    }

    /// Collect the root's exit status if it has ended. For the subreaper, a census runs first:
    /// once the root is reaped its pid leaves `/proc`, and the census must have seen its
    /// children before that.
    fn reap_root(&mut self) -> Result<(), WorkerError> {
        if self.exit.is_some() {
            return Ok(());
        }
        if let Contained::Reaper(reaper) = &mut self.contained {
            reaper.census()?;
        }
        self.exit = self.child.try_wait().map_err(WorkerError::Wait)?;
        Ok(())
    }
}

/// A new group of this name; a leftover empty one (from a crash) is removed first, a populated
/// one is refused.
fn fresh_group(hierarchy: &Hierarchy, name: &str) -> Result<Group, WorkerError> {
    match Group::create(hierarchy, name) {
        Ok(group) => Ok(group),
        Err(CgroupError::Exists(path)) => {
            let existing = Group::open(hierarchy, name)?;
            if existing.events()?.populated {
                return Err(WorkerError::GroupBusy(path));
            }
            existing.remove()?;
            Ok(Group::create(hierarchy, name)?)
        }
        Err(other) => Err(other.into()),
    }
}
