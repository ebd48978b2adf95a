//! Child processes of the battery, bounded: registered by process group, waited with a deadline,
//! output drained on threads, and killed by pid — never by name — when time runs out.
//!
//! Every child is the leader of its own process group (`process_group(0)`, or `setsid` for a
//! pseudo-terminal child), and the group is registered in the case's [`Guard`] until the child
//! is reaped. A child's exit is first observed without reaping it (`waitid` with `WNOWAIT`), its
//! group is then killed (so nothing it started outlives it), and only then is it reaped and
//! unregistered: while it is a zombie its pid cannot be reused, so a kill by pgid can never hit
//! an unrelated process. The runner kills every registered group of a case that times out.

use super::CaseError;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};
use std::io::Read;
use std::process::{Child, ChildStderr, ChildStdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The live children of one case, and its deadline.
#[derive(Debug)]
pub struct Guard {
    groups: Mutex<Vec<i32>>,
    cancelled: AtomicBool,
    deadline: Instant,
}

impl Guard {
    /// A guard whose case must end by `deadline`.
    pub fn new(deadline: Instant) -> Guard {
        Guard {
            groups: Mutex::new(Vec::new()),
            cancelled: AtomicBool::new(false),
            deadline,
        }
    }

    /// The case's deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// True once the case ran out of time (or was cancelled by the runner).
    pub fn expired(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst) || Instant::now() >= self.deadline
    }

    /// Cancel the case: kill every registered process group.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        for &group in groups.iter() {
            kill_group(group);
        }
    }

    /// Register a child that leads its own process group.
    pub fn register(&self, child: &Child) {
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups.push(child.id() as i32);
        if self.cancelled.load(Ordering::SeqCst) {
            kill_group(child.id() as i32);
        }
    }

    /// Kill the child's group, reap the child, unregister it; returns its exit code (-1 when a
    /// signal ended it). The group is killed while the child is still unreaped (see the module
    /// comment), under the registry lock.
    pub fn finish(&self, child: &mut Child) -> i32 {
        let group = child.id() as i32;
        {
            let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
            kill_group(group);
            groups.retain(|&g| g != group);
        }
        match child.wait() {
            Ok(status) => status.code().unwrap_or(-1),
            Err(_) => -1,
        }
    }

    /// Wait for `child` to exit, at most until the deadline; then kill what is left of its group
    /// and reap it. `Err(TimedOut)` when the deadline came first.
    pub fn wait(&self, child: &mut Child, what: &str) -> Result<i32, CaseError> {
        loop {
            if exited(child) {
                return Ok(self.finish(child));
            }
            if self.expired() {
                self.finish(child);
                return Err(CaseError::TimedOut(format!(
                    "{what} did not end before the case's deadline; its process group was killed"
                )));
            }
            std::thread::sleep(Duration::from_millis(3));
        }
    }
}

fn kill_group(group: i32) {
    if let Some(pid) = Pid::from_raw(group) {
        let _ = rustix::process::kill_process_group(pid, Signal::KILL);
    }
}

/// True when the child has exited; the child is *not* reaped (`WNOWAIT`).
fn exited(child: &Child) -> bool {
    let Some(pid) = Pid::from_raw(child.id() as i32) else {
        return true;
    };
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
    match rustix::process::waitid(WaitId::Pid(pid), options) {
        Ok(Some(_)) => true,
        Ok(None) => false,
        // ECHILD: already reaped, which only `finish` does.
        Err(_) => true,
    }
}

/// A pipe being read to its end on a thread.
pub struct Drain(mpsc::Receiver<Vec<u8>>);

impl Drain {
    /// Read `source` to its end on a new thread.
    pub fn start(mut source: impl Read + Send + 'static) -> Drain {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let mut buffer = [0u8; 8192];
            loop {
                match source.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(n) => bytes.extend_from_slice(&buffer[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // EIO on a pseudo-terminal's master once every slave is closed.
                    Err(_) => break,
                }
            }
            let _ = tx.send(bytes);
        });
        Drain(rx)
    }

    /// Everything read, waiting at most `grace` after the child ended (a descendant that escaped
    /// the group may hold the pipe open; its output is then given up, never waited for).
    pub fn collect(self, grace: Duration) -> String {
        let bytes = self.0.recv_timeout(grace).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Drains of a child's stdout and stderr.
pub fn drain_pipes(stdout: Option<ChildStdout>, stderr: Option<ChildStderr>) -> [Option<Drain>; 2] {
    [stdout.map(Drain::start), stderr.map(Drain::start)]
}

/// A long-running child of a case (a gateway): its group is killed and it is reaped on drop.
pub struct Background {
    child: Child,
    guard: std::sync::Arc<Guard>,
}

impl Background {
    /// Take ownership of a spawned child that leads its own process group, registering it.
    pub fn adopt(child: Child, guard: std::sync::Arc<Guard>) -> Background {
        guard.register(&child);
        Background { child, guard }
    }

    /// True while the child has not exited.
    pub fn running(&self) -> bool {
        !exited(&self.child)
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.guard.finish(&mut self.child);
    }
}
