//! The census of `runs.live/` (the store's live-run index, `stopline_store::runs::live`): who
//! removes the entry of a worker whose supervisor cannot.
//!
//! A supervisor removes its own entry when its run ends ([`stopline_store::runs::Runs::end_run`]).
//! When it crashed, its entry stays — and must, while anything of its run may be live: a stop
//! has to reach the agent it left behind. This census (run by `status` and by every
//! `stopline run` before it starts) removes an entry only when
//!
//! - the store's rule holds (the registration naming the entry says `quiescent` or `exited`), or
//! - its supervisor is gone (the pid named by the entry runs no process, or another one with a
//!   different start time), **and** no group it could have started is populated (the entry's
//!   cgroup, its registration's, the run's and agent's group name), **and** the registered root
//!   pid of a subreaper-contained worker is gone.
//!
//! Anything it cannot read keeps the entry. Its cost is the index's, never the history's.

use crate::context::Context;
use serde_json::Value;
use std::path::{Path, PathBuf};
use stopline_core::worker::WorkerRegistration;
use stopline_store::runs::live::{finished, LiveRun};
use stopline_supervisor::proc::read_stat;
use stopline_supervisor::{Group, Hierarchy};

/// Remove the entries of `runs.live/` that nothing live stands behind. Returns warnings (what
/// could not be looked at or removed); never fails.
pub fn retire(ctx: &Context) -> Vec<String> {
    let store = &ctx.store;
    let mut warnings: Vec<String> = store
        .runs()
        .retire_finished_live_runs()
        .errors
        .into_iter()
        .map(|e| format!("live_run_census: {e}"))
        .collect();
    let names = match store.runs().live_runs() {
        Ok(Some(names)) => names,
        Ok(None) => return warnings,
        Err(error) => {
            warnings.push(format!("live_run_census: {error}"));
            return warnings;
        }
    };
    let hierarchy = Hierarchy::discover().ok();
    for name in names {
        let Some(live) = LiveRun::parse(&name) else {
            continue;
        };
        // A body that cannot be read names no start time: the pid alone decides.
        let body = store.runs().live_run_body(&name).ok();
        let start = body
            .as_ref()
            .and_then(|b| b.get("supervisor_start"))
            .and_then(Value::as_u64);
        if supervisor_may_run(live.supervisor_pid, start) {
            continue;
        }
        let registration = match store.runs().worker_registration(&live.run, &live.agent) {
            Ok(registration) => registration.filter(|r| live.owns(r)),
            Err(error) => {
                warnings.push(format!("live_run_census: {name}: {error}"));
                continue;
            }
        };
        if registration.as_ref().is_some_and(finished) {
            continue; // the store's rule: retire_finished_live_runs had it, or will
        }
        if anything_live(
            &live,
            body.as_ref(),
            registration.as_ref(),
            hierarchy.as_ref(),
        ) {
            continue;
        }
        if let Err(error) = store.runs().remove_live_run(&name) {
            warnings.push(format!("live_run_census: {name}: {error}"));
        }
    }
    warnings
}

/// True when `worker` (a registration read from the live index) is not finished and the
/// supervisor it names is gone: its pid runs no process, or another one than the entry in
/// `runs.live/` recorded (by start time). Nothing enforces a stop on such a worker but an
/// engage's own reach into its group (`crate::reach`).
pub fn supervisor_gone(ctx: &Context, worker: &WorkerRegistration) -> bool {
    if worker.finished() {
        return false;
    }
    let Some(pid) = worker.supervisor_pid else {
        return false;
    };
    let start = worker
        .live_entry
        .as_deref()
        .and_then(|entry| ctx.store.runs().live_run_body(entry).ok())
        .and_then(|body| body.get("supervisor_start").and_then(Value::as_u64));
    !supervisor_may_run(pid, start)
}

/// True unless `/proc` says the process is gone (or is another one with the same pid).
fn supervisor_may_run(pid: u32, start: Option<u64>) -> bool {
    if pid == 0 {
        return false;
    }
    match read_stat(pid) {
        Ok(None) => false,
        Ok(Some(stat)) => !stat.has_exited() && start.is_none_or(|t| t == stat.starttime),
        Err(_) => true,
    }
}

/// True when a group the worker could have been started in is populated (or cannot be read),
/// or when its registered root pid (subreaper containment) still runs.
fn anything_live(
    live: &LiveRun,
    body: Option<&Value>,
    registration: Option<&WorkerRegistration>,
    hierarchy: Option<&Hierarchy>,
) -> bool {
    let entry_group = body
        .and_then(|v| v.get("cgroup"))
        .and_then(Value::as_str)
        .map(PathBuf::from);
    let mut groups: Vec<PathBuf> = [entry_group, registration.and_then(|r| r.cgroup.clone())]
        .into_iter()
        .flatten()
        .collect();
    if let Some(hierarchy) = hierarchy {
        groups.push(
            hierarchy
                .parent()
                .join(format!("run-{}.{}", live.run, live.agent)),
        );
    }
    for path in &groups {
        if group_populated(path) {
            return true;
        }
    }
    let pid = registration.and_then(WorkerRegistration::pid);
    pid.is_some_and(|pid| !matches!(read_stat(pid), Ok(None)) && !exited(pid))
}

fn exited(pid: u32) -> bool {
    matches!(read_stat(pid), Ok(Some(stat)) if stat.has_exited())
}

/// True when the group at `path` exists and is populated, or exists and cannot be read.
fn group_populated(path: &Path) -> bool {
    if !path.exists() {
        return false;
    }
    Group::at_path(path.to_path_buf())
        .events()
        .map_or(true, |events| events.populated)
}
