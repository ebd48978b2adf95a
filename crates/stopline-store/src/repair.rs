//! The owner's repair: the only code that changes damaged control records, and only two ways.
//!
//! It truncates an unterminated last WAL line, rebuilds `epoch.json` from a valid WAL, and cuts
//! torn lines out of the ops and spend journals of writers that are gone (`journal_repair.rs`).
//! (Besides the owner's repair, one more cut lives here: the torn remnant of an evidence append
//! that never returned, which the next evidence append keeps and cuts off, see
//! `Store::cut_torn_evidence`; it is not a control record and no gate reads it.)
//! Before either it saves the old bytes to `recovery-evidence/<file>-<sha256>.bin` (create-new,
//! fsync, read back). It refuses a WAL broken anywhere but its unterminated tail, and refuses to
//! rebuild when an issued authority claims an epoch newer than the WAL knows. Gates never call it.

use crate::error::{IoContext, StoreError};
use crate::Store;
use serde::Serialize;
use std::io;
use stopline_core::refusal::require_reason;
use stopline_core::wal::{self, WalFault};
use stopline_core::wal_record::{RepairApplied, WalRecord};
use stopline_core::{EpochMap, RefusalCode};

/// What a repair did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RepairReceipt {
    /// Bytes removed from the WAL's torn tail.
    pub wal_truncated_bytes: u64,
    /// True when `epoch.json` was rebuilt from the WAL.
    pub epoch_rebuilt: bool,
    /// The epoch after the repair.
    pub epoch_seq: u64,
    /// Evidence files written before changing anything.
    pub evidence: Vec<String>,
    /// Journals (ops, spend) whose torn lines were cut out (docs/reference.md §5).
    pub journals_repaired: Vec<crate::journal_repair::JournalRepair>,
    /// Journals with torn lines left alone because their writer still runs (stop it first).
    pub journals_live: Vec<String>,
    /// True when nothing needed repair.
    pub nothing_to_repair: bool,
    /// True when a distributed plane below this host's high-water marks was re-founded (its
    /// epoch advanced past every epoch this host had read, the marks re-seated to it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub plane_refounded: bool,
}

