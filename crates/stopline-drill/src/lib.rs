//! Drills of the stop (docs/reference.md §11): make the stop measurable and file what was measured.
//!
//! One drill starts a gateway on a loopback port over a throwaway control directory (or, with
//! `--against URL`, drives a live gateway and stops only its own synthetic run
//! `run:drill-<id>`), a destination that timestamps every effect it executes by request id
//! ([`destination`]), and N agents each with M delegated sub-agents calling tools, writing and
//! calling the model as fast as they can ([`agents`]). At a random moment after
//! `pull_after_ms` it pulls the stop through the same engage verb every surface uses
//! ([`pull`]), measures the time from the pull to each caller's first rejected call, keeps the
//! callers going for a window (after engage returned) longer than the longest task, and then matches every effect the
//! destination executed against the operation registry ([`matching`]): an effect whose
//! operation was admitted after engage returned, or that has no operation at all, is *after the
//! trip* and fails the drill. The result is a `control-observation.v1` ([`observation`]) written
//! to the evidence log of the real home, where `stopline run` reads it by harness version.
//!
//! A drill never stops anything but its own callers: locally its scope must cover exactly its
//! own synthetic agents, and against a live gateway it is always `run:drill-<id>`.
#![deny(missing_docs)]

pub mod agents;
pub mod breakdown;
pub mod client;
pub mod destination;
pub mod effects;
mod local;
pub mod long_task;
pub mod matching;
pub mod observation;
pub mod options;
pub mod plot;
pub mod progress;
pub mod pull;
mod remote;
pub mod remote_agent;
pub mod report;
mod run;

pub mod sweep;

pub use observation::Observation;
pub use options::{DrillOptions, Mode};
pub use run::drill;
pub use sweep::{repeat, sweep};

/// Why a drill could not be carried out (as opposed to a drill that ran and failed, which is an
/// [`Observation`] with `pass: false`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrillError {
    /// The options cannot make a drill (scope, level, counts); carries the refusal code.
    #[error("{0}")]
    Refused(#[from] stopline_core::Refusal),
    /// The loopback gateway or destination could not be started.
    #[error("cannot start the drill's {what}: {why}")]
    Setup {
        /// What could not be started.
        what: &'static str,
        /// Why.
        why: String,
    },
    /// The live gateway of `--against` is not usable for a drill.
    #[error("--against {url}: {why}")]
    Against {
        /// The gateway's URL.
        url: String,
        /// Why.
        why: String,
    },
    /// Local I/O (throwaway home, runtime, plot file).
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}

impl DrillError {
    /// The refusal this error is reported as (`error: <code>: <message>`).
    pub fn to_refusal(&self) -> stopline_core::Refusal {
        use stopline_core::{Refusal, RefusalCode};
        match self {
            DrillError::Refused(refusal) => refusal.clone(),
            other => Refusal::new(RefusalCode::ControlIo, other.to_string()),
        }
    }
}

pub(crate) fn setup(what: &'static str) -> impl Fn(String) -> DrillError {
    move |why| DrillError::Setup { what, why }
}
