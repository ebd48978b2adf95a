//! Shared harness of the `run_*` tests: a policy card, a tiny loopback gateway that answers
//! `/healthz` 200 (so these tests do not depend on `stopline serve`), `stopline run` started as a
//! real child process, and readers of what it registered and recorded.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes
#![allow(dead_code)]

use crate::util::{rand_suffix, Home};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A complete policy card for `run_id` with one agent.
pub fn card(run_id: &str, agent: &str) -> Value {
    json!({"schema":"policy-card.v1","run_id":run_id,"harness_version":"harness-test",
        "stop_conditions":[{"kind":"manual"},{"kind":"wall_clock"},{"kind":"breaker"}],
        "budgets":{agent:{"tool_calls":50,"steps":20,"wall_clock_s":600}},
        "breakers":{"unauthorized_calls":5,"refused_egress":3,"anomaly_score":0.9,"trip_level":"halt-all"},
        "stop_handle":{"name":"test-stop","levels":["pause","trip_breaker","revoke_identity"],
                       "who_may_pull":["anyone-admitted"],"who_may_approve_restart":["operator"]},
        "time_to_stop_target_ms":1000,"require_drill":false})
}

/// A run id no other test uses.
pub fn run_id(test: &str) -> String {
    format!("t-{test}-{}-{}", std::process::id(), rand_suffix())
}

/// Write `card` into the test's directory and return its path.
pub fn write_card(home: &Home, card: &Value) -> PathBuf {
    let path = home.dir.path().join(format!("card-{}.json", rand_suffix()));
    std::fs::write(&path, serde_json::to_vec_pretty(card).unwrap()).unwrap();
    path
}

/// A directory every user may write (for confined agents' outputs), removed on drop.
pub fn open_dir(prefix: &str) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    dir
}

/// A loopback HTTP server answering every request 200 with a small JSON body.
pub struct TestGateway {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
}

impl TestGateway {
    pub fn start() -> TestGateway {
        TestGateway::answering(200)
    }

    pub fn answering(status: u16) -> TestGateway {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&hits);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buffer) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let body = r#"{"ok":true,"served_by":"test-gateway"}"#;
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        TestGateway { addr, hits }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// `stopline run` as a child process of the test.
pub struct RunningRun {
    pub child: Child,
}

impl RunningRun {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// As [`wait_for_state`], for this run: when the state does not come, the run is killed
    /// and the panic shows the last registration and everything the run wrote to stderr (a
    /// supervisor that did not record a change says why only there).
    pub fn await_state(&mut self, home: &Home, run: &str, agent: &str, state: &str) -> Value {
        let started = Instant::now();
        loop {
            if let Some(found) = registration(home, run, agent).filter(|r| r["state"] == state) {
                return found;
            }
            if started.elapsed() >= STATE_WAIT {
                let last = registration(home, run, agent);
                // Nothing of the run outlives the test: its agent's group, then the supervisor.
                if let Some(group) = last.as_ref().and_then(|r| r["cgroup"].as_str()) {
                    let _ = std::fs::write(format!("{group}/cgroup.kill"), "1");
                }
                let _ = self.child.kill();
                let _ = self.child.wait();
                let mut err = String::new();
                if let Some(mut s) = self.child.stderr.take() {
                    let _ = s.read_to_string(&mut err);
                }
                panic!(
                    "timed out waiting for worker state {state}\nlast registration: {}\nthe run's stderr:\n{err}",
                    last.map_or_else(|| "none".into(), |r| r.to_string())
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait (at most `timeout`) for the run to end: exit code, stdout, stderr. A run that has
    /// not ended is killed and the test fails with what it wrote to stderr.
    pub fn finish(self, timeout: Duration) -> (i32, String, String) {
        match self.finish_or_kill(timeout) {
            Ok(ended) => ended,
            Err(stderr) => {
                panic!("stopline run did not end within {timeout:?}; its stderr:\n{stderr}")
            }
        }
    }

    /// As [`RunningRun::finish`], but a run that has not ended within `timeout` is killed and
    /// its stderr returned as the error, so a test can report what every run of it said.
    pub fn finish_or_kill(mut self, timeout: Duration) -> Result<(i32, String, String), String> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let mut out = String::new();
                let mut err = String::new();
                if let Some(mut s) = self.child.stdout.take() {
                    s.read_to_string(&mut out).unwrap();
                }
                if let Some(mut s) = self.child.stderr.take() {
                    s.read_to_string(&mut err).unwrap();
                }
                return Ok((status.code().unwrap_or(-1), out, err));
            }
            if started.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let mut err = String::new();
                if let Some(mut s) = self.child.stderr.take() {
                    let _ = s.read_to_string(&mut err);
                }
                return Err(err);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Start `stopline --json run --policy CARD <flags> -- /bin/sh -c SCRIPT` in `project`.
pub fn start_run(
    home: &Home,
    card: &Path,
    flags: &[&str],
    project: &Path,
    script: &str,
) -> RunningRun {
    start_run_env(home, card, flags, project, script, &[])
}

pub fn start_run_env(
    home: &Home,
    card: &Path,
    flags: &[&str],
    project: &Path,
    script: &str,
    env: &[(&str, &str)],
) -> RunningRun {
    start_run_global(home, &[], card, flags, project, script, env)
}

/// As [`start_run_env`], with `global` flags before the command (e.g. `--control URL`).
pub fn start_run_global(
    home: &Home,
    global: &[&str],
    card: &Path,
    flags: &[&str],
    project: &Path,
    script: &str,
    env: &[(&str, &str)],
) -> RunningRun {
    let card = card.to_string_lossy().into_owned();
    let mut args = global.to_vec();
    args.extend_from_slice(&["--json", "run", "--policy", card.as_str()]);
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "/bin/sh", "-c", script]);
    let mut command = home.command(&args);
    command
        .current_dir(project)
        .env("STOPLINE_BIN", crate::util::bin())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    // The run's own log, when the one running the tests asks for it (a diagnosis aid).
    if let Ok(filter) = std::env::var("STOPLINE_TEST_RUN_LOG") {
        command.env("STOPLINE_LOG", filter);
    }
    RunningRun {
        child: command.spawn().expect("start stopline run"),
    }
}

/// Poll `probe` every 10 ms until it returns `Some`, or panic after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(started.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The worker registration `runs/<run>/workers/<agent>.json`.
pub fn registration(home: &Home, run: &str, agent: &str) -> Option<Value> {
    let bytes = std::fs::read(home.file(&format!("runs/{run}/workers/{agent}.json"))).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// How long a test waits for a worker's registration to reach a state.
pub const STATE_WAIT: Duration = Duration::from_secs(20);

/// Wait until the registration's `state` is `state`.
pub fn wait_for_state(home: &Home, run: &str, agent: &str, state: &str) -> Value {
    wait_for(&format!("worker state {state}"), STATE_WAIT, || {
        registration(home, run, agent).filter(|r| r["state"] == state)
    })
}

/// Every line of the evidence log, each validated against the schema it names.
pub fn evidence(home: &Home) -> Vec<Value> {
    home.valid_evidence()
}

/// The pids written one per line into `file` (empty when missing).
pub fn pids_in(file: &Path) -> Vec<u32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// True when `pid` is a live process (not gone, not a zombie).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => {
            let state = text[text.rfind(')').unwrap() + 1..]
                .split_whitespace()
                .next()
                .unwrap();
            !matches!(state, "Z" | "X" | "x")
        }
        Err(_) => false,
    }
}

