//! `stopline evidence list` and `stopline evidence verify` (docs/reference.md §9): the hash-chained evidence
//! log, read and checked.
//!
//! `verify` does two things. It checks the chain (and the head anchor of its newest line) and
//! names the first broken line. And it checks what the log claims against what happened: for
//! every breaker trip or budget exhaustion (`evidence-record.v1`) it looks in the operation
//! registry for an operation of that agent prepared after the trip and before the trip's latch
//! was cleared (`disengaged` / `recovery_applied` in the WAL), whose outcome is not `refused` —
//! an operation admitted after the stop. Operations record only the acting agent, so this
//! matches the tripped agent by name; its delegates' operations are not attributed to it. The
//! trip's time is the evidence record's, written after the latch was published and the
//! gateways acknowledged it, so an operation in that short gap is not reported. Nothing here
//! writes anything.

use crate::context::Context;
use crate::receipts::{EvidenceListReceipt, EvidenceVerifyReceipt};
use serde_json::{json, Value};
use stopline_core::wal::{WalEntry, WalFault};
use stopline_core::{Refusal, RefusalCode};
use stopline_store::env::parse_rfc3339;
use stopline_store::evidence::drills::DrillIndexCheck;

/// A breaker trip or budget exhaustion read from the log.
#[derive(Debug, Clone)]
struct Trip {
    seq: u64,
    agent: String,
    latch_file: String,
    at_ms: i64,
}

fn trips(entries: &[WalEntry]) -> Vec<Trip> {
    entries
        .iter()
        .filter(|e| e.body.get("schema").and_then(Value::as_str) == Some("evidence-record.v1"))
        .filter_map(|e| {
            let agent = e.body.get("agent")?.as_str()?.to_string();
            let at_ms = parse_rfc3339(e.body.get("ts")?.as_str()?)?;
            let latch = e.body.get("latch").and_then(Value::as_str).unwrap_or("");
            let latch_file = match latch {
                "" => String::new(),
                l if l.ends_with(".json") => l.to_string(),
                l => format!("{l}.json"),
            };
            Some(Trip {
                seq: e.seq,
                agent,
                latch_file,
                at_ms,
            })
        })
        .collect()
}

/// When the WAL says `latch_file` was cleared after `after_ms`, if it does.
fn cleared_at(wal: &[WalEntry], latch_file: &str, after_ms: i64) -> Option<i64> {
    if latch_file.is_empty() {
        return None;
    }
    wal.iter().find_map(|entry| {
        let field = match entry.kind.as_str() {
            "disengaged" => "latches",
            "recovery_applied" => "cleared",
            _ => return None,
        };
        let names = entry.body.get(field)?.as_array()?;
        let at = parse_rfc3339(entry.body.get("ts")?.as_str()?)?;
        (at >= after_ms && names.iter().any(|n| n.as_str() == Some(latch_file))).then_some(at)
    })
}

fn fault_json(fault: &WalFault) -> Value {
    let mut value = serde_json::to_value(fault).unwrap_or_default();
    value["message"] = fault.to_string().into();
    if let WalFault::BrokenLink { line } = fault {
        value["altered"] = format!("line {} or line {line}", line - 1).into();
    }
    value
}

/// `evidence list`: every record, or `control_state_corrupt` naming the first break.
pub fn list(ctx: &Context) -> Result<EvidenceListReceipt, Refusal> {
    let entries = ctx.store.evidence().entries().map_err(|fault| {
        Refusal::new(
            RefusalCode::ControlStateCorrupt,
            format!("the evidence log is broken: {fault}; run `stopline evidence verify`"),
        )
    })?;
    let records: Vec<Value> = entries.into_iter().map(|e| Value::Object(e.body)).collect();
    Ok(EvidenceListReceipt { records })
}

