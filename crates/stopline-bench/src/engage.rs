//! Benchmarks measured side by side in one run: time to contained against a bare fsync'd file
//! create (docs/reference.md §7 b), the engage receipt with and without a stopped reader holding the WAL
//! lock (docs/reference.md §5), and one admission decision (c). Figures, never assertions.

use crate::stats::quantile;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, Instant};
use stopline_core::view::Authority;
use stopline_core::{ActiveLatch, ControlView, Level, Name, Scope, Subject, TaskClass};
use stopline_store::{EngageRequest, Store};

/// `bench engage`: every figure in microseconds, p50/p99/max over `iterations`, side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngageReport {
    /// Iterations of each measure.
    pub iterations: usize,
    /// A bare create, write, fsync and directory fsync of one file.
    pub bare_fsync_create_p50_us: f64,
    /// p99 of the same.
    pub bare_fsync_create_p99_us: f64,
    /// The slowest.
    pub bare_fsync_create_max_us: f64,
    /// Time to contained of a machine engage.
    pub contained_machine_p50_us: f64,
    /// p99 of the same.
    pub contained_machine_p99_us: f64,
    /// The slowest.
    pub contained_machine_max_us: f64,
    /// Time to contained of an agent engage.
    pub contained_agent_p50_us: f64,
    /// p99 of the same.
    pub contained_agent_p99_us: f64,
    /// The slowest.
    pub contained_agent_max_us: f64,
    /// The full receipt of an emergency agent engage (latch, WAL, epoch advance).
    pub engage_receipt_emergency_p50_us: f64,
    /// p99 of the same.
    pub engage_receipt_emergency_p99_us: f64,
    /// The slowest.
    pub engage_receipt_emergency_max_us: f64,
    /// Machine time to contained over the bare create, at p50.
    pub ratio_contained_machine_p50: f64,
    /// Agent time to contained over the bare create, at p50.
    pub ratio_contained_agent_p50: f64,
    /// The receipt with the WAL lock free.
    pub engage_receipt_unobstructed_p50_us: f64,
    /// p99 of the same.
    pub engage_receipt_unobstructed_p99_us: f64,
    /// The slowest.
    pub engage_receipt_unobstructed_max_us: f64,
    /// The receipt (`wal_deferred`) beside a reader frozen holding the WAL's shared lock.
    pub engage_receipt_frozen_reader_p50_us: f64,
    /// p99 of the same.
    pub engage_receipt_frozen_reader_p99_us: f64,
    /// The slowest.
    pub engage_receipt_frozen_reader_max_us: f64,
    /// Frozen over unobstructed, at p50.
    pub ratio_frozen_reader_p50: f64,
    /// Frozen over unobstructed, at p99.
    pub ratio_frozen_reader_p99: f64,
}

/// `bench admission`: one admission decision, in nanoseconds (batches of 1000 timed together).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmissionReport {
    /// Decisions taken.
    pub decisions: usize,
    /// How many allowed (all of them: the subject is covered by nothing).
    pub allowed: usize,
    /// p50 of one decision.
    pub decision_p50_ns: f64,
    /// p99.
    pub decision_p99_ns: f64,
    /// The slowest batch's mean.
    pub decision_max_ns: f64,
}

/// p50/p99/max of durations, in microseconds ([`quantile`]: nearest rank).
fn percentiles_us(samples: &mut [Duration]) -> (f64, f64, f64) {
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    (
        us(quantile(samples, 0.5)),
        us(quantile(samples, 0.99)),
        us(quantile(samples, 1.0)),
    )
}

// Benchmark scratch files beside the home: the bare-filesystem baseline engage is compared to.
#[allow(clippy::disallowed_methods)]
fn bare_create(dir: &Path, i: usize, bytes: &[u8]) -> std::io::Result<Duration> {
    let started = Instant::now();
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join(format!("{i}.json")))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(started.elapsed())
}

