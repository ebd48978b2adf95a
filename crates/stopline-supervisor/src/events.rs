//! Reading a group's `cgroup.events` file and waiting for it to change.
//!
//! `cgroup.events` is the kernel's own account of a group: `populated` (any live process in the
//! group or below it) and `frozen`. The kernel signals a change of either as a modification of
//! the file, which inotify delivers as `IN_MODIFY`; [`EventsWatch`] waits for that with a short
//! timeout so a lost notification costs a poll interval, never a missed stop.
//!
//! This module only reads. It must never treat a cached or inferred value as an observation: a
//! caller that wants to know whether a group is empty reads the file again.

use inotify::{Inotify, WatchMask};
use rustix::event::Timespec;
use rustix::event::{poll, PollFd, PollFlags};
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One fresh read of `cgroup.events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventsSnapshot {
    /// `populated 1`: some live process is in the group or a group below it.
    pub populated: bool,
    /// `frozen 1`: the group is frozen and every process in it has stopped.
    pub frozen: bool,
}

/// Why a `cgroup.events` text could not be read as an observation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventsParseError {
    /// A key the kernel always writes is absent.
    #[error("cgroup.events has no `{0}` line")]
    Missing(&'static str),
    /// A key has a value other than 0 or 1.
    #[error("cgroup.events has `{key} {value}`, expected 0 or 1")]
    BadValue {
        /// The key.
        key: String,
        /// Its value as read.
        value: String,
    },
}

impl EventsSnapshot {
    /// Parse the text of a `cgroup.events` file. A missing or odd `populated` or `frozen` line
    /// is an error, never a default: "not populated" must be read, not assumed.
    pub fn parse(text: &str) -> Result<EventsSnapshot, EventsParseError> {
        let mut populated = None;
        let mut frozen = None;
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
                continue;
            };
            let slot = match key {
                "populated" => &mut populated,
                "frozen" => &mut frozen,
                _ => continue,
            };
            *slot = Some(match value {
                "0" => false,
                "1" => true,
                _ => {
                    return Err(EventsParseError::BadValue {
                        key: key.to_owned(),
                        value: value.to_owned(),
                    })
                }
            });
        }
        Ok(EventsSnapshot {
            populated: populated.ok_or(EventsParseError::Missing("populated"))?,
            frozen: frozen.ok_or(EventsParseError::Missing("frozen"))?,
        })
    }
}

/// An inotify watch on one `cgroup.events` file.
///
/// Create it *before* the write whose effect you wait for (a kill, a freeze), then alternate
/// fresh reads with [`EventsWatch::wait`]: a change between the write and the first read is
/// then never lost.
pub struct EventsWatch {
    inotify: Inotify,
    path: PathBuf,
}

impl EventsWatch {
    /// Watch `path` (a `cgroup.events` file) for `IN_MODIFY`. Fails when no inotify instance
    /// can be made (`EMFILE`: the user's `max_user_instances` is used up; `ENFILE`; `ENOMEM`)
    /// or the watch cannot be added (`ENOSPC`: `max_user_watches`); the caller then polls.
    pub fn new(path: &Path) -> io::Result<EventsWatch> {
        crate::failpoint::hit("supervisor.events.inotify")?;
        let inotify = Inotify::init()?;
        inotify.watches().add(path, WatchMask::MODIFY)?;
        Ok(EventsWatch {
            inotify,
            path: path.to_owned(),
        })
    }

    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wait up to `timeout` for a change notification. Returns true when one (or more) arrived,
    /// false on timeout. Pending notifications are drained, so the next wait waits for a new one.
    pub fn wait(&mut self, timeout: Duration) -> io::Result<bool> {
        let timespec = Timespec {
            tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let ready = {
            let mut fds = [PollFd::new(&self.inotify, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec)) {
                Ok(count) => count > 0,
                Err(rustix::io::Errno::INTR) => false,
                Err(errno) => return Err(io::Error::from_raw_os_error(errno.raw_os_error())),
            }
        };
        if ready {
            self.drain()?;
        }
        Ok(ready)
    }

    /// Read and discard every queued notification without blocking.
    fn drain(&mut self) -> io::Result<()> {
        let mut buffer = [0u8; 1024];
        loop {
            match self.inotify.read_events(&mut buffer) {
                Ok(events) => {
                    if events.count() == 0 {
                        return Ok(());
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) => return Err(error),
            }
        }
    }
}

impl AsFd for EventsWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Result<EventsSnapshot, EventsParseError>) {
        assert_eq!(EventsSnapshot::parse(text), expected, "{text:?}");
    }

    #[test]
    fn parses_what_the_kernel_writes() {
        check(
            "populated 1\nfrozen 0\n",
            Ok(EventsSnapshot {
                populated: true,
                frozen: false,
            }),
        );
        check(
            "populated 0\nfrozen 1\n",
            Ok(EventsSnapshot {
                populated: false,
                frozen: true,
            }),
        );
    }

    #[test]
    fn missing_or_odd_lines_are_errors_not_defaults() {
        check("frozen 0\n", Err(EventsParseError::Missing("populated")));
        check("populated 0\n", Err(EventsParseError::Missing("frozen")));
        check("", Err(EventsParseError::Missing("populated")));
        check(
            "populated 2\nfrozen 0\n",
            Err(EventsParseError::BadValue {
                key: "populated".into(),
                value: "2".into(),
            }),
        );
    }
}
