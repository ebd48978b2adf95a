//! The hash-chained write-ahead log: line format, verification and the latch ledger.
//!
//! Each line is one JSON object with `seq` (1, 2, 3 … no gaps), `prev` (sha256 hex of the
//! previous line's bytes without its newline; 64 zeros for the first), `kind`, `ts` and the
//! kind's fields. Verification is pure and total: it returns the entries or the first fault. A
//! gate treats any fault as `control_wal_corrupt`; only the owner's repair may truncate a torn
//! (unterminated) last line, and nothing ever skips a broken line.

use crate::wal_record::{self, RecoveryIntent, WalRecord};
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

/// The `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// One verified WAL line.
#[derive(Debug, Clone, PartialEq)]
pub struct WalEntry {
    /// Its sequence number.
    pub seq: u64,
    /// Its kind.
    pub kind: String,
    /// The whole object.
    pub body: Map<String, Value>,
    /// sha256 hex of its bytes (the next line's `prev`).
    pub hash: String,
    /// Its record, when its kind is a WAL record's ([`WalRecord::KINDS`]; the evidence log's
    /// lines have none).
    pub record: Option<WalRecord>,
}

impl WalEntry {
    /// Its `recovery_intent`, if it is one.
    pub fn intent(&self) -> Option<&RecoveryIntent> {
        match &self.record {
            Some(WalRecord::RecoveryIntent(intent)) => Some(intent),
            _ => None,
        }
    }
}

/// Why a WAL cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "fault", rename_all = "snake_case")]
pub enum WalFault {
    /// The last line has no terminating newline: a crash's remnant (repairable).
    #[error("torn last line at byte {offset}")]
    TornTail {
        /// Byte offset where the torn line starts.
        offset: usize,
    },
    /// A line is not a JSON object with the required fields.
    #[error("line {line} is unparsable: {why}")]
    Unparsable {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        why: String,
    },
    /// A line's `seq` is not the previous plus one.
    #[error("line {line}: seq {found} where {expected} was expected")]
    Gap {
        /// 1-based line number.
        line: usize,
        /// The expected seq.
        expected: u64,
        /// The seq found.
        found: u64,
    },
    /// A line's `prev` does not hash the previous line.
    #[error("line {line}: prev does not match the previous line's hash")]
    BrokenLink {
        /// 1-based line number.
        line: usize,
    },
    /// A segmented log (the evidence log) lacks the segment that held records `line..=last`:
    /// the next segment there is starts later.
    #[error("records {line} to {last} are missing: no segment holds them")]
    Missing {
        /// The first missing record's seq.
        line: usize,
        /// The last missing record's seq.
        last: u64,
    },
}

/// The verified contents of a WAL.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WalLog {
    /// Every line, in order — or, when read from a checkpoint ([`WalLog::base`]), every line
    /// after the checkpoint's anchor.
    pub entries: Vec<WalEntry>,
    /// When read from a checkpoint: its anchor line and the fold of every line up to it.
    pub base: Option<Box<WalBase>>,
    /// Byte length of the whole log and of its last line (newline included), when it was read
    /// from a file; what a checkpoint is anchored by.
    pub end: Option<(u64, u64)>,
}

/// The last `epoch_advance` of a log: the epoch map it confirms (its `wal_seq` the line's seq).
pub type EpochAdvance = crate::EpochMap;

/// What a checkpoint carries: the fold of every line up to and including its anchor, as much of
/// it as any reader of the log asks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct WalFold {
    /// The ledger: latch files recorded engaged and not cleared.
    pub uncleared: BTreeSet<String>,
    /// Latch files recorded engaged that a reader must still know as recorded (the ledger's).
    pub recorded: BTreeSet<String>,
    /// The last `epoch_advance`.
    pub last_epoch_advance: Option<EpochAdvance>,
    /// Every `recovery_intent` not yet applied: seq, hash and the whole line.
    pub pending_intents: Vec<(u64, String, Map<String, Value>)>,
}

