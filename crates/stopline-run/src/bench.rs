//! `stopline bench kill`: from the publication of a latch to the observed quiescence of a group
//! of N processes, through the same reaction loop `stopline run` uses (inotify on `latches/`,
//! `load_view`, `Worker::enforce_with`, the registration and two-phase evidence writes), beside
//! the bare `cgroup.kill` → `populated 0` time of `stopline_supervisor::bench_kill`.
//!
//! Each iteration uses a throwaway control directory beside the home and its own group; both are
//! removed afterwards. Figures are reported, never asserted; a kill that is not confirmed fails
//! the bench rather than being left out. This module must never touch the real home.

use super::record::{Recorder, RunFacts};
use super::supervise::{Progress, Supervision};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stopline_control::config::Config;
use stopline_control::context::Context;
use stopline_core::{Name, Refusal, RefusalCode, Subject};
use stopline_store::Store;
use stopline_supervisor::{CommandSpec, Containment, StdioMode, Worker, WorkerSpec};

/// The group sizes measured.
pub const SIZES: [usize; 3] = [10, 100, 500];
/// At most this many iterations per size (each starts N processes).
pub const MAX_ITERATIONS: usize = 30;

fn failed(why: impl std::fmt::Display) -> Refusal {
    Refusal::new(RefusalCode::ControlIo, format!("bench kill: {why}"))
}

/// Run the kill bench for every size in [`SIZES`].
pub fn kill(home: &Path, iterations: usize) -> Result<Value, Refusal> {
    let iterations = iterations.clamp(1, MAX_ITERATIONS);
    let mut runs = Vec::new();
    for n in SIZES {
        runs.push(kill_size(home, n, iterations)?);
    }
    Ok(json!({"runs": runs}))
}

fn kill_size(home: &Path, n: usize, iterations: usize) -> Result<Value, Refusal> {
    let bare = stopline_supervisor::bench_kill(n, iterations).map_err(failed)?;
    let (mut total, mut reaction, mut kill, mut from_call) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for iteration in 0..iterations {
        let sample = one(home, n, iteration)?;
        total.push(sample.total);
        reaction.push(sample.reaction);
        kill.push(sample.kill);
        from_call.push(sample.from_call);
    }
    let [t50, t99, tmax] = percentiles(&mut total);
    let [r50, r99, _] = percentiles(&mut reaction);
    let [k50, k99, _] = percentiles(&mut kill);
    let [c50, c99, _] = percentiles(&mut from_call);
    Ok(json!({
        "n": n,
        "iterations": iterations,
        "method": "cgroup2",
        "latch_to_quiescent_p50_us": t50,
        "latch_to_quiescent_p99_us": t99,
        "latch_to_quiescent_max_us": tmax,
        "latch_to_kill_issued_p50_us": r50,
        "latch_to_kill_issued_p99_us": r99,
        "kill_issued_to_quiescent_p50_us": k50,
        "kill_issued_to_quiescent_p99_us": k99,
        "engage_call_to_quiescent_p50_us": c50,
        "engage_call_to_quiescent_p99_us": c99,
        "bare_cgroup_kill_p50_us": bare.kill_p50_us,
        "bare_cgroup_kill_p99_us": bare.kill_p99_us,
        "bare_cgroup_kill_retries": bare.retries,
        "ratio_latch_to_quiescent_over_bare_kill_p50": t50 as f64 / bare.kill_p50_us.max(1) as f64,
    }))
}

/// p50, p99 and max ([`stopline_bench::quantile`], nearest rank).
fn percentiles(samples: &mut [u64]) -> [u64; 3] {
    samples.sort_unstable();
    let at = |pct: usize| stopline_bench::quantile(samples, pct as f64 / 100.0).unwrap_or(0);
    [at(50), at(99), samples[samples.len() - 1]]
}

/// One iteration's figures, in µs.
struct Sample {
    /// Latch published (contained) → quiescence observed.
    total: u64,
    /// Latch published → kill issued (0 when the supervisor saw the entry before its dirsync).
    reaction: u64,
    /// Kill issued → quiescence observed.
    kill: u64,
    /// The engage call's start → quiescence observed.
    from_call: u64,
}

