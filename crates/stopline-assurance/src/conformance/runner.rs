//! Running the battery: select cases, run them on a few worker threads, bound each one.
//!
//! Each case runs on a thread of its own with a [`Guard`] holding its deadline and live
//! children. The worker that started it waits at most until the deadline (plus a short grace);
//! if the case has not answered by then, the guard kills every child the case registered and
//! the case fails as timed out — a case stuck anywhere (a child, a socket, a bug in the case)
//! therefore costs at most its deadline, and leaves no process behind.

use super::cases::{inventory, Case};
use super::process::Guard;
use super::report::{sha256_file, CaseResult, Report};
use super::sandbox::Sandbox;
use super::CaseError;
use std::collections::VecDeque;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How to run the battery.
#[derive(Debug, Clone)]
pub struct Options {
    /// Run only cases whose id contains this text.
    pub filter: Option<String>,
    /// Cases run at once (most of a case's time is spent waiting on its children).
    pub workers: usize,
    /// The binary under test (default: the running executable).
    pub binary: Option<PathBuf>,
    /// Print one line per finished case on stderr when it is a terminal.
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            filter: None,
            workers: 6,
            binary: None,
            progress: false,
        }
    }
}

/// Why the battery could not run at all (as opposed to a case that failed).
#[derive(Debug)]
#[non_exhaustive]
pub enum ConformanceError {
    /// The binary under test cannot be located or read.
    Binary(String),
}

impl std::fmt::Display for ConformanceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConformanceError::Binary(why) => write!(f, "the binary under test: {why}"),
        }
    }
}

impl std::error::Error for ConformanceError {}

/// Run the selected cases and report.
pub fn run(options: &Options) -> Result<Report, ConformanceError> {
    let started = Instant::now();
    let binary = match &options.binary {
        Some(path) => path.clone(),
        None => std::env::current_exe().map_err(|e| ConformanceError::Binary(e.to_string()))?,
    };
    // Hashing a large (debug) binary takes seconds: do it beside the cases, not before them. A
    // binary that changes meanwhile is caught by whoever compares hashes before and after.
    let hashing = {
        let binary = binary.clone();
        std::thread::spawn(move || sha256_file(&binary))
    };
    let cases: Vec<Case> = inventory()
        .into_iter()
        .filter(|c| options.filter.as_deref().is_none_or(|f| c.id.contains(f)))
        .collect();
    // Slow cases first, so the battery's wall time is close to its longest case.
    let mut order: Vec<usize> = (0..cases.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cases[i].budget));
    let queue = Mutex::new(order.into_iter().collect::<VecDeque<usize>>());
    let results: Mutex<Vec<Option<CaseResult>>> = Mutex::new(vec![None; cases.len()]);
    let progress = options.progress && std::io::stderr().is_terminal();
    std::thread::scope(|scope| {
        for _ in 0..options.workers.max(1) {
            scope.spawn(|| loop {
                let Some(index) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
                else {
                    break;
                };
                let result = run_case(&cases[index], &binary);
                if progress {
                    eprintln!(
                        "[{}] {} ({} ms)",
                        if result.pass { "PASS" } else { "FAIL" },
                        result.id,
                        result.elapsed.as_millis()
                    );
                }
                results.lock().unwrap_or_else(|p| p.into_inner())[index] = Some(result);
            });
        }
    });
    let binary_sha256 = hashing
        .join()
        .map_err(|_| ConformanceError::Binary("hashing panicked".into()))?
        .map_err(|e| ConformanceError::Binary(format!("{}: {e}", binary.display())))?;
    let cases = results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .flatten()
        .collect();
    Ok(Report {
        binary_sha256,
        binary: binary.display().to_string(),
        cases,
        elapsed: started.elapsed(),
    })
}

/// Run one case on its own thread, bounded by its budget.
fn run_case(case: &Case, binary: &std::path::Path) -> CaseResult {
    let started = Instant::now();
    let budget = Duration::from_secs(case.budget);
    let guard = Arc::new(Guard::new(started + budget));
    let (tx, rx) = mpsc::channel();
    let body = case.run;
    let (id, bin, case_guard) = (case.id, binary.to_path_buf(), Arc::clone(&guard));
    let spawned = std::thread::Builder::new()
        .name(format!("case-{id}"))
        .spawn(move || {
            let verdict = Sandbox::new(&bin, case_guard, id).and_then(|sandbox| body(&sandbox));
            let _ = tx.send(verdict);
        });
    let verdict = match spawned {
        Err(e) => Err(CaseError::Harness(format!("cannot start the case: {e}"))),
        Ok(_) => match rx.recv_timeout(budget + Duration::from_secs(3)) {
            Ok(verdict) => verdict,
            Err(RecvTimeoutError::Timeout) => Err(CaseError::TimedOut(format!(
                "no verdict within {} s",
                case.budget
            ))),
            Err(RecvTimeoutError::Disconnected) => {
                Err(CaseError::Harness("the case panicked".into()))
            }
        },
    };
    guard.cancel();
    let (pass, observation) = match verdict {
        Ok(observation) => (true, observation),
        Err(error) => (false, error.to_string()),
    };
    CaseResult {
        id: case.id,
        expectation: case.expectation,
        observation,
        pass,
        elapsed: started.elapsed(),
    }
}
