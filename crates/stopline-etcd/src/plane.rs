//! [`EtcdPlane`]: the `ControlPlane` kept in etcd, beside this host's local control directory.
//!
//! Latches, the WAL, the epoch and `state.json` live under the prefix; operation journals, runs,
//! evidence and the signing seed stay in the local [`Store`]. The local store is also the
//! fallback: an engage that cannot reach etcd writes the local latch, which contains this host,
//! and says `distributed_publish_failed`. That is why every view this plane returns is the
//! *merge* of the etcd view and the local view ([`crate::merge`]): union of latches and faults,
//! epochs combined so that neither side's revocation is lost. An etcd that cannot be read is a
//! fault (`distributed_unavailable`), which closes every gate.

use crate::access::Access;
use crate::client::{EtcdClient, EtcdError};
use crate::names::Names;
use crate::read::Snapshot;
use crate::url::EtcdTarget;
use etcd_client::{Txn, TxnResponse};
use std::sync::Arc;
use stopline_core::{ControlView, Refusal, RefusalCode};
use stopline_store::Store;

/// How many times a verb re-reads and retries after losing a compare-and-swap race.
pub const CAS_ATTEMPTS: usize = 16;

/// The control plane in etcd, with this host's control directory beside it.
#[derive(Debug, Clone)]
pub struct EtcdPlane {
    pub(crate) client: Arc<EtcdClient>,
    pub(crate) names: Names,
    pub(crate) local: Store,
    /// `keys/verify.pub` once read: it is written once and never changes.
    pub(crate) verify_key: Arc<std::sync::OnceLock<[u8; 32]>>,
}

impl EtcdPlane {
    /// A plane for `target`, with `local` as this host's control directory. Connects lazily.
    pub fn new(target: EtcdTarget, local: Store) -> std::io::Result<EtcdPlane> {
        EtcdPlane::with_access(target, Access::default(), local)
    }

    /// [`EtcdPlane::new`] over TLS and/or as an etcd user (`[etcd]` in `config.toml`).
    pub fn with_access(
        target: EtcdTarget,
        access: Access,
        local: Store,
    ) -> std::io::Result<EtcdPlane> {
        let names = Names::new(&target.prefix);
        Ok(EtcdPlane {
            client: Arc::new(EtcdClient::with_access(target, access)?),
            names,
            local,
            verify_key: Arc::default(),
        })
    }

    /// The client (shared with the gateway's watch source).
    pub fn client(&self) -> &Arc<EtcdClient> {
        &self.client
    }

    /// The key names under the prefix.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// This host's control directory.
    pub fn local(&self) -> &Store {
        &self.local
    }

    /// One consistent read of the control records in etcd.
    pub fn snapshot(&self) -> Result<Snapshot, EtcdError> {
        Snapshot::fetch(&self.client, &self.names)
    }

    /// The etcd side of the view alone (no local latches): a read failure is a fault, and so is
    /// a plane below this host's high-water marks ([`EtcdPlane::judge`]).
    pub fn etcd_view(&self) -> ControlView {
        match self.snapshot() {
            Ok(snapshot) => self.judge(&snapshot),
            Err(error) => ControlView::closed(unreachable(&error)),
        }
    }

    /// Commit `txn`; `Ok(false)` when a compare failed (someone else wrote first).
    pub(crate) fn commit(&self, what: &str, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.client.call(what, move |mut client| {
            let txn = txn.clone();
            async move { client.txn(txn).await }
        })
    }

    /// Run one compare-and-swap read-modify-write until it commits: `attempt` reads, decides
    /// and commits, answering `Some(result)` when its transaction succeeded and `None` when it
    /// lost the race (another writer changed what its guard pinned; it is read again). An error
    /// ends it at once. After [`CAS_ATTEMPTS`] lost races the verb gives up with
    /// [`EtcdError::Contention`] (`distributed_unavailable`): never a partial write, since every
    /// attempt is one transaction.
    pub(crate) fn retry_cas<T, E: From<EtcdError>>(
        &self,
        what: &str,
        mut attempt: impl FnMut() -> Result<Option<T>, E>,
    ) -> Result<T, E> {
        for _ in 0..CAS_ATTEMPTS {
            if let Some(done) = attempt()? {
                return Ok(done);
            }
        }
        Err(EtcdError::Contention(format!("{what}: {CAS_ATTEMPTS} attempts lost the race")).into())
    }

    /// Now, RFC 3339, from the local store's clock.
    pub(crate) fn ts(&self) -> String {
        stopline_store::env::rfc3339(self.local.now_ms())
    }

    /// The map after advancing `scope` now, with the revisions past `[tokens] max_ttl_s` plus
    /// the margin folded away, as the local directory folds them (`EpochMap::advanced_at`).
    pub(crate) fn advance_now(
        &self,
        epoch: &stopline_core::EpochMap,
        scope: &stopline_core::Scope,
    ) -> Result<stopline_core::EpochMap, stopline_core::epoch::EpochExhausted> {
        let now_s = self.local.now_ms().div_euclid(1000);
        epoch.advanced_at(scope, now_s, self.local.fold_horizon_s())
    }
}

/// The fault an unreachable etcd means: every gate closes.
pub fn unreachable(error: &EtcdError) -> Refusal {
    Refusal::new(RefusalCode::DistributedUnavailable, error.to_string())
}
