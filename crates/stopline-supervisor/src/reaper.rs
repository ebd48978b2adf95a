//! The fallback when no cgroup v2 is available: a child subreaper that walks `/proc` for every
//! descendant of the agent and kills each one by pidfd, until none remain.
//!
//! A process group is escaped by `setsid`, so membership is the process tree instead. The
//! agent's root process is made a child subreaper before exec (see
//! [`crate::SpawnOptions::child_subreaper`]): while it lives, anything orphaned below it is
//! re-parented to it and stays in its tree, double-forked `setsid` daemons included. Every
//! process once seen in the tree is remembered by (pid, start time), so one re-parented further
//! up (to this supervisor, itself a subreaper, after the root died) is still followed. A kill
//! stops the root first (so it cannot fork), kills everything below it, repeats until only the
//! root is left, then kills the root. Quiescence is a fresh census with no live member.
//! A freeze (SIGSTOP) is confirmed when a census shows every member stopped, a `vfork` parent
//! whose child is stopped counting as held (it cannot take the stop until the child lets it
//! go); a thaw also clears a stop still pending, so nothing stops by itself afterwards.
//!
//! This is weaker than a cgroup, and status says so (`method: "subreaper"`): a process forked
//! and orphaned between two censuses *after* the root has died cannot be attributed. This module
//! must never signal a process it has not seen in the tree, and verifies each pidfd against the
//! recorded start time so a reused pid is never signalled.

use crate::cgroup::{KillIssued, KillReport, Method};
use crate::proc::{self, ProcStat};
use chrono::{DateTime, Utc};
use rustix::process::{Pid, Signal};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::time::{Duration, Instant};

/// Pause between passes while waiting for processes to die or stop.
const PASS_INTERVAL: Duration = Duration::from_millis(2);

/// Errors of the subreaper fallback.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReaperError {
    /// Walking `/proc` failed.
    #[error("reading /proc: {0}")]
    Proc(io::Error),
    /// `prctl(PR_SET_CHILD_SUBREAPER)` failed.
    #[error("becoming a child subreaper: {0}")]
    Subreaper(io::Error),
    /// The root process is not running.
    #[error("process {0} is not running")]
    NoRoot(u32),
    /// Signalling a process failed for a reason other than its being gone.
    #[error("signalling process {pid}: {source}")]
    Signal {
        /// The process.
        pid: u32,
        /// The error.
        source: io::Error,
    },
    /// A stop or continue was sent but not observed in time.
    #[error("`{expected}` not observed for every descendant of {root} within {waited:?}")]
    NotConfirmed {
        /// The root process.
        root: u32,
        /// What was expected.
        expected: &'static str,
        /// How long it was waited for.
        waited: Duration,
    },
}

/// Make the calling process a child subreaper, so orphans of its descendants are re-parented to
/// it rather than to init. Idempotent.
pub fn install_subreaper() -> Result<(), ReaperError> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|errno| ReaperError::Subreaper(io::Error::from_raw_os_error(errno.raw_os_error())))
}

/// The descendants of one agent root, tracked through `/proc`.
#[derive(Debug, Clone)]
pub struct Reaper {
    root: u32,
    root_start: u64,
    /// Every process ever seen in the tree: pid → start time.
    known: HashMap<u32, u64>,
}

impl Reaper {
    /// Track the tree under `root` (normally a child started with `child_subreaper: true`).
    pub fn attach(root: u32) -> Result<Reaper, ReaperError> {
        let stat = proc::read_stat(root)
            .map_err(ReaperError::Proc)?
            .ok_or(ReaperError::NoRoot(root))?;
        let mut known = HashMap::new();
        known.insert(root, stat.starttime);
        Ok(Reaper {
            root,
            root_start: stat.starttime,
            known,
        })
    }

    /// The root pid.
    pub fn root(&self) -> u32 {
        self.root
    }

    /// A fresh walk of `/proc`: every process in the tree, exited ones (zombies) included.
    /// Also remembers new members and reaps zombies re-parented to this process.
    pub fn census(&mut self) -> Result<Vec<ProcStat>, ReaperError> {
        let processes = proc::all_processes().map_err(ReaperError::Proc)?;
        let by_pid: HashMap<u32, ProcStat> = processes.iter().map(|p| (p.pid, *p)).collect();
        let children = proc::children_map(&processes);
        let me = std::process::id();

        let mut queue: VecDeque<ProcStat> = self
            .known
            .iter()
            .filter_map(|(pid, start)| by_pid.get(pid).filter(|p| p.starttime == *start))
            .copied()
            .collect();
        let mut seen = HashSet::new();
        let mut members = Vec::new();
        while let Some(process) = queue.pop_front() {
            if process.pid == me || !seen.insert(process.pid) {
                continue;
            }
            if let Some(below) = children.get(&process.pid) {
                queue.extend(below.iter().copied());
            }
            members.push(process);
        }
        self.known = members.iter().map(|p| (p.pid, p.starttime)).collect();
        self.reap_adopted_zombies(&members, me);
        Ok(members)
    }

