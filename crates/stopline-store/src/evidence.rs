//! The evidence log: breaker trips, budget exhaustions, drills and stop observations, as
//! hash-chained JSON lines in `evidence/log.jsonl` (the same chain format as the WAL).
//!
//! Appending never rewrites: each record is chained to the previous line's hash, so editing any
//! byte breaks the chain at that line, and `verify` names the first break.

use crate::error::StoreError;
use crate::Store;
use serde_json::{Map, Value};
use stopline_core::wal::{self, WalEntry, WalFault};
use stopline_core::RefusalCode;

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
        let log = self.append_log(&path, &log, vec![(kind, record)], "evidence.append")?;
        Ok(log.last().map_or(0, |e| e.seq))
    }

    /// Every evidence entry, verified; or the first fault.
    pub fn evidence_entries(&self) -> Result<Vec<WalEntry>, WalFault> {
        let path = self.layout.evidence_log();
        let _guard = self.lock_log_shared(&path).ok().flatten();
        let bytes = self.read_optional(&path).ok().flatten().unwrap_or_default();
        wal::verify(&bytes).map(|log| log.entries)
    }
}