/// A log's starting point when read from a checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct WalBase {
    /// The last line the checkpoint covers (its hash verified against the checkpoint).
    pub anchor: WalEntry,
    /// The fold of every line up to it.
    pub fold: WalFold,
    /// The fold's pending intents as entries.
    pub intents: Vec<WalEntry>,
}

/// sha256 hex of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Verify a whole WAL. A missing file is the empty WAL; the caller passes `b""`.
pub fn verify(bytes: &[u8]) -> Result<WalLog, WalFault> {
    verify_segment(None, bytes)
}

/// Verify one segment of a chained log whose first line follows `previous` (the `seq` and hash
/// of the line before it, the last of the previous segment; `None`: the log's first line, with
/// `prev` [`GENESIS`]). Line numbers in a fault are the lines' `seq`s, so a fault names the same
/// line whichever segment holds it. `verify` is the segment that starts the log.
pub fn verify_segment(previous: Option<(u64, &str)>, bytes: &[u8]) -> Result<WalLog, WalFault> {
    let before = previous.map(|(seq, hash)| WalEntry {
        seq,
        kind: String::new(),
        body: Map::new(),
        hash: hash.to_string(),
        record: None,
    });
    let first_line = usize::try_from(previous.map_or(0, |(seq, _)| seq)).unwrap_or(usize::MAX);
    let mut entries: Vec<WalEntry> = Vec::new();
    let mut offset = 0usize;
    let mut line_no = first_line;
    while offset < bytes.len() {
        line_no += 1;
        let Some(end) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            return Err(WalFault::TornTail { offset });
        };
        let line = &bytes[offset..offset + end];
        let entry = parse_line(line, line_no, entries.last().or(before.as_ref()))?;
        entries.push(entry);
        offset += end + 1;
    }
    let last_len = entries
        .last()
        .map(|_| {
            let body = &bytes[..bytes.len() - 1];
            (body.len() - body.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1) + 1) as u64
        })
        .unwrap_or(0);
    Ok(WalLog {
        entries,
        base: None,
        end: Some((bytes.len() as u64, last_len)),
    })
}

/// Verify the lines after a checkpoint: `anchor` is the checkpoint's last line (without its
/// newline; the caller has checked its hash), `fold` what the checkpoint carries, `tail` every
/// byte after the anchor's newline and `offset` where the tail starts in the file. Line numbers
/// in a fault count from the anchor (line 0).
pub fn verify_from(
    anchor: &[u8],
    fold: WalFold,
    tail: &[u8],
    offset: u64,
) -> Result<WalLog, WalFault> {
    let unparsable = |why: String| WalFault::Unparsable { line: 0, why };
    let body: Map<String, Value> = match serde_json::from_slice(anchor) {
        Ok(Value::Object(map)) => map,
        _ => {
            return Err(unparsable(
                "the checkpoint's anchor line is not a JSON object".into(),
            ))
        }
    };
    let seq = body
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| unparsable("the checkpoint's anchor line has no seq".into()))?;
    let kind = body
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let record = wal_record::parse(&kind, anchor).map_err(unparsable)?;
    let anchor_entry = WalEntry {
        seq,
        kind,
        hash: sha256_hex(anchor),
        body,
        record,
    };
    let intents = fold
        .pending_intents
        .iter()
        .map(|(seq, hash, body)| {
            let record = wal_record::parse_map(body).map_err(unparsable)?;
            if !matches!(record, Some(WalRecord::RecoveryIntent(_))) {
                return Err(unparsable(format!(
                    "the checkpoint's pending intent {seq} is not a recovery_intent"
                )));
            }
            Ok(WalEntry {
                seq: *seq,
                kind: "recovery_intent".into(),
                hash: hash.clone(),
                body: body.clone(),
                record,
            })
        })
        .collect::<Result<_, _>>()?;
    let mut entries: Vec<WalEntry> = Vec::new();
    let mut at = 0usize;
    let mut line_no = 0usize;
    let mut last_len = anchor.len() as u64 + 1;
    while at < tail.len() {
        line_no += 1;
        let Some(end) = tail[at..].iter().position(|&b| b == b'\n') else {
            return Err(WalFault::TornTail {
                offset: offset as usize + at,
            });
        };
        let line = &tail[at..at + end];
        let entry = parse_line(line, line_no, Some(entries.last().unwrap_or(&anchor_entry)))?;
        entries.push(entry);
        last_len = end as u64 + 1;
        at += end + 1;
    }
    Ok(WalLog {
        entries,
        base: Some(Box::new(WalBase {
            anchor: anchor_entry,
            fold,
            intents,
        })),
        end: Some((offset + tail.len() as u64, last_len)),
    })
}

