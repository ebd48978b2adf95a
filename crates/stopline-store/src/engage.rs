//! Engage, latch-first (SPEC §2).
//!
//! Machine scope: `create_new` the final file, write the complete JSON, fsync the file, fsync the
//! directory — contained. Other scopes: the same into `latches.staging/`, `hard_link` into
//! `latches/`, fsync the directory — contained; then remove the staging file (best effort).
//! Only after the latch is durable: the WAL record and, for `emergency`, the epoch advance.
//! A failure after containment is a warning in the receipt; it never removes the latch and never
//! reports "not engaged". A failed publication step is never retried on the same file: a fresh
//! latch with a fresh id is written instead, and on a full disk the reserve is released first.

use crate::chain::fields;
use crate::epoch::AdvanceCause;
use crate::error::{IoContext, StoreError};
use crate::Store;
use std::time::{Duration, Instant};
use stopline_core::latch::LatchSession;
use stopline_core::refusal::require_reason;
use stopline_core::{LatchRecord, Level, RefusalCode, Scope};

/// Repeated engages of one scope and level by one caller within this window are coalesced.
pub const COALESCE_WINDOW_MS: i64 = 1000;

/// What to engage.
#[derive(Debug, Clone)]
pub struct EngageRequest {
    /// The scope to stop.
    pub scope: Scope,
    /// The level.
    pub level: Level,
    /// Who engages.
    pub by: String,
    /// Why (must not be blank).
    pub reason: String,
    /// The engaging session.
    pub session: LatchSession,
}

/// The durable part of an engage receipt.
#[derive(Debug, Clone)]
pub struct EngageOutcome {
    /// The latch that stands (a fresh one, or the coalesced existing one).
    pub latch: LatchRecord,
    /// True when an identical recent latch was reused.
    pub coalesced: bool,
    /// The global epoch sequence after the engage, if it could be read.
    pub epoch_seq: Option<u64>,
    /// The scope's revision after the engage, if it could be read.
    pub scope_revision: Option<u64>,
    /// Failures after containment.
    pub warnings: Vec<String>,
    /// From the start of `engage` to the latch being durable.
    pub time_to_contained: Duration,
}

impl Store {
    /// Engage a stop. Returns an error only when no latch could be made durable (or the request
    /// is refused before anything is written).
    pub fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError> {
        let started = Instant::now();
        let reason = require_reason(&request.reason)?;
        let now = self.env.now_ms();
        let machine = request.scope == Scope::Machine;
        let mut dirs = vec![self.layout.latches()];
        if !machine {
            dirs.push(self.layout.staging());
        }
        self.ensure_dirs(&dirs.iter().map(|d| d.as_path()).collect::<Vec<_>>())?;

        if let Some(existing) = self.coalescible(request, now) {
            let (epoch_seq, scope_revision) = self.epoch_figures(&request.scope);
            return Ok(EngageOutcome {
                latch: existing,
                coalesced: true,
                epoch_seq,
                scope_revision,
                warnings: Vec::new(),
                time_to_contained: started.elapsed(),
            });
        }

        let mut warnings = Vec::new();
        let mut reserve_released = false;
        let mut attempts = 0;
        let record = loop {
            attempts += 1;
            let record = LatchRecord {
                kind: "breakglass_latch".into(),
                id: format!("latch_{}{}", coalesce_key(request), self.env.random_hex(4)),
                scope: request.scope.clone(),
                level: request.level,
                by: request.by.clone(),
                reason: reason.clone(),
                pid: self.env.pid(),
                session: request.session.clone(),
                ts: crate::env::rfc3339(now),
            };
            match self.publish(&record, machine) {
                Ok(()) => break record,
                Err(error) => {
                    let full = matches!(&error, StoreError::Io { source, .. } if source.raw_os_error() == Some(28));
                    warnings.push(format!("latch_publish_failed: {} ({error})", record.id));
                    if full && !reserve_released {
                        reserve_released = self.release_reserve();
                        if reserve_released {
                            warnings.push("disk_full_reserve_released".into());
                            continue;
                        }
                    }
                    if attempts >= 2 + usize::from(reserve_released) {
                        return Err(StoreError::refused(
                            RefusalCode::LatchNotDurable,
                            format!(
                                "no latch could be made durable after {attempts} fresh attempts: {}",
                                warnings.join("; ")
                            ),
                        ));
                    }
                }
            }
        };
        let time_to_contained = started.elapsed();

        if !machine {
            let staged = self.layout.staging().join(record.file_name());
            if let Err(error) = self.fs.remove_file(&staged, "engage.staging.remove") {
                warnings.push(format!("staging_cleanup_failed: {error}"));
            }
        }
        let (epoch_seq, scope_revision) = match self.record_engage(&record) {
            Ok(figures) => figures,
            Err(error) => {
                warnings.push(format!("epoch_or_wal_failed: {}: {error}", error.code()));
                self.epoch_figures(&request.scope)
            }
        };
        if !self.ensure_reserve() {
            warnings.push("reserve_unavailable".into());
        }
        Ok(EngageOutcome {
            latch: record,
            coalesced: false,
            epoch_seq,
            scope_revision,
            warnings,
            time_to_contained,
        })
    }

