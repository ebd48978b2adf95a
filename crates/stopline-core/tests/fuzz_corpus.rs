//! Replays the fuzz seed corpora of the latch reader and the WAL verifier on stable, with the
//! same assertions as the fuzz targets, so CI exercises them without libFuzzer.

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

#[test]
fn wal_corpus_never_panics_and_prefixes_verify() {
    for (_, bytes) in corpus("wal") {
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
