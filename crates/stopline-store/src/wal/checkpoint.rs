//! Hash-anchored WAL checkpoints: readers verify the WAL from its last checkpoint.
//!
//! `breakglass.wal.checkpoint.json` names a line of the WAL (its `seq`, its sha256 — the
//! `prev` the next line carries, and so the hash of everything before it — and the byte offset
//! just after it) and carries the fold of every line up to it: the latch ledger, the last epoch
//! advance and the recovery intents not yet applied ([`WalFold`]). Every reader on the hot path (gates, the gateway's reloads,
//! engage, disengage, drain, deferred records) reads the checkpoint and then only the WAL's bytes
//! from the anchor line on: the anchor's hash is checked, and every line after it is verified
//! as before (`seq` without gaps, `prev` chained from the anchor). The WAL itself is never
//! rewritten; `stopline recover repair` and recovery apply still verify the whole chain.
//!
//! A holder of the WAL's exclusive lock rewrites the checkpoint (`wal.checkpoint.tmp.*`,
//! `.rename`, `.dirsync`) once `Store::wal_checkpoint_every` lines follow the last one. A
//! crash at any step leaves the old checkpoint or the new one, each true of its own line. A
//! checkpoint that cannot be read or parsed, whose anchor is not the line it names, or after
//! which the WAL does not verify, is not trusted: the WAL is read whole, as before checkpoints
//! existed, and judged as always.

use crate::Store;
use serde::{Deserialize, Serialize};
use stopline_core::wal::{self, sha256_hex, WalFold, WalLog};

/// The schema of `breakglass.wal.checkpoint.json`.
pub const CHECKPOINT_SCHEMA: &str = "stopline.wal-checkpoint.v2";

/// Lines after the last checkpoint that make a lock holder write a new one.
pub const DEFAULT_CHECKPOINT_EVERY: usize = 64;

/// `breakglass.wal.checkpoint.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Checkpoint {
    schema: String,
    /// The anchor line's `seq`.
    seq: u64,
    /// sha256 hex of the anchor line (without its newline).
    hash: String,
    /// The byte offset just after the anchor line's newline.
    offset: u64,
    /// The anchor line's length, newline included.
    anchor_len: u64,
    /// The fold of every line up to the anchor.
    fold: WalFold,
}

impl Store {
    /// Read and verify the WAL from its last checkpoint, or whole when there is none it can
    /// trust. The caller holds a lock on the WAL.
    pub(crate) fn read_wal(&self) -> Result<WalLog, crate::StoreError> {
        if let Some(log) = self.read_wal_from_checkpoint() {
            return Ok(log);
        }
        self.read_log(
            &self.layout.wal(),
            stopline_core::RefusalCode::ControlWalCorrupt,
        )
    }

    fn read_wal_from_checkpoint(&self) -> Option<WalLog> {
        let bytes = self.read_optional(&self.layout.wal_checkpoint()).ok()??;
        let checkpoint: Checkpoint = serde_json::from_slice(&bytes).ok()?;
        if checkpoint.schema != CHECKPOINT_SCHEMA {
            return None;
        }
        let from = checkpoint.offset.checked_sub(checkpoint.anchor_len)?;
        let mut bytes = self.fs.read_from(&self.layout.wal(), from).ok()?;
        let len = usize::try_from(checkpoint.anchor_len).ok()?;
        if len == 0
            || bytes.len() < len
            || bytes[len - 1] != b'\n'
            || sha256_hex(&bytes[..len - 1]) != checkpoint.hash
        {
            return None;
        }
        let tail = bytes.split_off(len);
        let log =
            wal::verify_from(&bytes[..len - 1], checkpoint.fold, &tail, checkpoint.offset).ok()?;
        (log.base.as_ref()?.anchor.seq == checkpoint.seq).then_some(log)
    }

    /// After an append under the WAL's exclusive lock: rewrite the checkpoint at `log`'s last
    /// line when enough lines follow the last one. The lines are durable already; a checkpoint
    /// that cannot be written only leaves readers more to read.
    pub(crate) fn maybe_checkpoint_wal(&self, log: &WalLog) {
        if log.lines_since_checkpoint() < self.wal_checkpoint_every {
            return;
        }
        let (Some((offset, anchor_len)), Some(last)) = (log.end, log.last()) else {
            return;
        };
        #[allow(unused_mut)]
        let mut fold = log.fold();
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::CheckpointDropsPendingPlans {
            fold.pending_intents.clear();
        }
        let checkpoint = Checkpoint {
            schema: CHECKPOINT_SCHEMA.into(),
            seq: last.seq,
            hash: last.hash.clone(),
            offset,
            anchor_len,
            fold,
        };
        let bytes = serde_json::to_vec(&checkpoint).expect("a checkpoint always serializes");
        if let Err(error) =
            self.replace_atomic(&self.layout.wal_checkpoint(), &bytes, "wal.checkpoint")
        {
            tracing::warn!(%error, "cannot write the WAL checkpoint");
        }
    }
}

