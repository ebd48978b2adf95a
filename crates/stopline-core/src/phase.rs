//! The status phase, derived from fresh observations (docs/reference.md §3 status).
//!
//! "Latched" is not "reconciled": the phase says how far containment has got. It is computed
//! from what was just observed, never from the last state written.

use crate::state::ControlState;
use serde::{Deserialize, Serialize};

/// The derived phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    /// No latch, no fault, state RUNNING.
    Running,
    /// A drain window is open.
    Draining,
    /// A machine recovery is being applied.
    RecoveryPending,
    /// A covered worker is not yet observed quiescent, a census failed, or a live gateway has
    /// not acknowledged a latch.
    Killing,
    /// Quiescent and covered, but an unresolved operation remains or a registry is unreadable.
    Reconciling,
    /// Contained, quiescent, covered, censuses readable and empty.
    FrozenSafe,
}

/// What the phase is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseInputs {
    /// The effective machine state.
    pub state: ControlState,
    /// Any active latch, or any fault closing the gates.
    pub contained: bool,
    /// Every worker covered by a latch was observed quiescent (true when there are none).
    pub covered_workers_quiescent: bool,
    /// The worker census could be taken.
    pub worker_census_ok: bool,
    /// Every live gateway acknowledged every latch and speaks the current protocol.
    pub gateways_covered: bool,
    /// An unresolved operation remains.
    pub unresolved_operations: bool,
    /// An operation registry could not be read.
    pub registry_errors: bool,
}

/// Derive the phase.
pub fn derive(inputs: PhaseInputs) -> Phase {
    match inputs.state {
        ControlState::RecoveryPending => return Phase::RecoveryPending,
        ControlState::Draining => return Phase::Draining,
        ControlState::Running if !inputs.contained => return Phase::Running,
        _ => {}
    }
    if !inputs.covered_workers_quiescent || !inputs.worker_census_ok || !inputs.gateways_covered {
        Phase::Killing
    } else if inputs.unresolved_operations || inputs.registry_errors {
        Phase::Reconciling
    } else {
        Phase::FrozenSafe
    }
}