fn micros_between(from: DateTime<Utc>, to: Option<DateTime<Utc>>) -> Result<u64, Refusal> {
    let to = to.ok_or_else(|| failed("a phase was not observed"))?;
    Ok(u64::try_from((to - from).num_microseconds().unwrap_or(0)).unwrap_or(0))
}

/// One iteration in its own throwaway home.
fn one(home: &Path, n: usize, iteration: usize) -> Result<Sample, Refusal> {
    let parent = home.parent().unwrap_or(Path::new("/tmp"));
    let scratch: PathBuf = parent.join(format!(
        ".stopline-bench-kill-{}-{n}-{iteration}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    let ctx = Context::new(Store::open(scratch.join("home")), Config::default());
    ctx.store
        .ensure_dirs(&[&ctx.store.layout().latches()])
        .map_err(|e| e.to_refusal())?;
    let result = measure(&ctx, n, iteration);
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn measure(ctx: &Context, n: usize, iteration: usize) -> Result<Sample, Refusal> {
    let run = format!("bench-{}-{n}-{iteration}", std::process::id());
    let script = format!("i=0; while [ $i -lt {n} ]; do sleep 1000 & i=$((i+1)); done; wait");
    let mut command = CommandSpec::new("/bin/sh", ["-c", script.as_str()])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin");
    command.stdin = StdioMode::Null;
    command.stdout = StdioMode::Null;
    let mut spec = WorkerSpec::new(&run, "bench", command);
    spec.containment = Containment::Cgroup2;
    spec.unconfined = true;
    let worker = Worker::start(spec, None).map_err(failed)?;
    let group = worker.group().cloned().ok_or_else(|| failed("no group"))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while group.pids().map_err(failed)?.len() < n + 1 {
        if Instant::now() > deadline {
            let _ = group.kill_until_quiescent(Duration::from_secs(5));
            return Err(failed(format!("{n} processes did not appear in the group")));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let subject = Subject::proven(
        vec![Name::parse("bench")?],
        Vec::new(),
        vec![Name::parse(&run)?],
    );
    let facts = RunFacts {
        project: String::new(),
        user: None,
        net: "host".into(),
        supervisor_pid: std::process::id(),
        // A throwaway home with no runs.live/ index: read whole, as a home before the index.
        live_entry: None,
    };
    let mut supervision = Supervision::new(
        ctx.clone(),
        subject,
        worker,
        Recorder::new(ctx.store.clone(), facts),
        None,
    );
    // The stop is pulled from another thread while this one sits in the reaction loop.
    let puller_ctx = ctx.clone();
    let scope = format!("run:{run}");
    let puller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        let caller = stopline_control::engage::Caller {
            token: None,
            by: Some("bench".into()),
            local: true,
        };
        let called = Utc::now();
        stopline_control::engage::engage(
            &puller_ctx,
            &caller,
            &scope,
            Some("emergency"),
            "bench kill",
        )
        .map(|receipt| {
            // Publication is the "contained" instant: the latch durable in latches/.
            let contained = i64::try_from(receipt.time_to_contained_us).unwrap_or(i64::MAX);
            (called, called + chrono::Duration::microseconds(contained))
        })
    });
    let progress = super::react(ctx, &mut supervision);
    let (called, published) = puller
        .join()
        .map_err(|_| failed("the engaging thread panicked"))??;
    let status = supervision.worker.status();
    let _ = supervision.worker.release();
    if !matches!(progress, Progress::Stopped(_)) {
        return Err(failed(format!(
            "the run ended without a stop: {progress:?}"
        )));
    }
    let issued = status
        .kill_issued_at
        .ok_or_else(|| failed("no kill issued"))?;
    Ok(Sample {
        total: micros_between(published, status.quiescent_observed_at)?,
        reaction: micros_between(published, Some(issued))?,
        kill: micros_between(issued, status.quiescent_observed_at)?,
        from_call: micros_between(called, status.quiescent_observed_at)?,
    })
}
