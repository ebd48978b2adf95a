//! Building a [`ControlView`] from fresh reads, failing closed.
//!
//! Order matters and is deliberate: under a shared WAL lock, read the WAL, the epoch snapshot and
//! `state.json` together (so an engage in progress is never mistaken for an unconfirmed epoch);
//! then list `latches/`; then cross-check the WAL's ledger against the directory. Each entry of
//! `latches/` is a latch; anything doubtful becomes a machine emergency or a fault. Gates never
//! repair anything.
//!
//! Which is which (docs/reference.md §5): an entry that is not a regular file (FIFO, socket, device,
//! directory, symlink), that vanished between the listing and its read, or that does not parse
//! is a machine emergency — someone put it there. An entry whose open and read did not finish
//! within `fs::ENTRY_READ_BOUND` is a read fault (`control_io`, counted as a read that did not
//! finish: [`LatchScan::unfinished`]), never a latch: a slow disk, or an agent that makes one
//! file slow to read (a FUSE or NFS home), closes the gates and makes a supervisor freeze, but
//! must not pass for a stop someone engaged, nor turn a freeze into a kill of everything.

use crate::error::StoreError;
use crate::follow::WalFollower;
use crate::Store;
use std::collections::BTreeSet;
use std::io;
use std::sync::Arc;
use stopline_core::wal::WalLog;
use stopline_core::{
    ActiveLatch, ControlView, EpochMap, Level, Refusal, RefusalCode, Scope, StateRecord,
};

/// The WAL's exclusive lock (held while this lives), the verified WAL and the active latches.
pub(crate) type LockedScan = (Box<dyn crate::fs::LockGuard>, WalLog, Vec<ActiveLatch>);

/// A whole read of the control state that did not finish within `read_timeout_ms` (docs/reference.md §5):
/// a fault, told apart from the others because a supervisor freezes on it where it kills on a
/// corrupt state. `refusal` is the fault a gate's view carries for it (`control_io`).
#[derive(Debug, Clone, PartialEq)]
pub struct ReadTimedOut {
    /// The fault as a gate reports it.
    pub refusal: Refusal,
}

/// What one listing and read of `latches/` found.
#[derive(Debug, Default)]
pub struct LatchScan {
    /// One per entry read to its end: its latch, or a machine emergency for an entry that is
    /// not a regular file, vanished before its read, or does not parse.
    pub latches: Vec<ActiveLatch>,
    /// The entries (file name, error) whose open and read did not finish within
    /// `fs::ENTRY_READ_BOUND`: each a read fault (`control_io`,
    /// [`StoreError::is_unfinished_read`]), not a latch (see the module docs).
    pub unfinished: Vec<(String, StoreError)>,
}

impl LatchScan {
    /// The read faults of the entries whose read did not finish, one each.
    fn faults(&self) -> Vec<Refusal> {
        self.unfinished
            .iter()
            .map(|(_, error)| error.to_refusal())
            .collect()
    }
}

/// The raw control records read under one shared lock.
#[derive(Debug, Clone)]
pub struct ControlRecords {
    /// The verified WAL, or why it is not trusted.
    pub wal: Result<WalLog, Refusal>,
    /// The confirmed epoch, or why it is not trusted.
    pub epoch: Result<EpochMap, Refusal>,
    /// `state.json`, or why it is not trusted.
    pub state: Result<StateRecord, Refusal>,
}

impl Store {
    /// As [`Latches::records`], returning the shared WAL lock still held, so the
    /// caller can list `latches/` consistently with the WAL: disengage and recovery change both
    /// under the exclusive lock, and a listing taken after the lock was released could see a
    /// latch gone that the WAL read still records (a false "deleted stop").
    fn read_control_records_locked(
        &self,
        follower: Option<&WalFollower>,
    ) -> (ControlRecords, Option<Box<dyn crate::fs::LockGuard>>) {
        self.read_control_records_noting(follower, &mut None)
    }

