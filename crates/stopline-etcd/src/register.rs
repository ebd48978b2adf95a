//! A gateway's registration and acknowledgements in etcd, on a lease.
//!
//! The gateway hands its latest [`ServerRecord`] over without waiting ([`Registration::publish`]
//! only stores it and wakes this thread). The thread writes `servers/<id>.json` and one key
//! `acks/<id>/<latch file>` per acknowledged latch (deleting those no longer held) in one
//! transaction, all attached to one lease, and keeps the lease alive only while the gateway keeps
//! publishing: a gateway that dies or wedges stops renewing, and its registration and
//! acknowledgements vanish with the lease ([`LEASE_TTL_S`]). Any etcd error drops the lease; the
//! next round grants a new one and writes everything again.

use crate::plane::EtcdPlane;
use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use stopline_core::ack::ServerRecord;

/// The lease's time to live: how long a dead gateway stays registered.
pub const LEASE_TTL_S: i64 = 5;
/// A gateway that has not published for this long is not kept alive.
const STALE_AFTER: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
struct Pending {
    record: Option<ServerRecord>,
    updated: Option<Instant>,
    fresh: bool,
}

/// The registration thread's shared state.
#[derive(Debug)]
pub struct Registration {
    plane: EtcdPlane,
    pending: Mutex<Pending>,
    wake: Condvar,
    withdrawn: AtomicBool,
}

struct Lease {
    id: i64,
    keeper: LeaseKeeper,
    stream: LeaseKeepAliveStream,
    acks: BTreeSet<String>,
    /// The registration last written (heartbeat aside) and when.
    written: Option<(serde_json::Value, Instant)>,
    renewed: Instant,
}

/// How often the lease is renewed and an unchanged registration rewritten.
const RENEW_EVERY: Duration = Duration::from_millis(1000);
const REWRITE_EVERY: Duration = Duration::from_secs(10);

impl Registration {
    /// Nothing registered yet.
    pub fn new(plane: EtcdPlane) -> Registration {
        Registration {
            plane,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            withdrawn: AtomicBool::new(false),
        }
    }

    /// Hand over the latest record (never blocks on the network).
    pub fn publish(&self, record: &ServerRecord) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.record = Some(record.clone());
        pending.updated = Some(Instant::now());
        pending.fresh = true;
        self.wake.notify_all();
    }

    /// Stop renewing; the registration vanishes with its lease.
    pub fn withdraw(&self) {
        self.withdrawn.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Start the registration thread.
    pub fn spawn(self: Arc<Self>, stop: Arc<AtomicBool>) {
        let spawned = std::thread::Builder::new()
            .name("stopline-etcd-register".into())
            .spawn(move || self.run(&stop));
        if let Err(error) = spawned {
            tracing::error!(%error, "cannot start the etcd registration thread");
        }
    }

    fn next_record(&self) -> Option<ServerRecord> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if !pending.fresh {
            pending = self
                .wake
                .wait_timeout(pending, Duration::from_millis(1000))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        pending.fresh = false;
        let alive = pending.updated.is_some_and(|u| u.elapsed() < STALE_AFTER);
        alive.then(|| pending.record.clone()).flatten()
    }

    fn run(&self, stop: &AtomicBool) {
        let handle = self.plane.client.handle();
        let mut client: Option<Client> = None;
        let mut lease: Option<Lease> = None;
        while !stop.load(Ordering::SeqCst) && !self.withdrawn.load(Ordering::SeqCst) {
            let Some(record) = self.next_record() else {
                continue;
            };
            if self.withdrawn.load(Ordering::SeqCst) {
                break;
            }
            let round = handle.block_on(async {
                if client.is_none() {
                    client = Some(
                        self.plane
                            .client
                            .connect_next()
                            .await
                            .map_err(|e| e.to_string())?,
                    );
                }
                let c = client.as_mut().expect("connected above");
                tokio::time::timeout(Duration::from_secs(2), self.round(c, &mut lease, &record))
                    .await
                    .map_err(|_| "etcd did not answer".to_string())?
            });
            if let Err(error) = round {
                tracing::debug!(%error, "etcd registration round failed; will re-register");
                client = None;
                lease = None;
            }
        }
        if let (Some(mut c), Some(lease)) = (client, lease) {
            let _ = handle.block_on(async {
                tokio::time::timeout(Duration::from_millis(500), c.lease_revoke(lease.id)).await
            });
        }
    }

    async fn round(
        &self,
        client: &mut Client,
        lease: &mut Option<Lease>,
        record: &ServerRecord,
    ) -> Result<(), String> {
        let text = |e: etcd_client::Error| e.to_string();
        if lease.is_none() {
            let granted = client.lease_grant(LEASE_TTL_S, None).await.map_err(text)?;
            let (keeper, stream) = client.lease_keep_alive(granted.id()).await.map_err(text)?;
            *lease = Some(Lease {
                id: granted.id(),
                keeper,
                stream,
                acks: BTreeSet::new(),
                written: None,
                renewed: Instant::now(),
            });
        }
        let held = lease.as_mut().expect("granted above");
        let names = &self.plane.names;
        let on_lease = || Some(PutOptions::new().with_lease(held.id));
        // The registration is rewritten when it changed (the heartbeat aside: the lease is the
        // liveness) and now and then; acknowledgements go out at once.
        let mut shape = serde_json::to_value(record).unwrap_or_default();
        shape["heartbeat_ms"] = 0.into();
        let mut ops = Vec::new();
        let stale = held
            .written
            .as_ref()
            .is_none_or(|(last, at)| *last != shape || at.elapsed() >= REWRITE_EVERY);
        if stale {
            let body = serde_json::to_vec(record).unwrap_or_default();
            ops.push(TxnOp::put(names.server(&record.id), body, on_lease()));
        }
        let wanted: BTreeSet<String> = record.acknowledged.iter().cloned().collect();
        for latch in wanted.difference(&held.acks) {
            ops.push(TxnOp::put(
                names.ack(&record.id, latch),
                record.heartbeat_ms.to_string(),
                on_lease(),
            ));
        }
        for latch in held.acks.difference(&wanted) {
            ops.push(TxnOp::delete(names.ack(&record.id, latch), None));
        }
        if !ops.is_empty() {
            client.txn(Txn::new().and_then(ops)).await.map_err(text)?;
        }
        held.acks = wanted;
        if stale {
            held.written = Some((shape, Instant::now()));
        }
        if held.renewed.elapsed() < RENEW_EVERY {
            return Ok(());
        }
        held.renewed = Instant::now();
        held.keeper.keep_alive().await.map_err(text)?;
        match held.stream.message().await.map_err(text)? {
            Some(answer) if answer.ttl() > 0 => Ok(()),
            _ => Err("the lease expired".into()),
        }
    }
}
