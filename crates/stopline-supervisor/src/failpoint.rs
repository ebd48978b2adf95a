//! Named failpoints of the supervisor, for fault-injection tests: the store's
//! `STOPLINE_FAILPOINTS="name=action;…"` (see `stopline_store::failpoint`), read by this crate
//! too, which does not depend on the store; both parse it with `stopline_core::failpoints`.
//! Actions: `error` (an I/O error) and `emfile` (the error `inotify_init1` gives when the user's
//! `max_user_instances` is used up).
//!
//! Compiled only with the `failpoints` feature; without it `hit` is an inlined `Ok(())`. A
//! failpoint must never change behaviour when it is not armed.

use std::io;

/// Reach the failpoint `name`.
#[cfg(feature = "failpoints")]
pub fn hit(name: &str) -> io::Result<()> {
    use std::sync::OnceLock;
    static ARMED: OnceLock<Vec<(String, String)>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        stopline_core::failpoints::parse(&std::env::var("STOPLINE_FAILPOINTS").unwrap_or_default())
    });
    match armed
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, a)| a.as_str())
    {
        Some("error") => Err(io::Error::other(format!("failpoint {name}"))),
        Some("emfile") => Err(io::Error::from_raw_os_error(
            rustix::io::Errno::MFILE.raw_os_error(),
        )),
        _ => Ok(()),
    }
}

/// Reach the failpoint `name` (disabled build: always `Ok`).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &str) -> io::Result<()> {
    Ok(())
}
