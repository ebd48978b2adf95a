//! A worker enforces the level it is handed, idempotently: halt-noncritical freezes, nothing
//! thaws, halt-all and emergency kill to observed quiescence, and each phase of stop evidence is
//! reported exactly once. A kill is never undone.

mod common;

use common::{escaping_agent_script, is_alive, sh, wait_for_pids};
use std::time::Duration;
use stopline_core::Level;
use stopline_supervisor::{
    Containment, EnforcementAction, Method, StopPhase, Worker, WorkerSpec, WorkerState,
};

fn unique_run(test: &str) -> String {
    common::unique_name(test)
}

fn worker_for(test: &str, script: &str) -> Worker {
    let mut spec = WorkerSpec::new(&unique_run(test), "agent", sh(script));
    spec.containment = Containment::Cgroup2;
    spec.command.stdin = stopline_supervisor::StdioMode::Null;
    Worker::start(spec, None).unwrap()
}

/// Kills what is left (by the worker's own group) and removes the group, even on failure.
struct Cleanup(Option<Worker>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut worker) = self.0.take() {
            let _ = worker.enforce(Some(Level::Emergency));
            let _ = worker.release();
        }
    }
}

#[test]
fn freeze_thaw_then_kill_with_two_phases_reported_once() {
    let mut cleanup = Cleanup(Some(worker_for("worker", "exec sleep 1000")));
    let worker = cleanup.0.as_mut().unwrap();
    assert_eq!(worker.method(), Method::Cgroup2);
    let group = worker.group().unwrap().clone();
    assert!(group.contains_pid(worker.pid()).unwrap());

    let e = worker.enforce(None).unwrap();
    assert_eq!(
        (e.action, e.status.state),
        (EnforcementAction::None, WorkerState::Running)
    );

    for _ in 0..2 {
        let e = worker.enforce(Some(Level::HaltNoncritical)).unwrap();
        assert_eq!(
            (e.action, e.status.state),
            (EnforcementAction::Frozen, WorkerState::Frozen)
        );
        assert!(group.observe().unwrap().frozen);
    }

    let e = worker.enforce(None).unwrap();
    assert_eq!(
        (e.action, e.status.state),
        (EnforcementAction::Thawed, WorkerState::Running)
    );
    assert!(!group.observe().unwrap().frozen);

    let mut phases = Vec::new();
    let e = worker
        .enforce_with(Some(Level::Emergency), &mut |phase| {
            phases.push(phase.clone())
        })
        .unwrap();
    assert_eq!(
        (e.action, e.status.state),
        (EnforcementAction::Quiescent, WorkerState::Quiescent)
    );
    assert_eq!(phases.len(), 2, "{phases:?}");
    let StopPhase::KillIssued { issued_at, method } = phases[0].clone() else {
        panic!("phase one first: {phases:?}")
    };
    let StopPhase::QuiescentObserved { observed_at, .. } = phases[1].clone() else {
        panic!("phase two second: {phases:?}")
    };
    assert_eq!(method, Method::Cgroup2);
    assert!(observed_at >= issued_at);
    assert_eq!(e.status.kill_issued_at, Some(issued_at));
    assert_eq!(e.status.quiescent_observed_at, Some(observed_at));
    assert!(!group.observe().unwrap().populated);

    // Idempotent: the same level again, a lower level, or none: still quiescent, no new phases,
    // the first observation's time kept.
    for level in [Some(Level::Emergency), Some(Level::HaltNoncritical), None] {
        let e = worker
            .enforce_with(level, &mut |phase| phases.push(phase.clone()))
            .unwrap();
        assert_eq!(e.action, EnforcementAction::Quiescent);
        assert_eq!(e.status.state, WorkerState::Quiescent);
        assert_eq!(e.status.quiescent_observed_at, Some(observed_at));
    }
    assert_eq!(phases.len(), 2);
    assert!(!is_alive(worker.pid()));

    let status = serde_json::to_value(worker.status()).unwrap();
    assert_eq!(status["method"], "cgroup2");
    assert_eq!(status["state"], "quiescent");
    assert_eq!(status["unconfined"], false);

    let worker = cleanup.0.take().unwrap();
    worker.release().unwrap();
    assert!(!group.path().exists());
}

#[test]
fn halt_all_kills_a_frozen_worker_and_every_process_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let mut cleanup = Cleanup(Some(worker_for(
        "haltall",
        &escaping_agent_script(&pid_file, 10),
    )));
    let worker = cleanup.0.as_mut().unwrap();
    let pids = wait_for_pids(&pid_file, 12, Duration::from_secs(30));

    let e = worker.enforce(Some(Level::HaltNoncritical)).unwrap();
    assert_eq!(e.status.state, WorkerState::Frozen);
    let e = worker.enforce(Some(Level::HaltAll)).unwrap();
    assert_eq!(e.action, EnforcementAction::Quiescent);
    assert!(e.kill.unwrap().confirmed());
    for pid in pids {
        assert!(!is_alive(pid), "pid {pid} survived");
    }
}

#[test]
fn an_agent_that_ends_by_itself_is_exited_not_quiescent() {
    let mut cleanup = Cleanup(Some(worker_for("exits", "exit 3")));
    let worker = cleanup.0.as_mut().unwrap();
    let started = std::time::Instant::now();
    loop {
        let e = worker.enforce(None).unwrap();
        if e.status.state == WorkerState::Exited && e.status.exit_code.is_some() {
            assert_eq!(e.status.exit_code, Some(3));
            assert_eq!(e.status.quiescent_observed_at, None);
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{e:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_leftover_populated_group_is_never_shared() {
    let run = unique_run("busy");
    let mut first = WorkerSpec::new(&run, "agent", sh("exec sleep 1000"));
    first.containment = Containment::Cgroup2;
    let second = first.clone();
    let cleanup = Cleanup(Some(Worker::start(first, None).unwrap()));
    assert!(matches!(
        Worker::start(second, None),
        Err(stopline_supervisor::WorkerError::GroupBusy(_))
    ));
    drop(cleanup);
}
