//! An engage's own reach into supervised groups (docs/reference.md §6): after its latch is durable, the
//! engage writes `cgroup.kill` (emergency) or `cgroup.freeze` (the halts) itself for every
//! registered worker group the latch covers.
//!
//! The supervisor of a run is the one that enforces and observes a stop, but it can be stopped
//! itself (SIGSTOP, a terminal's `^Z`, a debugger): then an emergency answered `engaged: true`
//! while the agent kept running. With this step the group is reached even so. It is a second
//! path, never the only one: the supervisor still observes and records quiescence. Nothing here
//! may turn a stop into a failure: every failure is a warning in the receipt, and the latch
//! stands whatever happens. Every wait is bounded ([`CONFIRM_WITHIN`]).
//!
//! Only groups registered under `runs/*/workers/*.json` (read through the store) and lying
//! exactly under stopline's parent group are ever written to. The registrations read are those
//! of the live-run index (`runs.live/`, `Runs::live_worker_registrations`), never every run
//! that ever ran; and since an agent able to write the home could remove its own entry, the
//! populated groups under stopline's parent that no entry named are looked up too: one whose
//! registration in this home names it and is not finished is reached as well (warning
//! `group_not_indexed`). A group no registration of this home names is another home's and is
//! never written to.

use crate::context::Context;
pub use crate::receipts::{GroupOrder, GroupReached};
use std::time::{Duration, Instant};
use stopline_core::latch::LatchRecord;
use stopline_core::worker::WorkerRegistration;
use stopline_supervisor::{Group, Hierarchy};

/// How long the engage looks for a killed group to be empty before it leaves the confirmation
/// to the supervisor.
pub const CONFIRM_WITHIN: Duration = Duration::from_millis(500);

/// The outcome of the step: the groups reached and the failures (warnings).
#[derive(Debug, Default)]
pub struct Reached {
    /// Groups written to.
    pub groups: Vec<GroupReached>,
    /// Warnings for the receipt.
    pub warnings: Vec<String>,
}

/// Write the latch's order into every registered group it covers.
pub fn covered_groups(ctx: &Context, latch: &LatchRecord) -> Reached {
    let mut reached = Reached::default();
    let registrations = ctx.store.runs().live_worker_registrations();
    let hierarchy = match Hierarchy::discover() {
        Ok(hierarchy) => hierarchy,
        // No cgroup2: the subreaper fallback has no group to write to.
        Err(_) => return reached,
    };
    let mut orders: Vec<(Group, GroupReached)> = Vec::new();
    for registration in registrations {
        let worker = match registration {
            Ok(worker) => worker,
            Err(error) => {
                reached
                    .warnings
                    .push(format!("group_not_reached: a worker registration: {error}"));
                continue;
            }
        };
        if worker.finished() || !worker.subject().is_covered_by(&latch.scope) {
            continue;
        }
        // The subreaper's workers have no group: their supervisor is the only path.
        let Some(path) = worker.cgroup.as_deref() else {
            continue;
        };
        let Some(group) = hierarchy.registered_group(path) else {
            // A group already removed (its run ended) or a path that is not a supervised group.
            continue;
        };
        let order = GroupOrder::of(latch.level);
        match write_order(&group, order) {
            Ok(()) => orders.push((
                group,
                GroupReached {
                    run: worker.run.clone(),
                    agent: worker.agent.clone(),
                    cgroup: path.to_path_buf(),
                    order,
                    confirmed: false,
                },
            )),
            Err(error) => reached
                .warnings
                .push(format!("group_not_reached: {}: {error}", path.display())),
        }
    }
    for (group, worker) in unindexed_groups(ctx, &hierarchy, &orders) {
        reached.warnings.push(format!(
            "group_not_indexed: {} (run {}, agent {}) is populated and registered here but has no entry in runs.live/",
            group.path().display(),
            worker.run,
            worker.agent
        ));
        if !worker.subject().is_covered_by(&latch.scope) {
            continue;
        }
        let order = GroupOrder::of(latch.level);
        let path = group.path().to_path_buf();
        match write_order(&group, order) {
            Ok(()) => orders.push((
                group,
                GroupReached {
                    run: worker.run,
                    agent: worker.agent,
                    cgroup: path,
                    order,
                    confirmed: false,
                },
            )),
            Err(error) => reached
                .warnings
                .push(format!("group_not_reached: {}: {error}", path.display())),
        }
    }
    confirm(&mut orders);
    reached.groups = orders.into_iter().map(|(_, reached)| reached).collect();
    reached
}

fn write_order(group: &Group, order: GroupOrder) -> Result<(), stopline_supervisor::CgroupError> {
    match order {
        GroupOrder::Kill => group.kill(),
        GroupOrder::Freeze => group.order_freeze(),
    }
}

/// The populated groups under stopline's parent that no order of this reach wrote to and that
/// a registration of this home names (`runs/<run>/workers/<agent>.json` for a group
/// `run-<run>.<agent>`, its `cgroup` field that very path), not finished: workers whose entry
/// in `runs.live/` is gone. Costs one listing of the parent group and one look per live group.
fn unindexed_groups(
    ctx: &Context,
    hierarchy: &Hierarchy,
    orders: &[(Group, GroupReached)],
) -> Vec<(Group, WorkerRegistration)> {
    let Ok(groups) = hierarchy.list_groups() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for group in groups {
        if orders.iter().any(|(_, r)| r.cgroup == group.path()) {
            continue;
        }
        let Some(name) = group
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("run-"))
            .map(str::to_string)
        else {
            continue;
        };
        if !group.events().is_ok_and(|events| events.populated) {
            continue;
        }
        // Names may hold dots: try every split of `<run>.<agent>`.
        let registration = name.match_indices('.').find_map(|(at, _)| {
            let worker = ctx
                .store
                .runs()
                .worker_registration(&name[..at], &name[at + 1..])
                .ok()
                .flatten()?;
            let names_it = worker.cgroup.as_deref() == Some(group.path());
            (names_it && !worker.finished()).then_some(worker)
        });
        if let Some(worker) = registration {
            found.push((group, worker));
        }
    }
    found
}

/// Look for every order's effect for at most [`CONFIRM_WITHIN`], re-issuing kills.
fn confirm(orders: &mut [(Group, GroupReached)]) {
    let started = Instant::now();
    loop {
        let mut pending = false;
        for (group, reached) in orders.iter_mut().filter(|(_, r)| !r.confirmed) {
            match group.events() {
                Ok(events) if reached.order == GroupOrder::Kill && !events.populated => {
                    reached.confirmed = true
                }
                Ok(events) if reached.order == GroupOrder::Freeze && events.frozen => {
                    reached.confirmed = true
                }
                // A group gone since the order was written was emptied and removed.
                Err(_) if !group.path().exists() => {
                    reached.confirmed = reached.order == GroupOrder::Kill
                }
                _ => {
                    pending = true;
                    if reached.order == GroupOrder::Kill {
                        let _ = group.kill();
                    }
                }
            }
        }
        if !pending || started.elapsed() >= CONFIRM_WITHIN {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
