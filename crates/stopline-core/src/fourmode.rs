//! The paper's four-mode machine: its 20 state/input pairs and their rejection semantics.
//!
//! A rejected pair (⊥) leaves the mode unchanged and reports an error; it is never a fifth mode.
//! `human_reset` is the only exit from EMERGENCY and is accepted only there. The protocol code
//! realises this table durably: an engage of level L moves a subject to max(mode, L), a disengage
//! clears halt levels, and only the owner console's recovery clears EMERGENCY.

use crate::admission::Mode;
use serde::Serialize;
use std::fmt;

/// The input alphabet Σ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Input {
    /// engage(HALT_NONCRITICAL).
    EngageHaltNoncritical,
    /// engage(HALT_ALL).
    EngageHaltAll,
    /// engage(EMERGENCY).
    EngageEmergency,
    /// disengage: an authorised, autonomous lift of a halt.
    Disengage,
    /// human_reset: the owner console's recovery.
    HumanReset,
}

impl Input {
    /// All five inputs.
    pub const ALL: [Input; 5] = [
        Input::EngageHaltNoncritical,
        Input::EngageHaltAll,
        Input::EngageEmergency,
        Input::Disengage,
        Input::HumanReset,
    ];

    /// Every input except `human_reset` is autonomous.
    pub fn is_autonomous(self) -> bool {
        self != Input::HumanReset
    }
}

impl fmt::Display for Input {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Input::EngageHaltNoncritical => "engage(HALT_NONCRITICAL)",
            Input::EngageHaltAll => "engage(HALT_ALL)",
            Input::EngageEmergency => "engage(EMERGENCY)",
            Input::Disengage => "disengage",
            Input::HumanReset => "human_reset",
        };
        f.write_str(text)
    }
}

/// Why a pair was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Rejected {
    /// The mode, unchanged.
    pub mode: Mode,
    /// The rejected input.
    pub input: Input,
}

/// δ(mode, input): the new mode, or a rejection that leaves `mode` unchanged.
pub fn transition(mode: Mode, input: Input) -> Result<Mode, Rejected> {
    let reject = Err(Rejected { mode, input });
    match (mode, input) {
        (Mode::Emergency, Input::EngageEmergency) => Ok(Mode::Emergency),
        (Mode::Emergency, Input::HumanReset) => Ok(Mode::Disengaged),
        (Mode::Emergency, _) => reject,
        (_, Input::HumanReset) => reject,
        (Mode::Disengaged, Input::Disengage) => reject,
        (_, Input::Disengage) => Ok(Mode::Disengaged),
        (_, Input::EngageHaltNoncritical) => Ok(Mode::HaltNoncritical),
        (_, Input::EngageHaltAll) => Ok(Mode::HaltAll),
        (_, Input::EngageEmergency) => Ok(Mode::Emergency),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thirteen_accepted_seven_rejected() {
        let accepted = Mode::ALL
            .iter()
            .flat_map(|&m| Input::ALL.iter().map(move |&i| transition(m, i)))
            .filter(Result::is_ok)
            .count();
        assert_eq!(accepted, 13);
    }
}
