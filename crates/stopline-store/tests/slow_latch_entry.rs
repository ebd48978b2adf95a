//! A `latches/` entry that is slow to read is a read fault, not a machine emergency (docs/reference.md §5):
//! the view carries a `control_io` fault counted as a read that did not finish (so a supervisor
//! freezes rather than kills), no latch stands for the slow entry, and a verb that changes
//! latches refuses with that fault instead of planning around an emergency. An entry that is
//! not a regular file (a FIFO) is still a machine emergency.
//!
//! The read is made slow for real, inside `RealFs::read`'s bound, by the failpoint
//! `fs.read=delay_if:MS:PATH`. The failpoints are read once per process, so this file is its own
//! test binary with one test that arms them before the first read.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::time::Duration;
use stopline_core::{Level, Name, RefusalCode, Scope};
use stopline_store::{EngageRequest, Store};

fn engage(store: &Store, agent: &str, level: Level) -> String {
    let scope = Scope::Agent(Name::parse(agent).unwrap());
    let request = EngageRequest::console(scope, level, "operator", "slow entry test");
    store.engage(&request).unwrap().latch.file_name()
}

#[test]
fn a_latch_entry_too_slow_to_read_is_a_read_fault_and_a_fifo_is_still_an_emergency() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home")).with_read_timeout(Duration::from_secs(10));
    // The slow entry's name is fixed before anything is read: the failpoints are armed once.
    let slow = "latch_51010e0000000001.json".to_string();
    let slow_path = store.layout().latches().join(&slow);
    // 1.2 s: over the 1 s bound of one entry, well under the whole read's 10 s.
    std::env::set_var(
        "STOPLINE_FAILPOINTS",
        format!("fs.read=delay_if:1200:{}", slow_path.display()),
    );
    store.ensure_home().unwrap();
    let other = engage(&store, "other", Level::HaltAll);
    // A well-formed latch under the slow name (as an engage whose WAL record was deferred
    // leaves one): the latch of `other`, renamed.
    let bytes = std::fs::read_to_string(store.layout().latches().join(&other)).unwrap();
    let renamed = bytes.replace(
        other.trim_end_matches(".json"),
        slow.trim_end_matches(".json"),
    );
    assert_ne!(bytes, renamed);
    std::fs::write(&slow_path, renamed).unwrap();

    // The gate's view: one control_io fault, counted as unfinished; no emergency for it, and
    // the readable latch still stands.
    let timed = store.load_view_timed();
    let Err(unfinished) = timed else {
        panic!("a slow entry was not a read that did not finish: {timed:?}");
    };
    assert_eq!(unfinished.refusal.code, RefusalCode::ControlIo);
    assert!(unfinished.refusal.message.contains(&slow), "{unfinished:?}");
    let view = store.load_view();
    assert_eq!(view.faults.len(), 1, "{:?}", view.faults);
    assert_eq!(view.faults[0].code, RefusalCode::ControlIo);
    let files: Vec<&str> = view.latches.iter().map(|l| l.file.as_str()).collect();
    assert_eq!(files, vec![other.as_str()], "{:?}", view.latches);
    assert!(
        view.latches.iter().all(|l| l.problem.is_none()),
        "a slow entry became a machine emergency: {:?}",
        view.latches
    );

    // A verb that changes latches refuses with the read fault (it does not plan around an
    // emergency, nor clear the latch beside one it could not read).
    let refused = store
        .disengage(
            &Scope::Agent(Name::parse("other").unwrap()),
            "lifted",
            "operator",
        )
        .unwrap_err();
    assert_eq!(refused.code(), RefusalCode::ControlIo, "{refused}");
    assert!(refused.is_unfinished_read(), "{refused}");
    assert!(store.layout().latches().join(&other).exists());

    // A FIFO in latches/ is still a machine emergency, read at once (a home of its own: the
    // slow entry stays slow in the first, and removing it by hand would be a deleted stop).
    let store =
        Store::open(dir.path().join("fifo-home")).with_read_timeout(Duration::from_secs(10));
    store.ensure_home().unwrap();
    engage(&store, "other", Level::HaltAll);
    let fifo = store.layout().latches().join("latch_fifo.json");
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .unwrap();
    let view = store.load_view();
    let emergency: Vec<_> = view
        .latches
        .iter()
        .filter(|l| l.problem.is_some())
        .collect();
    assert_eq!(emergency.len(), 1, "{:?}", view.latches);
    assert_eq!(emergency[0].file, "latch_fifo.json");
    assert_eq!(emergency[0].scope, Scope::Machine);
    assert_eq!(emergency[0].level, Level::Emergency);
    assert!(
        view.faults.is_empty(),
        "a FIFO is an emergency, not a fault: {:?}",
        view.faults
    );
    assert!(
        store.load_view_timed().is_ok(),
        "a FIFO is an emergency, not an unfinished read"
    );
}