impl super::Wal<'_> {
    /// The whole WAL verified from its first line, under the shared lock: for the verbs that
    /// judge history (evidence), never the hot path.
    pub fn read_whole(&self) -> Result<WalLog, crate::StoreError> {
        let wal = self.store.layout.wal();
        let _guard = self.store.lock_log_shared(&wal)?;
        self.store
            .read_log(&wal, stopline_core::RefusalCode::ControlWalCorrupt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EngageRequest;
    use stopline_core::{Level, Name, RefusalCode, Scope};

    fn request(scope: Scope, level: Level, by: &str) -> EngageRequest {
        EngageRequest::console(scope, level, by, "checkpoint test")
    }

    /// A home with an emergency and a halt engaged first, then `cycles` halt
    /// engage/disengage cycles, checkpointed every 8 lines.
    fn aged(cycles: usize) -> (tempfile::TempDir, Store, String) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home")).with_wal_checkpoint_every(8);
        store.ensure_home().unwrap();
        let agent = |n: &str| Scope::Agent(Name::parse(n).unwrap());
        store
            .engage(&request(agent("early"), Level::Emergency, "monitor"))
            .unwrap();
        let halt = store
            .engage(&request(agent("held"), Level::HaltAll, "monitor"))
            .unwrap()
            .latch
            .file_name();
        for i in 0..cycles {
            let scope = agent(&format!("cycle-{i}"));
            store
                .engage(&request(scope.clone(), Level::HaltAll, "monitor"))
                .unwrap();
            store
                .disengage(&scope, "checkpoint test", "monitor")
                .unwrap();
        }
        (dir, store, halt)
    }

    fn view_summary(store: &Store) -> (Vec<String>, u64, Vec<String>) {
        let view = store.load_control_view();
        let mut latches: Vec<String> = view
            .latches
            .iter()
            .map(|l| format!("{} {} {}", l.file, l.scope, l.level))
            .collect();
        latches.sort();
        let faults = view.faults.iter().map(|f| f.code.to_string()).collect();
        (latches, view.epoch.seq, faults)
    }

    #[test]
    fn a_reader_verifies_from_the_checkpoint_and_sees_what_the_whole_wal_says() {
        let (_dir, store, _) = aged(40);
        let checkpointed = store.read_wal().unwrap();
        assert!(checkpointed.base.is_some(), "read from a checkpoint");
        assert!(
            checkpointed.entries.len() < 8,
            "{}",
            checkpointed.entries.len()
        );
        let whole = store
            .read_log(&store.layout().wal(), RefusalCode::ControlWalCorrupt)
            .unwrap();
        assert_eq!(whole.entries.len() as u64, checkpointed.last().unwrap().seq);
        assert_eq!(checkpointed.uncleared_latches(), whole.uncleared_latches());
        assert_eq!(
            checkpointed.last_epoch_advance(),
            whole.last_epoch_advance()
        );
        assert_eq!(checkpointed.last(), whole.last());
        let with = view_summary(&store);
        assert!(with.2.is_empty(), "{with:?}");
        // The same view without the checkpoint (read whole).
        std::fs::remove_file(store.layout().wal_checkpoint()).unwrap();
        assert_eq!(view_summary(&store), with);
        // A checkpoint that does not parse is not trusted: the WAL is read whole.
        std::fs::write(store.layout().wal_checkpoint(), b"{").unwrap();
        assert_eq!(view_summary(&store), with);
    }

    #[test]
    fn the_history_before_the_checkpoint_is_not_read_but_the_ledger_is_kept() {
        let (_dir, store, halt) = aged(40);
        // Damage the WAL's first line: only a whole read (repair) sees it.
        let wal = store.layout().wal();
        let mut bytes = std::fs::read(&wal).unwrap();
        bytes[3] ^= 0x20;
        std::fs::write(&wal, &bytes).unwrap();
        assert!(store
            .read_log(&wal, RefusalCode::ControlWalCorrupt)
            .is_err());
        let (latches, epoch, faults) = view_summary(&store);
        assert!(faults.is_empty(), "{faults:?}");
        assert_eq!(latches.len(), 2, "{latches:?}");
        assert_eq!(
            epoch, 1,
            "the emergency's advance, confirmed from the checkpoint"
        );
        // The halt engaged before the checkpoint is in its ledger: deleting its file is a
        // deleted stop, a machine emergency.
        std::fs::remove_file(store.layout().latch(&halt)).unwrap();
        let view = store.load_control_view();
        assert!(
            view.latches.iter().any(|l| l.file == halt
                && l.scope == Scope::Machine
                && l.level == Level::Emergency),
            "{:?}",
            view.latches
        );
    }

    #[test]
    fn a_checkpoint_whose_anchor_does_not_match_is_not_trusted() {
        let (_dir, store, _) = aged(20);
        let path = store.layout().wal_checkpoint();
        let mut checkpoint: Checkpoint =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        // A ledger that lies about nothing but names another anchor: read whole instead.
        checkpoint.hash = "0".repeat(64);
        checkpoint.fold.uncleared.clear();
        std::fs::write(&path, serde_json::to_vec(&checkpoint).unwrap()).unwrap();
        let log = store.read_wal().unwrap();
        assert!(log.base.is_none(), "read whole");
        assert_eq!(log.uncleared_latches().len(), 2);
    }
}
