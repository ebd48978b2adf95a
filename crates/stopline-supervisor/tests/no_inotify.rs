//! Without an inotify instance (EMFILE, injected at `supervisor.events.inotify`), a freeze, a
//! thaw and a kill of a real group are still confirmed, by polling `cgroup.events`. Built only
//! with the `failpoints` feature (`--features stopline/failpoints` in the workspace); this
//! binary holds this one test because the failpoint is armed for its whole process.
#![cfg(feature = "failpoints")]

mod common;

use common::{sh, GroupGuard};
use std::time::{Duration, Instant};
use stopline_supervisor::events::EventsWatch;
use stopline_supervisor::{spawn, SpawnOptions, StdioMode};

#[test]
fn a_freeze_a_thaw_and_a_kill_are_confirmed_without_inotify() {
    // Armed before anything reads it (the failpoints are read once per process).
    std::env::set_var("STOPLINE_FAILPOINTS", "supervisor.events.inotify=emfile");
    let guard = GroupGuard::create("no-inotify");
    let group = &guard.0;
    let error = EventsWatch::new(&group.events_path())
        .err()
        .expect("the failpoint makes the watch fail");
    assert_eq!(error.raw_os_error(), Some(24), "{error}");

    let mut spec = sh("sleep 1000 & sleep 1000");
    spec.stdin = StdioMode::Null;
    let options = SpawnOptions {
        group: Some(group),
        ..SpawnOptions::default()
    };
    let _spawned = spawn(&spec, &options).unwrap();
    let started = Instant::now();
    while group.pids().unwrap().len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(10), "no child");
        std::thread::sleep(Duration::from_millis(10));
    }

    group.freeze(Duration::from_secs(5)).unwrap();
    assert!(group.events().unwrap().frozen);
    group.thaw(Duration::from_secs(5)).unwrap();
    assert!(!group.events().unwrap().frozen);
    let report = group.kill_until_quiescent(Duration::from_secs(5)).unwrap();
    assert!(report.confirmed(), "{report:?}");
    assert!(!group.events().unwrap().populated);
}
