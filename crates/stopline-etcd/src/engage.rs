//! Engage through etcd: the latch, its WAL record and its epoch advance in ONE transaction.
//!
//! The transaction's compares: the latch key does not exist (`create_revision == 0`), the first
//! new WAL key does not exist, and `epoch.json` is still the revision that was read
//! (`mod_revision`). Its puts: the latch, `latch_engaged` (+ `epoch_advance` for emergency), and
//! the new `epoch.json`. Either all of it is durable in the cluster or none of it is; a lost race
//! re-reads and retries. When the WAL or the epoch cannot be trusted the latch is still published
//! alone (create-if-absent) and the receipt warns, exactly as the local directory does: refusing
//! to stop is never the answer. When etcd cannot be reached at all, the local store's engage
//! contains this host and the receipt says `distributed_publish_failed`. After an emergency
//! advance the epoch is read back and a mismatch is a warning (`control_epoch_unconfirmed`).

use crate::client::EtcdError;
use crate::plane::EtcdPlane;
use crate::read::{append, Snapshot};
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use std::time::Instant;
use stopline_core::refusal::require_reason;
use stopline_core::wal_record::{AdvanceCause, LatchEngaged, WalRecord};
use stopline_core::{LatchRecord, Level, Scope};
use stopline_store::engage::COALESCE_WINDOW_MS;
use stopline_store::{EngageOutcome, EngageRequest, StoreError};

impl EtcdPlane {
    /// Engage a stop in etcd, or — when etcd cannot be reached — on this host alone.
    pub fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError> {
        let started = Instant::now();
        let reason = require_reason(&request.reason)?;
        match self.engage_distributed(request, &reason, started) {
            Ok(outcome) => Ok(outcome),
            Err(error) => {
                tracing::warn!(%error, "etcd engage failed; containing this host locally");
                let tried = started.elapsed();
                let mut outcome = self.local.engage(request)?;
                // Honest figures: the time spent failing to reach etcd came first.
                outcome.time_to_contained += tried;
                outcome
                    .warnings
                    .insert(0, format!("distributed_publish_failed: {error}"));
                Ok(outcome)
            }
        }
    }

    fn engage_distributed(
        &self,
        request: &EngageRequest,
        reason: &str,
        started: Instant,
    ) -> Result<EngageOutcome, EtcdError> {
        self.retry_cas("engage", || {
            let snapshot = self.snapshot()?;
            let now = self.local.now_ms();
            if let Some(latch) = coalescible(&snapshot, request, now) {
                let (epoch_seq, scope_revision) = figures(&snapshot, &request.scope);
                return Ok(Some(EngageOutcome {
                    latch,
                    coalesced: true,
                    epoch_seq,
                    scope_revision,
                    warnings: Vec::new(),
                    time_to_contained: started.elapsed(),
                    engaged_at: stopline_store::env::rfc3339(now),
                    wal_deferred: false,
                }));
            }
            let record = LatchRecord {
                kind: "breakglass_latch".into(),
                id: format!(
                    "latch_{}{}",
                    coalesce_key(request),
                    self.local.env().random_hex(4)
                ),
                scope: request.scope.clone(),
                level: request.level,
                by: request.by.clone(),
                reason: reason.to_string(),
                pid: self.local.env().pid(),
                session: request.session.clone(),
                ts: stopline_store::env::rfc3339(now),
            };
            let (txn, planned, mut warnings) = self.engage_txn(&snapshot, &record);
            if !self.commit("engage", txn)?.succeeded() {
                return Ok(None);
            }
            let time_to_contained = started.elapsed();
            let (mut epoch_seq, mut scope_revision) = (None, None);
            if let Some(next) = planned {
                epoch_seq = Some(next.seq);
                scope_revision = Some(next.revision(&record.scope));
                if record.level == Level::Emergency {
                    if let Err(why) = self.read_back_epoch(&next) {
                        warnings.push(why);
                    }
                }
            }
            Ok(Some(EngageOutcome {
                latch: record,
                coalesced: false,
                epoch_seq,
                scope_revision,
                warnings,
                time_to_contained,
                engaged_at: stopline_store::env::rfc3339(now),
                wal_deferred: false,
            }))
        })
    }

