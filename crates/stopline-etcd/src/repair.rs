//! The owner's repair, through etcd: rebuild `epoch.json` from a valid WAL, nothing else.
//!
//! A WAL record in etcd is one key written atomically, so there is no torn tail to truncate: a
//! WAL broken anywhere (a key gap, a broken `prev`, an unparsable record) is refused
//! (`repair_refused`), never skipped. An unconfirmed `epoch.json` is rebuilt from the WAL's last
//! `epoch_advance`, refusing when an issued authority or the old snapshot claims a newer epoch.
//! Before anything changes the old bytes are kept as `recovery-evidence/epoch.json-<sha256>.bin`
//! under the prefix; the evidence, the new snapshot and the `repair_applied` record commit in
//! one transaction, and the snapshot is read back. Gates never call this.

use crate::plane::EtcdPlane;
use crate::read::append;
use etcd_client::{Txn, TxnOp};
use stopline_core::refusal::require_reason;
use stopline_core::wal_record::{RepairApplied, WalRecord};
use stopline_core::{EpochMap, RefusalCode};
use stopline_store::repair::RepairReceipt;
use stopline_store::StoreError;

fn refused(why: impl Into<String>) -> StoreError {
    StoreError::refused(RefusalCode::RepairRefused, why)
}

impl EtcdPlane {
    /// Rebuild an unconfirmed epoch snapshot from a valid WAL.
    pub fn repair(
        &self,
        reason: &str,
        by: &str,
        highest_issued_epoch: u64,
    ) -> Result<RepairReceipt, StoreError> {
        let reason = require_reason(reason)?;
        self.retry_cas("recover repair", || {
            let snapshot = self.snapshot()?;
            let log = snapshot.log().map_err(|e| {
                refused(format!(
                    "the WAL in etcd is broken and cannot be repaired: {e}"
                ))
            })?;
            let mut receipt = RepairReceipt::default();
            if let Ok(epoch) = snapshot.epoch_map(&log) {
                receipt.epoch_seq = epoch.seq;
                receipt.nothing_to_repair = true;
                return Ok(Some(receipt));
            }
            let rebuilt = stopline_store::epoch::rebuild(&log);
            if !rebuilt.is_consistent() {
                return Err(refused("the WAL's last epoch advance is inconsistent"));
            }
            if highest_issued_epoch > rebuilt.seq {
                return Err(refused(format!("an issued authority claims epoch {highest_issued_epoch}, newer than the WAL's {}", rebuilt.seq)));
            }
            let mut ops = Vec::new();
            if let Some(old) = &snapshot.epoch {
                let prior: Option<EpochMap> = serde_json::from_slice(&old.value).ok();
                if prior.as_ref().is_some_and(|p| p.seq > rebuilt.seq) {
                    return Err(refused("epoch.json claims an epoch newer than the WAL knows; refusing to roll it back"));
                }
                let name = format!(
                    "epoch.json-{}.bin",
                    stopline_core::wal::sha256_hex(&old.value)
                );
                ops.push(TxnOp::put(
                    self.names.evidence(&name),
                    old.value.clone(),
                    None,
                ));
                receipt.evidence.push(name);
            }
            let bytes = serde_json::to_vec(&rebuilt).expect("an epoch map always serializes");
            ops.push(TxnOp::put(self.names.epoch(), bytes, None));
            let record = WalRecord::RepairApplied(RepairApplied {
                wal_truncated_bytes: 0,
                epoch_rebuilt: true,
                journals_repaired: None,
                evidence: receipt.evidence.clone(),
                by: by.to_string(),
                reason: reason.clone(),
            });
            let (_, puts, guard) = append(&self.names, &log, vec![record], &self.ts());
            ops.extend(puts);
            let txn = Txn::new()
                .when([guard, vec![self.epoch_guard(&snapshot)]].concat())
                .and_then(ops);
            if !self.commit("recover repair", txn)?.succeeded() {
                return Ok(None);
            }
            let back = self.snapshot()?;
            let back_log = back.log()?;
            let confirmed = back.epoch_map(&back_log)?;
            receipt.epoch_rebuilt = true;
            receipt.epoch_seq = confirmed.seq;
            Ok(Some(receipt))
        })
    }
}
