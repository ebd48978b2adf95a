//! The golden records in `tests/golden/`, written by the product before its records had Rust
//! types, read with the types and written again: every line comes back byte for byte
//! (docs/reference.md, "Record shapes"). A WAL line's bytes are canonical JSON in the sense the
//! product has always written them: one object, keys sorted at every depth, no whitespace.

use serde_json::{Map, Value};
use std::path::PathBuf;
use stopline_core::wal_record::{self, WalRecord};

fn golden(name: &str) -> Vec<Vec<u8>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// Read `line` as a typed record and write it again with the same envelope.
fn round_trip(line: &[u8]) -> (WalRecord, Vec<u8>) {
    let envelope: Map<String, Value> = serde_json::from_slice(line).unwrap();
    let kind = envelope["kind"].as_str().unwrap();
    let record = wal_record::parse(kind, line)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)))
        .unwrap_or_else(|| panic!("{kind} is not a WAL record's kind"));
    assert_eq!(record.kind(), kind);
    let again = wal_record::line_bytes(
        envelope["seq"].as_u64().unwrap(),
        envelope["prev"].as_str().unwrap(),
        envelope["ts"].as_str().unwrap(),
        &record,
    );
    (record, again)
}

#[test]
fn every_wal_line_of_both_backends_reads_as_its_type_and_writes_back_byte_for_byte() {
    let mut kinds = std::collections::BTreeSet::new();
    for file in ["wal-local.jsonl", "wal-etcd.jsonl"] {
        for line in golden(file) {
            let (record, again) = round_trip(&line);
            kinds.insert(record.kind());
            assert_eq!(
                String::from_utf8_lossy(&again),
                String::from_utf8_lossy(&line),
                "{file}"
            );
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>().len(),
        WalRecord::KINDS.len(),
        "the goldens hold every kind"
    );
}

#[test]
fn the_two_backends_recovery_intents_are_one_type_the_local_part_etcds_alone() {
    let intent = |file: &str| {
        golden(file)
            .into_iter()
            .map(|l| round_trip(&l).0)
            .find_map(|r| match r {
                WalRecord::RecoveryIntent(intent) => Some(intent),
                _ => None,
            })
            .unwrap()
    };
    let local = intent("wal-local.jsonl");
    let etcd = intent("wal-etcd.jsonl");
    assert!(local.local.is_none(), "{local:?}");
    let part = etcd.local.expect("etcd's intent names its local part");
    assert_eq!((part.local_plan, part.local_latches), (None, vec![]));
    assert_eq!(local.carried_forward_operations.len(), 1);
    assert_eq!(local.carried_forward_operations[0].operation.op, "op_1");
}

/// A line of a known kind whose fields are not its type's (a mistyped key) is a fault of the
/// whole log, never a line the ledger skips: before the types, a `latch_engaged` without `file`
/// verified and its latch silently left the ledger.
#[test]
fn a_known_kind_with_a_mistyped_field_is_a_fault_not_a_skipped_line() {
    let line = golden("wal-local.jsonl")
        .into_iter()
        .find(|l| {
            let body: Value = serde_json::from_slice(l).unwrap();
            body["kind"] == "latch_engaged" && body["seq"] == 1
        })
        .unwrap();
    let mut whole = line.clone();
    whole.push(b'\n');
    let log = stopline_core::wal::verify(&whole).unwrap();
    assert_eq!(log.uncleared_latches().len(), 1);

    let text = String::from_utf8(line)
        .unwrap()
        .replacen("\"file\"", "\"flie\"", 1);
    let fault = stopline_core::wal::verify(format!("{text}\n").as_bytes()).unwrap_err();
    assert!(
        matches!(
            fault,
            stopline_core::wal::WalFault::Unparsable { line: 1, .. }
        ),
        "{fault:?}"
    );
}

/// The acknowledgement request and every reply a gateway gives, read with their types and
/// written again: byte for byte the lines the two sides exchanged before the types.
#[test]
fn acknowledgement_lines_read_as_their_types_and_write_back_byte_for_byte() {
    use stopline_core::ack::{AckReply, AckRequest};
    for line in golden("ack-request.jsonl") {
        let request: AckRequest = serde_json::from_slice(&line).unwrap();
        assert_eq!(serde_json::to_vec(&request).unwrap(), line);
    }
    let replies = golden("ack-reply.jsonl");
    assert_eq!(replies.len(), 4);
    for line in replies {
        let reply: AckReply = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            String::from_utf8(serde_json::to_vec(&reply).unwrap()).unwrap(),
            String::from_utf8(line).unwrap()
        );
    }
    assert_eq!(
        serde_json::to_string(&AckReply::acknowledged("gw_1a2b3c4d", 42)).unwrap(),
        r#"{"ack":true,"generation":42,"server":"gw_1a2b3c4d"}"#
    );
}

