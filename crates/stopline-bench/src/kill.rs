//! `stopline bench kill`: from the publication of a latch to the observed quiescence of a group
//! of N processes, through the same reaction loop `stopline run` uses
//! (`stopline_run::kill_probe`), beside the bare `cgroup.kill` → `populated 0` time of the same
//! group size (`stopline_supervisor::kill_samples`), for N = 10, 100 and 500. Figures are
//! reported, never asserted; a kill that is not confirmed fails the bench rather than being left
//! out.

use crate::stats::{quantile, Spread};
use serde::{Deserialize, Serialize};
use std::path::Path;
use stopline_core::{Refusal, RefusalCode};

/// The group sizes measured.
pub const SIZES: [usize; 3] = [10, 100, 500];
/// At most this many iterations per size (each starts N processes).
pub const MAX_ITERATIONS: usize = 30;

fn failed(why: impl std::fmt::Display) -> Refusal {
    Refusal::new(RefusalCode::ControlIo, format!("bench kill: {why}"))
}

/// The report: one [`KillRun`] per size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillReport {
    /// Per group size, smallest first.
    pub runs: Vec<KillRun>,
}

/// The figures of one group size, in µs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillRun {
    /// Sleeping processes per group (plus one shell).
    pub n: usize,
    /// Kills timed on each path.
    pub iterations: usize,
    /// Always `cgroup2`.
    pub method: String,
    /// Latch published (contained) → quiescence observed: median.
    pub latch_to_quiescent_p50_us: u64,
    /// … 99th percentile.
    pub latch_to_quiescent_p99_us: u64,
    /// … slowest.
    pub latch_to_quiescent_max_us: u64,
    /// Latch published → kill issued: median.
    pub latch_to_kill_issued_p50_us: u64,
    /// … 99th percentile.
    pub latch_to_kill_issued_p99_us: u64,
    /// Kill issued → quiescence observed: median.
    pub kill_issued_to_quiescent_p50_us: u64,
    /// … 99th percentile.
    pub kill_issued_to_quiescent_p99_us: u64,
    /// The engage call's start → quiescence observed: median.
    pub engage_call_to_quiescent_p50_us: u64,
    /// … 99th percentile.
    pub engage_call_to_quiescent_p99_us: u64,
    /// The bare `cgroup.kill` → `populated 0`: median.
    pub bare_cgroup_kill_p50_us: u64,
    /// … 99th percentile.
    pub bare_cgroup_kill_p99_us: u64,
    /// `cgroup.kill` re-issues of the bare kills (normally 0).
    pub bare_cgroup_kill_retries: u32,
    /// Latch → quiescent over the bare kill, at the median.
    pub ratio_latch_to_quiescent_over_bare_kill_p50: f64,
}

/// Run the kill bench for every size in [`SIZES`], in throwaway homes beside `home`.
pub fn kill(home: &Path, iterations: usize) -> Result<KillReport, Refusal> {
    let iterations = iterations.clamp(1, MAX_ITERATIONS);
    let runs = SIZES
        .iter()
        .map(|&n| kill_size(home, n, iterations))
        .collect::<Result<_, _>>()?;
    Ok(KillReport { runs })
}

fn kill_size(home: &Path, n: usize, iterations: usize) -> Result<KillRun, Refusal> {
    let mut bare = stopline_supervisor::kill_samples(n, iterations).map_err(failed)?;
    let (mut total, mut reaction, mut kill, mut from_call) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for iteration in 0..iterations {
        let sample = stopline_run::kill_probe::sample(home, n, iteration)?;
        total.push(sample.total);
        reaction.push(sample.reaction);
        kill.push(sample.kill);
        from_call.push(sample.from_call);
    }
    let total = Spread::of(&mut total);
    let reaction = Spread::of(&mut reaction);
    let kill = Spread::of(&mut kill);
    let from_call = Spread::of(&mut from_call);
    bare.samples_us.sort_unstable();
    let (bare50, bare99) = (
        quantile(&bare.samples_us, 0.5),
        quantile(&bare.samples_us, 0.99),
    );
    Ok(KillRun {
        n,
        iterations,
        method: "cgroup2".into(),
        latch_to_quiescent_p50_us: total.p50,
        latch_to_quiescent_p99_us: total.p99,
        latch_to_quiescent_max_us: total.max,
        latch_to_kill_issued_p50_us: reaction.p50,
        latch_to_kill_issued_p99_us: reaction.p99,
        kill_issued_to_quiescent_p50_us: kill.p50,
        kill_issued_to_quiescent_p99_us: kill.p99,
        engage_call_to_quiescent_p50_us: from_call.p50,
        engage_call_to_quiescent_p99_us: from_call.p99,
        bare_cgroup_kill_p50_us: bare50,
        bare_cgroup_kill_p99_us: bare99,
        bare_cgroup_kill_retries: bare.retries,
        ratio_latch_to_quiescent_over_bare_kill_p50: total.p50 as f64 / bare50.max(1) as f64,
    })
}
