//! One transition of the search: a process takes its next step, or returns.
//!
//! The step is the one the real store code asks for after this process's history (the
//! oracle's answer); it is checked against the reduction's disciplines and the engage rule
//! before it is applied, and the ghost facts are updated after.

use crate::protocol::fs_state::FsState;
use crate::protocol::judge;
use crate::protocol::op::Op;
use crate::protocol::oracle::{History, Next};
use crate::protocol::process::{Outcome, ProcSpec};
use crate::protocol::properties::Verdicts;
use crate::protocol::search::Search;
use crate::protocol::state::State;

/// How a state was reached, rendered only when a counterexample needs it.
#[derive(Clone)]
pub(crate) enum Label {
    /// The scenario's initial state.
    Initial,
    /// `proc` took the last step of `history`.
    Step { proc: usize, history: History },
    /// `proc` returned.
    Return { proc: usize, outcome: Outcome },
    /// `proc` was killed alone.
    Kill { proc: usize },
    /// The search broke here.
    Broken(String),
}

/// Steps after which every crash image is the one before (they change no file or entry).
fn read_only(op: &Op, before: &FsState) -> bool {
    match op {
        Op::Begin
        | Op::Read { .. }
        | Op::Identify { .. }
        | Op::ReadDir { .. }
        | Op::Exists { .. }
        | Op::Unlock { .. } => true,
        Op::Lock { path, create, .. } => !create || before.resolve(path).is_some(),
        Op::CreateDirAll { path, .. } => before.resolve(path).is_some(),
        _ => false,
    }
}

impl Search<'_> {
    /// A label as a trace line.
    pub(crate) fn render(&self, label: &Label) -> String {
        let who = |p: usize| format!("P{p} {}", self.scenario.procs[p].label());
        match label {
            Label::Initial => "initial state".into(),
            Label::Step { proc, history } => match history.last() {
                Some((op, result)) => format!(
                    "{}: {} = {}",
                    who(*proc),
                    op.describe(self.layout.home()),
                    result.describe()
                ),
                None => who(*proc),
            },
            Label::Return { proc, outcome } => format!("{}: returns {outcome:?}", who(*proc)),
            Label::Kill { proc } => format!("KILL {} (the machine keeps running)", who(*proc)),
            Label::Broken(why) => why.clone(),
        }
    }

    /// Take one step of `proc` from `state` (`proc >= n` kills `proc - n`). Also says whether
    /// the step may have changed a crash image or the facts a crash is judged by.
    pub(crate) fn advance(&mut self, state: &State, proc: usize) -> (State, Label, Verdicts, bool) {
        let mut next = state.clone();
        let mut verdicts = Verdicts::default();
        let n = state.procs.len();
        if let Some(victim) = proc.checked_sub(2 * n) {
            // The append fault: the victim's next step, an append, lands partly and fails.
            let history = &state.procs[victim].history;
            let Next::Op(op) = self.oracle.next(victim, history) else {
                unreachable!("an append fault is only offered at an append");
            };
            if let Some(why) = self.rules.check(&state.fs, victim as u8, &op) {
                let who = format!("P{victim} {}", self.scenario.procs[victim].label());
                self.report.broken = Some(format!("reduction assumption broken by {who}: {why}"));
            }
            judge::before_step(self, state, victim, &op, &mut verdicts);
            let result = next
                .fs
                .apply_partial(&op)
                .expect("an append fault is only offered at an append");
            next.ghost_mut().append_faults += 1;
            next.procs[victim].history = history.push(op, result);
            let label = Label::Step {
                proc: victim,
                history: next.procs[victim].history.clone(),
            };
            return (next, label, verdicts, true);
        }
        if let Some(victim) = proc.checked_sub(n) {
            self.report.kills += 1;
            next.procs[victim].outcome = Some(Outcome::Killed);
            next.ghost_mut().rescans.remove(&victim);
            next.fs.drop_process(victim as u8);
            return (next, Label::Kill { proc: victim }, verdicts, false);
        }
        let history = &state.procs[proc].history;
        match self.oracle.next(proc, history) {
            Next::Done(outcome) => {
                next.procs[proc].outcome = Some(outcome.clone());
                let ghost = next.ghost_mut();
                ghost.returned.push(proc);
                let began = ghost.began_after.remove(&proc);
                let rescan = ghost.rescans.remove(&proc);
                judge::on_return(self, &next, proc, &outcome, began, rescan, &mut verdicts);
                (next, Label::Return { proc, outcome }, verdicts, true)
            }
            Next::Op(op) => {
                if let Some(why) = self.rules.check(&state.fs, proc as u8, &op) {
                    let who = format!("P{proc} {}", self.scenario.procs[proc].label());
                    self.report.broken =
                        Some(format!("reduction assumption broken by {who}: {why}"));
                }
                judge::before_step(self, state, proc, &op, &mut verdicts);
                let changed = !read_only(&op, &state.fs);
                let result = next.fs.apply(proc as u8, &op);
                judge::after_step(self, &mut next, proc, &op, &result);
                next.procs[proc].history = history.push(op, result);
                let label = Label::Step {
                    proc,
                    history: next.procs[proc].history.clone(),
                };
                (next, label, verdicts, changed)
            }
            Next::Broken(why) => {
                self.report.broken = Some(format!("P{proc}: {why}"));
                (next, Label::Broken(why), verdicts, false)
            }
        }
    }

    pub(crate) fn is_gate(&self, proc: usize) -> bool {
        matches!(self.scenario.procs[proc], ProcSpec::Admission { .. })
    }
}
