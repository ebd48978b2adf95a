//! One uid per live agent (docs/reference.md §6): a fresh uid from a range, used by no live process, or
//! a named user's uid checked to be free, held by a lease for as long as the agent lives.
//!
//! Two agents under one uid are not isolated from each other: each may read the other's
//! `/proc/<pid>/environ` (its token) and attach to it with ptrace. So a uid is handed to one
//! agent (or one tool server) at a time. A lease is an exclusive `flock` on
//! `/run/stopline/uids/<uid>.lock`, held by the supervising process; it is released when the
//! lease is dropped or the process dies, so a crashed supervisor never leaks a uid for good.
//! Taking the lock comes first and the census of `/proc` second, so two supervisors starting at
//! once can never both pick the same uid. This module never changes any process's identity.
//!
//! A uid carries nothing from its last holder (docs/reference.md §6): a fresh uid is not leased while SysV
//! objects it owns remain in the host's IPC namespace (`/proc/sysvipc/{shm,msg,sem}`, owner or
//! creator) or files it owns remain under `/tmp`, `/var/tmp`, `/dev/shm` or a path the run
//! shares. That scan is bounded: at most [`SCAN_BOUND`] directory entries in all, symlinks never
//! followed, never crossing into another filesystem; a scan that reaches the bound cannot
//! prove a uid clean, so no uid is leased (fail closed). Leases go to the least recently
//! released uid: a lease's lock file holds the time it was released (empty while held; a
//! crashed holder's is dated by its modification time), and a uid never leased counts oldest.

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

/// The directories scanned for files a uid's last holder left behind (with the run's shared
/// paths).
pub const LEFTOVER_DIRS: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// At most this many directory entries are looked at when scanning for leftovers, in all.
pub const SCAN_BOUND: usize = 100_000;

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
    /// Every uid of the range is in use, or holds what its last holder left behind.
    #[error("every uid of {first}-{last} is in use or holds its last holder's leftovers: {held}")]
    Exhausted {
        /// The range's first uid.
        first: u32,
        /// The range's last uid.
        last: u32,
        /// Which uid holds what.
        held: String,
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
    lock: File,
}

impl UidLease {
    /// The leased uid.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// [`UidLease::fresh_sharing`] with no shared paths.
    pub fn fresh(range: UidRange) -> Result<UidLease, UidError> {
        UidLease::fresh_sharing(range, &[])
    }

    /// Lease the least recently released uid of `range` that no other lease holds, no live
    /// process uses, and that owns no SysV object and no file under [`LEFTOVER_DIRS`] or
    /// `shared` (the paths the run maps in). When none is free the error says which uid holds
    /// what ([`UidError::Exhausted`]).
    pub fn fresh_sharing(range: UidRange, shared: &[PathBuf]) -> Result<UidLease, UidError> {
        let dir = lease_dir()?;
        let mut held: Vec<String> = Vec::new();
        let mut leftovers: Option<Leftovers> = None;
        for uid in by_release_time(&dir, range)? {
            let Some(lock) = try_lock(&dir, uid)? else {
                held.push(format!(
                    "uid {uid}: another supervised agent or tool server"
                ));
                continue;
            };
            if let Some(pid) = processes_of(uid)?.first() {
                held.push(format!("uid {uid}: live process {pid}"));
                continue;
            }
            if leftovers.is_none() {
                leftovers = Some(Leftovers::scan(range, shared)?);
            }
            let Some(found) = &leftovers else { continue };
            if let Some(incomplete) = &found.incomplete {
                return Err(UidError::Exhausted {
                    first: range.first,
                    last: range.last,
                    held: format!("no uid can be proven clean: {incomplete}"),
                });
            }
            if let Some(what) = found.owned.get(&uid) {
                held.push(format!("uid {uid}: {what}"));
                continue;
            }
            // Held from now on: the release time is written again when the lease ends.
            lock.set_len(0)
                .map_err(io_at(&dir.join(format!("{uid}.lock"))))?;
            return Ok(UidLease { uid, lock });
        }
        const SHOWN: usize = 5;
        let mut text = held
            .iter()
            .take(SHOWN)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if held.len() > SHOWN {
            text.push_str(&format!("; and {} more", held.len() - SHOWN));
        }
        Err(UidError::Exhausted {
            first: range.first,
            last: range.last,
            held: text,
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
        Ok(UidLease { uid, lock })
    }
}

impl Drop for UidLease {
    /// Date the release in the lock file (before the lock goes with the file), so the next
    /// fresh lease prefers the uids released longest ago.
    fn drop(&mut self) {
        use std::io::{Seek, Write};
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let _ = self.lock.set_len(0);
        let _ = self.lock.rewind();
        let _ = write!(self.lock, "{now}");
    }
}

/// The uids of `range`, least recently released first (never leased: oldest, by uid).
fn by_release_time(dir: &Path, range: UidRange) -> Result<Vec<u32>, UidError> {
    let mut released: std::collections::HashMap<u32, u128> = std::collections::HashMap::new();
    for entry in std::fs::read_dir(dir).map_err(io_at(dir))? {
        let entry = entry.map_err(io_at(dir))?;
        let Some(uid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_suffix(".lock"))
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|uid| (range.first..=range.last).contains(uid))
        else {
            continue;
        };
        let path = entry.path();
        let written = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse::<u128>().ok());
        let at = written.or_else(|| {
            std::fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis())
        });
        released.insert(uid, at.unwrap_or(0));
    }
    let mut uids: Vec<u32> = (range.first..=range.last).collect();
    uids.sort_by_key(|uid| (released.get(uid).copied().unwrap_or(0), *uid));
    Ok(uids)
}

