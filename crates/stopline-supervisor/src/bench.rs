//! `stopline bench kill`: how long from `cgroup.kill` to a fresh observation of `populated 0`
//! for a group of N sleeping processes.
//!
//! Each iteration makes its own group, starts one `sh` that forks N `sleep` processes into it,
//! waits until all N+1 are listed in `cgroup.procs`, then times [`Group::kill_until_quiescent`]
//! (the clock starts just before the `cgroup.kill` write and stops at the read that shows
//! `populated 0`). The group is removed afterwards. A kill that is not confirmed fails the bench:
//! a figure that leaves out the slow cases would be a lie. This module must never signal a
//! process outside the groups it created.

use crate::cgroup::{CgroupError, Group, Method};
use crate::hierarchy::Hierarchy;
use crate::spawn::{spawn, CommandSpec, SpawnError, SpawnOptions, StdioMode};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How long the N processes may take to appear in the group.
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one kill may take before the bench fails.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the kill bench.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A cgroup operation failed (no cgroup2 mount included).
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    /// The process tree could not be started.
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    /// The N processes did not all appear in the group in time.
    #[error("only {seen} of {expected} processes appeared in the group within {SETUP_TIMEOUT:?}")]
    Setup {
        /// Processes expected (N sleeps and their shell).
        expected: usize,
        /// Processes seen.
        seen: usize,
    },
    /// A kill was not confirmed by `populated 0` in time.
    #[error("iteration {iteration}: populated 0 not observed within {KILL_TIMEOUT:?}")]
    Unconfirmed {
        /// Which iteration.
        iteration: usize,
    },
    /// Arguments out of range.
    #[error("n and iterations must both be at least 1")]
    Arguments,
}

/// The figures of one kill bench (field names follow the `*_p50_*`, `*_p99_*` convention).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillBench {
    /// Always `cgroup2`.
    pub method: Method,
    /// Sleeping processes per group (plus one shell).
    pub n: usize,
    /// Kills timed.
    pub iterations: usize,
    /// Median microseconds from the `cgroup.kill` write to the read of `populated 0`.
    pub kill_p50_us: u64,
    /// 99th percentile (nearest rank) of the same.
    pub kill_p99_us: u64,
    /// Fastest.
    pub kill_min_us: u64,
    /// Slowest.
    pub kill_max_us: u64,
    /// Mean.
    pub kill_mean_us: u64,
    /// `cgroup.kill` re-issues across all iterations (normally 0).
    pub retries: u32,
}

/// Time `iterations` kills of a group of `n` sleeping processes.
pub fn bench_kill(n: usize, iterations: usize) -> Result<KillBench, BenchError> {
    if n == 0 || iterations == 0 {
        return Err(BenchError::Arguments);
    }
    let hierarchy = Hierarchy::discover()?;
    let mut samples = Vec::with_capacity(iterations);
    let mut retries = 0u32;
    for iteration in 0..iterations {
        let (elapsed_us, iteration_retries) = one_kill(&hierarchy, n, iteration)?;
        samples.push(elapsed_us);
        retries += iteration_retries;
    }
    samples.sort_unstable();
    let sum: u64 = samples.iter().sum();
    Ok(KillBench {
        method: Method::Cgroup2,
        n,
        iterations,
        kill_p50_us: percentile(&samples, 50),
        kill_p99_us: percentile(&samples, 99),
        kill_min_us: samples[0],
        kill_max_us: samples[samples.len() - 1],
        kill_mean_us: sum / samples.len() as u64,
        retries,
    })
}

fn one_kill(hierarchy: &Hierarchy, n: usize, iteration: usize) -> Result<(u64, u32), BenchError> {
    let name = format!(
        "bench-{}-{}-{}",
        std::process::id(),
        iteration,
        chrono::Utc::now().timestamp_nanos_opt().unwrap_or_default()
    );
    let group = Group::create(hierarchy, &name)?;
    let result = start_and_kill(&group, n, iteration);
    // Whatever happened, leave nothing behind: kill what is left and remove the group.
    if result.is_err() {
        let _ = group.kill_until_quiescent(KILL_TIMEOUT);
    }
    let _ = group.remove();
    result
}

fn start_and_kill(group: &Group, n: usize, iteration: usize) -> Result<(u64, u32), BenchError> {
    let script = format!("i=0; while [ $i -lt {n} ]; do sleep 1000 & i=$((i+1)); done; wait");
    let mut spec = CommandSpec::new("/bin/sh", ["-c", script.as_str()])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    spec.stdin = StdioMode::Null;
    spec.stdout = StdioMode::Null;
    let options = SpawnOptions {
        group: Some(group),
        ..SpawnOptions::default()
    };
    let mut spawned = spawn(&spec, &options)?;
    let expected = n + 1;
    let started = Instant::now();
    let mut seen = 0;
    while started.elapsed() < SETUP_TIMEOUT {
        seen = group.pids()?.len();
        if seen >= expected {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if seen < expected {
        let _ = group.kill_until_quiescent(KILL_TIMEOUT);
        let _ = spawned.child.wait();
        return Err(BenchError::Setup { expected, seen });
    }
    let report = group.kill_until_quiescent(KILL_TIMEOUT)?;
    let _ = spawned.child.wait();
    match report.elapsed_us {
        Some(elapsed) => Ok((elapsed, report.retries)),
        None => Err(BenchError::Unconfirmed { iteration }),
    }
}

/// The `pct`th percentile of sorted samples ([`stopline_bench::quantile`], nearest rank), 0
/// when there are none.
fn percentile(sorted: &[u64], pct: usize) -> u64 {
    stopline_bench::quantile(sorted, pct as f64 / 100.0).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&samples, 50), 50);
        assert_eq!(percentile(&samples, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[1, 2, 3], 50), 2);
    }
}
