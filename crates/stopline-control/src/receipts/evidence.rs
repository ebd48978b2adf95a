//! The receipts of `evidence list` and `evidence verify` (docs/reference.md §9).

use super::compact;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use stopline_core::text::inert;

/// The receipt of `evidence list`: every record as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceListReceipt {
    /// The log's lines, in order.
    pub records: Vec<Value>,
}

impl fmt::Display for EvidenceListReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.records.is_empty() {
            return f.write_str("no evidence records");
        }
        let lines: Vec<String> = self.records.iter().map(record_text).collect();
        f.write_str(&lines.join("\n"))
    }
}

/// The chain's own fields, which the text does not repeat per record.
const CHAIN_FIELDS: [&str; 6] = ["seq", "ts", "schema", "kind", "prev", "hash"];

/// One evidence record in a line: `#seq ts schema (kind): field=value …`, strings unquoted,
/// nested values as compact JSON.
fn record_text(record: &Value) -> String {
    let get = |key: &str| record.get(key).and_then(Value::as_str).unwrap_or("?");
    let seq = record.get("seq").map_or("?".to_string(), Value::to_string);
    let fields: Vec<String> = record
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(key, _)| !CHAIN_FIELDS.contains(&key.as_str()))
        .map(|(key, value)| match value {
            Value::String(text) => format!("{}={}", inert(key), inert(text)),
            // Compact JSON escapes control characters already.
            other => format!("{}={}", inert(key), compact(other)),
        })
        .collect();
    format!(
        "#{seq} {} {} ({}): {}",
        inert(get("ts")),
        inert(get("schema")),
        inert(get("kind")),
        fields.join(" ")
    )
}

/// The receipt of `evidence verify`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvidenceVerifyReceipt {
    /// True only when the chain is whole, anchored (at most the newest line unanchored), the
    /// registries were read, and no operation was admitted after a trip.
    pub ok: bool,
    /// How many records were verified: every one with `--all`, else those of the newest two
    /// segments (null when the log cannot be read as a chain).
    pub records: Option<usize>,
    /// True when every segment was verified from the log's first record (`--all`, or a log of
    /// at most two segments).
    pub all_segments: bool,
    /// The segments verified, oldest first: file name, first record, records (absent when the
    /// chain is broken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub segments: Option<Vec<stopline_store::evidence::SegmentSummary>>,
    /// How many segments the log has (absent when the chain is broken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_segments: Option<usize>,
    /// The last record pruned with its segment under `[retention] evidence_keep_segments`
    /// (absent when nothing was pruned): `--all` verifies from the record after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pruned_through: Option<u64>,
    /// The first break: its line, fault and message (null when there is none).
    pub first_break: Value,
    /// Lines after the head anchor (absent when the chain is broken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unanchored_lines: Option<u64>,
    /// Breaker trips and budget exhaustions in the log (absent when the chain is broken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trips: Option<usize>,
    /// Operations of a tripped agent admitted after its trip.
    pub operations_after_trip: Vec<Value>,
    /// With `--all`: the drill index (`evidence/drills.json`, what the drill gate and
    /// `/v1/drills` read) checked against the log read whole: `"agrees"`, `"not built"` (a home
    /// from an older stopline; the next drill gate builds it), or what disagrees (absent without
    /// `--all` or when the chain is broken).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drill_index: Option<String>,
    /// Registries that could not be read.
    pub registry_errors: Vec<String>,
}

impl EvidenceVerifyReceipt {
    /// The exit code `stopline evidence verify` ends with: 0 when it holds.
    pub fn exit_code(&self) -> i32 {
        if self.ok {
            0
        } else {
            1
        }
    }
}

impl fmt::Display for EvidenceVerifyReceipt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first_break.is_null() {
            write!(
                f,
                "{} records, chain intact; {} trip(s); operations admitted after a trip: {}",
                compact(&self.records),
                compact(&self.trips),
                compact(&self.operations_after_trip)
            )?;
            if let Some(drills) = &self.drill_index {
                write!(f, "\ndrill index: {drills}")?;
            }
            match (&self.segments, self.total_segments) {
                (Some(read), Some(total)) if !self.all_segments => write!(
                    f,
                    "\n(the newest {} of {total} segments; `stopline evidence verify --all` verifies every one)",
                    read.len()
                ),
                _ => Ok(()),
            }
        } else {
            let message = self.first_break.get("message").and_then(Value::as_str);
            write!(f, "BROKEN: {}", message.unwrap_or_default())
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_agents_string_in_a_record_reaches_the_terminal_inert() {
        let record = serde_json::json!({
            "seq": 3, "ts": "2026-12-07T00:00:00.000Z", "schema": "evidence-record.v1",
            "kind": "breaker_trip", "operation": "model:m\u{1b}[2J\u{1b}]0;owned\u{7}\r",
            "detail": {"model": "m\u{1b}[2J"}
        });
        let text = super::record_text(&record);
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(text.contains("operation=model:m\\u{1b}[2J"), "{text}");
    }
}