    /// The transaction for `record`, the epoch it leaves (when the WAL and epoch were trusted),
    /// and warnings.
    fn engage_txn(
        &self,
        snapshot: &Snapshot,
        record: &LatchRecord,
    ) -> (Txn, Option<stopline_core::EpochMap>, Vec<String>) {
        let file = record.file_name();
        let body = serde_json::to_vec(record).expect("a latch record always serializes");
        let mut compares = vec![Compare::create_revision(
            self.names.latch(&file),
            CompareOp::Equal,
            0,
        )];
        let mut ops = vec![TxnOp::put(self.names.latch(&file), body, None)];
        let trusted = snapshot
            .log()
            .and_then(|log| snapshot.epoch_map(&log).map(|epoch| (log, epoch)));
        let (log, epoch) = match trusted {
            Ok(pair) => pair,
            Err(error) => {
                let warning = format!("epoch_or_wal_failed: {}: {error}", error.code());
                return (Txn::new().when(compares).and_then(ops), None, vec![warning]);
            }
        };
        let engaged = WalRecord::LatchEngaged(LatchEngaged {
            latch: record.id.clone(),
            file,
            scope: record.scope.clone(),
            level: record.level,
            by: record.by.clone(),
            reason: record.reason.clone(),
            pid: Some(record.pid),
            deferred: false,
        });
        let mut records = vec![engaged];
        let mut next = epoch.clone();
        let mut warnings = Vec::new();
        if record.level == Level::Emergency {
            match self.advance_now(&epoch, &record.scope) {
                Ok(advanced) => {
                    records.push(self.advance_fields(
                        &epoch,
                        &advanced,
                        &record.scope,
                        AdvanceCause::Engage,
                        &record.by,
                        &record.reason,
                    ));
                    next = advanced;
                }
                Err(error) => warnings.push(format!("epoch_or_wal_failed: {error}")),
            }
        }
        let (after, puts, guard) = append(&self.names, &log, records, &self.ts());
        compares.extend(guard);
        compares.push(self.epoch_guard(snapshot));
        ops.extend(puts);
        if next != epoch {
            next.wal_seq = after.last().map_or(0, |e| e.seq);
            let bytes = serde_json::to_vec(&next).expect("an epoch map always serializes");
            ops.push(TxnOp::put(self.names.epoch(), bytes, None));
        }
        (
            Txn::new().when(compares).and_then(ops),
            Some(next),
            warnings,
        )
    }
}

/// The epoch figures of `scope` in a snapshot, when it can be trusted.
fn figures(snapshot: &Snapshot, scope: &Scope) -> (Option<u64>, Option<u64>) {
    match snapshot.log().and_then(|log| snapshot.epoch_map(&log)) {
        Ok(epoch) => (Some(epoch.seq), Some(epoch.revision(scope))),
        Err(_) => (None, None),
    }
}

/// An identical latch engaged by the same caller within the coalescing window.
fn coalescible(snapshot: &Snapshot, request: &EngageRequest, now: i64) -> Option<LatchRecord> {
    let prefix = format!("latch_{}", coalesce_key(request));
    snapshot
        .latches
        .iter()
        .filter(|(file, _)| file.starts_with(&prefix))
        .filter_map(|(file, v)| stopline_core::ActiveLatch::from_entry(file, Ok(&v.value)).record)
        .find(|r| {
            r.scope == request.scope
                && r.level == request.level
                && r.by == request.by
                && stopline_store::env::parse_rfc3339(&r.ts)
                    .is_some_and(|ts| (now - ts).abs() < COALESCE_WINDOW_MS)
        })
}

/// Eight hex digits naming (scope, level, caller), as the local directory forms them.
fn coalesce_key(request: &EngageRequest) -> String {
    let material = format!("{}\n{}\n{}", request.scope, request.level, request.by);
    stopline_core::wal::sha256_hex(material.as_bytes())[..8].to_string()
}
