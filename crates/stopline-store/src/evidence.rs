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
//! drill index's anchor (`evidence_drills.rs`). An append reads only that: the
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

use crate::error::{IoContext, StoreError};
use crate::Store;
use serde_json::{json, Map, Value};
use std::io;
use stopline_core::wal::{self, WalEntry, WalFault};
use stopline_core::RefusalCode;

/// The schema of `evidence/pruned.json`.
pub const PRUNED_SCHEMA: &str = "stopline.evidence-pruned.v1";

/// Records a segment holds before the next record starts a new one (`[retention]
/// evidence_segment_records`).
pub const DEFAULT_SEGMENT_RECORDS: u64 = 8192;

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
    /// none), which `evidence/drills.json` must cover (`evidence_drills.rs`); `None` when the
    /// head carries no anchor (written by an older stopline, or by an append that could not
    /// update the index): the index is then built again from a full read.
    pub drills: Option<Option<LineRef>>,
}

/// One segment of the evidence log as a whole read found it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SegmentSummary {
    /// Its file name under `evidence/`.
    pub segment: String,
    /// The first record it holds (its name's).
    pub first: u64,
    /// How many records it holds.
    pub records: u64,
}

/// The evidence log read and verified across segments.
#[derive(Debug, Clone, Default)]
pub struct EvidenceChain {
    /// Every verified record, oldest first.
    pub entries: Vec<WalEntry>,
    /// The segments read, oldest first.
    pub segments: Vec<SegmentSummary>,
    /// How many segments the log has (read or not; pruned ones not counted).
    pub total_segments: usize,
    /// The last record pruned with its segment (`[retention] evidence_keep_segments`), if any.
    pub pruned_through: Option<u64>,
}

/// The segment file name whose first record is `first`.
pub fn segment_name(first: u64) -> String {
    if first <= 1 {
        "log.jsonl".into()
    } else {
        format!("log-{first:012}.jsonl")
    }
}

/// The first record of the segment named `name`, when it is a segment's name.
pub fn segment_first(name: &str) -> Option<u64> {
    if name == "log.jsonl" {
        return Some(1);
    }
    let digits = name.strip_prefix("log-")?.strip_suffix(".jsonl")?;
    let first: u64 = digits.parse().ok()?;
    (digits.len() == 12 && first > 1).then_some(first)
}

/// Where the next record goes: what an append (or a reader of the drill index) read of the
/// log's end.
pub(crate) struct Tail {
    /// The segment the newest line is in, or an empty segment a crashed switch left after it.
    segment: String,
    /// That segment's first record.
    first: u64,
    /// Its byte length.
    end: u64,
    /// The newest line (`None`: the log is empty).
    pub(crate) last: Option<WalEntry>,
    /// Where the newest line is: its segment and the byte offset it starts at.
    pub(crate) last_at: (String, u64),
    /// Lines after the head's anchor (a crash between an append and its head leaves one).
    pub(crate) after: u64,
}

impl Tail {
    /// The one line after the head's anchor, verified, when a crash left one.
    pub(crate) fn unanchored(&self) -> Option<&WalEntry> {
        self.last.as_ref().filter(|_| self.after == 1)
    }
}

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

impl Store {
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

