//! The spending journals: looks, compaction by others, rewrites.

use super::*;
use stopline_core::budget::BudgetKind;
use stopline_core::RefusalCode;

/// A journal named as if a gone process wrote it (pid 1 never has start time 1).
fn gone_writer(store: &Store, lines: &[SpendLine]) -> PathBuf {
    let path = store.layout().spend().join("gateway-1-1.jsonl");
    let mut bytes = Vec::new();
    for line in lines {
        bytes.extend(serde_json::to_vec(line).unwrap());
        bytes.push(b'\n');
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

fn reserved(id: &str, chain: &[&str], amounts: &Budgets) -> SpendLine {
    SpendLine::Reserved {
        id: id.into(),
        chain: chain.iter().map(|s| s.to_string()).collect(),
        amounts: amounts.clone(),
        ts_ms: 0,
    }
}

#[test]
fn a_gone_writers_open_reservations_count_at_their_bound_and_settled_ones_at_their_use() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    let bound: Budgets = [(BudgetKind::ToolCalls, 1.0), (BudgetKind::SpendUsd, 0.5)].into();
    let used: Budgets = [(BudgetKind::ToolCalls, 1.0), (BudgetKind::SpendUsd, 0.1)].into();
    gone_writer(
        &store,
        &[
            reserved("a", &["child", "parent"], &bound),
            SpendLine::Settled {
                id: "a".into(),
                used: used.clone(),
            },
            reserved("b", &["child", "parent"], &bound),
            SpendLine::Settled {
                id: "b".into(),
                used: Budgets::new(),
            },
            reserved("c", &["child"], &bound), // it crashed before this settled
        ],
    );
    let journal = store.spend().journal("gateway").unwrap();
    let lock = journal.lock().unwrap();
    let spent = &lock.elsewhere().used;
    assert_eq!(spent["parent"][&BudgetKind::ToolCalls], 1.0);
    assert!((spent["parent"][&BudgetKind::SpendUsd] - 0.1).abs() < 1e-9);
    assert_eq!(spent["child"][&BudgetKind::ToolCalls], 2.0);
    assert!((spent["child"][&BudgetKind::SpendUsd] - 0.6).abs() < 1e-9);
    assert!(lock.elsewhere().in_flight.is_empty());
}

#[test]
fn a_live_writers_open_reservations_are_in_flight_and_its_own_are_not_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let other = store.spend().journal("other").unwrap(); // this live process, another journal
    let mine = store.spend().journal("gateway").unwrap();
    let id = other
        .lock()
        .unwrap()
        .reserved(&["t".to_string()], &one)
        .unwrap();
    mine.lock()
        .unwrap()
        .reserved(&["t".to_string()], &one)
        .unwrap();
    let seen = mine.lock().unwrap().elsewhere().clone();
    assert_eq!(seen.in_flight["t"][&BudgetKind::ToolCalls], 1.0);
    assert!(
        seen.used.is_empty(),
        "its own reservation is not elsewhere: {seen:?}"
    );
    other.settled(&id, &one).unwrap();
    let seen = mine.lock().unwrap().elsewhere().clone();
    assert_eq!(seen.used["t"][&BudgetKind::ToolCalls], 1.0);
    assert!(seen.in_flight.is_empty());
}

#[test]
fn a_look_reads_only_what_the_other_journals_gained() {
    let dir = tempfile::tempdir().unwrap();
    let counting = Arc::new(crate::follow::tests::Counting::default());
    let store = Store::with_io(
        dir.path().join("home"),
        counting.clone(),
        Arc::new(crate::env::SystemEnv),
    );
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let history: Vec<SpendLine> = (0..200)
        .flat_map(|i| {
            let id = format!("r{i}");
            [
                reserved(&id, &["t"], &one),
                SpendLine::Settled {
                    id,
                    used: one.clone(),
                },
            ]
        })
        .collect();
    let path = gone_writer(&store, &history);
    let journal = store.spend().journal("gateway").unwrap();
    assert_eq!(
        journal.lock().unwrap().elsewhere().used["t"][&BudgetKind::ToolCalls],
        200.0
    );
    counting.reset();
    let before = std::fs::metadata(&path).unwrap().len();
    let mut bytes = serde_json::to_vec(&reserved("open", &["t"], &one)).unwrap();
    bytes.push(b'\n');
    use std::io::Write;
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&bytes)
        .unwrap();
    let seen = journal.lock().unwrap().elsewhere().clone();
    assert_eq!(seen.used["t"][&BudgetKind::ToolCalls], 201.0, "{seen:?}");
    assert_eq!(
        counting.take(&path),
        std::fs::metadata(&path).unwrap().len() - before,
        "only the appended line is read"
    );
}

