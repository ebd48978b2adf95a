//! Recovery: `plan` fixes the exact latch names and takes the census; `apply` mints a new epoch,
//! moves exactly the planned latches to `breakglass.cleared/epoch-<new>/`, then rescans.
//!
//! The console checks happen in the caller; this file is the durable protocol. A latch engaged
//! while a recovery runs is not in its plan, survives the move, and is found by the rescan: the
//! receipt says `recovered: false` and (for machine scope) the state is FROZEN_SAFE. Nothing is
//! retried or replayed; carried-forward operations stay unresolved.

use crate::error::{IoContext, StoreError};
use crate::ops::Census;
use crate::Store;
use serde::Serialize;
use stopline_core::refusal::require_reason;
use stopline_core::wal_record::{
    AdvanceCause, CarriedOperation, RecoveryApplied, RecoveryIntent, WalRecord,
};
use stopline_core::{ControlState, RefusalCode, Scope};

/// The receipt of `recover plan` (docs/reference.md §3).
#[derive(Debug, Clone, Serialize)]
pub struct PlanReceipt {
    /// The plan id.
    pub plan: String,
    /// The scope it recovers.
    pub scope: String,
    /// The exact latch file names it will clear.
    pub latches: Vec<String>,
    /// Unresolved operations carried forward.
    pub carried_forward_operations: Vec<CarriedOperation>,
    /// Registries that could not be read.
    pub registry_errors: Vec<String>,
}

/// The receipt of `recover apply` (docs/reference.md §3).
#[derive(Debug, Clone, Serialize)]
pub struct ApplyReceipt {
    /// True only when no latch covers the scope after the rescan.
    pub recovered: bool,
    /// RUNNING or FROZEN_SAFE.
    pub state: String,
    /// The epoch minted by this recovery.
    pub new_epoch: u64,
    /// Latch files moved to `breakglass.cleared/epoch-<new_epoch>/`.
    pub cleared: Vec<String>,
    /// Latch files still covering the scope.
    pub surviving: Vec<String>,
    /// Failures after the recovery took effect.
    pub warnings: Vec<String>,
}

impl Store {
    /// Fix the plan of a recovery of `scope` and record it as a `recovery_intent`.
    #[cfg_attr(not(feature = "owner"), allow(dead_code))]
    pub(crate) fn recover_plan(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
        census: &Census,
    ) -> Result<PlanReceipt, StoreError> {
        let reason = require_reason(reason)?;
        let wal = self.layout.wal();
        let (_guard, log, latches) = self.lock_and_scan_recording(self.records_deferred())?;
        self.read_confirmed_epoch(&log)?;
        let names: Vec<String> = latches
            .iter()
            .filter(|l| &l.scope == scope)
            .map(|l| l.file.clone())
            .collect();
        let carried = census.carried_forward();
        let plan = format!("plan_{}", self.env.random_hex(8));
        self.append_log(
            &wal,
            &log,
            vec![WalRecord::RecoveryIntent(RecoveryIntent {
                plan: plan.clone(),
                scope: scope.clone(),
                latches: names.clone(),
                carried_forward_operations: carried.clone(),
                registry_errors: census.errors.clone(),
                by: by.to_string(),
                reason,
                local: None,
            })],
            "recover.plan.wal",
        )?;
        Ok(PlanReceipt {
            plan,
            scope: scope.to_string(),
            latches: names,
            carried_forward_operations: carried,
            registry_errors: census.errors.clone(),
        })
    }

