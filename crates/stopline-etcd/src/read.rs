//! One consistent read of the control records, and how they are judged — failing closed.
//!
//! A single etcd transaction of range reads returns latches, WAL records, `epoch.json`,
//! `state.json` and the cleared names at one revision, so a reader can never see a latch without
//! its WAL record or the WAL ahead of the epoch mid-write (the writers commit all of them in one
//! transaction). Judging mirrors the local directory exactly: every key under `latches/` is a
//! latch, and one whose value cannot be trusted is a machine emergency; WAL keys must run
//! 1, 2, 3 … with no gap and each record's `prev` must hash its predecessor
//! (`control_wal_corrupt`); `epoch.json` must match the WAL's last advance
//! (`control_epoch_unconfirmed`); a corrupt `state.json` is `control_state_corrupt`; a latch the
//! WAL ledger records as engaged whose key is gone (and not cleared) is a machine emergency.

use crate::client::{EtcdClient, EtcdError};
use crate::names::Names;
use etcd_client::{Compare, CompareOp, GetOptions, TxnOp, TxnOpResponse};
use std::collections::BTreeSet;
use stopline_core::wal::{self, WalLog};
use stopline_core::wal_record::WalRecord;
use stopline_core::{ActiveLatch, ControlView, EpochMap, Level, RefusalCode, Scope, StateRecord};
use stopline_store::StoreError;

/// A key's value and the revision it was last modified at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The value.
    pub value: Vec<u8>,
    /// Its mod_revision.
    pub mod_revision: i64,
}

/// The control records at one etcd revision.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The revision of the read.
    pub revision: i64,
    /// `latches/<file>` → value.
    pub latches: Vec<(String, Versioned)>,
    /// `breakglass.wal/<key>` → record bytes, in key order.
    pub wal: Vec<(String, Vec<u8>)>,
    /// `epoch.json`, when present.
    pub epoch: Option<Versioned>,
    /// `state.json`, when present.
    pub state: Option<Versioned>,
    /// File names under `breakglass.cleared/epoch-*/`.
    pub cleared: BTreeSet<String>,
}

fn corrupt(code: RefusalCode, detail: impl Into<String>) -> StoreError {
    StoreError::corrupt(code, detail)
}

impl Snapshot {
    /// Read everything in one transaction.
    pub fn fetch(client: &EtcdClient, names: &Names) -> Result<Snapshot, EtcdError> {
        let names = names.clone();
        client.call("reading the control records", move |mut c| {
            let names = names.clone();
            async move { Snapshot::fetch_async(&mut c, &names).await }
        })
    }

