//! `impl ControlPlane for EtcdPlane`: the verbs every surface calls (and `impl OwnerPlane`: the
//! owner console's), each handed to the module
//! that does it in etcd (`engage.rs`, `halts.rs`, `recovery.rs`, `repair.rs`, `gateways.rs`), and
//! the merged view. Apart from `plane.rs` so that the plane's own type depends on none of them
//! (they all build on it): the crate's modules import one another one way only.

use crate::plane::EtcdPlane;
use std::time::Duration;
use stopline_core::ops::Operation;
use stopline_core::{ControlView, Scope, StateRecord};
use stopline_store::halts::DisengageReceipt;
use stopline_store::ops::Census;
use stopline_store::recovery::{ApplyReceipt, PlanReceipt};
use stopline_store::repair::RepairReceipt;
use stopline_store::{
    ControlPlane, EngageOutcome, EngageRequest, OwnerPlane, PlaneAcks, PlaneGateway, StoreError,
};

impl ControlPlane for EtcdPlane {
    fn backend(&self) -> &'static str {
        "etcd"
    }
    fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError> {
        EtcdPlane::engage(self, request)
    }
    fn load_view(&self) -> ControlView {
        crate::merge::merge(self.etcd_view(), self.local.load_view())
    }
    fn load_view_and_census(&self) -> (ControlView, Census) {
        let (local, census) = self.local.load_view_and_census();
        (crate::merge::merge(self.etcd_view(), local), census)
    }
    fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError> {
        EtcdPlane::disengage(self, scope, reason, by)
    }
    fn revoke_token(
        &self,
        scope: &Scope,
        by: &str,
        reason: &str,
    ) -> Result<stopline_core::EpochMap, StoreError> {
        EtcdPlane::revoke_token(self, scope, by, reason)
    }
    fn gateways(&self) -> Option<Result<Vec<PlaneGateway>, StoreError>> {
        Some(crate::gateways::registered(self).map_err(StoreError::from))
    }
    fn collect_acks(&self, latch_file: &str, timeout: Duration) -> Option<PlaneAcks> {
        crate::gateways::collect_acks(self, latch_file, timeout).ok()
    }
    fn published_key(&self) -> Result<Option<[u8; 32]>, StoreError> {
        crate::gateways::published_key(self)
    }
    fn publish_key(&self, key: [u8; 32]) -> Result<[u8; 32], StoreError> {
        crate::gateways::publish_key(self, key)
    }
    fn pin_key(&self) -> Result<Option<String>, StoreError> {
        let key = crate::gateways::published_key(self)?;
        Ok(key.as_ref().map(crate::marks::fingerprint))
    }
}

impl OwnerPlane for EtcdPlane {
    fn drain(&self, deadline_s: u64, reason: &str, by: &str) -> Result<StateRecord, StoreError> {
        EtcdPlane::drain(self, deadline_s, reason, by)
    }
    fn recover_plan(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
        census: &Census,
    ) -> Result<PlanReceipt, StoreError> {
        EtcdPlane::recover_plan(self, scope, reason, by, census)
    }
    fn recover_apply(&self, plan_id: &str, by: &str) -> Result<ApplyReceipt, StoreError> {
        EtcdPlane::recover_apply(self, plan_id, by)
    }
    fn repair(
        &self,
        reason: &str,
        by: &str,
        highest_issued_epoch: u64,
    ) -> Result<RepairReceipt, StoreError> {
        let mut receipt = EtcdPlane::repair(self, reason, by, highest_issued_epoch)?;
        // A plane below this host's high-water marks is re-founded past them.
        if let Some(epoch) = self.refound(reason, by)? {
            receipt.plane_refounded = true;
            receipt.nothing_to_repair = false;
            receipt.epoch_seq = epoch;
        }
        Ok(receipt)
    }
    fn reconcile(
        &self,
        op: &str,
        outcome: &str,
        reason: &str,
        by: &str,
    ) -> Result<Operation, StoreError> {
        // Operation journals are this host's, whatever keeps the latches.
        OwnerPlane::reconcile(&self.local, op, outcome, reason, by)
    }
    fn rotate_key(&self, key: Option<[u8; 32]>) -> Result<[u8; 32], StoreError> {
        crate::gateways::rotate_key(self, key)
    }
}
