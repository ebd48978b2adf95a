//! A supervisor whose read of the control state does not finish within `read_timeout_ms` freezes
//! its agent (docs/reference.md §5: "a supervisor treats it as a stop order (freeze; kill at emergency)"),
//! and the freeze is not undone when the reads succeed again: it is held by a `run:` latch the
//! supervisor engages, lifted by `stopline disengage` like any pause.
//!
//! The read is made to hang for real: the supervisor's reading thread is held where it holds the
//! WAL's shared lock (`view.locked=hold_if:`), as a read stuck on a slow entry would be; or a
//! writer stops itself while it holds the WAL's exclusive lock (`stop_if:`). Needs
//! `--features stopline/failpoints`: without it nothing hangs and the test fails waiting for
//! the freeze. A `latches/` entry that is slow to read (`fs.read=delay_if:`) is the same fault,
//! not a machine emergency.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use std::time::Duration;
use util::Home;

fn group_frozen(cgroup: &str) -> bool {
    std::fs::read_to_string(format!("{cgroup}/cgroup.events"))
        .unwrap()
        .lines()
        .any(|line| line == "frozen 1")
}

/// The latch files in `latches/` engaged by `by`.
fn latches_by(home: &Home, by: &str) -> Vec<serde_json::Value> {
    home.entries("latches")
        .iter()
        .filter_map(|name| std::fs::read(home.file(&format!("latches/{name}"))).ok())
        .filter_map(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .filter(|latch| latch["by"] == by)
        .collect()
}

/// Wait until `agent` of `run` is frozen for a read fault and the freeze is held: not killed
/// (no `kill_issued_at`), its cause a `control_io` read timeout, its group frozen, its root and
/// child alive, and the supervisor's own `run:` latch at halt-noncritical in `latches/`. Returns
/// the frozen registration.
fn await_read_fault_freeze(
    running: &mut RunningRun,
    home: &Home,
    run: &str,
    agent: &str,
    (root, child): (u32, u32),
) -> serde_json::Value {
    let frozen = running.await_state(home, run, agent, "frozen");
    assert_eq!(
        frozen["kill_issued_at"],
        serde_json::Value::Null,
        "{frozen}"
    );
    assert_eq!(frozen["stop_cause"]["fault"], "read_timeout", "{frozen}");
    assert_eq!(frozen["stop_cause"]["code"], "control_io", "{frozen}");
    let cgroup = frozen["cgroup"].as_str().unwrap().to_string();
    assert!(group_frozen(&cgroup), "the group is not frozen");
    assert!(
        is_alive(root) && is_alive(child),
        "a read fault freezes; it does not kill"
    );
    // The freeze is made durable: a run latch at halt-noncritical, by the supervisor.
    let latch = wait_for(
        "the supervisor's latch for the read fault",
        Duration::from_secs(20),
        || latches_by(home, "supervisor:read_fault").pop(),
    );
    assert_eq!(latch["scope"], format!("run:{run}"), "{latch}");
    assert_eq!(latch["level"], "halt-noncritical", "{latch}");
    frozen
}

#[test]
fn a_read_that_times_out_freezes_the_agent_and_only_a_disengage_thaws_it() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    std::fs::write(home.file("config.toml"), "read_timeout_ms = 300\n").unwrap();
    let gateway = TestGateway::start();
    let run = run_id("read-fault");
    let out = open_dir("stopline-run-read-fault-");
    let hold = home.dir.path().join("hold-the-read");
    let failpoints = format!("view.locked=hold_if:{}", hold.display());
    let (mut running, root, child) = start_counting(
        &home,
        &gateway,
        &run,
        "agent-r",
        out.path(),
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );

    // From now on every whole read of the control state hangs.
    std::fs::write(&hold, b"").unwrap();
    let frozen = await_read_fault_freeze(&mut running, &home, &run, "agent-r", (root, child));
    let cgroup = frozen["cgroup"].as_str().unwrap().to_string();
    let held = counter(out.path());

    // The reads succeed again. The first whole read after the latch landed hands the freeze to
    // it (the registration no longer names the fault): the agent stays frozen, nothing thaws it
    // by itself.
    std::fs::remove_file(&hold).unwrap();
    let still = wait_for(
        "a clean read that keeps the agent frozen",
        STATE_WAIT,
        || {
            registration(&home, &run, "agent-r")
                .filter(|r| r["stop_cause"].is_null() || r["state"] != "frozen")
        },
    );
    assert_eq!(still["state"], "frozen", "thawed by itself: {still}");
    assert!(group_frozen(&cgroup), "the group was thawed by itself");
    assert_eq!(counter(out.path()), held, "a frozen agent made progress");
    assert!(is_alive(root) && is_alive(child));

    // The normal way out: disengage the latch.
    let lifted = home.run(&[
        "disengage",
        "--scope",
        &format!("run:{run}"),
        "--reason",
        "the control directory reads again",
        "--by",
        "operator",
    ]);
    lifted.assert_ok();
    running.await_state(&home, &run, "agent-r", "running");
    wait_for("progress after the thaw", Duration::from_secs(20), || {
        (counter(out.path()) > held + 3).then_some(())
    });
    std::fs::write(out.path().join("finish"), b"").unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
}

