//! What this host trusts about the plane, kept in its own home (docs/reference.md §10): the high-water
//! marks (the highest WAL seq and epoch it has read from the plane) and the pinned verification
//! key's fingerprint.
//!
//! One file, `keys/etcd-trust.json`, a map from the prefix to a [`Trust`]. A mark is raised
//! durably (temporary file, fsync, rename, fsync of `keys/`, through the store's fs seam) BEFORE
//! the view that carries the higher values is acted on; a plane whose WAL or epoch reads below
//! the mark — a wipe, an old snapshot restored — is `control_state_corrupt` and every gate
//! closes, so going back is a stop, never an all-clear. A mark that cannot be raised is
//! `control_io` (the gate closes rather than act on what it could not record). The owner's way
//! out is `stopline recover repair` at the console ([`EtcdPlane::refound`]). The file and the
//! rule are the store's (`stopline_store::marks`), so the model check steps the same code.
//!
//! The key pin: the sha256 of `keys/verify.pub` as this host first read it (at `stopline init
//! --control …`, or its first read when it never ran that). A different key later is
//! `control_state_corrupt`, never a new key; `stopline recover rotate-key` changes it.

use crate::plane::EtcdPlane;
use crate::read::{append, Snapshot};
use etcd_client::Txn;
use stopline_core::wal_record::AdvanceCause;
use stopline_core::{ControlView, EpochMap, Refusal, RefusalCode, Scope};
use stopline_store::StoreError;

pub use stopline_store::marks::{Trust, TRUST_FILE};

/// The fingerprint of a verification key: sha256 of its 32 bytes, hex.
pub fn fingerprint(key: &[u8; 32]) -> String {
    stopline_core::wal::sha256_hex(key)
}

/// The WAL seq and the confirmed epoch of a snapshot whose records are sound.
fn heights(snapshot: &Snapshot) -> Option<(u64, u64)> {
    let log = snapshot.log().ok()?;
    let epoch = snapshot.epoch_map(&log).ok()?;
    Some((log.last().map_or(0, |e| e.seq), epoch.seq))
}

impl EtcdPlane {
    /// What this host trusts about this prefix (nothing yet: zeros and no pin).
    pub fn trust(&self) -> Result<Trust, StoreError> {
        self.local.marks().trust(self.names.prefix())
    }

    /// Change this prefix's trust with `change`, durably ([`stopline_store::marks::Marks::update_trust`]).
    pub(crate) fn update_trust(&self, change: impl Fn(&mut Trust)) -> Result<Trust, StoreError> {
        self.local.marks().update_trust(self.names.prefix(), change)
    }

    /// The view of `snapshot`, judged against this host's high-water marks: below them is
    /// `control_state_corrupt`; above them, the marks are raised durably first.
    pub fn judge(&self, snapshot: &Snapshot) -> ControlView {
        let mut view = snapshot.view();
        if let Some(fault) = self.hold_marks(snapshot) {
            view.faults.push(fault);
        }
        view
    }

    /// `None` when `snapshot` is at or above the marks (raised to it, durably); else the fault
    /// ([`stopline_store::marks::Marks::hold`]).
    pub fn hold_marks(&self, snapshot: &Snapshot) -> Option<Refusal> {
        // Unsound records are faults of their own; they never raise a mark.
        let (wal_seq, epoch_seq) = heights(snapshot)?;
        self.local
            .marks()
            .hold(self.names.prefix(), wal_seq, epoch_seq)
            .err()
    }

    /// The owner's way out of a plane that went back (called by `recover repair`): the machine
    /// epoch is advanced past every epoch this host has read (so no token minted before the
    /// wipe — revoked or not, which is what was lost — is accepted again), in one transaction with its WAL record, and the marks are re-seated to the
    /// plane as it now stands. `Ok(None)`: the plane is not behind the marks.
    pub fn refound(&self, reason: &str, by: &str) -> Result<Option<u64>, StoreError> {
        let trust = self.trust()?;
        self.retry_cas("recover repair (re-founding the plane)", || {
            let snapshot = self.snapshot()?;
            let log = snapshot.log()?;
            let current = snapshot.epoch_map(&log)?;
            let wal_seq = log.last().map_or(0, |e| e.seq);
            if wal_seq >= trust.wal_seq && current.seq >= trust.epoch_seq {
                return Ok(Some(None));
            }
            // A machine advance: every authority minted before the plane went back is revoked,
            // since which of them had been revoked is exactly what was lost.
            let seq = current.seq.max(trust.epoch_seq) + 1;
            let mut scopes = current.scopes.clone();
            scopes.insert(Scope::Machine.to_string(), seq);
            let mut since = current.since.clone();
            since.insert(
                Scope::Machine.to_string(),
                self.local.now_ms().div_euclid(1000),
            );
            let next = EpochMap {
                seq,
                scopes,
                wal_seq: 0,
                since,
                floor: current.floor,
            };
            let advance = self.advance_fields(
                &current,
                &next,
                &Scope::Machine,
                AdvanceCause::PlaneRefounded,
                by,
                reason,
            );
            let (next_log, puts, guards) = append(&self.names, &log, vec![advance], &self.ts());
            let rebuilt = stopline_store::epoch::rebuild(&next_log);
            let bytes = serde_json::to_vec(&rebuilt).expect("an epoch map always serializes");
            let mut ops = puts;
            ops.push(etcd_client::TxnOp::put(self.names.epoch(), bytes, None));
            let txn = Txn::new()
                .when([guards, vec![self.epoch_guard(&snapshot)]].concat())
                .and_then(ops);
            if !self.commit("recover repair", txn)?.succeeded() {
                return Ok(None);
            }
            let new_wal = next_log.last().map_or(0, |e| e.seq);
            self.update_trust(|t| {
                t.wal_seq = new_wal;
                t.epoch_seq = rebuilt.seq;
            })?;
            Ok(Some(Some(rebuilt.seq)))
        })
    }

    /// `key` against this host's pin: pinned now when nothing is; a different key is
    /// `control_state_corrupt`.
    pub fn hold_pin(&self, key: &[u8; 32]) -> Result<(), StoreError> {
        let seen = fingerprint(key);
        let trust = match self.trust()?.verify_key_sha256 {
            Some(_) => self.trust()?,
            None => self.update_trust(|t| {
                t.verify_key_sha256.get_or_insert_with(|| seen.clone());
            })?,
        };
        match trust.verify_key_sha256 {
            Some(pinned) if pinned == seen => Ok(()),
            pinned => Err(StoreError::corrupt(
                RefusalCode::ControlStateCorrupt,
                format!(
                    "keys/verify.pub under {} is not the key this host pinned (pinned sha256 {}, etcd holds {seen}): a different key is never taken; if the owner rotated it, run `stopline recover rotate-key --adopt` at this host's console",
                    self.names.prefix(),
                    pinned.unwrap_or_default()
                ),
            )),
        }
    }

    /// Pin `key` (replacing any pin): `recover rotate-key` and `init --control` only.
    pub fn pin(&self, key: &[u8; 32]) -> Result<(), StoreError> {
        let seen = fingerprint(key);
        self.update_trust(|t| t.verify_key_sha256 = Some(seen.clone()))
            .map(|_| ())
    }
}
