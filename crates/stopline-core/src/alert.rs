//! `latch-alert.v1`: the record `alert_webhook` and `alert_command` receive for every change of
//! a latch — engaged, disengaged, cleared by a recovery — whoever made it (docs/reference.md
//! "Alerts").
//!
//! Several processes may see the same change (every gateway over a home, and a CLI engage that
//! found no gateway to tell), so each may send it. The record says who sent it (`sender`) and
//! carries an `alert_id` that is the same from every sender of the same change: a receiver
//! that keeps the ids it has seen drops the duplicates. Pure: the caller passes the time.

use crate::latch::LatchRecord;
use serde::{Deserialize, Serialize};

/// The `schema` of every latch alert.
pub const SCHEMA: &str = "latch-alert.v1";

/// What happened to the latch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LatchChange {
    /// The latch appeared.
    Engaged,
    /// The latch was lifted (`disengage`).
    Disengaged,
    /// The latch was cleared by a recovery (the epoch advanced as it went).
    Recovered,
}

impl LatchChange {
    /// The stable string of this change.
    pub fn as_str(self) -> &'static str {
        match self {
            LatchChange::Engaged => "engaged",
            LatchChange::Disengaged => "disengaged",
            LatchChange::Recovered => "recovered",
        }
    }
}

/// One `latch-alert.v1`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatchAlert {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// `<change>:<latch id>`: the same for every sender of this change (the duplicate key).
    pub alert_id: String,
    /// What happened.
    pub change: LatchChange,
    /// The latch's id.
    pub latch: String,
    /// Its scope (stored form).
    pub scope: String,
    /// Its level.
    pub level: crate::Level,
    /// Who engaged it.
    pub by: String,
    /// Why it was engaged.
    pub reason: String,
    /// RFC 3339 time the latch was engaged.
    pub engaged_at: String,
    /// Who sends this record: `gateway:<registration id>` or `cli:<pid>`.
    pub sender: String,
    /// RFC 3339 time the sender saw the change.
    pub ts: String,
}

impl LatchAlert {
    /// The alert for `change` of `latch`, sent by `sender` at `ts`.
    pub fn new(change: LatchChange, latch: &LatchRecord, sender: &str, ts: &str) -> LatchAlert {
        LatchAlert {
            schema: SCHEMA.to_string(),
            alert_id: format!("{}:{}", change.as_str(), latch.id),
            change,
            latch: latch.id.clone(),
            scope: latch.scope.to_string(),
            level: latch.level,
            by: latch.by.clone(),
            reason: latch.reason.clone(),
            engaged_at: latch.ts.clone(),
            sender: sender.to_string(),
            ts: ts.to_string(),
        }
    }
}

/// The changes between two sets of well-formed latches: what `after` has that `before` lacks is
/// engaged; what it lost is recovered when `epoch_advanced` (a recovery clears latches and
/// mints an epoch in one step), else disengaged.
pub fn changes<'a>(
    before: &'a [LatchRecord],
    after: &'a [LatchRecord],
    epoch_advanced: bool,
) -> Vec<(LatchChange, &'a LatchRecord)> {
    let has = |set: &[LatchRecord], id: &str| set.iter().any(|l| l.id == id);
    let gone = if epoch_advanced {
        LatchChange::Recovered
    } else {
        LatchChange::Disengaged
    };
    let mut out: Vec<(LatchChange, &LatchRecord)> = after
        .iter()
        .filter(|l| !has(before, &l.id))
        .map(|l| (LatchChange::Engaged, l))
        .collect();
    out.extend(
        before
            .iter()
            .filter(|l| !has(after, &l.id))
            .map(|l| (gone, l)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latch::LatchSession;

    fn latch(id: &str) -> LatchRecord {
        LatchRecord {
            kind: "breakglass_latch".into(),
            id: id.into(),
            scope: crate::Scope::Machine,
            level: crate::Level::HaltAll,
            by: "alice".into(),
            reason: "why".into(),
            pid: 1,
            session: LatchSession {
                bound: None,
                root: None,
                tier: "console".into(),
            },
            ts: "2026-12-07T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_latch_that_appears_is_engaged_and_one_that_goes_is_lifted_or_recovered() {
        let (a, b) = (latch("latch_a"), latch("latch_b"));
        let before = vec![a.clone()];
        let after = vec![b.clone()];
        let seen: Vec<_> = changes(&before, &after, false)
            .into_iter()
            .map(|(c, l)| (c, l.id.clone()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (LatchChange::Engaged, "latch_b".to_string()),
                (LatchChange::Disengaged, "latch_a".to_string())
            ]
        );
        let recovered = changes(&before, &[], true);
        assert_eq!(recovered[0].0, LatchChange::Recovered);
        assert!(changes(&before, &before, true).is_empty());
        let alert = LatchAlert::new(LatchChange::Engaged, &a, "cli:7", "t");
        assert_eq!(alert.alert_id, "engaged:latch_a");
        let json = serde_json::to_string(&alert).unwrap();
        let back: LatchAlert = serde_json::from_str(&json).unwrap();
        assert_eq!(back, alert);
        assert!(json.contains("\"schema\":\"latch-alert.v1\""), "{json}");
        assert!(json.contains("\"change\":\"engaged\""), "{json}");
    }
}
