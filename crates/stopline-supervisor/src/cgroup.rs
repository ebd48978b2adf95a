//! One supervised cgroup v2 group: create it, freeze and thaw it, kill it, observe it, remove it.
//!
//! Every claim about a group's state comes from a fresh read of the kernel's files:
//! `frozen 1` / `frozen 0` in `cgroup.events` confirms a freeze or a thaw, and a kill is
//! confirmed **only** by a fresh read of `populated 0`. Until then a kill is pending and is
//! re-issued. This module must never report a group quiescent from a timer, a cached value or the
//! exit of the one process it started, and never signals a process outside the group.

pub use crate::cgroup_error::CgroupError;
use crate::events::{EventsSnapshot, EventsWatch};
use crate::hierarchy::Hierarchy;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a kill waits for a notification before it reads again and re-issues `cgroup.kill`.
/// inotify normally wakes it far sooner; this bounds the cost of a lost notification.
pub const KILL_REISSUE_INTERVAL: Duration = Duration::from_millis(50);

/// How long a wait for `cgroup.events` sleeps between fresh reads when no notification comes.
///
/// The kernel rate-limits notifications on `cgroup.events` to one per 10 ms
/// (`CGROUP_FILE_NOTIFY_MIN_INTV`): a change within 10 ms of the previous one is announced only
/// when that window ends. So for the first [`FAST_POLL_WINDOW`] of a wait the file is read every
/// millisecond, and every 10 ms after that (inotify still wakes the wait early).
fn poll_interval(waited: Duration) -> Duration {
    if waited < FAST_POLL_WINDOW {
        Duration::from_millis(1)
    } else {
        Duration::from_millis(10)
    }
}

/// See [`poll_interval`].
const FAST_POLL_WINDOW: Duration = Duration::from_millis(25);

/// How a worker's processes are contained and killed. `cgroup2` is the strong method;
/// `subreaper` is the fallback (docs/reference.md §6) and is reported as weaker in status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// A cgroup v2 group: `cgroup.kill`, `cgroup.freeze`, `cgroup.events`.
    Cgroup2,
    /// A child subreaper that walks `/proc` and kills every descendant by pidfd.
    Subreaper,
}

impl Method {
    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Cgroup2 => "cgroup2",
            Method::Subreaper => "subreaper",
        }
    }
}

/// A fresh observation of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupObservation {
    /// `populated` from `cgroup.events`: the authority on whether anything is alive.
    pub populated: bool,
    /// `frozen` from `cgroup.events`.
    pub frozen: bool,
    /// The pids in `cgroup.procs` (this group only), read just after `cgroup.events`.
    pub pids: Vec<u32>,
    /// When the observation was taken.
    pub observed_at: DateTime<Utc>,
}

/// Phase one of a kill: the order was written, nothing is confirmed yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillIssued {
    /// When the first kill order was written.
    pub issued_at: DateTime<Utc>,
    /// The same moment on the monotonic clock, for measuring.
    #[serde(skip, default = "Instant::now")]
    pub issued_instant: Instant,
    /// The method that issued it.
    pub method: Method,
}

/// The outcome of a kill: issued, and confirmed only if quiescence was freshly observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillReport {
    /// When the first kill order was written.
    pub issued_at: DateTime<Utc>,
    /// When `populated 0` (or, for the subreaper, an empty census) was freshly observed;
    /// `None` when the timeout passed first: the kill is still pending.
    pub confirmed_at: Option<DateTime<Utc>>,
    /// Monotonic microseconds from the first kill order to the confirming observation.
    pub elapsed_us: Option<u64>,
    /// How many times the kill order was re-issued after the first.
    pub retries: u32,
    /// The method used.
    pub method: Method,
}