#[test]
fn a_replaced_journal_is_folded_again_and_a_shorter_one_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
    let path = gone_writer(&store, &[reserved("a", &["t"], &one)]);
    let journal = store.spend().journal("gateway").unwrap();
    assert_eq!(
        journal.lock().unwrap().elsewhere().used["t"][&BudgetKind::ToolCalls],
        1.0
    );
    // Renamed over by another file: folded from its start, not from the old offset.
    let mut bytes = Vec::new();
    for line in [reserved("x", &["t"], &two), reserved("y", &["u"], &one)] {
        bytes.extend(serde_json::to_vec(&line).unwrap());
        bytes.push(b'\n');
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    let seen = journal.lock().unwrap().elsewhere().clone();
    assert_eq!(seen.used["t"][&BudgetKind::ToolCalls], 2.0, "{seen:?}");
    assert_eq!(seen.used["u"][&BudgetKind::ToolCalls], 1.0, "{seen:?}");
    // Cut shorter in place: what was folded is gone, which fails closed.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(10)
        .unwrap();
    let error = journal
        .lock()
        .err()
        .expect("a shorter journal")
        .to_refusal();
    assert_eq!(
        error.code,
        RefusalCode::ControlStateCorrupt,
        "{}",
        error.message
    );
}

#[test]
fn a_torn_tail_waits_and_a_broken_line_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let path = gone_writer(&store, &[reserved("a", &["t"], &one)]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"phase\":\"reser");
    std::fs::write(&path, &bytes).unwrap();
    let journal = store.spend().journal("gateway").unwrap();
    assert_eq!(
        journal.lock().unwrap().elsewhere().used["t"][&BudgetKind::ToolCalls],
        1.0
    );
    bytes.extend_from_slice(b"\n");
    std::fs::write(&path, &bytes).unwrap();
    let error = journal.lock().err().expect("a broken line").to_refusal();
    assert_eq!(
        error.code,
        RefusalCode::ControlStateCorrupt,
        "{}",
        error.message
    );
}

