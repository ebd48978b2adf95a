//! `status`: the phase derived from fresh reads, with the latches, epoch, workers, gateway
//! coverage and the census of unresolved operations (docs/reference.md §3).
//!
//! Workers and gateways are observed by their own subsystems and registered under `runs/` and
//! `servers/`; this file only reads what they registered and derives the phase.

use crate::context::Context;
use crate::receipts::{StatusReceipt, WorkerView};
use stopline_core::phase::{derive, PhaseInputs};
use stopline_core::worker::{WorkerRegistration, WorkerState};
use stopline_core::ControlView;

/// The workers that may be live, as registered by the supervisor under
/// `runs/<run>/workers/<agent>.json` and indexed in `runs.live/` (read through the store; a
/// home without the index is read whole), and whether every entry and registration could be
/// read (a census with a hole in it cannot confirm quiescence). Finished runs are not read.
fn registered_workers(ctx: &Context) -> (Vec<WorkerRegistration>, bool) {
    let mut census_ok = true;
    let workers = ctx
        .store
        .runs()
        .live_worker_registrations()
        .into_iter()
        .filter_map(|registration| match registration {
            Ok(worker) => Some(worker),
            Err(_) => {
                census_ok = false;
                None
            }
        })
        .collect();
    (workers, census_ok)
}

/// Build the status receipt.
pub fn status(ctx: &Context) -> StatusReceipt {
    // Finish any WAL record an engage had to defer, if the lock is free now (never waits).
    let mut warnings: Vec<String> = Vec::new();
    if ctx
        .store
        .fs()
        .exists(ctx.store.layout().home())
        .unwrap_or(false)
    {
        if let Err(error) = ctx.store.finish_deferred() {
            warnings.push(format!("deferred WAL records not finished: {error}"));
        }
    }
    // Entries of runs.live/ that nothing live stands behind any more (a crashed supervisor's)
    // leave the index here; whatever cannot be looked at stays.
    warnings.extend(crate::live::retire(ctx));
    // One read of the operation registry: the census shown is the one the view's blocked
    // targets come from.
    let (view, census): (ControlView, _) = ctx.plane.load_view_and_census();
    let (registered, worker_census_ok) = registered_workers(ctx);
    let mut covered_quiescent = true;
    let mut workers = Vec::with_capacity(registered.len());
    for worker in registered {
        let subject = worker.subject();
        let covered = view.latches.iter().any(|l| l.covers(&subject)) || !view.faults.is_empty();
        let quiescent = worker.finished();
        // A worker whose supervisor is gone is enforced by nobody: whatever its registration
        // last said, only an engage's own reach stops it, and the census takes its entry out
        // once its group is observed empty. It is never counted as held.
        let gone = crate::live::supervisor_gone(ctx, &worker);
        if gone {
            warnings.push(format!(
                "supervisor_gone: run {} agent {}: its supervisor (pid {}) is gone and the agent may run unsupervised; engage a stop covering it (the engage kills or freezes its group itself)",
                // Names (validated when registered), so nothing to escape.
                worker.run,
                worker.agent,
                worker.supervisor_pid.map_or("?".to_string(), |pid| pid.to_string()),
            ));
        }
        // A frozen group is contained only when a pause is all that covers it: under halt-all,
        // emergency or a fault the group must be killed, and is KILLING until observed empty.
        let paused_only = view.faults.is_empty()
            && view.mode_for(&subject) == stopline_core::Mode::HaltNoncritical;
        let held = worker.state == WorkerState::Frozen && paused_only && !gone;
        let stopping_level = covered && !quiescent && !held;
        if stopping_level {
            covered_quiescent = false;
        }
        workers.push(WorkerView {
            registration: worker,
            covered,
            supervisor_gone: gone,
        });
    }
    let (gateways, gateway_notes) = crate::acks::live_servers(ctx);
    let uncovered_servers = crate::acks::uncovered_among(&gateways, &view);
    let now = ctx.store.now_ms();
    let state = view.state.effective(now);
    let phase = derive(PhaseInputs {
        state,
        contained: !view.latches.is_empty() || !view.faults.is_empty(),
        covered_workers_quiescent: covered_quiescent,
        worker_census_ok,
        gateways_covered: uncovered_servers.is_empty(),
        unresolved_operations: census.entries().next().is_some(),
        registry_errors: !census.errors.is_empty(),
    });
    let confirmed = covered_quiescent && worker_census_ok && uncovered_servers.is_empty();
    // A torn line in the middle of a journal (docs/reference.md §5) is a fault until the owner repairs
    // it: the gates are closed to what it concerns (an ops journal: a registry error, which
    // blocks every target; a spend journal: every spend fold fails).
    let mut faults = view.faults;
    faults.extend(ctx.store.torn_journals().into_iter().map(|torn| {
        stopline_core::Refusal::new(
            stopline_core::RefusalCode::ControlStateCorrupt,
            format!(
                "{} has a torn line in its middle (at byte {}); repair it at the owner console with `stopline recover repair`",
                torn.file,
                torn.torn_at
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    }));
    let observe_only = observe_only(ctx, &workers);
    StatusReceipt {
        observe_only,
        phase,
        state: state.as_str().into(),
        state_record: view.state,
        latches: view.latches,
        faults,
        epoch: view.epoch.into_map(),
        workers,
        affected_worker_quiescence_confirmed: confirmed,
        uncovered_servers,
        unresolved: census,
        warnings,
        observed_ms: now,
        gateways,
        gateway_notes,
    }
}

/// What only observes: the configuration's breakers, then each listed worker's run card's
/// conditions (a card that cannot be read or validated names nothing here: `run` refused it).
fn observe_only(ctx: &Context, workers: &[crate::receipts::WorkerView]) -> Vec<String> {
    let mut names = ctx.config.breakers.mode.observe_only();
    let runs: std::collections::BTreeSet<&str> = workers
        .iter()
        .map(|w| w.registration.run.as_str())
        .collect();
    for run in runs {
        let card = ctx.store.runs().run_card(run).ok().flatten();
        let Some(card) = card.and_then(|c| stopline_core::policy::validate(&c).ok()) else {
            continue;
        };
        names.extend(
            card.observe_only()
                .into_iter()
                .map(|condition| format!("run {run}: {condition}")),
        );
    }
    names
}