    /// [`Snapshot::fetch`] on a connection the caller holds (watch loops).
    pub async fn fetch_async(
        client: &mut etcd_client::Client,
        names: &Names,
    ) -> Result<Snapshot, etcd_client::Error> {
        let prefix = || Some(GetOptions::new().with_prefix());
        let keys_only = Some(GetOptions::new().with_prefix().with_keys_only());
        let txn = etcd_client::Txn::new().and_then(vec![
            TxnOp::get(names.latches(), prefix()),
            TxnOp::get(names.wal(), prefix()),
            TxnOp::get(names.epoch(), None),
            TxnOp::get(names.state(), None),
            TxnOp::get(names.cleared(), keys_only),
        ]);
        let response = client.txn(txn).await?;
        let revision = response.header().map_or(0, |h| h.revision());
        let mut gets = response.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(get) => get.kvs().to_vec(),
            _ => Vec::new(),
        });
        let mut next = || gets.next().unwrap_or_default();
        let (latches, wal, epoch, state, cleared) = (next(), next(), next(), next(), next());
        let versioned = |kv: &etcd_client::KeyValue| Versioned {
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
        };
        let suffix = |range: &str, kv: &etcd_client::KeyValue| {
            Names::strip(range, kv.key()).unwrap_or("?").to_string()
        };
        Ok(Snapshot {
            revision,
            latches: latches
                .iter()
                .map(|kv| (suffix(&names.latches(), kv), versioned(kv)))
                .collect(),
            wal: wal
                .iter()
                .map(|kv| (suffix(&names.wal(), kv), kv.value().to_vec()))
                .collect(),
            epoch: epoch.first().map(versioned),
            state: state.first().map(versioned),
            cleared: cleared
                .iter()
                .filter_map(|kv| Names::strip(&names.cleared(), kv.key()))
                .filter_map(|rest| rest.split_once('/').map(|(_, f)| f.to_string()))
                .collect(),
        })
    }

    /// The verified WAL: keys 1, 2, 3 … without a gap, each record chained to the previous.
    pub fn log(&self) -> Result<WalLog, StoreError> {
        let mut bytes = Vec::new();
        for (index, (key, record)) in self.wal.iter().enumerate() {
            let expected = index as u64 + 1;
            match key.parse::<u64>() {
                Ok(seq) if seq == expected => {}
                Ok(seq) => {
                    return Err(corrupt(
                        RefusalCode::ControlWalCorrupt,
                        format!("breakglass.wal/: key {seq} where {expected} was expected (a gap)"),
                    ))
                }
                Err(_) => {
                    return Err(corrupt(
                        RefusalCode::ControlWalCorrupt,
                        format!("breakglass.wal/{key} is not a record number"),
                    ))
                }
            }
            if record.contains(&b'\n') {
                return Err(corrupt(
                    RefusalCode::ControlWalCorrupt,
                    format!("breakglass.wal/{key} holds more than one line"),
                ));
            }
            bytes.extend_from_slice(record);
            bytes.push(b'\n');
        }
        wal::verify(&bytes).map_err(|fault| {
            corrupt(
                RefusalCode::ControlWalCorrupt,
                format!("breakglass.wal/: {fault}"),
            )
        })
    }

    /// `epoch.json`, confirmed against the WAL's last `epoch_advance`.
    pub fn epoch_map(&self, log: &WalLog) -> Result<EpochMap, StoreError> {
        stopline_store::epoch::confirm(self.epoch.as_ref().map(|v| v.value.as_slice()), log)
    }

    /// `state.json`; missing is RUNNING.
    pub fn state_record(&self) -> Result<StateRecord, StoreError> {
        match &self.state {
            None => Ok(StateRecord::running()),
            Some(v) => serde_json::from_slice(&v.value).map_err(|error| {
                corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("state.json is corrupt: {error}"),
                )
            }),
        }
    }

    /// Every active latch: each key of `latches/`, plus the WAL ledger's vanished ones.
    pub fn active_latches(&self, log: Option<&WalLog>) -> Vec<ActiveLatch> {
        let mut latches: Vec<ActiveLatch> = self
            .latches
            .iter()
            .map(|(file, v)| ActiveLatch::from_entry(file, Ok(&v.value)))
            .collect();
        if let Some(log) = log {
            let present: BTreeSet<String> = latches.iter().map(|l| l.file.clone()).collect();
            let vanished = log
                .uncleared_latches()
                .into_iter()
                .filter(|f| !present.contains(f) && !self.cleared.contains(f))
                .map(|file| ActiveLatch {
                    file,
                    scope: Scope::Machine,
                    level: Level::Emergency,
                    record: None,
                    problem: Some("recorded in the WAL as engaged, but its key is missing".into()),
                });
            latches.extend(vanished);
        }
        latches
    }

    /// The view gates decide from: every doubt is a fault or a machine emergency.
    pub fn view(&self) -> ControlView {
        let mut faults = Vec::new();
        let log = self.log();
        let latches = self.active_latches(log.as_ref().ok());
        let epoch = match &log {
            Ok(log) => self.epoch_map(log).unwrap_or_else(|e| {
                faults.push(e.to_refusal());
                EpochMap::default()
            }),
            Err(error) => {
                faults.push(error.to_refusal());
                faults.push(stopline_core::Refusal::new(
                    RefusalCode::ControlEpochUnconfirmed,
                    "the epoch cannot be confirmed against a corrupt WAL",
                ));
                EpochMap::default()
            }
        };
        let state = self.state_record().unwrap_or_else(|e| {
            faults.push(e.to_refusal());
            StateRecord::running()
        });
        ControlView {
            latches,
            epoch: epoch.indexed(),
            state,
            faults,
            blocked_targets: Default::default(),
        }
    }
}

/// New WAL records after `log`: the log as it will read once they commit, the puts, and a
/// create-if-absent compare on every new key (a concurrent appender fails the transaction).
pub fn append(
    names: &Names,
    log: &WalLog,
    records: Vec<WalRecord>,
    ts: &str,
) -> (WalLog, Vec<TxnOp>, Vec<Compare>) {
    let mut next = log.clone();
    let (mut puts, mut guards) = (Vec::new(), Vec::new());
    for record in records {
        let (seq, line) = wal::record_line(next.last(), ts, &record);
        next.entries.push(wal::record_entry(seq, &line, record));
        puts.push(TxnOp::put(names.wal_record(seq), line, None));
        guards.push(Compare::create_revision(
            names.wal_record(seq),
            CompareOp::Equal,
            0,
        ));
    }
    (next, puts, guards)
}