impl KillIssued {
    /// The report of this kill once quiescence was freshly observed, just now, after `retries`
    /// re-issued orders. Call it only right after that observation.
    pub fn confirmed_now(&self, retries: u32) -> KillReport {
        let elapsed = self.issued_instant.elapsed();
        KillReport {
            issued_at: self.issued_at,
            confirmed_at: Some(Utc::now()),
            elapsed_us: Some(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)),
            retries,
            method: self.method,
        }
    }

    /// The report of this kill when the timeout passed before quiescence was observed: still
    /// pending.
    pub fn unconfirmed(&self, retries: u32) -> KillReport {
        KillReport {
            issued_at: self.issued_at,
            confirmed_at: None,
            elapsed_us: None,
            retries,
            method: self.method,
        }
    }
}

impl KillReport {
    /// True when quiescence was observed.
    pub fn confirmed(&self) -> bool {
        self.confirmed_at.is_some()
    }
}

/// A supervised cgroup v2 group under stopline's parent group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    path: PathBuf,
}

impl Group {
    /// Create a new group `<parent>/<name>` (creating the parent if needed). Fails with
    /// [`CgroupError::Exists`] if it already exists: two runs never share a group.
    pub fn create(hierarchy: &Hierarchy, name: &str) -> Result<Group, CgroupError> {
        validate_name(name)?;
        hierarchy.ensure_parent()?;
        let path = hierarchy.parent().join(name);
        match fs::create_dir(&path) {
            Ok(()) => Ok(Group { path }),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {
                Err(CgroupError::Exists(path))
            }
            Err(source) => Err(CgroupError::Io { path, source }),
        }
    }

    /// Open an existing group `<parent>/<name>`.
    pub fn open(hierarchy: &Hierarchy, name: &str) -> Result<Group, CgroupError> {
        validate_name(name)?;
        let path = hierarchy.parent().join(name);
        let events = path.join("cgroup.events");
        fs::metadata(&events).map_err(|source| CgroupError::Io {
            path: events,
            source,
        })?;
        Ok(Group { path })
    }

    /// A group its caller created itself at `path`, outside stopline's parent group (the
    /// gateway's tool servers live under the gateway's own group).
    pub fn at_path(path: PathBuf) -> Group {
        Group { path }
    }

    /// A group at an existing path (from a directory listing of the parent group).
    pub(crate) fn from_path(path: PathBuf) -> Group {
        Group { path }
    }

