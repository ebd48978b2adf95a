//! The supervisor's edges (docs/reference.md §6), each tried with the attack that broke it: Ctrl-C (or
//! SIGTERM) on `stopline run` used to end the supervisor and leave its agent running under its
//! uid; a SIGKILLed supervisor left a worker `status` did not flag; a reused uid handed its last
//! holder's 0600 file and SysV shared memory to the next agent; and a Claude Code whose hook its
//! uid cannot execute ran every tool unchecked.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;
use util::Home;

fn run_record(home: &Home, run: &str) -> Value {
    serde_json::from_slice(&std::fs::read(home.file(&format!("runs/{run}/run.json"))).unwrap())
        .unwrap()
}

fn send(signal: &str, pid: u32) {
    let status = std::process::Command::new("/bin/kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Wait (at most 5 s, the bound the contract states) until none of `pids` is alive.
fn all_gone(what: &str, pids: &[u32]) {
    wait_for(what, Duration::from_secs(5), || {
        pids.iter().all(|pid| !is_alive(*pid)).then_some(())
    });
}

/// The operator's signal to a real `stopline run`: the agent (a root and a child) is killed, the
/// run ends non-zero recorded as stopped by the operator, and the same card runs again.
fn operator_stop(signal: &str) {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-operator-");
    let run = run_id(&format!("op-{}", signal.to_lowercase()));
    let (running, root, child) = start_counting(&home, &gateway, &run, "agent-o", out.path(), &[]);
    send(signal, running.pid());
    // A second signal while the kill is under way changes nothing.
    let _ = std::process::Command::new("/bin/kill")
        .arg(format!("-{signal}"))
        .arg(running.pid().to_string())
        .status();
    all_gone("the agent to be killed", &[root, child]);
    let (code, stdout, stderr) = running.finish(Duration::from_secs(20));
    assert_ne!(code, 0, "{stdout}\n{stderr}");
    let refusal: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    assert_eq!(
        refusal["error"]["code"], "run_contained",
        "{stdout}\n{stderr}"
    );
    let record = run_record(&home, &run);
    assert_eq!(record["outcome"], "stopped", "{record}");
    assert_eq!(
        record["stopped_by_operator"]["signal"],
        format!("SIG{signal}").as_str(),
        "{record}"
    );
    let registration = registration(&home, &run, "agent-o").unwrap();
    assert_eq!(registration["state"], "quiescent", "{registration}");
    assert_eq!(registration["stop_cause"]["kind"], "operator_signal");
    let observed = evidence(&home).into_iter().any(|e| {
        e["kind"] == "stop_observation"
            && e["run"] == run.as_str()
            && e["cause"]["kind"] == "operator_signal"
            && e["phase"] == "quiescent_observed"
    });
    assert!(observed, "no stop evidence names the operator");
    // The card is free: the same run and agent start again, and end by themselves.
    std::fs::remove_file(out.path().join("counter")).unwrap();
    let (again, _, _) = start_counting(&home, &gateway, &run, "agent-o", out.path(), &[]);
    std::fs::write(out.path().join("finish"), "").unwrap();
    let (code, _, stderr) = again.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn ctrl_c_on_stopline_run_kills_the_agent_and_frees_the_card() {
    operator_stop("INT");
}

#[test]
fn sigterm_on_stopline_run_kills_the_agent_and_frees_the_card() {
    operator_stop("TERM");
}

/// The worker `status --json` shows for `run`.
fn status_worker(home: &Home, run: &str) -> Option<Value> {
    let status = home.status();
    status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["run"] == run)
        .cloned()
}

#[test]
fn a_killed_supervisor_is_flagged_and_engage_kills_its_agent() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-gone-");
    let run = run_id("gone");
    let (mut running, root, child) =
        start_counting(&home, &gateway, &run, "agent-g", out.path(), &[]);
    running.child.kill().unwrap();
    running.child.wait().unwrap();
    assert!(
        is_alive(root) && is_alive(child),
        "the agent died with its supervisor"
    );
    let worker = status_worker(&home, &run).expect("the orphaned worker is listed");
    assert_eq!(worker["supervisor_gone"], true, "{worker}");
    let status = home.status();
    assert!(
        status["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap_or("").starts_with("supervisor_gone")),
        "{status}"
    );
    let text = home.command(&["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("SUPERVISOR IS GONE"), "{text}");
    // Engage kills the group itself: nothing else would.
    let engaged = home.engage(&format!("run:{run}"), "emergency");
    all_gone(
        "the orphaned agent to be killed by the engage",
        &[root, child],
    );
    let reached = engaged["groups_reached"].to_string();
    assert!(reached.contains(&run), "{engaged}");
    // Its group is empty and its supervisor gone: the census retires it.
    assert!(status_worker(&home, &run).is_none());
}

#[test]
fn a_card_whose_supervisor_died_runs_again_once_its_agent_is_gone() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-gone-again-");
    let run = run_id("gone-again");
    let (mut running, root, child) =
        start_counting(&home, &gateway, &run, "agent-r", out.path(), &[]);
    running.child.kill().unwrap();
    running.child.wait().unwrap();
    // While the orphan runs, the card is refused.
    let card = write_card(&home, &card(&run, "agent-r"));
    let refused = run_true(&home, &card, &gateway.url());
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused.stdout.contains("already running"),
        "{}",
        refused.stdout
    );
    // The orphan ends by itself; the card runs again.
    std::fs::write(out.path().join("finish"), "").unwrap();
    all_gone("the orphan to end", &[root, child]);
    std::fs::remove_file(out.path().join("finish")).unwrap();
    std::fs::remove_file(out.path().join("counter")).unwrap();
    let (again, _, _) = start_counting(&home, &gateway, &run, "agent-r", out.path(), &[]);
    std::fs::write(out.path().join("finish"), "").unwrap();
    let (code, _, stderr) = again.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
}

/// A uid range of this test alone, `size` uids, below the default `[run] uid_range` and apart
/// from `run_isolation`'s private uids.
fn private_range(offset: u32, size: u32) -> (u32, u32) {
    let first = 58000 + (std::process::id() % 300) * 6 + offset;
    (first, first + size - 1)
}

fn home_with_range(range: (u32, u32)) -> Home {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    std::fs::write(
        home.file("config.toml"),
        format!("[run]\nuid_range = \"{}-{}\"\n", range.0, range.1),
    )
    .unwrap();
    home
}

/// `stopline run --net host` of `script` under `/bin/sh -c` in `/`, captured.
fn run_host(home: &Home, gateway: &TestGateway, test: &str, script: &str) -> util::Run {
    let card = write_card(home, &card(&run_id(test), "agent-u"));
    home.run(&[
        "run",
        "--policy",
        card.to_str().unwrap(),
        "--net",
        "host",
        "--gateway",
        &gateway.url(),
        "--",
        "/bin/sh",
        "-c",
        script,
    ])
}

#[test]
fn a_uid_is_not_leased_again_while_its_last_holder_left_a_file_in_tmp() {
    let range = private_range(0, 1);
    let home = home_with_range(range);
    let gateway = TestGateway::start();
    let secret = format!("/tmp/stopline-leftover-{}", util::rand_suffix());
    let first = run_host(
        &home,
        &gateway,
        "leave",
        &format!("umask 077; echo secret > {secret}; id -u"),
    );
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    assert_eq!(
        first.stdout.lines().next(),
        Some(range.0.to_string().as_str()),
        "{}",
        first.stdout
    );
    let second = run_host(&home, &gateway, "read", &format!("cat {secret}"));
    let _ = std::fs::remove_file(&secret);
    assert!(
        !second.stdout.contains("secret\n"),
        "the next agent read the leftover"
    );
    assert_eq!(second.code_str(), "uid_in_use", "{}", second.stdout);
    assert!(second.stdout.contains(&secret), "{}", second.stdout);
    // Once the leftover is gone the uid is leased again.
    let third = run_host(&home, &gateway, "clean", "id -u");
    assert_eq!(third.code, 0, "{}\n{}", third.stdout, third.stderr);
}

/// Python: create (`create KEY`) a SysV segment holding "secret" and leave it, or try to attach
/// to it (`attach KEY`); says what happened on stdout.
const SHM: &str = r#"
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
mode, key = sys.argv[1], int(sys.argv[2])
if mode == "create":
    shmid = libc.shmget(key, 4096, 0o1600)
    if shmid < 0:
        print("create failed: " + errno.errorcode[ctypes.get_errno()]); sys.exit(1)
    at = libc.shmat(shmid, None, 0)
    ctypes.memmove(at, b"secret", 6)
    libc.shmdt(ctypes.c_void_p(at))
    print("created %d" % shmid)
else:
    shmid = libc.shmget(key, 0, 0)
    if shmid < 0:
        print("attach refused: " + errno.errorcode[ctypes.get_errno()]); sys.exit(0)
    at = libc.shmat(shmid, None, 0)
    print("attached: " + ctypes.string_at(at, 6).decode())
"#;

fn shm_key() -> i64 {
    0x5700_0000 + i64::from(std::process::id() % 0x10_0000)
}

#[test]
fn a_uid_reused_at_once_cannot_attach_its_last_holders_shared_memory() {
    let range = private_range(1, 1);
    let home = home_with_range(range);
    let gateway = TestGateway::start();
    let key = shm_key();
    let script = |mode: &str| format!("/usr/bin/python3 -c '{SHM}' {mode} {key}");
    let first = run_host(&home, &gateway, "shm-make", &script("create"));
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    // The agent's own line (the run record after it repeats the command).
    assert!(first.stdout.starts_with("created "), "{}", first.stdout);
    let second = run_host(&home, &gateway, "shm-take", &script("attach"));
    // Whatever happened, the segment does not outlive the test.
    let _ = std::process::Command::new("/usr/bin/ipcrm")
        .args(["-M", &key.to_string()])
        .output();
    assert_eq!(second.code, 0, "{}\n{}", second.stdout, second.stderr);
    assert!(
        second.stdout.starts_with("attach refused: ENOENT"),
        "the next holder of the uid reached the segment: {}",
        second.stdout
    );
}

#[test]
fn a_uid_owning_a_sysv_object_in_the_hosts_namespace_is_not_leased() {
    let range = private_range(2, 1);
    let home = home_with_range(range);
    let gateway = TestGateway::start();
    let key = shm_key() + 0x10_0000;
    let made = std::process::Command::new("/usr/bin/python3")
        .args(["-c", SHM, "create", &key.to_string()])
        .uid(range.0)
        .gid(range.0)
        .output()
        .unwrap();
    let made = String::from_utf8_lossy(&made.stdout).into_owned();
    let refused = run_host(&home, &gateway, "sysv", "id -u");
    let _ = std::process::Command::new("/usr/bin/ipcrm")
        .args(["-M", &key.to_string()])
        .output();
    assert!(made.starts_with("created "), "{made}");
    assert_eq!(refused.code, 1, "the uid was leased: {}", refused.stdout);
    assert_eq!(refused.code_str(), "uid_in_use", "{}", refused.stdout);
    assert!(refused.stdout.contains("SysV shm"), "{}", refused.stdout);
}

#[test]
fn leases_go_to_the_least_recently_released_uid() {
    let range = private_range(3, 2);
    let home = home_with_range(range);
    let gateway = TestGateway::start();
    let uid = |run: util::Run| -> u32 {
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        run.stdout.lines().next().unwrap().trim().parse().unwrap()
    };
    let first = uid(run_host(&home, &gateway, "lru-1", "id -u"));
    let second = uid(run_host(&home, &gateway, "lru-2", "id -u"));
    let third = uid(run_host(&home, &gateway, "lru-3", "id -u"));
    assert_ne!(first, second, "the uid just released was leased again");
    assert_eq!(first, third);
}

#[test]
fn claude_code_whose_hook_its_uid_cannot_execute_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let gateway = TestGateway::start();
    let project = open_dir("stopline-run-hook-");
    // A stand-in for Claude Code: says it ran.
    let bin = project.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let claude = bin.join("claude");
    std::fs::write(&claude, "#!/bin/sh\necho claude ran\n").unwrap();
    std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The hook installed where only root can reach it (like /root/.local/bin).
    let private = project.path().join("root-only");
    std::fs::create_dir(&private).unwrap();
    let hook = private.join("stopline");
    let script = "#!/bin/sh\nexit 0\n";
    std::fs::write(&hook, script).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let settings = |hook: &Path| {
        serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": format!("{} hook claude-code", hook.display()), "timeout": 60}
        ]}]}, "disableAllHooks": false})
        .to_string()
    };
    let file = project.path().join("claude-settings.json");
    std::fs::write(&file, settings(&hook)).unwrap();
    let card = write_card(&home, &card(&run_id("hook"), "claude-agent"));
    let run = |settings: &Path| {
        let mut command = home.command(&[
            "--json",
            "run",
            "--policy",
            card.to_str().unwrap(),
            "--gateway",
            &gateway.url(),
            "--",
            claude.to_str().unwrap(),
            "-p",
            "hi",
            "--settings",
            settings.to_str().unwrap(),
        ]);
        command.current_dir(project.path());
        util::Run::from(command.output().unwrap())
    };
    let refused = run(&file);
    assert_eq!(
        refused.code_str(),
        "policy_card_incomplete",
        "{}",
        refused.stdout
    );
    assert!(
        refused.stdout.contains(hook.to_str().unwrap()),
        "{}",
        refused.stdout
    );
    assert!(!refused.stdout.contains("claude ran"), "{}", refused.stdout);
    // The same hook where the agent can execute it: the run starts.
    let open = project.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::write(open.join("stopline"), script).unwrap();
    std::fs::set_permissions(
        open.join("stopline"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&file, settings(&open.join("stopline"))).unwrap();
    let started = run(&file);
    assert_eq!(started.code, 0, "{}\n{}", started.stdout, started.stderr);
}

