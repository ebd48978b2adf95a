//! The owner console's terminal, allocated here: a pseudo-terminal whose slave becomes the
//! child's stdin (and stdout/stderr), as its controlling terminal, with the child as session
//! leader and therefore in the terminal's foreground process group.
//!
//! [`Terminal`] also builds the near misses the console must refuse: a terminal on stdin and
//! stderr that is not the process's controlling terminal (so it cannot be in its foreground
//! group), and a controlling terminal on stdin with stderr going to a pipe.
//!
//! This is the one place the crate uses `unsafe`: `Command::pre_exec`, whose closure runs
//! between fork and exec and calls only `setsid` and `ioctl(TIOCSCTTY)`, both async-signal-safe.

use super::process::{drain_pipes, Drain};
use super::sandbox::{Out, Sandbox};
use super::{harness, CaseError};
use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How the child is attached to the pseudo-terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// stdin, stdout and stderr on the slave; session leader with the slave as controlling
    /// terminal: the owner console's accepted shape.
    Controlling,
    /// stdin, stdout and stderr on the slave, but the child stays in the battery's session in a
    /// process group of its own: the slave is a terminal, not its controlling one.
    NotControlling,
    /// Controlling terminal on stdin and stdout; stderr is a pipe.
    StderrPiped,
}

/// A fresh pseudo-terminal: the master, and a way to open its slave.
struct Pair {
    master: File,
    slave: std::path::PathBuf,
}

impl Pair {
    fn open() -> Result<Pair, CaseError> {
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).map_err(harness)?;
        grantpt(&master).map_err(harness)?;
        unlockpt(&master).map_err(harness)?;
        let name = ptsname(&master, Vec::new()).map_err(harness)?;
        Ok(Pair {
            master: File::from(master),
            slave: std::path::PathBuf::from(name.to_string_lossy().into_owned()),
        })
    }

    fn slave(&self) -> Result<File, CaseError> {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.slave)
            .map_err(|e| harness(format!("{}: {e}", self.slave.display())))
    }
}

/// Make the child a session leader whose controlling terminal is its stdin.
#[allow(unsafe_code)]
fn become_session_leader(cmd: &mut Command) {
    // SAFETY: only async-signal-safe system calls (setsid, ioctl) run between fork and exec,
    // and the closure touches no memory shared with other threads.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
            Ok(())
        });
    }
}

impl Sandbox {
    /// Run `args` on a fresh pseudo-terminal attached as `terminal`. What the child printed on
    /// the terminal is split: lines starting `error:` are its stderr, the rest its stdout.
    pub fn pty(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        terminal: Terminal,
    ) -> Result<Out, CaseError> {
        self.pty_home(&self.home(), args, env, terminal)
    }

    /// [`Sandbox::pty`] against another control directory.
    pub fn pty_home(
        &self,
        home: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        terminal: Terminal,
    ) -> Result<Out, CaseError> {
        let pair = Pair::open()?;
        let mut cmd = self.command_in(home, args);
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd.stdin(pair.slave()?).stdout(pair.slave()?);
        match terminal {
            Terminal::Controlling => {
                cmd.stderr(pair.slave()?);
                become_session_leader(&mut cmd);
            }
            Terminal::NotControlling => {
                cmd.stderr(pair.slave()?).process_group(0);
            }
            Terminal::StderrPiped => {
                cmd.stderr(Stdio::piped());
                become_session_leader(&mut cmd);
            }
        }
        let what = format!("{} (on a pseudo-terminal)", args.join(" "));
        let mut child = cmd
            .spawn()
            .map_err(|e| harness(format!("cannot start {what}: {e}")))?;
        // The parent's copies of the slave must be closed, or the master never sees EIO.
        drop(cmd);
        self.guard().register(&child);
        let screen = Drain::start(pair.master);
        let [_, piped] = drain_pipes(None, child.stderr.take());
        let code = self.guard().wait(&mut child, &what)?;
        let grace = Duration::from_secs(2);
        let text = screen.collect(grace).replace('\r', "");
        let (errors, rest): (Vec<&str>, Vec<&str>) =
            text.lines().partition(|l| l.starts_with("error:"));
        let mut stderr = errors.join("\n");
        if let Some(piped) = piped {
            stderr.push_str(&piped.collect(grace));
        }
        Ok(Out {
            code,
            stdout: rest.join("\n"),
            stderr,
        })
    }
}
