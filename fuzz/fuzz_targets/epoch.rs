//! Fuzz the epoch snapshot confirmation against an empty WAL: never panic; only the empty
//! epoch may be confirmed without a WAL record.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stopline_core::wal::WalLog;

fuzz_target!(|data: &[u8]| {
    if let Ok(map) = stopline_store::epoch::confirm(Some(data), &WalLog::default()) {
        assert_eq!(map.seq, 0);
    }
});