/// Verify `appended`, the bytes a file grew by after `log` was read from it, as lines that
/// continue `log` (`seq` without gaps, `prev` chained from its last line), and return `log`
/// with them: what a reader that follows the file (remembering what it verified) needs, so
/// it never verifies the same line twice. The end recorded in `log` must be where `appended`
/// starts. An unterminated last line is [`WalFault::TornTail`], as for a whole read; line
/// numbers in a fault count from the first appended line (line 1).
pub fn verify_appended(mut log: WalLog, appended: &[u8]) -> Result<WalLog, WalFault> {
    let (start, mut last_len) = log.end.unwrap_or((0, 0));
    let mut at = 0usize;
    let mut line_no = 0usize;
    while at < appended.len() {
        line_no += 1;
        let Some(end) = appended[at..].iter().position(|&b| b == b'\n') else {
            return Err(WalFault::TornTail {
                offset: start as usize + at,
            });
        };
        let entry = parse_line(&appended[at..at + end], line_no, log.last())?;
        log.entries.push(entry);
        last_len = end as u64 + 1;
        at += end + 1;
    }
    log.end = Some((start + appended.len() as u64, last_len));
    Ok(log)
}

fn parse_line(
    line: &[u8],
    line_no: usize,
    previous: Option<&WalEntry>,
) -> Result<WalEntry, WalFault> {
    let unparsable = |why: &str| WalFault::Unparsable {
        line: line_no,
        why: why.to_string(),
    };
    let body: Map<String, Value> = match serde_json::from_slice(line) {
        Ok(Value::Object(map)) => map,
        Ok(_) => return Err(unparsable("not a JSON object")),
        Err(error) => return Err(unparsable(&error.to_string())),
    };
    let seq = body
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| unparsable("no seq"))?;
    let prev = body
        .get("prev")
        .and_then(Value::as_str)
        .ok_or_else(|| unparsable("no prev"))?;
    let kind = body
        .get("kind")
        .and_then(Value::as_str)
        .ok_or_else(|| unparsable("no kind"))?;
    body.get("ts")
        .and_then(Value::as_str)
        .ok_or_else(|| unparsable("no ts"))?;
    let (expected_seq, expected_prev) = match previous {
        Some(p) => (p.seq + 1, p.hash.as_str()),
        None => (1, GENESIS),
    };
    if seq != expected_seq {
        return Err(WalFault::Gap {
            line: line_no,
            expected: expected_seq,
            found: seq,
        });
    }
    if prev != expected_prev {
        return Err(WalFault::BrokenLink { line: line_no });
    }
    let record = wal_record::parse(kind, line).map_err(|why| unparsable(&why))?;
    Ok(WalEntry {
        seq,
        kind: kind.to_string(),
        hash: sha256_hex(line),
        body,
        record,
    })
}

/// Build the next line (without newline) after `last`, with `kind`, `ts` and `fields`.
pub fn next_line(
    last: Option<&WalEntry>,
    kind: &str,
    ts: &str,
    fields: Map<String, Value>,
) -> (u64, Vec<u8>) {
    let seq = last.map_or(1, |e| e.seq + 1);
    let prev = last.map_or(GENESIS.to_string(), |e| e.hash.clone());
    let mut body = Map::new();
    body.insert("seq".into(), seq.into());
    body.insert("prev".into(), prev.into());
    body.insert("kind".into(), kind.into());
    body.insert("ts".into(), ts.into());
    for (key, value) in fields {
        if !matches!(key.as_str(), "seq" | "prev" | "kind" | "ts") {
            body.insert(key, value);
        }
    }
    let bytes = serde_json::to_vec(&Value::Object(body)).expect("a JSON map always serializes");
    (seq, bytes)
}

