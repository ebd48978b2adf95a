//! The evidence log: breaker trips, budget exhaustions, drills and stop observations, as
//! hash-chained JSON lines in `evidence/log.jsonl` (the same chain format as the WAL).
//!
//! Appending never rewrites: each record is chained to the previous line's hash, so editing any
//! byte breaks the chain at the next line, and `verify` names the first break. A chain alone
//! cannot see an edit of its *last* line (nothing follows it), so every append also replaces
//! `evidence/head.json` (`{"seq","hash"}` of the newest line) under the same lock: an edit of
//! the last line no longer matches the head. A crash between the two leaves the head one line
//! behind, which a verifier reports as an unanchored tail rather than a break.

use crate::error::StoreError;
use crate::Store;
use serde_json::{json, Map, Value};
use stopline_core::wal::{self, WalEntry, WalFault};
use stopline_core::RefusalCode;

/// The anchor of the newest evidence line, `evidence/head.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvidenceHead {
    /// The newest line's `seq` when the head was written.
    pub seq: u64,
    /// sha256 hex of that line's bytes.
    pub hash: String,
}

impl Store {
    /// Append one evidence record of `kind` (its fields should carry `"schema"`).
    pub fn append_evidence(
        &self,
        kind: &str,
        record: Map<String, Value>,
    ) -> Result<u64, StoreError> {
        let path = self.layout.evidence_log();
        self.ensure_dirs(&[&self.layout.evidence()])?;
        let _guard = self.lock_log_exclusive(&path)?;
        let log = self.read_log(&path, RefusalCode::ControlStateCorrupt)?;
        // Appending after an edited newest line would chain the edit in and hide it for good:
        // refuse unless the head anchors the log as it is.
        if let Some(why) = self.evidence_anchor_fault(&log.entries) {
            return Err(StoreError::corrupt(
                RefusalCode::ControlStateCorrupt,
                format!("{}: {why}; nothing appended", path.display()),
            ));
        }
        let log = self.append_log(&path, &log, vec![(kind, record)], "evidence.append")?;
        if let Some(last) = log.last() {
            // The record is durable already; a head that cannot be written only leaves the
            // newest line unanchored, which `evidence verify` reports.
            let head = json!({"seq": last.seq, "hash": last.hash}).to_string();
            let written = self.replace_atomic(
                &self.layout.evidence().join("head.json"),
                head.as_bytes(),
                "evidence.head",
            );
            if let Err(error) = written {
                tracing::warn!(%error, "cannot anchor the evidence log's newest line");
            }
        }
        Ok(log.last().map_or(0, |e| e.seq))
    }

    /// Every evidence entry, verified; or the first fault.
    pub fn evidence_entries(&self) -> Result<Vec<WalEntry>, WalFault> {
        let path = self.layout.evidence_log();
        // An evidence log that cannot be read is not an empty one: that would fail open for the
        // drill gate ("no failed drill") and for `evidence verify`.
        let unreadable = |error: StoreError| WalFault::Unparsable {
            line: 0,
            why: format!("the evidence log cannot be read: {error}"),
        };
        let _guard = self.lock_log_shared(&path).map_err(unreadable)?;
        let bytes = self
            .read_optional(&path)
            .map_err(unreadable)?
            .unwrap_or_default();
        wal::verify(&bytes).map(|log| log.entries)
    }

    /// Why `entries` (the verified chain) are not anchored by `evidence/head.json`, if they
    /// are not. The chain cannot see an edit of its newest line; the head can. One unanchored
    /// line is a crash between an append and its anchor; more, a head naming another hash or a
    /// missing line, or a head that cannot be read, means the log cannot be trusted.
    pub fn evidence_anchor_fault(&self, entries: &[WalEntry]) -> Option<String> {
        let last = entries.last().map_or(0, |e| e.seq);
        match self.evidence_head() {
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
    pub fn evidence_head(&self) -> Result<Option<EvidenceHead>, String> {
        let path = self.layout.evidence().join("head.json");
        let bytes = match self.read_optional(&path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error.to_string()),
        };
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("evidence/head.json is not JSON: {e}"))?;
        match (value["seq"].as_u64(), value["hash"].as_str()) {
            (Some(seq), Some(hash)) => Ok(Some(EvidenceHead {
                seq,
                hash: hash.to_string(),
            })),
            _ => Err("evidence/head.json has no seq and hash".into()),
        }
    }
}
