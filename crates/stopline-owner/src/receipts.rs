//! The receipts of the owner console's verbs: `recover plan|apply|repair`, `drain`,
//! `ops reconcile` (docs/reference.md §3).

use serde::Serialize;
use std::fmt;
use stopline_control::receipts::compact;
use stopline_core::ops::Operation;
use stopline_core::StateRecord;

/// The receipt of `recover plan`.
#[derive(Debug, Clone, Serialize)]
pub struct RecoverPlanReceipt {
    /// The plan the plane fixed.
    #[serde(flatten)]
    pub plan: stopline_store::recovery::PlanReceipt,
    /// The console name it was planned by (shown in the `apply` command line, not in JSON).
    #[serde(skip)]
    pub by: String,
}

impl fmt::Display for RecoverPlanReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plan = &self.plan;
        let registry_errors = if plan.registry_errors.is_empty() {
            String::new()
        } else {
            format!("; registry errors: {}", compact(&plan.registry_errors))
        };
        write!(
            f,
            "plan {} for {}: clears {}; carries forward {} unresolved operation(s){registry_errors}\napply with: stopline recover apply --plan {} --by {}",
            plan.plan,
            plan.scope,
            compact(&plan.latches),
            plan.carried_forward_operations.len(),
            plan.plan,
            self.by
        )
    }
}

/// The receipt of `recover apply`.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct RecoverApplyReceipt(pub stopline_store::recovery::ApplyReceipt);

impl fmt::Display for RecoverApplyReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let applied = &self.0;
        write!(
            f,
            "recovered: {} state: {} new epoch: {} cleared: {} surviving: {}",
            applied.recovered,
            applied.state,
            applied.new_epoch,
            compact(&applied.cleared),
            compact(&applied.surviving)
        )
    }
}

/// The receipt of `recover repair`.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct RepairReceipt(pub stopline_store::repair::RepairReceipt);

impl fmt::Display for RepairReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let repaired = &self.0;
        let live = if repaired.journals_live.is_empty() {
            String::new()
        } else {
            format!(
                "; torn journals of writers still running, left alone (stop them, then repair again): {}",
                repaired.journals_live.join(", ")
            )
        };
        if repaired.nothing_to_repair {
            return write!(f, "nothing to repair; epoch {}{live}", repaired.epoch_seq);
        }
        let mut done = Vec::new();
        if repaired.wal_truncated_bytes > 0 {
            done.push(format!(
                "truncated the WAL's torn last line ({} bytes)",
                repaired.wal_truncated_bytes
            ));
        }
        if repaired.epoch_rebuilt {
            done.push("rebuilt epoch.json from the WAL".to_string());
        }
        if repaired.plane_refounded {
            done.push(
                "re-founded a plane that went back below this host's high-water marks (epoch advanced past them)"
                    .to_string(),
            );
        }
        for journal in &repaired.journals_repaired {
            done.push(format!(
                "cut {} torn line(s) out of {} ({} bytes; {} record(s) found glued after them kept)",
                journal.torn_lines, journal.file, journal.removed_bytes, journal.recovered_records
            ));
        }
        write!(
            f,
            "repaired: {}; epoch {}; the old bytes are kept in recovery-evidence/: {}{live}",
            done.join(", "),
            repaired.epoch_seq,
            repaired.evidence.join(", ")
        )
    }
}

/// The receipt of `recover rotate-key`.
#[derive(Debug, Clone, Serialize)]
pub struct RotateKeyReceipt {
    /// The sha256 of the verification key now published and pinned on this host.
    pub verify_key_sha256: String,
    /// True when the key etcd held was adopted (`--adopt`), false when this host's key replaced it.
    pub adopted: bool,
}

impl fmt::Display for RotateKeyReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = if self.adopted {
            "pinned the published verification key"
        } else {
            "published this host's verification key and pinned it"
        };
        write!(f, "{how}: sha256 {}", self.verify_key_sha256)
    }
}

/// The receipt of `drain`.
#[derive(Debug, Clone, Serialize)]
pub struct DrainReceipt {
    /// Always true.
    pub draining: bool,
    /// The new `state.json`.
    pub state: StateRecord,
}

impl fmt::Display for DrainReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "draining until {}",
            self.state.deadline.as_deref().unwrap_or_default()
        )
    }
}

/// The receipt of `ops reconcile`.
#[derive(Debug, Clone, Serialize)]
pub struct ReconcileReceipt {
    /// Always true.
    pub reconciled: bool,
    /// The operation, with its outcome.
    pub operation: Operation,
}

impl fmt::Display for ReconcileReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reconciled {} as {}",
            self.operation.op,
            self.operation.outcome.as_deref().unwrap_or_default()
        )
    }
}
