//! Epoch snapshot: confirmation against the WAL, and the WAL-before-snapshot advance.
//!
//! To advance: (caller holds the WAL's exclusive lock and a verified log) confirm the current
//! snapshot; compute the next map (refusing exhaustion); append `epoch_advance` (with any records
//! that belong to the same step) and fsync; atomically replace `epoch.json`; read it back and
//! refuse an unconfirmed result. A crash between the WAL append and the rename leaves the WAL
//! ahead of the snapshot, which every gate reads as `control_epoch_unconfirmed`: the epoch can
//! never go back, and only the owner's repair rebuilds the snapshot.

use crate::error::StoreError;
use crate::Store;
use stopline_core::wal::WalLog;
pub use stopline_core::wal_record::AdvanceCause;
use stopline_core::wal_record::{EpochAdvance, WalRecord};
use stopline_core::{EpochMap, RefusalCode, Scope};

fn unconfirmed(detail: impl Into<String>) -> StoreError {
    StoreError::corrupt(RefusalCode::ControlEpochUnconfirmed, detail)
}

/// The epoch map the WAL's last `epoch_advance` records (the empty map when there is none): what
/// repair rebuilds `epoch.json` from. The caller checks it is consistent.
pub fn rebuild(log: &WalLog) -> EpochMap {
    log.last_epoch_advance().unwrap_or_default()
}

/// Compare a snapshot with the WAL's last `epoch_advance`.
pub fn confirm(snapshot: Option<&[u8]>, log: &WalLog) -> Result<EpochMap, StoreError> {
    let last = log.last_epoch_advance();
    let Some(bytes) = snapshot else {
        return match last {
            None => Ok(EpochMap::default()),
            Some(advance) => Err(unconfirmed(format!(
                "epoch.json is missing but WAL record {} advanced the epoch",
                advance.wal_seq
            ))),
        };
    };
    let map: EpochMap = serde_json::from_slice(bytes)
        .map_err(|error| unconfirmed(format!("epoch.json is corrupt: {error}")))?;
    if !map.is_consistent() {
        return Err(unconfirmed("epoch.json has a scope revision above its seq"));
    }
    match last {
        None if map == EpochMap::default() => Ok(map),
        None => Err(unconfirmed(
            "epoch.json claims an epoch the WAL never recorded",
        )),
        Some(recorded) => {
            let (wal_seq, new_epoch) = (recorded.wal_seq, recorded.seq);
            if map == recorded {
                Ok(map)
            } else if new_epoch > map.seq {
                Err(unconfirmed(format!(
                    "the WAL advanced the epoch to {new_epoch} but epoch.json holds {}",
                    map.seq
                )))
            } else {
                Err(unconfirmed(format!(
                    "epoch.json (seq {}) does not match the WAL's last advance (seq {new_epoch}, record {wal_seq})",
                    map.seq
                )))
            }
        }
    }
}

impl Store {
    /// Read `epoch.json` and confirm it against `log`.
    pub(crate) fn read_confirmed_epoch(&self, log: &WalLog) -> Result<EpochMap, StoreError> {
        let bytes = self.read_optional(&self.layout.epoch())?;
        confirm(bytes.as_deref(), log)
    }

    /// Advance `scope`'s epoch. The caller holds the WAL's exclusive lock and passes the log it
    /// verified under it; `preceding` records are appended in the same write, before the advance.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn advance_epoch_locked(
        &self,
        log: &WalLog,
        scope: &Scope,
        cause: AdvanceCause,
        by: &str,
        reason: &str,
        preceding: Vec<WalRecord>,
        fp: &str,
    ) -> Result<(WalLog, EpochMap), StoreError> {
        let current = self.read_confirmed_epoch(log)?;
        let now_s = self.env.now_ms().div_euclid(1000);
        let mut next = current
            .advanced_at(scope, now_s, self.fold_horizon_s())
            .map_err(|e| {
                StoreError::refused(RefusalCode::ControlEpochUnconfirmed, e.to_string())
            })?;
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::FoldWithoutFloor {
            next.floor = current.floor;
        }
        let advance = WalRecord::EpochAdvance(EpochAdvance {
            prior_epoch: current.seq,
            new_epoch: next.seq,
            scope: scope.clone(),
            scope_epochs: next.scopes.clone(),
            scope_since: next.since.clone(),
            floor: next.floor,
            cause,
            by: by.to_string(),
            reason: reason.to_string(),
            pid: Some(self.env.pid()),
        });
        let mut records = preceding;
        records.push(advance);
        let log = self.append_log(&self.layout.wal(), log, records, &format!("{fp}.wal"))?;
        next.wal_seq = log.last().map_or(0, |e| e.seq);
        let bytes = serde_json::to_vec(&next).expect("an epoch map always serializes");
        self.replace_atomic(&self.layout.epoch(), &bytes, &format!("{fp}.snapshot"))?;
        let confirmed = self.read_confirmed_epoch(&log)?;
        if confirmed != next {
            return Err(unconfirmed("epoch.json did not read back as written"));
        }
        Ok((log, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_snapshot_with_empty_wal_is_epoch_zero() {
        assert_eq!(
            confirm(None, &WalLog::default()).unwrap(),
            EpochMap::default()
        );
    }

    #[test]
    fn invented_snapshot_is_unconfirmed() {
        let err = confirm(
            Some(br#"{"seq":3,"scopes":{},"wal_seq":0}"#),
            &WalLog::default(),
        );
        assert_eq!(
            err.unwrap_err().code(),
            RefusalCode::ControlEpochUnconfirmed
        );
        let err = confirm(Some(b"{"), &WalLog::default());
        assert_eq!(
            err.unwrap_err().code(),
            RefusalCode::ControlEpochUnconfirmed
        );
    }
}
