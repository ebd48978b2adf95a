//! What a drill is asked to do, and the checks that run before anything starts: counts within
//! bounds, a level that parses, a scope that stops only the drill's own callers.
//!
//! A drill must never stop real work. Against a live gateway its scope is always its own
//! synthetic run; locally it may also be `machine` (the machine is the throwaway home's) or any
//! scope that covers every one of its callers and nothing the drill does not own.

use std::path::PathBuf;
use std::time::Duration;
use stopline_core::{Level, Refusal, RefusalCode};

/// Where the drill's gateway comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// An in-process gateway on a loopback port over a throwaway control directory.
    Local,
    /// A live gateway at this URL, whose control directory is the drill's home.
    Against(String),
}

/// The drill's options (`stopline drill` flags).
#[derive(Debug, Clone)]
pub struct DrillOptions {
    /// The home whose evidence log receives the observation (and, against a live gateway, whose
    /// key mints the drill's tokens and whose operation registry is matched).
    pub home: PathBuf,
    /// Top-level agents.
    pub agents: usize,
    /// Delegated sub-agents per agent.
    pub subagents: usize,
    /// The earliest moment of the pull; the pull lands at a random moment up to half as much
    /// again (at least 50 ms) later.
    pub pull_after_ms: u64,
    /// How long to watch after the trip (engage returned); at least longer than the longest
    /// task seen before the pull (default twice it, at least 1000 ms).
    pub window_ms: Option<u64>,
    /// The scope to stop (default: the drill's own run).
    pub scope: Option<String>,
    /// The level (default `emergency`).
    pub level: String,
    /// The harness version the observation is recorded against.
    pub harness_version: String,
    /// The p99 time to first rejection above which the drill fails.
    pub target_ms: u64,
    /// Local or against a live gateway.
    pub mode: Mode,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    /// Record the observation in the home's evidence log.
    pub record: bool,
    /// Test knob: the in-process gateway swaps in a changed view this late (a gateway that
    /// refreshes its view late must fail the drill). Local mode only.
    pub slow_view: Option<Duration>,
    /// Also measure the floor: the same load against a fresh gateway whose stop was engaged
    /// before the load started (every call refused from the first), reported beside the drill.
    pub floor: bool,
}

impl DrillOptions {
    /// Defaults: 10 agents × 2 sub-agents, pull after 500 ms, `emergency`, harness `drill`,
    /// target 1000 ms (the policy card's `time_to_stop_target_ms` of docs/reference.md §6), local.
    pub fn new(home: PathBuf) -> DrillOptions {
        DrillOptions {
            home,
            agents: 10,
            subagents: 2,
            pull_after_ms: 500,
            window_ms: None,
            scope: None,
            level: "emergency".into(),
            harness_version: "drill".into(),
            target_ms: 1000,
            mode: Mode::Local,
            progress: false,
            record: true,
            slow_view: None,
            floor: false,
        }
    }

    /// Check everything that can be checked before starting; returns the parsed level.
    pub fn validate(&self) -> Result<Level, Refusal> {
        let bad = |m: String| Refusal::new(RefusalCode::BadRequest, m);
        if !(1..=1000).contains(&self.agents) {
            return Err(bad(format!("--agents {} is not in 1..=1000", self.agents)));
        }
        if self.subagents > 16 {
            return Err(bad(format!(
                "--subagents {} is not in 0..=16",
                self.subagents
            )));
        }
        if self.pull_after_ms > 600_000 || self.window_ms.is_some_and(|w| w > 600_000) {
            return Err(bad(
                "--pull-after-ms and --window-ms are at most 600000".into()
            ));
        }
        if self.harness_version.trim().is_empty() {
            return Err(bad("--harness-version must not be empty".into()));
        }
        let level = Level::parse(&self.level)?;
        if let (Mode::Against(_), Some(scope)) = (&self.mode, &self.scope) {
            if !scope.starts_with("run:drill-") {
                return Err(Refusal::new(
                    RefusalCode::ScopeInvalid,
                    format!("--scope {scope}: a drill against a live gateway stops only its own run (run:drill-<id>), never real work"),
                ));
            }
        }
        if matches!(self.mode, Mode::Against(_)) && self.slow_view.is_some() {
            return Err(bad(
                "the slow-view knob applies to the drill's own gateway only".into(),
            ));
        }
        Ok(level)
    }

    /// Every caller (agents and sub-agents).
    pub fn callers(&self) -> usize {
        self.agents * (1 + self.subagents)
    }
}

/// The scope the drill stops, resolved against its run id: `None` means the drill's own run.
/// `run:drill` and `run` are accepted as "the drill's own run" too, since its id is not known
/// beforehand.
pub fn resolve_scope(requested: Option<&str>, run_id: &str) -> String {
    match requested.map(str::trim) {
        None | Some("") | Some("run") | Some("run:drill") => format!("run:{run_id}"),
        Some(scope) => scope.to_string(),
    }
}
