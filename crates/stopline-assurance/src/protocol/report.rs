//! What the search of one scenario found: counts, obligations checked, counterexamples.

use crate::protocol::properties::Property;
use crate::protocol::scenario::Scenario;
use std::collections::BTreeMap;
use std::time::Duration;

/// A schedule that breaks a property, step by step.
#[derive(Debug, Clone)]
pub struct Counterexample {
    /// The scenario.
    pub scenario: String,
    /// What broke.
    pub detail: String,
    /// `P<n> <process>: <step> <path> = <result>` lines, then the crash and restart if any.
    pub trace: Vec<String>,
}

/// The result of exploring one scenario.
#[derive(Debug, Clone)]
pub struct ScenarioReport {
    /// Short name.
    pub name: String,
    /// What raced.
    pub title: String,
    /// The racing processes.
    pub processes: Vec<String>,
    /// Distinct states explored.
    pub states: u64,
    /// Steps taken (edges, including those into known states).
    pub transitions: u64,
    /// States where every process had returned.
    pub terminals: u64,
    /// Complete schedules covered (paths through the state graph).
    pub schedules: u128,
    /// Crash points: every explored state, crashed five ways. (After a step that changes no
    /// file, entry or returned fact, the five images are the previous state's, judged there.)
    pub crash_points: u64,
    /// Distinct (disk image, returned facts) pairs judged after a restart.
    pub crash_judgments: u64,
    /// Branches where one process was killed and the others ran on.
    pub kills: u64,
    /// Distinct disk images restarted.
    pub restarts: u64,
    /// Restarted images whose gates stayed closed (a fault even after repair).
    pub closed_after_restart: u64,
    /// Process replays run (distinct process histories).
    pub replays: u64,
    /// Longest schedule explored, in steps.
    pub max_depth: usize,
    /// Obligations checked, indexed by `Property as usize`.
    pub checked: [u64; crate::protocol::properties::COUNT],
    /// The first counterexample of each broken property.
    pub violations: BTreeMap<Property, Counterexample>,
    /// Violations found in all.
    pub violation_count: u64,
    /// An internal failure that stopped the search (nondeterminism, a broken assumption).
    pub broken: Option<String>,
    /// Wall time.
    pub elapsed: Duration,
}

impl ScenarioReport {
    /// An empty report for `scenario`.
    pub fn new(scenario: &Scenario) -> ScenarioReport {
        ScenarioReport {
            name: scenario.name.into(),
            title: scenario.title.into(),
            processes: scenario.procs.iter().map(|p| p.label()).collect(),
            states: 0,
            transitions: 0,
            terminals: 0,
            schedules: 0,
            crash_points: 0,
            crash_judgments: 0,
            kills: 0,
            restarts: 0,
            closed_after_restart: 0,
            replays: 0,
            max_depth: 0,
            checked: [0; crate::protocol::properties::COUNT],
            violations: BTreeMap::new(),
            violation_count: 0,
            broken: None,
            elapsed: Duration::ZERO,
        }
    }

    /// True when no docs/reference.md §11 property broke (findings do not count) and the search completed.
    pub fn ok(&self) -> bool {
        self.violations
            .keys()
            .all(|p| Property::FINDINGS.contains(p))
            && self.broken.is_none()
    }
}

/// Number of maximal paths from state 0 through the successor graph (a DAG: every step
/// lengthens some history), saturating.
pub(crate) fn count_paths(successors: &[Vec<usize>]) -> u128 {
    let mut paths: Vec<Option<u128>> = vec![None; successors.len()];
    let mut stack = vec![(0usize, false)];
    while let Some((node, expanded)) = stack.pop() {
        if paths[node].is_some() {
            continue;
        }
        if expanded {
            let total = if successors[node].is_empty() {
                1
            } else {
                successors[node]
                    .iter()
                    .fold(0u128, |acc, &s| acc.saturating_add(paths[s].unwrap_or(0)))
            };
            paths[node] = Some(total);
        } else {
            stack.push((node, true));
            stack.extend(
                successors[node]
                    .iter()
                    .filter(|&&s| paths[s].is_none())
                    .map(|&s| (s, false)),
            );
        }
    }
    paths[0].unwrap_or(0)
}
