//! The golden receipts in `tests/golden/`, printed with `--json` by `stopline` before its
//! receipts could be read back (main at 96ce1a1, against a scratch home; the evidence receipts at 3e38b13, from a home whose run the wall clock stopped): each reads as its
//! type and prints again byte for byte (docs/reference.md §9), so a client reading a receipt
//! with the type reads every field the product writes, and the type writes nothing new.

use serde::de::DeserializeOwned;
use std::path::PathBuf;
use stopline_control::receipts::{
    AgentStatusView, DisengageReceipt, EngageReceipt, GatewayStatus, GatewayViewReport,
    InitReceipt, MintedReceipt, OpsCompactReceipt, OpsListReceipt, Receipt, StatusReceipt,
    TokenVerifyReceipt,
};

fn golden(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim_end_matches('\n').to_string()
}

/// Read the golden `name` as `T` and print it as `--json` does (one line on a pipe).
fn round_trip<T: DeserializeOwned + Receipt>(name: &str) -> T {
    let line = golden(name);
    let receipt: T = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(receipt.to_json().to_string(), line, "{name}");
    receipt
}

#[test]
fn init_reads_and_prints_back() {
    round_trip::<InitReceipt>("init.json");
}

#[test]
fn engage_fresh_and_coalesced_read_and_print_back() {
    let fresh: EngageReceipt = round_trip("engage.json");
    assert!(!fresh.coalesced);
    let joined: EngageReceipt = round_trip("engage-coalesced.json");
    assert!(joined.coalesced);
}

#[test]
fn disengage_lifting_and_lifting_nothing_read_and_print_back() {
    let lifted: DisengageReceipt = round_trip("disengage.json");
    assert_eq!(lifted.0.cleared.len(), 2);
    let nothing: DisengageReceipt = round_trip("disengage-nothing.json");
    assert!(nothing.warning().is_some());
}

#[test]
fn status_with_a_trusted_and_an_untrusted_latch_and_a_worker_reads_and_prints_back() {
    let status: StatusReceipt = round_trip("status.json");
    assert_eq!(status.latches.len(), 2);
    assert!(status.latches[0].record.is_none() && status.latches[0].problem.is_some());
    assert!(status.latches[1].record.is_some());
    assert_eq!(status.workers.len(), 1);
    assert!(status.workers[0].covered);
}

#[test]
fn ops_list_and_compact_read_and_print_back() {
    round_trip::<OpsListReceipt>("ops-list.json");
    round_trip::<OpsCompactReceipt>("ops-compact.json");
}

#[test]
fn token_issue_and_verify_read_and_print_back() {
    round_trip::<MintedReceipt>("token-issue.json");
    let valid: TokenVerifyReceipt = round_trip("token-verify-valid.json");
    assert!(valid.valid);
    let invalid: TokenVerifyReceipt = round_trip("token-verify-invalid.json");
    assert_eq!(invalid.code.as_deref(), Some("malformed"));
}

#[test]
fn a_status_missing_its_latches_is_an_error_never_no_latch() {
    let mut status: serde_json::Value = serde_json::from_str(&golden("status.json")).unwrap();
    status.as_object_mut().unwrap().remove("latches");
    let read = serde_json::from_value::<StatusReceipt>(status);
    assert!(read.unwrap_err().to_string().contains("latches"));
}

#[test]
fn a_latch_shown_without_its_record_or_a_problem_is_an_error() {
    let mut status: serde_json::Value = serde_json::from_str(&golden("status.json")).unwrap();
    status["latches"][1].as_object_mut().unwrap().remove("by");
    assert!(serde_json::from_value::<StatusReceipt>(status).is_err());
}

/// `GET /v1/status` prints what the route printed when it added `gateway` to the receipt's JSON
/// by key, for the whole receipt and for an agent's view, and reads back.
#[test]
fn a_gateways_status_prints_the_receipt_with_its_gateway_added_and_reads_back() {
    let receipt: StatusReceipt = serde_json::from_str(&golden("status.json")).unwrap();
    let gateway = GatewayViewReport {
        id: "gw-1".into(),
        view_generation: 7,
        view_age_ms: 12,
        view_degraded: false,
        notes: vec!["watch lost".into()],
    };
    // What the route built before the type (gateway/src/api.rs, status_route).
    let keyed = |mut body: serde_json::Value| {
        body["gateway"] = serde_json::json!({
            "id": "gw-1", "view_generation": 7u64, "view_age_ms": 12i64,
            "view_degraded": false, "notes": ["watch lost"],
        });
        body.to_string()
    };
    let whole = GatewayStatus {
        status: receipt.clone(),
        gateway: gateway.clone(),
    };
    let printed = whole.to_json().to_string();
    assert_eq!(printed, keyed(receipt.to_json()));
    let again: GatewayStatus<StatusReceipt> = serde_json::from_str(&printed).unwrap();
    assert_eq!(again.gateway, gateway);
    assert_eq!(again.to_json().to_string(), printed);

    let subject = stopline_core::Subject {
        chain: vec![stopline_core::Name::parse("alice").unwrap()],
        provable: true,
        ..Default::default()
    };
    let view = AgentStatusView::of(&receipt, &subject);
    let agent = GatewayStatus {
        status: view.clone(),
        gateway,
    };
    assert_eq!(agent.to_json().to_string(), keyed(view.to_json()));
}

/// `evidence list` and `evidence verify` (newest segments, `--all`, and a chain broken by an
/// altered line), printed by the binary before these receipts could be read back (a home whose
/// run the wall clock stopped: a trip and two stop observations).
#[test]
fn evidence_list_and_verify_whole_and_broken_read_and_print_back() {
    use stopline_control::receipts::{EvidenceListReceipt, EvidenceVerifyReceipt};
    let list: EvidenceListReceipt = round_trip("evidence-list.json");
    assert_eq!(list.records.len(), 3);
    let verify: EvidenceVerifyReceipt = round_trip("evidence-verify.json");
    assert!(verify.ok && verify.drill_index.is_none());
    let segments = verify.segments.unwrap();
    assert_eq!(
        (segments[0].segment.as_str(), segments[0].records),
        ("log.jsonl", 3)
    );
    let all: EvidenceVerifyReceipt = round_trip("evidence-verify-all.json");
    assert_eq!(all.drill_index.as_deref(), Some("agrees"));
    let broken: EvidenceVerifyReceipt = round_trip("evidence-verify-broken.json");
    assert!(!broken.ok && broken.segments.is_none() && broken.records.is_none());
    assert_eq!(broken.first_break["fault"], "broken_link");
    assert_eq!(broken.exit_code(), 1);
}