/// Logs written before a field existed still read: a `latch_engaged` and an `epoch_advance`
/// without `pid`, a `repair_applied` without `journals_repaired`, a carried operation without
/// `root`, `blocks` or `dispatched_ms` (whom it blocks then reads as everyone).
#[test]
fn lines_older_than_a_field_still_read() {
    let older = |kind: &str, drop: &[&str]| -> (WalRecord, Vec<u8>) {
        let line = golden("wal-local.jsonl")
            .into_iter()
            .find(|l| serde_json::from_slice::<Value>(l).unwrap()["kind"] == kind)
            .unwrap();
        let mut body: Map<String, Value> = serde_json::from_slice(&line).unwrap();
        for field in drop {
            body.remove(*field);
        }
        if let Some(carried) = body.get_mut("carried_forward_operations") {
            let operation = carried[0]["operation"].as_object_mut().unwrap();
            for field in ["root", "blocks", "dispatched_ms"] {
                operation.remove(field);
            }
        }
        round_trip(&serde_json::to_vec(&body).unwrap())
    };
    let (record, again) = older("latch_engaged", &["pid"]);
    assert!(matches!(record, WalRecord::LatchEngaged(ref e) if e.pid.is_none()));
    assert!(!String::from_utf8(again).unwrap().contains("\"pid\""));
    let (record, _) = older("epoch_advance", &["pid"]);
    assert!(matches!(record, WalRecord::EpochAdvance(ref e) if e.pid.is_none()));
    let (record, _) = older("repair_applied", &["journals_repaired"]);
    assert!(matches!(record, WalRecord::RepairApplied(ref r) if r.journals_repaired.is_none()));
    let (record, _) = older("recovery_intent", &[]);
    let WalRecord::RecoveryIntent(intent) = record else {
        panic!("{record:?}")
    };
    let operation = &intent.carried_forward_operations[0].operation;
    assert_eq!(operation.blocks, stopline_core::ops::Blocks::Everyone);
    assert_eq!(
        (operation.root.as_deref(), operation.dispatched_ms),
        (None, None)
    );
}

