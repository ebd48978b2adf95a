//! The epoch map and the revocation rule.
//!
//! `seq` is the global issue sequence; `scopes` maps a scope to the revision it was last advanced
//! to (always ≤ `seq`). An authority minted under epoch `e` is revoked when any scope covering it
//! — for a delegated token, covering any link of its chain — has a revision greater than `e`, and
//! refused as unknown lineage when `e > seq`. Unrelated scopes keep their authority.

use crate::scope::{path_within, Scope};
use crate::subject::Subject;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `epoch.json`: the snapshot of the global sequence and per-scope revisions.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EpochMap {
    /// The global issue sequence.
    pub seq: u64,
    /// Scope (stored form) → revision.
    pub scopes: BTreeMap<String, u64>,
    /// The WAL sequence number of the `epoch_advance` record this snapshot confirms (0: none).
    pub wal_seq: u64,
}

/// The epoch sequence cannot advance further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the control epoch sequence is exhausted")]
pub struct EpochExhausted;

/// Whether an authority minted under some epoch is still usable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum AuthorityStatus {
    /// No covering scope has advanced past the authority's epoch.
    Current,
    /// `scope` advanced to `revision`, past the authority's epoch.
    Stale {
        /// The covering scope that advanced.
        scope: String,
        /// Its revision.
        revision: u64,
    },
    /// The authority claims an epoch greater than the global sequence.
    Future {
        /// The sequence known to the verifier.
        seq: u64,
    },
}

impl AuthorityStatus {
    /// The refusal this standing means, if any.
    pub fn refusal(&self, issue_epoch: u64) -> Option<crate::refusal::Refusal> {
        use crate::refusal::{Refusal, RefusalCode};
        match self {
            AuthorityStatus::Current => None,
            AuthorityStatus::Stale { scope, revision } => Some(Refusal::new(
                RefusalCode::StaleControlEpoch,
                format!("authority minted under epoch {issue_epoch} was revoked by {scope} at revision {revision}"),
            )),
            AuthorityStatus::Future { seq } => Some(Refusal::new(
                RefusalCode::FutureControlEpoch,
                format!("authority claims epoch {issue_epoch} beyond the issued {seq}"),
            )),
        }
    }
}

impl EpochMap {
    /// The map after advancing `scope`: `seq + 1`, and `scopes[scope] = seq + 1`.
    /// `wal_seq` is left for the caller to set once the WAL record exists.
    pub fn advanced(&self, scope: &Scope) -> Result<EpochMap, EpochExhausted> {
        let next = self.seq.checked_add(1).ok_or(EpochExhausted)?;
        let mut scopes = self.scopes.clone();
        scopes.insert(scope.to_string(), next);
        Ok(EpochMap {
            seq: next,
            scopes,
            wal_seq: self.wal_seq,
        })
    }

    /// The revision of exactly `scope` (0 when never advanced).
    pub fn revision(&self, scope: &Scope) -> u64 {
        self.scopes.get(&scope.to_string()).copied().unwrap_or(0)
    }

    /// Judge an authority minted under `issue_epoch` for `subject` (docs/reference.md §5, Epochs).
    ///
    /// Scopes whose stored key cannot be parsed are treated as covering (fail closed).
    pub fn authority_status(&self, issue_epoch: u64, subject: &Subject) -> AuthorityStatus {
        if issue_epoch > self.seq {
            return AuthorityStatus::Future { seq: self.seq };
        }
        let mut worst: Option<(String, u64)> = None;
        for (key, &revision) in &self.scopes {
            if revision <= issue_epoch {
                continue;
            }
            let covers = key_covers(key, subject);
            if covers && worst.as_ref().is_none_or(|(_, r)| revision > *r) {
                worst = Some((key.clone(), revision));
            }
        }
        match worst {
            Some((scope, revision)) => AuthorityStatus::Stale { scope, revision },
            None => AuthorityStatus::Current,
        }
    }

    /// The map as `subject` may see it (docs/reference.md §6 "Agents see only themselves"): the scopes
    /// that cover it (those whose advance revokes its authority; an unreadable key counts, as
    /// it does there), none of another agent's.
    pub fn concerning(&self, subject: &Subject) -> EpochMap {
        EpochMap {
            seq: self.seq,
            scopes: self
                .scopes
                .iter()
                .filter(|(key, _)| key_covers(key, subject))
                .map(|(key, revision)| (key.clone(), *revision))
                .collect(),
            wal_seq: self.wal_seq,
        }
    }

    /// Structural check of a parsed snapshot: every revision ≤ seq.
    pub fn is_consistent(&self) -> bool {
        self.scopes.values().all(|&r| r <= self.seq)
    }
}

/// Whether the scope stored as `key` covers `subject` (an unreadable key covers everyone).
fn key_covers(key: &str, subject: &Subject) -> bool {
    match Scope::parse_stored(key) {
        Ok(Scope::Machine) => true,
        Ok(Scope::Agent(name)) => subject.chain.contains(&name),
        Ok(Scope::Project(root)) => subject.projects.iter().any(|p| path_within(&root, p)),
        Ok(Scope::Run(id)) => subject.runs.contains(&id),
        Err(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Name;

    fn agent(chain: &[&str]) -> Subject {
        Subject::proven(
            chain.iter().map(|n| Name::parse(n).unwrap()).collect(),
            vec!["/srv/a/x".into()],
            vec![],
        )
    }

    #[test]
    fn scoped_advance_revokes_only_covered_authority() {
        let e0 = EpochMap::default();
        let e1 = e0
            .advanced(&Scope::Agent(Name::parse("parent").unwrap()))
            .unwrap();
        assert_eq!(e1.seq, 1);
        assert!(matches!(
            e1.authority_status(0, &agent(&["parent", "child"])),
            AuthorityStatus::Stale { .. }
        ));
        assert_eq!(
            e1.authority_status(0, &agent(&["other"])),
            AuthorityStatus::Current
        );
        assert_eq!(
            e1.authority_status(1, &agent(&["parent"])),
            AuthorityStatus::Current
        );
        assert_eq!(
            e1.authority_status(2, &agent(&["other"])),
            AuthorityStatus::Future { seq: 1 }
        );
        let e2 = e1.advanced(&Scope::Project("/srv/a".into())).unwrap();
        assert!(matches!(
            e2.authority_status(1, &agent(&["other"])),
            AuthorityStatus::Stale { .. }
        ));
        let e3 = e2.advanced(&Scope::Project("/srv/ab".into())).unwrap();
        assert!(matches!(
            e3.authority_status(2, &agent(&["other"])),
            AuthorityStatus::Current
        ));
    }

    #[test]
    fn exhaustion_is_refused() {
        let full = EpochMap {
            seq: u64::MAX,
            ..Default::default()
        };
        assert_eq!(full.advanced(&Scope::Machine), Err(EpochExhausted));
    }
}