/// Build the next WAL line (without newline) after `last`: `record` at `ts`.
pub fn record_line(last: Option<&WalEntry>, ts: &str, record: &WalRecord) -> (u64, Vec<u8>) {
    let seq = last.map_or(1, |e| e.seq + 1);
    let prev = last.map_or(GENESIS, |e| e.hash.as_str());
    (seq, wal_record::line_bytes(seq, prev, ts, record))
}

/// The entry of a line built by [`record_line`].
pub fn record_entry(seq: u64, line: &[u8], record: WalRecord) -> WalEntry {
    WalEntry {
        seq,
        kind: record.kind().to_string(),
        hash: sha256_hex(line),
        body: serde_json::from_slice(line).unwrap_or_default(),
        record: Some(record),
    }
}

impl WalLog {
    /// The last entry (the checkpoint's anchor when nothing follows it).
    pub fn last(&self) -> Option<&WalEntry> {
        self.entries
            .last()
            .or_else(|| self.base.as_ref().map(|b| &b.anchor))
    }

    /// Lines after the checkpoint this log was read from (all of them without one).
    pub fn lines_since_checkpoint(&self) -> usize {
        self.entries.len()
    }

    /// The fold a checkpoint after this log's last line carries. Of the recorded latches
    /// only the ledger's are kept, so the fold stays as small as what is live: a latch file
    /// left in `latches/` after its record was cleared (a crash between a disengage's record
    /// and the removal) reads as unrecorded after the checkpoint, and is recorded again
    /// (`deferred.rs`) — it is in force, so the record then says so.
    pub fn fold(&self) -> WalFold {
        let uncleared = self.uncleared_latches();
        let recorded = uncleared.clone();
        let pending_intents = self
            .intents()
            .filter(|e| e.intent().is_some_and(|i| !self.plan_applied(&i.plan)))
            .map(|e| (e.seq, e.hash.clone(), e.body.clone()))
            .collect();
        WalFold {
            uncleared,
            recorded,
            last_epoch_advance: self.last_epoch_advance(),
            pending_intents,
        }
    }

    /// Every `recovery_intent` this log knows: the checkpoint's pending ones, then those after.
    pub fn intents(&self) -> impl Iterator<Item = &WalEntry> {
        self.base
            .iter()
            .flat_map(|b| b.intents.iter())
            .chain(self.entries.iter().filter(|e| e.intent().is_some()))
    }

    /// The epoch map the last `epoch_advance` entry confirms, its `wal_seq` the entry's seq.
    pub fn last_epoch_advance(&self) -> Option<EpochAdvance> {
        let after = self.last_epoch_advance_after();
        after.or_else(|| {
            self.base
                .as_ref()
                .and_then(|b| b.fold.last_epoch_advance.clone())
        })
    }

    fn last_epoch_advance_after(&self) -> Option<EpochAdvance> {
        self.entries.iter().rev().find_map(|e| match &e.record {
            Some(WalRecord::EpochAdvance(advance)) => Some(advance.epoch_map(e.seq)),
            _ => None,
        })
    }

    /// The ledger: latch file names recorded as engaged and not cleared since
    /// (`disengaged.latches`, `recovery_applied.cleared`).
    pub fn uncleared_latches(&self) -> BTreeSet<String> {
        let mut live = self
            .base
            .as_ref()
            .map(|b| b.fold.uncleared.clone())
            .unwrap_or_default();
        for entry in &self.entries {
            match &entry.record {
                Some(WalRecord::LatchEngaged(engaged)) => {
                    live.insert(engaged.file.clone());
                }
                Some(WalRecord::Disengaged(lifted)) => lifted.latches.iter().for_each(|n| {
                    live.remove(n);
                }),
                Some(WalRecord::RecoveryApplied(applied)) => applied.cleared.iter().for_each(|n| {
                    live.remove(n);
                }),
                _ => {}
            }
        }
        live
    }

