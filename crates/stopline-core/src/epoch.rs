//! The epoch map and the revocation rule.
//!
//! `seq` is the global issue sequence; `scopes` maps a scope to the revision it was last advanced
//! to (always ≤ `seq`). An authority minted under epoch `e` is revoked when any scope covering it
//! — for a delegated token, covering any link of its chain — has a revision greater than `e`, and
//! refused as unknown lineage when `e > seq`. Unrelated scopes keep their authority.
//!
//! The tail is bounded (docs/reference.md §5, "Bounded tail"): every token lives at most
//! `max_ttl_s`, so a revision older than `max_ttl_s` plus [`FOLD_MARGIN_S`] can no longer revoke
//! a token that is still alive. An advance folds such revisions away ([`EpochMap::advanced_at`]):
//! each leaves the map, and `floor` rises to the highest revision folded. An authority minted
//! under an epoch below `floor` is refused ([`AuthorityStatus::Folded`]) whatever its subject, so
//! a fold can never revive a token a folded revision revoked, even one minted before the cap
//! existed or on a host whose clock ran slow: the margin only keeps the floor from refusing a
//! token that is still alive and that nothing revoked.
//!
//! A decision judges an [`IndexedEpochMap`]: the map with its keys parsed and filed once per
//! read, so that admission looks up the subject's own scopes instead of walking every revision.

mod index;

pub use index::IndexedEpochMap;

use crate::scope::{path_within, Scope};
use crate::subject::Subject;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The longest lifetime a token may have when `[tokens] max_ttl_s` is not set: one day.
pub const DEFAULT_MAX_TTL_S: u64 = 86_400;

/// How much longer than `max_ttl_s` a revision is kept before it is folded away: room for a
/// token minted a moment after the advance under the epoch read just before it, and for the
/// clocks of the hosts that mint and verify to disagree.
pub const FOLD_MARGIN_S: u64 = 3_600;

/// `epoch.json`: the snapshot of the global sequence and per-scope revisions.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EpochMap {
    /// The global issue sequence.
    pub seq: u64,
    /// Scope (stored form) → revision.
    pub scopes: BTreeMap<String, u64>,
    /// The WAL sequence number of the `epoch_advance` record this snapshot confirms (0: none).
    pub wal_seq: u64,
    /// Scope (stored form) → when it last advanced, unix seconds: what the fold judges a
    /// revision's age by. A scope advanced before times were kept has none until the next
    /// advance stamps it with that advance's time (late, so folded late: never early).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub since: BTreeMap<String, i64>,
    /// The highest revision folded away: an authority minted under an earlier epoch is refused.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub floor: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
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
    /// The authority was minted under an epoch below the map's `floor`: before a revision that
    /// was folded away, so more than `max_ttl_s` plus the margin ago.
    Folded {
        /// The map's floor.
        floor: u64,
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
            AuthorityStatus::Folded { floor } => Some(Refusal::new(
                RefusalCode::StaleControlEpoch,
                format!("authority minted under epoch {issue_epoch} predates the folded epoch floor {floor}: it is older than any token may live"),
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
        let mut since = self.since.clone();
        since.remove(&scope.to_string());
        Ok(EpochMap {
            seq: next,
            scopes,
            wal_seq: self.wal_seq,
            since,
            floor: self.floor,
        })
    }

    /// The map after advancing `scope` at `now_s` (unix seconds), folded: `scope` is stamped
    /// `now_s`, any scope without a time is stamped `now_s` too, and every revision stamped
    /// `horizon_s` or more before `now_s` leaves the map while `floor` rises to it. The caller
    /// passes `max_ttl_s + FOLD_MARGIN_S` ([`fold_horizon_s`]). The scope just advanced is
    /// never folded.
    pub fn advanced_at(
        &self,
        scope: &Scope,
        now_s: i64,
        horizon_s: u64,
    ) -> Result<EpochMap, EpochExhausted> {
        let mut next = self.advanced(scope)?;
        for key in next.scopes.keys() {
            next.since.entry(key.clone()).or_insert(now_s);
        }
        next.since.insert(scope.to_string(), now_s);
        let horizon = i64::try_from(horizon_s).unwrap_or(i64::MAX);
        let folded: Vec<String> = next
            .since
            .iter()
            .filter(|(_, &at)| now_s.saturating_sub(at) >= horizon)
            .map(|(key, _)| key.clone())
            .collect();
        for key in folded {
            next.since.remove(&key);
            if let Some(revision) = next.scopes.remove(&key) {
                next.floor = next.floor.max(revision);
            }
        }
        Ok(next)
    }

    /// The revision of exactly `scope` (0 when never advanced).
    pub fn revision(&self, scope: &Scope) -> u64 {
        self.scopes.get(&scope.to_string()).copied().unwrap_or(0)
    }

    /// True when this map holds revision `revision` of the scope stored as `scope`: that scope
    /// is at it or past it, or folded past it (the floor refuses everything minted below it).
    /// What a gateway acknowledges a `token revoke` by.
    pub fn holds(&self, scope: &str, revision: u64) -> bool {
        self.scopes.get(scope).copied().unwrap_or(0) >= revision || self.floor >= revision
    }

    /// This map indexed for admission decisions ([`IndexedEpochMap::authority_status`]).
    pub fn indexed(self) -> IndexedEpochMap {
        IndexedEpochMap::from(self)
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
            since: BTreeMap::new(),
            floor: self.floor,
        }
    }

    /// Structural check of a parsed snapshot: every revision and the floor ≤ seq, and a time
    /// only for a scope that has a revision.
    pub fn is_consistent(&self) -> bool {
        self.scopes.values().all(|&r| r <= self.seq)
            && self.floor <= self.seq
            && self.since.keys().all(|key| self.scopes.contains_key(key))
    }
}

