//! The format of a spending journal: its lines, and the one fold of them into what they mean
//! (open reservations, settled use per account), shared by a look, a compaction and a rewrite.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use stopline_core::budget::Budgets;

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

/// What a spending journal's lines mean: the reservations not settled yet and what the settled
/// ones used, per account. The one fold of a journal's lines, for a look
/// ([`SpendJournal::lock`]), a compaction (`spend/compact.rs`) and a live writer's rewrite of
/// its own journal alike.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Meaning {
    /// Reservations not settled yet, by id.
    pub(crate) open: BTreeMap<String, Open>,
    /// What settled reservations used, per account.
    pub(crate) settled: BTreeMap<String, Budgets>,
}

/// A reservation not settled yet, as its `reserved` line says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Open {
    /// The accounts it draws on.
    pub(crate) chain: Vec<String>,
    /// Its reserved bound.
    pub(crate) amounts: Budgets,
    /// When it was reserved (unix ms).
    pub(crate) ts_ms: i64,
}

impl Meaning {
    /// Fold one more line: a `reserved` opens its reservation, a `settled` takes it out of the
    /// open set and adds what it used to every account of its chain (a `settled` of nothing
    /// open is ignored).
    pub(crate) fn fold(&mut self, line: SpendLine) {
        match line {
            SpendLine::Reserved {
                id,
                chain,
                amounts,
                ts_ms,
            } => {
                self.open.insert(
                    id,
                    Open {
                        chain,
                        amounts,
                        ts_ms,
                    },
                );
            }
            SpendLine::Settled { id, used } => {
                if let Some(open) = self.open.remove(&id) {
                    for jti in &open.chain {
                        add(&mut self.settled, jti, &used);
                    }
                }
            }
        }
    }

    /// The lines of a journal that means exactly this: per account (in order) one `reserved`
    /// and one `settled` line carrying its settled total (ids `carried-<n>`, never an id a
    /// reservation gets), then every open reservation's own `reserved` line. Any reader folds
    /// them to this same meaning, an older binary's too: no line kind is new.
    pub(crate) fn lines(&self, ts_ms: i64) -> Vec<SpendLine> {
        let mut lines = Vec::with_capacity(2 * self.settled.len() + self.open.len());
        for (n, (account, used)) in self.settled.iter().enumerate() {
            let id = format!("carried-{n}");
            lines.push(SpendLine::Reserved {
                id: id.clone(),
                chain: vec![account.clone()],
                amounts: used.clone(),
                ts_ms,
            });
            lines.push(SpendLine::Settled {
                id,
                used: used.clone(),
            });
        }
        for (id, open) in &self.open {
            lines.push(SpendLine::Reserved {
                id: id.clone(),
                chain: open.chain.clone(),
                amounts: open.amounts.clone(),
                ts_ms: open.ts_ms,
            });
        }
        lines
    }
}

/// Add `amounts` to `account` in `into`.
pub(crate) fn add(into: &mut BTreeMap<String, Budgets>, account: &str, amounts: &Budgets) {
    let account = into.entry(account.to_string()).or_default();
    for (&kind, &amount) in amounts {
        *account.entry(kind).or_default() += amount;
    }
}

/// The complete lines of `bytes` (what a journal holds after the lines already folded): an
/// unterminated last line is a remnant, left for a later look; a complete line that does not
/// parse is corruption. Returns the lines and the length of the complete part.
pub(crate) fn fold_lines(bytes: &[u8]) -> Result<(Vec<SpendLine>, usize), String> {
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |end| end + 1);
    let lines = bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            serde_json::from_slice(line)
                .map_err(|e| format!("{e} in {:?}", String::from_utf8_lossy(line)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((lines, complete))
}
