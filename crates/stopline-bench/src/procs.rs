//! The processes a process-level bench starts (`fleet.rs`, `gateway/procs.rs`): real `stopline`
//! homes and `stopline serve` gateways of this binary, and the ports they listen on; every child
//! ended by its own handle when the bench ends, however it ends.
#![allow(clippy::disallowed_methods)] // the benches' own throwaway homes and the processes they start, never a real home

use crate::error::BenchError;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::new(e.to_string())
}

/// A loopback port free now (the kernel picks it; released for the child to bind).
pub fn free_port() -> Result<u16, BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(err)?;
    Ok(listener.local_addr().map_err(err)?.port())
}

/// Children this bench started, ended by their own handles when it ends however it ends.
#[derive(Default)]
pub struct Children(pub Vec<Child>);

impl Drop for Children {
    /// SIGTERM to each (a server that has workers of its own, as nginx's master does, ends them
    /// on it; SIGKILL would leave them behind), then SIGKILL to whichever has not exited within
    /// 5 s; every one reaped.
    fn drop(&mut self) {
        for child in &self.0 {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for child in &mut self.0 {
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One `stopline` home of the bench: its directory and, for the etcd one, its `--control`.
pub struct BenchHome {
    /// The home directory.
    pub dir: PathBuf,
    /// `--control`, for a home on a distributed plane.
    pub control: Option<String>,
}

impl BenchHome {
    /// `stopline --home … [--control …]`, its environment cleared of a caller's token and home.
    pub fn command(&self, exe: &Path) -> Command {
        let mut command = Command::new(exe);
        command.arg("--home").arg(&self.dir);
        if let Some(url) = &self.control {
            command.arg("--control").arg(url);
        }
        command
            .env_remove("STOPLINE_TOKEN")
            .env_remove("STOPLINE_HOME")
            .stdin(Stdio::null());
        command
    }

    /// Run a CLI verb with `--json`; its parsed output, or why not.
    pub fn cli(&self, exe: &Path, args: &[&str]) -> Result<serde_json::Value, BenchError> {
        let out = self
            .command(exe)
            .arg("--json")
            .args(args)
            .output()
            .map_err(err)?;
        if !out.status.success() {
            return Err(err(format!(
                "stopline {args:?} on {}: {} {}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        serde_json::from_slice(&out.stdout).map_err(err)
    }

    /// A token for `agent`, with a `tool_calls` budget of `budget` when given.
    pub fn token(
        &self,
        exe: &Path,
        agent: &str,
        budget: Option<usize>,
    ) -> Result<String, BenchError> {
        let budget = budget.map(|n| format!("tool_calls={n}"));
        let mut args = vec!["token", "issue", "--agent", agent, "--ttl", "3600"];
        if let Some(budget) = &budget {
            args.extend(["--budget", budget.as_str()]);
        }
        let minted = self.cli(exe, &args)?;
        minted["token"]
            .as_str()
            .map(String::from)
            .ok_or_else(|| err(format!("token issue printed no token: {minted}")))
    }
}

/// Try `f` every 100 ms until it succeeds or `limit` passes; the last error.
pub fn within<T>(
    limit: Duration,
    mut f: impl FnMut() -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    let deadline = Instant::now() + limit;
    loop {
        match f() {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() >= deadline => return Err(error),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Start `stopline serve` on `home` (its configuration listens on `addr`); wait until it accepts.
pub fn serve(
    exe: &Path,
    home: &BenchHome,
    addr: &str,
    children: &mut Children,
) -> Result<(), BenchError> {
    let mut child = home
        .command(exe)
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(err)?;
    let up = within(Duration::from_secs(20), || {
        std::net::TcpStream::connect(addr).map(drop).map_err(err)
    });
    if let Ok(Some(status)) = child.try_wait() {
        return Err(err(format!("stopline serve exited at start: {status}")));
    }
    children.0.push(child);
    up
}
