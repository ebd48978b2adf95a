//! The exhaustive search of one scenario: depth-first over schedules, with a visited set.
//!
//! At each state: if a process is about to return, it returns (no choice: returning touches
//! nothing); else if a process's next step is invisible (`visibility.rs`), it takes it (no
//! choice); else every process whose next step is enabled is a branch, and so is killing each
//! started process that is not a gate (the machine keeps running; its locks are released).
//! Every state whose disk or returned facts changed is crashed five ways and restarted
//! (`crash_check.rs`), and the restart's observation is judged against every process that had
//! returned. Observations are also judged when a racing gate returns, when a recovery returns
//! `recovered: true`, and when every process has finished. States are identified by the
//! filesystem, the histories of running processes, the outcomes of finished ones and the ghost
//! facts, so a state reached by two schedules is explored once.

use crate::protocol::fs_image::Private;
use crate::protocol::hash::KeyBuild;
use crate::protocol::op::Op;
use crate::protocol::oracle::{Next, Oracle, ProcessSetup};
use crate::protocol::properties::{Context, Property, Verdicts, Violation};
use crate::protocol::report::{Counterexample, ScenarioReport};
use crate::protocol::restart::{observe, Crash, Restarted};
use crate::protocol::scenario::{home, Scenario};
use crate::protocol::state::State;
use crate::protocol::step::Label;
use crate::protocol::visibility::Rules;
use crate::protocol::{judge, Options};
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use stopline_store::Layout;

pub(crate) struct Frame {
    state: State,
    id: usize,
    label: Label,
    todo: Vec<usize>,
}

/// The search of one scenario.
pub struct Search<'a> {
    pub(crate) scenario: &'a Scenario,
    pub(crate) layout: Layout,
    pub(crate) rules: Rules,
    pub(crate) private: Private,
    pub(crate) oracle: Oracle,
    visited: HashMap<u128, usize, KeyBuild>,
    successors: Vec<Vec<usize>>,
    pub(crate) crashes_seen: HashSet<u128, KeyBuild>,
    pub(crate) restarts: HashMap<u128, Restarted, KeyBuild>,
    pub(crate) report: ScenarioReport,
    options: &'a Options,
}

