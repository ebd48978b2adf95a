//! Named failpoints at every durable step, for crash and fault-injection tests.
//!
//! Compiled only with the `failpoints` feature; without it `hit` is an inlined `Ok(())`.
//! `STOPLINE_FAILPOINTS="name=action;other=action"` arms them, where action is `crash`
//! (`std::process::abort`, no unwinding, no destructors — what a power cut looks like to the
//! process), `error` (an I/O error) or `enospc` (a full disk); `error_once` and `enospc_once`
//! fire only the first time the failpoint is reached in a process; `stop_if:PATH` makes the
//! process stop itself with SIGSTOP (as `kill -STOP` would) whenever it reaches the failpoint
//! while `PATH` exists — a test parks a reader exactly where it holds a lock, then resumes it
//! with SIGCONT after removing `PATH`; `hold_if:PATH` holds only the thread that reaches it
//! while `PATH` exists (at most 60 s), the rest of the process running on — a test keeps one
//! thread (a watcher) from acting while others answer. `STOPLINE_FAILPOINT_TRACE=FILE`
//! appends every name reached, so a crash test can enumerate the steps of a command.
//! A failpoint must never change behaviour when it is not armed.
//!
//! One failpoint is not a step and is never traced: `fs.read=delay_if:MS:PATH` makes every
//! [`crate::fs::RealFs`] read of exactly `PATH` take `MS` milliseconds longer, inside the read's
//! bound ([`read_delay`]) — a test's slow disk for one entry (docs/reference.md §5). Reads happen on
//! every gate's view, so tracing them would bury the durable steps a crash test compares.
//!
//! The same builds honour `STOPLINE_TEST_CLOCK_OFFSET_MS=N`: the store's clock
//! ([`crate::env::SystemEnv`]) runs `N` milliseconds ahead (or behind, when negative), so a
//! test sees a token expire or a drain window end without sleeping through it. A value that is
//! not a whole number of milliseconds panics rather than being read as no offset. A release
//! build has no such knob: without the feature the offset is an inlined `0`.

use std::io;

/// The failpoints `STOPLINE_FAILPOINTS` arms, read once: `(name, action)` pairs.
#[cfg(feature = "failpoints")]
fn armed() -> &'static [(String, String)] {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Vec<(String, String)>> = OnceLock::new();
    ARMED.get_or_init(|| {
        stopline_core::failpoints::parse(&std::env::var("STOPLINE_FAILPOINTS").unwrap_or_default())
    })
}

/// Where a read of `path` may be slowed (`fs.read=delay_if:MS:PATH`): sleeps `MS` ms when `path`
/// is `PATH`, else returns at once. Not a step: never traced, never an error. An action that
/// does not parse panics, so a test that meant to slow a read cannot pass without doing so.
#[cfg(feature = "failpoints")]
pub fn read_delay(path: &std::path::Path) {
    for (name, action) in armed() {
        if name != "fs.read" {
            continue;
        }
        let parsed = action
            .strip_prefix("delay_if:")
            .and_then(|rest| rest.split_once(':'))
            .and_then(|(ms, target)| Some((ms.parse::<u64>().ok()?, target)));
        let Some((ms, target)) = parsed else {
            panic!("fs.read={action:?}: expected delay_if:MS:PATH");
        };
        if path == std::path::Path::new(target) {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }
}

/// Where a read may be slowed (disabled build: nothing).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn read_delay(_path: &std::path::Path) {}

/// Reach the failpoint `name`.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static FIRED_ONCE: AtomicBool = AtomicBool::new(false);
    let armed = armed();
    if let Ok(trace) = std::env::var("STOPLINE_FAILPOINT_TRACE") {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(trace)
        {
            let _ = writeln!(file, "{name}");
        }
    }
    match armed
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| a.as_str())
    {
        Some("crash") => std::process::abort(),
        Some("error") => Err(io::Error::other(format!("failpoint {name}"))),
        Some("enospc") => Err(io::Error::from_raw_os_error(
            rustix::io::Errno::NOSPC.raw_os_error(),
        )),
        Some("error_once") if !FIRED_ONCE.swap(true, Ordering::SeqCst) => {
            Err(io::Error::other(format!("failpoint {name}")))
        }
        Some("enospc_once") if !FIRED_ONCE.swap(true, Ordering::SeqCst) => Err(
            io::Error::from_raw_os_error(rustix::io::Errno::NOSPC.raw_os_error()),
        ),
        Some(action) if action.starts_with("stop_if:") => {
            let park = std::path::Path::new(&action["stop_if:".len()..]);
            if park.exists() {
                let _ = rustix::process::kill_process(
                    rustix::process::getpid(),
                    rustix::process::Signal::STOP,
                );
                // The stop is process-directed and may be taken by another thread a moment
                // later: this thread stays here (holding whatever it holds) until the test
                // removes PATH, so the stop always lands at this point.
                while park.exists() {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
            Ok(())
        }
        Some(action) if action.starts_with("hold_if:") => {
            let hold = std::path::Path::new(&action["hold_if:".len()..]);
            let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while hold.exists() && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Reach the failpoint `name` (disabled build: always `Ok`).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) -> io::Result<()> {
    Ok(())
}

/// `STOPLINE_TEST_CLOCK_OFFSET_MS`, read once: the milliseconds the store's clock runs ahead.
#[cfg(feature = "failpoints")]
pub fn clock_offset_ms() -> i64 {
    use std::sync::OnceLock;
    static OFFSET: OnceLock<i64> = OnceLock::new();
    *OFFSET.get_or_init(|| match std::env::var("STOPLINE_TEST_CLOCK_OFFSET_MS") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            panic!("STOPLINE_TEST_CLOCK_OFFSET_MS={text:?} is not a whole number of milliseconds")
        }),
        Err(_) => 0,
    })
}

/// The clock offset (disabled build: always `0`, whatever the environment says).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn clock_offset_ms() -> i64 {
    0
}

/// `STOPLINE_TEST_HOOK_CONFIG`: the path the Claude Code hook reads its pinned configuration
/// from instead of `/etc/stopline/hook.toml`, so tests need not write `/etc`. Only a
/// `failpoints` build has this knob.
#[cfg(feature = "failpoints")]
pub fn hook_config_override() -> Option<std::path::PathBuf> {
    std::env::var_os("STOPLINE_TEST_HOOK_CONFIG")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
}

/// The hook's configuration path override (disabled build: never; a release build reads
/// `/etc/stopline/hook.toml` whatever the environment says).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hook_config_override() -> Option<std::path::PathBuf> {
    None
}
