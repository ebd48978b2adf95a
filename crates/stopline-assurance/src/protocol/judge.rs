//! Where the search meets the properties: what each step, return and observation owes.
//!
//! `before_step` catches an engage that touches an existing latch (it may only add one);
//! `after_step` keeps the ghost facts; `on_return` judges a racing gate's decision against the
//! processes that had returned before it began, and a recovery's `recovered: true` against its
//! last rescan; `observation` judges a gate that begins after `returned` processes returned.

use crate::protocol::hash::digest;
use crate::protocol::op::{Op, OpResult};
use crate::protocol::process::{Outcome, ProcSpec};
use crate::protocol::properties::{
    obligations, rescan_obligation, Observation, Property, Verdicts,
};
use crate::protocol::search::Search;
use crate::protocol::state::{named_in_wal, State};
use stopline_core::Scope;

/// What, besides the disk image, a crash check depends on.
pub fn facts_key(state: &State, returned: usize) -> u128 {
    let outcomes: Vec<(usize, &Outcome)> = state.returned(returned);
    digest(&(outcomes, &state.ghost.disengaged, &state.ghost.planned))
}

fn earlier(search: &Search<'_>, state: &State, upto: usize) -> Vec<(String, Outcome)> {
    state
        .returned(upto)
        .into_iter()
        .map(|(p, o)| {
            (
                format!("P{p} {}", search.scenario.procs[p].label()),
                o.clone(),
            )
        })
        .collect()
}

/// Judge an observation made by a gate that began after the first `returned` returns.
pub fn observation(
    search: &Search<'_>,
    state: &State,
    seen: &Observation,
    returned: usize,
) -> Verdicts {
    let mut verdicts = Verdicts::default();
    let before = earlier(search, state, returned);
    let before: Vec<(String, &Outcome)> = before.iter().map(|(w, o)| (w.clone(), o)).collect();
    obligations(&search.context(state), &before, seen, &mut verdicts);
    verdicts
}

/// A process returned `outcome` (already recorded in `state`).
/// `began` is how many processes had returned when it began; `rescan` its last listing of
/// `latches/` (both taken out of the ghost facts at its return).
pub fn on_return(
    search: &Search<'_>,
    state: &State,
    proc: usize,
    outcome: &Outcome,
    began: Option<usize>,
    rescan: Option<Vec<String>>,
    out: &mut Verdicts,
) {
    let who = format!("P{proc} {}", search.scenario.procs[proc].label());
    match outcome {
        Outcome::Admitted {
            decision,
            code,
            mode,
            epoch_seq,
            faulted,
        } => {
            let began = began.unwrap_or(0);
            let seen = Observation {
                decision: *decision,
                code: *code,
                mode: *mode,
                epoch_seq: *epoch_seq,
                faulted: *faulted,
                latch_files: None,
                cleared_files: None,
                ops: None,
            };
            let before = earlier(search, state, began);
            let before: Vec<(String, &Outcome)> =
                before.iter().map(|(w, o)| (w.clone(), o)).collect();
            obligations(&search.context(state), &before, &seen, out);
        }
        Outcome::Engaged {
            level: stopline_core::Level::Emergency,
            advanced,
            file,
            ..
        } => {
            out.judge(Property::EmergencyAdvances, *advanced, || {
                format!("{who} returned Ok with {file} but did not advance the epoch (a warning)")
            });
        }
        Outcome::Recovered {
            recovered: true,
            cleared,
            ..
        } => {
            let listing = rescan.unwrap_or_else(|| state.fs.live_names(&search.layout.latches()));
            let scope_of = |name: &str| -> Option<Scope> {
                if let Some((scope, _)) = search.scenario.initial_latches.get(name) {
                    return Some(scope.clone());
                }
                let (scope, _) = state.ghost.published.get(name)?;
                Scope::parse_stored(scope).ok()
            };
            rescan_obligation(
                &search.context(state),
                &who,
                cleared,
                &listing,
                &scope_of,
                out,
            );
        }
        _ => {}
    }
}

fn in_dir(path: &std::path::Path, dir: &std::path::Path) -> bool {
    path.parent() == Some(dir)
}

/// Before `proc` takes `op`: an engage may add a latch, never move, remove or cut one.
pub fn before_step(search: &Search<'_>, state: &State, proc: usize, op: &Op, out: &mut Verdicts) {
    if !matches!(search.scenario.procs[proc], ProcSpec::Engage(_)) {
        return;
    }
    let latches = search.layout.latches();
    let touches = match op {
        Op::Rename { from, to, .. } => in_dir(from, &latches) || in_dir(to, &latches),
        Op::Remove { path, .. } | Op::Truncate { path, .. } => in_dir(path, &latches),
        Op::HardLink { to, .. } | Op::Create { path: to, .. } => {
            in_dir(to, &latches) && state.fs.resolve(to).is_some()
        }
        _ => false,
    };
    out.checked[Property::EngageNeverLowers as usize] += 1;
    if touches {
        out.violations.push(crate::protocol::properties::Violation {
            property: Property::EngageNeverLowers,
            detail: format!("P{proc} engage changed an existing entry of latches/: {op:?}"),
        });
    }
}

/// After `proc` took `op` with `result`: keep the ghost facts.
pub fn after_step(search: &Search<'_>, state: &mut State, proc: usize, op: &Op, result: &OpResult) {
    let latches = search.layout.latches();
    let ok = *result == OpResult::Done;
    match (&search.scenario.procs[proc], op) {
        (ProcSpec::Admission { .. }, Op::Begin) => {
            let returned = state.ghost.returned.len();
            state.ghost_mut().began_after.insert(proc, returned);
        }
        (ProcSpec::Engage(request), Op::Create { path, .. } | Op::HardLink { to: path, .. })
            if ok && in_dir(path, &latches) =>
        {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            state
                .ghost_mut()
                .published
                .insert(name, (request.scope.to_string(), request.level));
        }
        (
            ProcSpec::RecoverApply { .. } | ProcSpec::RecoverPlanApply { .. },
            Op::ReadDir { dir },
        ) if *dir == latches => {
            if let OpResult::Names(names) = result {
                state.ghost_mut().rescans.insert(proc, names.clone());
            }
        }
        (ProcSpec::Disengage { .. }, Op::Append { path, bytes, .. })
            if *path == search.layout.wal() =>
        {
            let names = named_in_wal(bytes.bytes(), "disengaged");
            state.ghost_mut().disengaged.extend(names);
        }
        (ProcSpec::RecoverPlanApply { .. }, Op::Append { path, bytes, .. })
            if *path == search.layout.wal() =>
        {
            let names = named_in_wal(bytes.bytes(), "recovery_intent");
            state.ghost_mut().planned.extend(names);
        }
        _ => {}
    }
}