    /// Every latch file the log ever recorded as engaged (cleared ones included; from a
    /// checkpoint, those that may still be in `latches/`).
    pub fn recorded_latches(&self) -> BTreeSet<String> {
        let mut recorded = self
            .base
            .as_ref()
            .map(|b| b.fold.recorded.clone())
            .unwrap_or_default();
        recorded.extend(self.entries.iter().filter_map(|e| match &e.record {
            Some(WalRecord::LatchEngaged(engaged)) => Some(engaged.file.clone()),
            _ => None,
        }));
        recorded
    }

    /// The `recovery_intent` whose `plan` is `plan_id` (from a checkpoint: only a plan not
    /// applied before it).
    pub fn recovery_intent(&self, plan_id: &str) -> Option<&RecoveryIntent> {
        let is = |i: &&RecoveryIntent| i.plan == plan_id;
        self.entries
            .iter()
            .rev()
            .filter_map(WalEntry::intent)
            .find(is)
            .or_else(|| {
                self.base
                    .as_ref()
                    .and_then(|b| b.intents.iter().filter_map(WalEntry::intent).find(is))
            })
    }

    /// True when a `recovery_applied` entry names `plan_id`.
    pub fn plan_applied(&self, plan_id: &str) -> bool {
        self.entries.iter().any(|e| {
            matches!(&e.record, Some(WalRecord::RecoveryApplied(applied)) if applied.plan == plan_id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut log = WalLog::default();
        for i in 0..n {
            let mut f = Map::new();
            f.insert("i".into(), i.into());
            let (_, line) = next_line(log.last(), "test", "t", f);
            out.extend_from_slice(&line);
            out.push(b'\n');
            log = verify(&out).unwrap();
        }
        out
    }

    #[test]
    fn a_built_chain_verifies() {
        assert_eq!(verify(&build(5)).unwrap().entries.len(), 5);
        assert_eq!(verify(b"").unwrap().entries.len(), 0);
    }

    #[test]
    fn appended_lines_continue_the_log_they_follow() {
        let whole = build(5);
        let cut = whole
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .nth(2)
            .unwrap()
            .0
            + 1;
        let first = verify(&whole[..cut]).unwrap();
        let followed = verify_appended(first.clone(), &whole[cut..]).unwrap();
        assert_eq!(followed, verify(&whole).unwrap());
        assert_eq!(verify_appended(first.clone(), b"").unwrap(), first);
        // A torn append, and lines that do not continue the log, are faults.
        let mut torn = whole[cut..].to_vec();
        torn.truncate(torn.len() - 1);
        assert!(matches!(
            verify_appended(first.clone(), &torn),
            Err(WalFault::TornTail { .. })
        ));
        assert!(matches!(
            verify_appended(first, &whole[..cut]),
            Err(WalFault::Gap { .. })
        ));
    }

    #[test]
    fn every_kind_of_damage_is_found() {
        let good = build(3);
        let mut torn = good.clone();
        torn.extend_from_slice(b"{\"seq\":4");
        assert!(matches!(verify(&torn), Err(WalFault::TornTail { .. })));
        let mut flipped = good.clone();
        let i = flipped.iter().position(|&b| b == b'"').unwrap() + 60;
        flipped[i] ^= 1;
        assert!(verify(&flipped).is_err());
        let lines: Vec<&[u8]> = good
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        let mut gap = Vec::new();
        for l in [lines[0], lines[2]] {
            gap.extend_from_slice(l);
            gap.push(b'\n');
        }
        assert!(matches!(verify(&gap), Err(WalFault::Gap { .. })));
        assert!(matches!(verify(b"[1]\n"), Err(WalFault::Unparsable { .. })));
    }
}
