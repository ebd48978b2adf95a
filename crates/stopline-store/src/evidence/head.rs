//! `evidence/head.json`, the anchor of the newest line: written after each append, read by
//! every append and reader, and checked against a verified chain (the chain alone cannot see an
//! edit of its last line).

use super::Evidence;
use crate::error::StoreError;
use crate::Store;
use serde_json::{json, Value};
use stopline_core::wal::WalEntry;

/// The anchor of the newest evidence line, `evidence/head.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceHead {
    /// The newest line's `seq` when the head was written.
    pub seq: u64,
    /// sha256 hex of that line's bytes.
    pub hash: String,
    /// Where that line is: its segment's file name and the byte offset it starts at (absent in
    /// a head written before the log was segmented: the line is in `log.jsonl`).
    pub at: Option<(String, u64)>,
    /// The drill index's anchor: the newest drill line at or before this one (`Some(None)`:
    /// none), which `evidence/drills.json` must cover (`evidence/drills.rs`); `None` when the
    /// head carries no anchor (written by an older stopline, or by an append that could not
    /// update the index): the index is then built again from a full read.
    pub drills: Option<Option<LineRef>>,
}

/// One line of the evidence log, named by its `seq` and the sha256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct LineRef {
    /// Its `seq`.
    pub seq: u64,
    /// sha256 hex of its bytes.
    pub hash: String,
}

impl LineRef {
    /// The line of a verified entry.
    pub fn of(entry: &WalEntry) -> LineRef {
        LineRef {
            seq: entry.seq,
            hash: entry.hash.clone(),
        }
    }
}

impl Store {
    /// Replace `evidence/head.json` atomically: line `seq` hashes to `hash` and starts at byte
    /// `offset` of `segment`.
    /// `drills` is the drill index's anchor (the newest drill line at or before this one),
    /// left out when it is unknown (`None`).
    pub(crate) fn write_evidence_head(
        &self,
        seq: u64,
        hash: &str,
        segment: &str,
        offset: u64,
        drills: Option<&Option<LineRef>>,
    ) -> Result<(), StoreError> {
        let mut head = json!({"seq": seq, "hash": hash, "segment": segment, "offset": offset});
        if let Some(drills) = drills {
            head["drills"] = serde_json::to_value(drills).unwrap_or(Value::Null);
        }
        self.replace_atomic(
            &self.layout.evidence_head(),
            head.to_string().as_bytes(),
            "evidence.head",
        )
    }
}

/// The `drills` of `evidence/head.json`: `Ok(None)` when the field is absent (an older writer),
/// `Ok(Some(None))` for `null`.
fn head_drills(value: &Value) -> Result<Option<Option<LineRef>>, String> {
    match value.get("drills") {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(anchor) => serde_json::from_value::<LineRef>(anchor.clone())
            .map(|line| Some(Some(line)))
            .map_err(|e| format!("evidence/head.json has a malformed drills anchor: {e}")),
    }
}

impl Evidence<'_> {
    /// Why `entries` (the verified chain's newest records) are not anchored by
    /// `evidence/head.json`, if they are not. The chain cannot see an edit of its newest line;
    /// the head can. One unanchored line is a crash between an append and its anchor; more, a
    /// head naming another hash or a missing line, or a head that cannot be read, means the log
    /// cannot be trusted.
    pub fn anchor_fault(&self, entries: &[WalEntry]) -> Option<String> {
        let last = entries.last().map_or(0, |e| e.seq);
        match self.head() {
            Ok(Some(head)) => match entries.iter().find(|e| e.seq == head.seq) {
                Some(entry) if entry.hash != head.hash => Some(format!(
                    "line {} does not match the head anchor evidence/head.json",
                    entry.seq
                )),
                Some(_) if last - head.seq > 1 => {
                    Some(format!("{} lines after the head anchor", last - head.seq))
                }
                Some(_) => None,
                None => Some(format!(
                    "the head anchor names line {} but the log has {last}",
                    head.seq
                )),
            },
            Ok(None) if last > 1 => Some(format!("{last} lines and no head anchor")),
            Ok(None) => None,
            Err(why) => Some(why),
        }
    }

    /// The anchor of the newest line: `Ok(None)` when there is none yet, `Err` with why when
    /// `evidence/head.json` exists but cannot be read or parsed.
    pub fn head(&self) -> Result<Option<EvidenceHead>, String> {
        let bytes = match self.store.read_optional(&self.store.layout.evidence_head()) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error.to_string()),
        };
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("evidence/head.json is not JSON: {e}"))?;
        let at = match (value.get("segment"), value.get("offset")) {
            (None, None) => None,
            (Some(Value::String(segment)), Some(offset)) if offset.is_u64() => {
                Some((segment.clone(), offset.as_u64().unwrap_or_default()))
            }
            _ => return Err("evidence/head.json has a malformed segment or offset".into()),
        };
        let drills = head_drills(&value)?;
        match (value["seq"].as_u64(), value["hash"].as_str()) {
            (Some(seq), Some(hash)) => Ok(Some(EvidenceHead {
                seq,
                hash: hash.to_string(),
                at,
                drills,
            })),
            _ => Err("evidence/head.json has no seq and hash".into()),
        }
    }
}