    /// Live members of a fresh census (exited processes are not counted).
    pub fn live(&mut self) -> Result<Vec<ProcStat>, ReaperError> {
        Ok(self
            .census()?
            .into_iter()
            .filter(|p| !p.has_exited())
            .collect())
    }

    /// True when a fresh census finds no live process in the tree.
    pub fn is_quiescent(&mut self) -> Result<bool, ReaperError> {
        Ok(self.live()?.is_empty())
    }

    /// Phase one of a kill: one kill pass, noted with its time.
    pub fn issue_kill(&mut self) -> Result<KillIssued, ReaperError> {
        let issued = KillIssued {
            issued_at: Utc::now(),
            issued_instant: Instant::now(),
            method: Method::Subreaper,
        };
        let live = self.live()?;
        self.kill_pass(&live)?;
        Ok(issued)
    }

    /// Phase two: repeat kill passes until a fresh census has no live member, or `timeout`.
    pub fn await_quiescent(
        &mut self,
        issued: &KillIssued,
        timeout: Duration,
    ) -> Result<KillReport, ReaperError> {
        let started = Instant::now();
        let mut retries = 0u32;
        loop {
            let live = self.live()?;
            if live.is_empty() {
                return Ok(issued.confirmed_now(retries));
            }
            if started.elapsed() >= timeout {
                tracing::warn!(
                    root = self.root,
                    live = live.len(),
                    "subreaper kill not yet confirmed"
                );
                return Ok(issued.unconfirmed(retries));
            }
            self.kill_pass(&live)?;
            retries += 1;
            std::thread::sleep(PASS_INTERVAL);
        }
    }

    /// Kill every process in the tree and wait up to `timeout` for an empty census.
    pub fn kill_until_quiescent(&mut self, timeout: Duration) -> Result<KillReport, ReaperError> {
        let issued = self.issue_kill()?;
        self.await_quiescent(&issued, timeout)
    }

    /// The weaker freeze: SIGSTOP every live member until a census shows them all held: stopped,
    /// or parked in a `vfork` whose child is held (see `not_yet_held`).
    pub fn stop_all(&mut self, timeout: Duration) -> Result<DateTime<Utc>, ReaperError> {
        self.until_all(
            timeout,
            "stopped",
            |live| not_yet_held(live, proc::waits_for_vfork_child),
            Signal::STOP,
        )
    }

    /// Undo [`Reaper::stop_all`]: SIGCONT every live member until none is stopped by a signal
    /// or still has a SIGSTOP pending (a `vfork` parent has one until its child let it go: left
    /// there, it would stop by itself after the thaw).
    pub fn continue_all(&mut self, timeout: Duration) -> Result<DateTime<Utc>, ReaperError> {
        self.until_all(
            timeout,
            "running",
            |live| {
                live.iter()
                    .filter(|p| p.state == 'T' || proc::stop_pending(p.pid).unwrap_or(true))
                    .copied()
                    .collect()
            },
            Signal::CONT,
        )
    }

    fn until_all(
        &mut self,
        timeout: Duration,
        expected: &'static str,
        pending: impl Fn(&[ProcStat]) -> Vec<ProcStat>,
        signal: Signal,
    ) -> Result<DateTime<Utc>, ReaperError> {
        let started = Instant::now();
        loop {
            let pending = pending(&self.live()?);
            if pending.is_empty() {
                return Ok(Utc::now());
            }
            let waited = started.elapsed();
            if waited >= timeout {
                return Err(ReaperError::NotConfirmed {
                    root: self.root,
                    expected,
                    waited,
                });
            }
            for process in &pending {
                send(process, signal)?;
            }
            std::thread::sleep(PASS_INTERVAL);
        }
    }

    /// One pass: stop the root so it cannot fork; kill everything else; kill the root only once
    /// nothing else is alive, so that while anything lives the root's subreaper role keeps every
    /// orphan inside the tree.
    fn kill_pass(&self, live: &[ProcStat]) -> Result<(), ReaperError> {
        let root = live
            .iter()
            .find(|p| p.pid == self.root && p.starttime == self.root_start);
        let others: Vec<&ProcStat> = live.iter().filter(|p| p.pid != self.root).collect();
        if let Some(root) = root {
            send(root, Signal::STOP)?;
        }
        for process in &others {
            send(process, Signal::STOP)?;
        }
        for process in &others {
            send(process, Signal::KILL)?;
        }
        if others.is_empty() {
            if let Some(root) = root {
                send(root, Signal::KILL)?;
            }
        }
        Ok(())
    }

