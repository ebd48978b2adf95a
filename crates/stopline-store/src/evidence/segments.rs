//! The segments of the evidence log: their names (each says the record it starts with), the
//! listing of `evidence/`, and the link of a segment's first line to the one before.

use super::seq_line;
use crate::error::{IoContext, StoreError};
use crate::Store;
use serde_json::Value;
use std::io;
use stopline_core::wal::WalFault;

/// One segment of the evidence log as a whole read found it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SegmentSummary {
    /// Its file name under `evidence/`.
    pub segment: String,
    /// The first record it holds (its name's).
    pub first: u64,
    /// How many records it holds.
    pub records: u64,
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

impl Store {
    /// The segment names of the evidence log, by first record.
    pub(super) fn evidence_segments(&self) -> Result<Vec<(u64, String)>, StoreError> {
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
}

/// The `prev` of a segment's first line (the hash of the record before it), for a segment read
/// without the one before.
pub(super) fn first_prev(bytes: &[u8], first: u64) -> Result<String, WalFault> {
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