/// Time to contained (machine and agent scope) beside a bare create+write+fsync+dir-fsync of one
/// file, interleaved A B A B in one run on the filesystem of `home`, plus the full receipt time of
/// an emergency engage (latch, WAL, epoch advance).
pub fn engage(home: &Path, iterations: usize) -> std::io::Result<EngageReport> {
    let parent = home.parent().unwrap_or(Path::new("/tmp"));
    std::fs::create_dir_all(parent)?;
    let scratch = parent.join(format!(".stopline-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(scratch.join("bare"))?;
    let store = Store::open(scratch.join("home"));
    let body = vec![b'x'; 330];
    let (mut bare, mut machine, mut agent, mut full) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let request = |scope: Scope, level: Level, i: usize| {
        EngageRequest::console(scope, level, &format!("bench-{i}"), "benchmark")
    };
    let fail = |e: stopline_store::StoreError| std::io::Error::other(e.to_string());
    for i in 0..iterations.max(1) {
        bare.push(bare_create(&scratch.join("bare"), i, &body)?);
        machine.push(
            store
                .engage(&request(Scope::Machine, Level::HaltAll, i))
                .map_err(fail)?
                .time_to_contained,
        );
        let name =
            Name::parse(&format!("bench-{i}")).map_err(|e| std::io::Error::other(e.message))?;
        agent.push(
            store
                .engage(&request(Scope::Agent(name.clone()), Level::HaltAll, i))
                .map_err(fail)?
                .time_to_contained,
        );
        let started = Instant::now();
        store
            .engage(&request(
                Scope::Agent(name),
                Level::Emergency,
                i + iterations,
            ))
            .map_err(fail)?;
        full.push(started.elapsed());
    }
    let (mut clear, mut obstructed) = receipts_beside_a_frozen_reader(&scratch, iterations)?;
    let _ = std::fs::remove_dir_all(&scratch);
    let (c50, c99, cmax) = percentiles_us(&mut clear);
    let (o50, o99, omax) = percentiles_us(&mut obstructed);
    let (b50, b99, bmax) = percentiles_us(&mut bare);
    let (m50, m99, mmax) = percentiles_us(&mut machine);
    let (a50, a99, amax) = percentiles_us(&mut agent);
    let (f50, f99, fmax) = percentiles_us(&mut full);
    Ok(EngageReport {
        iterations,
        bare_fsync_create_p50_us: b50,
        bare_fsync_create_p99_us: b99,
        bare_fsync_create_max_us: bmax,
        contained_machine_p50_us: m50,
        contained_machine_p99_us: m99,
        contained_machine_max_us: mmax,
        contained_agent_p50_us: a50,
        contained_agent_p99_us: a99,
        contained_agent_max_us: amax,
        engage_receipt_emergency_p50_us: f50,
        engage_receipt_emergency_p99_us: f99,
        engage_receipt_emergency_max_us: fmax,
        ratio_contained_machine_p50: m50 / b50,
        ratio_contained_agent_p50: a50 / b50,
        engage_receipt_unobstructed_p50_us: c50,
        engage_receipt_unobstructed_p99_us: c99,
        engage_receipt_unobstructed_max_us: cmax,
        engage_receipt_frozen_reader_p50_us: o50,
        engage_receipt_frozen_reader_p99_us: o99,
        engage_receipt_frozen_reader_max_us: omax,
        ratio_frozen_reader_p50: o50 / c50,
        ratio_frozen_reader_p99: o99 / c99,
    })
}

/// The receipt of an emergency agent engage in a home whose WAL lock is free, beside the same
/// engage in a home where a real process holds the WAL's shared lock and is stopped by SIGSTOP
/// (a gateway frozen in the middle of a read), interleaved A B A B. The obstructed engages answer
/// `wal_deferred`; the figure is how long that answer takes.
fn receipts_beside_a_frozen_reader(
    scratch: &Path,
    iterations: usize,
) -> std::io::Result<(Vec<Duration>, Vec<Duration>)> {
    let fail = |e: stopline_store::StoreError| std::io::Error::other(e.to_string());
    let clear = Store::open(scratch.join("clear"));
    let held = Store::open(scratch.join("held"));
    let request = |i: usize| -> std::io::Result<EngageRequest> {
        let agent =
            Name::parse(&format!("frozen-{i}")).map_err(|e| std::io::Error::other(e.message))?;
        Ok(EngageRequest::console(
            Scope::Agent(agent),
            Level::Emergency,
            &format!("bench-{i}"),
            "benchmark",
        ))
    };
    // Each home starts with a WAL, the one to be held.
    clear.engage(&request(usize::MAX / 2)?).map_err(fail)?;
    held.engage(&request(usize::MAX / 2)?).map_err(fail)?;
    let reader = stopline_supervisor::frozen::FrozenReader::hold(&held.layout().wal())?;
    let (mut unobstructed, mut obstructed) = (Vec::new(), Vec::new());
    for i in 0..iterations.max(1) {
        let started = Instant::now();
        clear.engage(&request(i)?).map_err(fail)?;
        unobstructed.push(started.elapsed());
        let started = Instant::now();
        let outcome = held.engage(&request(i)?).map_err(fail)?;
        obstructed.push(started.elapsed());
        if !outcome.wal_deferred {
            return Err(std::io::Error::other(
                "an engage beside the frozen reader was not deferred: the reader holds no lock",
            ));
        }
    }
    drop(reader);
    Ok((unobstructed, obstructed))
}

/// One admission decision against an in-memory view with a realistic handful of latches,
/// timed in batches of 1000 so the clock's own cost does not dominate.
pub fn admission(decisions: usize) -> AdmissionReport {
    let mut view = ControlView::empty();
    for i in 0..8 {
        view.latches.push(ActiveLatch {
            file: format!("latch_{i}.json"),
            scope: Scope::Agent(Name::parse(&format!("other-{i}")).expect("valid name")),
            level: Level::HaltAll,
            record: None,
            problem: None,
        });
    }
    view.latches.push(ActiveLatch {
        file: "latch_p.json".into(),
        scope: Scope::Project("/srv/elsewhere".into()),
        level: Level::Emergency,
        record: None,
        problem: None,
    });
    view.epoch = view
        .epoch
        .advanced(&Scope::Agent(Name::parse("other-0").expect("valid")))
        .expect("advance")
        .indexed();
    let subject = Subject::proven(
        vec![
            Name::parse("parent").expect("valid"),
            Name::parse("worker").expect("valid"),
        ],
        vec!["/srv/project/a".into()],
        vec![Name::parse("eval-1").expect("valid")],
    );
    let batch = 1000;
    let batches = (decisions / batch).max(10);
    let mut samples = Vec::with_capacity(batches);
    let mut allowed = 0usize;
    for _ in 0..batches {
        let started = Instant::now();
        for _ in 0..batch {
            let receipt = view.decide(
                std::hint::black_box(&subject),
                TaskClass::Noncritical,
                Some(Authority { issue_epoch: 1 }),
                Some("mcp:everything:echo"),
                0,
            );
            allowed += usize::from(receipt.code.is_none());
        }
        samples.push(started.elapsed() / batch as u32);
    }
    let (p50, p99, max) = percentiles_us(&mut samples);
    AdmissionReport {
        decisions: batches * batch,
        allowed,
        decision_p50_ns: p50 * 1000.0,
        decision_p99_ns: p99 * 1000.0,
        decision_max_ns: max * 1000.0,
    }
}
