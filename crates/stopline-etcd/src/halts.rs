//! Disengage and drain through etcd, each one transaction guarded by compare-and-swap.
//!
//! Disengage clears the halt-level latches of exactly one scope: the `disengaged` WAL record and
//! the deletion of exactly those latch keys commit together, and only if none of them changed
//! since they were read (an emergency of that scope refuses it: `emergency_requires_recovery`).
//! Halts of the scope that a fallback engage left in this host's local directory are lifted
//! there too. Drain needs an active machine latch and a deadline in 1..=3600 s; `drain_started`
//! and the new `state.json` commit together. Who may call these is decided by the caller.

use crate::plane::EtcdPlane;
use crate::read::append;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use stopline_core::refusal::require_reason;
use stopline_core::wal_record::{Disengaged, DrainStarted, WalRecord};
use stopline_core::{ControlState, Level, RefusalCode, Scope, StateRecord};
use stopline_store::halts::{check_drain_deadline, drain_window, DisengageReceipt};
use stopline_store::StoreError;

impl EtcdPlane {
    /// Clear the halt-level latches of exactly `scope`, in etcd and on this host.
    pub fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError> {
        let reason = require_reason(reason)?;
        let local_halts = self
            .local
            .load_view()
            .latches
            .iter()
            .any(|l| &l.scope == scope);
        self.retry_cas("disengage", || {
            let snapshot = self.snapshot()?;
            let log = snapshot.log()?;
            let latches = snapshot.active_latches(Some(&log));
            let of_scope: Vec<_> = latches.iter().filter(|l| &l.scope == scope).collect();
            if let Some(emergency) = of_scope.iter().find(|l| l.level == Level::Emergency) {
                return Err(StoreError::refused(
                    RefusalCode::EmergencyRequiresRecovery,
                    format!("{} is an emergency latch of {scope}; only the owner console's recovery clears it", emergency.file),
                ));
            }
            let names: Vec<String> = of_scope.iter().map(|l| l.file.clone()).collect();
            let mut receipt = DisengageReceipt {
                disengaged: true,
                scope: scope.to_string(),
                cleared: names.clone(),
                warnings: Vec::new(),
            };
            if !names.is_empty() {
                let record = WalRecord::Disengaged(Disengaged {
                    scope: scope.clone(),
                    latches: names.clone(),
                    by: by.to_string(),
                    reason: reason.clone(),
                });
                let (_, puts, guard) = append(&self.names, &log, vec![record], &self.ts());
                let mut compares = guard;
                let mut ops = puts;
                for (file, v) in snapshot.latches.iter().filter(|(f, _)| names.contains(f)) {
                    let key = self.names.latch(file);
                    compares.push(Compare::mod_revision(
                        key.clone(),
                        CompareOp::Equal,
                        v.mod_revision,
                    ));
                    ops.push(TxnOp::delete(key, None));
                }
                let txn = Txn::new().when(compares).and_then(ops);
                if !self.commit("disengage", txn)?.succeeded() {
                    return Ok(None);
                }
            }
            if local_halts {
                let local = self.local.disengage(scope, &reason, by)?;
                receipt.cleared.extend(local.cleared);
            }
            if receipt.cleared.is_empty() {
                receipt
                    .warnings
                    .push(format!("no halt latch of exactly {scope} was active"));
            }
            Ok(Some(receipt))
        })
    }

    /// Start a drain: DRAINING until `deadline_s` from now.
    pub fn drain(
        &self,
        deadline_s: u64,
        reason: &str,
        by: &str,
    ) -> Result<StateRecord, StoreError> {
        let reason = require_reason(reason)?;
        check_drain_deadline(deadline_s)?;
        self.retry_cas("drain", || {
            let snapshot = self.snapshot()?;
            let log = snapshot.log()?;
            let mut latches = snapshot.active_latches(Some(&log));
            latches.extend(self.local.load_view().latches);
            let now = self.local.now_ms();
            let (deadline, earliest) = drain_window(&latches, deadline_s, now)?;
            let record = StateRecord {
                state: ControlState::Draining,
                by: by.to_string(),
                reason: reason.clone(),
                since: stopline_store::env::rfc3339(now),
                deadline: Some(stopline_store::env::rfc3339(deadline)),
                deadline_unix_ms: Some(deadline),
                prepared_before_unix_ms: Some(earliest),
            };
            let started = WalRecord::DrainStarted(DrainStarted {
                deadline: stopline_store::env::rfc3339(deadline),
                prepared_before: stopline_store::env::rfc3339(earliest),
                by: by.to_string(),
                reason: reason.clone(),
            });
            let (_, mut ops, guard) = append(&self.names, &log, vec![started], &self.ts());
            ops.push(self.put_state(&record));
            let txn = Txn::new()
                .when([guard, vec![self.state_guard(&snapshot)]].concat())
                .and_then(ops);
            let committed = self.commit("drain", txn)?.succeeded();
            Ok(committed.then_some(record))
        })
    }

    /// `state.json` is still what `snapshot` read.
    pub(crate) fn state_guard(&self, snapshot: &crate::read::Snapshot) -> Compare {
        let revision = snapshot.state.as_ref().map_or(0, |v| v.mod_revision);
        Compare::mod_revision(self.names.state(), CompareOp::Equal, revision)
    }

    /// The put of `record` as `state.json`.
    pub(crate) fn put_state(&self, record: &StateRecord) -> TxnOp {
        let bytes = serde_json::to_vec_pretty(record).expect("a state record always serializes");
        TxnOp::put(self.names.state(), bytes, None)
    }
}
