//! The errors of cgroup operations, apart from `cgroup.rs` so that the hierarchy's discovery
//! (`hierarchy.rs`) and the groups (`cgroup.rs`) can share them while importing one way only.

use crate::events::EventsParseError;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Errors from cgroup operations.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CgroupError {
    /// No `cgroup2` filesystem is listed in `/proc/mounts`.
    #[error("no cgroup2 filesystem is mounted (see /proc/mounts)")]
    NoCgroup2,
    /// A group name that is not one path component of `[a-z0-9][a-z0-9._-]{0,254}`.
    #[error("invalid group name {0:?}")]
    InvalidName(String),
    /// The group to create already exists.
    #[error("group {0} already exists")]
    Exists(PathBuf),
    /// A read or write of a cgroup file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// `cgroup.events` could not be read as an observation.
    #[error("{path}: {source}")]
    Events {
        /// The events file.
        path: PathBuf,
        /// Why.
        source: EventsParseError,
    },
    /// A freeze or thaw was written but the kernel did not confirm it in time.
    #[error("{path}: `{expected}` not observed within {waited:?}")]
    NotConfirmed {
        /// The group.
        path: PathBuf,
        /// The line that was expected in `cgroup.events`.
        expected: &'static str,
        /// How long it was waited for.
        waited: Duration,
    },
    /// The group still holds live processes and cannot be removed.
    #[error("group {0} is still populated")]
    Populated(PathBuf),
}
