//! The backend trait: what a control plane must offer, whatever keeps its state.
//!
//! The local control directory ([`Store`]) implements it; the distributed backend (etcd) does
//! too, with the same names and the same fail-closed reads. Callers that must work against
//! either hold an `Arc<dyn ControlPlane>`. Operation journals, runs and the evidence log are
//! per-host and stay in the local [`Store`]; this trait covers latches, epochs, the WAL and
//! state — exactly what must be shared between hosts.

use crate::halts::DisengageReceipt;
use crate::ops::Census;
use crate::recovery::{ApplyReceipt, PlanReceipt};
use crate::repair::RepairReceipt;
use crate::{EngageOutcome, EngageRequest, Store, StoreError};
use stopline_core::{ControlView, Scope, StateRecord};

/// A control plane's protocol verbs.
pub trait ControlPlane: Send + Sync {
    /// A short name for receipts and status (`local`, `etcd`).
    fn backend(&self) -> &'static str;
    /// Engage, latch-first.
    fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError>;
    /// A fresh, fail-closed view.
    fn load_view(&self) -> ControlView;
    /// Lift the halts of exactly `scope`.
    fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError>;
    /// Start a drain.
    fn drain(&self, deadline_s: u64, reason: &str, by: &str) -> Result<StateRecord, StoreError>;
    /// Fix a recovery plan.
    fn recover_plan(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
        census: &Census,
    ) -> Result<PlanReceipt, StoreError>;
    /// Apply a recovery plan.
    fn recover_apply(&self, plan_id: &str, by: &str) -> Result<ApplyReceipt, StoreError>;
    /// The owner's repair.
    fn repair(
        &self,
        reason: &str,
        by: &str,
        highest_issued_epoch: u64,
    ) -> Result<RepairReceipt, StoreError>;
}

impl ControlPlane for Store {
    fn backend(&self) -> &'static str {
        "local"
    }
    fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError> {
        Store::engage(self, request)
    }
    fn load_view(&self) -> ControlView {
        Store::load_view(self)
    }
    fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError> {
        Store::disengage(self, scope, reason, by)
    }
    fn drain(&self, deadline_s: u64, reason: &str, by: &str) -> Result<StateRecord, StoreError> {
        Store::drain(self, deadline_s, reason, by)
    }
    fn recover_plan(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
        census: &Census,
    ) -> Result<PlanReceipt, StoreError> {
        Store::recover_plan(self, scope, reason, by, census)
    }
    fn recover_apply(&self, plan_id: &str, by: &str) -> Result<ApplyReceipt, StoreError> {
        Store::recover_apply(self, plan_id, by)
    }
    fn repair(
        &self,
        reason: &str,
        by: &str,
        highest_issued_epoch: u64,
    ) -> Result<RepairReceipt, StoreError> {
        Store::repair(self, reason, by, highest_issued_epoch)
    }
}
