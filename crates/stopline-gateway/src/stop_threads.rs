//! The threads a stop runs on — the view watcher, which swaps a latched view in and wakes the
//! calls it concerns, and the acknowledgement threads, which read the control state an engage
//! waits on — run above the request load when the process may raise them.
//!
//! They are OS threads so that request load cannot starve them, but on two cores the kernel
//! shared the CPU evenly between them and every busy runtime worker: under a drill's load the
//! acknowledgement's whole read of the control state took 8–14 ms of wall clock for well under
//! one of CPU. A thread that calls [`raise`] runs at nice [`STOP_NICE`] (Linux applies
//! it to the calling thread only, and threads it starts inherit it — the bounded reads'). A
//! process without the privilege (`CAP_SYS_NICE`) keeps its own priority and says so once.

use std::sync::atomic::{AtomicBool, Ordering};

/// The nice value of the stop's threads.
pub const STOP_NICE: i32 = -10;

/// Raise the calling thread to [`STOP_NICE`], when the process may.
pub fn raise() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if let Err(error) = rustix::process::setpriority_process(None, STOP_NICE) {
        if !SAID.swap(true, Ordering::SeqCst) {
            tracing::info!(%error, "the stop's threads run at the process's priority (raising them needs CAP_SYS_NICE)");
        }
    }
}
