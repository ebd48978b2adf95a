//! A kill reaches every process an agent started — fifty children and a double-forked `setsid`
//! daemon, all ignoring SIGTERM — and is confirmed only by a fresh `populated 0`.

mod common;

use common::{escaping_agent_script, is_alive, sh, wait_for_pids, GroupGuard};
use std::time::Duration;
use stopline_supervisor::{spawn, Method, SpawnOptions, StdioMode};

#[test]
fn kill_until_quiescent_reaches_fifty_children_and_a_setsid_daemon() {
    let guard = GroupGuard::create("kill50");
    let group = &guard.0;
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pids");
    let mut spec = sh(&escaping_agent_script(&pid_file, 50));
    spec.stdin = StdioMode::Null;
    let options = SpawnOptions {
        group: Some(group),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&spec, &options).unwrap();
    let pids = wait_for_pids(&pid_file, 52, Duration::from_secs(30));
    assert!(pids.contains(&spawned.pid));

    let before = group.observe().unwrap();
    assert!(before.populated, "{before:?}");
    assert!(!before.frozen);
    for pid in &pids {
        assert!(
            is_alive(*pid),
            "pid {pid} should be running before the kill"
        );
        assert!(
            group.contains_pid(*pid).unwrap(),
            "pid {pid} escaped the group"
        );
    }
    // The daemon left the agent's session and process group, yet stays in the group.
    let daemon = *pids.last().unwrap();
    let daemon_sid = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
    let agent_sid = std::fs::read_to_string(format!("/proc/{}/stat", spawned.pid)).unwrap();
    assert_ne!(
        field(&daemon_sid, 6),
        field(&agent_sid, 6),
        "the daemon did not setsid"
    );

    let report = group.kill_until_quiescent(Duration::from_secs(10)).unwrap();
    assert!(report.confirmed(), "{report:?}");
    assert_eq!(report.method, Method::Cgroup2);
    assert!(report.confirmed_at.unwrap() >= report.issued_at);
    println!(
        "kill of 52 processes confirmed in {:?} us, {} retries",
        report.elapsed_us, report.retries
    );

    let after = group.observe().unwrap();
    assert!(!after.populated, "{after:?}");
    assert!(after.pids.is_empty(), "{after:?}");
    let _ = spawned.child.wait();
    for pid in &pids {
        assert!(!is_alive(*pid), "pid {pid} survived the kill");
    }
}

#[test]
fn a_kill_of_an_empty_group_is_confirmed_at_once() {
    let guard = GroupGuard::create("killempty");
    let report = guard
        .0
        .kill_until_quiescent(Duration::from_secs(1))
        .unwrap();
    assert!(report.confirmed());
    assert_eq!(report.retries, 0);
}

#[test]
fn remove_is_refused_while_populated() {
    let guard = GroupGuard::create("removebusy");
    let options = SpawnOptions {
        group: Some(&guard.0),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&sh("exec sleep 1000"), &options).unwrap();
    assert!(guard.0.remove().is_err());
    assert!(guard
        .0
        .kill_until_quiescent(Duration::from_secs(5))
        .unwrap()
        .confirmed());
    let _ = spawned.child.wait();
    guard.0.remove().unwrap();
    assert!(!guard.0.path().exists());
}

/// Field `n` (1-based, as in proc(5)) of a `/proc/<pid>/stat` line.
fn field(stat: &str, n: usize) -> String {
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(n - 3).unwrap().to_owned()
}

#[test]
fn existing_groups_are_listed_after_the_fact() {
    let guard = GroupGuard::create("listed");
    let groups = common::hierarchy().list_groups().unwrap();
    assert!(groups.iter().any(|g| g.path() == guard.0.path()));
}