    /// [`Store::read_control_records_locked`], keeping in `unfinished` the first fault that is a
    /// read that did not finish in its bound.
    fn read_control_records_noting(
        &self,
        follower: Option<&WalFollower>,
        unfinished: &mut Option<Refusal>,
    ) -> (ControlRecords, Option<Box<dyn crate::fs::LockGuard>>) {
        let mut judge = |error: StoreError| {
            let refusal = error.to_refusal();
            if error.is_unfinished_read() && unfinished.is_none() {
                *unfinished = Some(refusal.clone());
            }
            refusal
        };
        let guard = match self.lock_log_shared(&self.layout.wal()) {
            Ok(guard) => guard,
            Err(error) => {
                let refusal = judge(error);
                let records = ControlRecords {
                    wal: Err(refusal.clone()),
                    epoch: Err(refusal.clone()),
                    state: Err(refusal),
                };
                return (records, None);
            }
        };
        // Where a test parks a reader that holds the shared lock (SIGSTOP, as a frozen gateway
        // would be); never armed outside tests, and a park point only: its result is not used.
        let _ = crate::failpoint::hit("view.locked");
        let wal = self.read_wal_following(follower).map_err(&mut judge);
        let epoch = match &wal {
            Ok(log) => self.read_confirmed_epoch(log).map_err(&mut judge),
            Err(refusal) => Err(Refusal::new(
                RefusalCode::ControlEpochUnconfirmed,
                format!("the epoch cannot be confirmed: {}", refusal.message),
            )),
        };
        let state = self.read_state().map_err(&mut judge);
        (ControlRecords { wal, epoch, state }, guard)
    }

