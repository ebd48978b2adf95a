//! Recovery through etcd: `plan` fixes the exact latch names; `apply` commits the whole recovery
//! in one transaction.
//!
//! `apply`'s transaction advances the scope's epoch, moves exactly the planned latch keys to
//! `breakglass.cleared/epoch-<new>/`, appends `epoch_advance` and `recovery_applied`, and (machine
//! scope) writes `state.json` — guarded so that it commits only if no latch key was created or
//! changed since the read it was computed from (`mod_revision < read + 1` over `latches/`), the
//! WAL did not move, and the epoch and state are the ones read. A latch engaged while the
//! recovery runs therefore either lands before the commit (the guard fails; re-read; the new
//! latch survives, `recovered: false`, FROZEN_SAFE) or after it (a stop after the recovery). No
//! interleaving yields `recovered: true` while a covering latch exists. Latches a fallback engage
//! left in this host's directory are planned and recovered there too, by the local protocol.

use crate::plane::EtcdPlane;
use crate::read::append;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use stopline_core::refusal::require_reason;
use stopline_core::wal_record::{
    AdvanceCause, LocalIntent, RecoveryApplied, RecoveryIntent, WalRecord,
};
use stopline_core::{ControlState, RefusalCode, Scope, StateRecord};
use stopline_store::ops::Census;
use stopline_store::recovery::{ApplyReceipt, PlanReceipt};
use stopline_store::{OwnerPlane, StoreError};

impl EtcdPlane {
    /// Fix the plan of a recovery of `scope` and record it as a `recovery_intent`.
    pub fn recover_plan(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
        census: &Census,
    ) -> Result<PlanReceipt, StoreError> {
        let reason = require_reason(reason)?;
        let has_local = self
            .local
            .load_view()
            .latches
            .iter()
            .any(|l| &l.scope == scope);
        let local = match has_local {
            true => Some(OwnerPlane::recover_plan(
                &self.local,
                scope,
                &reason,
                by,
                census,
            )?),
            false => None,
        };
        let carried = census.carried_forward();
        self.retry_cas("recover plan", || {
            let snapshot = self.snapshot()?;
            let log = snapshot.log()?;
            snapshot.epoch_map(&log)?;
            let names: Vec<String> = snapshot
                .active_latches(Some(&log))
                .iter()
                .filter(|l| &l.scope == scope)
                .map(|l| l.file.clone())
                .collect();
            let plan = format!("plan_{}", self.local.env().random_hex(8));
            let local_latches = local
                .as_ref()
                .map(|p| p.latches.clone())
                .unwrap_or_default();
            let intent = WalRecord::RecoveryIntent(RecoveryIntent {
                plan: plan.clone(),
                scope: scope.clone(),
                latches: names.clone(),
                carried_forward_operations: carried.clone(),
                registry_errors: census.errors.clone(),
                by: by.to_string(),
                reason: reason.clone(),
                local: Some(LocalIntent {
                    local_plan: local.as_ref().map(|p| p.plan.clone()),
                    local_latches: local_latches.clone(),
                }),
            });
            let (_, puts, guard) = append(&self.names, &log, vec![intent], &self.ts());
            let txn = Txn::new().when(guard).and_then(puts);
            if !self.commit("recover plan", txn)?.succeeded() {
                return Ok(None);
            }
            let mut latches = names;
            latches.extend(local_latches);
            Ok(Some(PlanReceipt {
                plan,
                scope: scope.to_string(),
                latches,
                carried_forward_operations: carried.clone(),
                registry_errors: census.errors.clone(),
            }))
        })
    }

