//! The end of the evidence log as an append (or a reader of the drill index) needs it: the
//! head's line, what follows it, a segment a switch created after it; and the repair of a torn
//! remnant of an append that never returned (kept under `recovery-evidence/`, then cut off).

use super::{corrupt, segment_first, segment_name, EvidenceHead};
use crate::error::{IoContext, StoreError};
use crate::Store;
use serde_json::Map;
use std::io;
use stopline_core::wal::{self, WalEntry, WalFault};

/// Where the next record goes: what an append (or a reader of the drill index) read of the
/// log's end.
pub(crate) struct Tail {
    /// The segment the newest line is in, or an empty segment a crashed switch left after it.
    pub(super) segment: String,
    /// That segment's first record.
    pub(super) first: u64,
    /// Its byte length.
    pub(super) end: u64,
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

impl Store {
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
}
