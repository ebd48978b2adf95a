//! The control plane's durable state, in the local control directory (docs/reference.md §5).
//!
//! This crate is the only code that touches the control directory. It publishes latches
//! latch-first, keeps the hash-chained WAL and the epoch snapshot (WAL before snapshot, read
//! back), `state.json`, the cleared-latch folders, recovery evidence, the operation registry and
//! the evidence log. Every read fails closed: what cannot be trusted closes the gates.
//!
//! All I/O goes through [`fs::Fs`] (one seam, named failpoints); the clock, ids and pid through
//! [`env::Env`]. The protocol steps (engage, advance, recover, disengage, drain) are ordinary
//! functions over those seams, so the model checker steps exactly what the binary runs.
#![allow(clippy::disallowed_methods)]
// the store owns the control directory: its files are written here (through `fs.rs` where a durable step needs a failpoint)
#![deny(missing_docs)]

pub mod chain;
mod deferred;
pub mod durable;
pub mod engage;
pub mod env;
pub mod epoch;
pub mod error;
pub mod evidence;
pub mod failpoint;
pub mod follow;
pub mod fs;
pub mod group_commit;
pub mod halts;
pub mod journal_repair;
pub mod keys;
pub mod layout;
pub mod marks;
pub mod ops;
pub mod ops_archive;
pub mod ops_handle;
mod ops_open_set;
pub mod ops_snapshot;
pub mod plane;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod recovery;
pub mod repair;
pub mod runs;
pub mod spend;
pub mod state;
pub mod tokens;
pub mod view;
pub mod wal;
pub mod watch;

pub use engage::{EngageOutcome, EngageRequest};
pub use error::StoreError;
pub use layout::Layout;
#[cfg(feature = "owner")]
pub use plane::OwnerPlane;
pub use plane::{ControlPlane, PlaneAcks, PlaneGateway};
pub use watch::{ControlChanges, ControlWatch, WatchError, WatchNote};

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A handle on one control directory.
#[derive(Clone)]
pub struct Store {
    layout: Layout,
    fs: Arc<dyn fs::Fs>,
    env: Arc<dyn env::Env>,
    /// How long a lock on the WAL (or another chained log) is waited for before the verb gives
    /// up: a process frozen while it holds the lock must not hang the others (docs/reference.md §5).
    /// `None` waits for as long as the holder keeps it (the model checker's stores, whose
    /// search never schedules a blocked process).
    lock_wait: Option<Duration>,
    /// The bound of one whole read of the control state (`read_timeout_ms`, docs/reference.md §5); a
    /// read that has not finished in time is a fault that closes every gate. `None` reads on
    /// the caller's thread without a bound (the model checker's stores).
    read_timeout: Option<Duration>,
    /// Lines after the last WAL checkpoint that make a lock holder write a new one.
    wal_checkpoint_every: usize,
    /// What a gateway's journal upkeep does with the journals of writers that are gone
    /// (`[retention] gone_journals`).
    gone_journals: ops_archive::GoneJournals,
    /// Records an evidence log segment holds before the next starts a new one (`[retention]
    /// evidence_segment_records`).
    evidence_segment_records: u64,
    /// Evidence segments kept, the current one included, when older ones are pruned
    /// (`[retention] evidence_keep_segments`; `None`: every segment is kept).
    evidence_keep_segments: Option<u64>,
    /// Uncovered spending journals of others that make a reservation compact the gone ones
    /// itself (`spend::compact::COMPACT_AFTER`; the model checker's stores use 1).
    spend_compact_after: usize,
    /// The length past which a live writer rewrites its own spending journal (`[retention]
    /// spend_journal_bytes`).
    spend_rewrite_bytes: u64,
    /// Bytes a writer appends to its operation journal between two rewrites of the journal's
    /// open-set snapshot (`ops_snapshot::SNAPSHOT_EVERY_BYTES`; tests and the model checker
    /// use less).
    ops_snapshot_every: u64,
    /// The longest lifetime of a token (`[tokens] max_ttl_s`): an epoch advance folds away the
    /// revisions older than it plus the margin (`stopline_core::epoch::fold_horizon_s`).
    max_ttl_s: u64,
    #[cfg(feature = "planted-bugs")]
    planted: planted::PlantedBug,
}

/// The default of `read_timeout_ms` (docs/reference.md §5).
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_millis(5000);

/// How long a verb other than engage waits for the WAL lock before it is refused.
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_millis(5000);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("home", &self.layout.home())
            .finish()
    }
}

impl Store {
    /// The control directory at `home`, on the real filesystem and clock, with bounded locks
    /// and bounded reads.
    pub fn open(home: impl Into<PathBuf>) -> Store {
        let mut store = Store::with_io(home, Arc::new(fs::RealFs), Arc::new(env::SystemEnv));
        store.lock_wait = Some(DEFAULT_LOCK_WAIT);
        store.read_timeout = Some(DEFAULT_READ_TIMEOUT);
        store
    }