/// How old a revision is when it is folded away: `max_ttl_s` plus [`FOLD_MARGIN_S`].
pub fn fold_horizon_s(max_ttl_s: u64) -> u64 {
    max_ttl_s.saturating_add(FOLD_MARGIN_S)
}

/// Whether the scope stored as `key` covers `subject` (an unreadable key covers everyone).
fn key_covers(key: &str, subject: &Subject) -> bool {
    match Scope::parse_stored(key) {
        Ok(Scope::Machine) => true,
        Ok(Scope::Agent(name)) => subject.chain.contains(&name),
        Ok(Scope::Project(root)) => subject.projects.iter().any(|p| path_within(&root, p)),
        Ok(Scope::Run(id)) => subject.runs.contains(&id),
        Ok(Scope::Label(label)) => subject.labels.contains(&label),
        Ok(Scope::Token { jti, delegates }) => subject.is_revoked_by(&jti, delegates),
        Err(_) => true,
    }
}

#[cfg(test)]
impl EpochMap {
    /// The rule as first written, kept as the oracle of [`IndexedEpochMap::authority_status`]:
    /// walk every revision newer than `issue_epoch`, parse its key and judge its coverage.
    fn walked_authority_status(&self, issue_epoch: u64, subject: &Subject) -> AuthorityStatus {
        if issue_epoch > self.seq {
            return AuthorityStatus::Future { seq: self.seq };
        }
        if issue_epoch < self.floor {
            return AuthorityStatus::Folded { floor: self.floor };
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::Name;

    /// What a gateway acknowledges a revocation by: the scope at the revision or past it, or a
    /// floor at or above it; another scope's advance is not it.
    #[test]
    fn holds_a_revision_at_or_past_it_or_under_the_floor() {
        let mut map = EpochMap::default();
        map.scopes.insert("token:x".into(), 5);
        map.scopes.insert("agent:other".into(), 9);
        assert!(map.holds("token:x", 5) && map.holds("token:x", 4));
        assert!(!map.holds("token:x", 6));
        assert!(
            !map.holds("token:y", 1),
            "another scope's advance is not it"
        );
        map.floor = 6;
        assert!(map.holds("token:x", 6) && map.holds("token:y", 6));
        assert!(!map.holds("token:y", 7));
    }

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
            e1.clone()
                .indexed()
                .authority_status(0, &agent(&["parent", "child"])),
            AuthorityStatus::Stale { .. }
        ));
        assert_eq!(
            e1.clone().indexed().authority_status(0, &agent(&["other"])),
            AuthorityStatus::Current
        );
        assert_eq!(
            e1.clone()
                .indexed()
                .authority_status(1, &agent(&["parent"])),
            AuthorityStatus::Current
        );
        assert_eq!(
            e1.clone().indexed().authority_status(2, &agent(&["other"])),
            AuthorityStatus::Future { seq: 1 }
        );
        let e2 = e1.advanced(&Scope::Project("/srv/a".into())).unwrap();
        assert!(matches!(
            e2.clone().indexed().authority_status(1, &agent(&["other"])),
            AuthorityStatus::Stale { .. }
        ));
        let e3 = e2.advanced(&Scope::Project("/srv/ab".into())).unwrap();
        assert!(matches!(
            e3.clone().indexed().authority_status(2, &agent(&["other"])),
            AuthorityStatus::Current
        ));
    }

    #[test]
    fn old_revisions_fold_into_the_floor_and_what_they_revoked_stays_revoked() {
        let day = DEFAULT_MAX_TTL_S;
        let horizon = fold_horizon_s(day);
        let agent_scope = |n: &str| Scope::Agent(Name::parse(n).unwrap());
        let t0 = 1_800_000_000;
        let e1 = EpochMap::default()
            .advanced_at(&agent_scope("old"), t0, horizon)
            .unwrap();
        assert_eq!(e1.since[&agent_scope("old").to_string()], t0);
        // A day and a margin later, less one second: nothing folds yet.
        let almost = t0 + horizon as i64 - 1;
        let e2 = e1
            .advanced_at(&agent_scope("new"), almost, horizon)
            .unwrap();
        assert_eq!((e2.scopes.len(), e2.floor), (2, 0));
        // At the horizon the old revision folds; the floor takes its revision.
        let e3 = e2
            .advanced_at(&agent_scope("newer"), t0 + horizon as i64, horizon)
            .unwrap();
        assert_eq!(e3.revision(&agent_scope("old")), 0);
        assert!(!e3.since.contains_key("agent:old"));
        assert_eq!(e3.floor, 1);
        assert!(e3.is_consistent());
        // A token `old`'s emergency revoked stays refused, by the floor now.
        assert_eq!(
            e3.clone().indexed().authority_status(0, &agent(&["old"])),
            AuthorityStatus::Folded { floor: 1 }
        );
        assert!(e3
            .clone()
            .indexed()
            .authority_status(0, &agent(&["old"]))
            .refusal(0)
            .is_some_and(|r| r.code == crate::refusal::RefusalCode::StaleControlEpoch));
        // Minted after it, nothing covers it.
        assert_eq!(
            e3.clone().indexed().authority_status(1, &agent(&["old"])),
            AuthorityStatus::Current
        );
        // A scope without a time (an older epoch.json) is stamped at the next advance, never
        // folded on a guess.
        let mut legacy = e3.clone();
        legacy.since.remove("agent:new");
        let e4 = legacy
            .advanced_at(&agent_scope("x"), t0 + 10 * horizon as i64, horizon)
            .unwrap();
        assert!(e4.scopes.contains_key("agent:new"));
        assert!(!e4.scopes.contains_key("agent:newer"));
        assert_eq!(e4.since["agent:new"], t0 + 10 * horizon as i64);
    }

    #[test]
    fn an_old_snapshot_reads_without_times_or_floor_and_writes_back_the_same_bytes() {
        let old = br#"{"seq":2,"scopes":{"agent:x":2,"machine":1},"wal_seq":4}"#;
        let map: EpochMap = serde_json::from_slice(old).unwrap();
        assert!(map.since.is_empty() && map.floor == 0);
        assert_eq!(serde_json::to_vec(&map).unwrap(), old.to_vec());
    }

    #[test]
    fn a_label_revision_revokes_only_the_tokens_that_carry_the_label() {
        let label = crate::scope::Label::parse("task=ctf-17").unwrap();
        let e1 = EpochMap::default()
            .advanced(&Scope::Label(label.clone()))
            .unwrap();
        let carrier = agent(&["parent", "child"]).with_labels(vec![label]);
        assert!(matches!(
            e1.clone().indexed().authority_status(0, &carrier),
            AuthorityStatus::Stale { .. }
        ));
        let other = agent(&["parent", "child"])
            .with_labels(vec![crate::scope::Label::parse("task=ctf-18").unwrap()]);
        assert_eq!(
            e1.clone().indexed().authority_status(0, &other),
            AuthorityStatus::Current
        );
        assert_eq!(
            e1.clone().indexed().authority_status(0, &agent(&["x"])),
            AuthorityStatus::Current
        );
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
