//! The operator's own stop of a supervised run: `SIGINT` (Ctrl-C), `SIGTERM` and `SIGHUP` (the
//! terminal went away) sent to the supervisor.
//!
//! The agent runs in a session of its own, so a terminal's signal reaches the supervisor and
//! never the agent. Left at their default disposition these signals would end the supervisor and
//! leave the agent running, unsupervised, under its uid. So the supervisor catches them: the
//! handler only records the signal ([`caught`]), and the reaction loop kills the agent's group,
//! waits for quiescence and ends the run as stopped by the operator. A second signal changes
//! nothing: the kill that is under way is never skipped.

use std::sync::atomic::{AtomicI32, Ordering};

/// The first stop signal caught (0: none).
static CAUGHT: AtomicI32 = AtomicI32::new(0);

/// The signals that stop a run.
pub const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

extern "C" fn record(signal: libc::c_int) {
    // Async-signal-safe: one atomic compare-exchange, nothing else.
    let _ = CAUGHT.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst);
}

/// Catch [`STOP_SIGNALS`] in the calling process from now on (they no longer end it). The
/// agents started later get the default dispositions back at exec (a caught signal's handler
/// does not survive exec).
pub fn catch_stop_signals() {
    for signal in STOP_SIGNALS {
        // SAFETY: a zeroed `sigaction` is a valid value; the handler is an `extern "C"` function
        // that only touches an atomic, which is async-signal-safe; `sigaction` reads the struct
        // for the duration of the call only.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = record as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The first stop signal caught since [`catch_stop_signals`], if any.
pub fn caught() -> Option<i32> {
    match CAUGHT.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// The name of a stop signal (`SIGINT`, …).
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caught_signal_is_recorded_and_the_first_one_kept() {
        catch_stop_signals();
        // SAFETY: `raise` sends a signal to this thread; the handler installed above records it.
        unsafe { libc::raise(libc::SIGHUP) };
        assert_eq!(caught(), Some(libc::SIGHUP));
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGTERM) };
        assert_eq!(
            caught(),
            Some(libc::SIGHUP),
            "the first signal is the one kept"
        );
        assert_eq!(signal_name(libc::SIGHUP), "SIGHUP");
    }
}