/// A worker registration in each state the supervisor writes, and the stand-in of a
/// `runs.live/` entry (`starting`), read with the type and written again the way every writer
/// writes it (through `Value`, pretty, one newline): byte for byte.
#[test]
fn worker_registrations_read_as_their_type_and_write_back_byte_for_byte() {
    use stopline_core::worker::{WorkerRegistration, WorkerState};
    let mut states = Vec::new();
    for state in ["running", "killing", "quiescent", "exited", "starting"] {
        let name = format!("worker-registration-{state}.json");
        let line = golden(&name).concat();
        let registration: WorkerRegistration = serde_json::from_slice(&line).unwrap();
        let mut again =
            serde_json::to_vec_pretty(&serde_json::to_value(&registration).unwrap()).unwrap();
        again.push(b'\n');
        assert_eq!(
            String::from_utf8(again).unwrap(),
            String::from_utf8(
                std::fs::read(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                        .join("tests/golden")
                        .join(&name)
                )
                .unwrap()
            )
            .unwrap(),
            "{name}"
        );
        assert_eq!(registration.state.as_str(), state);
        assert_eq!(registration.observed.is_none(), state == "starting");
        states.push(registration.state);
    }
    assert_eq!(
        states.iter().filter(|s| s.finished()).count(),
        2,
        "quiescent and exited"
    );
    let unknown: WorkerRegistration =
        serde_json::from_str(r#"{"run":"r1","agent":"a","state":"hibernating"}"#).unwrap();
    assert_eq!(unknown.state, WorkerState::Unknown);
    assert!(
        !unknown.finished(),
        "a state this build does not know is never finished"
    );
    // What the owner console's refusal of a supervised ancestor needs from any registration:
    // its pid, even when it names no run.
    let bare: WorkerRegistration =
        serde_json::from_str(r#"{"pid":4242,"agent":"agent","state":"running"}"#).unwrap();
    assert_eq!((bare.pid(), bare.run.as_str()), (Some(4242), ""));
}

/// A gateway's registration as the gateway writes it (`to_vec_pretty`, fields in the type's
/// order), read with the type and written again: byte for byte.
#[test]
fn a_server_record_reads_and_writes_back_byte_for_byte() {
    use stopline_core::ack::ServerRecord;
    let golden = String::from_utf8(golden("server-record.json").join(&b'\n')).unwrap() + "\n";
    let record: ServerRecord = serde_json::from_str(&golden).unwrap();
    assert_eq!(record.budgets_near_limit.len(), 1);
    let mut again = String::from_utf8(serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    again.push('\n');
    assert_eq!(again, golden);
}

/// A registration with a malformed field (a pid that is not a number, a state that is not a
/// string, a project that is not a path) still reads, with that field absent: engage's direct
/// kill still reaches its group. Before, the one bad field made the whole registration
/// unreadable and its group was only warned about (`group_not_reached`), never killed.
#[test]
fn a_malformed_field_never_hides_the_group_of_a_registration() {
    use stopline_core::worker::{WorkerRegistration, WorkerState};
    let text = r#"{"schema": "worker-registration.v1", "run": "r1", "agent": "a1",
        "cgroup": "/sys/fs/cgroup/stopline/r1-a1", "pid": "x", "supervisor_pid": [1],
        "state": 7, "project": 5, "limits": "none", "exit_code": "zero",
        "stop_cause": {"kind": "latch"}, "updated_at": 12}"#;
    let read: WorkerRegistration = serde_json::from_str(text).expect("still a registration");
    assert_eq!(
        read.cgroup.as_deref(),
        Some(std::path::Path::new("/sys/fs/cgroup/stopline/r1-a1"))
    );
    assert_eq!((read.run.as_str(), read.agent.as_str()), ("r1", "a1"));
    // Unknown is never finished: the group is still reached and never counted quiescent.
    assert_eq!(read.state, WorkerState::Unknown);
    assert!(!read.finished());
    let observed = read.observed.expect("a supervisor's registration");
    assert_eq!((observed.pid, observed.exit_code), (None, None));
    assert!(observed.stop_cause.is_none() && observed.limits.is_none());
    assert_eq!((read.supervisor_pid, read.project), (None, None));
}

/// The run record of each phase `stopline run` writes (begun; the agent could not start; it
/// exited; stopped by a latch, the wall clock, a control state that could not be trusted, the
/// operator), read with the type and written again the way the store writes it (through
/// `Value`, pretty, one newline): byte for byte.
#[test]
fn run_records_of_every_phase_read_as_their_type_and_write_back_byte_for_byte() {
    use stopline_core::run_record::{Outcome, RunRecord};
    let phases = [
        ("begun", None),
        ("start-failed", Some(Outcome::StartFailed)),
        ("exited", Some(Outcome::Exited)),
        ("stopped-latch", Some(Outcome::Stopped)),
        ("stopped-wall-clock", Some(Outcome::Stopped)),
        ("stopped-control-state", Some(Outcome::Stopped)),
        ("stopped-operator", Some(Outcome::Stopped)),
    ];
    for (phase, outcome) in phases {
        let name = format!("run-record-{phase}.json");
        let bytes = golden(&name).concat();
        let record: RunRecord = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(record.end.as_ref().map(|e| e.outcome), outcome, "{name}");
        assert_eq!(
            record.started.is_some(),
            !matches!(phase, "begun" | "start-failed")
        );
        let mut again = serde_json::to_vec_pretty(&record.to_json()).unwrap();
        again.push(b'\n');
        let written = std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("tests/golden")
                .join(&name),
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(again).unwrap(),
            String::from_utf8(written).unwrap(),
            "{name}"
        );
    }
}

/// A run whose root exited leaving processes records `stragglers_killed: true`, and the
/// operator's stop its signal; neither key appears otherwise (the exited golden has neither).
#[test]
fn run_record_flags_appear_only_when_set() {
    use stopline_core::run_record::RunRecord;
    let exited: RunRecord =
        serde_json::from_slice(&golden("run-record-exited.json").concat()).unwrap();
    let text = exited.to_json().to_string();
    assert!(!text.contains("stragglers_killed") && !text.contains("stopped_by_operator"));
    let mut stragglers = exited.clone();
    let end = stragglers.end.as_mut().unwrap();
    end.concluded.as_mut().unwrap().stragglers_killed = true;
    assert_eq!(stragglers.to_json()["stragglers_killed"], true);
    let back: RunRecord = serde_json::from_value(stragglers.to_json()).unwrap();
    assert_eq!(back, stragglers);
    let operator: RunRecord =
        serde_json::from_slice(&golden("run-record-stopped-operator.json").concat()).unwrap();
    let concluded = operator.end.unwrap().concluded.unwrap();
    assert_eq!(concluded.stopped_by_operator.unwrap().signal, "SIGINT");
}
