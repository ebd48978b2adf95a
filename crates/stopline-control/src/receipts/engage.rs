//! The receipts of `engage` and `disengage` (docs/reference.md §3).

use super::compact;
use crate::acks::AckOutcome;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use stopline_core::LatchRecord;

/// What the engage did to one covered group (`reach.rs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GroupReached {
    /// The run.
    pub run: String,
    /// The agent.
    pub agent: String,
    /// The group.
    pub cgroup: PathBuf,
    /// `kill` (cgroup.kill written) or `freeze` (cgroup.freeze written).
    pub order: GroupOrder,
    /// For a kill: `populated 0` observed within [`crate::reach::CONFIRM_WITHIN`]; for a freeze: `frozen 1`.
    pub confirmed: bool,
}

/// The order an engage wrote into a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupOrder {
    /// `cgroup.kill` (an emergency).
    Kill,
    /// `cgroup.freeze` (a halt).
    Freeze,
}

impl GroupOrder {
    /// The order a latch of `level` writes.
    pub fn of(level: stopline_core::Level) -> GroupOrder {
        if level == stopline_core::Level::Emergency {
            GroupOrder::Kill
        } else {
            GroupOrder::Freeze
        }
    }

    /// `kill` or `freeze`: the cgroup file it writes is `cgroup.<name>`.
    pub fn name(self) -> &'static str {
        match self {
            GroupOrder::Kill => "kill",
            GroupOrder::Freeze => "freeze",
        }
    }
}

/// The latch an engage published (or coalesced into), with its file name.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngagedLatch {
    /// The latch record as published.
    #[serde(flatten)]
    pub record: LatchRecord,
    /// Its file name under `latches/`.
    pub file: String,
}

/// The epoch figures of an engage (null when the WAL or epoch could not be trusted).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngageEpoch {
    /// The global sequence after the engage.
    pub seq: Option<u64>,
    /// The latch scope's revision after the engage.
    pub scope_revision: Option<u64>,
}

/// The receipt of `engage`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngageReceipt {
    /// Always true: a refused engage is an error, never a receipt.
    pub engaged: bool,
    /// The latch.
    pub latch: EngagedLatch,
    /// True when an identical latch by the same caller was joined instead.
    pub coalesced: bool,
    /// When this engage decided (its own clock): a coalesced receipt names the latch it
    /// joined, whose `ts` is within the coalescing window of this instant.
    pub engaged_at: String,
    /// True when the WAL lock was held past the bound and the record was left to its holder.
    pub wal_deferred: bool,
    /// The epoch figures.
    pub epoch: EngageEpoch,
    /// The supervised groups the engage wrote `cgroup.kill` / `cgroup.freeze` into.
    pub groups_reached: Vec<GroupReached>,
    /// Gateways that acknowledged the latch.
    pub acknowledged_by: Vec<String>,
    /// Gateways that did not within `ack_timeout_ms`.
    pub unacknowledged: Vec<String>,
    /// Everything that failed after the latch was durable (never an undone stop).
    pub warnings: Vec<String>,
    /// From the call to the durable latch, µs.
    pub time_to_contained_us: u64,
    /// From the start of the call to the last gateway acknowledgement (null when none).
    pub last_ack_us: Option<u64>,
    /// The part of `last_ack_us` spent collecting acknowledgements.
    pub ack_collect_us: Option<u64>,
}

impl EngageReceipt {
    /// Fold the acknowledgement outcome in, `collecting` after the start of the call.
    pub(crate) fn with_acks(mut self, acks: AckOutcome, collecting_us: u64) -> EngageReceipt {
        self.acknowledged_by = acks.acknowledged_by;
        self.unacknowledged = acks.unacknowledged;
        self.warnings.extend(acks.warnings);
        self.last_ack_us = acks.last_ack_us.map(|us| collecting_us + us);
        self.ack_collect_us = acks.last_ack_us;
        self
    }
}

impl fmt::Display for EngageReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "engaged {} at {} ({}){}",
            self.latch.record.scope,
            self.latch.record.level,
            self.latch.file,
            if self.coalesced {
                ", coalesced into the existing latch"
            } else {
                ""
            }
        )?;
        for warning in &self.warnings {
            write!(f, "\nwarning: {warning}")?;
        }
        Ok(())
    }
}

/// The receipt of `disengage` (the plane's, shown to people).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DisengageReceipt(pub stopline_store::halts::DisengageReceipt);

impl DisengageReceipt {
    /// What to tell the caller on stderr when nothing was lifted: no halt latch of the scope was
    /// active (a typo'd scope, or a stop already lifted). The exit code stays 0 (docs/reference.md §3 names
    /// no refusal for it).
    pub fn warning(&self) -> Option<String> {
        self.0.cleared.is_empty().then(|| {
            format!(
                "warning: no halt latch of scope {} is active: nothing was lifted (see `stopline status`)",
                self.0.scope
            )
        })
    }
}

impl fmt::Display for DisengageReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.cleared.is_empty() {
            return write!(f, "nothing to disengage for {}", self.0.scope);
        }
        write!(
            f,
            "disengaged {}: cleared {}",
            self.0.scope,
            compact(&self.0.cleared)
        )
    }
}
