//! One case's throwaway world: a private temporary directory holding the control directory
//! (`<dir>/home`, created by the binary itself), and the binary run inside it with a cleared
//! environment. Removed when the case ends.
//!
//! Every run is `<binary> --home <dir>/home --json ARGS…` with only `PATH`, `HOME=<dir>` and
//! the variables the case names; stdin is closed unless the case feeds it. Nothing here writes
//! outside the case's directory, and nothing reads the caller's own control directory.

use super::process::{drain_pipes, Guard};
use super::{harness, CaseError};
use serde_json::Value;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The one variable of the caller's environment passed through (see the module `conformance`).
pub const BREAK_VAR: &str = "STOPLINE_CONFORMANCE_BREAK";

/// One finished run of the binary.
#[derive(Debug, Clone)]
pub struct Out {
    /// Exit code (-1 when a signal ended it).
    pub code: i32,
    /// Everything on stdout.
    pub stdout: String,
    /// Everything on stderr.
    pub stderr: String,
}

impl Out {
    /// stdout as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or(Value::Null)
    }

    /// The refusal code: `error.code` of the JSON body, else the `error: <code>:` line.
    pub fn refusal(&self) -> String {
        if let Some(code) = self.json()["error"]["code"].as_str() {
            return code.to_string();
        }
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix("error: "))
            .and_then(|rest| rest.split(':').next())
            .unwrap_or_default()
            .to_string()
    }

    /// A one-line summary for observations.
    pub fn brief(&self) -> String {
        let clip = |s: &str| {
            let s = s.trim().replace('\n', " ");
            if s.chars().count() > 300 {
                format!("{}…", s.chars().take(300).collect::<String>())
            } else {
                s
            }
        };
        format!(
            "exit {}, stdout {:?}, stderr {:?}",
            self.code,
            clip(&self.stdout),
            clip(&self.stderr)
        )
    }
}

/// A case's throwaway directory and the binary under test.
pub struct Sandbox {
    dir: PathBuf,
    bin: PathBuf,
    guard: Arc<Guard>,
    /// This sandbox's own suffix (process id and sequence number), unique on the machine.
    tag: String,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Sandbox {
    /// A fresh private directory (mode 0700) for the case `id`.
    pub fn new(bin: &Path, guard: Arc<Guard>, id: &str) -> Result<Sandbox, CaseError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let tag = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let name = format!("stopline-conformance-{tag}-{nanos:x}-{id}");
        let dir = std::env::temp_dir().join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| harness(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Sandbox {
            dir,
            bin: bin.to_path_buf(),
            guard,
            tag,
        })
    }

    /// A run id for `base` that no other sandbox on the machine uses: a started run's cgroup
    /// (`run-<id>.<agent>`) is machine-wide, and two batteries run side by side (the test suite
    /// runs the battery and the broken binary's battery at once) collided on fixed ids (`agent
    /// agent-r of run approved is already running`).
    pub fn run_id(&self, base: &str) -> String {
        format!("{base}-{}", self.tag)
    }

    /// The case's directory (the home's parent; free for the case's own files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The control directory, `<dir>/home`.
    pub fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// A path inside the control directory.
    pub fn file(&self, rel: &str) -> PathBuf {
        self.home().join(rel)
    }

    /// The binary under test.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// The case's guard (deadline and live children).
    pub fn guard(&self) -> &Arc<Guard> {
        &self.guard
    }

    /// The binary with a cleared environment, `--home`, `--json` and `args`; stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_in(&self.home(), args)
    }

    /// [`Sandbox::command`] against another control directory (a second control plane inside
    /// the case's directory, e.g. one whose key forges tokens for this one).
    pub fn command_in(&self, home: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()),
            )
            .env("HOME", &self.dir)
            .arg("--home")
            .arg(home)
            .arg("--json")
            .args(args)
            .current_dir(&self.dir)
            .stdin(Stdio::null());
        if let Some(value) = std::env::var_os(BREAK_VAR) {
            cmd.env(BREAK_VAR, value);
        }
        cmd
    }

    /// Run `args` and capture its output.
    pub fn run(&self, args: &[&str]) -> Result<Out, CaseError> {
        self.run_with(args, &[], None)
    }

    /// `stopline drill` at its smallest (one agent, no sub-agents, the pull after 50 ms, a
    /// 400 ms window) with `more` arguments: a real drill whose record lands in the evidence log.
    pub fn small_drill(&self, more: &[&str]) -> Result<Out, CaseError> {
        let mut args = vec![
            "drill",
            "--agents",
            "1",
            "--subagents",
            "0",
            "--pull-after-ms",
            "50",
            "--window-ms",
            "400",
        ];
        args.extend_from_slice(more);
        self.run(&args)
    }

    /// Run `args` with extra environment and optional stdin bytes.
    pub fn run_with(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        stdin: Option<&[u8]>,
    ) -> Result<Out, CaseError> {
        let mut cmd = self.command(args);
        for (key, value) in env {
            cmd.env(key, value);
        }
        self.output(cmd, stdin, &args.join(" "))
    }

    /// Run a prepared command (its own process group) to its end, bounded by the deadline.
    pub fn output(
        &self,
        mut cmd: Command,
        stdin: Option<&[u8]>,
        what: &str,
    ) -> Result<Out, CaseError> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        cmd.process_group(0);
        let mut child = cmd
            .spawn()
            .map_err(|e| harness(format!("cannot start {what}: {e}")))?;
        self.guard.register(&child);
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let bytes = bytes.to_vec();
            std::thread::spawn(move || {
                let _ = std::io::Write::write_all(&mut pipe, &bytes);
            });
        }
        let [out, err] = drain_pipes(child.stdout.take(), child.stderr.take());
        let code = self.guard.wait(&mut child, what)?;
        let grace = Duration::from_secs(2);
        Ok(Out {
            code,
            stdout: out.map(|d| d.collect(grace)).unwrap_or_default(),
            stderr: err.map(|d| d.collect(grace)).unwrap_or_default(),
        })
    }

    /// Write `bytes` at `rel` inside the control directory (parents created): the cases damage
    /// the control directory on purpose.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<(), CaseError> {
        let path = self.file(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(harness)?;
        }
        std::fs::write(&path, bytes).map_err(|e| harness(format!("{}: {e}", path.display())))
    }

    /// Names in a directory of the home, sorted (empty when missing).
    pub fn entries(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.file(rel))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.guard.cancel();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