    /// Append one evidence record of `kind` (its fields should carry `"schema"`); returns its
    /// `seq`. Reads only the head and the newest line, never the history.
    pub fn append_evidence(
        &self,
        kind: &str,
        record: Map<String, Value>,
    ) -> Result<u64, StoreError> {
        self.ensure_dirs(&[&self.layout.evidence()])?;
        let _guard = self.lock_log_exclusive(&self.layout.evidence_lock())?;
        let head = self.evidence_head().map_err(corrupt)?;
        // The drill index's anchor through the newest line (`None`: unknown, see
        // `evidence_drills.rs`); a fresh log has no drill.
        let mut drills = head.as_ref().map_or(Some(None), |h| h.drills.clone());
        let tail = self.evidence_tail(head, true)?;
        // Before a line is written, the line before it is durable and durably anchored: either
        // the head read names it (a head is written only after its line's fsync, and the
        // directory fsync makes the head's rename durable, in case its writer died before its
        // own), or the line follows the head — left by a writer that died before its head,
        // perhaps before its fsync — and is fsynced, its entry with it, and then anchored. So a
        // crash at any step, however many writers it interrupts, leaves at most the newest
        // line after a durable head, and never a head naming a line a power cut can lose
        // (both found by the model checker: `evidence-segments`). A drill line so anchored is
        // folded into the drill index first, if its writer died before doing it.
        let dir = self.layout.evidence();
        if let Some(last) = tail.unanchored() {
            self.confirm_unanchored(&tail)?;
            let (segment, offset) = &tail.last_at;
            drills = self.drills_after(drills, last);
            self.write_evidence_head(last.seq, &last.hash, segment, *offset, drills.as_ref())?;
        } else {
            self.fs
                .sync_dir(&dir, "evidence.head.confirm")
                .context(|| format!("syncing {}", dir.display()))?;
        }
        let full = tail.end > 0
            && tail
                .last
                .as_ref()
                .is_some_and(|l| l.seq + 1 - tail.first >= self.evidence_segment_records);
        let (segment, offset) = match (&tail.last, full) {
            (Some(last), true) => (segment_name(last.seq + 1), 0),
            _ => (tail.segment.clone(), tail.end),
        };
        let ts = crate::env::rfc3339(self.env.now_ms());
        let (seq, mut line) = wal::next_line(tail.last.as_ref(), kind, &ts, record);
        let hash = wal::sha256_hex(&line);
        let record_body: Map<String, Value> = serde_json::from_slice(&line).unwrap_or_default();
        line.push(b'\n');
        let path = self.layout.evidence().join(&segment);
        let fp = if offset == 0 && seq > 1 {
            "evidence.segment"
        } else {
            "evidence.append"
        };
        self.fs
            .append(&path, &line, true, fp)
            .context(|| format!("appending to {}", path.display()))?;
        if offset == 0 {
            // The first line of a segment is acknowledged only once the segment's entry is
            // durable: a power cut must not lose the file with the record in it.
            let dir = self.layout.evidence();
            self.fs
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
        let drills = self.drills_after(drills, &entry);
        if let Err(error) = self.write_evidence_head(seq, &hash, &segment, offset, drills.as_ref())
        {
            tracing::warn!(%error, "cannot anchor the evidence log's newest line");
        }
        if let (Some(keep), true) = (self.evidence_keep_segments, offset == 0 && seq > 1) {
            // The record is acknowledged whatever pruning does: a segment that cannot be pruned
            // now is pruned at the next switch.
            if let Err(error) = self.prune_evidence(keep) {
                tracing::warn!(%error, "cannot prune the evidence log's old segments");
            }
        }
        Ok(seq)
    }

    /// `[retention] evidence_keep_segments`: remove every segment but the newest `keep`, under
    /// the exclusive lock. First `evidence/pruned.json` says where the kept segments start — the
    /// record before the oldest kept one and its hash (that segment's first `prev`) —, replaced
    /// atomically (`evidence.prune.mark`); only then are the older segments removed
    /// (`evidence.prune.remove`, `.dirsync`). A crash between leaves segments the marker already
    /// covers, which readers skip and the next pruning removes.
    fn prune_evidence(&self, keep: u64) -> Result<(), StoreError> {
        let segments = self.evidence_segments()?;
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        if segments.len() <= keep {
            return Ok(());
        }
        let (cut, oldest) = segments.split_at(segments.len() - keep);
        let (first, name) = &oldest[0];
        let bytes = self
            .read_optional(&self.layout.evidence().join(name))?
            .unwrap_or_default();
        let hash =
            first_prev(&bytes, *first).map_err(|fault| corrupt(format!("{name}: {fault}")))?;
        let mark = || {
            let marker = json!({"schema": PRUNED_SCHEMA, "through": first - 1, "hash": hash});
            self.replace_atomic(
                &self.layout.evidence_pruned(),
                marker.to_string().as_bytes(),
                "evidence.prune.mark",
            )
        };
        #[cfg(feature = "planted-bugs")]
        let mark_first = self.planted != crate::planted::PlantedBug::PruneBeforeMark;
        #[cfg(not(feature = "planted-bugs"))]
        let mark_first = true;
        if mark_first {
            mark()?;
        }
        let dir = self.layout.evidence();
        for (_, name) in cut {
            let path = dir.join(name);
            match self.fs.remove_file(&path, "evidence.prune.remove") {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error).context(|| format!("removing {}", path.display())),
            }
        }
        self.fs
            .sync_dir(&dir, "evidence.prune.dirsync")
            .context(|| format!("syncing {}", dir.display()))?;
        if !mark_first {
            mark()?;
        }
        Ok(())
    }