/// A journal at `spend/<name>` holding `lines`, as a gone writer left it.
fn journal_named(store: &Store, name: &str, lines: &[SpendLine]) -> PathBuf {
    let path = store.layout().spend().join(name);
    let mut bytes = Vec::new();
    for line in lines {
        bytes.extend(serde_json::to_vec(line).unwrap());
        bytes.push(b'\n');
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `n` settled reservations of `bound` that used `used`, on `chain`, then one left open.
fn settled_then_open(n: usize, chain: &[&str], bound: &Budgets, used: &Budgets) -> Vec<SpendLine> {
    let mut lines: Vec<SpendLine> = (0..n)
        .flat_map(|i| {
            let id = format!("r{i}");
            [
                reserved(&id, chain, bound),
                SpendLine::Settled {
                    id,
                    used: used.clone(),
                },
            ]
        })
        .collect();
    lines.push(reserved("open", &chain[..1], bound));
    lines
}

fn tool_calls(seen: &Elsewhere, account: &str) -> f64 {
    seen.used
        .get(account)
        .and_then(|b| b.get(&BudgetKind::ToolCalls))
        .copied()
        .unwrap_or(0.0)
}

fn listed(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".jsonl"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_reservation_with_many_gone_writers_reads_only_their_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let counting = Arc::new(crate::follow::tests::Counting::default());
    let store = Store::with_io(
        dir.path().join("home"),
        counting.clone(),
        Arc::new(crate::env::SystemEnv),
    );
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
    // 40 gateways that have gone (no process has start time 1), 25 settled calls each and
    // one reservation each that never settled (in doubt: spent at its bound).
    for w in 0..40 {
        let lines = settled_then_open(25, &["child", "parent"], &two, &one);
        journal_named(
            &store,
            &format!("gateway-{}-1.jsonl", 3_000_000 + w),
            &lines,
        );
    }
    let spend = store.layout().spend();
    let first = store.spend().journal("gateway").unwrap();
    let seen = first.lock().unwrap().elsewhere().clone();
    assert_eq!(tool_calls(&seen, "parent"), 1000.0, "{seen:?}");
    assert_eq!(tool_calls(&seen, "child"), 1080.0, "{seen:?}");
    assert!(seen.in_flight.is_empty(), "{seen:?}");
    // A fresh reader (a new gateway) decides a reservation: it reads the snapshot, and
    // nothing of any gone writer's journal.
    counting.reset();
    let fresh = store.spend().journal("fresh").unwrap();
    let lock = fresh.lock().unwrap();
    assert_eq!(
        lock.elsewhere(),
        &seen,
        "the same spending, from the snapshot"
    );
    lock.reserved(&["child".to_string()], &one).unwrap();
    drop(lock);
    let settled = spend.join("settled.json");
    let reads = counting.read_under(&spend);
    assert_eq!(
        reads.keys().collect::<Vec<_>>(),
        vec![&settled],
        "a fresh reservation reads spend/settled.json only: {reads:?}"
    );
    // The first reader's next look: the snapshot did not change (a zero-byte read tells),
    // and the live writer's journal is read from where it was folded.
    counting.reset();
    let again = first.lock().unwrap().elsewhere().clone();
    assert_eq!(tool_calls(&again, "child"), 1080.0, "{again:?}");
    assert_eq!(again.in_flight["child"][&BudgetKind::ToolCalls], 1.0);
    let reads = counting.read_under(&spend);
    assert_eq!(reads.get(&settled).map(|r| r.1), Some(0), "{reads:?}");
    assert_eq!(
        reads.len(),
        2,
        "the snapshot and the live journal: {reads:?}"
    );
}

#[test]
fn compaction_by_another_process_neither_loses_nor_counts_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
    for w in 0..3 {
        let lines = settled_then_open(1, &["t"], &two, &one);
        journal_named(
            &store,
            &format!("gateway-{}-1.jsonl", 3_000_100 + w),
            &lines,
        );
    }
    let (spend, archive) = (store.layout().spend(), store.layout().spend_archive());
    let names = listed(&spend);
    let follower = store.spend().journal("gateway").unwrap();
    let total = |journal: &SpendJournal| tool_calls(journal.lock().unwrap().elsewhere(), "t");
    assert_eq!(total(&follower), 9.0, "3 settled at 1, 3 in doubt at 2");
    let report = store
        .spend()
        .compact_journals(crate::ops_archive::GoneJournals::Archive);
    assert_eq!((report.compacted, report.pruned), (3, 0), "{report:?}");
    assert!(listed(&spend).is_empty(), "{:?}", listed(&spend));
    assert_eq!(listed(&archive), names, "kept on disk, off the hot path");
    assert_eq!(
        total(&follower),
        9.0,
        "what it folded before is in the snapshot now"
    );
    assert_eq!(total(&store.spend().journal("fresh").unwrap()), 9.0);
    // A crash between the snapshot and the removal leaves a covered journal in spend/.
    std::fs::copy(archive.join(&names[0]), spend.join(&names[0])).unwrap();
    assert_eq!(
        total(&follower),
        9.0,
        "a covered journal is not counted again"
    );
    assert_eq!(total(&store.spend().journal("fresh").unwrap()), 9.0);
    let report = store
        .spend()
        .compact_journals(crate::ops_archive::GoneJournals::Archive);
    assert_eq!(report.compacted, 1, "the next pass finishes it: {report:?}");
    assert!(listed(&spend).is_empty());
    // The pass after forgets the names whose journals left spend/.
    store
        .spend()
        .compact_journals(crate::ops_archive::GoneJournals::Archive);
    let (settled, _) = store.spend().read_settled().unwrap().unwrap();
    assert!(settled.covered.is_empty(), "{settled:?}");
    assert_eq!(settled.in_doubt.len(), 3, "{settled:?}");
    assert_eq!(total(&follower), 9.0);
    assert_eq!(total(&store.spend().journal("fresh").unwrap()), 9.0);
    let report = store
        .spend()
        .compact_journals(crate::ops_archive::GoneJournals::Prune);
    assert_eq!(report.pruned, 3, "{report:?}");
    assert!(listed(&archive).is_empty());
    assert_eq!(
        total(&store.spend().journal("fresh").unwrap()),
        9.0,
        "pruned, still spent"
    );
}

#[test]
fn a_snapshot_that_cannot_be_trusted_fails_closed_never_zero_spent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    journal_named(
        &store,
        "gateway-3000200-1.jsonl",
        &settled_then_open(2, &["t"], &one, &one),
    );
    let report = store
        .spend()
        .compact_journals(crate::ops_archive::GoneJournals::Archive);
    assert_eq!(report.compacted, 1, "{report:?}");
    let settled = store.layout().spend_settled();
    let good = std::fs::read(&settled).unwrap();
    let journal = store.spend().journal("gateway").unwrap();
    assert_eq!(tool_calls(journal.lock().unwrap().elsewhere(), "t"), 3.0);
    let refused = |why: &str| {
        let error = journal
            .lock()
            .err()
            .unwrap_or_else(|| panic!("{why}: not refused"));
        let refusal = error.to_refusal();
        assert_eq!(
            refusal.code,
            RefusalCode::ControlStateCorrupt,
            "{why}: {refusal:?}"
        );
        let fresh = store.spend().journal("fresh").unwrap();
        assert!(fresh.lock().is_err(), "{why}: a fresh reader too");
        let report = store
            .spend()
            .compact_journals(crate::ops_archive::GoneJournals::Prune);
        assert!(!report.errors.is_empty(), "{why}: {report:?}");
    };
    std::fs::write(&settled, b"{\"schema\":").unwrap();
    refused("torn");
    let other = String::from_utf8(good.clone()).unwrap().replace(
        crate::spend::compact::SETTLED_SCHEMA,
        "stopline.spend-settled.v0",
    );
    std::fs::write(&settled, other).unwrap();
    refused("another schema");
    std::fs::remove_file(&settled).unwrap();
    refused("missing beside the archive");
    assert_eq!(
        listed(&store.layout().spend_archive()),
        vec!["gateway-3000200-1.jsonl".to_string()],
        "nothing pruned while the snapshot cannot be trusted"
    );
    std::fs::write(&settled, &good).unwrap();
    assert_eq!(tool_calls(journal.lock().unwrap().elsewhere(), "t"), 3.0);
}

