//! The walls between agents and around them (docs/reference.md §6), each tried with the attack that broke
//! the old containment: two concurrent runs get different uids, so one agent can neither attach
//! to the other with ptrace nor read its token from `/proc/<pid>/environ`; a uid already in use
//! is refused `uid_in_use`; `PR_SET_NO_NEW_PRIVS` is set; a fork loop stops at the card's
//! `limits.pids`; and under `--net gateway-only` (the default) a host unix socket on `/tmp` is
//! out of reach unless `--share` maps it in.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;
use util::Home;

/// Agent A: wait for B, then try to read B's environment and attach to B with ptrace.
const ATTACKER: &str = r#"
import ctypes, errno, os, sys, time
out = sys.argv[1]
while not os.path.exists(os.path.join(out, "b.ready")):
    time.sleep(0.02)
pid = int(open(os.path.join(out, "b.pid")).read())
def note(name, text):
    with open(os.path.join(out, name), "w") as f:
        f.write(text)
note("a.uid", str(os.getuid()))
try:
    environ = open("/proc/%d/environ" % pid, "rb").read()
    note("a.environ", "read: " + ("token" if b"STOPLINE_TOKEN" in environ else "no token"))
except OSError as e:
    note("a.environ", "refused: " + errno.errorcode[e.errno])
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_DETACH = 16, 17
if libc.ptrace(PTRACE_ATTACH, pid, None, None) == 0:
    note("a.ptrace", "attached")
    libc.ptrace(PTRACE_DETACH, pid, None, None)
else:
    note("a.ptrace", "refused: " + errno.errorcode[ctypes.get_errno()])
open(os.path.join(out, "a.done"), "w").close()
"#;

/// Agent B: say who it is, then wait for A to finish.
const VICTIM: &str = r#"
echo $$ > b.pid
id -u > b.uid
touch b.ready
while [ ! -e a.done ]; do sleep 0.02; done
"#;

#[test]
fn two_concurrent_agents_get_their_own_uids_and_cannot_reach_each_other() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-uids-");
    std::fs::write(out.path().join("attacker.py"), ATTACKER).unwrap();
    let (run_a, run_b) = (run_id("uid-a"), run_id("uid-b"));
    let card_a = write_card(&home, &card(&run_a, "agent-a"));
    let card_b = write_card(&home, &card(&run_b, "agent-b"));
    // The host's PID namespace: under gateway-only each agent has one of its own and cannot even
    // name the other (run_edges), so the uid walls are tried where the pids are shared.
    let flags = ["--net", "host", "--gateway", &gateway.url()];
    let victim = start_run(&home, &card_b, &flags, out.path(), VICTIM);
    let attacker_script = format!("exec /usr/bin/python3 attacker.py {}", out.path().display());
    let attacker = start_run(&home, &card_a, &flags, out.path(), &attacker_script);
    // Each agent waits for the other: when one run never ends, the other's stderr and what
    // both wrote are what tell why (this test hung once in a full suite run, 2026-12-04).
    let attacked = attacker.finish_or_kill(Duration::from_secs(60));
    let wait_b = if attacked.is_ok() { 60 } else { 0 };
    let victimized = victim.finish_or_kill(Duration::from_secs(wait_b));
    let (Ok((code_a, _, stderr_a)), Ok((code_b, _, stderr_b))) = (&attacked, &victimized) else {
        let written: Vec<String> = std::fs::read_dir(out.path())
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "a run did not end within 60 s (Err: killed, with its stderr)\nattacker: {attacked:?}\nvictim: {victimized:?}\nwritten in {}: {written:?}",
            out.path().display()
        );
    };
    assert_eq!((*code_a, *code_b), (0, 0), "{stderr_a}\n{stderr_b}");
    let uid_a: u32 = read(out.path(), "a.uid").unwrap().parse().unwrap();
    let uid_b: u32 = read(out.path(), "b.uid").unwrap().parse().unwrap();
    assert_ne!(uid_a, uid_b, "two live agents shared a uid");
    for uid in [uid_a, uid_b] {
        assert!(
            (61184..=65519).contains(&uid),
            "uid {uid} outside [run] uid_range"
        );
    }
    assert_eq!(
        read(out.path(), "a.environ").as_deref(),
        Some("refused: EACCES"),
        "agent A read agent B's environment"
    );
    assert_eq!(
        read(out.path(), "a.ptrace").as_deref(),
        Some("refused: EPERM"),
        "agent A attached to agent B"
    );
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(home.file(&format!("runs/{run_a}/run.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(record["uid"], uid_a, "{record}");
}

/// A uid for this test process alone, below the default `[run] uid_range`.
fn private_uid(offset: u32) -> u32 {
    60000 + (std::process::id() % 500) * 2 + offset
}

#[test]
fn a_uid_that_runs_another_agent_or_any_other_process_is_refused() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-uid-in-use-");
    let uid = private_uid(0).to_string();
    let flags = ["--user", uid.as_str(), "--gateway", &gateway.url()];
    let first = run_id("busy-1");
    let first_card = write_card(&home, &card(&first, "agent-1"));
    let running = start_run(
        &home,
        &first_card,
        &flags,
        out.path(),
        "touch up; exec sleep 600",
    );
    wait_for("the first agent", Duration::from_secs(30), || {
        out.path().join("up").exists().then_some(())
    });
    let second = card(&run_id("busy-2"), "agent-2");
    let path = write_card(&home, &second);
    let mut args = vec!["run", "--policy", path.to_str().unwrap()];
    args.extend_from_slice(&flags);
    args.extend_from_slice(&["--", "/bin/true"]);
    let refused = home.run(&args);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert_eq!(refused.code_str(), "uid_in_use", "{}", refused.stdout);
    home.engage(&format!("run:{first}"), "emergency");
    let (code, _, _) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1);

    // A process outside any run under the uid.
    let other = private_uid(1);
    let mut stray = std::process::Command::new("/bin/sleep")
        .arg("600")
        .uid(other)
        .gid(other)
        .spawn()
        .unwrap();
    let other = other.to_string();
    let args = [
        "run",
        "--policy",
        path.to_str().unwrap(),
        "--user",
        other.as_str(),
        "--gateway",
        &gateway.url(),
        "--",
        "/bin/true",
    ];
    let refused = home.run(&args);
    let _ = stray.kill();
    let _ = stray.wait();
    assert_eq!(refused.code_str(), "uid_in_use", "{}", refused.stdout);
    assert!(
        refused.stdout.contains(&stray.id().to_string()),
        "{}",
        refused.stdout
    );
    // Once it is gone the uid is free again.
    let started = home.run(&args);
    assert_eq!(started.code, 0, "{}\n{}", started.stdout, started.stderr);
}