    /// [`Latches::scan`], reaching the failpoint `park` (when given) between the listing
    /// and the reads.
    fn scan_latches_parking(&self, park: Option<&str>) -> Result<LatchScan, StoreError> {
        let dir = self.layout.latches();
        let names = match self.fs.read_dir(&dir) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                return Ok(LatchScan::default())
            }
            Err(error) => {
                return Err(StoreError::corrupt(
                    RefusalCode::ControlStateCorrupt,
                    format!("latches/ is unreadable: {error}"),
                ))
            }
        };
        // Where a test parks a reader that holds no lock between the listing and the reads
        // (stop_if:); a park point only: its result is not used.
        if let Some(park) = park {
            let _ = crate::failpoint::hit(park);
        }
        let mut scan = LatchScan::default();
        for name in &names {
            match self.read_latch_entry(&dir, name) {
                Ok(latch) => scan.latches.push(latch),
                Err(error) => scan.unfinished.push((name.clone(), error)),
            }
        }
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::StagedReadAsLatch {
            let known = names.iter().cloned().collect();
            let (_, staged) = self.latches().staged(&known);
            scan.latches
                .extend(staged.into_iter().filter(|l| l.problem.is_none()));
        }
        Ok(scan)
    }

    /// Read the entry `name` of `latches/` (`dir`): its latch, a machine emergency for an entry
    /// that cannot be trusted, or `Err` for a read that did not finish within
    /// `fs::ENTRY_READ_BOUND` (a fault, not a latch: see the module docs).
    pub(crate) fn read_latch_entry(
        &self,
        dir: &std::path::Path,
        name: &str,
    ) -> Result<ActiveLatch, StoreError> {
        match self.fs.read(&dir.join(name)) {
            Err(source) if source.kind() == io::ErrorKind::TimedOut => Err(StoreError::Io {
                context: format!("reading latches/{name}"),
                source,
            }),
            bytes => Ok(ActiveLatch::from_entry(
                name,
                bytes.as_deref().map_err(ToString::to_string),
            )),
        }
    }

    /// Latches the WAL records as engaged and not cleared whose file is neither in `latches/`
    /// nor under `breakglass.cleared/`: someone deleted a stop. Each reads as a machine emergency.
    /// An entry of `present` too slow to read is there (a fault), not deleted.
    pub(crate) fn vanished_latches(&self, log: &WalLog, present: &LatchScan) -> Vec<ActiveLatch> {
        let present: BTreeSet<&str> = present
            .latches
            .iter()
            .map(|l| l.file.as_str())
            .chain(present.unfinished.iter().map(|(file, _)| file.as_str()))
            .collect();
        let cleared_dirs = self.fs.read_dir(&self.layout.cleared()).unwrap_or_default();
        log.uncleared_latches()
            .into_iter()
            .filter(|file| !present.contains(file.as_str()))
            .filter(|file| {
                !cleared_dirs.iter().any(|d| {
                    self.fs
                        .exists(&self.layout.cleared().join(d).join(file))
                        .unwrap_or(false)
                })
            })
            .map(|file| ActiveLatch {
                file,
                scope: Scope::Machine,
                level: Level::Emergency,
                record: None,
                problem: Some("recorded in the WAL as engaged, but its file is missing".into()),
            })
            .collect()
    }

    /// [`Latches::active`] as a [`LatchScan`]: the vanished latches join its latches.
    fn active_latches_scan(&self, log: Option<&WalLog>) -> Result<LatchScan, StoreError> {
        let mut scan = self.scan_latches_parking(None)?;
        if let Some(log) = log {
            let vanished = self.vanished_latches(log, &scan);
            scan.latches.extend(vanished);
        }
        Ok(scan)
    }

    /// For verbs that change latches: take the WAL's exclusive lock, verify the WAL and list
    /// the active latches, refusing when any of it cannot be trusted (an entry too slow to read
    /// is refused as that `control_io` read fault: a verb never plans around a latch it could
    /// not read, nor takes it for a machine emergency); then finish every record
    /// an engage left deferred (`deferred.rs`), so the verb judges a complete ledger and
    /// epoch. The guard holds the lock.
    pub(crate) fn lock_and_scan(&self) -> Result<LockedScan, StoreError> {
        self.lock_and_scan_recording(true)
    }

    /// As [`Store::lock_and_scan`]; `record_deferred` false skips finishing deferred records
    /// (only a planted bug asks for that).
    pub(crate) fn lock_and_scan_recording(
        &self,
        record_deferred: bool,
    ) -> Result<LockedScan, StoreError> {
        let wal = self.layout.wal();
        self.ensure_dirs(&[])?;
        let guard = self.lock_log_exclusive(&wal)?;
        let log = self.read_wal()?;
        let scan = self
            .active_latches_scan(Some(&log))
            .map_err(|error| StoreError::Refused(error.to_refusal()))?;
        if let Some((_, unfinished)) = scan.unfinished.into_iter().next() {
            return Err(unfinished);
        }
        let latches = scan.latches;
        let log = if record_deferred {
            self.record_deferred_locked(log, &latches, None)?
        } else {
            log
        };
        Ok((guard, log, latches))
    }

    /// A fresh view of latches, WAL, epoch and state (no operation census), read under one
    /// shared WAL lock; every fault closes every gate.
    ///
    /// With a read bound (every store the binary opens), the read runs on its own thread and a
    /// read that has not finished within `read_timeout_ms` is a fault (docs/reference.md §5): the caller
    /// gets a view that closes every gate, never a wait. A control directory that does not
    /// exist is the fault `control_home_missing`, never "no stop".
    pub fn load_control_view(&self) -> ControlView {
        self.load_control_view_bounded(None)
    }

    /// [`Store::load_control_view`] for a reader that follows the WAL (`follow.rs`): only the
    /// lines appended since `follower`'s last read are verified.
    pub fn load_control_view_following(&self, follower: &Arc<WalFollower>) -> ControlView {
        self.load_control_view_bounded(Some(follower.clone()))
    }

    fn load_control_view_bounded(&self, follower: Option<Arc<WalFollower>>) -> ControlView {
        self.load_control_view_timed(follower).map_or_else(
            |timed_out| ControlView::closed(timed_out.refusal),
            |(view, _)| view,
        )
    }

    /// [`Store::load_view`], telling a read that did not finish within `read_timeout_ms` apart
    /// from every other fault: docs/reference.md §5 makes it a fault like any other for a gate (which
    /// closes either way), but a supervisor freezes on it rather than kill (its caller decides
    /// what it means; the view it would have closed with is in the error).
    pub fn load_view_timed(&self) -> Result<ControlView, ReadTimedOut> {
        let (mut view, unfinished) = self.load_control_view_timed(None)?;
        if let Some(refusal) = unfinished {
            return Err(ReadTimedOut { refusal });
        }
        view.blocked_targets = self.ops().blocked_targets();
        Ok(view)
    }

    /// The bounded read: the view and the first of its faults that is a read that did not
    /// finish in its own bound, or the whole read's timeout.
    fn load_control_view_timed(
        &self,
        follower: Option<Arc<WalFollower>>,
    ) -> Result<(ControlView, Option<Refusal>), ReadTimedOut> {
        let Some(timeout) = self.read_timeout else {
            return Ok(self.load_control_view_now(follower.as_deref()));
        };
        match self.fs.exists(self.layout.home()) {
            Ok(true) => {}
            Ok(false) => {
                return Ok((ControlView::closed(Refusal::new(
                    RefusalCode::ControlHomeMissing,
                    format!(
                        "the control directory {} does not exist (run `stopline init`, or check --home / STOPLINE_HOME); nothing is allowed without it",
                        self.layout.home().display()
                    ),
                )), None))
            }
            Err(error) => {
                return Ok((ControlView::closed(Refusal::new(
                    RefusalCode::ControlIo,
                    format!("cannot look at {}: {error}", self.layout.home().display()),
                )), None))
            }
        }
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        let store = self.clone();
        let spawned = std::thread::Builder::new()
            .name("stopline-read".into())
            .spawn(move || {
                let _ = sender.send(store.load_control_view_now(follower.as_deref()));
            });
        if let Err(error) = spawned {
            return Ok((
                ControlView::closed(Refusal::new(
                    RefusalCode::ControlIo,
                    format!("cannot start the bounded read of the control state: {error}"),
                )),
                None,
            ));
        }
        match receiver.recv_timeout(timeout) {
            Ok(read) => Ok(read),
            // The reading thread is left to finish (or not) on its own; nothing waits for it.
            Err(_) => Err(ReadTimedOut {
                refusal: Refusal::new(
                    RefusalCode::ControlIo,
                    format!(
                        "the control state could not be read within read_timeout_ms = {} ms (an entry that blocks, or a lock held by a stopped process); every gate is closed",
                        timeout.as_millis()
                    ),
                ),
            }),
        }
    }

    /// [`Store::load_control_view`] on this thread, without the bound, and the first of its
    /// faults that is a read that did not finish in its own bound (a lock still held, a control
    /// record or a `latches/` entry that took more than 1 s: [`StoreError::is_unfinished_read`]).
    fn load_control_view_now(
        &self,
        follower: Option<&WalFollower>,
    ) -> (ControlView, Option<Refusal>) {
        let mut unfinished = None;
        let (records, guard) = self.read_control_records_noting(follower, &mut unfinished);
        let (latches, mut faults) = match self.active_latches_scan(records.wal.as_ref().ok()) {
            Ok(scan) => {
                let faults = scan.faults();
                if unfinished.is_none() {
                    unfinished = faults.first().cloned();
                }
                (scan.latches, faults)
            }
            Err(error) => (Vec::new(), vec![error.to_refusal()]),
        };
        drop(guard);
        faults.extend(records.wal.as_ref().err().cloned());
        let epoch = records.epoch.unwrap_or_else(|refusal| {
            faults.push(refusal);
            EpochMap::default()
        });
        let state = records.state.unwrap_or_else(|refusal| {
            faults.push(refusal);
            StateRecord::running()
        });
        let view = ControlView {
            latches,
            epoch: self.indexed(epoch),
            state,
            faults,
            blocked_targets: Default::default(),
        };
        (view, unfinished)
    }

    /// `epoch` indexed for the view's decisions (docs/reference.md §5, "What admission costs").
    fn indexed(&self, epoch: EpochMap) -> stopline_core::IndexedEpochMap {
        #[cfg(feature = "planted-bugs")]
        if self.planted == crate::planted::PlantedBug::IndexForgetsAncestorDelegates {
            return epoch.indexed().planted_forgetting_ancestor_delegates();
        }
        epoch.indexed()
    }

    /// A fresh view for gates, with targets blocked by unresolved operations: every fault
    /// closes every gate.
    pub fn load_view(&self) -> ControlView {
        let mut view = self.load_control_view();
        view.blocked_targets = self.ops().blocked_targets();
        view
    }

    /// [`Store::load_view`] and the census of unresolved operations its blocked targets come
    /// from, in the same order (the control records, then the registry), from one read of the
    /// registry.
    pub fn load_view_and_census(&self) -> (ControlView, crate::ops::Census) {
        let mut view = self.load_control_view();
        let census = self.ops().census();
        view.blocked_targets = self.blocked_of(census.clone());
        (view, census)
    }
}