/// While every read hangs (the agent frozen for it), an emergency still kills: the supervisor
/// lists `latches/` on its own before the whole read, and a killing latch there is acted on.
#[test]
fn an_emergency_kills_an_agent_frozen_for_a_read_fault() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    std::fs::write(home.file("config.toml"), "read_timeout_ms = 300\n").unwrap();
    let gateway = TestGateway::start();
    let run = run_id("read-fault-kill");
    let out = open_dir("stopline-run-read-fault-kill-");
    let hold = home.dir.path().join("hold-the-read");
    let failpoints = format!("view.locked=hold_if:{}", hold.display());
    let (mut running, _, child) = start_counting(
        &home,
        &gateway,
        &run,
        "agent-k",
        out.path(),
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    std::fs::write(&hold, b"").unwrap();
    running.await_state(&home, &run, "agent-k", "frozen");

    home.engage(&format!("run:{run}"), "emergency");
    let stopped = running.await_state(&home, &run, "agent-k", "quiescent");
    assert_eq!(stopped["stop_cause"]["kind"], "latch", "{stopped}");
    assert_eq!(stopped["stop_cause"]["level"], "emergency", "{stopped}");
    assert!(!is_alive(child));
    std::fs::remove_file(&hold).unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
}

/// A latch entry that is slow to read (a slow disk, or an agent that makes one file of a FUSE or
/// NFS home slow) is a read fault, not a machine emergency (docs/reference.md §5): the agent is frozen,
/// not killed, and the supervisor holds the freeze with its own latch. The entry is a
/// well-formed latch of another agent whose every read by the run takes 1.2 s
/// (`fs.read=delay_if:`), over the 1 s bound of one entry and well within `read_timeout_ms`:
/// the old code read it as a machine emergency and killed everything.
#[test]
fn a_latch_entry_too_slow_to_read_freezes_the_agent_and_does_not_kill_it() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let gateway = TestGateway::start();
    let run = run_id("read-fault-slow");
    let out = open_dir("stopline-run-read-fault-slow-");
    let slow = "latch_51010e0000000001";
    let slow_path = home.file(&format!("latches/{slow}.json"));
    let failpoints = format!("fs.read=delay_if:1200:{}", slow_path.display());
    let (mut running, root, child) = start_counting(
        &home,
        &gateway,
        &run,
        "agent-s",
        out.path(),
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );

    // Another agent's pause, then the same latch under the slow name (as an engage whose WAL
    // record was deferred leaves one), put in place whole by a rename.
    let before = home.entries("latches");
    home.engage("agent:someone-else", "halt-noncritical");
    let engaged = home
        .entries("latches")
        .into_iter()
        .find(|name| !before.contains(name))
        .unwrap();
    let bytes = std::fs::read_to_string(home.file(&format!("latches/{engaged}"))).unwrap();
    let renamed = bytes.replace(engaged.trim_end_matches(".json"), slow);
    assert_ne!(bytes, renamed);
    let staged = home.file("slow-latch.tmp");
    std::fs::write(&staged, renamed).unwrap();
    std::fs::rename(&staged, &slow_path).unwrap();

    await_read_fault_freeze(&mut running, &home, &run, "agent-s", (root, child));

    // The slow entry goes (the operator lifts the other agent's pause: the test's own reads are
    // not slowed); the agent stays frozen until the supervisor's latch is lifted.
    home.run(&[
        "disengage",
        "--scope",
        "agent:someone-else",
        "--reason",
        "lifted",
        "--by",
        "operator",
    ])
    .assert_ok();
    assert!(!slow_path.exists());
    home.run(&[
        "disengage",
        "--scope",
        &format!("run:{run}"),
        "--reason",
        "the disk is fast again",
        "--by",
        "operator",
    ])
    .assert_ok();
    running.await_state(&home, &run, "agent-s", "running");
    assert!(is_alive(root) && is_alive(child));
    std::fs::write(out.path().join("finish"), b"").unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
}