    /// Apply a plan: one transaction in etcd, then this host's local part, if any.
    pub fn recover_apply(&self, plan_id: &str, by: &str) -> Result<ApplyReceipt, StoreError> {
        self.retry_cas("recover apply", || {
            let snapshot = self.snapshot()?;
            let log = snapshot.log()?;
            let unknown = |why: String| StoreError::refused(RefusalCode::PlanUnknown, why);
            let intent = log
                .recovery_intent(plan_id)
                .ok_or_else(|| unknown(format!("no pending recovery plan {plan_id:?}")))?
                .clone();
            if log.plan_applied(plan_id) {
                return Err(unknown(format!("plan {plan_id:?} was already applied")));
            }
            let scope = intent.scope.clone();
            let reason = intent.reason.clone();
            let planned = intent.latches.clone();
            let local = intent.local.clone().unwrap_or(LocalIntent {
                local_plan: None,
                local_latches: Vec::new(),
            });
            let local_planned = local.local_latches;
            let epoch = snapshot.epoch_map(&log)?;
            let next = self.advance_now(&epoch, &scope).map_err(|e| {
                StoreError::refused(RefusalCode::ControlEpochUnconfirmed, e.to_string())
            })?;
            let mut ops = Vec::new();
            let (mut cleared, mut warnings) = (Vec::new(), Vec::new());
            for name in &planned {
                match snapshot.latches.iter().find(|(f, _)| f == name) {
                    Some((_, v)) => {
                        ops.push(TxnOp::delete(self.names.latch(name), None));
                        let moved = self.names.cleared_latch(next.seq, name);
                        ops.push(TxnOp::put(moved, v.value.clone(), None));
                    }
                    None => warnings.push(format!(
                        "{name} was not in latches/ (already moved or deleted)"
                    )),
                }
                cleared.push(name.clone());
            }
            // The rescan, computed from the same read the guard pins.
            let mut surviving: Vec<String> = snapshot
                .active_latches(Some(&log))
                .iter()
                .filter(|l| !cleared.contains(&l.file) && l.scope.covers_scope(&scope))
                .map(|l| l.file.clone())
                .collect();
            surviving.extend(
                self.local
                    .load_view()
                    .latches
                    .iter()
                    .filter(|l| !local_planned.contains(&l.file) && l.scope.covers_scope(&scope))
                    .map(|l| l.file.clone()),
            );
            let recovered = surviving.is_empty();
            let state = if recovered {
                ControlState::Running
            } else {
                ControlState::FrozenSafe
            };
            let advance =
                self.advance_fields(&epoch, &next, &scope, AdvanceCause::Recover, by, &reason);
            let applied = WalRecord::RecoveryApplied(RecoveryApplied {
                plan: plan_id.to_string(),
                scope: scope.clone(),
                new_epoch: next.seq,
                cleared: cleared.clone(),
                surviving: surviving.clone(),
                state,
                by: by.to_string(),
            });
            let records = vec![advance, applied];
            let (after, puts, guard) = append(&self.names, &log, records, &self.ts());
            let mut next_snapshot = next.clone();
            next_snapshot.wal_seq = after.entries[after.entries.len() - 2].seq;
            ops.extend(puts);
            let bytes = serde_json::to_vec(&next_snapshot).expect("an epoch map always serializes");
            ops.push(TxnOp::put(self.names.epoch(), bytes, None));
            let latches_unchanged =
                Compare::mod_revision(self.names.latches(), CompareOp::Less, snapshot.revision + 1)
                    .with_prefix();
            let mut compares = guard;
            compares.extend([self.epoch_guard(&snapshot), latches_unchanged]);
            if scope == Scope::Machine {
                let why = if recovered {
                    reason.clone()
                } else {
                    "an engage raced this recovery; the machine is still latched".into()
                };
                let now = stopline_store::env::rfc3339(self.local.now_ms());
                let record = StateRecord {
                    state,
                    by: by.into(),
                    reason: why,
                    since: now,
                    ..StateRecord::running()
                };
                ops.push(self.put_state(&record));
                compares.push(self.state_guard(&snapshot));
            }
            if !self
                .commit("recover apply", Txn::new().when(compares).and_then(ops))?
                .succeeded()
            {
                return Ok(None);
            }
            let mut receipt = ApplyReceipt {
                recovered,
                state: state.as_str().into(),
                new_epoch: next.seq,
                cleared,
                surviving,
                warnings,
            };
            if let Some(local_plan) = &local.local_plan {
                self.apply_local(local_plan, by, &mut receipt);
            }
            Ok(Some(receipt))
        })
    }

    /// Apply the local part of a plan and fold its receipt into `receipt`.
    fn apply_local(&self, local_plan: &str, by: &str, receipt: &mut ApplyReceipt) {
        match OwnerPlane::recover_apply(&self.local, local_plan, by) {
            Ok(local) => {
                receipt.cleared.extend(local.cleared);
                receipt.surviving.extend(local.surviving);
                receipt.warnings.extend(local.warnings);
                if !local.recovered {
                    receipt.recovered = false;
                    receipt.state = ControlState::FrozenSafe.as_str().into();
                }
            }
            Err(error) => {
                receipt.recovered = false;
                receipt.state = ControlState::FrozenSafe.as_str().into();
                receipt
                    .warnings
                    .push(format!("the local part of the plan failed: {error}"));
            }
        }
    }
}
