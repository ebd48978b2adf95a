//! The receipts of `status`, `ops list` and `init` (docs/reference.md §3).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use stopline_core::ack::{ServerRecord, UncoveredServer};
use stopline_core::ops::{Blocks, Operation};
use stopline_core::phase::Phase;
use stopline_core::text::inert;
use stopline_core::worker::WorkerRegistration;
use stopline_core::{ActiveLatch, EpochMap, Refusal, StateRecord, Subject};
use stopline_store::ops::{Census, CensusEntry};

/// A registered worker as `status` shows it: its registration (docs/reference.md §9), whether
/// a stop covers it, and whether its supervisor is gone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerView {
    /// The registration as read.
    #[serde(flatten)]
    pub registration: WorkerRegistration,
    /// A latch or a fault covers the worker.
    pub covered: bool,
    /// The supervisor the registration names is gone (nothing enforces a stop on it but an
    /// engage's own reach).
    pub supervisor_gone: bool,
}

/// The receipt of `status`: the phase derived from fresh reads, and what it was derived from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusReceipt {
    /// The derived phase.
    pub phase: Phase,
    /// The effective machine state (a drain past its deadline reads FROZEN_SAFE).
    pub state: String,
    /// `state.json` as recorded.
    pub state_record: StateRecord,
    /// Every active latch, fail-closed entries included.
    #[serde(with = "stopline_core::latch::shown")]
    pub latches: Vec<ActiveLatch>,
    /// Why the control state cannot be trusted.
    pub faults: Vec<Refusal>,
    /// The confirmed epoch map.
    pub epoch: EpochMap,
    /// The supervisor's worker registrations as registered, each with `covered` and
    /// `supervisor_gone`.
    pub workers: Vec<WorkerView>,
    /// True when every covered worker was observed quiescent, the census was whole and every
    /// live gateway covers the latches.
    pub affected_worker_quiescence_confirmed: bool,
    /// Live gateways that do not cover the latches.
    pub uncovered_servers: Vec<UncoveredServer>,
    /// The census of unresolved operations.
    pub unresolved: Census,
    /// Notes.
    pub warnings: Vec<String>,
    /// The stop conditions and breakers that only observe (docs/reference.md §6, §8): this
    /// home's `breakers.<kind>` from `[breakers.mode]`, and each listed run's card's as
    /// `run <id>: <condition>`. Absent when everything enforces.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe_only: Vec<String>,
    /// When it was observed (unix ms): the text's latch ages are measured from it.
    #[serde(skip)]
    pub observed_ms: i64,
    /// The live gateways as registered, with what each acknowledged (the text's gateway list;
    /// JSON shows only the uncovered ones, as it always did).
    #[serde(skip)]
    pub gateways: Vec<ServerRecord>,
    /// Gateway registrations that could not be read.
    #[serde(skip)]
    pub gateway_notes: Vec<String>,
}

/// `status` as an agent token reads it through the gateway (docs/reference.md §6 "Agents see only
/// themselves"): built field by field from the receipt, so what an agent sees is what this type
/// names — a field added to [`StatusReceipt`] (or renamed) reaches no agent until it is named
/// here. The machine's phase and state, the latches covering the agent, the epoch scopes
/// covering it, the workers and unresolved operations of its own chain; no other agent's
/// scopes, latches, workers or operations, and no warnings (they name paths of the host).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentStatusView {
    /// The derived phase.
    pub phase: Phase,
    /// The effective machine state.
    pub state: String,
    /// `state.json` as recorded (machine-wide).
    pub state_record: StateRecord,
    /// The active latches covering the agent.
    #[serde(with = "stopline_core::latch::shown")]
    pub latches: Vec<ActiveLatch>,
    /// Why the control state cannot be trusted (they cover everyone).
    pub faults: Vec<Refusal>,
    /// The epoch map with only the scopes covering the agent.
    pub epoch: EpochMap,
    /// The workers of the agent's own chain.
    pub workers: Vec<WorkerView>,
    /// As in the receipt: covered workers quiescent, census whole, gateways covering.
    pub affected_worker_quiescence_confirmed: bool,
    /// Live gateways that do not cover the latches (ids only concern the host).
    pub uncovered_servers: Vec<UncoveredServer>,
    /// The unresolved operations of the agent's own chain.
    pub unresolved: Census,
    /// What only observes and concerns the agent: the home's observed breakers, and the
    /// conditions of its own runs' cards (`run <id>: <condition>`). Absent when all enforce.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observe_only: Vec<String>,
}

