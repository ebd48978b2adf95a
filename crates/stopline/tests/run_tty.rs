//! No terminal for the agent (docs/reference.md §6): `stopline run` is started from an operator's
//! interactive shell on a real pseudo-terminal, and the supervised agent tries what broke the
//! old containment — pushing a command line into the terminal's input with `TIOCSTI` (on fds
//! 0, 1, 2 and `/dev/tty`), and pushing `^Z` to stop its supervisor. Every attempt fails (the
//! agent has no terminal to write to), the operator's shell never runs the injected line, and
//! the supervisor is never stopped: an engage still ends the run.
//!
//! These machines run with `dev.tty.legacy_tiocsti = 1`, so on the old code (the agent holding
//! the operator's terminal) both attacks worked.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(unsafe_code)]

mod run_support;
mod util;

use run_support::*;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use util::Home;

/// The agent: try `TIOCSTI` with `payload` on every descriptor that could be a terminal, record
/// each attempt's result in `attempts.json`, then say `done` and keep running for `linger_s`.
const INJECT: &str = r#"
import fcntl, json, os, signal, sys, termios, time
# A hostile agent: its own ^Z must not stop it.
signal.signal(signal.SIGTSTP, signal.SIG_IGN)
out, payload, linger = sys.argv[1], sys.argv[2].encode().decode('unicode_escape'), float(sys.argv[3])
attempts = {}
def push(name, fd):
    try:
        for byte in payload.encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        attempts[name] = "injected"
    except OSError as e:
        attempts[name] = "refused: " + os.strerror(e.errno)
for fd in (0, 1, 2):
    push("fd%d" % fd, fd)
try:
    tty = os.open("/dev/tty", os.O_RDWR)
    push("/dev/tty", tty)
except OSError as e:
    attempts["/dev/tty"] = "refused at open: " + os.strerror(e.errno)
with open(os.path.join(out, "attempts.json"), "w") as f:
    json.dump(attempts, f)
open(os.path.join(out, "done"), "w").close()
deadline = time.time() + linger
while time.time() < deadline:
    time.sleep(0.05)
"#;

/// An interactive `/bin/sh` on a fresh pseudo-terminal (the operator's shell), with everything
/// the terminal shows collected.
struct OperatorShell {
    child: Child,
    master: std::fs::File,
    seen: Arc<Mutex<String>>,
}

impl OperatorShell {
    fn start(home: &Home) -> OperatorShell {
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
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
        let mut command = Command::new("/bin/sh");
        command
            .arg("-i")
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home.dir.path())
            .env("STOPLINE_HOME", home.path())
            .env("PS1", "operator$ ")
            .stdin(open_slave())
            .stdout(open_slave())
            .stderr(open_slave());
        // SAFETY: only async-signal-safe system calls (setsid, ioctl) run between fork and exec.
        unsafe {
            command.pre_exec(|| {
                rustix::process::setsid()?;
                rustix::process::ioctl_tiocsctty(rustix::stdio::stdin())?;
                Ok(())
            });
        }
        let child = command.spawn().expect("start the operator's shell");
        drop(command);
        let master = std::fs::File::from(master);
        let seen = Arc::new(Mutex::new(String::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = Arc::clone(&seen);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buffer) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buffer[..n]));
            }
        });
        OperatorShell {
            child,
            master,
            seen,
        }
    }

    /// Type a line into the terminal, as the operator would.
    fn type_line(&mut self, line: &str) {
        self.master.write_all(line.as_bytes()).unwrap();
        self.master.write_all(b"\n").unwrap();
    }

    fn seen(&self) -> String {
        self.seen.lock().unwrap().clone()
    }

    /// Wait until the terminal shows `marker` (never part of a typed line: the markers are
    /// computed by the shell).
    fn wait_for(&self, marker: &str, timeout: Duration) {
        wait_for(&format!("{marker:?} on the terminal"), timeout, || {
            self.seen().contains(marker).then_some(())
        });
    }
}

impl Drop for OperatorShell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent_script(out: &Path) -> PathBuf {
    let path = out.join("inject.py");
    std::fs::write(&path, INJECT).unwrap();
    path
}

/// The `stopline run` line the operator types; `$((…))` markers say how it ended.
fn run_line(
    home: &Home,
    card: &Path,
    gateway: &TestGateway,
    out: &Path,
    payload: &str,
    linger: u32,
) -> String {
    format!(
        "cd {out} && {bin} --home {home} --json run --policy {card} --gateway {url} -- /usr/bin/python3 {script} {out} '{payload}' {linger} > {out}/receipt.json; echo RUN-ENDED-$((1000+$?))",
        out = out.display(),
        bin = util::bin(),
        home = home.path().display(),
        card = card.display(),
        url = gateway.url(),
        script = agent_script(out).display(),
    )
}