    /// Reap zombies that were re-parented to this process (the root itself is left to the
    /// caller, who holds its `Child` handle and its exit status).
    fn reap_adopted_zombies(&self, members: &[ProcStat], me: u32) {
        for zombie in members
            .iter()
            .filter(|p| p.has_exited() && p.ppid == me && p.pid != self.root)
        {
            if let Some(pid) = Pid::from_raw(zombie.pid as i32) {
                let _ = rustix::process::waitid(
                    rustix::process::WaitId::Pid(pid),
                    rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOHANG,
                );
            }
        }
    }
}

/// The members of one census (`live`, exited ones left out) that a freeze does not hold yet.
/// Held is stopped (`T`/`t`), or parked in the kernel waiting for a `vfork` child
/// (`in_vfork`) while every live child of it is held: a shell that `vfork`s a command whose
/// child took its SIGSTOP before `exec` sleeps there, uninterruptible by a stop, until the
/// child is continued, and it runs nothing meanwhile. Counting it pending would leave such a
/// freeze unconfirmed forever (it did, under disk load, where `exec` is slow). A parent with no
/// live child is never held this way: the child it is creating is not in the census yet.
fn not_yet_held(live: &[ProcStat], in_vfork: impl Fn(u32) -> bool) -> Vec<ProcStat> {
    let children = proc::children_map(live);
    let mut held: HashSet<u32> = live
        .iter()
        .filter(|p| p.is_stopped())
        .map(|p| p.pid)
        .collect();
    loop {
        let parked: Vec<u32> = live
            .iter()
            .filter(|p| !held.contains(&p.pid) && p.state == 'D')
            .filter(|p| {
                children.get(&p.pid).is_some_and(|below| {
                    !below.is_empty() && below.iter().all(|c| held.contains(&c.pid))
                })
            })
            .filter(|p| in_vfork(p.pid))
            .map(|p| p.pid)
            .collect();
        if parked.is_empty() {
            break;
        }
        held.extend(parked);
    }
    live.iter()
        .filter(|p| !held.contains(&p.pid))
        .copied()
        .collect()
}

/// Signal one process through a pidfd, after checking the pidfd names the process the census
/// saw (same start time). A process that is already gone is not an error.
fn send(process: &ProcStat, signal: Signal) -> Result<(), ReaperError> {
    let Some(pid) = i32::try_from(process.pid).ok().and_then(Pid::from_raw) else {
        return Ok(());
    };
    let pidfd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::SRCH) => return Ok(()),
        Err(errno) => return Err(signal_error(process.pid, errno)),
    };
    // The pidfd now pins one process. If the pid was reused since the census, the start time
    // read now differs and the stranger is left alone.
    match proc::read_stat(process.pid) {
        Ok(Some(now)) if now.starttime == process.starttime => {}
        _ => return Ok(()),
    }
    match rustix::process::pidfd_send_signal(&pidfd, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(errno) => Err(signal_error(process.pid, errno)),
    }
}

fn signal_error(pid: u32, errno: rustix::io::Errno) -> ReaperError {
    ReaperError::Signal {
        pid,
        source: io::Error::from_raw_os_error(errno.raw_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(pid: u32, ppid: u32, state: char) -> ProcStat {
        ProcStat {
            pid,
            ppid,
            state,
            starttime: u64::from(pid),
        }
    }

    fn pending_pids(live: &[ProcStat], vforking: &[u32]) -> Vec<u32> {
        not_yet_held(live, |pid| vforking.contains(&pid))
            .iter()
            .map(|p| p.pid)
            .collect()
    }

    #[test]
    fn a_vfork_parent_is_held_once_its_child_is_stopped() {
        let live = [member(10, 1, 'D'), member(11, 10, 'T')];
        assert_eq!(pending_pids(&live, &[10]), Vec::<u32>::new());
        // Its child still runs: the child may exec and let the parent go.
        let live = [member(10, 1, 'D'), member(11, 10, 'R')];
        assert_eq!(pending_pids(&live, &[10]), [10, 11]);
    }

    #[test]
    fn a_sleeper_that_is_not_in_vfork_or_has_no_child_is_not_held() {
        let live = [member(10, 1, 'D'), member(11, 10, 'T')];
        assert_eq!(pending_pids(&live, &[]), [10]);
        let live = [member(10, 1, 'D')];
        assert_eq!(pending_pids(&live, &[10]), [10]);
    }

    #[test]
    fn held_vfork_parents_chain_upwards() {
        let live = [
            member(10, 1, 'D'),
            member(11, 10, 'D'),
            member(12, 11, 'T'),
            member(13, 1, 'S'),
        ];
        assert_eq!(pending_pids(&live, &[10, 11]), [13]);
    }
}
