//! What this host trusts about a distributed plane, kept in its own home (docs/reference.md,
//! "Many hosts: etcd"): the high-water marks — the highest WAL seq and epoch it has read from the
//! plane — and the pinned verification key's fingerprint, per prefix, in `keys/etcd-trust.json`.
//!
//! The rule the plane's readers follow ([`Marks::hold`]): a plane read below the marks is
//! `control_state_corrupt` (a wipe, an old snapshot restored: a stop, never an all-clear); a
//! plane above them raises them durably (temporary file, fsync, rename, fsync of `keys/`) BEFORE
//! the reader acts on it, and a mark that cannot be raised is `control_io`. It lives here, in the
//! store, so that the model check steps the same code over its crash-simulating filesystem.

use crate::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use stopline_core::{Refusal, RefusalCode};

/// What this host trusts about one prefix.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Trust {
    /// The highest WAL seq read from the plane.
    pub wal_seq: u64,
    /// The highest epoch read from the plane.
    pub epoch_seq: u64,
    /// The pinned verification key's sha256 (hex), once pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_key_sha256: Option<String>,
}

/// The file name under `keys/`.
pub const TRUST_FILE: &str = "etcd-trust.json";

/// Every read-modify-write of the trust file in this process, one at a time (the CLI's verbs
/// and a gateway's watch and request threads share it).
static WRITING: Mutex<()> = Mutex::new(());

/// How long a writer waits for another process's hold of `keys/etcd-trust.lock`.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

impl Store {
    fn trust_path(&self) -> std::path::PathBuf {
        self.layout().keys().join(TRUST_FILE)
    }

    fn read_trust_all(&self) -> Result<BTreeMap<String, Trust>, StoreError> {
        match self.fs().read(&self.trust_path()) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("keys/{TRUST_FILE} is corrupt: {e}"),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(StoreError::refused(
                RefusalCode::ControlIo,
                format!("keys/{TRUST_FILE} cannot be read: {e}"),
            )),
        }
    }

    /// True when a plane at (`wal_seq`, `epoch_seq`) is below `trust` (a planted bug may
    /// forget the epoch).
    fn went_back(&self, trust: &Trust, wal_seq: u64, epoch_seq: u64) -> bool {
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::MarkAcceptsLowerEpoch {
            return wal_seq < trust.wal_seq;
        }
        wal_seq < trust.wal_seq || epoch_seq < trust.epoch_seq
    }
}

/// The high-water marks of one control directory ([`Store::marks`]): what this host trusts about
/// an etcd plane's prefix, changed durably, and the check of a plane read against it.
#[derive(Debug, Clone, Copy)]
pub struct Marks<'a> {
    store: &'a Store,
}

impl Store {
    /// The high-water marks this host keeps of the planes it reads.
    pub fn marks(&self) -> Marks<'_> {
        Marks { store: self }
    }
}

impl Marks<'_> {
    /// What this host trusts about `prefix` (nothing yet: zeros and no pin).
    pub fn trust(&self, prefix: &str) -> Result<Trust, StoreError> {
        Ok(self
            .store
            .read_trust_all()?
            .remove(prefix)
            .unwrap_or_default())
    }

    /// Change `prefix`'s trust with `change`, durably, before returning. Writers on this host
    /// take `keys/etcd-trust.lock` (bounded: a holder past the bound is `control_io`) and read
    /// again under it, so two processes raising at once never lower each other's mark.
    pub fn update_trust(
        &self,
        prefix: &str,
        change: impl Fn(&mut Trust),
    ) -> Result<Trust, StoreError> {
        let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
        let mut current = self.trust(prefix)?;
        let before = current.clone();
        change(&mut current);
        if current == before {
            return Ok(current);
        }
        // A gate never creates the home (a missing one is `control_home_missing`).
        let home = self.store.layout().home();
        if !self.store.fs().exists(home).unwrap_or(false) {
            return Err(StoreError::refused(
                RefusalCode::ControlHomeMissing,
                format!(
                    "the control directory {} does not exist (run `stopline init`)",
                    home.display()
                ),
            ));
        }
        let keys = self.store.layout().keys();
        self.store.ensure_dirs(&[&keys])?;
        let _lock = self
            .store
            .fs()
            .lock(&keys.join("etcd-trust.lock"), true, true, Some(LOCK_WAIT))
            .map_err(|e| {
                StoreError::refused(
                    RefusalCode::ControlIo,
                    format!("keys/etcd-trust.lock cannot be taken: {e}"),
                )
            })?;
        let mut all = self.store.read_trust_all()?;
        let entry = all.entry(prefix.to_string()).or_default();
        change(entry);
        let after = entry.clone();
        let bytes = serde_json::to_vec_pretty(&all).expect("the trust map serializes");
        self.store
            .replace_atomic(&self.store.trust_path(), &bytes, "etcd.trust")?;
        Ok(after)
    }

    /// Judge a read of the plane under `prefix` at WAL `wal_seq` and epoch `epoch_seq` against
    /// this host's marks: below them is `control_state_corrupt`; above them, the marks are
    /// raised durably before this returns (`control_io` when they cannot be). `Ok` means the
    /// reader may act on what it read.
    pub fn hold(&self, prefix: &str, wal_seq: u64, epoch_seq: u64) -> Result<(), Refusal> {
        let trust = self.trust(prefix).map_err(|e| e.to_refusal())?;
        if self.store.went_back(&trust, wal_seq, epoch_seq) {
            return Err(Refusal::new(
                RefusalCode::ControlStateCorrupt,
                format!(
                    "the plane went back: it holds WAL {wal_seq} and epoch {epoch_seq}, but this host has read WAL {} and epoch {} under {prefix} (a wipe, or an old snapshot restored); every gate stays closed until the owner runs `stopline recover repair` at the console",
                    trust.wal_seq, trust.epoch_seq
                ),
            ));
        }
        if wal_seq == trust.wal_seq && epoch_seq == trust.epoch_seq {
            return Ok(());
        }
        self.update_trust(prefix, |t| {
            t.wal_seq = t.wal_seq.max(wal_seq);
            t.epoch_seq = t.epoch_seq.max(epoch_seq);
        })
        .map(|_| ())
        .map_err(|error| {
            Refusal::new(
                RefusalCode::ControlIo,
                format!("the plane's high-water mark cannot be kept in keys/{TRUST_FILE}, so its view is not acted on: {error}"),
            )
        })
    }
}
