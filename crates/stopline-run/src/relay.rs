//! The agent's standard streams (docs/reference.md §6): the agent never holds the operator's terminal.
//! Its stdout and stderr are pipes whose bytes the supervisor copies to its own stdout and
//! stderr; its stdin is `/dev/null`, or with `--stdin` a pipe the supervisor feeds from its own
//! stdin.
//!
//! Handing the agent the terminal itself made it the terminal's session member: it could push
//! input into the operator's shell (`TIOCSTI`) and stop the supervisor with `^Z`. A pipe is not
//! a terminal, so neither is possible. Each copy runs on its own thread; the run waits for the
//! output copies only for a bounded time at its end (a process that escaped the group could hold
//! a pipe open forever), and never for the input copy.

use std::io::{Read, Write};
use std::process::{ChildStderr, ChildStdin, ChildStdout};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the end of a run waits for the agent's output to be copied out.
pub const DRAIN_BOUND: Duration = Duration::from_secs(2);

/// The copies of one agent's streams.
pub struct Relays {
    done: mpsc::Receiver<()>,
    outputs: usize,
}

fn copy(mut from: impl Read, mut to: impl Write) {
    let mut buffer = [0u8; 8192];
    loop {
        match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                if to
                    .write_all(&buffer[..n])
                    .and_then(|()| to.flush())
                    .is_err()
                {
                    // The supervisor's own stream is gone: keep draining so the agent never
                    // blocks on a full pipe.
                    let mut sink = std::io::sink();
                    let _ = std::io::copy(&mut from, &mut sink);
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
}

impl Relays {
    /// Start copying `stdout` and `stderr` out, and the supervisor's stdin into `stdin`.
    pub fn start(
        stdin: Option<ChildStdin>,
        stdout: Option<ChildStdout>,
        stderr: Option<ChildStderr>,
    ) -> Relays {
        let (tx, done) = mpsc::channel();
        let mut outputs = 0;
        if let Some(stdout) = stdout {
            outputs += 1;
            let tx = tx.clone();
            let _ = std::thread::Builder::new()
                .name("stopline-relay-out".into())
                .spawn(move || {
                    copy(stdout, std::io::stdout());
                    let _ = tx.send(());
                });
        }
        if let Some(stderr) = stderr {
            outputs += 1;
            let tx = tx.clone();
            let _ = std::thread::Builder::new()
                .name("stopline-relay-err".into())
                .spawn(move || {
                    copy(stderr, std::io::stderr());
                    let _ = tx.send(());
                });
        }
        if let Some(stdin) = stdin {
            // Never joined: it may be blocked reading the supervisor's stdin when the run ends.
            let _ = std::thread::Builder::new()
                .name("stopline-relay-in".into())
                .spawn(move || copy(std::io::stdin(), stdin));
        }
        Relays { done, outputs }
    }

    /// Wait at most [`DRAIN_BOUND`] for the agent's output to be copied out.
    pub fn drain(self) {
        let started = Instant::now();
        for _ in 0..self.outputs {
            let left = DRAIN_BOUND.saturating_sub(started.elapsed());
            if self.done.recv_timeout(left).is_err() {
                tracing::warn!("the agent's output was still open {DRAIN_BOUND:?} after it ended");
                return;
            }
        }
    }
}