impl Store {
    /// Keep `bytes` as recovery evidence named after `file`; returns the evidence file name.
    pub(crate) fn keep_recovery_evidence(
        &self,
        file: &str,
        bytes: &[u8],
    ) -> Result<String, StoreError> {
        let dir = self.layout.recovery_evidence();
        self.ensure_dirs(&[&dir])?;
        let name = format!("{file}-{}.bin", wal::sha256_hex(bytes));
        let path = dir.join(&name);
        match self.fs.write_new(&path, bytes, "repair.evidence") {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error).context(|| format!("writing {}", path.display())),
        }
        self.fs
            .sync_dir(&dir, "repair.evidence.dirsync")
            .context(|| "syncing recovery-evidence/".into())?;
        let back = self
            .fs
            .read(&path)
            .context(|| format!("reading back {}", path.display()))?;
        if back != bytes {
            return Err(StoreError::refused(
                RefusalCode::RepairRefused,
                format!("{name} did not read back as written"),
            ));
        }
        Ok(name)
    }

    /// Cut the evidence log's `segment` back to `at` bytes, where an unterminated last line
    /// `remnant` starts: what a power cut left of an append that never returned (appends hold
    /// the log's lock and return only after their fsync). The remnant is kept as recovery
    /// evidence first. Called by the next append, under the log's exclusive lock.
    pub(crate) fn cut_torn_evidence(
        &self,
        segment: &str,
        at: u64,
        remnant: &[u8],
    ) -> Result<(), StoreError> {
        let kept = self.keep_recovery_evidence(&format!("evidence-{segment}"), remnant)?;
        let path = self.layout.evidence().join(segment);
        self.fs
            .truncate(&path, at, "evidence.truncate")
            .context(|| format!("truncating {}", path.display()))?;
        tracing::warn!(
            segment,
            kept,
            "cut off the torn remnant of an evidence append that never returned"
        );
        Ok(())
    }

    /// Repair the WAL tail and the epoch snapshot. `highest_issued_epoch` is the newest epoch any
    /// issued authority claims (from the key's issuance record).
    #[cfg_attr(not(feature = "owner"), allow(dead_code))]
    pub(crate) fn repair(
        &self,
        reason: &str,
        by: &str,
        highest_issued_epoch: u64,
    ) -> Result<RepairReceipt, StoreError> {
        let reason = require_reason(reason)?;
        let wal_path = self.layout.wal();
        let _guard = self.lock_log_exclusive(&wal_path)?;
        let mut receipt = RepairReceipt::default();
        let bytes = self.read_optional(&wal_path)?.unwrap_or_default();
        let log = match wal::verify(&bytes) {
            Ok(log) => log,
            Err(WalFault::TornTail { offset }) => {
                let log = wal::verify(&bytes[..offset]).map_err(|fault| {
                    StoreError::refused(
                        RefusalCode::RepairRefused,
                        format!("the WAL is broken before its tail: {fault}"),
                    )
                })?;
                receipt
                    .evidence
                    .push(self.keep_recovery_evidence("breakglass.wal.jsonl", &bytes)?);
                self.fs
                    .truncate(&wal_path, offset as u64, "repair.wal.truncate")
                    .context(|| "truncating the WAL".into())?;
                receipt.wal_truncated_bytes = (bytes.len() - offset) as u64;
                log
            }
            Err(fault) => {
                return Err(StoreError::refused(
                    RefusalCode::RepairRefused,
                    format!("the WAL is broken and only a torn last line can be repaired: {fault}"),
                ))
            }
        };
        match self.read_confirmed_epoch(&log) {
            Ok(epoch) => receipt.epoch_seq = epoch.seq,
            Err(_) => {
                let rebuilt = crate::epoch::rebuild(&log);
                if !rebuilt.is_consistent() {
                    return Err(StoreError::refused(
                        RefusalCode::RepairRefused,
                        "the WAL's last epoch advance is inconsistent",
                    ));
                }
                if highest_issued_epoch > rebuilt.seq {
                    return Err(StoreError::refused(
                        RefusalCode::RepairRefused,
                        format!("an issued authority claims epoch {highest_issued_epoch}, newer than the WAL's {}", rebuilt.seq),
                    ));
                }
                let old = self.read_optional(&self.layout.epoch())?;
                if let Some(old) = old {
                    let prior: Option<EpochMap> = serde_json::from_slice(&old).ok();
                    if prior.as_ref().is_some_and(|p| p.seq > rebuilt.seq) {
                        return Err(StoreError::refused(
                            RefusalCode::RepairRefused,
                            "epoch.json claims an epoch newer than the WAL knows; refusing to roll it back",
                        ));
                    }
                    receipt
                        .evidence
                        .push(self.keep_recovery_evidence("epoch.json", &old)?);
                }
                let bytes = serde_json::to_vec(&rebuilt).expect("an epoch map always serializes");
                self.replace_atomic(&self.layout.epoch(), &bytes, "repair.epoch")?;
                let confirmed = self.read_confirmed_epoch(&log)?;
                receipt.epoch_rebuilt = true;
                receipt.epoch_seq = confirmed.seq;
            }
        }
        let (journals, live) = self.repair_journals()?;
        receipt
            .evidence
            .extend(journals.iter().map(|j| j.evidence.clone()));
        receipt.journals_repaired = journals;
        receipt.journals_live = live;
        receipt.nothing_to_repair = receipt.wal_truncated_bytes == 0
            && !receipt.epoch_rebuilt
            && receipt.journals_repaired.is_empty();
        if !receipt.nothing_to_repair {
            self.append_log(
                &wal_path,
                &log,
                vec![WalRecord::RepairApplied(RepairApplied {
                    wal_truncated_bytes: receipt.wal_truncated_bytes,
                    epoch_rebuilt: receipt.epoch_rebuilt,
                    journals_repaired: Some(receipt.journals_repaired.clone()),
                    evidence: receipt.evidence.clone(),
                    by: by.to_string(),
                    reason,
                })],
                "repair.wal",
            )?;
        }
        Ok(receipt)
    }
}