    /// The group's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The group's `cgroup.procs` file (a pid written there joins the group).
    pub fn procs_path(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// The group's `cgroup.events` file.
    pub fn events_path(&self) -> PathBuf {
        self.path.join("cgroup.events")
    }

    /// One fresh read of `cgroup.events`.
    pub fn events(&self) -> Result<EventsSnapshot, CgroupError> {
        let path = self.events_path();
        let text = read(&path)?;
        EventsSnapshot::parse(&text).map_err(|source| CgroupError::Events { path, source })
    }

    /// A fresh observation: `cgroup.events`, then `cgroup.procs`.
    pub fn observe(&self) -> Result<GroupObservation, CgroupError> {
        let events = self.events()?;
        let pids = self.pids()?;
        Ok(GroupObservation {
            populated: events.populated,
            frozen: events.frozen,
            pids,
            observed_at: Utc::now(),
        })
    }

    /// The pids in this group's `cgroup.procs` (not those of groups below it).
    pub fn pids(&self) -> Result<Vec<u32>, CgroupError> {
        let text = read(&self.procs_path())?;
        Ok(text
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect())
    }

    /// True when `pid` is listed in this group's `cgroup.procs`.
    pub fn contains_pid(&self, pid: u32) -> Result<bool, CgroupError> {
        Ok(self.pids()?.contains(&pid))
    }

    /// Freeze the group and wait for the kernel to confirm `frozen 1`. Returns when it was seen.
    pub fn freeze(&self, timeout: Duration) -> Result<DateTime<Utc>, CgroupError> {
        self.set_frozen(true, timeout)
    }

    /// Thaw the group and wait for the kernel to confirm `frozen 0`. Returns when it was seen.
    pub fn thaw(&self, timeout: Duration) -> Result<DateTime<Utc>, CgroupError> {
        self.set_frozen(false, timeout)
    }

    fn set_frozen(&self, frozen: bool, timeout: Duration) -> Result<DateTime<Utc>, CgroupError> {
        let mut watch = self.watch();
        write(
            &self.path.join("cgroup.freeze"),
            if frozen { "1" } else { "0" },
        )?;
        let started = Instant::now();
        loop {
            if self.events()?.frozen == frozen {
                return Ok(Utc::now());
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(CgroupError::NotConfirmed {
                    path: self.path.clone(),
                    expected: if frozen { "frozen 1" } else { "frozen 0" },
                    waited,
                });
            }
            self.wait_on(&mut watch, (timeout - waited).min(poll_interval(waited)))?;
        }
    }

    /// Write `cgroup.freeze` = 1 once, without waiting for the kernel to confirm (an engage
    /// reaching a group its supervisor may not; the supervisor confirms `frozen 1`).
    pub fn order_freeze(&self) -> Result<(), CgroupError> {
        write(&self.path.join("cgroup.freeze"), "1")
    }

    /// Write `cgroup.kill` once: SIGKILL to every process in the group and below it. This is
    /// an order, not an outcome; see [`Group::kill_until_quiescent`].
    pub fn kill(&self) -> Result<(), CgroupError> {
        write(&self.path.join("cgroup.kill"), "1")
    }

    /// Phase one of a kill: write `cgroup.kill` and note when.
    /// The clock starts just before the write, so a measurement includes the write itself.
    pub fn issue_kill(&self) -> Result<KillIssued, CgroupError> {
        let issued = KillIssued {
            issued_at: Utc::now(),
            issued_instant: Instant::now(),
            method: Method::Cgroup2,
        };
        self.kill()?;
        Ok(issued)
    }

    /// Phase two of a kill: wait up to `timeout` for a fresh read of `populated 0`, re-issuing
    /// `cgroup.kill` whenever no change has been seen for [`KILL_REISSUE_INTERVAL`]. A report
    /// with `confirmed_at: None` means the kill is still pending; call again to keep trying.
    pub fn await_quiescent(
        &self,
        issued: &KillIssued,
        timeout: Duration,
    ) -> Result<KillReport, CgroupError> {
        // The watch exists before the first read below, so a change after that read wakes us.
        let mut watch = self.watch();
        let started = Instant::now();
        let mut last_order = Instant::now();
        let mut retries = 0u32;
        loop {
            if !self.events()?.populated {
                return Ok(issued.confirmed_now(retries));
            }
            let waited = started.elapsed();
            if waited >= timeout {
                tracing::warn!(group = %self.path.display(), ?waited, retries, "kill not yet confirmed");
                return Ok(issued.unconfirmed(retries));
            }
            if last_order.elapsed() >= KILL_REISSUE_INTERVAL {
                self.kill()?;
                retries += 1;
                last_order = Instant::now();
            }
            self.wait_on(&mut watch, (timeout - waited).min(poll_interval(waited)))?;
        }
    }

    /// Kill the group and wait up to `timeout` for a fresh observation of `populated 0`.
    pub fn kill_until_quiescent(&self, timeout: Duration) -> Result<KillReport, CgroupError> {
        let issued = self.issue_kill()?;
        self.await_quiescent(&issued, timeout)
    }

    /// Remove the group (and any groups an agent created below it), deepest first. Refuses
    /// while anything in it is alive.
    pub fn remove(&self) -> Result<(), CgroupError> {
        if self.events()?.populated {
            return Err(CgroupError::Populated(self.path.clone()));
        }
        remove_tree(&self.path)
    }

    /// A watch on `cgroup.events`, or `None` when none can be made (no inotify instance left
    /// to this user on a faulty machine, say): the waits then only poll, every
    /// [`poll_interval`], which confirms as surely and at most that much later. A watch is a
    /// way to wake sooner, never a condition of a confirmation.
    fn watch(&self) -> Option<EventsWatch> {
        let path = self.events_path();
        match EventsWatch::new(&path) {
            Ok(watch) => Some(watch),
            Err(error) => {
                tracing::warn!(events = %path.display(), %error, "cannot watch cgroup.events; polling it instead");
                None
            }
        }
    }

    /// Wait up to `timeout` (a [`poll_interval`] at most) for a change of `cgroup.events`: on
    /// the watch when there is one, else by sleeping it out.
    fn wait_on(
        &self,
        watch: &mut Option<EventsWatch>,
        timeout: Duration,
    ) -> Result<bool, CgroupError> {
        match watch {
            Some(watch) => watch.wait(timeout).map_err(|source| CgroupError::Io {
                path: watch.path().to_owned(),
                source,
            }),
            None => {
                std::thread::sleep(timeout);
                Ok(false)
            }
        }
    }
}

/// A group name is one path component: `[a-z0-9][a-z0-9._-]{0,254}`.
fn validate_name(name: &str) -> Result<(), CgroupError> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok =
        bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if first_ok && rest_ok && name.len() <= 255 {
        Ok(())
    } else {
        Err(CgroupError::InvalidName(name.to_owned()))
    }
}