/// What uids of a range own that a later holder could read: SysV objects of the host's IPC
/// namespace and files under [`LEFTOVER_DIRS`] and the shared paths.
#[derive(Debug, Default)]
struct Leftovers {
    /// The first thing found per uid.
    owned: std::collections::HashMap<u32, String>,
    /// Why the scan could not be finished (the bound reached).
    incomplete: Option<String>,
}

impl Leftovers {
    fn scan(range: UidRange, shared: &[PathBuf]) -> Result<Leftovers, UidError> {
        let mut found = Leftovers::default();
        let in_range = |uid: u32| (range.first..=range.last).contains(&uid);
        for kind in ["shm", "msg", "sem"] {
            let path = PathBuf::from(format!("/proc/sysvipc/{kind}"));
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_at(&path)(e)),
            };
            for (uid, id) in sysv_owners(&text) {
                if in_range(uid) {
                    found
                        .owned
                        .entry(uid)
                        .or_insert_with(|| format!("owns SysV {kind} object {id}"));
                }
            }
        }
        let mut budget = SCAN_BOUND;
        let roots: Vec<PathBuf> = LEFTOVER_DIRS
            .iter()
            .map(PathBuf::from)
            .chain(shared.iter().cloned())
            .collect();
        for root in roots {
            if let Err(at) = found.walk(&root, range, &mut budget) {
                found.incomplete = Some(format!(
                    "the scan for leftovers stopped at {SCAN_BOUND} entries (in {})",
                    at.display()
                ));
                break;
            }
        }
        Ok(found)
    }

    /// Note every file under `root` (not following symlinks, not leaving its filesystem) that a
    /// uid of `range` owns; `Err` with where the budget ran out.
    fn walk(&mut self, root: &Path, range: UidRange, budget: &mut usize) -> Result<(), PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let Ok(top) = std::fs::symlink_metadata(root) else {
            return Ok(());
        };
        let device = top.dev();
        let mut pending = vec![(root.to_path_buf(), top)];
        while let Some((path, meta)) = pending.pop() {
            if (range.first..=range.last).contains(&meta.uid()) {
                self.owned
                    .entry(meta.uid())
                    .or_insert_with(|| format!("owns {}", path.display()));
            }
            if !meta.is_dir() || meta.dev() != device {
                continue;
            }
            // A directory that cannot be listed (gone meanwhile) hides nothing root could not
            // see either.
            let Ok(entries) = std::fs::read_dir(&path) else {
                continue;
            };
            for entry in entries.flatten() {
                if *budget == 0 {
                    return Err(path);
                }
                *budget -= 1;
                if let Ok(meta) = entry.metadata() {
                    pending.push((entry.path(), meta));
                }
            }
        }
        Ok(())
    }
}

/// `(owner, id)` of every object in a `/proc/sysvipc/*` listing whose owner or creator is a
/// uid (both listed: the owner may have been changed away from the creator).
fn sysv_owners(text: &str) -> Vec<(u32, String)> {
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(id), uid, cuid) = (
        at("shmid").or(at("msqid")).or(at("semid")),
        at("uid"),
        at("cuid"),
    ) else {
        return Vec::new();
    };
    let mut owners = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        for column in [uid, cuid].into_iter().flatten() {
            if let Some(owner) = fields.get(column).and_then(|f| f.parse::<u32>().ok()) {
                owners.push((owner, fields.get(id).unwrap_or(&"?").to_string()));
            }
        }
    }
    owners
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
    fn sysv_listings_name_owners_and_creators() {
        let shm = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n         0         7   600                  4096   10    10      0 61190     5 61191     5          0          0          1                     0                     0\n";
        assert_eq!(
            sysv_owners(shm),
            vec![(61190, "7".to_string()), (61191, "7".to_string())]
        );
        let sem = "       key      semid perms      nsems   uid   gid  cuid  cgid      otime      ctime\n  1234   3   600   1   61200   0   0   0   0   0\n";
        assert_eq!(
            sysv_owners(sem),
            vec![(61200, "3".to_string()), (0, "3".to_string())]
        );
        assert!(sysv_owners("").is_empty());
    }

    #[test]
    fn the_uid_line_is_read_whole() {
        let status = "Name:\tsh\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\t5\t5\t5\n";
        assert_eq!(parse_uids(status), Some([1000, 1001, 1002, 1003]));
        assert_eq!(parse_uids("Uid:\t1 2\n"), None);
    }
}
