//! An evidence append: the one writer of the log, under `evidence/log.lock` held exclusively. It
//! reads the log's end ([`super::tail`]), confirms and anchors a line a crash left after the
//! head, writes the record (a new segment when the current one is full), folds a drill into
//! the drill index, rewrites the head, and prunes old segments at a switch.

use super::{corrupt, segment_name, Evidence};
use crate::error::{IoContext, StoreError};
use serde_json::{Map, Value};
use stopline_core::wal::{self, WalEntry};

impl Evidence<'_> {
    /// Append one evidence record of `kind` (its fields should carry `"schema"`); returns its
    /// `seq`. Reads only the head and the newest line, never the history.
    pub fn append(&self, kind: &str, record: Map<String, Value>) -> Result<u64, StoreError> {
        self.store.ensure_dirs(&[&self.store.layout.evidence()])?;
        let _guard = self
            .store
            .lock_log_exclusive(&self.store.layout.evidence_lock())?;
        let head = self.head().map_err(corrupt)?;
        // The drill index's anchor through the newest line (`None`: unknown, see
        // `evidence/drills.rs`); a fresh log has no drill.
        let mut drills = head.as_ref().map_or(Some(None), |h| h.drills.clone());
        let tail = self.store.evidence_tail(head, true)?;
        // Before a line is written, the line before it is durable and durably anchored: either
        // the head read names it (a head is written only after its line's fsync, and the
        // directory fsync makes the head's rename durable, in case its writer died before its
        // own), or the line follows the head — left by a writer that died before its head,
        // perhaps before its fsync — and is fsynced, its entry with it, and then anchored. So a
        // crash at any step, however many writers it interrupts, leaves at most the newest
        // line after a durable head, and never a head naming a line a power cut can lose
        // (both found by the model checker: `evidence-segments`). A drill line so anchored is
        // folded into the drill index first, if its writer died before doing it.
        let dir = self.store.layout.evidence();
        if let Some(last) = tail.unanchored() {
            self.store.confirm_unanchored(&tail)?;
            let (segment, offset) = &tail.last_at;
            drills = self.store.drills_after(drills, last);
            self.store.write_evidence_head(
                last.seq,
                &last.hash,
                segment,
                *offset,
                drills.as_ref(),
            )?;
        } else {
            self.store
                .fs
                .sync_dir(&dir, "evidence.head.confirm")
                .context(|| format!("syncing {}", dir.display()))?;
        }
        let full = tail.end > 0
            && tail
                .last
                .as_ref()
                .is_some_and(|l| l.seq + 1 - tail.first >= self.store.evidence_segment_records);
        let (segment, offset) = match (&tail.last, full) {
            (Some(last), true) => (segment_name(last.seq + 1), 0),
            _ => (tail.segment.clone(), tail.end),
        };
        let ts = crate::env::rfc3339(self.store.env.now_ms());
        let (seq, mut line) = wal::next_line(tail.last.as_ref(), kind, &ts, record);
        let hash = wal::sha256_hex(&line);
        let record_body: Map<String, Value> = serde_json::from_slice(&line).unwrap_or_default();
        line.push(b'\n');
        let path = self.store.layout.evidence().join(&segment);
        let fp = if offset == 0 && seq > 1 {
            "evidence.segment"
        } else {
            "evidence.append"
        };
        self.store
            .fs
            .append(&path, &line, true, fp)
            .context(|| format!("appending to {}", path.display()))?;
        if offset == 0 {
            // The first line of a segment is acknowledged only once the segment's entry is
            // durable: a power cut must not lose the file with the record in it.
            let dir = self.store.layout.evidence();
            self.store
                .fs
                .sync_dir(&dir, &format!("{fp}.dirsync"))
                .context(|| format!("syncing {}", dir.display()))?;
        }
        // The record is durable already: a drill is folded into the drill index, then the head
        // names it. A head that cannot be written only leaves the newest line unanchored, which
        // `evidence verify` reports and the next append re-anchors.
        let entry = WalEntry {
            seq,
            kind: kind.to_string(),
            body: record_body,
            hash: hash.clone(),
            record: None,
        };
        let drills = self.store.drills_after(drills, &entry);
        if let Err(error) =
            self.store
                .write_evidence_head(seq, &hash, &segment, offset, drills.as_ref())
        {
            tracing::warn!(%error, "cannot anchor the evidence log's newest line");
        }
        if let (Some(keep), true) = (self.store.evidence_keep_segments, offset == 0 && seq > 1) {
            // The record is acknowledged whatever pruning does: a segment that cannot be pruned
            // now is pruned at the next switch.
            if let Err(error) = self.store.prune_evidence(keep) {
                tracing::warn!(%error, "cannot prune the evidence log's old segments");
            }
        }
        Ok(seq)
    }
}
