//! This gateway's registration in `servers/` and its heartbeat.
//!
//! The record ([`ServerRecord`], shared with the engaging side in `stopline-control`) names the
//! pid and start time, the acknowledgement protocol, both addresses, and the latches this
//! gateway acknowledges: those its view holds with no call admitted under an older view still
//! waiting to be handed upstream. It is rewritten atomically through the store every heartbeat
//! and after every acknowledgement, and removed on a graceful stop. A distributed view source
//! also carries it to its backend (`servers/` and `acks/` under the etcd prefix). The heartbeat
//! runs on its own thread so that request load cannot make a live gateway look dead.

use crate::budget::Ledger;
use crate::inflight::DispatchTracker;
use crate::view::ViewHolder;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stopline_control::acks::GATEWAY_PROTOCOL;
use stopline_core::ack::{BudgetNearLimit, ServerRecord};
use stopline_store::{Store, StoreError};

/// The heartbeat interval.
pub const HEARTBEAT: Duration = Duration::from_millis(1000);

/// Keeps `servers/<id>.json` current.
#[derive(Debug)]
pub struct Registry {
    store: Store,
    view: Arc<ViewHolder>,
    tracker: Arc<DispatchTracker>,
    /// The budgets it serves: those near their limit go into every heartbeat's record.
    ledger: Option<Arc<Ledger>>,
    record: Mutex<ServerRecord>,
    registered: AtomicBool,
    /// Set by [`Registry::remove`]: a stopping gateway never writes its registration again.
    closed: Mutex<bool>,
}

impl Registry {
    /// A registry for this process; nothing is written until [`Registry::write`].
    pub fn new(
        store: Store,
        view: Arc<ViewHolder>,
        tracker: Arc<DispatchTracker>,
        id: String,
        listen: String,
        ack_addr: String,
        config_hash: String,
    ) -> Registry {
        let pid = std::process::id();
        let record = ServerRecord {
            id,
            pid,
            start_time: stopline_store::ops::process_start_time(pid).unwrap_or(0),
            protocol: GATEWAY_PROTOCOL,
            listen,
            ack_addr,
            heartbeat_ms: 0,
            acknowledged: Vec::new(),
            degraded: false,
            notes: Vec::new(),
            config_hash,
            budgets_near_limit: Vec::new(),
        };
        Registry {
            store,
            view,
            tracker,
            ledger: None,
            record: Mutex::new(record),
            registered: AtomicBool::new(false),
            closed: Mutex::new(false),
        }
    }

    /// Report the budgets of `ledger` that are near their limit in every heartbeat.
    pub fn with_ledger(mut self, ledger: Arc<Ledger>) -> Registry {
        self.ledger = Some(ledger);
        self
    }

    /// The registration id for a process: `gateway-<pid>-<start time>`.
    pub fn id_for_this_process() -> String {
        stopline_control::view_source::gateway_id_for_this_process()
    }

    /// The hash of the configuration now in force (after a reload that took the whole file),
    /// written with the next heartbeat.
    pub fn set_config_hash(&self, config_hash: String) {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .config_hash = config_hash;
    }

    /// True once the registration has been written.
    pub fn is_registered(&self) -> bool {
        self.registered.load(Ordering::SeqCst)
    }

    /// Acknowledge `latch_files` (the view holds them and nothing older is waiting) and write.
    pub fn acknowledge(&self, latch_files: Vec<String>) -> Result<(), StoreError> {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .acknowledged = latch_files;
        self.write()
    }

    /// Refresh the acknowledged set from the current view (when nothing older is waiting),
    /// stamp the heartbeat and write the record.
    pub fn heartbeat(&self) -> Result<(), StoreError> {
        let snapshot = self.view.load();
        if self
            .tracker
            .wait_older_than(snapshot.generation, Instant::now())
        {
            self.record
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .acknowledged = snapshot.latch_files.iter().cloned().collect();
        }
        self.write()
    }

    /// Write the record now.
    pub fn write(&self) -> Result<(), StoreError> {
        let bytes = {
            let mut record = self.record.lock().unwrap_or_else(|p| p.into_inner());
            record.heartbeat_ms = self.store.now_ms();
            record.degraded = self.view.is_degraded();
            record.notes = self.view.notes();
            record.budgets_near_limit = self.near_limit(record.heartbeat_ms);
            serde_json::to_vec_pretty(&*record).unwrap_or_default()
        };
        let closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        if *closed {
            return Ok(());
        }
        // A distributed source carries the registration to its backend (queued, never blocking).
        self.view.source().publish(&self.record());
        let dir = self.store.layout().servers();
        // A home that vanished under a running gateway is not re-created by its heartbeat: an
        // empty new home would read as "no stop"; the view reports `control_home_missing`.
        if !self
            .store
            .fs()
            .exists(self.store.layout().home())
            .unwrap_or(false)
        {
            return Ok(());
        }
        self.store.ensure_dirs(&[&dir])?;
        let id = self
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .id
            .clone();
        // Liveness data: visible at once, not waited on the disk for (it dies with this
        // process; the acknowledgement itself is the answer on the ack socket).
        self.store
            .replace_visible(&dir.join(format!("{id}.json")), &bytes, "servers.write")?;
        self.registered.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Every budget of every account this gateway holds that is near its limit.
    fn near_limit(&self, now_ms: i64) -> Vec<BudgetNearLimit> {
        let mut near = Vec::new();
        let Some(ledger) = &self.ledger else {
            return near;
        };
        for account in ledger.summaries(now_ms / 1000) {
            for (kind, usage) in &account.budgets {
                if BudgetNearLimit::is_near(usage.limit, usage.used, usage.reserved) {
                    near.push(BudgetNearLimit {
                        agent: account.agent.clone(),
                        token: account.token.clone(),
                        kind: kind.clone(),
                        limit: usage.limit,
                        used: usage.used,
                        reserved: usage.reserved,
                    });
                }
            }
        }
        near
    }

    /// Remove the registration (graceful stop).
    pub fn remove(&self) {
        // Held while removing, so a heartbeat in progress finishes first and none follows.
        let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        *closed = true;
        self.view.source().withdraw();
        let id = self
            .record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .id
            .clone();
        let path = self.store.layout().servers().join(format!("{id}.json"));
        let _ = self.store.fs().remove_file(&path, "servers.remove");
        self.registered.store(false, Ordering::SeqCst);
    }

    /// The current record.
    pub fn record(&self) -> ServerRecord {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Start the heartbeat thread.
pub fn spawn_heartbeat(registry: Arc<Registry>, stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("stopline-heartbeat".into())
        .spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(HEARTBEAT);
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                if let Err(error) = registry.heartbeat() {
                    tracing::error!(%error, "gateway heartbeat failed");
                }
            }
        });
    if let Err(error) = spawned {
        tracing::error!(%error, "cannot start the heartbeat thread");
    }
}