/// `evidence verify`: the chain, its head anchor, and operations admitted after a trip.
/// `ok` is true only when the chain is whole, anchored (at most the newest line unanchored),
/// the registries were read, and no operation was admitted after a trip. Without `all` the
/// newest two segments are verified (the current one and its link into the one before); with
/// it, every segment from the log's first record, and the drill index (what the drill gate
/// reads) is checked against them: an index that disagrees makes `ok` false.
pub fn verify(ctx: &Context, all: bool) -> EvidenceVerifyReceipt {
    let read = if all {
        ctx.store
            .evidence()
            .chain_with_drills()
            .map(|(chain, check)| (chain, Some(check)))
    } else {
        ctx.store.evidence().chain(false).map(|chain| (chain, None))
    };
    let (chain, drills) = match read {
        Ok(read) => read,
        Err(fault) => {
            return EvidenceVerifyReceipt {
                ok: false,
                records: None,
                all_segments: all,
                segments: None,
                total_segments: None,
                pruned_through: None,
                first_break: fault_json(&fault),
                unanchored_lines: None,
                trips: None,
                operations_after_trip: Vec::new(),
                registry_errors: Vec::new(),
                drill_index: None,
            };
        }
    };
    let entries = &chain.entries;
    let mut first_break = Value::Null;
    let mut unanchored = 0u64;
    let last_seq = entries.last().map_or(0, |e| e.seq);
    let segment_of = |seq: u64| {
        chain
            .segments
            .iter()
            .find(|s| s.first <= seq && seq < s.first + s.records)
            .map(|s| s.segment.as_str())
    };
    match ctx.store.evidence().head() {
        Ok(Some(head)) => match entries.iter().find(|e| e.seq == head.seq) {
            Some(entry)
                if entry.hash == head.hash
                    && head
                        .at
                        .as_ref()
                        .is_none_or(|(segment, _)| segment_of(entry.seq) == Some(segment)) =>
            {
                unanchored = last_seq - head.seq
            }
            Some(entry) => {
                first_break = json!({"line": entry.seq, "fault": "head_mismatch",
                    "message": format!("line {} does not hash to the head anchor evidence/head.json (or is not where it says): it was altered", entry.seq)});
            }
            None => {
                first_break = json!({"line": head.seq, "fault": "truncated",
                    "message": format!("the head anchor names line {} but the log has {last_seq} lines", head.seq)});
            }
        },
        Ok(None) => unanchored = last_seq,
        Err(why) => {
            first_break = json!({"line": null, "fault": "head_unreadable", "message": why});
        }
    }
    // The whole WAL, not the lines after its checkpoint: a trip's latch may have been cleared
    // long before it.
    let wal = match ctx.store.wal().read_whole() {
        Ok(log) => log.entries,
        Err(_) => Vec::new(),
    };
    let (ops, registry_errors) = ctx.store.ops().all();
    let trips = trips(entries);
    let mut after = Vec::new();
    for trip in &trips {
        let until = cleared_at(&wal, &trip.latch_file, trip.at_ms);
        for op in ops.values() {
            let same_agent = op.agent.as_deref() == Some(trip.agent.as_str());
            let in_window = op.prepared_ms > trip.at_ms && until.is_none_or(|u| op.prepared_ms < u);
            if same_agent && in_window && op.outcome.as_deref() != Some("refused") {
                after.push(json!({
                    "op": op.op, "agent": op.agent, "target": op.target,
                    "prepared_ms": op.prepared_ms, "dispatched": op.dispatched,
                    "outcome": op.outcome, "trip_line": trip.seq, "trip_latch": trip.latch_file,
                }));
            }
        }
    }
    // Each append re-anchors the head, so only a crash between an append and its anchor can
    // leave one line unanchored; more means the anchor is being lost or was removed.
    // The drill index must say what the log says (a home not indexed yet is not a fault).
    let (drill_index, drills_ok) = match drills {
        None => (None, true),
        Some(DrillIndexCheck::Agrees) => (Some("agrees".to_string()), true),
        Some(DrillIndexCheck::NotBuilt) => (Some("not built".to_string()), true),
        Some(DrillIndexCheck::Disagrees(why)) => (Some(why), false),
    };
    let ok = first_break.is_null()
        && unanchored <= 1
        && after.is_empty()
        && registry_errors.is_empty()
        && drills_ok;
    EvidenceVerifyReceipt {
        ok,
        records: Some(entries.len()),
        all_segments: all || chain.segments.len() == chain.total_segments,
        total_segments: Some(chain.total_segments),
        pruned_through: chain.pruned_through,
        segments: Some(chain.segments.clone()),
        first_break,
        unanchored_lines: Some(unanchored),
        trips: Some(trips.len()),
        operations_after_trip: after,
        registry_errors,
        drill_index,
    }
}
