//! Fuzz the WAL verifier: never panic; a verified log re-verifies identically, and every prefix
//! that ends on a line boundary verifies too. Because raw mutations rarely get past the hash
//! chain, the same input is also read as record bodies (one JSON object a line) and chained with
//! the real builders, `wal::record_line` for a WAL record's kind (through its type) and
//! `wal::next_line` for any other: what the builders write, the verifier must accept, entry for
//! entry, and the ledger and epoch queries must answer on it. Fields a record's type refuses are
//! left out (the verifier refuses such a line: `crates/stopline-core/tests/fuzz_corpus.rs`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use stopline_core::wal::{next_line, record_line, verify};
use stopline_core::wal_record::{self, WalRecord};

fuzz_target!(|data: &[u8]| {
    if let Ok(log) = verify(data) {
        let _ = log.uncleared_latches();
        let _ = log.last_epoch_advance();
        if let Some(end) = data[..data.len().saturating_sub(1)]
            .iter()
            .rposition(|&b| b == b'\n')
        {
            assert!(verify(&data[..=end]).is_ok());
        }
    }
    let mut built = Vec::new();
    let mut kinds = Vec::new();
    for line in data.split(|&b| b == b'\n').take(64) {
        let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(line) else {
            continue;
        };
        let kind = fields
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("fuzz")
            .to_string();
        let ts = fields
            .get("ts")
            .and_then(|t| t.as_str())
            .unwrap_or("t")
            .to_string();
        let log = verify(&built).expect("the builder's own log verifies");
        let (seq, bytes) = if WalRecord::KINDS.contains(&kind.as_str()) {
            let mut typed = fields;
            typed.insert("kind".into(), kind.clone().into());
            match wal_record::parse_map(&typed) {
                Ok(Some(record)) => record_line(log.last(), &ts, &record),
                _ => continue,
            }
        } else {
            next_line(log.last(), &kind, &ts, fields)
        };
        assert_eq!(seq as usize, kinds.len() + 1);
        built.extend_from_slice(&bytes);
        built.push(b'\n');
        kinds.push(kind);
    }
    let log = verify(&built).expect("the builder's own log verifies");
    let seen: Vec<&str> = log.entries.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(seen, kinds.iter().map(String::as_str).collect::<Vec<_>>());
    let _ = log.uncleared_latches();
    let _ = log.last_epoch_advance();
    let _ = log.plan_applied("plan_x");
});
