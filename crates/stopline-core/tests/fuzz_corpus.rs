//! Replays the fuzz seed corpora of the latch reader, the WAL verifier and the policy-card
//! validator on stable, with the same assertions as the fuzz targets, so CI exercises them
//! without libFuzzer.

use std::path::PathBuf;
use stopline_core::{ActiveLatch, Level, Scope};

fn corpus(name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "the {name} corpus is empty");
    files
}

#[test]
fn latch_corpus_reads_fail_closed() {
    for (name, bytes) in corpus("latch") {
        let latch = ActiveLatch::from_entry("latch_fuzz.json", Ok(&bytes));
        if latch.problem.is_some() {
            assert_eq!(
                (latch.scope, latch.level),
                (Scope::Machine, Level::Emergency),
                "{name}"
            );
        }
        if name.starts_with("valid-") {
            assert!(latch.problem.is_none(), "{name}: {:?}", latch.problem);
        }
    }
}

/// Chain `fields` as the product would: a WAL record's kind through its type (`None` when the
/// type refuses the fields, after checking the verifier refuses the same line built untyped),
/// any other kind (the evidence log's) as it is.
fn build_line(
    log: &stopline_core::wal::WalLog,
    kind: &str,
    ts: &str,
    fields: serde_json::Map<String, serde_json::Value>,
) -> Option<Vec<u8>> {
    use stopline_core::wal_record::{self, WalRecord};
    if !WalRecord::KINDS.contains(&kind) {
        return Some(stopline_core::wal::next_line(log.last(), kind, ts, fields).1);
    }
    let mut typed = fields.clone();
    typed.insert("kind".into(), kind.into());
    match wal_record::parse_map(&typed) {
        Ok(Some(record)) => Some(stopline_core::wal::record_line(log.last(), ts, &record).1),
        _ => {
            let (_, line) = stopline_core::wal::next_line(log.last(), kind, ts, fields);
            let mut whole = Vec::new();
            for entry in &log.entries {
                let mut bytes = serde_json::to_vec(&entry.body).unwrap();
                bytes.push(b'\n');
                whole.extend_from_slice(&bytes);
            }
            whole.extend_from_slice(&line);
            whole.push(b'\n');
            assert!(
                stopline_core::wal::verify(&whole).is_err(),
                "a {kind} line its type refuses must not verify"
            );
            None
        }
    }
}

#[test]
fn wal_corpus_never_panics_and_prefixes_verify() {
    for (name, bytes) in corpus("wal") {
        let mut built = Vec::new();
        let mut kinds = Vec::new();
        for line in bytes.split(|&b| b == b'\n').take(64) {
            let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice(line) else {
                continue;
            };
            let kind = fields
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("fuzz");
            let ts = fields.get("ts").and_then(|t| t.as_str()).unwrap_or("t");
            let (kind, ts) = (kind.to_string(), ts.to_string());
            let log = stopline_core::wal::verify(&built).expect(&name);
            let Some(line) = build_line(&log, &kind, &ts, fields) else {
                continue;
            };
            built.extend_from_slice(&line);
            built.push(b'\n');
            kinds.push(kind);
        }
        let log = stopline_core::wal::verify(&built).expect(&name);
        let seen: Vec<String> = log.entries.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(seen, kinds, "{name}: the builder's log reads back");
        let _ = log.uncleared_latches();

        if let Ok(log) = stopline_core::wal::verify(&bytes) {
            let _ = log.uncleared_latches();
            if let Some(end) = bytes[..bytes.len().saturating_sub(1)]
                .iter()
                .rposition(|&b| b == b'\n')
            {
                assert!(stopline_core::wal::verify(&bytes[..=end]).is_ok());
            }
        }
    }
}

#[test]
fn policy_card_corpus_refuses_or_accepts_a_usable_card() {
    use stopline_core::policy::{validate, HANDLE_LEVELS, STOP_CONDITION_KINDS};
    use stopline_core::{Name, RefusalCode};
    for (name, bytes) in corpus("policy_card") {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
            continue;
        };
        match validate(&value) {
            Err(refusal) => {
                assert_eq!(refusal.code, RefusalCode::PolicyCardIncomplete, "{name}");
                assert!(!name.starts_with("valid-"), "{name}: {}", refusal.message);
            }
            Ok(card) => {
                assert!(!name.starts_with("incomplete-"), "{name} was accepted");
                assert!(Name::parse(&card.run_id).is_ok(), "{name}");
                assert!(!card.stop_conditions.is_empty(), "{name}");
                assert!(
                    card.stop_conditions.iter().all(|c| c["kind"]
                        .as_str()
                        .is_some_and(|k| STOP_CONDITION_KINDS.contains(&k))),
                    "{name}"
                );
                assert!(
                    card.budgets
                        .values()
                        .flat_map(|b| b.values())
                        .all(|l| l.is_finite() && *l >= 0.0),
                    "{name}"
                );
                assert!(
                    card.stop_handle
                        .levels
                        .iter()
                        .all(|l| HANDLE_LEVELS.contains(&l.as_str())),
                    "{name}"
                );
                assert!(card.time_to_stop_target_ms > 0, "{name}");
                let again = serde_json::to_value(&card).unwrap();
                assert_eq!(validate(&again).ok(), Some(card), "{name}: not stable");
            }
        }
    }
}
