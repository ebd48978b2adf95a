//! One uid per live agent (SPEC §12.3): a fresh uid from a range, used by no live process, or
//! a named user's uid checked to be free, held by a lease for as long as the agent lives.
//!
//! Two agents under one uid are not isolated from each other: each may read the other's
//! `/proc/<pid>/environ` (its token) and attach to it with ptrace. So a uid is handed to one
//! agent (or one tool server) at a time. A lease is an exclusive `flock` on
//! `/run/stopline/uids/<uid>.lock`, held by the supervising process; it is released when the
//! lease is dropped or the process dies, so a crashed supervisor never leaks a uid for good.
//! Taking the lock comes first and the census of `/proc` second, so two supervisors starting at
//! once can never both pick the same uid. This module never changes any process's identity.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default `[run] uid_range`: the top of the 16-bit range below `nobody` (65534), where
/// distributions allocate no accounts.
pub const DEFAULT_UID_RANGE: UidRange = UidRange {
    first: 61184,
    last: 65519,
};

/// Where the leases' lock files live.
pub const LEASE_DIR: &str = "/run/stopline/uids";

/// An inclusive range of uids, `FIRST-LAST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UidRange {
    /// The first uid.
    pub first: u32,
    /// The last uid (inclusive).
    pub last: u32,
}

impl UidRange {
    /// Parse `FIRST-LAST` (both in 1..=4294967294, first ≤ last).
    pub fn parse(text: &str) -> Result<UidRange, String> {
        let (first, last) = text
            .split_once('-')
            .ok_or_else(|| format!("uid_range {text:?} is not FIRST-LAST"))?;
        let number = |s: &str| {
            s.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0 && *n < u32::MAX)
                .ok_or_else(|| format!("uid_range {text:?}: {s:?} is not a uid above 0"))
        };
        let (first, last) = (number(first)?, number(last)?);
        if first > last {
            return Err(format!(
                "uid_range {text:?}: the first uid is above the last"
            ));
        }
        Ok(UidRange { first, last })
    }
}

/// Why no uid could be leased.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UidError {
    /// The uid runs another live agent or a process outside this run (`uid_in_use`).
    #[error("uid {uid} is in use: {why}")]
    InUse {
        /// The uid.
        uid: u32,
        /// By what.
        why: String,
    },
    /// Every uid of the range is in use.
    #[error("every uid of {first}-{last} is in use")]
    Exhausted {
        /// The range's first uid.
        first: u32,
        /// The range's last uid.
        last: u32,
    },
    /// The lease directory or `/proc` could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// A uid held for one agent; dropping it releases the uid.
#[derive(Debug)]
pub struct UidLease {
    uid: u32,
    _lock: File,
}

impl UidLease {
    /// The leased uid.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Lease the first uid of `range` that no other lease holds and no live process uses.
    pub fn fresh(range: UidRange) -> Result<UidLease, UidError> {
        let dir = lease_dir()?;
        for uid in range.first..=range.last {
            let Some(lock) = try_lock(&dir, uid)? else {
                continue;
            };
            if uids_in_use()?.contains(&uid) {
                continue;
            }
            return Ok(UidLease { uid, _lock: lock });
        }
        Err(UidError::Exhausted {
            first: range.first,
            last: range.last,
        })
    }

    /// Lease exactly `uid` (a named user): refused when another lease holds it or any live
    /// process runs under it.
    pub fn exact(uid: u32) -> Result<UidLease, UidError> {
        let dir = lease_dir()?;
        let Some(lock) = try_lock(&dir, uid)? else {
            return Err(UidError::InUse {
                uid,
                why: "another supervised agent or tool server runs under it".into(),
            });
        };
        let users = processes_of(uid)?;
        if let Some(pid) = users.first() {
            return Err(UidError::InUse {
                uid,
                why: format!(
                    "{} live process(es) run under it outside this run (pid {pid} among them)",
                    users.len()
                ),
            });
        }
        Ok(UidLease { uid, _lock: lock })
    }
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> UidError + '_ {
    move |source| UidError::Io {
        path: path.to_owned(),
        source,
    }
}

fn lease_dir() -> Result<PathBuf, UidError> {
    let dir = PathBuf::from(LEASE_DIR);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io_at(&dir))?;
    Ok(dir)
}

/// The lock of `uid`, or `None` when another lease holds it.
fn try_lock(dir: &Path, uid: u32) -> Result<Option<File>, UidError> {
    let path = dir.join(format!("{uid}.lock"));
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(io_at(&path))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(UidError::Io {
            path,
            source: io::Error::from_raw_os_error(e.raw_os_error()),
        }),
    }
}

/// Every uid (real, effective, saved or filesystem) of every live process.
fn uids_in_use() -> Result<std::collections::BTreeSet<u32>, UidError> {
    let mut uids = std::collections::BTreeSet::new();
    for_each_process(|_, process_uids| uids.extend(process_uids))?;
    Ok(uids)
}

/// The live processes that have `uid` as any of their uids.
pub fn processes_of(uid: u32) -> Result<Vec<u32>, UidError> {
    let mut pids = Vec::new();
    for_each_process(|pid, process_uids| {
        if process_uids.contains(&uid) {
            pids.push(pid);
        }
    })?;
    Ok(pids)
}

fn for_each_process(mut visit: impl FnMut(u32, [u32; 4])) -> Result<(), UidError> {
    let proc = Path::new("/proc");
    for entry in std::fs::read_dir(proc).map_err(io_at(proc))? {
        let entry = entry.map_err(io_at(proc))?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // A process that ended between the listing and the read is not in use.
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        if let Some(uids) = parse_uids(&status) {
            visit(pid, uids);
        }
    }
    Ok(())
}

/// The `Uid:` line of `/proc/<pid>/status`: real, effective, saved, filesystem.
fn parse_uids(status: &str) -> Option<[u32; 4]> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut numbers = line.split_whitespace().map(|n| n.parse::<u32>().ok());
    let mut uids = [0u32; 4];
    for slot in &mut uids {
        *slot = numbers.next()??;
    }
    Some(uids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_and_bad_ones_are_refused() {
        assert_eq!(UidRange::parse("61184-65519").unwrap(), DEFAULT_UID_RANGE);
        for bad in ["", "5", "0-10", "10-5", "a-b", "1-4294967295"] {
            assert!(UidRange::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_uid_line_is_read_whole() {
        let status = "Name:\tsh\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\t5\t5\t5\n";
        assert_eq!(parse_uids(status), Some([1000, 1001, 1002, 1003]));
        assert_eq!(parse_uids("Uid:\t1 2\n"), None);
    }
}
