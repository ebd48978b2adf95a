//! The store's other inputs besides bytes: the clock, fresh ids and the process id.
//!
//! Behind a trait so the model checker can replay a schedule deterministically.

use chrono::{DateTime, SecondsFormat, Utc};
use rand::RngCore;

/// Time, ids and pid for records.
pub trait Env: Send + Sync {
    /// Now, in Unix milliseconds.
    fn now_ms(&self) -> i64;
    /// A fresh random hex id of `bytes` bytes.
    fn random_hex(&self, bytes: usize) -> String;
    /// This process's id.
    fn pid(&self) -> u32;
    /// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), to tell a live writer
    /// of a journal from a dead one whose pid was reused; `None` when no such process runs.
    fn process_start_time(&self, pid: u32) -> Option<u64> {
        process_start_time(pid)
    }
}

/// The start time of `pid` (field 22 of `/proc/<pid>/stat`), to tell a live writer from a reused pid.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// `t` in whole milliseconds since the Unix epoch, rounded down (as chrono's
/// `timestamp_millis`), without building a calendar date and time first: the gateway reads the
/// clock several times a call, and `Utc::now().timestamp_millis()` cost about four times the
/// instructions.
fn epoch_ms(t: std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration().as_nanos().div_ceil(1_000_000);
            i64::try_from(before).map_or(i64::MIN, |ms| -ms)
        }
    }
}

/// The real clock, OS randomness and pid. In a `failpoints` build the clock is shifted by
/// `STOPLINE_TEST_CLOCK_OFFSET_MS` (see [`crate::failpoint`]); otherwise it is the system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEnv;

impl Env for SystemEnv {
    fn now_ms(&self) -> i64 {
        epoch_ms(std::time::SystemTime::now()) + crate::failpoint::clock_offset_ms()
    }
    fn random_hex(&self, bytes: usize) -> String {
        let mut buf = vec![0u8; bytes];
        rand::thread_rng().fill_bytes(&mut buf);
        hex::encode(buf)
    }
    fn pid(&self) -> u32 {
        std::process::id()
    }
}

/// The real clock and randomness with the pid of a process that does not run (no start time):
/// what it writes reads as the records of a writer that has gone, whose dispatched calls without
/// an outcome are in doubt. The gateway's history benchmark writes earlier gateways' journals
/// with it; tests write another process's records with it.
#[derive(Debug, Clone, Copy)]
pub struct GoneProcess(pub u32);

impl Env for GoneProcess {
    fn now_ms(&self) -> i64 {
        SystemEnv.now_ms()
    }
    fn random_hex(&self, bytes: usize) -> String {
        SystemEnv.random_hex(bytes)
    }
    fn pid(&self) -> u32 {
        self.0
    }
    fn process_start_time(&self, _pid: u32) -> Option<u64> {
        None
    }
}

/// RFC 3339 with milliseconds, UTC (`2026-10-31T20:10:00.000Z`).
pub fn rfc3339(unix_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Parse RFC 3339 into Unix milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// A build without `failpoints` (every release) never shifts its clock, whatever the environment
/// says. (Nothing else in such a build reads the variable, so setting it here cannot disturb
/// another test.)
#[cfg(all(test, not(feature = "failpoints")))]
mod tests {
    use super::*;

    #[test]
    fn the_test_clock_offset_is_ignored_without_failpoints() {
        std::env::set_var("STOPLINE_TEST_CLOCK_OFFSET_MS", "3600000");
        let skew = SystemEnv.now_ms() - Utc::now().timestamp_millis();
        assert!(skew.abs() < 600_000, "the clock moved by {skew} ms");
    }
}

#[cfg(test)]
mod clock {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    /// The clock reads what chrono's conversion read, rounding down either side of the epoch.
    #[test]
    fn epoch_ms_is_chronos_timestamp_millis() {
        let times = [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::from_nanos(1),
            UNIX_EPOCH + Duration::from_nanos(999_999),
            UNIX_EPOCH + Duration::from_millis(1_765_000_000_123) + Duration::from_nanos(456_789),
            UNIX_EPOCH - Duration::from_nanos(1),
            UNIX_EPOCH - Duration::from_millis(1),
            UNIX_EPOCH - Duration::from_nanos(1_000_001),
            SystemTime::now(),
        ];
        for t in times {
            let chrono = chrono::DateTime::<chrono::Utc>::from(t).timestamp_millis();
            assert_eq!(super::epoch_ms(t), chrono, "{t:?}");
        }
    }
}