#[test]
fn an_agent_gains_no_privileges_through_exec() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-nnp-");
    let card = write_card(&home, &card(&run_id("nnp"), "agent-p"));
    let running = start_run(
        &home,
        &card,
        &["--gateway", &gateway.url()],
        out.path(),
        "grep NoNewPrivs /proc/self/status > nnp",
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(out.path(), "nnp").as_deref(), Some("NoNewPrivs:\t1"));
}

/// Fork children that wait until told to go, up to 200; report how many were born and how the
/// first refusal read.
const FORK_LOOP: &str = r#"
import os, sys, errno
r, w = os.pipe()
born, refusal = 0, "none"
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        refusal = errno.errorcode[e.errno]
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os._exit(0)
    born += 1
with open("forks", "w") as f:
    f.write("%d %s" % (born, refusal))
"#;

/// What the hierarchy offers for the `pids` controller to stopline's groups.
fn expected_pids_method() -> &'static str {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let mount = mounts
        .lines()
        .find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.get(2) == Some(&"cgroup2")).then(|| fields[1].to_string())
        })
        .unwrap();
    let enabled =
        std::fs::read_to_string(Path::new(&mount).join("stopline/cgroup.subtree_control"))
            .unwrap_or_default();
    if enabled.split_whitespace().any(|c| c == "pids") {
        "cgroup"
    } else {
        "rlimit"
    }
}

#[test]
fn a_fork_loop_stops_at_the_cards_pids_limit() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-forks-");
    std::fs::write(out.path().join("forks.py"), FORK_LOOP).unwrap();
    let run = run_id("forks");
    let mut c = card(&run, "agent-f");
    c["limits"] = json!({"pids": 16});
    let card = write_card(&home, &c);
    let running = start_run(
        &home,
        &card,
        &["--gateway", &gateway.url()],
        out.path(),
        "exec /usr/bin/python3 forks.py",
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(60));
    assert_eq!(code, 0, "{stderr}");
    let forks = read(out.path(), "forks").unwrap();
    let (born, refusal) = forks.split_once(' ').unwrap();
    let born: u32 = born.parse().unwrap();
    assert!(born < 16, "{born} children forked under pids 16");
    assert_eq!(refusal, "EAGAIN", "{forks}");
    let worker = registration(&home, &run, "agent-f").unwrap();
    assert_eq!(worker["limits"]["pids"], 16, "{worker}");
    assert_eq!(
        worker["limits"]["pids_method"],
        expected_pids_method(),
        "{worker}"
    );
}

