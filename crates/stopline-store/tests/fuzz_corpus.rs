//! Replays the epoch-snapshot fuzz corpus on stable: never panic, and only the empty epoch is
//! confirmed without a WAL record.

use std::path::PathBuf;
use stopline_core::wal::WalLog;

#[test]
fn epoch_corpus_confirms_only_the_empty_epoch_without_a_wal() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/epoch");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let bytes = std::fs::read(entry.path()).unwrap();
        if let Ok(map) = stopline_store::epoch::confirm(Some(&bytes), &WalLog::default()) {
            assert_eq!(map.seq, 0, "{:?}", entry.file_name());
        }
        seen += 1;
    }
    assert!(seen > 0);
}
