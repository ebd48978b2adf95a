//! A frozen reader, for `stopline bench engage`: a real process that holds a shared `flock` on
//! a file and is stopped by SIGSTOP, as a gateway frozen in the middle of a read would be.
//!
//! The child is `sleep` with the file as its stdin; before exec it takes the shared lock on that
//! descriptor (so `/proc/locks` names the child), and the parent then stops it and waits until
//! the kernel reports it stopped. Dropping the handle kills and reaps it, releasing the lock.
//! This module must never signal any process but the one it started.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A stopped process holding a shared lock; killed and reaped on drop.
#[derive(Debug)]
pub struct FrozenReader {
    child: Child,
}

impl FrozenReader {
    /// Start the holder of a shared lock on `path` and stop it.
    pub fn hold(path: &Path) -> io::Result<FrozenReader> {
        let file = File::open(path)?;
        let mut command = Command::new("sleep");
        command
            .arg("3600")
            .stdin(Stdio::from(file))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: only `flock(2)` on the child's stdin runs between fork and exec; it is
        // async-signal-safe and allocates nothing.
        unsafe {
            command.pre_exec(|| {
                let stdin = std::os::fd::BorrowedFd::borrow_raw(0);
                rustix::fs::flock(stdin, rustix::fs::FlockOperation::LockShared)
                    .map_err(io::Error::from)
            });
        }
        let child = command.spawn()?;
        let frozen = FrozenReader { child };
        let pid = rustix::process::Pid::from_raw(frozen.child.id() as i32)
            .ok_or_else(|| io::Error::other("the child has no pid"))?;
        rustix::process::kill_process(pid, rustix::process::Signal::STOP)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while !frozen.is_stopped() {
            if Instant::now() > deadline {
                return Err(io::Error::other("the lock holder did not stop"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(frozen)
    }

    fn is_stopped(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().next().map(|s| s == "T"))
            })
            .unwrap_or(false)
    }
}

impl Drop for FrozenReader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
