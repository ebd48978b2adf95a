//! The fixed names of the control directory (docs/reference.md §5). Tests corrupt these on purpose, so a
//! name here is part of the contract and must not change.

use std::path::{Path, PathBuf};

/// The archive of gone writers' operation journals, a directory under `ops/` (`ops_archive.rs`).
pub const OPS_ARCHIVE_DIR: &str = "archive";

/// Paths inside one control directory.
#[derive(Debug, Clone)]
pub struct Layout {
    home: PathBuf,
}

impl Layout {
    /// The layout of `home`.
    pub fn new(home: impl Into<PathBuf>) -> Layout {
        Layout { home: home.into() }
    }
    /// The control directory.
    pub fn home(&self) -> &Path {
        &self.home
    }
    /// `latches/`.
    pub fn latches(&self) -> PathBuf {
        self.home.join("latches")
    }
    /// `latches/<file>`.
    pub fn latch(&self, file: &str) -> PathBuf {
        self.latches().join(file)
    }
    /// `latches.staging/`.
    pub fn staging(&self) -> PathBuf {
        self.home.join("latches.staging")
    }
    /// `breakglass.cleared/`.
    pub fn cleared(&self) -> PathBuf {
        self.home.join("breakglass.cleared")
    }
    /// `breakglass.cleared/epoch-<n>/`.
    pub fn cleared_epoch(&self, epoch: u64) -> PathBuf {
        self.cleared().join(format!("epoch-{epoch}"))
    }
    /// `breakglass.wal.jsonl`.
    pub fn wal(&self) -> PathBuf {
        self.home.join("breakglass.wal.jsonl")
    }
    /// `breakglass.wal.checkpoint.json`: where readers start verifying the WAL.
    pub fn wal_checkpoint(&self) -> PathBuf {
        self.home.join("breakglass.wal.checkpoint.json")
    }
    /// `epoch.json`.
    pub fn epoch(&self) -> PathBuf {
        self.home.join("epoch.json")
    }
    /// `state.json`.
    pub fn state(&self) -> PathBuf {
        self.home.join("state.json")
    }
    /// `recovery-evidence/`.
    pub fn recovery_evidence(&self) -> PathBuf {
        self.home.join("recovery-evidence")
    }
    /// `ops/`.
    pub fn ops(&self) -> PathBuf {
        self.home.join("ops")
    }
    /// `spend/`: the gateways' spending journals.
    pub fn spend(&self) -> PathBuf {
        self.home.join("spend")
    }
    /// `spend/settled.json`: the spending of the gone writers' journals folded out of `spend/`
    /// (settled totals per account, reservations in doubt, the journals it covers).
    pub fn spend_settled(&self) -> PathBuf {
        self.spend().join("settled.json")
    }
    /// `spend/archive/`: gone writers' spending journals once `settled.json` covers them
    /// (never read on the hot path; deleted under `[retention] gone_journals = "prune"`).
    pub fn spend_archive(&self) -> PathBuf {
        self.spend().join("archive")
    }
    /// `runs/`.
    pub fn runs(&self) -> PathBuf {
        self.home.join("runs")
    }
    /// `runs.live/`: the index of supervised workers that may be live (`runs/live.rs`).
    pub fn runs_live(&self) -> PathBuf {
        self.home.join("runs.live")
    }
    /// `evidence/`.
    pub fn evidence(&self) -> PathBuf {
        self.home.join("evidence")
    }
    /// `evidence/log.jsonl`: the evidence log's first segment (records from 1).
    pub fn evidence_log(&self) -> PathBuf {
        self.evidence().join("log.jsonl")
    }
    /// The evidence log segment whose first record is `first`: `evidence/log.jsonl` for 1, else
    /// `evidence/log-<first, 12 digits>.jsonl`.
    pub fn evidence_segment(&self, first: u64) -> PathBuf {
        self.evidence().join(crate::evidence::segment_name(first))
    }
    /// `evidence/head.json`: the newest evidence record's anchor and where it is.
    pub fn evidence_head(&self) -> PathBuf {
        self.evidence().join("head.json")
    }
    /// `evidence/pruned.json`: where the kept evidence segments start when older ones were
    /// pruned (`[retention] evidence_keep_segments`).
    pub fn evidence_pruned(&self) -> PathBuf {
        self.evidence().join("pruned.json")
    }
    /// `evidence/drills.json`: the drill index's summary (`evidence/drills.rs`), what the log says
    /// of drills without reading it.
    pub fn evidence_drills(&self) -> PathBuf {
        self.evidence().join("drills.json")
    }
    /// `evidence/drills-recent.json`: the drill index's newest drill records, apart from its
    /// summary so the drill gate never reads them (`evidence/drills.rs`).
    pub fn evidence_drills_recent(&self) -> PathBuf {
        self.evidence().join("drills-recent.json")
    }
    /// `evidence/log.lock`: the evidence log's lock (appends exclusive, readers shared).
    pub fn evidence_lock(&self) -> PathBuf {
        self.evidence().join("log.lock")
    }
    /// `servers/`.
    pub fn servers(&self) -> PathBuf {
        self.home.join("servers")
    }
    /// `keys/`.
    pub fn keys(&self) -> PathBuf {
        self.home.join("keys")
    }
    /// `keys/minted.jsonl`: the registry of the tokens minted here (`tokens.rs`).
    pub fn minted(&self) -> PathBuf {
        self.keys().join("minted.jsonl")
    }
    /// `config.toml`.
    pub fn config(&self) -> PathBuf {
        self.home.join("config.toml")
    }
    /// The first file of the full-disk reserve ([`Layout::reserve_files`]).
    pub fn reserve(&self) -> PathBuf {
        self.home.join("reserve.bin")
    }
    /// Every file of the full-disk reserve: `reserve.bin`, `reserve.1.bin` and `reserve.2.bin`,
    /// 128 KiB and an inode each, released one at a time. On tmpfs a hard link counts as an
    /// inode of its own, so a scoped stop (a staged file and its link) needs two free inodes,
    /// and a machine stop after it one more (docs/reference.md §5).
    pub fn reserve_files(&self) -> [PathBuf; 3] {
        [
            self.reserve(),
            self.home.join("reserve.1.bin"),
            self.home.join("reserve.2.bin"),
        ]
    }
}