/// `calls` reservations of one tool call on `t` and `p` by `journal`, each settled at what
/// it reserved, then one of two on `t` left open; returns the open one's id.
fn live_history(journal: &SpendJournal, calls: usize) -> String {
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let two: Budgets = [(BudgetKind::ToolCalls, 2.0)].into();
    let chain = ["t".to_string(), "p".to_string()];
    for _ in 0..calls {
        let id = journal.lock().unwrap().reserved(&chain, &one).unwrap();
        journal.settled(&id, &one).unwrap();
    }
    journal.lock().unwrap().reserved(&chain[..1], &two).unwrap()
}

fn in_flight(seen: &Elsewhere, account: &str) -> f64 {
    seen.in_flight
        .get(account)
        .and_then(|b| b.get(&BudgetKind::ToolCalls))
        .copied()
        .unwrap_or(0.0)
}

#[test]
fn a_new_gateways_first_reservation_reads_a_bounded_part_of_a_long_lived_writer() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let bound = 4096;
    let writer = Store::open(&home).with_spend_rewrite_bytes(bound);
    let live = writer.spend().journal("gateway").unwrap();
    live_history(&live, 600);
    let path = writer.layout().spend().join(&live.name);
    let counting = Arc::new(crate::follow::tests::Counting::default());
    let reader = Store::with_io(&home, counting.clone(), Arc::new(crate::env::SystemEnv));
    let fresh = reader.spend().journal("fresh").unwrap();
    let lock = fresh.lock().unwrap();
    let seen = lock.elsewhere().clone();
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    lock.reserved(&["p".to_string()], &one).unwrap();
    drop(lock);
    assert_eq!(tool_calls(&seen, "t"), 600.0, "{seen:?}");
    assert_eq!(tool_calls(&seen, "p"), 600.0, "{seen:?}");
    assert_eq!(
        in_flight(&seen, "t"),
        2.0,
        "the open call, in flight: {seen:?}"
    );
    let read = counting.take(&path);
    assert!(
        read <= 2 * bound,
        "600 calls' journal read whole: {read} bytes (bound {bound})"
    );
}