/// A process this test stopped: resumed and killed if the test ends before it resumes it.
struct Parked(std::process::Child);

impl Drop for Parked {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let pid = rustix::process::Pid::from_raw(self.0.id() as i32).unwrap();
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::CONT);
            let _ = self.0.wait();
        }
    }
}

/// A read that cannot finish because a writer stopped (SIGSTOP) while it holds the WAL's lock is
/// the same fault (docs/reference.md §5): the lock is bounded and its holder seen stopped, and the agent is
/// frozen, not killed. Here a `stopline disengage` of another scope parks itself in its WAL
/// append (`disengage.wal.write=stop_if:`), under the exclusive lock.
#[test]
fn a_lock_held_by_a_stopped_writer_freezes_the_agent() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let gateway = TestGateway::start();
    let run = run_id("read-fault-lock");
    let out = open_dir("stopline-run-read-fault-lock-");
    let (mut running, root, child) =
        start_counting(&home, &gateway, &run, "agent-w", out.path(), &[]);

    home.engage("agent:someone-else", "halt-all");
    let park = home.dir.path().join("park-the-writer");
    std::fs::write(&park, b"").unwrap();
    let mut writer = home.command(&[
        "disengage",
        "--scope",
        "agent:someone-else",
        "--reason",
        "lifted",
        "--by",
        "operator",
    ]);
    writer.env(
        "STOPLINE_FAILPOINTS",
        format!("disengage.wal.write=stop_if:{}", park.display()),
    );
    let mut writer = Parked(writer.spawn().unwrap());

    await_read_fault_freeze(&mut running, &home, &run, "agent-w", (root, child));

    // The writer resumes and finishes; the agent stays frozen until its latch is lifted.
    std::fs::remove_file(&park).unwrap();
    let pid = rustix::process::Pid::from_raw(writer.0.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    assert!(writer.0.wait().unwrap().success());
    let still = wait_for(
        "a clean read that keeps the agent frozen",
        STATE_WAIT,
        || {
            registration(&home, &run, "agent-w")
                .filter(|r| r["stop_cause"].is_null() || r["state"] != "frozen")
        },
    );
    assert_eq!(still["state"], "frozen", "thawed by itself: {still}");
    home.run(&[
        "disengage",
        "--scope",
        &format!("run:{run}"),
        "--reason",
        "the writer is done",
        "--by",
        "operator",
    ])
    .assert_ok();
    running.await_state(&home, &run, "agent-w", "running");
    std::fs::write(out.path().join("finish"), b"").unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
}
