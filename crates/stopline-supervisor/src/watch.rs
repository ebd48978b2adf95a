//! A small inotify watcher on one directory (the store's `latches/`), for a supervisor loop that
//! must react to a new latch at once and fall back to a full reload whenever it may have missed
//! something.
//!
//! Any entry created, moved in, deleted, written or re-attributed wakes the watcher. A lost watch
//! (`IN_IGNORED`, the directory deleted or moved) or a queue overflow is reported as
//! [`WatchEvent::Lost`]: the caller must then reload everything and re-create the watcher. This
//! module reports changes; it must never interpret the directory's contents, and it never treats
//! silence as "nothing changed" — callers also sweep on a timer.

use inotify::{EventMask, Inotify, WatchMask};
use rustix::event::Timespec;
use rustix::event::{poll, PollFd, PollFlags};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

/// Errors of the directory watcher.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WatchError {
    /// Creating the watch or reading events failed.
    #[error("watching {path}: {source}")]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// What a wait on the watcher saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// Entries changed; their names (possibly repeated).
    Changed(Vec<OsString>),
    /// The watch is gone or events were dropped: reload everything, then re-create the watcher.
    Lost,
    /// Nothing arrived within the timeout.
    Timeout,
}

/// An inotify watch on one directory.
pub struct DirWatcher {
    inotify: Inotify,
    path: PathBuf,
    lost: bool,
}

impl DirWatcher {
    /// Watch `dir` for `IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_CLOSE_WRITE | IN_ATTRIB`, plus
    /// the events that mean the watch itself is gone.
    pub fn new(dir: &Path) -> Result<DirWatcher, WatchError> {
        let error = |source| WatchError::Io {
            path: dir.to_owned(),
            source,
        };
        let inotify = Inotify::init().map_err(error)?;
        inotify
            .watches()
            .add(
                dir,
                WatchMask::CREATE
                    | WatchMask::MOVED_TO
                    | WatchMask::MOVED_FROM
                    | WatchMask::DELETE
                    | WatchMask::CLOSE_WRITE
                    | WatchMask::ATTRIB
                    | WatchMask::DELETE_SELF
                    | WatchMask::MOVE_SELF
                    | WatchMask::ONLYDIR,
            )
            .map_err(error)?;
        Ok(DirWatcher {
            inotify,
            path: dir.to_owned(),
            lost: false,
        })
    }

    /// The watched directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wait up to `timeout` for changes. Once [`WatchEvent::Lost`] has been returned, every
    /// later call returns it again at once.
    pub fn wait(&mut self, timeout: Duration) -> Result<WatchEvent, WatchError> {
        if self.lost {
            return Ok(WatchEvent::Lost);
        }
        let timespec = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let ready = {
            let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec)) {
                Ok(count) => count > 0,
                Err(rustix::io::Errno::INTR) => false,
                Err(errno) => {
                    return Err(self.error(io::Error::from_raw_os_error(errno.raw_os_error())))
                }
            }
        };
        if !ready {
            return Ok(WatchEvent::Timeout);
        }
        let mut names = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let events = match self.inotify.read_events(&mut buffer) {
                Ok(events) => events,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(self.error(error)),
            };
            let mut any = false;
            for event in events {
                any = true;
                if event.mask.intersects(
                    EventMask::IGNORED
                        | EventMask::Q_OVERFLOW
                        | EventMask::DELETE_SELF
                        | EventMask::MOVE_SELF
                        | EventMask::UNMOUNT,
                ) {
                    self.lost = true;
                }
                if let Some(name) = event.name {
                    names.push(name.to_owned());
                }
            }
            if !any {
                break;
            }
        }
        if self.lost {
            Ok(WatchEvent::Lost)
        } else {
            Ok(WatchEvent::Changed(names))
        }
    }

    /// Run the watcher on its own thread, sending every change (and each `Timeout` after
    /// `tick`, so the receiver can sweep) to a channel. The thread ends after sending
    /// [`WatchEvent::Lost`] or when the receiver is dropped.
    pub fn spawn_channel(
        mut self,
        tick: Duration,
    ) -> io::Result<mpsc::Receiver<Result<WatchEvent, WatchError>>> {
        let (sender, receiver) = mpsc::channel();
        std::thread::Builder::new()
            .name("stopline-dir-watch".into())
            .spawn(move || loop {
                let event = self.wait(tick);
                let end = !matches!(event, Ok(WatchEvent::Changed(_)) | Ok(WatchEvent::Timeout));
                if sender.send(event).is_err() || end {
                    return;
                }
            })?;
        Ok(receiver)
    }

    fn error(&self, source: io::Error) -> WatchError {
        WatchError::Io {
            path: self.path.clone(),
            source,
        }
    }
}
