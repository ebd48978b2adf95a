//! Engage, latch-first (docs/reference.md §5).
//!
//! Machine scope: `create_new` the final file, write the complete JSON, fsync the file, fsync the
//! directory — contained. Other scopes: the same into `latches.staging/`, `hard_link` into
//! `latches/`, fsync the directory — contained; then remove the staging file (best effort).
//! Only after the latch is durable: the WAL record and, for `emergency`, the epoch advance.
//! A failure after containment is a warning in the receipt; it never removes the latch and never
//! reports "not engaged". A failed publication step is never retried on the same file: a fresh
//! latch with a fresh id is written instead, and on a full disk a file of the reserve is released
//! first (one per failure, docs/reference.md §5).
//!
//! Engage never waits on anyone (docs/reference.md §5): every lock it takes after the latch is durable
//! shares one bound, [`ENGAGE_LOCK_BUDGET`]. When the WAL's lock is still held at the bound (a
//! process frozen while it reads, say), the WAL record and epoch advance are left to the next
//! process that holds the lock (`deferred.rs`) and the receipt says `wal_deferred`; before its
//! own record, an engage that does get the lock finishes every record deferred before it.

use crate::error::{IoContext, StoreError};
use crate::Store;
use std::time::{Duration, Instant};
use stopline_core::latch::LatchSession;
use stopline_core::refusal::require_reason;
use stopline_core::{LatchRecord, Level, RefusalCode, Scope};

/// Repeated engages of one scope and level by one caller within this window are coalesced.
pub const COALESCE_WINDOW_MS: i64 = 1000;

/// The longest an engage waits, in all, for the WAL's lock once its latch is durable. With the
/// gateways' acknowledgement wait (250 ms by default) and the fsyncs, the receipt comes well
/// within the 2 s of docs/reference.md §5.
pub const ENGAGE_LOCK_BUDGET: Duration = Duration::from_millis(1000);

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

impl EngageRequest {
    /// A stop engaged from a local console session bound to no agent (tier `console`): what a
    /// person at the machine engages, and how benchmarks and tests engage.
    pub fn console(scope: Scope, level: Level, by: &str, reason: &str) -> EngageRequest {
        EngageRequest {
            scope,
            level,
            by: by.into(),
            reason: reason.into(),
            session: LatchSession {
                bound: None,
                root: None,
                tier: "console".into(),
            },
        }
    }
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
    /// When this engage started (RFC 3339, the store's clock): the instant a coalescing
    /// decision was made against, so a coalesced receipt can be judged by its own clock.
    pub engaged_at: String,
    /// True when the WAL record (and epoch advance) was left to the next process (the
    /// `wal_deferred` warning says why).
    pub wal_deferred: bool,
}

