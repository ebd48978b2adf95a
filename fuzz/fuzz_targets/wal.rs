//! Fuzz the WAL verifier: never panic; a verified log re-verifies identically, and every prefix
//! that ends on a line boundary verifies too.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(log) = stopline_core::wal::verify(data) {
        let _ = log.uncleared_latches();
        let _ = log.last_epoch_advance();
        if let Some(end) = data[..data.len().saturating_sub(1)].iter().rposition(|&b| b == b'\n') {
            assert!(stopline_core::wal::verify(&data[..=end]).is_ok());
        }
    }
});
