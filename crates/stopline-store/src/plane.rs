//! The backend trait: what a control plane must offer, whatever keeps its state.
//!
//! The local control directory ([`Store`]) implements it; the distributed backend (etcd) does
//! too, with the same names and the same fail-closed reads. Callers that must work against
//! either hold an `Arc<dyn ControlPlane>`. Operation journals, runs and the evidence log are
//! per-host and stay in the local [`Store`]; this trait covers latches, epochs, the WAL and
//! state — exactly what must be shared between hosts. A distributed backend also keeps the
//! gateway registrations and acknowledgements, and publishes the token verification key; the
//! local directory does neither (its gateways register in `servers/` and answer over loopback),
//! so those methods default to "not kept here".
//!
//! The owner's verbs (drain, recovery, repair, key rotation, reconciliation) are not on
//! [`ControlPlane`]: they are [`OwnerPlane`]'s, which exists only when the store is built with
//! its `owner` feature. Only `stopline-owner` (the owner console) and the model checker enable
//! it, so the gateway and the MCP proxy, which hold an `Arc<dyn ControlPlane>`, cannot name a
//! recovery verb, and built on their own do not even compile one (docs/reference.md, "The owner
//! console").

use crate::halts::DisengageReceipt;
use crate::ops::Census;
#[cfg(feature = "owner")]
use crate::recovery::{ApplyReceipt, PlanReceipt};
#[cfg(feature = "owner")]
use crate::repair::RepairReceipt;
use crate::{EngageOutcome, EngageRequest, Store, StoreError};
use std::time::Duration;
#[cfg(feature = "owner")]
use stopline_core::StateRecord;
use stopline_core::{ControlView, Scope};

/// A gateway registered with a distributed plane, and the latch files it acknowledged there.
#[derive(Debug, Clone)]
pub struct PlaneGateway {
    /// Its registration record (the body of `servers/<id>.json`).
    pub record: serde_json::Value,
    /// Latch files it acknowledged through the plane.
    pub acknowledged: Vec<String>,
}

/// What a distributed plane collected when waiting for acknowledgements of one latch.
#[derive(Debug, Clone, Default)]
pub struct PlaneAcks {
    /// Gateways that acknowledged in time.
    pub acknowledged_by: Vec<String>,
    /// Registered gateways that did not.
    pub unacknowledged: Vec<String>,
    /// Registrations that could not be read, and similar notes.
    pub warnings: Vec<String>,
}

/// A control plane's protocol verbs.
pub trait ControlPlane: Send + Sync + std::fmt::Debug {
    /// A short name for receipts and status (`local`, `etcd`).
    fn backend(&self) -> &'static str;
    /// Engage, latch-first.
    fn engage(&self, request: &EngageRequest) -> Result<EngageOutcome, StoreError>;
    /// A fresh, fail-closed view.
    fn load_view(&self) -> ControlView;
    /// [`ControlPlane::load_view`] and this host's census of unresolved operations, the one its
    /// blocked targets come from (one read of the registry for both: `status`).
    fn load_view_and_census(&self) -> (ControlView, Census);
    /// Lift the halts of exactly `scope`.
    fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError>;
    /// Revoke one token (`scope` is a [`Scope::Token`]): advance its epoch revision, durably,
    /// before answering (docs/reference.md §5, "Revoking one token"). Returns the map after.
    fn revoke_token(
        &self,
        scope: &Scope,
        by: &str,
        reason: &str,
    ) -> Result<stopline_core::EpochMap, StoreError>;
    /// The gateways registered with the plane itself. `None`: this plane keeps no
    /// registrations, and the local `servers/` directory is the registry.
    fn gateways(&self) -> Option<Result<Vec<PlaneGateway>, StoreError>> {
        None
    }
    /// Wait at most `timeout` for every gateway registered with the plane to acknowledge
    /// `latch_file`. `None`: the plane cannot (it keeps no registrations, or it is unreachable),
    /// so the caller asks the gateways registered in the local `servers/` directory.
    fn collect_acks(&self, latch_file: &str, timeout: Duration) -> Option<PlaneAcks> {
        let _ = (latch_file, timeout);
        None
    }
    /// The token verification key the plane publishes to every host (`Ok(None)`: none is
    /// published, or this plane publishes none; the host's own key stands).
    fn published_key(&self) -> Result<Option<[u8; 32]>, StoreError> {
        Ok(None)
    }
    /// Publish `key` as the plane's verification key unless one already is; returns the key that
    /// stands afterwards (another host's, when it published first).
    fn publish_key(&self, key: [u8; 32]) -> Result<[u8; 32], StoreError> {
        Ok(key)
    }
    /// Read the published verification key and pin it on this host (`init --control`); the
    /// pinned key's sha256 (`Ok(None)`: nothing published, or a plane that publishes none).
    fn pin_key(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
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
    fn load_view_and_census(&self) -> (ControlView, Census) {
        Store::load_view_and_census(self)
    }
    fn disengage(
        &self,
        scope: &Scope,
        reason: &str,
        by: &str,
    ) -> Result<DisengageReceipt, StoreError> {
        Store::disengage(self, scope, reason, by)
    }
    fn revoke_token(
        &self,
        scope: &Scope,
        by: &str,
        reason: &str,
    ) -> Result<stopline_core::EpochMap, StoreError> {
        Store::revoke_token(self, scope, by, reason)
    }
}

/// The owner's verbs of a control plane: only the owner console calls them, after proving
/// itself (`stopline_owner::console::prove`). Not reachable through [`ControlPlane`]; built only
/// with the store's `owner` feature.
#[cfg(feature = "owner")]
pub trait OwnerPlane: ControlPlane {
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
    /// Settle an operation in doubt on this host (`ops reconcile`): its outcome as the owner
    /// checked it by hand.
    fn reconcile(
        &self,
        op: &str,
        outcome: &str,
        reason: &str,
        by: &str,
    ) -> Result<stopline_core::ops::Operation, StoreError>;
    /// Replace the published verification key with `key` and pin it here, or with `None` pin
    /// the key the plane publishes now (owner console only; the caller proves it).
    fn rotate_key(&self, key: Option<[u8; 32]>) -> Result<[u8; 32], StoreError>;
}

/// [`OwnerPlane::rotate_key`] of a plane that publishes no key: refused.
#[cfg(feature = "owner")]
fn rotate_refused() -> StoreError {
    StoreError::refused(
        stopline_core::RefusalCode::BadRequest,
        "rotate-key replaces the key a distributed plane publishes: it needs --control etcd://… (a local home verifies with its own key)",
    )
}

#[cfg(feature = "owner")]
impl OwnerPlane for Store {
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
    fn reconcile(
        &self,
        op: &str,
        outcome: &str,
        reason: &str,
        by: &str,
    ) -> Result<stopline_core::ops::Operation, StoreError> {
        Store::reconcile(self, op, outcome, reason, by)
    }
    fn rotate_key(&self, key: Option<[u8; 32]>) -> Result<[u8; 32], StoreError> {
        let _ = key;
        Err(rotate_refused())
    }
}
