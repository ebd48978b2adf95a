//! The evidence log: breaker trips, budget exhaustions, drills and stop observations, as
//! hash-chained JSON lines (the same chain format as the WAL) in segments under `evidence/`.
//!
//! **Segments.** `evidence/log.jsonl` holds records 1, 2, …; once a segment holds
//! `[retention] evidence_segment_records` records, the next record starts a new segment named
//! by its own `seq`, `evidence/log-<seq, 12 digits>.jsonl`. Its first line's `prev` is the hash
//! of the previous segment's last line, so the chain runs on across segments unbroken, and a
//! segment's name says which record it must start with: a missing segment is a gap of known
//! records. Segments are only ever appended to or created, never renamed or rewritten.
//!
//! **The head.** A chain alone cannot see an edit of its *last* line (nothing follows it), so
//! every append also replaces `evidence/head.json` — `{"seq","hash","segment","offset"}` of the
//! newest line: its hash, the segment that holds it and the byte offset where it starts —
//! atomically (temporary file, fsync, rename, directory fsync); it also carries `"drills"`, the
//! drill index's anchor (`evidence/drills.rs`). An append reads only that: the
//! head, the newest line at its offset (which must hash to the head), whatever follows it there,
//! and whether the segment the next record would start exists. It never reads the history, so
//! its cost does not grow with it.
//!
//! **Crashes.** A record is acknowledged once its line is fsynced — and, when it is the first
//! of its segment, once the directory is fsynced too (the segment's entry is then durable).
//! Only then is the head rewritten. A crash before that leaves the head one line behind: the
//! next append finds that line after the anchor (or as the only line of the next segment), and
//! `evidence verify` reports it as one unanchored line, not a break. A crash while a segment is
//! created may leave it empty; the next record is written into it. Appends hold
//! `evidence/log.lock` exclusively (readers share it), so an unterminated last line can only be
//! what a power cut left of an append that never returned: the next append keeps its bytes
//! under `recovery-evidence/` and cuts it off, then chains on from the last whole line. Any
//! other fault at the end (an edited newest line, a head that names no line, more than one line
//! after the head) refuses the append: nothing is chained onto a line that cannot be trusted.

mod append;
pub mod drills;
mod head;
mod prune;
mod read;
mod segments;
mod tail;
#[cfg(test)]
mod tests;

pub use head::{EvidenceHead, LineRef};
pub use prune::PRUNED_SCHEMA;
pub use read::EvidenceChain;
pub use segments::{segment_first, segment_name, SegmentSummary};

use crate::error::StoreError;
use crate::Store;
use stopline_core::wal::WalFault;
use stopline_core::RefusalCode;

/// Records a segment holds before the next record starts a new one (`[retention]
/// evidence_segment_records`).
pub const DEFAULT_SEGMENT_RECORDS: u64 = 8192;

fn seq_line(line: u64) -> usize {
    usize::try_from(line).unwrap_or(usize::MAX)
}

/// An evidence log that cannot be read is not an empty one: that would fail open for the drill
/// gate ("no failed drill") and for `evidence verify`.
fn unreadable(error: StoreError) -> WalFault {
    WalFault::Unparsable {
        line: 0,
        why: format!("the evidence log cannot be read: {error}"),
    }
}

fn corrupt(why: String) -> StoreError {
    StoreError::corrupt(
        RefusalCode::ControlStateCorrupt,
        format!("the evidence log: {why}; nothing appended"),
    )
}

/// The evidence log of one control directory ([`Store::evidence`]): its appends, head, whole
/// verified reads, pruning marker and drill index.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    store: &'a Store,
}

impl Store {
    /// The evidence log of this control directory.
    pub fn evidence(&self) -> Evidence<'_> {
        Evidence { store: self }
    }

    /// Records a segment of the evidence log holds before the next starts a new one.
    pub fn with_evidence_segment_records(mut self, records: u64) -> Store {
        self.evidence_segment_records = records.max(1);
        self
    }

    /// Keep only the newest `segments` evidence segments (the current one included), pruning
    /// older ones at each segment switch; `None` keeps every segment.
    pub fn with_evidence_keep_segments(mut self, segments: Option<u64>) -> Store {
        self.evidence_keep_segments = segments.map(|n| n.max(1));
        self
    }
}
