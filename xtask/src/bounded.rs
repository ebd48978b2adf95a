//! A bounded child process for the release gate: stdin closed, stdout and stderr drained on
//! threads (so a full pipe can never stall it, and an inherited pipe can never turn the wait
//! into an unbounded join), polled every 100 ms, and — on timeout — killed by pid together with
//! every descendant, never by name.
//!
//! Descendants are found by walking `/proc/*/stat` parent links from the child's pid while the
//! child is stopped (SIGSTOP), so none can be reparented away between the walk and the kill.

use rustix::process::{Pid, Signal};
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What a bounded child left.
#[derive(Debug)]
pub struct Finished {
    /// The exit code (`None` when a signal ended it).
    pub code: Option<i32>,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

/// Run `cmd` to its end within `timeout`; on timeout kill it and its descendants and fail.
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<Finished, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start: {e}"))?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
        rx
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| format!("wait: {e}"))? {
            break status;
        }
        if started.elapsed() >= timeout {
            kill_tree(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "no result within {} s; the child {} and its descendants were killed",
                timeout.as_secs(),
                child.id()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let grace = Duration::from_secs(5);
    Ok(Finished {
        code: status.code(),
        stdout: out.recv_timeout(grace).unwrap_or_default(),
        stderr: err.recv_timeout(grace).unwrap_or_default(),
    })
}

/// Stop `root`, kill every descendant (deepest first), then `root` itself.
fn kill_tree(root: u32) {
    let signal = |pid: u32, sig: Signal| {
        if let Some(pid) = Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    };
    signal(root, Signal::STOP);
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        for child in children_of(parent) {
            if !tree.contains(&child) {
                signal(child, Signal::STOP);
                tree.push(child);
            }
        }
        i += 1;
    }
    for pid in tree.iter().rev() {
        signal(*pid, Signal::KILL);
    }
}

/// Pids whose parent is `parent`, from `/proc/*/stat`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let after = stat.get(stat.rfind(')')? + 2..)?.to_string();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .collect()
}
