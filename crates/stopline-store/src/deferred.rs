//! Finishing what an engage could not record in time (docs/reference.md §5, "engage never waits").
//!
//! Engage publishes its latch first and then records it in the WAL (and, for `emergency`,
//! advances the scope's epoch) under the WAL's exclusive lock. That lock is taken with a bound:
//! a process frozen while it holds the lock (a gateway stopped by SIGSTOP in the middle of a
//! read) must not keep the operator from getting a receipt. When the bound runs out the engage
//! answers with the warning `wal_deferred`, its latch already durable and in force.
//!
//! The record is then finished by the next process that holds the exclusive lock: every verb
//! that changes latches (engage, disengage, drain, recover plan and apply) and any reader that
//! can take the lock without waiting (`Store::finish_deferred`, called by status and by a
//! gateway's periodic reload). "Unrecorded" is read from the two sources of truth and nothing
//! else: a well-formed latch in `latches/` whose file no `latch_engaged` in the WAL names. For
//! each one, in file-name order, this appends `latch_engaged` (marked `"deferred": true`) and,
//! for an emergency, advances its scope's epoch, WAL before snapshot as always.
//!
//! Recovery relies on it: `recover plan` and `recover apply` finish every deferred record before
//! they clear anything, so a latch never leaves `latches/` without its record and its epoch
//! advance in the WAL (the model checker plants the bug where it would, and finds it).
//!
//! An entry that is not a well-formed latch (garbage, a FIFO, a stray file) is never recorded:
//! it already reads as a machine emergency, and recording it would invent a stop's details.

use crate::error::StoreError;
use crate::Store;
use stopline_core::wal::WalLog;
use stopline_core::wal_record::{AdvanceCause, LatchEngaged, WalRecord};
use stopline_core::{ActiveLatch, LatchRecord, Level};

impl Store {
    /// The well-formed latches of `latches` that `log` never recorded as engaged, except
    /// `skip` (an engage's own latch, which it records itself).
    pub(crate) fn unrecorded_latches(
        log: &WalLog,
        latches: &[ActiveLatch],
        skip: Option<&str>,
    ) -> Vec<LatchRecord> {
        let recorded = log.recorded_latches();
        let mut unrecorded: Vec<LatchRecord> = latches
            .iter()
            .filter(|l| Some(l.file.as_str()) != skip && !recorded.contains(&l.file))
            .filter_map(|l| l.record.clone().filter(|r| r.file_name() == l.file))
            .collect();
        unrecorded.sort_by_key(LatchRecord::file_name);
        unrecorded
    }

    /// Under the WAL's exclusive lock, with `log` verified under it and `latches` listed under
    /// it: record every deferred latch (see the module docs). Returns the log after.
    pub(crate) fn record_deferred_locked(
        &self,
        log: WalLog,
        latches: &[ActiveLatch],
        skip: Option<&str>,
    ) -> Result<WalLog, StoreError> {
        let mut log = log;
        for record in Self::unrecorded_latches(&log, latches, skip) {
            log = self.record_latch_locked(&log, &record, true, "deferred")?;
        }
        Ok(log)
    }

    /// Append `latch_engaged` for `record` and, for an emergency, advance its scope's epoch in
    /// the same write. The caller holds the WAL's exclusive lock and passes the log it verified.
    pub(crate) fn record_latch_locked(
        &self,
        log: &WalLog,
        record: &LatchRecord,
        deferred: bool,
        fp: &str,
    ) -> Result<WalLog, StoreError> {
        let engaged = WalRecord::LatchEngaged(LatchEngaged {
            latch: record.id.clone(),
            file: record.file_name(),
            scope: record.scope.clone(),
            level: record.level,
            by: record.by.clone(),
            reason: record.reason.clone(),
            pid: Some(record.pid),
            deferred,
        });
        if record.level == Level::Emergency {
            let (log, _) = self.advance_epoch_locked(
                log,
                &record.scope,
                AdvanceCause::Engage,
                &record.by,
                &record.reason,
                vec![engaged],
                &format!("{fp}.epoch"),
            )?;
            Ok(log)
        } else {
            self.append_log(&self.layout.wal(), log, vec![engaged], &format!("{fp}.wal"))
        }
    }

    /// The entries of `latches/` no `latch_engaged` of `log` names, read (only those: the
    /// cost is the listing plus the unrecorded entries, not every latch). The caller holds the
    /// WAL's exclusive lock. A `latches/` that cannot be listed gives none, and an entry too slow
    /// to read is left out (recorded by a later read that finishes): the gates report both.
    pub(crate) fn unrecorded_entries(&self, log: &WalLog, skip: Option<&str>) -> Vec<ActiveLatch> {
        let dir = self.layout.latches();
        let Ok(names) = self.fs.read_dir(&dir) else {
            return Vec::new();
        };
        let recorded = log.recorded_latches();
        names
            .iter()
            .filter(|name| Some(name.as_str()) != skip && !recorded.contains(*name))
            .filter_map(|name| self.read_latch_entry(&dir, name).ok())
            .collect()
    }

    /// Finish deferred records if the WAL's exclusive lock is free right now; never waits.
    /// Returns how many latches were recorded (0 when the lock was busy or nothing was
    /// deferred). For readers that may write (status, a gateway's periodic reload); gates that
    /// only decide (`check`, the hook) never call it.
    pub fn finish_deferred(&self) -> Result<usize, StoreError> {
        self.finish_deferred_with(None)
    }

    /// [`Store::finish_deferred`] for a reader that follows the WAL (`follow.rs`): the WAL is
    /// verified only from the last line `follower` verified. A latch with no `latch_engaged`
    /// at all is unrecorded in a followed log as in any other, so nothing deferred is missed.
    pub fn finish_deferred_following(
        &self,
        follower: &crate::follow::WalFollower,
    ) -> Result<usize, StoreError> {
        self.finish_deferred_with(Some(follower))
    }

    fn finish_deferred_with(
        &self,
        follower: Option<&crate::follow::WalFollower>,
    ) -> Result<usize, StoreError> {
        let wal = self.layout.wal();
        // Without a WAL nothing was deferred (an engage defers only when another process
        // holds the WAL's lock); without `latches/` there is nothing to record.
        if !self.fs.exists(&wal).unwrap_or(false)
            || !self.fs.exists(&self.layout.latches()).unwrap_or(false)
        {
            return Ok(0);
        }
        let guard = match self.lock_log_exclusive_within(&wal, Some(std::time::Duration::ZERO)) {
            Ok(guard) => guard,
            Err(error) if error.is_lock_busy() => return Ok(0),
            Err(error) => return Err(error),
        };
        let log = self.read_wal_following(follower)?;
        let unrecorded = self.unrecorded_entries(&log, None);
        let count = Self::unrecorded_latches(&log, &unrecorded, None).len();
        if count > 0 {
            self.record_deferred_locked(log, &unrecorded, None)?;
        }
        drop(guard);
        Ok(count)
    }
}
