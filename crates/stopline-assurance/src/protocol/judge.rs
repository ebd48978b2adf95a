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

/// What a gate counting staged latches owes at its return: staged bodies only refuse more (its
/// decision is at least as strict as its durable view's), and nothing it would acknowledge or
/// report is a latch that was never published in `latches/` (the setup's, or one an engage
/// created or linked there).
fn staged_obligations(
    search: &Search<'_>,
    state: &State,
    who: &str,
    decision: stopline_core::Decision,
    without: stopline_core::Decision,
    reported: &[String],
    out: &mut Verdicts,
) {
    use stopline_core::Decision;
    let strictness = |d: Decision| match d {
        Decision::Allow => 0,
        Decision::Queue => 1,
        Decision::Block => 2,
    };
    out.judge(
        Property::StagedOnlyRefusesMore,
        strictness(decision) >= strictness(without),
        || format!("{who} decided {decision:?} counting staged latches, {without:?} without them"),
    );
    for file in reported {
        let published = search.scenario.initial_latches.contains_key(file)
            || state.ghost.published.contains_key(file);
        out.judge(Property::StagedOnlyRefusesMore, published, || {
            format!(
                "{who} would acknowledge and report {file}, which was never published in latches/"
            )
        });
    }
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
            without_staged,
            reported,
        } => {
            if let Some(without) = without_staged {
                staged_obligations(search, state, &who, *decision, *without, reported, out);
            }
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
                evidence: None,
                spend: None,
                reach: None,
                drills: None,
                plane: None,
            };
            let before = earlier(search, state, began);
            let before: Vec<(String, &Outcome)> =
                before.iter().map(|(w, o)| (w.clone(), o)).collect();
            obligations(&search.context(state), &before, &seen, out);
        }
        Outcome::Reached { workers } => {
            // A worker live throughout the reach (when it began and when it returned) must be
            // in it.
            let began = state
                .ghost
                .live_at_begin
                .get(&proc)
                .cloned()
                .unwrap_or_default();
            for worker in began.intersection(&state.ghost.live_workers) {
                out.judge(Property::LiveWorkersReached, workers.contains(worker), || {
                    format!("{who} returned {workers:?}, leaving out {worker}, which was running throughout")
                });
            }
        }
        Outcome::Engaged {
            level: stopline_core::Level::Emergency,
            advanced,
            deferred,
            file,
            ..
        } => {
            out.judge(Property::EmergencyAdvances, *advanced || *deferred, || {
                format!("{who} returned Ok with {file} but did not advance the epoch (a warning)")
            });
        }
        Outcome::Recovered {
            recovered: false,
            cleared,
            ..
        } => {
            on_the_record(search, state, &who, cleared, out);
        }
        Outcome::Recovered {
            recovered: true,
            cleared,
            ..
        } => {
            on_the_record(search, state, &who, cleared, out);
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

/// Every latch a recovery cleared is on the record (docs/reference.md §5): before its `recovery_applied`,
/// the WAL holds the latch's `latch_engaged` and, for an emergency, an `epoch_advance` of its
/// scope caused by the engage. A latch whose record an engage deferred must be recorded
/// (recovery records it) before it may be cleared. Judged for the setup's latches, which are
/// whole before the race begins (a deferred one among them): a racing engage's entry may be
/// planned while it is still being written, when it reads as a machine emergency and has no
/// record to write yet — clearing such an entry is the planned-latch rule, judged by "stop wins".
fn on_the_record(
    search: &Search<'_>,
    state: &State,
    who: &str,
    cleared: &[String],
    out: &mut Verdicts,
) {
    let wal = state
        .fs
        .live_bytes(&search.layout.wal())
        .unwrap_or_default();
    let entries: Vec<serde_json::Value> = wal
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    let applied = entries
        .iter()
        .rposition(|e| e["kind"] == "recovery_applied")
        .unwrap_or(entries.len());
    let whole = |file: &str| search.scenario.initial_latches.contains_key(file);
    for file in cleared.iter().filter(|f| whole(f)) {
        let engaged = entries[..applied]
            .iter()
            .position(|e| e["kind"] == "latch_engaged" && e["file"] == file.as_str());
        let recorded = match engaged {
            None => false,
            Some(at) => {
                let entry = &entries[at];
                entry["level"] != "emergency"
                    || entries[at..applied].iter().any(|e| {
                        e["kind"] == "epoch_advance"
                            && e["cause"] == "engage"
                            && e["scope"] == entry["scope"]
                    })
            }
        };
        out.judge(Property::EveryStopOnRecord, recorded, || {
            format!(
                "{who} cleared {file}, whose latch_engaged{} the WAL never recorded",
                if engaged.is_some() {
                    "'s epoch advance"
                } else {
                    ""
                }
            )
        });
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
        (ProcSpec::Reach, Op::Begin) => {
            let live = state.ghost.live_workers.clone();
            state.ghost_mut().live_at_begin.insert(proc, live);
        }
        (ProcSpec::Supervise { run, agent }, Op::SyncDir { fp, .. })
            if ok && fp == "runs.record.dirsync" =>
        {
            state
                .ghost_mut()
                .live_workers
                .insert(format!("{run}/{agent}"));
        }
        (ProcSpec::Supervise { run, agent }, Op::Write { path, bytes, .. })
            if path.parent().and_then(|p| p.file_name()) == Some("workers".as_ref())
                && serde_json::from_slice::<serde_json::Value>(bytes.bytes())
                    .is_ok_and(|r| r["state"] == "exited") =>
        {
            state
                .ghost_mut()
                .live_workers
                .remove(&format!("{run}/{agent}"));
        }
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