impl AgentStatusView {
    /// What of `receipt` concerns `subject` (an agent token's proven subject).
    pub fn of(receipt: &StatusReceipt, subject: &Subject) -> AgentStatusView {
        let links: Vec<&str> = subject.chain.iter().map(|n| n.as_str()).collect();
        let own = |agent: Option<&str>| agent.is_some_and(|a| links.contains(&a));
        let own_entries = |entries: &[CensusEntry]| -> Vec<CensusEntry> {
            entries
                .iter()
                .filter(|e| own(e.operation.agent.as_deref()))
                .cloned()
                .collect()
        };
        AgentStatusView {
            phase: receipt.phase,
            state: receipt.state.clone(),
            state_record: receipt.state_record.clone(),
            latches: receipt
                .latches
                .iter()
                .filter(|latch| latch.covers(subject))
                .cloned()
                .collect(),
            faults: receipt.faults.clone(),
            epoch: receipt.epoch.concerning(subject),
            workers: receipt
                .workers
                .iter()
                .filter(|worker| own(Some(&worker.registration.agent)))
                .cloned()
                .collect(),
            affected_worker_quiescence_confirmed: receipt.affected_worker_quiescence_confirmed,
            uncovered_servers: receipt.uncovered_servers.clone(),
            unresolved: Census {
                file: own_entries(&receipt.unresolved.file),
                destination: own_entries(&receipt.unresolved.destination),
                model: own_entries(&receipt.unresolved.model),
                errors: Vec::new(),
            },
            observe_only: receipt
                .observe_only
                .iter()
                .filter(|name| match name.strip_prefix("run ") {
                    // A run card's condition: only of a run one of the agent's workers is in.
                    Some(rest) => receipt.workers.iter().any(|worker| {
                        own(Some(&worker.registration.agent))
                            && rest.starts_with(&format!("{}: ", worker.registration.run))
                    }),
                    None => true,
                })
                .cloned()
                .collect(),
        }
    }
}

impl fmt::Display for AgentStatusView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Served as JSON only; the text names the phase.
        f.write_str(&phase_name(self.phase))
    }
}

/// `GET /v1/status` as a gateway answers it: the status (the whole receipt, or an agent's view
/// of it) and what the answering gateway says of its own view (docs/reference.md §8).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GatewayStatus<T> {
    /// The status.
    #[serde(flatten)]
    pub status: T,
    /// The answering gateway.
    pub gateway: GatewayViewReport,
}

/// The answering gateway's own view, in `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayViewReport {
    /// Its registration id.
    pub id: String,
    /// The generation of its control view.
    pub view_generation: u64,
    /// How old that view is, ms.
    pub view_age_ms: i64,
    /// True when only periodic reloads refresh it.
    pub view_degraded: bool,
    /// Notes about the view.
    pub notes: Vec<String>,
}

impl<T> fmt::Display for GatewayStatus<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Served as JSON only.
        write!(f, "status from gateway {}", self.gateway.id)
    }
}

/// The stable name of a phase (`CONTAINED`, `RECOVERED`, …).
pub(super) fn phase_name(phase: Phase) -> String {
    match serde_json::to_value(phase) {
        Ok(Value::String(name)) => name,
        _ => String::new(),
    }
}

/// One operation as `ops list` shows it: the operation, and for one without an outcome whether
/// it is still in flight and whether it blocks anyone now.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OperationLine {
    /// The operation.
    #[serde(flatten)]
    pub operation: Operation,
    /// Unresolved only: its writer is alive and has not marked it in doubt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<bool>,
    /// Unresolved only: it blocks someone now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
    /// Unresolved only: why its writer marked it in doubt, when it said (e.g. "remote cancel
    /// not confirmed: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doubt: Option<String>,
}

/// The receipt of `ops list`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpsListReceipt {
    /// The selected operations.
    pub operations: Vec<OperationLine>,
    /// Registries that could not be read.
    pub errors: Vec<String>,
}

