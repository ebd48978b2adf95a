//! `Store::watch`, the one watcher of the control directory, against a real home: a stop wakes
//! it (a new latch as `appeared`), the store's own reads never do, a lost `latches/` is noted and
//! watched again once it is back, a journal of another process wakes it (`journals`) and one of
//! its own does not, and a home that goes away ends the watch.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::time::{Duration, Instant};
use stopline_core::{Level, Name, Scope};
use stopline_store::{ControlChanges, EngageRequest, Store, WatchError, WatchNote};

fn halt(store: &Store, agent: &str) -> Scope {
    let scope = Scope::Agent(Name::parse(agent).unwrap());
    let request = EngageRequest::console(scope.clone(), Level::HaltAll, "monitor", "watch test");
    store.engage(&request).unwrap();
    scope
}

/// Everything reported within `within` (waits until something arrives, then drains briefly).
fn collect(watch: &mut stopline_store::ControlWatch, within: Duration) -> ControlChanges {
    let deadline = Instant::now() + within;
    let mut all = ControlChanges::default();
    while Instant::now() < deadline {
        let changes = watch.wait(Some(Duration::from_millis(50))).unwrap();
        let quiet = !changes.any();
        all.changed |= changes.changed;
        all.appeared |= changes.appeared;
        all.missed |= changes.missed;
        all.journals |= changes.journals;
        all.notes.extend(changes.notes);
        if all.any() && quiet {
            break;
        }
    }
    all
}

#[test]
fn a_stop_wakes_the_watch_and_the_stores_own_reads_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    store.ensure_home().unwrap();
    let mut watch = store.watch().unwrap();
    assert_eq!(
        watch.wait(Some(Duration::from_millis(20))).unwrap(),
        ControlChanges::default(),
        "nothing happened yet"
    );

    // Reads take the WAL's lock and open every record: none of it is a change.
    for _ in 0..3 {
        let view = store.load_view();
        assert!(view.faults.is_empty(), "{:?}", view.faults);
    }
    let quiet = collect(&mut watch, Duration::from_millis(300));
    assert!(
        !quiet.any(),
        "the store's own reads woke the watch: {quiet:?}"
    );

    let scope = halt(&store, "stopped");
    let stop = collect(&mut watch, Duration::from_secs(5));
    assert!(stop.changed && stop.appeared, "{stop:?}");
    assert!(!stop.missed && stop.notes.is_empty(), "{stop:?}");

    store.disengage(&scope, "watch test", "monitor").unwrap();
    let lifted = collect(&mut watch, Duration::from_secs(5));
    assert!(lifted.changed, "a recovery changes the view: {lifted:?}");
}

#[test]
fn a_lost_latches_dir_is_noted_and_watched_again_and_a_gone_home_ends_the_watch() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let store = Store::open(&home);
    store.ensure_home().unwrap();
    let mut watch = store.watch().unwrap();

    let latches = store.layout().latches();
    std::fs::remove_dir(&latches).unwrap();
    let lost = collect(&mut watch, Duration::from_secs(5));
    assert!(lost.missed, "{lost:?}");
    assert!(lost.notes.contains(&WatchNote::LatchesLost), "{lost:?}");
    assert!(lost.notes.iter().all(|n| !n.degrades()), "{lost:?}");

    // `ensure_home` brings `latches/` back; a latch in it is seen by the re-made watch.
    store.ensure_home().unwrap();
    let _ = collect(&mut watch, Duration::from_millis(300));
    halt(&store, "after");
    let seen = collect(&mut watch, Duration::from_secs(5));
    assert!(
        seen.appeared,
        "the re-made watch saw the new latch: {seen:?}"
    );

    let moved = dir.path().join("moved");
    std::fs::rename(&home, &moved).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match watch.wait(Some(Duration::from_millis(50))) {
            Err(WatchError::HomeGone) => break,
            Err(other) => panic!("expected HomeGone, got {other}"),
            Ok(_) => assert!(Instant::now() < deadline, "the watch outlived its home"),
        }
    }
    assert!(
        Store::open(&home).watch().is_err(),
        "a missing home cannot be watched"
    );
}

#[test]
fn another_processs_journal_wakes_the_watch_and_its_own_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let store = Store::open(&home);
    store.ensure_home().unwrap();
    // `ops/` does not exist yet: it is watched once it appears.
    let mut watch = store.watch().unwrap();
    let own = store.ops().journal("gateway").unwrap();
    let _ = collect(&mut watch, Duration::from_millis(300));
    let owner = stopline_store::ops::OpOwner::agent("worker");
    let op = own.prepare_for("mcp:s:echo", &owner, None).unwrap();
    own.dispatched(&op).unwrap();
    own.outcome(&op, "committed").unwrap();
    let quiet = collect(&mut watch, Duration::from_millis(300));
    assert!(!quiet.journals, "its own records woke the watch: {quiet:?}");

    let other = Store::with_io(
        &home,
        std::sync::Arc::new(stopline_store::fs::RealFs),
        // Another process's: the real clock and ids with a pid of its own.
        std::sync::Arc::new(stopline_store::env::GoneProcess(4_200_002)),
    )
    .ops()
    .journal("gateway")
    .unwrap();
    let op = other.prepare_for("mcp:s:write", &owner, None).unwrap();
    let seen = collect(&mut watch, Duration::from_secs(5));
    assert!(seen.journals, "{seen:?}");
    other.dispatched(&op).unwrap();
    let seen = collect(&mut watch, Duration::from_secs(5));
    assert!(seen.journals, "an append is seen too: {seen:?}");
}
