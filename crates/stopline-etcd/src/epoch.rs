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

impl EtcdPlane {
    /// Revoke one token (`scope` is a [`Scope::Token`]): one transaction appends the
    /// `epoch_advance` (cause `revoke`) to the plane's WAL and puts the advanced `epoch.json`,
    /// guarded by both, then reads the epoch back (docs/reference.md §5, "Revoking one token").
    pub fn revoke_token(
        &self,
        scope: &Scope,
        by: &str,
        reason: &str,
    ) -> Result<EpochMap, stopline_store::StoreError> {
        use stopline_core::RefusalCode;
        use stopline_store::StoreError;
        if !matches!(scope, Scope::Token { .. }) {
            return Err(StoreError::refused(
                RefusalCode::BadRequest,
                format!("{scope} is not a token"),
            ));
        }
        let next = self.retry_cas(
            "token revoke",
            || -> Result<Option<EpochMap>, StoreError> {
                let snapshot = self.snapshot()?;
                let log = snapshot.log()?;
                let epoch = snapshot.epoch_map(&log)?;
                let mut next = self.advance_now(&epoch, scope).map_err(|e| {
                    StoreError::refused(RefusalCode::ControlEpochUnconfirmed, e.to_string())
                })?;
                let advance =
                    self.advance_fields(&epoch, &next, scope, AdvanceCause::Revoke, by, reason);
                let (after, puts, guard) =
                    crate::read::append(&self.names, &log, vec![advance], &self.ts());
                next.wal_seq = after.last().map_or(0, |e| e.seq);
                let mut ops = puts;
                let bytes = serde_json::to_vec(&next).expect("an epoch map always serializes");
                ops.push(etcd_client::TxnOp::put(self.names.epoch(), bytes, None));
                let mut compares = guard;
                compares.push(self.epoch_guard(&snapshot));
                let txn = etcd_client::Txn::new().when(compares).and_then(ops);
                if !self.commit("token revoke", txn)?.succeeded() {
                    return Ok(None);
                }
                Ok(Some(next))
            },
        )?;
        self.read_back_epoch(&next)
            .map_err(|why| StoreError::refused(RefusalCode::ControlEpochUnconfirmed, why))?;
        Ok(next)
    }
}