/// Live processes whose cgroup v2 path ends with `group` (a fresh walk of `/proc`).
pub fn processes_in_group(group: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        let in_group = cgroup
            .lines()
            .filter_map(|l| l.strip_prefix("0::"))
            .any(|path| path.trim_end_matches(" (deleted)").ends_with(group));
        if in_group && is_alive(pid) {
            found.push(pid);
        }
    }
    found
}

/// The host's pid of the live process of the group ending with `group` whose pid in its own
/// PID namespace is `pid`. An agent under `--net gateway-only` runs in a PID namespace of its
/// own, so the `$$` and `$!` it writes down are that namespace's numbers; a process in the
/// host's namespace is its own pid.
pub fn host_pid(group: &str, pid: u32) -> Option<u32> {
    processes_in_group(group).into_iter().find(|host| {
        let status = std::fs::read_to_string(format!("/proc/{host}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|ids| ids.split_whitespace().last())
            .and_then(|id| id.parse::<u32>().ok())
            == Some(pid)
    })
}

/// Read a small output file an agent wrote (trimmed), `None` when absent.
pub fn read(dir: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim().to_string())
}

/// An agent that counts in `$OUT/counter` every 20 ms beside a child it started (`$OUT/child`),
/// until `$OUT/finish` appears: whether it runs, is frozen or is gone shows in its count.
pub const COUNTING_AGENT: &str = r#"
sleep 1000 &
echo $! > "$OUT/child"
i=0
while :; do
  i=$((i+1))
  echo $i > "$OUT/counter.tmp" && mv "$OUT/counter.tmp" "$OUT/counter"
  [ -e "$OUT/finish" ] && { kill $(cat "$OUT/child"); wait; exit 0; }
  sleep 0.02
done
"#;

/// [`COUNTING_AGENT`] as `agent` of `run` (its card written here) under
/// `stopline run --unconfined --gateway`, with `OUT` = `out` and `env` beside it, once it counts
/// and is registered running: the run, its root's pid and its child's.
pub fn start_counting(
    home: &Home,
    gateway: &TestGateway,
    run: &str,
    agent: &str,
    out: &Path,
    env: &[(&str, &str)],
) -> (RunningRun, u32, u32) {
    let card = write_card(home, &card(run, agent));
    let mut with_out = vec![("OUT", out.to_str().unwrap())];
    with_out.extend_from_slice(env);
    let mut running = start_run_env(
        home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        out,
        COUNTING_AGENT,
        &with_out,
    );
    wait_for("the counter to move", Duration::from_secs(20), || {
        (counter(out) > 3).then_some(())
    });
    let root = running.await_state(home, run, agent, "running")["pid"]
        .as_u64()
        .unwrap() as u32;
    let child = host_pid(
        &format!("run-{run}.{agent}"),
        pids_in(&out.join("child"))[0],
    )
    .expect("the counting agent's child in its group");
    (running, root, child)
}

/// The count a counting agent last wrote to `<out>/counter` (0 before its first).
pub fn counter(out: &Path) -> u64 {
    read(out, "counter")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// `stopline run --policy CARD --unconfined --gateway URL -- /bin/true`: a card run through to
/// its end (or refused) by an agent that does nothing.
pub fn run_true(home: &Home, card: &Path, gateway_url: &str) -> crate::util::Run {
    home.run(&[
        "run",
        "--policy",
        card.to_str().unwrap(),
        "--unconfined",
        "--gateway",
        gateway_url,
        "--",
        "/bin/true",
    ])
}
