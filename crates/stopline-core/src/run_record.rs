//! The run record (docs/reference.md §9, `runs/<run>/run.json`): what `stopline run` says about
//! one supervised run, written before the agent starts and replaced when the run ends, and
//! printed by `stopline run --json` as its receipt.
//!
//! One type for every phase, so a field is named once: before it, the record was a `json!` tree
//! built in three places (`run`, its start, `conclude`) and mutated by key. The phases differ
//! only in which groups of fields are present, and each group is present whole or absent:
//!
//! - **Begun** (written before the agent starts): the run, the agent, its harness version and
//!   command, who runs it, its network and gateway, the supervisor and `started_at`.
//! - **Started** ([`RunRecord::started`]): the agent's `pid`, containment `method` and
//!   `agent_url`.
//! - **Ended** ([`RunRecord::end`]): `outcome` and `ended_at`, with the start's `error` when it
//!   never started, or what was observed ([`Concluded`]) when it ran.
//!
//! Keys come out sorted because every writer goes through `serde_json::Value` (the store's
//! `replace_json`, the receipt's print); `tests/golden/run-record-*.json` hold each phase as the
//! product wrote it before this type and prove the bytes unchanged.

use crate::refusal::Refusal;
use serde::{Deserialize, Serialize};

/// The run record's schema name.
pub const SCHEMA: &str = "run-record.v1";

/// `runs/<run>/run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// [`SCHEMA`].
    pub schema: String,
    /// What the record says from the start.
    #[serde(flatten)]
    pub begun: Begun,
    /// The agent as started; absent until it is.
    #[serde(flatten)]
    pub started: Option<StartedAgent>,
    /// How the run ended; absent until it has.
    #[serde(flatten)]
    pub end: Option<RunEnd>,
    /// The card's conditions and breakers that only observe
    /// ([`crate::policy::PolicyCard::observe_only`]); absent when every one enforces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe_only: Vec<String>,
}

/// The run record's `gateway` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayRecord {
    /// The base URL as the supervisor reaches it.
    pub url: String,
    /// The address it resolved to.
    pub addr: String,
    /// The configuration hash, when one could be learned.
    pub config_sha256: Option<String>,
    /// Where the hash came from (`healthz`, `registration`), or why there is none.
    pub config_hash_source: String,
}

/// The agent as started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartedAgent {
    /// The agent's root process.
    pub pid: u32,
    /// How it is contained (`cgroup2`, `subreaper`).
    pub method: String,
    /// The gateway URL the agent was handed.
    pub agent_url: String,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The agent could not be started (`error` says why).
    StartFailed,
    /// The agent ended by itself.
    Exited,
    /// A stop ended it, observed quiescent (`stop` says which).
    Stopped,
    /// The operator's stop ran out of its wait: the kill is issued, quiescence unobserved.
    StopUnconfirmed,
}

/// The fields of an ended run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    /// How it ended.
    pub outcome: Outcome,
    /// RFC 3339 time the record was last written.
    pub ended_at: String,
    /// Why the agent could not be started ([`Outcome::StartFailed`] only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Refusal>,
    /// What was observed of a run that started.
    #[serde(flatten)]
    pub concluded: Option<Concluded>,
}

/// What was observed of a run that started, once it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Concluded {
    /// The agent's exit code (128 + signal for a signal; 1 when stopped).
    pub exit_code: i32,
    /// When the kill was issued, if one was.
    pub kill_issued_at: Option<String>,
    /// When quiescence was observed, if it was.
    pub quiescent_observed_at: Option<String>,
    /// Writes that failed while the run ran.
    pub warnings: Vec<String>,
    /// The refusal the run was stopped with, if it was.
    pub stop: Option<Refusal>,
    /// True when the agent's root exited leaving processes that were killed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stragglers_killed: bool,
    /// The operator's signal, when the operator stopped the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_by_operator: Option<OperatorStop>,
}

/// `stopped_by_operator`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorStop {
    /// The signal's name (`SIGINT`, …).
    pub signal: String,
}

impl RunRecord {
    /// The record of a run about to start: no agent yet, no end.
    pub fn begun(begun: Begun) -> RunRecord {
        RunRecord {
            schema: SCHEMA.into(),
            begun,
            started: None,
            end: None,
            observe_only: Vec::new(),
        }
    }

    /// The agent started.
    pub fn with_started(mut self, agent: StartedAgent) -> RunRecord {
        self.started = Some(agent);
        self
    }

    /// The agent could not be started.
    pub fn start_failed(&mut self, error: Refusal, ended_at: String) {
        self.end = Some(RunEnd {
            outcome: Outcome::StartFailed,
            ended_at,
            error: Some(error),
            concluded: None,
        });
    }

    /// The run that started ended.
    pub fn concluded(&mut self, outcome: Outcome, concluded: Concluded, ended_at: String) {
        self.end = Some(RunEnd {
            outcome,
            ended_at,
            error: None,
            concluded: Some(concluded),
        });
    }

    /// The record as the store writes it and `run --json` prints it (keys sorted).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a run record always serializes")
    }
}

/// What a run record says from the start ([`RunRecord::begun`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Begun {
    /// The card's run id.
    pub run_id: String,
    /// The card's agent.
    pub agent: String,
    /// The card's harness version.
    pub harness_version: String,
    /// The command and its arguments (lossy UTF-8).
    pub command: Vec<String>,
    /// The canonical project root.
    pub project: String,
    /// The user the agent runs as (`null` when unconfined).
    pub user: Option<String>,
    /// Its uid (`null` when unconfined).
    pub uid: Option<u32>,
    /// True when the agent runs as the caller (`--unconfined`).
    pub unconfined: bool,
    /// `host` or `gateway-only`.
    pub net: String,
    /// The gateway the agent was handed.
    pub gateway: GatewayRecord,
    /// The gateway's configuration hash, when one could be learned (the same as `gateway`'s).
    pub gateway_config_sha256: Option<String>,
    /// The supervising `stopline run` process.
    pub supervisor_pid: u32,
    /// RFC 3339 time the run record was first written.
    pub started_at: String,
}