impl fmt::Display for OpsListReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines: Vec<String> = self
            .operations
            .iter()
            .map(|line| {
                operation_text(
                    &line.operation,
                    line.in_flight == Some(true),
                    line.doubt.as_deref(),
                )
            })
            .collect();
        if lines.is_empty() {
            lines.push("no operations match".to_string());
        }
        lines.extend(
            self.errors
                .iter()
                .map(|error| format!("journal unreadable: {error}")),
        );
        f.write_str(&lines.join("\n"))
    }
}

/// The receipt of `ops compact`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpsCompactReceipt {
    /// Journal snapshots rewritten.
    pub snapshots_written: usize,
    /// Journals of gone writers moved to `ops/archive/`.
    pub journals_archived: usize,
    /// Archived journals deleted (`[retention] gone_journals = "prune"`).
    pub journals_pruned: usize,
    /// Spending journals of gone writers folded into `spend/settled.json` and moved to
    /// `spend/archive/`.
    pub spend_journals_compacted: usize,
    /// Archived spending journals deleted (`[retention] gone_journals = "prune"`).
    pub spend_journals_pruned: usize,
    /// Journals whose snapshot could not be written or that could not be archived.
    pub errors: Vec<String>,
}

impl OpsCompactReceipt {
    /// The exit code `stopline ops compact` ends with: 0 when every snapshot was written.
    pub fn exit_code(&self) -> i32 {
        if self.errors.is_empty() {
            0
        } else {
            1
        }
    }
}

impl fmt::Display for OpsCompactReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} journal snapshot(s) rewritten, {} journal(s) of gone writers archived",
            self.snapshots_written, self.journals_archived
        )?;
        if self.journals_pruned > 0 {
            write!(f, " ({} pruned)", self.journals_pruned)?;
        }
        write!(
            f,
            ", {} spending journal(s) of gone writers compacted",
            self.spend_journals_compacted
        )?;
        if self.spend_journals_pruned > 0 {
            write!(f, " ({} pruned)", self.spend_journals_pruned)?;
        }
        if !self.errors.is_empty() {
            write!(f, "; errors: {}", super::compact(&self.errors))?;
        }
        Ok(())
    }
}

/// One operation of `ops list` (and `status`): id, target, agent, outcome, and for one without
/// an outcome whom it blocks and, when its writer said, why it is in doubt.
pub(super) fn operation_text(op: &Operation, in_flight: bool, doubt: Option<&str>) -> String {
    let mut line = format!(
        "{} {} by {} {}",
        inert(&op.op),
        inert(&op.target),
        inert(op.agent.as_deref().unwrap_or("?")),
        inert(op.outcome.as_deref().unwrap_or("UNRESOLVED"))
    );
    if op.outcome.is_none() {
        line.push_str(&match (in_flight, &op.blocks) {
            (true, _) => " (in flight: blocks nobody yet)".to_string(),
            (false, Blocks::Nobody) => " (blocks nobody: a model request)".to_string(),
            (false, Blocks::Everyone) => " (blocks every agent on this target)".to_string(),
            (false, Blocks::Agent(root)) => {
                format!(" (blocks {root} and its sub-agents on this target)")
            }
        });
        if let Some(why) = doubt {
            line.push_str(": ");
            line.push_str(&inert(why));
        }
    }
    line
}

/// The receipt of `init`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InitReceipt {
    /// The control directory.
    pub home: String,
    /// Always true: the home is whole.
    pub created: bool,
    /// Whether the full-disk reserve could be written.
    pub reserve: bool,
    /// `init --control …`: the sha256 of the plane's verification key, now pinned on this host
    /// (absent when the plane publishes none yet: the first key published is pinned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verify_key_sha256: Option<String>,
}

impl fmt::Display for InitReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "control directory {} is ready{}",
            self.home,
            if self.reserve {
                ""
            } else {
                " (warning: the full-disk reserve could not be written)"
            }
        )?;
        if let Some(pin) = &self.verify_key_sha256 {
            write!(f, "; the plane's verification key is pinned: sha256 {pin}")?;
        }
        Ok(())
    }
}
