//! Epoch helpers shared by engage, recovery and repair: the `epoch_advance` record, the
//! compare-and-swap guard on `epoch.json`, and the read-back after an advance.
//!
//! The guard compares `epoch.json`'s `mod_revision` with the one that was read (0 when the key
//! did not exist), so two writers can never both advance from the same epoch: the loser's whole
//! transaction — latch included — fails, and it re-reads and retries. The read-back confirms the
//! committed snapshot against the committed WAL, as the local directory does after its rename.

use crate::plane::EtcdPlane;
use crate::read::Snapshot;
use etcd_client::{Compare, CompareOp};
use stopline_core::wal_record::{AdvanceCause, EpochAdvance, WalRecord};
use stopline_core::{EpochMap, Scope};

impl EtcdPlane {
    /// The fields of an `epoch_advance` record from `current` to `next`.
    pub(crate) fn advance_fields(
        &self,
        current: &EpochMap,
        next: &EpochMap,
        scope: &Scope,
        cause: AdvanceCause,
        by: &str,
        reason: &str,
    ) -> WalRecord {
        WalRecord::EpochAdvance(EpochAdvance {
            prior_epoch: current.seq,
            new_epoch: next.seq,
            scope: scope.clone(),
            scope_epochs: next.scopes.clone(),
            scope_since: next.since.clone(),
            floor: next.floor,
            cause,
            by: by.to_string(),
            reason: reason.to_string(),
            pid: Some(self.local.env().pid()),
        })
    }

    /// `epoch.json` is still what `snapshot` read.
    pub(crate) fn epoch_guard(&self, snapshot: &Snapshot) -> Compare {
        let revision = snapshot.epoch.as_ref().map_or(0, |v| v.mod_revision);
        Compare::mod_revision(self.names.epoch(), CompareOp::Equal, revision)
    }

    /// Read the committed epoch back and confirm it is `expected` and matches the WAL.
    pub(crate) fn read_back_epoch(&self, expected: &EpochMap) -> Result<(), String> {
        let snapshot = self.snapshot().map_err(|e| {
            format!("control_epoch_unconfirmed: the epoch could not be read back: {e}")
        })?;
        let log = snapshot.log().map_err(|e| format!("{}: {e}", e.code()))?;
        let confirmed = snapshot
            .epoch_map(&log)
            .map_err(|e| format!("{}: {e}", e.code()))?;
        // A later advance by someone else is fine; going back is not.
        if confirmed.seq < expected.seq {
            return Err(format!(
                "control_epoch_unconfirmed: epoch.json reads back {} after advancing to {}",
                confirmed.seq, expected.seq
            ));
        }
        Ok(())
    }
}