    /// Apply a plan: new epoch, move exactly the planned latches, rescan.
    #[cfg_attr(not(feature = "owner"), allow(dead_code))]
    pub(crate) fn recover_apply(
        &self,
        plan_id: &str,
        by: &str,
    ) -> Result<ApplyReceipt, StoreError> {
        let wal = self.layout.wal();
        let guard = self.lock_log_exclusive(&wal)?;
        let log = self.read_log(&wal, RefusalCode::ControlWalCorrupt)?;
        // Before anything is cleared: every latch an engage left unrecorded gets its record and
        // epoch advance, so no stop leaves `latches/` without its trace in the WAL.
        let log = if self.records_deferred() {
            let (present, faults) = self.latches().active(Some(&log));
            if let Some(fault) = faults.into_iter().next() {
                return Err(StoreError::Refused(fault));
            }
            self.record_deferred_locked(log, &present, None)?
        } else {
            log
        };
        let unknown = || {
            StoreError::refused(
                RefusalCode::PlanUnknown,
                format!("no pending recovery plan {plan_id:?}"),
            )
        };
        let intent = log.recovery_intent(plan_id).ok_or_else(unknown)?.clone();
        if log.plan_applied(plan_id) {
            return Err(StoreError::refused(
                RefusalCode::PlanUnknown,
                format!("plan {plan_id:?} was already applied"),
            ));
        }
        let scope = intent.scope;
        let reason = intent.reason;
        let planned = intent.latches;
        #[cfg(feature = "planted-bugs")]
        let planned = self.planted_names(&scope, planned);
        let machine = scope == Scope::Machine;
        if machine {
            self.write_state(
                ControlState::RecoveryPending,
                by,
                &reason,
                None,
                None,
                "recover.state.pending",
            )?;
        }
        let (log, epoch) = self.advance_epoch_locked(
            &log,
            &scope,
            AdvanceCause::Recover,
            by,
            &reason,
            Vec::new(),
            "recover.epoch",
        )?;
        let target_dir = self.layout.cleared_epoch(epoch.seq);
        self.ensure_dirs(&[&self.layout.cleared(), &target_dir])?;
        // The cleared folder's own entry must be durable, or a power cut loses the evidence of
        // what this recovery cleared (found by the model checker).
        self.fs
            .sync_dir(&self.layout.cleared(), "recover.cleared.parent.dirsync")
            .context(|| "syncing breakglass.cleared/".into())?;
        // And `breakglass.cleared/` itself, the first time it is made, is an entry of the home.
        let home = self.layout.home().to_path_buf();
        self.fs
            .sync_dir(&home, "recover.cleared.home.dirsync")
            .context(|| "syncing the control directory".into())?;
        let mut cleared = Vec::new();
        let mut warnings = Vec::new();
        for name in &planned {
            let from = self.layout.latch(name);
            match self
                .fs
                .rename(&from, &target_dir.join(name), "recover.move")
            {
                Ok(()) => cleared.push(name.clone()),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    // A vanished latch recorded only in the WAL: clearing it is recording it.
                    cleared.push(name.clone());
                    warnings.push(format!(
                        "{name} was not in latches/ (already moved or deleted)"
                    ));
                }
                Err(error) => return Err(error).context(|| format!("moving {name}")),
            }
        }
        self.fs
            .sync_dir(&target_dir, "recover.cleared.dirsync")
            .context(|| "syncing the cleared folder".into())?;
        self.fs
            .sync_dir(&self.layout.latches(), "recover.latches.dirsync")
            .context(|| "syncing latches/".into())?;

        // Rescan: anything still covering the scope — a racing engage included — survives.
        #[cfg(not(feature = "planted-bugs"))]
        let (latches, faults) = self.latches().active(Some(&log));
        #[cfg(feature = "planted-bugs")]
        let (latches, faults) = match self.planted {
            crate::planted::PlantedBug::SkipRescan => (Vec::new(), Vec::new()),
            _ => self.latches().active(Some(&log)),
        };
        let mut surviving: Vec<String> = latches
            .iter()
            .filter(|l| !cleared.contains(&l.file) && l.scope.covers_scope(&scope))
            .map(|l| l.file.clone())
            .collect();
        surviving.extend(
            faults
                .iter()
                .map(|f| format!("<{}: {}>", f.code, f.message)),
        );
        let recovered = surviving.is_empty();
        let state = if recovered {
            ControlState::Running
        } else {
            ControlState::FrozenSafe
        };
        let closing = self.append_log(
            &wal,
            &log,
            vec![WalRecord::RecoveryApplied(RecoveryApplied {
                plan: plan_id.to_string(),
                scope: scope.clone(),
                new_epoch: epoch.seq,
                cleared: cleared.clone(),
                surviving: surviving.clone(),
                state,
                by: by.to_string(),
            })],
            "recover.applied.wal",
        );
        drop(guard);
        if let Err(error) = closing {
            warnings.push(format!("recovery_applied could not be recorded: {error}"));
        }
        if machine {
            let why = if recovered {
                reason.clone()
            } else {
                "an engage raced this recovery; the machine is still latched".into()
            };
            if let Err(error) = self.write_state(state, by, &why, None, None, "recover.state.final")
            {
                warnings.push(format!("state.json could not be written: {error}"));
            }
        }
        Ok(ApplyReceipt {
            recovered,
            state: state.as_str().into(),
            new_epoch: epoch.seq,
            cleared,
            surviving,
            warnings,
        })
    }
}

impl Store {
    /// Whether recovery finishes deferred engage records before it clears (always, unless the
    /// `SkipDeferredRecord` bug is planted).
    fn records_deferred(&self) -> bool {
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::SkipDeferredRecord {
            return false;
        }
        true
    }
}

#[cfg(feature = "planted-bugs")]
impl Store {
    /// `PlantedBug::ClearByScope`: every latch of `scope` in `latches/` now, not the plan's names.
    fn planted_names(&self, scope: &Scope, planned: Vec<String>) -> Vec<String> {
        if self.planted != crate::planted::PlantedBug::ClearByScope {
            return planned;
        }
        let (latches, _) = self.latches().active(None);
        latches
            .into_iter()
            .filter(|l| &l.scope == scope)
            .map(|l| l.file)
            .collect()
    }
}
