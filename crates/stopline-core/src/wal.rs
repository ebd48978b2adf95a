//! The hash-chained write-ahead log: line format, verification and the latch ledger.
//!
//! Each line is one JSON object with `seq` (1, 2, 3 … no gaps), `prev` (sha256 hex of the
//! previous line's bytes without its newline; 64 zeros for the first), `kind`, `ts` and the
//! kind's fields. Verification is pure and total: it returns the entries or the first fault. A
//! gate treats any fault as `control_wal_corrupt`; only the owner's repair may truncate a torn
//! (unterminated) last line, and nothing ever skips a broken line.

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
}

/// The verified contents of a WAL.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WalLog {
    /// Every line, in order.
    pub entries: Vec<WalEntry>,
}

/// sha256 hex of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Verify a whole WAL. A missing file is the empty WAL; the caller passes `b""`.
pub fn verify(bytes: &[u8]) -> Result<WalLog, WalFault> {
    let mut entries: Vec<WalEntry> = Vec::new();
    let mut offset = 0usize;
    let mut line_no = 0usize;
    while offset < bytes.len() {
        line_no += 1;
        let Some(end) = bytes[offset..].iter().position(|&b| b == b'\n') else {
            return Err(WalFault::TornTail { offset });
        };
        let line = &bytes[offset..offset + end];
        let entry = parse_line(line, line_no, entries.last())?;
        entries.push(entry);
        offset += end + 1;
    }
    Ok(WalLog { entries })
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
    Ok(WalEntry {
        seq,
        kind: kind.to_string(),
        hash: sha256_hex(line),
        body,
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

impl WalLog {
    /// The last entry.
    pub fn last(&self) -> Option<&WalEntry> {
        self.entries.last()
    }

    /// The last `epoch_advance` entry's `new_epoch` and `scope_epochs`, with its seq.
    pub fn last_epoch_advance(&self) -> Option<(u64, u64, Map<String, Value>)> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.kind == "epoch_advance")
            .map(|e| {
                let new_epoch = e
                    .body
                    .get("new_epoch")
                    .and_then(Value::as_u64)
                    .unwrap_or(u64::MAX);
                let scopes = e
                    .body
                    .get("scope_epochs")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                (e.seq, new_epoch, scopes)
            })
    }

    /// The ledger: latch file names recorded as engaged and not cleared since
    /// (`disengaged.latches`, `recovery_applied.cleared`).
    pub fn uncleared_latches(&self) -> BTreeSet<String> {
        let mut live = BTreeSet::new();
        for entry in &self.entries {
            let names = |field: &str| -> Vec<String> {
                entry
                    .body
                    .get(field)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            match entry.kind.as_str() {
                "latch_engaged" => {
                    if let Some(file) = entry.body.get("file").and_then(Value::as_str) {
                        live.insert(file.to_string());
                    }
                }
                "disengaged" => names("latches").iter().for_each(|n| {
                    live.remove(n);
                }),
                "recovery_applied" => names("cleared").iter().for_each(|n| {
                    live.remove(n);
                }),
                _ => {}
            }
        }
        live
    }

    /// Every latch file the log ever recorded as engaged (cleared ones included).
    pub fn recorded_latches(&self) -> BTreeSet<String> {
        self.entries
            .iter()
            .filter(|e| e.kind == "latch_engaged")
            .filter_map(|e| e.body.get("file").and_then(Value::as_str))
            .map(String::from)
            .collect()
    }

    /// The entry of kind `recovery_intent` whose `plan` is `plan_id`.
    pub fn recovery_intent(&self, plan_id: &str) -> Option<&WalEntry> {
        self.entries.iter().rev().find(|e| {
            e.kind == "recovery_intent"
                && e.body.get("plan").and_then(Value::as_str) == Some(plan_id)
        })
    }

    /// True when a `recovery_applied` entry names `plan_id`.
    pub fn plan_applied(&self, plan_id: &str) -> bool {
        self.entries.iter().any(|e| {
            e.kind == "recovery_applied"
                && e.body.get("plan").and_then(Value::as_str) == Some(plan_id)
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
