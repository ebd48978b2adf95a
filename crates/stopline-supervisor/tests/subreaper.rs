//! The fallback without cgroup v2, forced here although cgroup v2 exists: the worker becomes a
//! subreaper, and a kill reaches a `setsid` double-forked daemon through the process tree.
//!
//! This file is its own test binary (its own process), because the fallback makes the whole
//! test process a child subreaper.

mod common;

use common::{escaping_agent_script, is_alive, sh, wait_for_pids};
use std::time::{Duration, Instant};
use stopline_core::Level;
use stopline_supervisor::{
    Containment, Enforcement, EnforcementAction, Method, StopPhase, Worker, WorkerSpec, WorkerState,
};

fn subreaper_worker(test: &str, script: &str) -> Worker {
    let mut spec = WorkerSpec::new(&common::unique_name(test), "agent", sh(script));
    spec.containment = Containment::Subreaper;
    spec.command.stdin = stopline_supervisor::StdioMode::Null;
    Worker::start(spec, None).unwrap()
}

/// Enforce `level` as `run`'s reaction loop does: again while the answer is pending. A member
/// blocked in an uninterruptible syscall (a write to a disk busy with other work) takes its
/// SIGSTOP or SIGKILL only when that syscall returns, so one call may end its bounded wait with
/// `FreezePending` or `KillPending`; the contract is to call again, and each pending answer must
/// say so in the worker's state.
fn enforce_settled(
    worker: &mut Worker,
    level: Option<Level>,
    on_phase: &mut dyn FnMut(&StopPhase),
) -> Enforcement {
    let started = Instant::now();
    loop {
        let e = worker.enforce_with(level, on_phase).unwrap();
        match e.action {
            EnforcementAction::FreezePending => assert_eq!(e.status.state, WorkerState::Freezing),
            EnforcementAction::KillPending => assert_eq!(e.status.state, WorkerState::Killing),
            _ => return e,
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still {:?} after a minute of enforcing",
            e.action
        );
    }
}

#[test]
fn the_subreaper_fallback_kills_a_setsid_double_forked_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let mut worker = subreaper_worker("reaperkill", &escaping_agent_script(&pid_file, 5));
    assert_eq!(worker.method(), Method::Subreaper);
    assert!(worker.group().is_none());
    let pids = wait_for_pids(&pid_file, 7, Duration::from_secs(30));
    let daemon = *pids.last().unwrap();
    for pid in &pids {
        assert!(is_alive(*pid), "pid {pid} should be running");
    }
    // The daemon's intermediate parent has exited, so the daemon was re-parented: to the
    // agent's root, which is a subreaper.
    let started = std::time::Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
        let ppid: u32 = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        if ppid == worker.pid() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "daemon parent {ppid}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(worker.is_alive().unwrap());

    let mut phases = Vec::new();
    let e = enforce_settled(&mut worker, Some(Level::Emergency), &mut |phase| {
        phases.push(phase.clone())
    });
    assert_eq!(e.action, EnforcementAction::Quiescent, "{e:?}");
    assert_eq!(e.status.state, WorkerState::Quiescent);
    assert_eq!(e.status.method, Method::Subreaper);
    assert!(matches!(
        phases[0],
        StopPhase::KillIssued {
            method: Method::Subreaper,
            ..
        }
    ));
    assert!(matches!(phases[1], StopPhase::QuiescentObserved { .. }));
    for pid in &pids {
        assert!(!is_alive(*pid), "pid {pid} survived the subreaper kill");
    }
    assert_eq!(
        serde_json::to_value(worker.status()).unwrap()["method"],
        "subreaper"
    );
    worker.release().unwrap();
}

#[test]
fn the_subreaper_fallback_freezes_with_sigstop_and_thaws() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter");
    let script = format!(
        "i=0; while true; do i=$((i+1)); echo $i > {}; sleep 0.01; done",
        file.display()
    );
    let mut worker = subreaper_worker("reaperfreeze", &script);
    let read = || std::fs::read_to_string(&file).unwrap_or_default();
    let wait_for_progress = || {
        let first = read();
        let started = std::time::Instant::now();
        while read() == first {
            assert!(started.elapsed() < Duration::from_secs(10), "no progress");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    wait_for_progress();
    let e = enforce_settled(&mut worker, Some(Level::HaltNoncritical), &mut |_| {});
    assert_eq!(e.action, EnforcementAction::Frozen);
    assert_eq!(e.status.state, WorkerState::Frozen);
    let held = read();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(read(), held, "a stopped process made progress");
    let e = worker.enforce(None).unwrap();
    assert_eq!(e.action, EnforcementAction::Thawed);
    wait_for_progress();
    let e = enforce_settled(&mut worker, Some(Level::HaltAll), &mut |_| {});
    assert_eq!(e.status.state, WorkerState::Quiescent);
    assert!(!is_alive(worker.pid()));
}
