//! One transition of the search: a process takes its next step, or returns.
//!
//! The step is the one the real store code asks for after this process's history (the
//! oracle's answer); it is checked against the reduction's disciplines and the engage rule
//! before it is applied, and the ghost facts are updated after.

use crate::protocol::judge;
use crate::protocol::oracle::Next;
use crate::protocol::process::ProcSpec;
use crate::protocol::properties::Verdicts;
use crate::protocol::search::Search;
use crate::protocol::state::State;

impl Search<'_> {
    /// Take one step of `proc` from `state`.
    pub(crate) fn advance(&mut self, state: &State, proc: usize) -> (State, String, Verdicts) {
        let mut next = state.clone();
        let mut verdicts = Verdicts::default();
        let who = format!("P{proc} {}", self.scenario.procs[proc].label());
        let history = &state.procs[proc].history;
        match self.oracle.next(proc, history) {
            Next::Done(outcome) => {
                next.procs[proc].outcome = Some(outcome.clone());
                next.ghost.returned.push(proc);
                judge::on_return(self, &next, proc, &outcome, &mut verdicts);
                (next, format!("{who}: returns {outcome:?}"), verdicts)
            }
            Next::Op(op) => {
                if let Some(why) = self.rules.check(&state.fs, proc as u8, &op) {
                    self.report.broken =
                        Some(format!("reduction assumption broken by {who}: {why}"));
                }
                judge::before_step(self, state, proc, &op, &mut verdicts);
                let result = next.fs.apply(proc as u8, &op);
                judge::after_step(self, &mut next, proc, &op, &result);
                let label = format!(
                    "{who}: {} = {}",
                    op.describe(self.layout.home()),
                    result.describe()
                );
                next.procs[proc].history = history.push(op, result);
                (next, label, verdicts)
            }
            Next::Broken(why) => {
                self.report.broken = Some(format!("{who}: {why}"));
                (next, who, verdicts)
            }
        }
    }

    pub(crate) fn is_gate(&self, proc: usize) -> bool {
        matches!(self.scenario.procs[proc], ProcSpec::Admission { .. })
    }
}
