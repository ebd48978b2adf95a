//! Shared harness for the integration tests: a throwaway control directory, the real binary run
//! with a cleaned environment, and a pseudo-terminal for the owner console's accepted path.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(dead_code, unsafe_code)]

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_stopline")
}

/// Runs the store's clock of a binary built with `--features stopline/failpoints` this many
/// milliseconds ahead (`stopline_store::failpoint`): pass it with the offset to the one command
/// that should see the future, so a token expires or a drain window ends without a sleep. A
/// build without the feature ignores it, so a test relying on it fails there, never skips.
pub const CLOCK_OFFSET: &str = "STOPLINE_TEST_CLOCK_OFFSET_MS";

/// A throwaway home and helpers to run the binary against it.
pub struct Home {
    pub dir: tempfile::TempDir,
}

/// One finished run.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                self.stdout, self.stderr
            )
        })
    }
    /// The refusal code of a failed `--json` run.
    pub fn code_str(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
    pub fn assert_ok(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "stdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        self
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

impl Home {
    pub fn new() -> Home {
        Home {
            dir: tempfile::Builder::new()
                .prefix("stopline-test-")
                .tempdir()
                .expect("tempdir"),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn file(&self, rel: &str) -> PathBuf {
        self.path().join(rel)
    }

    /// A command for the binary with a clean environment and `--home`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.dir.path())
            .arg("--home")
            .arg(self.path())
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Run with `--json` and capture.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        self.command(&full).output().expect("run stopline").into()
    }

    /// Run `args` as given (no `--json`: a hook speaks its own protocol) with `stdin` on its
    /// standard input and extra environment, and capture.
    pub fn run_piped(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
        use std::io::Write as _;
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .envs(env.iter().copied());
        let mut child = cmd.spawn().expect("run stopline");
        // A program may answer before it reads its input: a broken pipe is then no error.
        let _ = child.stdin.take().unwrap().write_all(stdin);
        child.wait_with_output().expect("run stopline").into()
    }

    /// Run with extra environment.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let mut cmd = self.command(&full);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run stopline").into()
    }

    pub fn engage(&self, scope: &str, level: &str) -> Value {
        let r = self.run(&[
            "engage",
            "--scope",
            scope,
            "--level",
            level,
            "--reason",
            "test stop",
            "--by",
            &format!("tester-{}", rand_suffix()),
        ]);
        r.assert_ok();
        r.json()
    }

    /// Engage and lift `n` halts of scopes of their own (`agent:cycle-<i>`): two WAL lines
    /// each, so a test can put a WAL checkpoint (every 64 lines) where it needs one.
    pub fn halt_cycles(&self, n: usize) {
        for i in 0..n {
            let scope = format!("agent:cycle-{i}");
            self.run(&[
                "engage", "--scope", &scope, "--level", "halt-all", "--reason", "cycle", "--by",
                "operator",
            ])
            .assert_ok();
            self.run(&[
                "disengage",
                "--scope",
                &scope,
                "--reason",
                "cycle",
                "--by",
                "operator",
            ])
            .assert_ok();
        }
    }

    pub fn token(&self, args: &[&str]) -> String {
        let mut full = vec!["token", "issue"];
        full.extend_from_slice(args);
        let r = self.command(&full).output().expect("run").into_run();
        r.assert_ok();
        r.stdout.trim().to_string()
    }

    pub fn delegate(&self, parent: &str, child: &str) -> String {
        let r = self
            .command(&["token", "delegate", "--parent", parent, "--agent", child])
            .output()
            .expect("run")
            .into_run();
        r.assert_ok();
        r.stdout.trim().to_string()
    }

    /// `check` exit code and receipt.
    pub fn check(&self, args: &[&str]) -> (i32, Value) {
        let mut full = vec!["check"];
        full.extend_from_slice(args);
        let r = self.run(&full);
        (r.code, r.json())
    }

    pub fn status(&self) -> Value {
        let r = self.run(&["status"]);
        r.assert_ok();
        r.json()
    }

    /// Files in a directory of the home (empty when missing).
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

    /// Run the binary on a fresh pseudo-terminal (owner console): the child is a session leader
    /// with the pty as controlling terminal and stdin/stdout/stderr, so it is in the foreground
    /// process group. Returns exit code and everything it printed (CR stripped).
    pub fn run_on_pty(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        self.run_on_pty_as_given(&full, env)
    }

    /// [`Home::run_on_pty`] without `--json`: the text a person reads at a terminal.
    pub fn run_text_on_pty(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        self.run_on_pty_as_given(args, env)
    }

    fn run_on_pty_as_given(&self, full: &[&str], env: &[(&str, &str)]) -> Run {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        use std::io::Read;
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave_path = PathBuf::from(name.to_string_lossy().into_owned());
        let open_slave = || {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&slave_path)
                .expect("open pty slave")
        };
        let mut cmd = self.command(full);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.stdin(open_slave())
            .stdout(open_slave())
            .stderr(open_slave());
        // SAFETY: only async-signal-safe syscalls (setsid, ioctl) run between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
                Ok(())
            });
        }
        let mut child = cmd.spawn().expect("spawn on pty");
        drop(cmd);
        let mut master_file = std::fs::File::from(master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match master_file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(_) => break, // EIO once every slave descriptor is closed
            }
        }
        let status = child.wait().expect("wait");
        let text = String::from_utf8_lossy(&out).replace('\r', "");
        // With --json the receipt is the JSON object on the pty; errors and warnings are on the
        // same pty.
        let (stdout, stderr): (Vec<&str>, Vec<&str>) = text
            .lines()
            .partition(|l| !l.starts_with("error:") && !l.starts_with("warning:"));
        Run {
            code: status.code().unwrap_or(-1),
            stdout: stdout.join("\n"),
            stderr: stderr.join("\n"),
        }
    }
}

trait IntoRun {
    fn into_run(self) -> Run;
}
impl IntoRun for Output {
    fn into_run(self) -> Run {
        self.into()
    }
}

pub fn rand_suffix() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    let n = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{n:x}")
}

/// Write a latch body by hand (tests that corrupt the directory on purpose).
pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Validate `instance` against `schemas/<name>` (e.g. `evidence-record.v1.json`); panics naming
/// every error.
pub fn validate(name: &str, instance: &Value) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas")
        .join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no schema {}: {e}", path.display()));
    let schema: Value = serde_json::from_str(&text).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:?}\n{instance}");
}

impl Home {
    /// Every line of this home's evidence log as written (not as `evidence list` renders it),
    /// each validated against the schema its own `schema` field names (docs/reference.md §9: every record
    /// carries one); a line without one fails.
    pub fn valid_evidence(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.file("evidence/log.jsonl")).unwrap_or_default();
        text.lines()
            .map(|line| {
                let record: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("an evidence line is not JSON ({e}): {line}"));
                let schema = record["schema"]
                    .as_str()
                    .unwrap_or_else(|| panic!("an evidence record without a schema: {line}"));
                validate(&format!("{schema}.json"), &record);
                record
            })
            .collect()
    }
}

/// Far beyond docs/reference.md §5's 2 s: only a hang detector, never a speed assertion.
pub const HANG: std::time::Duration = std::time::Duration::from_secs(60);

/// Run `cmd` to completion, or kill it and fail when it has not answered within [`HANG`].
pub fn run_or_hang(mut cmd: Command, what: &str) -> Run {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn stopline");
    let deadline = std::time::Instant::now() + HANG;
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output").into();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} hung: no answer after {} s", HANG.as_secs());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
