//! The paper's four-mode machine, checked exhaustively (docs/reference.md §11, part 1).
//!
//! Everything here calls `stopline_core::fourmode::transition` and `stopline_core::admit`, the
//! same functions the binary uses; nothing restates the table. Checks, in the paper's order:
//! completeness of the 20 pairs (13 accepted, 7 rejected, rejections leave the mode unchanged,
//! and exactly the rejections docs/reference.md §11 lists), P1 safe degradation, P2 emergency override, P3
//! emergency irreversibility, the 8 admission decisions with 4 distinct vectors, breadth-first
//! reachability from DISENGAGED, and the recovery edges L1 and L2.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use stopline_core::fourmode::{transition, Input};
use stopline_core::{admit, Decision, Mode, TaskClass};

/// One checked property of the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The paper's name.
    pub name: &'static str,
    /// What was established (or what failed).
    pub detail: String,
    /// Whether it holds.
    pub pass: bool,
}

/// The machine's figures and checks.
#[derive(Debug, Clone)]
pub struct FourModeReport {
    /// State/input pairs enumerated.
    pub pairs: usize,
    /// Pairs accepted.
    pub accepted: usize,
    /// Pairs rejected.
    pub rejected: usize,
    /// Modes reachable from DISENGAGED.
    pub reachable: usize,
    /// Largest shortest-path depth.
    pub max_depth: usize,
    /// The checks.
    pub checks: Vec<Check>,
}

impl FourModeReport {
    /// True when every check passed.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

fn check(name: &'static str, pass: bool, detail: String) -> Check {
    Check { name, detail, pass }
}

/// The shortest-path depth of every mode reachable from `start` using `inputs`.
fn reach(start: Mode, inputs: &[Input]) -> BTreeMap<Mode, usize> {
    let mut depth = BTreeMap::from([(start, 0)]);
    let mut queue = VecDeque::from([start]);
    while let Some(mode) = queue.pop_front() {
        for &input in inputs {
            if let Ok(next) = transition(mode, input) {
                if !depth.contains_key(&next) {
                    depth.insert(next, depth[&mode] + 1);
                    queue.push_back(next);
                }
            }
        }
    }
    depth
}

/// Run every check.
pub fn check_machine() -> FourModeReport {
    let pairs: Vec<(Mode, Input, Result<Mode, Mode>)> = Mode::ALL
        .iter()
        .flat_map(|&m| {
            Input::ALL
                .iter()
                .map(move |&i| (m, i, transition(m, i).map_err(|r| r.mode)))
        })
        .collect();
    let accepted = pairs.iter().filter(|p| p.2.is_ok()).count();
    let rejected: BTreeSet<(Mode, String)> = pairs
        .iter()
        .filter(|p| p.2.is_err())
        .map(|(m, i, _)| (*m, i.to_string()))
        .collect();
    let unchanged = pairs
        .iter()
        .all(|(m, _, r)| r.as_ref().err().is_none_or(|kept| kept == m));
    let mut expected_rejections: BTreeSet<(Mode, String)> = BTreeSet::new();
    expected_rejections.insert((Mode::Disengaged, Input::Disengage.to_string()));
    for m in [Mode::Disengaged, Mode::HaltNoncritical, Mode::HaltAll] {
        expected_rejections.insert((m, Input::HumanReset.to_string()));
    }
    for i in [
        Input::EngageHaltNoncritical,
        Input::EngageHaltAll,
        Input::Disengage,
    ] {
        expected_rejections.insert((Mode::Emergency, i.to_string()));
    }
    let mut checks = vec![check(
        "Transition completeness",
        pairs.len() == 20 && accepted == 13 && unchanged && rejected == expected_rejections,
        format!(
            "all {} (state, input) pairs defined: {accepted} accepted, {} rejected exactly as docs/reference.md §11 lists; rejected pairs leave the mode unchanged",
            pairs.len(),
            rejected.len()
        ),
    )];

    let vector = |m: Mode| {
        (
            admit(m, TaskClass::Critical),
            admit(m, TaskClass::Noncritical),
        )
    };
    let degraded: Vec<Mode> = Mode::ALL
        .into_iter()
        .filter(|&m| m != Mode::Disengaged && m != Mode::Emergency)
        .filter(|&m| vector(m).0 == Decision::Allow && vector(m).1 != Decision::Allow)
        .collect();
    checks.push(check(
        "P1 Safe Degradation",
        !degraded.is_empty(),
        format!(
            "{} allow critical tasks and hold or block non-critical tasks",
            degraded
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    ));
    let override_all = Mode::ALL
        .iter()
        .all(|&m| transition(m, Input::EngageEmergency) == Ok(Mode::Emergency));
    checks.push(check(
        "P2 Emergency Override",
        override_all,
        "EMERGENCY reachable from all states in <= 1 autonomous step".into(),
    ));
    // δ(EMERGENCY, σ) ∈ {EMERGENCY, ⊥} for every autonomous σ (⊥ keeps the mode).
    let no_exit = Input::ALL
        .iter()
        .filter(|i| i.is_autonomous())
        .all(|&i| transition(Mode::Emergency, i).unwrap_or_else(|r| r.mode) == Mode::Emergency);
    let reset = transition(Mode::Emergency, Input::HumanReset) == Ok(Mode::Disengaged);
    checks.push(check(
        "P3 Emergency Irreversibility",
        no_exit && reset,
        "no autonomous exit from EMERGENCY; human_reset reaches DISENGAGED".into(),
    ));
    let decisions = Mode::ALL.len() * TaskClass::ALL.len();
    let vectors: BTreeSet<String> = Mode::ALL
        .iter()
        .map(|&m| format!("{:?}", vector(m)))
        .collect();
    checks.push(check(
        "Admission regimes",
        decisions == 8 && vectors.len() == 4,
        format!(
            "{decisions} class/state decisions; {} distinct admission vectors",
            vectors.len()
        ),
    ));
    let depths = reach(Mode::Disengaged, &Input::ALL);
    let max_depth = depths.values().copied().max().unwrap_or(0);
    checks.push(check(
        "Reachability",
        depths.len() == 4 && max_depth == 1,
        format!(
            "{} reachable modes; maximum shortest-path depth {max_depth}",
            depths.len()
        ),
    ));
    let l1 = [Mode::HaltNoncritical, Mode::HaltAll]
        .iter()
        .all(|&m| transition(m, Input::Disengage) == Ok(Mode::Disengaged));
    let autonomous: Vec<Input> = Input::ALL
        .into_iter()
        .filter(|i| i.is_autonomous())
        .collect();
    let l2 = !reach(Mode::Emergency, &autonomous).contains_key(&Mode::Disengaged)
        && reach(Mode::Emergency, &Input::ALL).contains_key(&Mode::Disengaged);
    checks.push(check(
        "Recovery",
        l1 && l2,
        "authorized recovery edges exist (L1 disengage from the halts; L2 only human_reset leaves EMERGENCY); no scheduling/fairness claim".into(),
    ));
    FourModeReport {
        pairs: pairs.len(),
        accepted,
        rejected: rejected.len(),
        reachable: depths.len(),
        max_depth,
        checks,
    }
}
