//! Freezing a group holds every process in it (no progress), confirmed by `frozen 1`; thawing
//! resumes progress, confirmed by `frozen 0`.

mod common;

use common::{sh, GroupGuard};
use std::path::Path;
use std::time::Duration;
use stopline_supervisor::{spawn, SpawnOptions, StdioMode};

fn counter(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

fn wait_for_progress(file: &Path) {
    let first = counter(file);
    let started = std::time::Instant::now();
    while counter(file) == first {
        assert!(started.elapsed() < Duration::from_secs(10), "no progress");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_frozen_group_makes_no_progress_and_a_thawed_one_resumes() {
    let guard = GroupGuard::create("freeze");
    let group = &guard.0;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counter");
    // Two counting processes: the agent and a child of it.
    let script = format!(
        "count() {{ i=0; while true; do i=$((i+1)); echo $i > {0}.$1; sleep 0.01; done; }}; \
         count child & count main",
        file.display()
    );
    let mut spec = sh(&script);
    spec.stdin = StdioMode::Null;
    let options = SpawnOptions {
        group: Some(group),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&spec, &options).unwrap();
    let main = dir.path().join("counter.main");
    let child = dir.path().join("counter.child");
    wait_for_progress(&main);
    wait_for_progress(&child);

    let frozen_at = group.freeze(Duration::from_secs(5)).unwrap();
    let observation = group.observe().unwrap();
    assert!(
        observation.frozen && observation.populated,
        "{observation:?}"
    );
    assert!(observation.observed_at >= frozen_at);
    let held = (counter(&main), counter(&child));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        (counter(&main), counter(&child)),
        held,
        "a frozen process made progress"
    );
    // Freezing again is idempotent.
    group.freeze(Duration::from_secs(5)).unwrap();

    group.thaw(Duration::from_secs(5)).unwrap();
    assert!(!group.observe().unwrap().frozen);
    wait_for_progress(&main);
    wait_for_progress(&child);

    // A frozen group is still killable, and the kill is confirmed.
    group.freeze(Duration::from_secs(5)).unwrap();
    let report = group.kill_until_quiescent(Duration::from_secs(10)).unwrap();
    assert!(report.confirmed(), "{report:?}");
    let _ = spawned.child.wait();
}