/// The latches of one control directory ([`Store::latches`]): the scan of `latches/`, the
/// active latches it yields, and the records a control view is built from.
#[derive(Debug, Clone, Copy)]
pub struct Latches<'a> {
    store: &'a Store,
}

impl Store {
    /// The latches of this control directory.
    pub fn latches(&self) -> Latches<'_> {
        Latches { store: self }
    }
}

impl Latches<'_> {
    /// Read WAL, epoch and state under a shared WAL lock.
    pub fn records(&self) -> ControlRecords {
        self.store.read_control_records_locked(None).0
    }

    /// List and read every entry of `latches/`. A missing directory is empty; an unreadable one
    /// is an error the caller must treat as a fault; an entry too slow to read is in
    /// [`LatchScan::unfinished`], a fault the caller must not take for a latch.
    ///
    /// Without the WAL lock a latch may be removed (disengage, recovery) between the listing and
    /// the read of its entry, which then reads as a machine emergency: a caller that reads
    /// without the lock acts only on well-formed entries and leaves the rest to a locked read.
    pub fn scan(&self) -> Result<LatchScan, StoreError> {
        self.store.scan_latches_parking(Some("latches.listed"))
    }

    /// List `latches.staging/` and read, with the bounded read, each entry not in `known`:
    /// the bodies of latches being published (docs/reference.md §5, "The gate closes before
    /// the disk answers"). Never a latch by itself: a gate counts a body that parses for
    /// admission only (`stopline_core::staged`). An entry that cannot be read in its bound, or
    /// is not a regular file, is skipped; so is the whole directory when it cannot be listed
    /// (the durable read is what fails closed). Returns the names listed and the bodies read.
    pub fn staged(&self, known: &BTreeSet<String>) -> (BTreeSet<String>, Vec<ActiveLatch>) {
        let dir = self.store.layout.staging();
        let Ok(names) = self.store.fs.read_dir(&dir) else {
            return (BTreeSet::new(), Vec::new());
        };
        let bodies = names
            .iter()
            .filter(|name| !known.contains(*name))
            .filter_map(|name| {
                let bytes = self.store.fs.read(&dir.join(name)).ok()?;
                Some(ActiveLatch::from_entry(name, Ok(&bytes)))
            })
            .collect();
        (names.into_iter().collect(), bodies)
    }

    /// Every active latch: the directory's entries plus vanished ones. Errors, and entries too
    /// slow to read, become faults.
    pub fn active(&self, log: Option<&WalLog>) -> (Vec<ActiveLatch>, Vec<Refusal>) {
        match self.store.active_latches_scan(log) {
            Ok(scan) => {
                let faults = scan.faults();
                (scan.latches, faults)
            }
            Err(error) => (Vec::new(), vec![error.to_refusal()]),
        }
    }
}
