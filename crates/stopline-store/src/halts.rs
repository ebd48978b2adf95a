//! Lifting halts (disengage) and the bounded drain.
//!
//! Disengage clears the halt-level latches of exactly one scope; an emergency latch of that scope
//! refuses it (`emergency_requires_recovery`). The WAL records `disengaged` *before* the files are
//! removed, so a crash in between leaves the latch in place (still a stop), never a ledger entry
//! pointing at a vanished file. Drain needs an active machine latch and a deadline in 1..=3600 s.
//! Who may call these is decided by the caller.

use crate::error::{IoContext, StoreError};
use crate::Store;
use serde::{Deserialize, Serialize};
use stopline_core::refusal::require_reason;
use stopline_core::wal_record::{Disengaged, DrainStarted, WalRecord};
use stopline_core::{ActiveLatch, ControlState, Level, RefusalCode, Scope, StateRecord};

/// The receipt of a disengage.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DisengageReceipt {
    /// Always true on success.
    pub disengaged: bool,
    /// The scope.
    pub scope: String,
    /// Latch files cleared.
    pub cleared: Vec<String>,
    /// Notes.
    pub warnings: Vec<String>,
}

/// Drain deadlines allowed, in seconds.
pub const DRAIN_RANGE_S: std::ops::RangeInclusive<u64> = 1..=3600;

/// Refuse a drain deadline outside [`DRAIN_RANGE_S`] (before anything is read).
pub fn check_drain_deadline(deadline_s: u64) -> Result<(), StoreError> {
    if DRAIN_RANGE_S.contains(&deadline_s) {
        return Ok(());
    }
    Err(StoreError::refused(
        RefusalCode::DrainDeadlineOutOfRange,
        format!("a drain deadline must be 1..=3600 seconds, not {deadline_s}"),
    ))
}

/// A drain's window over the active `latches` at `now` (unix ms): its deadline, and the time
/// before which an operation must have been prepared to be admitted (the earliest machine
/// latch, `now` when none carries a readable time). Refused without an active machine latch.
pub fn drain_window(
    latches: &[ActiveLatch],
    deadline_s: u64,
    now: i64,
) -> Result<(i64, i64), StoreError> {
    let machine: Vec<_> = latches
        .iter()
        .filter(|l| l.scope == Scope::Machine)
        .collect();
    if machine.is_empty() {
        return Err(StoreError::refused(
            RefusalCode::DrainRequiresMachineLatch,
            "drain needs an active machine latch",
        ));
    }
    let earliest = machine
        .iter()
        .filter_map(|l| {
            l.record
                .as_ref()
                .and_then(|r| crate::env::parse_rfc3339(&r.ts))
        })
        .min()
        .unwrap_or(now);
    Ok((now + (deadline_s as i64) * 1000, earliest))
}

impl Store {
    /// Clear the halt-level latches of exactly `scope`.
    pub fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError> {
        let reason = require_reason(reason)?;
        let wal = self.layout.wal();
        let (_guard, log, latches) = self.lock_and_scan()?;
        let of_scope: Vec<_> = latches.iter().filter(|l| &l.scope == scope).collect();
        if let Some(emergency) = of_scope.iter().find(|l| l.level == Level::Emergency) {
            return Err(StoreError::refused(
                RefusalCode::EmergencyRequiresRecovery,
                format!("{} is an emergency latch of {scope}; only the owner console's recovery clears it", emergency.file),
            ));
        }
        let names: Vec<String> = of_scope.iter().map(|l| l.file.clone()).collect();
        let mut warnings = Vec::new();
        if names.is_empty() {
            warnings.push(format!("no halt latch of exactly {scope} was active"));
            return Ok(DisengageReceipt {
                disengaged: true,
                scope: scope.to_string(),
                cleared: names,
                warnings,
            });
        }
        self.append_log(
            &wal,
            &log,
            vec![WalRecord::Disengaged(Disengaged {
                scope: scope.clone(),
                latches: names.clone(),
                by: by.to_string(),
                reason: reason.to_string(),
            })],
            "disengage.wal",
        )?;
        for name in &names {
            self.fs
                .remove_file(&self.layout.latch(name), "disengage.remove")
                .context(|| format!("removing {name}"))?;
        }
        self.fs
            .sync_dir(&self.layout.latches(), "disengage.dirsync")
            .context(|| "syncing latches/".into())?;
        Ok(DisengageReceipt {
            disengaged: true,
            scope: scope.to_string(),
            cleared: names,
            warnings,
        })
    }

    /// Start a drain: DRAINING until `deadline_s` from now, admitting only operations prepared
    /// before the earliest machine latch.
    #[cfg_attr(not(feature = "owner"), allow(dead_code))]
    pub(crate) fn drain(
        &self,
        deadline_s: u64,
        reason: &str,
        by: &str,
    ) -> Result<StateRecord, StoreError> {
        let reason = require_reason(reason)?;
        check_drain_deadline(deadline_s)?;
        let wal = self.layout.wal();
        let (_guard, log, latches) = self.lock_and_scan()?;
        let now = self.env.now_ms();
        let (deadline, earliest) = drain_window(&latches, deadline_s, now)?;
        self.append_log(
            &wal,
            &log,
            vec![WalRecord::DrainStarted(DrainStarted {
                deadline: crate::env::rfc3339(deadline),
                prepared_before: crate::env::rfc3339(earliest),
                by: by.to_string(),
                reason: reason.clone(),
            })],
            "drain.wal",
        )?;
        self.write_state(
            ControlState::Draining,
            by,
            &reason,
            Some(deadline),
            Some(earliest),
            "drain.state",
        )
    }
}
