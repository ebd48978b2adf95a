//! The inventory: every case of the battery, grouped by the part of the contract it guards.
//!
//! A case is a function of a fresh [`Sandbox`] returning the observation that made it pass, or
//! what it saw instead. Ids are stable snake_case names (the report and the release gate refer
//! to them); an expectation says, in one sentence, what must hold. Add a case by adding it to its
//! group's list; the inventory test in `tests/` holds the count and the uniqueness of ids.

use super::sandbox::Sandbox;
use super::Verdict;

mod admission;
mod authority;
mod bounds;
mod budgets;
mod console;
mod containment;
mod disengage;
mod drain;
mod engage;
mod evidence;
mod fail_closed;
mod gateway;
mod holds;
mod integrations;
mod races;
mod recovery;
mod repair;
mod run;

/// One case of the battery.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// Stable snake_case id.
    pub id: &'static str,
    /// What must hold, in one sentence.
    pub expectation: &'static str,
    /// Seconds the case may take before its children are killed and it fails as timed out.
    pub budget: u64,
    /// The case.
    pub run: fn(&Sandbox) -> Verdict,
}

/// A case with the default budget (20 s).
pub const fn case(
    id: &'static str,
    expectation: &'static str,
    run: fn(&Sandbox) -> Verdict,
) -> Case {
    Case {
        id,
        expectation,
        budget: 20,
        run,
    }
}

/// A case that starts a gateway or waits on a clock (40 s, scheduled first).
pub const fn slow(
    id: &'static str,
    expectation: &'static str,
    run: fn(&Sandbox) -> Verdict,
) -> Case {
    Case {
        id,
        expectation,
        budget: 40,
        run,
    }
}

/// Every case, in report order.
pub fn inventory() -> Vec<Case> {
    [
        engage::CASES,
        bounds::CASES,
        admission::CASES,
        authority::CASES,
        disengage::CASES,
        console::CASES,
        recovery::CASES,
        repair::CASES,
        races::CASES,
        drain::CASES,
        fail_closed::CASES,
        gateway::CASES,
        holds::CASES,
        budgets::CASES,
        integrations::CASES,
        run::CASES,
        containment::CASES,
        evidence::CASES,
    ]
    .concat()
}
