//! The records of the breakglass WAL, one Rust type per `kind` (docs/reference.md, "Record
//! shapes"). Both backends (the local directory and etcd) write only these and read only these.
//!
//! A line's bytes are its record and its envelope (`seq`, `prev`, `kind`, `ts`) as one JSON
//! object whose keys are in sorted order at every depth ([`line_bytes`]): the form every line
//! ever written has, so a line read and written again is byte-identical (the golden lines in
//! `crates/stopline-core/tests/golden/`, written before these types existed, prove it).
//!
//! Fields added after the first release are optional (`pid`, `deferred`, `journals_repaired`)
//! so that older logs still read; a line of a known kind that does not parse as its type is a
//! fault of the whole log (`control_wal_corrupt`), never skipped.

use crate::admission::Level;
use crate::ops::Operation;
use crate::scope::Scope;
use crate::state::ControlState;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// One line of the breakglass WAL, tagged by its `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WalRecord {
    /// A latch was published (engage), or found published without its record (deferred).
    LatchEngaged(LatchEngaged),
    /// A scope's epoch advanced (an emergency engage or a recovery).
    EpochAdvance(EpochAdvance),
    /// The halts of exactly one scope were lifted.
    Disengaged(Disengaged),
    /// A recovery plan was fixed.
    RecoveryIntent(RecoveryIntent),
    /// A recovery plan was applied.
    RecoveryApplied(RecoveryApplied),
    /// A drain started.
    DrainStarted(DrainStarted),
    /// The owner's repair changed something.
    RepairApplied(RepairApplied),
}

impl WalRecord {
    /// Every kind a WAL line may have.
    pub const KINDS: [&'static str; 7] = [
        "latch_engaged",
        "epoch_advance",
        "disengaged",
        "recovery_intent",
        "recovery_applied",
        "drain_started",
        "repair_applied",
    ];

    /// Its `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            WalRecord::LatchEngaged(_) => "latch_engaged",
            WalRecord::EpochAdvance(_) => "epoch_advance",
            WalRecord::Disengaged(_) => "disengaged",
            WalRecord::RecoveryIntent(_) => "recovery_intent",
            WalRecord::RecoveryApplied(_) => "recovery_applied",
            WalRecord::DrainStarted(_) => "drain_started",
            WalRecord::RepairApplied(_) => "repair_applied",
        }
    }
}

/// `latch_engaged`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatchEngaged {
    /// The latch id.
    pub latch: String,
    /// Its file in `latches/`.
    pub file: String,
    /// Its scope.
    pub scope: Scope,
    /// Its level.
    pub level: Level,
    /// Who engaged it.
    pub by: String,
    /// Why.
    pub reason: String,
    /// The engaging process (absent in logs written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Recorded by a later process than the engage that published it (`deferred.rs`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deferred: bool,
}

/// Why an epoch advanced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AdvanceCause {
    /// An emergency engage.
    Engage,
    /// A recovery.
    Recover,
    /// The etcd plane found it had gone back behind what this host had seen, and advanced the
    /// machine's epoch past both (`etcd/src/marks.rs`).
    PlaneRefounded,
    /// `stopline token revoke`: one token (and, with `--with-delegates`, its delegates).
    Revoke,
}

impl AdvanceCause {
    /// Its name in the record.
    pub fn as_str(self) -> &'static str {
        match self {
            AdvanceCause::Engage => "engage",
            AdvanceCause::Recover => "recover",
            AdvanceCause::PlaneRefounded => "plane_refounded",
            AdvanceCause::Revoke => "revoke",
        }
    }
}

/// `epoch_advance`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpochAdvance {
    /// The epoch before.
    pub prior_epoch: u64,
    /// The epoch after.
    pub new_epoch: u64,
    /// The scope whose epoch advanced.
    pub scope: Scope,
    /// Every scope's epoch after.
    pub scope_epochs: BTreeMap<String, u64>,
    /// When each scope last advanced, unix seconds (`epoch.json`'s `since`; absent in logs
    /// written before the tail was bounded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scope_since: BTreeMap<String, i64>,
    /// The epoch floor after: the highest revision folded away (absent while nothing was).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub floor: u64,
    /// Why.
    pub cause: AdvanceCause,
    /// Who.
    pub by: String,
    /// Why, in the operator's words.
    pub reason: String,
    /// The advancing process (absent in logs written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl EpochAdvance {
    /// The epoch map this record confirms, written at WAL line `wal_seq`.
    pub fn epoch_map(&self, wal_seq: u64) -> crate::EpochMap {
        crate::EpochMap {
            seq: self.new_epoch,
            scopes: self.scope_epochs.clone(),
            wal_seq,
            since: self.scope_since.clone(),
            floor: self.floor,
        }
    }
}

/// `disengaged`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disengaged {
    /// The scope lifted.
    pub scope: Scope,
    /// The latch files cleared.
    pub latches: Vec<String>,
    /// Who.
    pub by: String,
    /// Why.
    pub reason: String,
}