impl Store {
    /// Engage a stop. Returns an error only when no latch could be made durable (or the request
    /// is refused before anything is written).
    pub fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError> {
        let started = Instant::now();
        let deadline = started + ENGAGE_LOCK_BUDGET;
        let reason = require_reason(&request.reason)?;
        let now = self.env.now_ms();
        let machine = request.scope == Scope::Machine;
        let mut dirs = vec![self.layout.latches()];
        if !machine {
            dirs.push(self.layout.staging());
        }
        self.ensure_dirs(&dirs.iter().map(|d| d.as_path()).collect::<Vec<_>>())?;

        if let Some(existing) = self.coalescible(request, now, deadline) {
            let (epoch_seq, scope_revision) = self.epoch_figures(&request.scope, deadline);
            return Ok(EngageOutcome {
                latch: existing,
                coalesced: true,
                epoch_seq,
                scope_revision,
                warnings: Vec::new(),
                time_to_contained: started.elapsed(),
                engaged_at: crate::env::rfc3339(now),
                wal_deferred: false,
            });
        }

        let mut warnings = Vec::new();
        // Reserve files released, one per full-disk failure (docs/reference.md §5: a scoped stop on tmpfs
        // out of inodes needs two, and the next stop finds the rest).
        let mut reserve_released = 0usize;
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
                    let full = matches!(&error, StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::StorageFull);
                    warnings.push(format!("latch_publish_failed: {} ({error})", record.id));
                    if full && self.release_reserve() {
                        if reserve_released == 0 {
                            warnings.push("disk_full_reserve_released".into());
                        }
                        reserve_released += 1;
                        continue;
                    }
                    if attempts >= 2 + reserve_released {
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
        let mut wal_deferred = false;
        let (epoch_seq, scope_revision) = match self.record_engage(&record, deadline) {
            Ok(figures) => figures,
            Err(error) if error.is_lock_busy() => {
                // The latch stands; its record is finished by the next holder of the lock.
                wal_deferred = true;
                warnings.push(format!(
                    "wal_deferred: {} is in force; its WAL record{} will be written by the next process that takes the WAL lock ({error})",
                    record.file_name(),
                    if record.level == Level::Emergency {
                        " and epoch advance"
                    } else {
                        ""
                    }
                ));
                (None, None)
            }
            Err(error) => {
                warnings.push(format!("epoch_or_wal_failed: {}: {error}", error.code()));
                self.epoch_figures(&request.scope, deadline)
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
            engaged_at: crate::env::rfc3339(now),
            wal_deferred,
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
            if let Err(error) = self
                .fs
                .hard_link(&staged, &final_path, "engage.link")
                .context(|| format!("linking {}", final_path.display()))
            {
                // Its inode (and on a full disk, the room it holds) goes back for the next
                // attempt; a fresh latch is staged under a fresh name.
                let _ = self.fs.remove_file(&staged, "engage.staging.remove");
                return Err(error);
            }
        }
        self.fs
            .sync_dir(&self.layout.latches(), "engage.dirsync")
            .context(|| "syncing latches/".to_string())
    }

    /// After containment: WAL `latch_engaged`, and for emergency the epoch advance, under the
    /// WAL's exclusive lock (waited for until `deadline` at most); first, every record an
    /// earlier engage left deferred.
    fn record_engage(
        &self,
        record: &LatchRecord,
        deadline: Instant,
    ) -> Result<(Option<u64>, Option<u64>), StoreError> {
        let wal = self.layout.wal();
        let _guard = self.lock_log_exclusive_within(&wal, Some(remaining(deadline)))?;
        let log = self.read_wal()?;
        let own = record.file_name();
        // Only the entries the WAL does not name are read: the cost of an engage does not grow
        // with the number of latches it finds recorded.
        let unrecorded = self.unrecorded_entries(&log, Some(&own));
        let log = self.record_deferred_locked(log, &unrecorded, Some(&own))?;
        // Another holder of the lock may have found this latch and recorded it already (it was
        // in `latches/`, unrecorded): never record it twice.
        let log = if log.recorded_latches().contains(&own) {
            log
        } else {
            self.record_latch_locked(&log, record, false, "engage")?
        };
        let epoch = self.read_confirmed_epoch(&log)?;
        Ok((Some(epoch.seq), Some(epoch.revision(&record.scope))))
    }

    fn epoch_figures(&self, scope: &Scope, deadline: Instant) -> (Option<u64>, Option<u64>) {
        let wal = self.layout.wal();
        let Ok(guard) = self.lock_log_shared_within(&wal, Some(remaining(deadline))) else {
            return (None, None);
        };
        let epoch = self
            .read_wal()
            .and_then(|log| self.read_confirmed_epoch(&log));
        drop(guard);
        match epoch {
            Ok(epoch) => (Some(epoch.seq), Some(epoch.revision(scope))),
            Err(_) => (None, None),
        }
    }

    /// An identical recent latch, if any. Only entries whose id carries this request's
    /// coalescing key are read, so the cost does not grow with the number of active latches.
    fn coalescible(
        &self,
        request: &EngageRequest,
        now: i64,
        deadline: Instant,
    ) -> Option<LatchRecord> {
        let prefix = format!("latch_{}", coalesce_key(request));
        let dir = self.layout.latches();
        let names = self.fs.read_dir(&dir).ok()?;
        let candidates: Vec<&String> = names.iter().filter(|n| n.starts_with(&prefix)).collect();
        if candidates.is_empty() {
            return None;
        }
        // Never coalesce into a latch a pending recovery plan will clear: the new stop would be
        // lost with it. (Found by the model checker.)
        let planned = self.pending_plan_latches(deadline)?;
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
    /// cannot be read in time, so the caller does not coalesce at all (a fresh latch is always
    /// safe).
    fn pending_plan_latches(
        &self,
        deadline: Instant,
    ) -> Option<std::collections::BTreeSet<String>> {
        let wal = self.layout.wal();
        let _guard = self
            .lock_log_shared_within(&wal, Some(remaining(deadline)))
            .ok()?;
        let log = self.read_wal().ok()?;
        let mut planned = std::collections::BTreeSet::new();
        for intent in log.intents().filter_map(|e| e.intent()) {
            if !log.plan_applied(&intent.plan) {
                planned.extend(intent.latches.iter().cloned());
            }
        }
        Some(planned)
    }
}

/// What is left of an engage's lock budget.
fn remaining(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Eight hex digits naming (scope, level, caller): the first half of a latch id, so candidates
/// for coalescing are found from the directory listing alone.
fn coalesce_key(request: &EngageRequest) -> String {
    let material = format!("{}\n{}\n{}", request.scope, request.level, request.by);
    stopline_core::wal::sha256_hex(material.as_bytes())[..8].to_string()
}