    /// This store with `timeout` as the bound of a whole read of the control state.
    pub fn with_read_timeout(mut self, timeout: Duration) -> Store {
        self.read_timeout = Some(timeout);
        self
    }

    /// This store writing a WAL checkpoint once `lines` follow the last one (at least 1).
    /// This store's journal upkeep under `[retention] gone_journals = retention`.
    pub fn with_gone_journals(mut self, retention: ops_archive::GoneJournals) -> Store {
        self.gone_journals = retention;
        self
    }

    /// `[retention] gone_journals` as this store was opened with (default: archive).
    pub fn gone_journals(&self) -> ops_archive::GoneJournals {
        self.gone_journals
    }

    /// This store's reservations compact the gone writers' spending journals themselves once
    /// `journals` (at least 1) the snapshot does not cover are listed.
    pub fn with_spend_compact_after(mut self, journals: usize) -> Store {
        self.spend_compact_after = journals.max(1);
        self
    }

    /// This store's spending journals are rewritten to what they mean once they have grown
    /// past `bytes` (at least 1; `[retention] spend_journal_bytes`).
    pub fn with_spend_rewrite_bytes(mut self, bytes: u64) -> Store {
        self.spend_rewrite_bytes = bytes.max(1);
        self
    }

    /// This store's operation journals rewrite their open-set snapshot every `bytes` appended
    /// (at least 1; default [`ops_snapshot::SNAPSHOT_EVERY_BYTES`]). Takes effect for journals
    /// opened afterwards.
    pub fn with_ops_snapshot_every(mut self, bytes: u64) -> Store {
        self.ops_snapshot_every = bytes.max(1);
        self
    }

    /// Lines after the last WAL checkpoint that make a lock holder write a new one.
    pub fn with_wal_checkpoint_every(mut self, lines: usize) -> Store {
        self.wal_checkpoint_every = lines.max(1);
        self
    }

    /// The bound of a whole read of the control state, if reads are bounded.
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// The control directory at `home` through the given seams.
    pub fn with_io(home: impl Into<PathBuf>, fs: Arc<dyn fs::Fs>, env: Arc<dyn env::Env>) -> Store {
        Store {
            layout: Layout::new(home),
            fs,
            env,
            lock_wait: None,
            read_timeout: None,
            wal_checkpoint_every: wal::checkpoint::DEFAULT_CHECKPOINT_EVERY,
            gone_journals: ops_archive::GoneJournals::Archive,
            evidence_segment_records: evidence::DEFAULT_SEGMENT_RECORDS,
            evidence_keep_segments: None,
            spend_compact_after: spend::compact::COMPACT_AFTER,
            spend_rewrite_bytes: spend::REWRITE_BYTES,
            ops_snapshot_every: ops_snapshot::SNAPSHOT_EVERY_BYTES,
            max_ttl_s: stopline_core::epoch::DEFAULT_MAX_TTL_S,
            #[cfg(feature = "planted-bugs")]
            planted: planted::PlantedBug::None,
        }
    }

    /// This store with `[tokens] max_ttl_s` = `seconds` (at least 1): its epoch advances fold
    /// away every revision older than that plus the margin.
    pub fn with_max_ttl_s(mut self, seconds: u64) -> Store {
        self.max_ttl_s = seconds.max(1);
        self
    }

    /// `[tokens] max_ttl_s` as this store was opened with.
    pub fn max_ttl_s(&self) -> u64 {
        self.max_ttl_s
    }

    /// How old a revision is when this store's advances fold it away: `max_ttl_s` plus the
    /// margin (without the margin under the planted `FoldWithoutMargin`).
    pub fn fold_horizon_s(&self) -> u64 {
        #[cfg(feature = "planted-bugs")]
        if self.planted == planted::PlantedBug::FoldWithoutMargin {
            return self.max_ttl_s;
        }
        stopline_core::epoch::fold_horizon_s(self.max_ttl_s)
    }

    /// This store with a known bug planted in its recovery (model-checker tests only).
    #[cfg(feature = "planted-bugs")]
    pub fn with_planted_bug(mut self, bug: planted::PlantedBug) -> Store {
        self.planted = bug;
        self
    }

    /// The bug planted in this store (model-checker tests only): for the checker's own steps
    /// around store calls (`PlantedBug::RevokeAnswersBeforeAcks`).
    #[cfg(feature = "planted-bugs")]
    pub fn planted(&self) -> planted::PlantedBug {
        self.planted
    }

    /// The fixed names of this control directory.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The filesystem seam.
    pub fn fs(&self) -> &Arc<dyn fs::Fs> {
        &self.fs
    }

    /// The clock/id seam.
    pub fn env(&self) -> &Arc<dyn env::Env> {
        &self.env
    }

    /// Now, Unix milliseconds, from the store's clock.
    pub fn now_ms(&self) -> i64 {
        self.env.now_ms()
    }
}
