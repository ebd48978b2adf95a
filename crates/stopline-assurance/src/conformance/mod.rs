//! `stopline conformance` (docs/reference.md §11): the boundary battery, run against the binary itself.
//!
//! Every case drives the executable that is running the battery (`std::env::current_exe()`) as
//! a black box: each step is a child process in the case's own throwaway home, with a cleared
//! environment, stdin closed, stdout and stderr drained, and a pseudo-terminal where the owner
//! console is needed ([`sandbox`], [`pty`]). Cases that need the gateway start `stopline serve`
//! on a free 127.0.0.1 port, in the same home, with a tiny in-process loopback upstream
//! ([`gateway`], [`http`]). No case calls the control library directly, so a passing battery
//! qualifies the artifact that ships, not the source it came from.
//!
//! Refusal is usually the pass condition: a case passes when the binary refuses what the
//! contract says it must refuse, with the fixed code, and leaves nothing behind. The positive
//! cases (a recovery on the owner console, a scoped stop sparing its neighbours) are there so
//! that "refuses everything" cannot pass either.
//!
//! Every case is bounded ([`runner`]): a deadline per case, every child registered by pid and
//! killed (its whole process group) when the case runs out of time or ends, and output read on
//! threads so a child that fills a pipe cannot hang the battery.
//!
//! What this does not prove: the cases are author-controlled release qualification of the
//! exercised vectors, not certification, and not evidence that no defect exists outside them.
//!
//! A build of the binary with the `conformance-broken` feature honours
//! `STOPLINE_CONFORMANCE_BREAK` (see the `stopline` crate); the battery passes that one variable
//! through to its children so the test that proves the battery catches a broken refusal can run
//! it. Every other variable of the caller's environment is dropped.
#![allow(clippy::disallowed_methods)] // the battery drives the binary as child processes in throwaway homes it damages on purpose

pub mod cases;
pub mod gateway;
pub mod http;
pub mod process;
pub mod pty;
pub mod report;
pub mod runner;
pub mod sandbox;
pub mod steps;

pub use report::{CaseResult, Report};
pub use runner::{run, ConformanceError, Options};

/// A case's failure: what was observed instead of the expectation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CaseError {
    /// The binary did something the contract forbids (or failed to do what it requires).
    Unexpected(String),
    /// The harness could not carry the case out (a child could not start, a port not bind).
    /// This fails the case too: an unqualified binary is not a qualified one.
    Harness(String),
    /// The case ran past its deadline; its children were killed.
    TimedOut(String),
}

impl std::fmt::Display for CaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CaseError::Unexpected(what) => write!(f, "{what}"),
            CaseError::Harness(what) => write!(f, "harness: {what}"),
            CaseError::TimedOut(what) => write!(f, "timed out: {what}"),
        }
    }
}

impl std::error::Error for CaseError {}

/// What a case returns: the observation that made it pass, or why it failed.
pub type Verdict = Result<String, CaseError>;

/// Fail the case with `observation` unless `condition` holds.
pub fn ensure(condition: bool, observation: impl FnOnce() -> String) -> Result<(), CaseError> {
    if condition {
        Ok(())
    } else {
        Err(CaseError::Unexpected(observation()))
    }
}

/// A harness failure from anything displayable.
pub fn harness(what: impl std::fmt::Display) -> CaseError {
    CaseError::Harness(what.to_string())
}
