//! The spending journal: budgets survive a gateway restart and a crash.
//!
//! A gateway appends `reserved` — the reservation's id, the token chain (`jti`s, the caller's
//! first) and the reserved upper bound — and fsyncs it *before* the call is dispatched, then
//! appends `settled` with what the call actually used (no fsync). A restarted gateway folds every
//! journal in `spend/` ([`Store::spent`]): a settled reservation counts what it used, one never
//! settled (its writer crashed or was killed mid-call) counts at its bound — spending in doubt
//! is spent, never forgotten. Losing a `settled` line in a crash therefore only over-counts.
//! A torn last line is a remnant (a `reserved` that was never fsynced was never dispatched on) and
//! is ignored; a broken line anywhere else is corruption and fails closed.

use crate::error::{IoContext, StoreError};
use crate::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use stopline_core::budget::Budgets;
use stopline_core::RefusalCode;

/// One line of a spending journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum SpendLine {
    /// Reserved before dispatch (fsynced).
    Reserved {
        /// The reservation.
        id: String,
        /// The accounts it draws on: the caller's `jti`, then its parents'.
        chain: Vec<String>,
        /// The reserved upper bound.
        amounts: Budgets,
        /// When (unix ms).
        ts_ms: i64,
    },
    /// What it actually used (not fsynced; empty when the call was never dispatched).
    Settled {
        /// The reservation.
        id: String,
        /// What was used.
        used: Budgets,
    },
}

/// This process's spending journal (`spend/<label>-<pid>-<start>.jsonl`).
#[derive(Debug, Clone)]
pub struct SpendJournal {
    store: Store,
    path: PathBuf,
}

impl Store {
    /// Open this process's spending journal, labelled `label` (e.g. `gateway`).
    pub fn spend_journal(&self, label: &str) -> Result<SpendJournal, StoreError> {
        self.ensure_dirs(&[&self.layout.spend()])?;
        let pid = self.env.pid();
        let start = crate::ops::process_start_time(pid).unwrap_or(0);
        let path = self
            .layout
            .spend()
            .join(format!("{label}-{pid}-{start}.jsonl"));
        Ok(SpendJournal {
            store: self.clone(),
            path,
        })
    }

    /// What every journal in `spend/` says was spent, per account (`jti`): settled
    /// reservations at what they used, unsettled ones at their bound.
    pub fn spent(&self) -> Result<BTreeMap<String, Budgets>, StoreError> {
        let dir = self.layout.spend();
        let names = match self.fs.read_dir(&dir) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(error) => return Err(error).context(|| format!("listing {}", dir.display())),
        };
        let mut reserved: BTreeMap<String, (Vec<String>, Budgets)> = BTreeMap::new();
        let mut settled: BTreeMap<String, Budgets> = BTreeMap::new();
        for name in names.iter().filter(|n| n.ends_with(".jsonl")) {
            let path = dir.join(name);
            let bytes = self
                .fs
                .read(&path)
                .context(|| format!("reading {}", path.display()))?;
            for line in fold_lines(&bytes).map_err(|why| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("spend/{name}: {why}"),
                )
            })? {
                match line {
                    SpendLine::Reserved {
                        id, chain, amounts, ..
                    } => {
                        reserved.insert(id, (chain, amounts));
                    }
                    SpendLine::Settled { id, used } => {
                        settled.insert(id, used);
                    }
                }
            }
        }
        let mut spent: BTreeMap<String, Budgets> = BTreeMap::new();
        for (id, (chain, bound)) in reserved {
            let counted = settled.get(&id).unwrap_or(&bound);
            for jti in chain {
                let account = spent.entry(jti).or_default();
                for (&kind, &amount) in counted {
                    *account.entry(kind).or_default() += amount;
                }
            }
        }
        Ok(spent)
    }
}

/// The lines of one journal: complete lines must parse; an unterminated last line is a remnant.
fn fold_lines(bytes: &[u8]) -> Result<Vec<SpendLine>, String> {
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(end) => &bytes[..=end],
        None => &bytes[..0],
    };
    complete
        .split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(number, line)| {
            serde_json::from_slice(line).map_err(|e| format!("line {}: {e}", number + 1))
        })
        .collect()
}

impl SpendJournal {
    fn append(&self, line: &SpendLine, sync: bool, fp: &str) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec(line).expect("a spend line always serializes");
        bytes.push(b'\n');
        self.store
            .fs
            .append(&self.path, &bytes, sync, fp)
            .context(|| format!("appending to {}", self.path.display()))
    }

    /// Record a reservation durably (fsynced before returning); returns its id.
    pub fn reserved(&self, chain: &[String], amounts: &Budgets) -> Result<String, StoreError> {
        let id = format!("sp_{}", self.store.env.random_hex(8));
        let line = SpendLine::Reserved {
            id: id.clone(),
            chain: chain.to_vec(),
            amounts: amounts.clone(),
            ts_ms: self.store.env.now_ms(),
        };
        self.append(&line, true, "spend.reserve")?;
        Ok(id)
    }

    /// Record what reservation `id` actually used (not fsynced: a lost line over-counts).
    pub fn settled(&self, id: &str, used: &Budgets) -> Result<(), StoreError> {
        let line = SpendLine::Settled {
            id: id.to_string(),
            used: used.clone(),
        };
        self.append(&line, false, "spend.settle")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::budget::BudgetKind;

    #[test]
    fn unsettled_reservations_count_at_their_bound_and_settled_ones_at_their_use() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        assert!(store.spent().unwrap().is_empty(), "no journal yet");
        let journal = store.spend_journal("gateway").unwrap();
        let chain = vec!["child".to_string(), "parent".to_string()];
        let bound: Budgets = [(BudgetKind::ToolCalls, 1.0), (BudgetKind::SpendUsd, 0.5)].into();
        let used: Budgets = [(BudgetKind::ToolCalls, 1.0), (BudgetKind::SpendUsd, 0.1)].into();
        let first = journal.reserved(&chain, &bound).unwrap();
        journal.settled(&first, &used).unwrap();
        let released = journal.reserved(&chain, &bound).unwrap();
        journal.settled(&released, &Budgets::new()).unwrap();
        journal.reserved(&chain[..1], &bound).unwrap(); // a crash before it settled
        let spent = store.spent().unwrap();
        assert_eq!(spent["parent"][&BudgetKind::ToolCalls], 1.0);
        assert!((spent["parent"][&BudgetKind::SpendUsd] - 0.1).abs() < 1e-9);
        assert_eq!(spent["child"][&BudgetKind::ToolCalls], 2.0);
        assert!((spent["child"][&BudgetKind::SpendUsd] - 0.6).abs() < 1e-9);
    }

    #[test]
    fn a_torn_tail_is_ignored_and_a_broken_line_fails_closed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"));
        let journal = store.spend_journal("gateway").unwrap();
        let bound: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
        journal.reserved(&["a".to_string()], &bound).unwrap();
        let path = journal.path.clone();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"phase\":\"reser");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(store.spent().unwrap()["a"][&BudgetKind::ToolCalls], 1.0);
        bytes.extend_from_slice(b"\n");
        std::fs::write(&path, &bytes).unwrap();
        let error = store.spent().unwrap_err().to_refusal();
        assert_eq!(
            error.code,
            RefusalCode::ControlStateCorrupt,
            "{}",
            error.message
        );
    }
}
