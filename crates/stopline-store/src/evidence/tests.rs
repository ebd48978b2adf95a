//! The evidence log's segments, head, tail repair and pruning.

use super::*;
use serde_json::{json, Map, Value};
use stopline_core::wal;

#[test]
fn segment_names_say_their_first_record() {
    assert_eq!(segment_name(1), "log.jsonl");
    assert_eq!(segment_name(8193), "log-000000008193.jsonl");
    for first in [1, 2, 8193, 999_999_999_999] {
        assert_eq!(segment_first(&segment_name(first)), Some(first));
    }
    for name in [
        "log-1.jsonl",
        "log-000000000001.jsonl",
        "head.json",
        "log.lock",
    ] {
        assert_eq!(segment_first(name), None, "{name}");
    }
}

fn record(n: u64) -> Map<String, Value> {
    crate::chain::fields([("schema", json!("test.v1")), ("n", json!(n))])
}

/// A home whose evidence log has `records` records, three to a segment.
fn log_of(records: u64) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home")).with_evidence_segment_records(3);
    for n in 1..=records {
        assert_eq!(store.evidence().append("test", record(n)).unwrap(), n);
    }
    (dir, store)
}

fn lines(store: &Store, first: u64) -> Vec<Value> {
    let text = std::fs::read_to_string(store.layout().evidence_segment(first)).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Flip one digit of record `seq`'s `n` field in its segment.
fn damage(store: &Store, first: u64, seq: u64) {
    let path = store.layout().evidence_segment(first);
    let text = std::fs::read_to_string(&path).unwrap();
    let changed = text.replace(&format!("\"n\":{seq}"), &format!("\"n\":{}", seq + 10));
    assert_ne!(changed, text);
    std::fs::write(&path, changed).unwrap();
}

#[test]
fn the_chain_runs_on_across_segments() {
    let (_dir, store) = log_of(8);
    let names: Vec<String> = store
        .evidence_segments()
        .unwrap()
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(
        names,
        [
            "log.jsonl",
            "log-000000000004.jsonl",
            "log-000000000007.jsonl"
        ]
    );
    // The first line of a segment chains to the last line of the one before.
    for (before, first) in [(1, 4), (4, 7)] {
        let last = lines(&store, before).pop().unwrap();
        let line = std::fs::read_to_string(store.layout().evidence_segment(before)).unwrap();
        let last_bytes = line.lines().last().unwrap();
        assert_eq!(last["seq"], first - 1);
        assert_eq!(lines(&store, first)[0]["seq"], first);
        assert_eq!(
            lines(&store, first)[0]["prev"],
            wal::sha256_hex(last_bytes.as_bytes())
        );
    }
    let chain = store.evidence().chain(true).unwrap();
    let seqs: Vec<u64> = chain.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<u64>>());
    assert_eq!(chain.total_segments, 3);
    assert_eq!(store.evidence().anchor_fault(&chain.entries), None);
    // Without `all`: the newest two segments, linked.
    let tail = store.evidence().chain(false).unwrap();
    let seqs: Vec<u64> = tail.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (4..=8).collect::<Vec<u64>>());
    let head = store.evidence().head().unwrap().unwrap();
    assert_eq!(head.seq, 8);
    assert_eq!(head.at.unwrap().0, "log-000000000007.jsonl");
}

#[test]
fn an_append_reads_only_the_tail_so_a_damaged_or_missing_old_segment_is_found_by_a_whole_read() {
    let (_dir, store) = log_of(7);
    damage(&store, 1, 2);
    assert_eq!(store.evidence().append("test", record(8)).unwrap(), 8);
    assert_eq!(
        store.evidence().chain(true).unwrap_err(),
        WalFault::BrokenLink { line: 3 }
    );
    assert!(
        store.evidence().chain(false).is_ok(),
        "the newest two are whole"
    );
    std::fs::remove_file(store.layout().evidence_segment(4)).unwrap();
    assert_eq!(store.evidence().append("test", record(9)).unwrap(), 9);
    std::fs::remove_file(store.layout().evidence_segment(1)).unwrap();
    assert_eq!(store.evidence().append("test", record(10)).unwrap(), 10);
    assert_eq!(
        store.evidence().chain(true).unwrap_err(),
        WalFault::Missing { line: 1, last: 6 }
    );
    let tail = store.evidence().chain(false).unwrap();
    assert_eq!(tail.entries.first().map(|e| e.seq), Some(7));
    assert_eq!(tail.entries.last().map(|e| e.seq), Some(10));
}

#[test]
fn an_edited_newest_line_or_a_lost_head_refuses_the_append() {
    let (_dir, store) = log_of(5);
    let segment = store.layout().evidence_segment(4);
    let pristine = std::fs::read(&segment).unwrap();
    damage(&store, 4, 5);
    let error = store.evidence().append("test", record(6)).unwrap_err();
    assert!(error.to_string().contains("head anchor"), "{error}");
    assert_eq!(lines(&store, 4).len(), 2, "nothing appended");
    std::fs::write(&segment, pristine).unwrap();
    assert_eq!(store.evidence().append("test", record(6)).unwrap(), 6);
    // A lost head with later segments: where the chain ends is unknown.
    std::fs::remove_file(store.layout().evidence_head()).unwrap();
    let error = store.evidence().append("test", record(7)).unwrap_err();
    assert!(error.to_string().contains("no head anchor"), "{error}");
}

