//! The probe `stopline bench kill` summarizes (the bench crate, `stopline-bench`): from the
//! publication of a latch to the observed quiescence of a group of N processes, through the same
//! reaction loop `stopline run` uses (inotify on `latches/`, `load_view`, `Worker::enforce_with`,
//! the registration and two-phase evidence writes). It lives here because it drives the run's
//! own loop; it returns one raw sample, and every statistic is the bench crate's.
//!
//! Each iteration uses a throwaway control directory beside the home and its own group; both are
//! removed afterwards. A kill that is not confirmed fails the probe rather than being left out.
//! This module must never touch the real home.

use super::record::{Recorder, RunFacts};
use super::supervise::{Progress, Supervision};
use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stopline_control::config::Config;
use stopline_control::context::Context;
use stopline_core::{Name, Refusal, RefusalCode, Subject};
use stopline_store::Store;
use stopline_supervisor::{CommandSpec, Containment, StdioMode, Worker, WorkerSpec};

fn failed(why: impl std::fmt::Display) -> Refusal {
    Refusal::new(RefusalCode::ControlIo, format!("bench kill: {why}"))
}

/// One iteration's figures, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillSample {
    /// Latch published (contained) → quiescence observed.
    pub total: u64,
    /// Latch published → kill issued (0 when the supervisor saw the entry before its dirsync).
    pub reaction: u64,
    /// Kill issued → quiescence observed.
    pub kill: u64,
    /// The engage call's start → quiescence observed.
    pub from_call: u64,
}

fn micros_between(from: DateTime<Utc>, to: Option<DateTime<Utc>>) -> Result<u64, Refusal> {
    let to = to.ok_or_else(|| failed("a phase was not observed"))?;
    Ok(u64::try_from((to - from).num_microseconds().unwrap_or(0)).unwrap_or(0))
}

/// One iteration of a group of `n` processes, in its own throwaway home beside `home`.
pub fn sample(home: &Path, n: usize, iteration: usize) -> Result<KillSample, Refusal> {
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

fn measure(ctx: &Context, n: usize, iteration: usize) -> Result<KillSample, Refusal> {
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
        labels: Vec::new(),
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
    Ok(KillSample {
        total: micros_between(published, status.quiescent_observed_at)?,
        reaction: micros_between(published, Some(issued))?,
        kill: micros_between(issued, status.quiescent_observed_at)?,
        from_call: micros_between(called, status.quiescent_observed_at)?,
    })
}