    /// Publish one latch record durably at `latches/<id>.json`.
    fn publish(&self, record: &LatchRecord, machine: bool) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(record).expect("a latch record always serializes");
        let file = record.file_name();
        let final_path = self.layout.latch(&file);
        if machine {
            self.fs
                .write_new(&final_path, &bytes, "engage.latch")
                .context(|| format!("writing {}", final_path.display()))?;
        } else {
            let staged = self.layout.staging().join(&file);
            self.fs
                .write_new(&staged, &bytes, "engage.staging")
                .context(|| format!("writing {}", staged.display()))?;
            self.fs
                .hard_link(&staged, &final_path, "engage.link")
                .context(|| format!("linking {}", final_path.display()))?;
        }
        self.fs
            .sync_dir(&self.layout.latches(), "engage.dirsync")
            .context(|| "syncing latches/".to_string())
    }

    /// After containment: WAL `latch_engaged`, and for emergency the epoch advance, under the
    /// WAL's exclusive lock.
    fn record_engage(
        &self,
        record: &LatchRecord,
    ) -> Result<(Option<u64>, Option<u64>), StoreError> {
        let wal = self.layout.wal();
        let _guard = self.lock_log_exclusive(&wal)?;
        let log = self.read_log(&wal, RefusalCode::ControlWalCorrupt)?;
        let engaged = (
            "latch_engaged",
            fields([
                ("latch", record.id.clone().into()),
                ("file", record.file_name().into()),
                ("scope", record.scope.to_string().into()),
                ("level", record.level.as_str().into()),
                ("by", record.by.clone().into()),
                ("reason", record.reason.clone().into()),
                ("pid", record.pid.into()),
            ]),
        );
        let epoch = if record.level == Level::Emergency {
            let (_, epoch) = self.advance_epoch_locked(
                &log,
                &record.scope,
                AdvanceCause::Engage,
                &record.by,
                &record.reason,
                vec![engaged],
                "engage.epoch",
            )?;
            epoch
        } else {
            let log = self.append_log(&wal, &log, vec![engaged], "engage.wal")?;
            self.read_confirmed_epoch(&log)?
        };
        Ok((Some(epoch.seq), Some(epoch.revision(&record.scope))))
    }

    fn epoch_figures(&self, scope: &Scope) -> (Option<u64>, Option<u64>) {
        match self.read_control_records().epoch {
            Ok(epoch) => (Some(epoch.seq), Some(epoch.revision(scope))),
            Err(_) => (None, None),
        }
    }

    /// An identical recent latch, if any. Only entries whose id carries this request's
    /// coalescing key are read, so the cost does not grow with the number of active latches.
    fn coalescible(&self, request: &EngageRequest, now: i64) -> Option<LatchRecord> {
        let prefix = format!("latch_{}", coalesce_key(request));
        let dir = self.layout.latches();
        let names = self.fs.read_dir(&dir).ok()?;
        let candidates: Vec<&String> = names.iter().filter(|n| n.starts_with(&prefix)).collect();
        if candidates.is_empty() {
            return None;
        }
        // Never coalesce into a latch a pending recovery plan will clear: the new stop would be
        // lost with it. (Found by the model checker.)
        let planned = self.pending_plan_latches()?;
        candidates
            .into_iter()
            .filter(|name| !planned.contains(name.as_str()))
            .filter_map(|name| {
                let bytes = self.fs.read(&dir.join(name)).ok()?;
                stopline_core::ActiveLatch::from_entry(name, Ok(&bytes)).record
            })
            .find(|r| {
                r.scope == request.scope
                    && r.level == request.level
                    && r.by == request.by
                    && crate::env::parse_rfc3339(&r.ts)
                        .is_some_and(|ts| (now - ts).abs() < COALESCE_WINDOW_MS)
            })
    }
}

impl Store {
    /// Latch files named by a `recovery_intent` that has not been applied. `None` when the WAL
    /// cannot be read, so the caller does not coalesce at all (a fresh latch is always safe).
    fn pending_plan_latches(&self) -> Option<std::collections::BTreeSet<String>> {
        let wal = self.layout.wal();
        let _guard = self.lock_log_shared(&wal).ok()?;
        let log = self.read_log(&wal, RefusalCode::ControlWalCorrupt).ok()?;
        let mut planned = std::collections::BTreeSet::new();
        for entry in &log.entries {
            let plan = entry
                .body
                .get("plan")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default();
            if entry.kind == "recovery_intent" && !log.plan_applied(plan) {
                let names = entry
                    .body
                    .get("latches")
                    .and_then(serde_json::Value::as_array);
                planned.extend(
                    names
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(String::from)),
                );
            }
        }
        Some(planned)
    }
}

/// Eight hex digits naming (scope, level, caller): the first half of a latch id, so candidates
/// for coalescing are found from the directory listing alone.
fn coalesce_key(request: &EngageRequest) -> String {
    let material = format!("{}\n{}\n{}", request.scope, request.level, request.by);
    stopline_core::wal::sha256_hex(material.as_bytes())[..8].to_string()
}