#[test]
fn a_switch_whose_head_was_not_rewritten_or_whose_segment_is_empty_is_carried_on() {
    // The head one line behind across a switch (a crash after the new segment's first
    // record, before the head): the next append follows that record.
    let (_dir, store) = log_of(3);
    let head = std::fs::read(store.layout().evidence_head()).unwrap();
    assert_eq!(store.evidence().append("test", record(4)).unwrap(), 4);
    std::fs::write(store.layout().evidence_head(), &head).unwrap();
    assert_eq!(store.evidence().append("test", record(5)).unwrap(), 5);
    let seqs: Vec<u64> = lines(&store, 4)
        .iter()
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [4, 5]);
    assert_eq!(store.evidence().entries().unwrap().len(), 5);
    // A segment a crashed switch left empty: the next record is written into it.
    let (_dir, store) = log_of(6);
    std::fs::write(store.layout().evidence_segment(7), b"").unwrap();
    assert_eq!(store.evidence().append("test", record(7)).unwrap(), 7);
    assert_eq!(lines(&store, 7).len(), 1);
    assert_eq!(store.evidence().entries().unwrap().len(), 7);
    // Two lines after the head is more than a crash leaves.
    let (_dir, store) = log_of(3);
    let head = std::fs::read(store.layout().evidence_head()).unwrap();
    store.evidence().append("test", record(4)).unwrap();
    store.evidence().append("test", record(5)).unwrap();
    std::fs::write(store.layout().evidence_head(), &head).unwrap();
    let error = store.evidence().append("test", record(6)).unwrap_err();
    assert!(
        error.to_string().contains("2 lines after the head"),
        "{error}"
    );
}

#[test]
fn a_torn_remnant_of_an_append_that_never_returned_is_kept_and_cut_off() {
    let (_dir, store) = log_of(4);
    let segment = store.layout().evidence_segment(4);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&segment)
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":5,\"prev\":\"ab").unwrap();
    assert!(matches!(
        store.evidence().chain(true),
        Err(WalFault::TornTail { .. })
    ));
    assert_eq!(store.evidence().append("test", record(5)).unwrap(), 5);
    assert_eq!(lines(&store, 4).len(), 2);
    assert_eq!(store.evidence().entries().unwrap().len(), 5);
    let kept = std::fs::read_dir(store.layout().recovery_evidence())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert!(
        kept.len() == 1 && kept[0].starts_with("evidence-log-000000000004.jsonl-"),
        "{kept:?}"
    );
}

#[test]
fn pruning_keeps_the_newest_segments_and_says_where_they_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"))
        .with_evidence_segment_records(3)
        .with_evidence_keep_segments(Some(2));
    let mut saved = Vec::new();
    for n in 1..=10 {
        if n == 10 {
            saved = std::fs::read(store.layout().evidence_segment(4)).unwrap();
        }
        store.evidence().append("test", record(n)).unwrap();
    }
    let names: Vec<u64> = store
        .evidence_segments()
        .unwrap()
        .into_iter()
        .map(|(f, _)| f)
        .collect();
    assert_eq!(names, [7, 10]);
    let chain = store.evidence().chain(true).unwrap();
    let seqs: Vec<u64> = chain.entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, [7, 8, 9, 10]);
    assert_eq!(chain.pruned_through, Some(6));
    let (through, hash) = store.evidence().pruned().unwrap().unwrap();
    assert_eq!(through, 6);
    assert_eq!(
        Some(Value::String(hash)),
        lines(&store, 7)[0].get("prev").cloned()
    );
    // A crash after the marker, before the removal: the covered segment is skipped, and the
    // next pruning removes it.
    std::fs::write(store.layout().evidence_segment(4), &saved).unwrap();
    assert_eq!(store.evidence().chain(true).unwrap().entries.len(), 4);
    for n in 11..=13 {
        store.evidence().append("test", record(n)).unwrap();
    }
    assert!(!store.layout().evidence_segment(4).exists());
    assert_eq!(store.evidence().pruned().unwrap().unwrap().0, 9);
    // Segments gone with nothing saying they were pruned: the records are missing.
    std::fs::remove_file(store.layout().evidence_pruned()).unwrap();
    assert_eq!(
        store.evidence().chain(true).unwrap_err(),
        WalFault::Missing { line: 1, last: 9 }
    );
    std::fs::write(store.layout().evidence_pruned(), b"{").unwrap();
    assert!(store.evidence().chain(true).is_err());
    assert!(
        store.evidence().chain(false).is_err(),
        "a marker that cannot be read"
    );
}

#[test]
fn a_head_written_before_segments_is_read_from_the_whole_first_segment() {
    let (_dir, store) = log_of(2);
    let head = store.evidence().head().unwrap().unwrap();
    let legacy = json!({"seq": head.seq, "hash": head.hash}).to_string();
    std::fs::write(store.layout().evidence_head(), legacy).unwrap();
    assert_eq!(store.evidence().append("test", record(3)).unwrap(), 3);
    assert_eq!(store.evidence().append("test", record(4)).unwrap(), 4);
    assert_eq!(lines(&store, 4).len(), 1);
    assert_eq!(store.evidence().entries().unwrap().len(), 4);
}