/// Connect to the unix socket at argv[1]; print `connected` or the errno's name.
const CONNECT: &str = r#"
import errno, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as e:
    print(errno.errorcode[e.errno])
"#;

#[test]
fn a_host_unix_socket_on_tmp_is_out_of_reach_unless_shared() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-unix-");
    std::fs::write(out.path().join("connect.py"), CONNECT).unwrap();
    let relay = tempfile::Builder::new()
        .prefix("stopline-relay-")
        .tempdir_in("/tmp")
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(relay.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket_path = relay.path().join("relay.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "/usr/bin/python3 connect.py {} > result",
        socket_path.display()
    );

    let card_path = write_card(&home, &card(&run_id("unix"), "agent-u"));
    let running = start_run(
        &home,
        &card_path,
        &["--gateway", &gateway.url()],
        out.path(),
        &script,
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(out.path(), "result").as_deref(), Some("ENOENT"));
    assert!(listener.accept().is_err(), "the relay saw a connection");
    // The next run gets a fresh uid of its own, which cannot overwrite this run's file.
    std::fs::remove_file(out.path().join("result")).unwrap();

    // --share maps the relay's directory in: the same agent now reaches it (the wall is the
    // private mounts, not a broken socket).
    let card_path = write_card(&home, &card(&run_id("unix-shared"), "agent-u"));
    let share = relay.path().to_str().unwrap();
    let running = start_run(
        &home,
        &card_path,
        &["--share", share, "--gateway", &gateway.url()],
        out.path(),
        &script,
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(read(out.path(), "result").as_deref(), Some("connected"));
}

#[test]
fn an_allocation_above_the_cards_memory_limit_fails() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-memory-");
    let run = run_id("memory");
    let mut c = card(&run, "agent-m");
    c["limits"] = json!({"memory_mb": 256});
    let card = write_card(&home, &c);
    let script = "exec /usr/bin/python3 -c \"
try:
    block = bytearray(512 * 1024 * 1024)
    open('memory', 'w').write('allocated')
except MemoryError:
    open('memory', 'w').write('MemoryError')
\"";
    let running = start_run(
        &home,
        &card,
        &["--gateway", &gateway.url()],
        out.path(),
        script,
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(60));
    let worker = registration(&home, &run, "agent-m").unwrap();
    assert_eq!(worker["limits"]["memory_mb"], 256, "{worker}");
    // Killed by the group's memory.max, or refused by RLIMIT_AS: never allocated.
    assert_ne!(
        read(out.path(), "memory").as_deref(),
        Some("allocated"),
        "{stderr}"
    );
    if worker["limits"]["memory_method"] == "rlimit" {
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(read(out.path(), "memory").as_deref(), Some("MemoryError"));
    }
}

#[test]
fn stdin_is_dev_null_unless_asked_and_then_a_pipe_fed_by_the_supervisor() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let script = "readlink /proc/self/fd/0 > stdin.kind; cat > stdin.text";
    for (flags, kind, text) in [
        (vec![], "/dev/null", ""),
        (vec!["--stdin"], "pipe:", "typed by the operator\n"),
    ] {
        // A directory per run: each run has a fresh uid of its own, which cannot overwrite the
        // files an earlier run's uid left (seen when the second run got another uid).
        let out = open_dir("stopline-run-stdin-");
        let card_path = write_card(&home, &card(&run_id("stdin"), "agent-i"));
        let card_arg = card_path.to_string_lossy().into_owned();
        let url = gateway.url();
        let mut args = vec!["--json", "run", "--policy", card_arg.as_str()];
        args.extend_from_slice(&flags);
        args.extend_from_slice(&["--gateway", &url, "--", "/bin/sh", "-c", script]);
        let mut command = home.command(&args);
        command
            .current_dir(out.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut running = RunningRun {
            child: command.spawn().unwrap(),
        };
        {
            use std::io::Write;
            let mut stdin = running.child.stdin.take().unwrap();
            // With no --stdin the supervisor never reads it; the write lands in the pipe.
            let _ = stdin.write_all(b"typed by the operator\n");
        }
        let (code, _, stderr) = running.finish(Duration::from_secs(30));
        assert_eq!(code, 0, "{stderr}");
        assert!(
            read(out.path(), "stdin.kind").unwrap().starts_with(kind),
            "{flags:?}"
        );
        assert_eq!(
            std::fs::read_to_string(out.path().join("stdin.text")).unwrap(),
            text
        );
    }
}
