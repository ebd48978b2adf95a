//! Fuzz the latch reader: any bytes under any name must read as a latch, never panic, and
//! anything that is not a well-formed latch must read as a machine emergency.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stopline_core::{ActiveLatch, Level, Scope};

fuzz_target!(|data: &[u8]| {
    let latch = ActiveLatch::from_entry("latch_fuzz.json", Ok(data));
    if latch.problem.is_some() {
        assert_eq!((latch.scope, latch.level), (Scope::Machine, Level::Emergency));
    }
});
