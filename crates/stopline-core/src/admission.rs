//! Stop levels, subject modes, task classes and the admission function A(mode, class).
//!
//! The admission function is the paper's table (docs/reference.md §1): DISENGAGED allows everything;
//! HALT_NONCRITICAL allows critical work and queues the rest; HALT_ALL allows critical work and
//! blocks the rest; EMERGENCY blocks both. Nothing else may decide admission.

use crate::refusal::{Refusal, RefusalCode};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The level of a latch, ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// `pause`: noncritical work is held and resumes when lifted.
    #[serde(rename = "halt-noncritical")]
    HaltNoncritical,
    /// `trip_breaker`: noncritical work is refused; authority survives for a later disengage.
    #[serde(rename = "halt-all")]
    HaltAll,
    /// `revoke_identity`: everything is refused and authority is revoked; only recovery ends it.
    #[serde(rename = "emergency")]
    Emergency,
}

impl Level {
    /// Every level, lowest first.
    pub const ALL: [Level; 3] = [Level::HaltNoncritical, Level::HaltAll, Level::Emergency];

    /// Parse `halt-noncritical`, `halt-all`, `emergency`, or the stop-handle names `pause`,
    /// `trip_breaker`, `revoke_identity`.
    pub fn parse(input: &str) -> Result<Level, Refusal> {
        match input.trim().to_ascii_lowercase().as_str() {
            "halt-noncritical" | "pause" => Ok(Level::HaltNoncritical),
            "halt-all" | "trip_breaker" => Ok(Level::HaltAll),
            "emergency" | "revoke_identity" => Ok(Level::Emergency),
            _ => Err(Refusal::new(
                RefusalCode::LevelInvalid,
                format!("{input:?} is not halt-noncritical, halt-all or emergency"),
            )),
        }
    }

    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::HaltNoncritical => "halt-noncritical",
            Level::HaltAll => "halt-all",
            Level::Emergency => "emergency",
        }
    }

    /// The mode a subject covered by only this latch is in.
    pub fn mode(self) -> Mode {
        match self {
            Level::HaltNoncritical => Mode::HaltNoncritical,
            Level::HaltAll => Mode::HaltAll,
            Level::Emergency => Mode::Emergency,
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The four modes of the paper's machine, ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mode {
    /// No latch covers the subject.
    Disengaged,
    /// The highest covering latch is `halt-noncritical`.
    HaltNoncritical,
    /// The highest covering latch is `halt-all`.
    HaltAll,
    /// An `emergency` latch covers the subject.
    Emergency,
}

impl Mode {
    /// Every mode, DISENGAGED first.
    pub const ALL: [Mode; 4] = [
        Mode::Disengaged,
        Mode::HaltNoncritical,
        Mode::HaltAll,
        Mode::Emergency,
    ];

    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Disengaged => "DISENGAGED",
            Mode::HaltNoncritical => "HALT_NONCRITICAL",
            Mode::HaltAll => "HALT_ALL",
            Mode::Emergency => "EMERGENCY",
        }
    }

    /// The mode of a subject covered by latches of `levels`: the highest, or DISENGAGED.
    pub fn from_levels(levels: impl IntoIterator<Item = Level>) -> Mode {
        levels
            .into_iter()
            .map(Level::mode)
            .max()
            .unwrap_or(Mode::Disengaged)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Task class: critical (safety, logging, heartbeat, audit) or noncritical (domain work).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskClass {
    /// Safety, logging, heartbeat, audit.
    Critical,
    /// Domain work.
    Noncritical,
}

impl TaskClass {
    /// Both classes, critical first.
    pub const ALL: [TaskClass; 2] = [TaskClass::Critical, TaskClass::Noncritical];
}

/// An admission decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call may proceed.
    Allow,
    /// The call is held until the mode drops or the queue times out.
    Queue,
    /// The call is refused.
    Block,
}

impl Decision {
    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Queue => "queue",
            Decision::Block => "block",
        }
    }
}

/// The admission function A(mode, class) of docs/reference.md §1.
pub fn admit(mode: Mode, class: TaskClass) -> Decision {
    match (mode, class) {
        (Mode::Disengaged, _) => Decision::Allow,
        (Mode::HaltNoncritical | Mode::HaltAll, TaskClass::Critical) => Decision::Allow,
        (Mode::HaltNoncritical, TaskClass::Noncritical) => Decision::Queue,
        (Mode::HaltAll, TaskClass::Noncritical) => Decision::Block,
        (Mode::Emergency, _) => Decision::Block,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_table_matches_the_paper() {
        use Decision::*;
        let expected = [
            (Mode::Disengaged, [Allow, Allow]),
            (Mode::HaltNoncritical, [Allow, Queue]),
            (Mode::HaltAll, [Allow, Block]),
            (Mode::Emergency, [Block, Block]),
        ];
        for (mode, [critical, noncritical]) in expected {
            assert_eq!(admit(mode, TaskClass::Critical), critical, "{mode}");
            assert_eq!(admit(mode, TaskClass::Noncritical), noncritical, "{mode}");
        }
    }

    #[test]
    fn levels_parse_both_vocabularies_and_refuse_others() {
        assert_eq!(Level::parse("pause").unwrap(), Level::HaltNoncritical);
        assert_eq!(Level::parse("revoke_identity").unwrap(), Level::Emergency);
        assert_eq!(Level::parse("HALT-ALL").unwrap(), Level::HaltAll);
        assert_eq!(
            Level::parse("stop").unwrap_err().code,
            RefusalCode::LevelInvalid
        );
    }
}