#[test]
fn a_reader_folding_across_rewrites_counts_every_call_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let store = Store::open(&home).with_spend_rewrite_bytes(2048);
    let live = store.spend().journal("gateway").unwrap();
    let follower = store.spend().journal("follower").unwrap();
    let path = store.layout().spend().join(&live.name);
    let one: Budgets = [(BudgetKind::ToolCalls, 1.0)].into();
    let chain = ["t".to_string(), "p".to_string()];
    let open = live.lock().unwrap().reserved(&chain[..1], &one).unwrap();
    let mut files = Vec::new();
    let mut reused = false;
    // The follower looks after every call (mid-way through a file, then the next one),
    // then after ever longer gaps: several rewrites between two of its looks, where ext4
    // hands a new generation the inode number of one the follower folded before.
    let mut calls = 0;
    for gap in [1, 1, 1, 40, 40, 90, 130, 200] {
        for _ in 0..gap {
            let id = live.lock().unwrap().reserved(&chain, &one).unwrap();
            live.settled(&id, &one).unwrap();
            calls += 1;
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
            if files.last() != Some(&ino) {
                reused |= files.contains(&ino);
                files.push(ino);
            }
        }
        let seen = follower.lock().unwrap().elsewhere().clone();
        assert_eq!(tool_calls(&seen, "p"), calls as f64, "{calls}: {seen:?}");
        assert_eq!(tool_calls(&seen, "t"), calls as f64, "{calls}: {seen:?}");
        assert_eq!(in_flight(&seen, "t"), 1.0, "{calls}: {seen:?}");
    }
    assert!(files.len() > 5, "rewritten {} times", files.len() - 1);
    live.settled(&open, &one).unwrap();
    let seen = follower.lock().unwrap().elsewhere().clone();
    assert_eq!(tool_calls(&seen, "t"), calls as f64 + 1.0, "{seen:?}");
    assert!(seen.in_flight.is_empty(), "{seen:?}");
    let fresh = store.spend().journal("fresh").unwrap();
    assert_eq!(fresh.lock().unwrap().elsewhere(), &seen);
    // Not asserted (it is the filesystem's choice), but what this test is for on ext4.
    eprintln!(
        "generations {}, an inode number reused: {reused}",
        files.len()
    );
}

#[test]
fn a_rewrite_keeps_what_the_journal_means_and_a_gone_writers_leftover_is_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home")).with_spend_rewrite_bytes(1024);
    let live = store.spend().journal("gateway").unwrap();
    let open = live_history(&live, 40);
    let path = store.layout().spend().join(&live.name);
    let (lines, _) = fold_lines(&std::fs::read(&path).unwrap()).unwrap();
    let mut meaning = Meaning::default();
    for line in lines.iter().cloned() {
        meaning.fold(line);
    }
    assert_eq!(meaning.open.keys().collect::<Vec<_>>(), vec![&open]);
    assert_eq!(meaning.settled["t"][&BudgetKind::ToolCalls], 40.0);
    assert!(
        lines.len() < 20,
        "rewritten: {} lines for 41 calls",
        lines.len()
    );
    // A rewrite a crash cut short (before its rename) leaves a temporary file: never read,
    // removed once its writer is gone.
    let spend = store.layout().spend();
    let gone = "gateway-3000400-1.jsonl";
    std::fs::copy(&path, spend.join(gone)).unwrap();
    let tmp = spend.join(format!(".{gone}.tmp-0a0b0c"));
    std::fs::write(&tmp, b"{\"phase\":\"reser").unwrap();
    let mine = spend.join(format!(".{}.tmp-0d0e0f", live.name));
    std::fs::write(&mine, b"").unwrap();
    let seen = store
        .spend()
        .journal("fresh")
        .unwrap()
        .lock()
        .unwrap()
        .elsewhere()
        .clone();
    assert_eq!(tool_calls(&seen, "t"), 2.0 * 40.0 + 2.0, "{seen:?}");
    let report = store
        .spend()
        .compact_journals(crate::ops_archive::GoneJournals::Archive);
    assert_eq!(report.compacted, 1, "{report:?}");
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(!tmp.exists(), "a gone writer's leftover is removed");
    assert!(mine.exists(), "a live writer's is its own");
    let seen = store
        .spend()
        .journal("fresh")
        .unwrap()
        .lock()
        .unwrap()
        .elsewhere()
        .clone();
    assert_eq!(tool_calls(&seen, "t"), 2.0 * 40.0 + 2.0, "{seen:?}");
}