#[test]
fn an_agent_under_gateway_only_sees_only_its_own_processes() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-pidns-");
    // Another process on the host with a command line worth reading.
    let mut neighbour = std::process::Command::new("/bin/sleep")
        .arg("4242")
        .spawn()
        .unwrap();
    let card = write_card(&home, &card(&run_id("pidns"), "agent-n"));
    let running = start_run(
        &home,
        &card,
        &["--gateway", &gateway.url()],
        out.path(),
        "sleep 300 & for p in /proc/[0-9]*; do echo \"${p#/proc/}:$(tr '\\0' ' ' < $p/cmdline)\"; done > listing; echo $$ > me",
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    let _ = neighbour.kill();
    let _ = neighbour.wait();
    assert_eq!(code, 0, "{stderr}");
    let listing = read(out.path(), "listing").unwrap();
    assert!(
        !listing.contains("4242"),
        "the agent saw a host process: {listing}"
    );
    assert_eq!(read(out.path(), "me").as_deref(), Some("1"), "{listing}");
    // Itself, its `sleep`, and the `tr` of the moment: nothing else.
    let pids: Vec<&str> = listing
        .lines()
        .map(|l| l.split(':').next().unwrap())
        .collect();
    assert!(pids.len() <= 4, "{listing}");
    assert!(listing.contains("sleep 300"), "{listing}");
}