impl<'a> Search<'a> {
    /// Prepare the search of `scenario`.
    pub fn new(scenario: &'a Scenario, options: &'a Options) -> Search<'a> {
        let setup = ProcessSetup {
            home: home(),
            now_ms: scenario.now_ms,
            live_spend_writer: scenario.live_spend_writer,
            spend_rewrite_bytes: scenario.spend_rewrite_bytes,
            ops_snapshot_every: scenario.ops_snapshot_every,
            #[cfg(feature = "planted-bugs")]
            planted: options.planted,
        };
        let layout = Layout::new(home());
        let name = |p: std::path::PathBuf| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let private = Private {
            home: name(layout.home().to_path_buf()),
            staging: name(layout.staging()),
        };
        Search {
            scenario,
            rules: Rules::new(&layout, &scenario.procs),
            private,
            layout,
            oracle: Oracle::new(scenario.procs.clone(), setup),
            visited: HashMap::default(),
            successors: Vec::new(),
            crashes_seen: HashSet::default(),
            restarts: HashMap::default(),
            report: ScenarioReport::new(scenario),
            options,
        }
    }

    /// Explore every schedule.
    pub fn run(mut self) -> ScenarioReport {
        let started = Instant::now();
        let mut last_progress = Instant::now();
        let mut root = State::initial(self.scenario.initial.clone(), self.scenario.procs.len());
        if !self.scenario.live_workers.is_empty() {
            root.ghost_mut().live_workers = self.scenario.live_workers.iter().cloned().collect();
        }
        self.visited.insert(root.key(), 0);
        self.successors.push(Vec::new());
        let mut stack: Vec<Frame> = Vec::new();
        let first = self.enter(root, 0, Label::Initial, true, &stack);
        stack.push(first);
        while let Some(top) = stack.last_mut() {
            if self.report.broken.is_some() {
                break;
            }
            let Some(proc) = top.todo.pop() else {
                stack.pop();
                continue;
            };
            let id_from = top.id;
            self.report.transitions += 1;
            let (next, label, verdicts, changed) = self.advance(&top.state, proc);
            self.record(verdicts, &stack, &[&label], None);
            let key = next.key();
            if let Some(&id) = self.visited.get(&key) {
                self.successors[id_from].push(id);
                continue;
            }
            let id = self.successors.len();
            self.visited.insert(key, id);
            self.successors.push(Vec::new());
            self.successors[id_from].push(id);
            let frame = self.enter(next, id, label, changed, &stack);
            stack.push(frame);
            self.report.max_depth = self.report.max_depth.max(stack.len());
            if self.options.progress && last_progress.elapsed().as_secs() >= 2 {
                last_progress = Instant::now();
                eprintln!(
                    "model-check: {}: {} states…",
                    self.scenario.name,
                    self.visited.len()
                );
            }
        }
        self.report.states = self.visited.len() as u64;
        self.report.crash_points = self.report.states * Crash::ALL.len() as u64;
        self.report.schedules = crate::protocol::report::count_paths(&self.successors);
        self.report.replays = self.oracle.replays;
        self.report.elapsed = started.elapsed();
        self.report
    }

    /// Count the obligations of `verdicts`, and keep the first counterexample of each broken
    /// property: the labels of `stack`, then `tail`, then `extra`.
    pub(crate) fn record(
        &mut self,
        verdicts: Verdicts,
        stack: &[Frame],
        tail: &[&Label],
        extra: Option<String>,
    ) {
        for (i, n) in verdicts.checked.iter().enumerate() {
            self.report.checked[i] += n;
        }
        for Violation { property, detail } in verdicts.violations {
            self.report.violation_count += 1;
            if self.report.violations.contains_key(&property) {
                continue;
            }
            let labels = stack.iter().map(|f| &f.label).chain(tail.iter().copied());
            let mut trace: Vec<String> = labels
                .filter(|l| !matches!(l, Label::Initial))
                .map(|l| self.render(l))
                .collect();
            trace.extend(extra.clone());
            let scenario = self.scenario.name.into();
            let example = Counterexample {
                scenario,
                detail,
                trace,
            };
            self.report.violations.insert(property, example);
        }
    }

    /// Crash-check a new state and decide its successors.
    fn enter(
        &mut self,
        state: State,
        id: usize,
        label: Label,
        changed: bool,
        stack: &[Frame],
    ) -> Frame {
        // After a step that changed no file, entry or fact, every crash image and its judgment
        // are the ones already made at the state before.
        if changed {
            self.crash_all(&state, stack, &label);
        }
        let mut nexts = Vec::new();
        for (p, proc) in state.procs.iter().enumerate() {
            if proc.outcome.is_some() {
                continue;
            }
            match self.oracle.next(p, &proc.history) {
                Next::Broken(why) => {
                    self.report.broken = Some(format!("process P{p}: {why}"));
                    return Frame {
                        state,
                        id,
                        label,
                        todo: Vec::new(),
                    };
                }
                next => nexts.push((p, next)),
            }
        }
        let returning = nexts
            .iter()
            .find(|(_, n)| matches!(n, Next::Done(_)))
            .map(|(p, _)| *p);
        let quiet = nexts.iter().find_map(|(p, n)| match n {
            Next::Op(op)
                if self
                    .rules
                    .invisible(&state.fs, *p as u8, op, self.is_gate(*p)) =>
            {
                Some(*p)
            }
            _ => None,
        });
        let forced = returning.or(quiet);
        let mut todo: Vec<usize> = match forced {
            Some(p) => vec![p],
            None => nexts
                .iter()
                .filter(|(_, n)| matches!(n, Next::Op(op) if state.fs.enabled(op)))
                .map(|(p, _)| *p)
                .rev()
                .collect(),
        };
        let stuck = todo.is_empty();
        // Branches also kill each started process (the machine keeps running). Only at states
        // where nothing is forced: a kill commutes with another process's forced step, and one
        // of the killed process's own invisible steps is a read or a private write. Gates are
        // not killed (it would only drop their reads), nor is a process about to return (it
        // would only drop the obligations of its return).
        if forced.is_none() && !stuck && !self.options.no_kills {
            let n = state.procs.len();
            for (p, next) in nexts.iter().rev() {
                let started = state.procs[*p].history.len > 0;
                if started && !self.is_gate(*p) && matches!(next, Next::Op(_)) {
                    todo.insert(0, n + p);
                }
            }
        }
        // Branches also fail an append as a full disk does (docs/reference.md §5), while the scenario
        // allows one more on this path: at every append any process is about to make.
        if !stuck && state.ghost.append_faults < self.scenario.append_faults {
            let n = state.procs.len();
            for (p, next) in nexts.iter().rev() {
                let offered = forced.is_none_or(|f| f == *p);
                let fails = |op: &Op| {
                    matches!(op, Op::Append { .. }) && state.fs.clone().apply_partial(op).is_some()
                };
                if offered && matches!(next, Next::Op(op) if fails(op)) {
                    todo.insert(0, 2 * n + p);
                }
            }
        }
        if state.finished() {
            self.report.terminals += 1;
            let seen = observe(self.scenario, state.fs.clone(), false, self.planted());
            let verdicts = judge::observation(self, &state, &seen.seen, state.ghost.returned.len());
            let end = format!("end: {}", seen.summary);
            self.record(verdicts, stack, &[&label], Some(end));
        } else if stuck {
            let mut verdicts = Verdicts::default();
            verdicts.checked[Property::NoDeadlock as usize] += 1;
            let waiting: Vec<String> = nexts
                .iter()
                .filter_map(|(p, n)| match n {
                    Next::Op(op) => {
                        Some(format!("P{p} waits at {}", op.describe(self.layout.home())))
                    }
                    _ => None,
                })
                .collect();
            verdicts.violations.push(Violation {
                property: Property::NoDeadlock,
                detail: waiting.join("; "),
            });
            self.record(verdicts, stack, &[&label], None);
        } else {
            self.report.checked[Property::NoDeadlock as usize] += 1;
        }
        Frame {
            state,
            id,
            label,
            todo,
        }
    }

    /// The bug planted in every store of this search.
    pub(crate) fn planted(&self) -> crate::protocol::restart::Planted {
        #[cfg(feature = "planted-bugs")]
        return self.options.planted;
        #[cfg(not(feature = "planted-bugs"))]
        return crate::protocol::scenario::Planted;
    }

    /// The judging context.
    pub(crate) fn context<'b>(&'b self, state: &'b State) -> Context<'b> {
        Context {
            scenario: self.scenario,
            disengaged: &state.ghost.disengaged,
            planned: &state.ghost.planned,
            live_workers: &state.ghost.live_workers,
        }
    }
}
