//! The real protocol, explored exhaustively over the real store code (docs/reference.md §11, part 2).
//!
//! `fs_state` is the crash-simulating filesystem, `model_fs` the store's seams over it,
//! `oracle` the processes (real store calls replayed on threads), `visibility` the reduction,
//! `search` the exploration, `restart` the crash images and restart phase, `properties` and
//! `judge` the properties, `scenario` the races. See the crate docs for the argument.

pub mod crash_check;
pub mod fs_apply;
pub mod fs_image;
pub mod fs_state;
pub mod hash;
pub mod judge;
pub mod model_fs;
pub mod op;
pub mod oracle;
pub mod process;
pub mod properties;
pub mod report;
pub mod restart;
pub mod scenario;
pub mod search;
pub mod solo;
pub mod state;
pub mod step;
pub mod visibility;

pub use properties::Property;
pub use report::{Counterexample, ScenarioReport};
pub use scenario::Scenario;

/// How to run the protocol check.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Print progress to stderr while a scenario runs long.
    pub progress: bool,
    /// Do not kill single processes (faster; machine crashes are still injected everywhere).
    pub no_kills: bool,
    /// Only scenarios whose name contains this.
    pub only: Option<String>,
    /// A bug to plant in every process's store.
    #[cfg(feature = "planted-bugs")]
    pub planted: stopline_store::planted::PlantedBug,
}

/// The scenarios `options` selects.
pub fn scenarios(options: &Options) -> Vec<Scenario> {
    let mut all = scenario::standard();
    // Once a known issue of the store (an engage coalesced into a planned latch was cleared with
    // it); fixed in the store, and kept as a standard scenario so it stays fixed.
    all.push(scenario::coalesce_into_plan());
    // A checkpoint must carry the intents not yet applied.
    #[cfg(feature = "planted-bugs")]
    all.push(scenario::checkpoint_vs_plan(options.planted));
    #[cfg(not(feature = "planted-bugs"))]
    all.push(scenario::checkpoint_vs_plan(scenario::Planted));
    all.extend(scenario::operations());
    all.push(scenario::evidence_segments());
    all.push(scenario::spend_compaction());
    all.push(scenario::drill_index());
    all.push(scenario::drills_older_home());
    all.push(scenario::drills_split());
    all.push(scenario::spend_live_rewrite());
    all.push(scenario::live_runs());
    all.push(scenario::live_runs_older_home());
    all.push(scenario::plane_marks());
    all.push(scenario::label_vs_agent());
    all.push(scenario::epoch_fold());
    all.push(scenario::epoch_fold_floor());
    all.push(scenario::revoke_delegates());
    all.push(scenario::revoke_spares_others());
    all.push(scenario::revoke_acknowledged());
    all.push(scenario::staged_gate());
    all.retain(|s| {
        options
            .only
            .as_deref()
            .is_none_or(|only| s.name.contains(only))
    });
    all
}

/// Explore every selected scenario, on up to two threads (scenarios are independent; the
/// reports come back in scenario order).
pub fn check(options: &Options) -> Vec<ScenarioReport> {
    let all = scenarios(options);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let Some(scenario) = all.get(i) else { break };
                let report = search::Search::new(scenario, options).run();
                if options.progress && report.elapsed.as_secs() >= 2 {
                    eprintln!(
                        "model-check: {}: {} states, {} crash images, {:.1}s",
                        report.name,
                        report.states,
                        report.restarts,
                        report.elapsed.as_secs_f64()
                    );
                }
                done.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((i, report));
            });
        }
    });
    let mut done = done
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, report)| report).collect()
}
