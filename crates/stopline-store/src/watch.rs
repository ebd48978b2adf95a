//! Watching the control directory for changes: [`Store::watch`], the one watcher of the home
//! (the gateway's view and `stopline run`'s reaction loop both wake on it).
//!
//! inotify watches directories, not files: the home (for `epoch.json`, `state.json`, the WAL,
//! the cleared folders and the `latches/` entry itself) and `latches/`. A wait reports whether
//! something that can change a view changed, whether a new entry appeared in `latches/` (so a
//! gate can put it in force at once, latches first), and whether events may have been missed (a
//! queue overflow, a lost watch on `latches/`, which is re-made): then the caller must re-read
//! everything. Names outside that set are not reported, so a reader's own lock files and the
//! registrations and evidence beside them never wake anybody (a gateway re-read its
//! state for good on the close of its own WAL lock). `ops/` is watched too, apart: a journal
//! another process appended to, created or moved away (archived), and the archive itself, are
//! reported as [`ControlChanges::journals`], so a reader that follows the journals
//! (`follow.rs`) reads what they gained when they gain it. The journals of this process (its pid
//! in the writer name) are not reported: its own records never wake it.
//!
//! A gate that refuses on staged latches (docs/reference.md §5, "The gate closes before the disk
//! answers") also watches `latches.staging/` ([`ControlWatch::watch_staging`]): a body written
//! into it or removed from it is reported as [`ControlChanges::staged`], never as a change of
//! the view (nothing staged is a latch).
//!
//! This module reports changes; it never reads a record, and silence is never "nothing
//! changed": every caller also reloads on a timer. A watch whose home went away ends with
//! [`WatchError::HomeGone`]. Watching is not a durable step: nothing here writes.

use crate::Store;
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::ffi::OsStr;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Why a watch cannot be made or kept: the caller falls back to its periodic reload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// The control directory itself was removed or moved away.
    #[error("the control directory itself went away")]
    HomeGone,
    /// inotify failed (creating the watch, or reading its events).
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// Something about the watch itself a caller should note (status shows it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchNote {
    /// The kernel's event queue overflowed: events were lost.
    Overflowed,
    /// The watch on `latches/` was lost (the directory removed or moved); it is re-made when
    /// `latches/` appears again.
    LatchesLost,
    /// `latches/` exists but cannot be watched: only reloads see new latches now.
    LatchesUnwatchable(String),
}

impl WatchNote {
    /// True when change notification no longer works in full (only reloads refresh).
    pub fn degrades(&self) -> bool {
        matches!(self, WatchNote::LatchesUnwatchable(_))
    }
}

impl std::fmt::Display for WatchNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WatchNote::Overflowed => write!(f, "inotify queue overflowed; full reload"),
            WatchNote::LatchesLost => write!(
                f,
                "the watch on latches/ was lost; re-watching and reloading"
            ),
            WatchNote::LatchesUnwatchable(error) => write!(f, "cannot watch latches/: {error}"),
        }
    }
}

/// What one [`ControlWatch::wait`] saw. All false and no notes: nothing arrived in time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ControlChanges {
    /// Something that can change a view changed (latches, WAL, epoch, state, cleared folders).
    pub changed: bool,
    /// A new entry was created in (or moved into) `latches/`.
    pub appeared: bool,
    /// Events may have been missed: re-read everything, not only what changed.
    pub missed: bool,
    /// An operation journal of another process (or the archive) changed under `ops/`.
    pub journals: bool,
    /// A body was written into `latches.staging/` or removed from it (only when the watch
    /// was asked to: [`ControlWatch::watch_staging`]).
    pub staged: bool,
    /// What happened to the watch itself, oldest first.
    pub notes: Vec<WatchNote>,
}

impl ControlChanges {
    /// True when anything was reported.
    pub fn any(&self) -> bool {
        self.changed
            || self.appeared
            || self.missed
            || self.journals
            || self.staged
            || !self.notes.is_empty()
    }
}

/// An inotify watch on a control directory (see the module docs). Made by [`Store::watch`].
#[derive(Debug)]
pub struct ControlWatch {
    inotify: Inotify,
    latches: PathBuf,
    home_wd: WatchDescriptor,
    latches_wd: Option<WatchDescriptor>,
    ops: PathBuf,
    ops_wd: Option<WatchDescriptor>,
    /// `latches.staging/`, when asked for ([`ControlWatch::watch_staging`]).
    staging: Option<PathBuf>,
    staging_wd: Option<WatchDescriptor>,
    /// This process's pid: journals named with it are its own and not reported.
    own_pid: String,
    /// Notes from making the watch, handed out by the first wait.
    pending: Vec<WatchNote>,
    buffer: Vec<u8>,
}