    /// Where the kept segments start when older ones were pruned: the `seq` of the last pruned
    /// record and its hash. `Ok(None)` when nothing was pruned; `Err` with why when
    /// `evidence/pruned.json` exists but cannot be read or parsed.
    pub fn evidence_pruned(&self) -> Result<Option<(u64, String)>, String> {
        let bytes = match self.read_optional(&self.layout.evidence_pruned()) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(error) => return Err(error.to_string()),
        };
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("evidence/pruned.json is not JSON: {e}"))?;
        match (
            value["schema"].as_str(),
            value["through"].as_u64(),
            value["hash"].as_str(),
        ) {
            (Some(PRUNED_SCHEMA), Some(through), Some(hash)) if through > 0 => {
                Ok(Some((through, hash.to_string())))
            }
            _ => Err("evidence/pruned.json has no schema, through and hash".into()),
        }
    }

    /// Make the one line after the head durable before anything is anchored on it: its
    /// segment fsynced (`evidence.confirm`), then the directory (`evidence.confirm.dirsync`).
    pub(crate) fn confirm_unanchored(&self, tail: &Tail) -> Result<(), StoreError> {
        let dir = self.layout.evidence();
        let path = dir.join(&tail.last_at.0);
        self.fs
            .append(&path, &[], true, "evidence.confirm")
            .context(|| format!("syncing {}", path.display()))?;
        self.fs
            .sync_dir(&dir, "evidence.confirm.dirsync")
            .context(|| format!("syncing {}", dir.display()))
    }

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

    /// The end of the log as an append needs it, under the exclusive lock: from the head, its
    /// line, what follows it, and a segment a switch created after it. Anything that does not
    /// match is a fault, and nothing is appended.
    /// `head` is what the caller read of `evidence/head.json`. With `cut`, a torn remnant of an
    /// append that never returned is kept and cut off (an append, under the exclusive lock);
    /// without, it is a fault (a reader, which writes nothing).
    pub(crate) fn evidence_tail(
        &self,
        head: Option<EvidenceHead>,
        cut: bool,
    ) -> Result<Tail, StoreError> {
        let mut tail;
        let mut after: u64;
        match &head {
            Some(EvidenceHead {
                seq,
                hash,
                at: Some((segment, offset)),
                ..
            }) => {
                let first = segment_first(segment)
                    .ok_or_else(|| corrupt(format!("the head names {segment:?}, not a segment")))?;
                let path = self.layout.evidence().join(segment);
                let bytes = match self.fs.read_from(&path, *offset) {
                    Ok(bytes) => bytes,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {
                        return Err(corrupt(format!(
                            "the head anchor names {segment}, which is missing"
                        )))
                    }
                    Err(error) => {
                        return Err(error).context(|| format!("reading {}", path.display()))
                    }
                };
                let len = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| {
                    corrupt(format!("line {seq} is not at the head anchor's offset"))
                })?;
                if wal::sha256_hex(&bytes[..len]) != *hash {
                    return Err(corrupt(format!(
                        "line {seq} does not match the head anchor evidence/head.json"
                    )));
                }
                let anchor = WalEntry {
                    seq: *seq,
                    kind: String::new(),
                    body: Map::new(),
                    hash: hash.clone(),
                    record: None,
                };
                let rest = self.verify_evidence_end(
                    segment,
                    offset + len as u64 + 1,
                    Some((*seq, hash)),
                    &bytes[len + 1..],
                    cut,
                )?;
                after = rest.entries.len() as u64;
                let end = offset + len as u64 + 1 + rest.end.map_or(0, |(len, _)| len);
                let last_at = match rest.end {
                    Some((_, last_len)) if !rest.entries.is_empty() => end - last_len,
                    _ => *offset,
                };
                tail = Tail {
                    segment: segment.clone(),
                    first,
                    end,
                    last: Some(rest.entries.last().cloned().unwrap_or(anchor)),
                    last_at: (segment.clone(), last_at),
                    after: 0,
                };
            }
            // No head yet, or one written before the log was segmented: the log is one segment,
            // `log.jsonl`, read whole this once.
            _ => {
                // Without a head, a later segment means the head was lost: where the chain ends
                // is unknown, and a record appended to `log.jsonl` would fork it.
                if head.is_none() {
                    if let Some((_, name)) = self.evidence_segments()?.iter().find(|(f, _)| *f > 1)
                    {
                        return Err(corrupt(format!(
                            "no head anchor, yet segment {name} exists"
                        )));
                    }
                }
                let path = self.layout.evidence_log();
                let bytes = self.read_optional(&path)?.unwrap_or_default();
                let log = self.verify_evidence_end(&segment_name(1), 0, None, &bytes, cut)?;
                let last_seq = log.last().map_or(0, |e| e.seq);
                after = match &head {
                    None => last_seq,
                    Some(head) => match log.entries.iter().find(|e| e.seq == head.seq) {
                        Some(entry) if entry.hash == head.hash => last_seq - head.seq,
                        Some(_) => {
                            return Err(corrupt(format!(
                                "line {} does not match the head anchor evidence/head.json",
                                head.seq
                            )))
                        }
                        None => {
                            return Err(corrupt(format!(
                                "the head anchor names line {} but the log has {last_seq}",
                                head.seq
                            )))
                        }
                    },
                };
                let (end, last_len) = log.end.unwrap_or((0, 0));
                tail = Tail {
                    segment: segment_name(1),
                    first: 1,
                    end,
                    last: log.last().cloned(),
                    last_at: (segment_name(1), end - last_len),
                    after: 0,
                };
            }
        }
        // A segment switch whose head was never rewritten: the next record's segment exists.
        #[cfg(feature = "planted-bugs")]
        let unseen = self.planted == crate::planted::PlantedBug::SegmentSwitchUnseen;
        #[cfg(not(feature = "planted-bugs"))]
        let unseen = false;
        while let Some(last) = tail.last.clone().filter(|_| !unseen) {
            let next = segment_name(last.seq + 1);
            if next == tail.segment {
                break;
            }
            let path = self.layout.evidence().join(&next);
            let Some(bytes) = self.read_optional(&path)? else {
                break;
            };
            let log =
                self.verify_evidence_end(&next, 0, Some((last.seq, &last.hash)), &bytes, cut)?;
            after += log.entries.len() as u64;
            let (end, last_len) = log.end.unwrap_or((0, 0));
            let last_at = if log.entries.is_empty() {
                tail.last_at.clone()
            } else {
                (next.clone(), end - last_len)
            };
            tail = Tail {
                segment: next,
                first: last.seq + 1,
                end,
                last: log.entries.last().cloned().or(Some(last)),
                last_at,
                after: 0,
            };
            if log.entries.is_empty() {
                break;
            }
        }
        // Appending after an edited newest line would chain the edit in and hide it for good:
        // only the one line a crash can leave unanchored may follow the head.
        if after > 1 {
            return Err(corrupt(match head {
                None => format!("{after} lines and no head anchor"),
                Some(_) => format!("{after} lines after the head anchor"),
            }));
        }
        tail.after = after;
        Ok(tail)
    }

    /// Verify `bytes`, the end of `segment` from byte `at`, after `previous`. A torn last line
    /// there can only be the remnant of an append that never returned (appends hold the lock
    /// and fsync before they return): its bytes are kept under `recovery-evidence/` and cut off
    /// (`evidence.truncate`), so the next record follows the last whole one. Any other fault
    /// refuses the append.
    fn verify_evidence_end(
        &self,
        segment: &str,
        at: u64,
        previous: Option<(u64, &str)>,
        bytes: &[u8],
        cut: bool,
    ) -> Result<stopline_core::wal::WalLog, StoreError> {
        let fault = match wal::verify_segment(previous, bytes) {
            Ok(log) => return Ok(log),
            Err(fault) => fault,
        };
        let (WalFault::TornTail { offset }, true) = (&fault, cut) else {
            return Err(corrupt(format!("{segment}: {fault}")));
        };
        let offset = *offset;
        let whole = wal::verify_segment(previous, &bytes[..offset])
            .map_err(|fault| corrupt(format!("{segment}: {fault}")))?;
        self.cut_torn_evidence(segment, at + offset as u64, &bytes[offset..])?;
        Ok(whole)
    }

    /// The segment names of the evidence log, by first record.
    fn evidence_segments(&self) -> Result<Vec<(u64, String)>, StoreError> {
        let dir = self.layout.evidence();
        let names = match self.fs.read_dir(&dir) {
            Ok(names) => names,
            Err(error) if error.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(error) => return Err(error).context(|| format!("listing {}", dir.display())),
        };
        let mut segments: Vec<(u64, String)> = names
            .into_iter()
            .filter_map(|name| segment_first(&name).map(|first| (first, name)))
            .collect();
        segments.sort();
        Ok(segments)
    }

    /// The evidence log read across segments and verified: every segment from the first with
    /// `all` (`evidence verify --all`, `evidence list`), else the newest two — the current one
    /// and the link into it from the one before (`evidence verify`). Never on a hot path.
    pub fn evidence_chain(&self, all: bool) -> Result<EvidenceChain, WalFault> {
        let _guard = self
            .lock_log_shared(&self.layout.evidence_lock())
            .map_err(unreadable)?;
        self.evidence_chain_held(all)
    }

    /// [`Store::evidence_chain`] for a caller that holds the log's lock.
    pub(crate) fn evidence_chain_held(&self, all: bool) -> Result<EvidenceChain, WalFault> {
        let pruned = self
            .evidence_pruned()
            .map_err(|why| WalFault::Unparsable { line: 0, why })?;
        let mut segments = self.evidence_segments().map_err(unreadable)?;
        // Segments the pruning marker covers are gone or going (a crash before their removal).
        if let Some((through, _)) = &pruned {
            segments.retain(|(first, _)| first > through);
        }
        let start = if all {
            0
        } else {
            segments.len().saturating_sub(2)
        };
        let mut chain = EvidenceChain {
            total_segments: segments.len(),
            pruned_through: pruned.as_ref().map(|(through, _)| *through),
            ..EvidenceChain::default()
        };
        // With `all`, the chain starts at record 1, or right after the pruned records, chained
        // to the last of them.
        let mut previous: Option<(u64, String)> = pruned.filter(|_| all);
        for (i, (first, name)) in segments.iter().enumerate().skip(start) {
            let bytes = self
                .read_optional(&self.layout.evidence().join(name))
                .map_err(unreadable)?
                .unwrap_or_default();
            let expected = match &previous {
                Some((seq, _)) => seq + 1,
                None if all => 1,
                // The oldest segment read without its predecessor: its first line's link is
                // taken as it is (the segment before is verified only with `all`).
                None => *first,
            };
            if *first != expected {
                return Err(if *first > expected {
                    WalFault::Missing {
                        line: seq_line(expected),
                        last: first - 1,
                    }
                } else {
                    WalFault::Gap {
                        line: seq_line(expected),
                        expected,
                        found: *first,
                    }
                });
            }
            let link = match &previous {
                Some((seq, hash)) => Some((*seq, hash.clone())),
                None if *first == 1 => None,
                None => Some((first - 1, first_prev(&bytes, *first)?)),
            };
            let log = wal::verify_segment(link.as_ref().map(|(s, h)| (*s, h.as_str())), &bytes)?;
            if log.entries.is_empty() && i + 1 < segments.len() {
                return Err(WalFault::Unparsable {
                    line: seq_line(*first),
                    why: format!("{name} is empty, yet later segments follow it"),
                });
            }
            chain.segments.push(SegmentSummary {
                segment: name.clone(),
                first: *first,
                records: log.entries.len() as u64,
            });
            if let Some(last) = log.entries.last() {
                previous = Some((last.seq, last.hash.clone()));
            } else if let Some(link) = link {
                previous = Some(link);
            }
            chain.entries.extend(log.entries);
        }
        Ok(chain)
    }

    /// Every evidence entry across every segment, verified; or the first fault.
    pub fn evidence_entries(&self) -> Result<Vec<WalEntry>, WalFault> {
        self.evidence_chain(true).map(|chain| chain.entries)
    }

    /// Why `entries` (the verified chain's newest records) are not anchored by
    /// `evidence/head.json`, if they are not. The chain cannot see an edit of its newest line;
    /// the head can. One unanchored line is a crash between an append and its anchor; more, a
    /// head naming another hash or a missing line, or a head that cannot be read, means the log
    /// cannot be trusted.
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
        let bytes = match self.read_optional(&self.layout.evidence_head()) {
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

/// The `prev` of a segment's first line (the hash of the record before it), for a segment read
/// without the one before.
fn first_prev(bytes: &[u8], first: u64) -> Result<String, WalFault> {
    let unparsable = |why: &str| WalFault::Unparsable {
        line: seq_line(first),
        why: why.into(),
    };
    let end = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| unparsable("the segment's first line is torn or missing"))?;
    let line: Value =
        serde_json::from_slice(&bytes[..end]).map_err(|e| unparsable(&e.to_string()))?;
    line.get("prev")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| unparsable("no prev"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_say_their_first_record() {
        assert_eq!(segment_name(1), "log.jsonl");
        assert_eq!(segment_name(8193), "log-000000008193.jsonl");
        for first in [1, 2, 8193, 999_999_999_999] {
            assert_eq!(segment_first(&segment_name(first)), Some(first));
        }
        for name in [
            "log-1.jsonl",
            "log-000000000001.jsonl",
            "head.json",
            "log.lock",
        ] {
            assert_eq!(segment_first(name), None, "{name}");
        }
    }

    fn record(n: u64) -> Map<String, Value> {
        crate::chain::fields([("schema", json!("test.v1")), ("n", json!(n))])
    }

    /// A home whose evidence log has `records` records, three to a segment.
    fn log_of(records: u64) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home")).with_evidence_segment_records(3);
        for n in 1..=records {
            assert_eq!(store.append_evidence("test", record(n)).unwrap(), n);
        }
        (dir, store)
    }

    fn lines(store: &Store, first: u64) -> Vec<Value> {
        let text = std::fs::read_to_string(store.layout().evidence_segment(first)).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Flip one digit of record `seq`'s `n` field in its segment.
    fn damage(store: &Store, first: u64, seq: u64) {
        let path = store.layout().evidence_segment(first);
        let text = std::fs::read_to_string(&path).unwrap();
        let changed = text.replace(&format!("\"n\":{seq}"), &format!("\"n\":{}", seq + 10));
        assert_ne!(changed, text);
        std::fs::write(&path, changed).unwrap();
    }

    #[test]
    fn the_chain_runs_on_across_segments() {
        let (_dir, store) = log_of(8);
        let names: Vec<String> = store
            .evidence_segments()
            .unwrap()
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        assert_eq!(
            names,
            [
                "log.jsonl",
                "log-000000000004.jsonl",
                "log-000000000007.jsonl"
            ]
        );
        // The first line of a segment chains to the last line of the one before.
        for (before, first) in [(1, 4), (4, 7)] {
            let last = lines(&store, before).pop().unwrap();
            let line = std::fs::read_to_string(store.layout().evidence_segment(before)).unwrap();
            let last_bytes = line.lines().last().unwrap();
            assert_eq!(last["seq"], first - 1);
            assert_eq!(lines(&store, first)[0]["seq"], first);
            assert_eq!(
                lines(&store, first)[0]["prev"],
                wal::sha256_hex(last_bytes.as_bytes())
            );
        }
        let chain = store.evidence_chain(true).unwrap();
        let seqs: Vec<u64> = chain.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=8).collect::<Vec<u64>>());
        assert_eq!(chain.total_segments, 3);
        assert_eq!(store.evidence_anchor_fault(&chain.entries), None);
        // Without `all`: the newest two segments, linked.
        let tail = store.evidence_chain(false).unwrap();
        let seqs: Vec<u64> = tail.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (4..=8).collect::<Vec<u64>>());
        let head = store.evidence_head().unwrap().unwrap();
        assert_eq!(head.seq, 8);
        assert_eq!(head.at.unwrap().0, "log-000000000007.jsonl");
    }

    #[test]
    fn an_append_reads_only_the_tail_so_a_damaged_or_missing_old_segment_is_found_by_a_whole_read()
    {
        let (_dir, store) = log_of(7);
        damage(&store, 1, 2);
        assert_eq!(store.append_evidence("test", record(8)).unwrap(), 8);
        assert_eq!(
            store.evidence_chain(true).unwrap_err(),
            WalFault::BrokenLink { line: 3 }
        );
        assert!(
            store.evidence_chain(false).is_ok(),
            "the newest two are whole"
        );
        std::fs::remove_file(store.layout().evidence_segment(4)).unwrap();
        assert_eq!(store.append_evidence("test", record(9)).unwrap(), 9);
        std::fs::remove_file(store.layout().evidence_segment(1)).unwrap();
        assert_eq!(store.append_evidence("test", record(10)).unwrap(), 10);
        assert_eq!(
            store.evidence_chain(true).unwrap_err(),
            WalFault::Missing { line: 1, last: 6 }
        );
        let tail = store.evidence_chain(false).unwrap();
        assert_eq!(tail.entries.first().map(|e| e.seq), Some(7));
        assert_eq!(tail.entries.last().map(|e| e.seq), Some(10));
    }

    #[test]
    fn an_edited_newest_line_or_a_lost_head_refuses_the_append() {
        let (_dir, store) = log_of(5);
        let segment = store.layout().evidence_segment(4);
        let pristine = std::fs::read(&segment).unwrap();
        damage(&store, 4, 5);
        let error = store.append_evidence("test", record(6)).unwrap_err();
        assert!(error.to_string().contains("head anchor"), "{error}");
        assert_eq!(lines(&store, 4).len(), 2, "nothing appended");
        std::fs::write(&segment, pristine).unwrap();
        assert_eq!(store.append_evidence("test", record(6)).unwrap(), 6);
        // A lost head with later segments: where the chain ends is unknown.
        std::fs::remove_file(store.layout().evidence_head()).unwrap();
        let error = store.append_evidence("test", record(7)).unwrap_err();
        assert!(error.to_string().contains("no head anchor"), "{error}");
    }

    #[test]
    fn a_switch_whose_head_was_not_rewritten_or_whose_segment_is_empty_is_carried_on() {
        // The head one line behind across a switch (a crash after the new segment's first
        // record, before the head): the next append follows that record.
        let (_dir, store) = log_of(3);
        let head = std::fs::read(store.layout().evidence_head()).unwrap();
        assert_eq!(store.append_evidence("test", record(4)).unwrap(), 4);
        std::fs::write(store.layout().evidence_head(), &head).unwrap();
        assert_eq!(store.append_evidence("test", record(5)).unwrap(), 5);
        let seqs: Vec<u64> = lines(&store, 4)
            .iter()
            .map(|l| l["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, [4, 5]);
        assert_eq!(store.evidence_entries().unwrap().len(), 5);
        // A segment a crashed switch left empty: the next record is written into it.
        let (_dir, store) = log_of(6);
        std::fs::write(store.layout().evidence_segment(7), b"").unwrap();
        assert_eq!(store.append_evidence("test", record(7)).unwrap(), 7);
        assert_eq!(lines(&store, 7).len(), 1);
        assert_eq!(store.evidence_entries().unwrap().len(), 7);
        // Two lines after the head is more than a crash leaves.
        let (_dir, store) = log_of(3);
        let head = std::fs::read(store.layout().evidence_head()).unwrap();
        store.append_evidence("test", record(4)).unwrap();
        store.append_evidence("test", record(5)).unwrap();
        std::fs::write(store.layout().evidence_head(), &head).unwrap();
        let error = store.append_evidence("test", record(6)).unwrap_err();
        assert!(
            error.to_string().contains("2 lines after the head"),
            "{error}"
        );
    }

    #[test]
    fn a_torn_remnant_of_an_append_that_never_returned_is_kept_and_cut_off() {
        let (_dir, store) = log_of(4);
        let segment = store.layout().evidence_segment(4);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&segment)
            .unwrap();
        std::io::Write::write_all(&mut file, b"{\"seq\":5,\"prev\":\"ab").unwrap();
        assert!(matches!(
            store.evidence_chain(true),
            Err(WalFault::TornTail { .. })
        ));
        assert_eq!(store.append_evidence("test", record(5)).unwrap(), 5);
        assert_eq!(lines(&store, 4).len(), 2);
        assert_eq!(store.evidence_entries().unwrap().len(), 5);
        let kept = std::fs::read_dir(store.layout().recovery_evidence())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect::<Vec<_>>();
        assert!(
            kept.len() == 1 && kept[0].starts_with("evidence-log-000000000004.jsonl-"),
            "{kept:?}"
        );
    }

    #[test]
    fn pruning_keeps_the_newest_segments_and_says_where_they_start() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path().join("home"))
            .with_evidence_segment_records(3)
            .with_evidence_keep_segments(Some(2));
        let mut saved = Vec::new();
        for n in 1..=10 {
            if n == 10 {
                saved = std::fs::read(store.layout().evidence_segment(4)).unwrap();
            }
            store.append_evidence("test", record(n)).unwrap();
        }
        let names: Vec<u64> = store
            .evidence_segments()
            .unwrap()
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(names, [7, 10]);
        let chain = store.evidence_chain(true).unwrap();
        let seqs: Vec<u64> = chain.entries.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [7, 8, 9, 10]);
        assert_eq!(chain.pruned_through, Some(6));
        let (through, hash) = store.evidence_pruned().unwrap().unwrap();
        assert_eq!(through, 6);
        assert_eq!(
            Some(Value::String(hash)),
            lines(&store, 7)[0].get("prev").cloned()
        );
        // A crash after the marker, before the removal: the covered segment is skipped, and the
        // next pruning removes it.
        std::fs::write(store.layout().evidence_segment(4), &saved).unwrap();
        assert_eq!(store.evidence_chain(true).unwrap().entries.len(), 4);
        for n in 11..=13 {
            store.append_evidence("test", record(n)).unwrap();
        }
        assert!(!store.layout().evidence_segment(4).exists());
        assert_eq!(store.evidence_pruned().unwrap().unwrap().0, 9);
        // Segments gone with nothing saying they were pruned: the records are missing.
        std::fs::remove_file(store.layout().evidence_pruned()).unwrap();
        assert_eq!(
            store.evidence_chain(true).unwrap_err(),
            WalFault::Missing { line: 1, last: 9 }
        );
        std::fs::write(store.layout().evidence_pruned(), b"{").unwrap();
        assert!(store.evidence_chain(true).is_err());
        assert!(
            store.evidence_chain(false).is_err(),
            "a marker that cannot be read"
        );
    }

    #[test]
    fn a_head_written_before_segments_is_read_from_the_whole_first_segment() {
        let (_dir, store) = log_of(2);
        let head = store.evidence_head().unwrap().unwrap();
        let legacy = json!({"seq": head.seq, "hash": head.hash}).to_string();
        std::fs::write(store.layout().evidence_head(), legacy).unwrap();
        assert_eq!(store.append_evidence("test", record(3)).unwrap(), 3);
        assert_eq!(store.append_evidence("test", record(4)).unwrap(), 4);
        assert_eq!(lines(&store, 4).len(), 1);
        assert_eq!(store.evidence_entries().unwrap().len(), 4);
    }
}