fn remove_tree(path: &Path) -> Result<(), CgroupError> {
    let entries = fs::read_dir(path).map_err(|source| CgroupError::Io {
        path: path.to_owned(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| CgroupError::Io {
            path: path.to_owned(),
            source,
        })?;
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            remove_tree(&entry.path())?;
        }
    }
    // cgroupfs directories are removed with rmdir even though they list control files.
    fs::remove_dir(path).map_err(|source| CgroupError::Io {
        path: path.to_owned(),
        source,
    })
}

fn read(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(|source| CgroupError::Io {
        path: path.to_owned(),
        source,
    })
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    // cgroupfs files take one write each; `fs::write` opens, writes once and closes.
    fs::write(path, value).map_err(|source| CgroupError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The groups under stopline's parent group: here rather than in `hierarchy.rs`, so that the
/// hierarchy (where groups live) depends on no group and the modules import one way only.
impl Hierarchy {
    /// The groups that exist under stopline's parent group now (after a supervisor restart,
    /// these are the groups whose agents may still run). A missing parent means none.
    pub fn list_groups(&self) -> Result<Vec<Group>, CgroupError> {
        let entries = match fs::read_dir(self.parent()) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(CgroupError::Io {
                    path: self.parent().to_owned(),
                    source,
                })
            }
        };
        let mut groups = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| CgroupError::Io {
                path: self.parent().to_owned(),
                source,
            })?;
            // Every directory is listed, whatever its name: a group stopline would not have
            // named is still a group whose processes someone should look at.
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                groups.push(Group::from_path(entry.path()));
            }
        }
        groups.sort_by(|a, b| a.path().cmp(b.path()));
        Ok(groups)
    }

    /// The supervised group at `path`, when `path` is exactly `<parent>/<name>` of a valid group
    /// name and the group exists. A registration naming anything else (another cgroup, a path
    /// with `..`, a file) is not a supervised group and is never written to.
    pub fn registered_group(&self, path: &Path) -> Option<Group> {
        let name = path.strip_prefix(self.parent()).ok()?;
        let mut components = name.components();
        let Some(Component::Normal(name)) = components.next() else {
            return None;
        };
        if components.next().is_some() {
            return None;
        }
        Group::open(self, name.to_str()?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_are_single_components() {
        let longest_run_group = format!("run-{}.{}", "r".repeat(64), "a".repeat(64));
        for good in ["run-1.agent", "a", "0_x", longest_run_group.as_str()] {
            assert!(validate_name(good).is_ok(), "{good}");
        }
        for bad in ["", "..", ".x", "a/b", "Run", "-x", &"a".repeat(256)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