/// `recovery_intent`: the plan both backends fix. The etcd plane adds the part of the plan that
/// is this host's own directory (`local`); the local directory's plans have none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryIntent {
    /// The plan id.
    pub plan: String,
    /// The scope it recovers.
    pub scope: Scope,
    /// The latch files it clears.
    pub latches: Vec<String>,
    /// The unresolved operations it carries forward.
    pub carried_forward_operations: Vec<CarriedOperation>,
    /// Registries that could not be read when it was fixed.
    pub registry_errors: Vec<String>,
    /// Who.
    pub by: String,
    /// Why.
    pub reason: String,
    /// The etcd plane's local part (`local_plan`, `local_latches`).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalIntent>,
}

/// The part of an etcd plane's recovery plan that is this host's own directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalIntent {
    /// The local directory's own plan, if it had latches of the scope.
    pub local_plan: Option<String>,
    /// The latch files of the local plan.
    pub local_latches: Vec<String>,
}

/// One unresolved operation a recovery plan carries forward (its record and its receipt).
/// Fields in sorted order, the operation's too, as every line is written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CarriedOperation {
    /// True while its writer is alive and has not marked it in doubt.
    pub in_flight: bool,
    /// `<registry>_operation`: `file_operation`, `destination_operation`, …
    pub kind: String,
    /// The operation.
    #[serde(serialize_with = "sorted")]
    pub operation: Operation,
}

/// `recovery_applied`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecoveryApplied {
    /// The plan applied.
    pub plan: String,
    /// Its scope.
    pub scope: Scope,
    /// The epoch after.
    pub new_epoch: u64,
    /// The latch files cleared.
    pub cleared: Vec<String>,
    /// The latch files of the scope still in force (an engage raced the recovery).
    pub surviving: Vec<String>,
    /// The machine state after.
    pub state: ControlState,
    /// Who.
    pub by: String,
}

/// `drain_started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainStarted {
    /// RFC 3339: when the drain ends.
    pub deadline: String,
    /// RFC 3339: the earliest latch's time, before which work was prepared.
    pub prepared_before: String,
    /// Who.
    pub by: String,
    /// Why.
    pub reason: String,
}

/// `repair_applied`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepairApplied {
    /// Bytes of a torn last line truncated.
    pub wal_truncated_bytes: u64,
    /// Whether `epoch.json` was rebuilt from the WAL.
    pub epoch_rebuilt: bool,
    /// The journals whose torn lines were cut out (the local directory; absent in etcd's and
    /// in logs written before journals were repaired).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journals_repaired: Option<Vec<JournalRepair>>,
    /// The evidence files the old bytes were kept in.
    pub evidence: Vec<String>,
    /// Who.
    pub by: String,
    /// Why.
    pub reason: String,
}

/// What the repair did to one journal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalRepair {
    /// Its path in the home.
    pub file: String,
    /// Torn lines cut out.
    pub torn_lines: usize,
    /// Complete records found glued after a torn prefix and kept.
    pub recovered_records: usize,
    /// Bytes the journal lost (torn prefixes and any unterminated last line).
    pub removed_bytes: u64,
    /// The evidence file the old bytes were kept in (under `recovery-evidence/`).
    pub evidence: String,
}

/// Serialize `value` with its keys sorted (through a JSON map, which sorts them).
fn sorted<T: Serialize, S: serde::Serializer>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(serializer)
}

/// The bytes of a WAL line (without its newline): `record` with its envelope, keys sorted.
pub fn line_bytes(seq: u64, prev: &str, ts: &str, record: &WalRecord) -> Vec<u8> {
    let mut body = match serde_json::to_value(record) {
        Ok(Value::Object(map)) => map,
        _ => unreachable!("a WAL record always serializes to an object"),
    };
    body.insert("seq".into(), seq.into());
    body.insert("prev".into(), prev.into());
    body.insert("ts".into(), ts.into());
    serde_json::to_vec(&Value::Object(body)).expect("a JSON map always serializes")
}

/// The record of a line whose `kind` is one of [`WalRecord::KINDS`]: `Ok(None)` for any other
/// kind (the evidence log's lines share the chain format), `Err` when a known kind does not
/// parse as its type.
pub fn parse(kind: &str, line: &[u8]) -> Result<Option<WalRecord>, String> {
    if !WalRecord::KINDS.contains(&kind) {
        return Ok(None);
    }
    serde_json::from_slice(line)
        .map(Some)
        .map_err(|error| format!("a {kind} record that does not parse: {error}"))
}

/// The record of a line already read into a JSON map (a checkpoint's pending intents).
pub fn parse_map(body: &Map<String, Value>) -> Result<Option<WalRecord>, String> {
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or_default();
    let bytes = serde_json::to_vec(body).expect("a JSON map always serializes");
    parse(kind, &bytes)
}