/// Names in the home whose change can change a view (`None`: the home itself).
fn relevant(name: Option<&OsStr>) -> bool {
    match name.and_then(OsStr::to_str) {
        None => true,
        Some(name) => matches!(
            name,
            "latches" | "epoch.json" | "state.json" | "breakglass.wal.jsonl" | "breakglass.cleared"
        ),
    }
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

impl Store {
    /// Watch this store's control directory. Fails when the home cannot be watched (it is
    /// missing, or inotify is unavailable); a missing `latches/` is watched once it appears.
    /// Anything that happened before the watch existed is not reported: read after making it.
    pub fn watch(&self) -> Result<ControlWatch, WatchError> {
        let layout = self.layout();
        let inotify = Inotify::init()?;
        let home_wd = inotify.watches().add(layout.home(), mask())?;
        let mut watch = ControlWatch {
            inotify,
            latches: layout.latches(),
            home_wd,
            latches_wd: None,
            ops: layout.ops(),
            ops_wd: None,
            staging: None,
            staging_wd: None,
            own_pid: self.env.pid().to_string(),
            pending: Vec::new(),
            buffer: vec![0u8; 64 * 1024],
        };
        watch.watch_latches();
        watch.watch_ops();
        Ok(watch)
    }
}

impl ControlWatch {
    /// Also report what is written into and removed from `latches.staging/`
    /// ([`ControlChanges::staged`]); a missing one is watched once it appears.
    pub fn watch_staging(&mut self, store: &Store) {
        self.staging = Some(store.layout().staging());
        self.rewatch_staging();
    }

    fn rewatch_staging(&mut self) {
        if let Some(staging) = &self.staging {
            if let Ok(wd) = self.inotify.watches().add(staging, mask()) {
                self.staging_wd = Some(wd);
            }
        }
    }

    /// Watch `ops/` when it exists (a missing one is watched once it appears).
    fn watch_ops(&mut self) {
        if let Ok(wd) = self.inotify.watches().add(&self.ops, mask()) {
            self.ops_wd = Some(wd);
        }
    }

    /// True when `name`, an entry of `ops/`, is another process's journal or the archive.
    fn journal_of_another(&self, name: Option<&OsStr>) -> bool {
        let Some(name) = name.and_then(OsStr::to_str) else {
            return false;
        };
        if name == crate::ops_archive::ARCHIVE_DIR {
            return true;
        }
        let Some(writer) = name.strip_suffix(".jsonl") else {
            return false;
        };
        let mut parts = writer.rsplitn(3, '-');
        let _start = parts.next();
        parts.next() != Some(self.own_pid.as_str())
    }

    fn watch_latches(&mut self) {
        match self.inotify.watches().add(&self.latches, mask()) {
            Ok(wd) => self.latches_wd = Some(wd),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => self
                .pending
                .push(WatchNote::LatchesUnwatchable(error.to_string())),
        }
    }

    /// Wait for changes, up to `timeout` (`None`: until something arrives), and report every
    /// event queued by then. `Err` ends the watch: the caller reloads on its timer only, or
    /// makes a new one.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<ControlChanges, WatchError> {
        let mut changes = ControlChanges {
            notes: std::mem::take(&mut self.pending),
            ..ControlChanges::default()
        };
        if !changes.notes.is_empty() {
            return Ok(changes);
        }
        if !self.ready(timeout)? {
            return Ok(changes);
        }
        let mut rewatch = false;
        let mut buffer = std::mem::take(&mut self.buffer);
        let read = self.drain(&mut buffer, &mut changes, &mut rewatch);
        self.buffer = buffer;
        read?;
        if rewatch && self.latches_wd.is_none() {
            self.watch_latches();
            changes.notes.append(&mut self.pending);
        }
        if rewatch && self.ops_wd.is_none() {
            self.watch_ops();
            changes.journals |= self.ops_wd.is_some();
        }
        if rewatch && self.staging_wd.is_none() && self.staging.is_some() {
            self.rewatch_staging();
            changes.staged |= self.staging_wd.is_some();
        }
        Ok(changes)
    }

    /// Read every queued event without blocking.
    fn drain(
        &mut self,
        buffer: &mut [u8],
        changes: &mut ControlChanges,
        rewatch: &mut bool,
    ) -> Result<(), WatchError> {
        loop {
            let events = match self.inotify.read_events(buffer) {
                Ok(events) => events,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) => return Err(error.into()),
            };
            let mut any = false;
            for event in events {
                any = true;
                if event.mask.contains(EventMask::Q_OVERFLOW) {
                    changes.notes.push(WatchNote::Overflowed);
                    changes.missed = true;
                    continue;
                }
                if event.wd == self.home_wd {
                    let gone = EventMask::DELETE_SELF | EventMask::MOVE_SELF | EventMask::IGNORED;
                    if event.mask.intersects(gone) {
                        return Err(WatchError::HomeGone);
                    }
                    if event.name == Some(OsStr::new("latches"))
                        || event.name == Some(OsStr::new("ops"))
                        || event.name == Some(OsStr::new("latches.staging"))
                    {
                        *rewatch = true;
                    }
                    changes.changed |= relevant(event.name);
                } else if Some(&event.wd) == self.latches_wd.as_ref() {
                    let lost = EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF;
                    if event.mask.intersects(lost) {
                        self.latches_wd = None;
                        *rewatch = true;
                        changes.missed = true;
                        changes.notes.push(WatchNote::LatchesLost);
                    }
                    changes.appeared |= event
                        .mask
                        .intersects(EventMask::CREATE | EventMask::MOVED_TO);
                    changes.changed = true;
                } else if Some(&event.wd) == self.staging_wd.as_ref() {
                    let lost = EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF;
                    if event.mask.intersects(lost) {
                        self.staging_wd = None;
                        *rewatch = true;
                    }
                    changes.staged = true;
                } else if Some(&event.wd) == self.ops_wd.as_ref() {
                    let lost = EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF;
                    if event.mask.intersects(lost) {
                        self.ops_wd = None;
                        *rewatch = true;
                        changes.journals = true;
                    } else {
                        changes.journals |= self.journal_of_another(event.name);
                    }
                }
            }
            if !any {
                return Ok(());
            }
        }
    }

    /// Wait until events are queued, up to `timeout` (`None`: for as long as it takes).
    fn ready(&self, timeout: Option<Duration>) -> Result<bool, WatchError> {
        let timespec = timeout.map(|timeout| Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        });
        let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
        match poll(&mut fds, timespec.as_ref()) {
            Ok(count) => Ok(count > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(errno) => Err(io::Error::from_raw_os_error(errno.raw_os_error()).into()),
        }
    }
}
