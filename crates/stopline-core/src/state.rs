//! `state.json`: the machine-wide control state.
//!
//! RUNNING is the absence of a declared emergency. RECOVERY_PENDING and FROZEN_SAFE close every
//! gate until a machine recovery ends RUNNING. DRAINING lets only durably prepared work finish
//! until its deadline, after which it reads as FROZEN_SAFE.

use serde::{Deserialize, Serialize};

/// The four machine states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ControlState {
    /// No declared emergency.
    Running,
    /// A bounded drain window after a machine stop.
    Draining,
    /// A machine recovery is being applied.
    RecoveryPending,
    /// Contained: every gate is closed until a machine recovery.
    FrozenSafe,
}

impl ControlState {
    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            ControlState::Running => "RUNNING",
            ControlState::Draining => "DRAINING",
            ControlState::RecoveryPending => "RECOVERY_PENDING",
            ControlState::FrozenSafe => "FROZEN_SAFE",
        }
    }
}

/// The body of `state.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateRecord {
    /// The state.
    pub state: ControlState,
    /// Who set it.
    pub by: String,
    /// Why.
    pub reason: String,
    /// RFC 3339 time it was set.
    pub since: String,
    /// For DRAINING: the RFC 3339 deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// For DRAINING: the deadline as Unix milliseconds (what gates compare).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_unix_ms: Option<i64>,
    /// For DRAINING: only operations prepared before this Unix-ms instant may dispatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared_before_unix_ms: Option<i64>,
}

impl StateRecord {
    /// The implicit record when `state.json` does not exist.
    pub fn running() -> StateRecord {
        StateRecord {
            state: ControlState::Running,
            by: String::new(),
            reason: String::new(),
            since: String::new(),
            deadline: None,
            deadline_unix_ms: None,
            prepared_before_unix_ms: None,
        }
    }

    /// The state as gates must treat it at `now_unix_ms`: a drain past its deadline is FROZEN_SAFE.
    pub fn effective(&self, now_unix_ms: i64) -> ControlState {
        match (self.state, self.deadline_unix_ms) {
            (ControlState::Draining, Some(deadline)) if now_unix_ms >= deadline => {
                ControlState::FrozenSafe
            }
            (ControlState::Draining, None) => ControlState::FrozenSafe,
            (state, _) => state,
        }
    }
}