fn assert_every_attempt_refused(out: &Path) {
    let attempts: serde_json::Value =
        serde_json::from_str(&read(out, "attempts.json").expect("attempts.json")).unwrap();
    let attempts = attempts.as_object().unwrap();
    assert_eq!(attempts.len(), 4, "{attempts:?}");
    for (target, result) in attempts {
        assert!(
            result.as_str().unwrap().starts_with("refused"),
            "TIOCSTI on {target}: {result}"
        );
    }
}

#[test]
fn an_agent_cannot_type_into_the_operators_shell() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("tiocsti");
    let card = write_card(&home, &card(&run, "agent-t"));
    let out = open_dir("stopline-run-tiocsti-");
    let pwned = out.path().join("pwned");
    let mut shell = OperatorShell::start(&home);
    let payload = format!("touch {}\\n", pwned.display());
    shell.type_line(&run_line(&home, &card, &gateway, out.path(), &payload, 0));
    shell.wait_for("RUN-ENDED-1000", Duration::from_secs(60));
    // Anything pushed into the terminal's input is read by the shell right after the run ends;
    // this line comes after it, so once its marker shows, an injected line would have run.
    shell.type_line("echo SHELL-ALIVE-$((6*7))");
    shell.wait_for("SHELL-ALIVE-42", Duration::from_secs(20));
    assert_every_attempt_refused(out.path());
    assert!(
        !pwned.exists(),
        "the operator's shell ran the agent's line:\n{}",
        shell.seen()
    );
    let receipt: serde_json::Value =
        serde_json::from_str(&read(out.path(), "receipt.json").unwrap()).unwrap();
    assert_eq!(receipt["exit_code"], 0, "{receipt}");
}

#[test]
fn an_agent_cannot_suspend_its_supervisor_with_ctrl_z() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("ctrlz");
    let card = write_card(&home, &card(&run, "agent-z"));
    let out = open_dir("stopline-run-ctrlz-");
    let mut shell = OperatorShell::start(&home);
    shell.type_line(&run_line(&home, &card, &gateway, out.path(), "\\x1a", 600));
    wait_for("the agent's attempts", Duration::from_secs(60), || {
        out.path().join("done").exists().then_some(())
    });
    assert_every_attempt_refused(out.path());
    let registration = wait_for_state(&home, &run, "agent-z", "running");
    let supervisor = registration["supervisor_pid"].as_u64().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{supervisor}/stat")).unwrap();
    let state = stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap();
    assert_ne!(state, 'T', "the supervisor was stopped: {stat}");
    // The supervisor still enforces: an emergency ends the run (exit 1, stopped).
    home.engage(&format!("run:{run}"), "emergency");
    shell.wait_for("RUN-ENDED-1001", Duration::from_secs(30));
    let receipt: serde_json::Value =
        serde_json::from_str(&read(out.path(), "receipt.json").unwrap()).unwrap();
    assert_eq!(
        receipt["error"]["code"], "break_glass_contained",
        "{receipt}"
    );
    // The operator's shell is untouched and still answers.
    shell.type_line("echo SHELL-ALIVE-$((6*7))");
    shell.wait_for("SHELL-ALIVE-42", Duration::from_secs(20));
}

#[test]
fn ctrl_c_at_the_operators_terminal_stops_the_run_and_its_agent() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("ctrlc");
    let card = write_card(&home, &card(&run, "agent-c"));
    let out = open_dir("stopline-run-ctrlc-");
    let mut shell = OperatorShell::start(&home);
    shell.type_line(&run_line(&home, &card, &gateway, out.path(), "", 600));
    wait_for("the agent", Duration::from_secs(60), || {
        out.path().join("done").exists().then_some(())
    });
    let registration = wait_for_state(&home, &run, "agent-c", "running");
    let root = registration["pid"].as_u64().unwrap() as u32;
    // The operator presses Ctrl-C: the terminal signals its foreground job, the supervisor (the
    // agent, in a session of its own, hears nothing).
    shell.master.write_all(b"\x03").unwrap();
    shell.wait_for("RUN-ENDED-1001", Duration::from_secs(30));
    let group = format!("run-{run}.agent-c");
    wait_for(
        "the agent's group to be empty",
        Duration::from_secs(5),
        || (processes_in_group(&group).is_empty() && !is_alive(root)).then_some(()),
    );
    let receipt: serde_json::Value =
        serde_json::from_str(&read(out.path(), "receipt.json").unwrap()).unwrap();
    assert_eq!(receipt["error"]["code"], "run_contained", "{receipt}");
    shell.type_line("echo SHELL-ALIVE-$((6*7))");
    shell.wait_for("SHELL-ALIVE-42", Duration::from_secs(20));
}
