//! Issue 16: a live writer's journal snapshot (rewritten every 64 KiB appended) is written on a
//! thread of its own, never by the journal's group-commit writer, so a rewrite that stalls —
//! its read and parse, its two fsyncs on a slow disk — holds up no `prepared` record queued
//! behind it, whose call waits for it to be dispatched. Needs `--features
//! stopline-store/failpoints` (the workspace's `stopline/failpoints`); without it the rewrite
//! is never parked and the test fails, never skips.

use std::sync::mpsc;
use std::time::Duration;
use stopline_store::ops::OpOwner;
use stopline_store::Store;

#[test]
fn a_stalled_snapshot_rewrite_holds_up_no_prepared_record() {
    let dir = tempfile::tempdir().unwrap();
    let hold = dir.path().join("hold-snapshot");
    std::env::set_var(
        "STOPLINE_FAILPOINTS",
        format!("ops.snapshot.tmp.create=hold_if:{}", hold.display()),
    );
    let store = Store::open(dir.path().join("home"));
    store.ensure_home().unwrap();
    let journal = store.ops_journal("gateway").unwrap();
    let owner = OpOwner::agent("worker");
    std::fs::write(&hold, "").unwrap();
    // Past 64 KiB of records: the rewrite starts, and parks at the failpoint.
    let path = dir
        .path()
        .join("home/ops")
        .join(format!("{}.jsonl", journal.writer()));
    while std::fs::metadata(&path).map_or(0, |m| m.len()) < 80 * 1024 {
        let op = journal.prepare_for("mcp:s:write", &owner, None).unwrap();
        journal.outcome(&op, "committed").unwrap();
    }
    // The rewrite is parked: no snapshot was written yet.
    let ops = dir.path().join("home/ops");
    let snapshots = || {
        std::fs::read_dir(&ops)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                !name.starts_with('.') && !name.ends_with(".jsonl")
            })
            .count()
    };
    assert_eq!(
        snapshots(),
        0,
        "the rewrite was parked before it wrote anything"
    );
    // A prepared record still becomes durable while the rewrite is parked.
    let (tx, rx) = mpsc::channel();
    let writer = journal.clone();
    std::thread::spawn(move || {
        let _ = tx.send(writer.prepare_for("mcp:s:write", &OpOwner::agent("worker"), None));
    });
    let prepared = rx.recv_timeout(Duration::from_secs(10));
    std::fs::remove_file(&hold).unwrap();
    assert!(
        matches!(prepared, Ok(Ok(_))),
        "a prepared record waited for the snapshot's rewrite: {prepared:?}"
    );
    // And the rewrite finishes once the disk answers.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while snapshots() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the snapshot was never written"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
