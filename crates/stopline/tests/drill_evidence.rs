//! The evidence log: one changed byte anywhere is found by `evidence verify` (the chain names the
//! line after the change; the head anchor catches a change of the last line), an operation
//! admitted for an agent after its breaker tripped is reported, and a real breaker trip of a
//! running gateway files an `evidence-record.v1` that validates against its schema.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use stopline_store::Store;
use util::Home;

fn record(n: u64) -> serde_json::Map<String, Value> {
    json!({"schema": "control-observation.v1", "harness_version": "h", "pass": true, "agents": n})
        .as_object()
        .unwrap()
        .clone()
}

/// Change the first ASCII digit at or after byte `from` of the log to another digit.
fn flip_digit(log: &Path, from: usize) -> usize {
    let mut bytes = std::fs::read(log).unwrap();
    let at = from + bytes[from..].iter().position(u8::is_ascii_digit).unwrap();
    bytes[at] = if bytes[at] == b'7' { b'8' } else { b'7' };
    std::fs::write(log, bytes).unwrap();
    at
}

#[test]
fn one_changed_byte_is_found_and_named() {
    let home = Home::new();
    let store = Store::open(home.path());
    for n in 1..=3 {
        store
            .evidence()
            .append("control-observation.v1", record(n))
            .unwrap();
    }
    let log = home.file("evidence/log.jsonl");
    let pristine = std::fs::read(&log).unwrap();
    assert_eq!(home.run(&["evidence", "verify"]).code, 0);

    // A byte in the first line: the second line's link to it breaks.
    let first_line_end = pristine.iter().position(|&b| b == b'\n').unwrap();
    let agents_at = pristine
        .windows(8)
        .position(|w| w == b"\"agents\"")
        .unwrap();
    assert!(agents_at < first_line_end);
    flip_digit(&log, agents_at);
    let r = home.run(&["evidence", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let report = r.json();
    assert_eq!(report["ok"], false);
    assert_eq!(report["first_break"]["fault"], "broken_link");
    assert_eq!(report["first_break"]["line"], 2);
    assert_eq!(
        home.run(&["evidence", "list"]).code_str(),
        "control_state_corrupt"
    );

    // A byte in the last line: nothing follows it, but the head anchor no longer matches.
    std::fs::write(&log, &pristine).unwrap();
    let last_line_start = pristine[..pristine.len() - 1]
        .iter()
        .rposition(|&b| b == b'\n')
        .unwrap()
        + 1;
    let agents_last = last_line_start
        + pristine[last_line_start..]
            .windows(8)
            .position(|w| w == b"\"agents\"")
            .unwrap();
    flip_digit(&log, agents_last);
    let r = home.run(&["evidence", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert_eq!(r.json()["first_break"]["fault"], "head_mismatch");
    assert_eq!(r.json()["first_break"]["line"], 3);

    std::fs::write(&log, &pristine).unwrap();
    assert_eq!(home.run(&["evidence", "verify"]).code, 0);
}

#[test]
fn an_operation_admitted_after_an_agents_breaker_trip_is_reported() {
    let home = Home::new();
    let store = Store::open(home.path());
    let journal = store.ops().journal("test").unwrap();
    let before = journal
        .prepare("mcp:s:write", Some("agent-x"), Some("1"))
        .unwrap();
    journal.dispatched(&before).unwrap();
    journal.outcome(&before, "committed").unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let trip = json!({"schema": "evidence-record.v1", "agent": "agent-x", "breaker": "unauthorized_calls",
        "trigger": "tool_not_allowed", "threshold": 1.0, "observed": 1.0, "latch": "latch_abc", "level": "halt-all"});
    store
        .evidence()
        .append("breaker", trip.as_object().unwrap().clone())
        .unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let admitted = journal
        .prepare("mcp:s:write", Some("agent-x"), Some("2"))
        .unwrap();
    journal.dispatched(&admitted).unwrap();
    journal.outcome(&admitted, "committed").unwrap();
    let refused = journal
        .prepare("mcp:s:write", Some("agent-x"), Some("3"))
        .unwrap();
    journal.outcome(&refused, "refused").unwrap();
    let other = journal
        .prepare("mcp:s:write", Some("agent-y"), Some("4"))
        .unwrap();
    journal.outcome(&other, "committed").unwrap();

    let r = home.run(&["evidence", "verify"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let report = r.json();
    assert_eq!(
        report["first_break"],
        Value::Null,
        "the chain itself is whole"
    );
    let after = report["operations_after_trip"].as_array().unwrap();
    assert_eq!(after.len(), 1, "{report}");
    assert_eq!(after[0]["op"], admitted.as_str());
    assert_eq!(after[0]["trip_latch"], "latch_abc.json");
    assert_eq!(after[0]["dispatched"], true);
}

#[test]
fn a_real_breaker_trip_files_a_valid_evidence_record() {
    let home = Home::new();
    let gateway = gw::Gateway::start(
        &home,
        "[mcp.tools]\nurl = \"http://127.0.0.1:9/mcp\"\nallowed_tools = [\"allowed\"]\n\n[breakers]\nunauthorized_calls = 1\n",
    );
    let token = home.token(&["--agent", "agent-t"]);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "forbidden", "arguments": {}}});
    let reply = gw::http_with(
        &gateway.addr,
        "POST",
        "/mcp/tools",
        Some(&token),
        Some(&call),
        &[("accept", "application/json, text/event-stream")],
    );
    assert!(reply.body.contains("tool_not_allowed"), "{}", reply.body);
    let store = Store::open(home.path());
    let trip = gw::within(Duration::from_secs(10), || {
        store
            .evidence()
            .entries()
            .ok()?
            .into_iter()
            .find(|e| e.body["schema"] == "evidence-record.v1")
    })
    .expect("the breaker trip is filed");
    let body = Value::Object(trip.body);
    util::validate("evidence-record.v1.json", &body);
    assert_eq!(
        (body["agent"].as_str(), body["kind"].as_str()),
        (Some("agent-t"), Some("breaker"))
    );
    let r = home.run(&["evidence", "verify"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    assert_eq!(r.json()["trips"], 1);
}

/// The WAL is read from its checkpoint on the hot path, but the evidence verdict
/// judges a trip's window by when its latch was cleared, which may lie before the checkpoint:
/// `evidence verify` reads the whole WAL.
#[test]
fn a_trips_window_closed_before_the_wal_checkpoint_still_ends_at_its_clearing() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let store = Store::open(home.path());
    let receipt = home.run(&[
        "engage",
        "--scope",
        "agent:agent-x",
        "--level",
        "halt-all",
        "--reason",
        "trip",
        "--by",
        "operator",
    ]);
    receipt.assert_ok();
    let latch = receipt.json()["latch"]["id"].as_str().unwrap().to_string();
    let trip = json!({"schema": "evidence-record.v1", "agent": "agent-x", "breaker": "unauthorized_calls",
        "trigger": "tool_not_allowed", "threshold": 1.0, "observed": 1.0, "latch": latch, "level": "halt-all"});
    store
        .evidence()
        .append("breaker", trip.as_object().unwrap().clone())
        .unwrap();
    home.run(&[
        "disengage",
        "--scope",
        "agent:agent-x",
        "--reason",
        "lifted",
        "--by",
        "operator",
    ])
    .assert_ok();
    // Enough WAL lines after the lift that a checkpoint stands after it.
    home.halt_cycles(40);
    assert!(home.file("breakglass.wal.checkpoint.json").exists());
    std::thread::sleep(Duration::from_millis(5));
    let journal = store.ops().journal("test").unwrap();
    let later = journal
        .prepare("mcp:s:write", Some("agent-x"), Some("1"))
        .unwrap();
    journal.dispatched(&later).unwrap();
    journal.outcome(&later, "committed").unwrap();
    let r = home.run(&["evidence", "verify"]);
    assert_eq!(
        r.code, 0,
        "an operation after the lift is not after the trip: {}",
        r.stdout
    );
}

/// The evidence log is segmented. `evidence verify` checks the newest two segments
/// (the current one and its link into the one before), `evidence verify --all` every segment
/// from the first record; an append reads only the log's end, so a damaged or missing old
/// segment does not stop a breaker trip's record from landing, and `--all` names the break.
#[test]
fn verify_all_reads_every_segment_and_an_append_needs_only_the_tail() {
    let home = Home::new();
    let store = Store::open(home.path()).with_evidence_segment_records(3);
    for n in 1..=7 {
        store
            .evidence()
            .append("control-observation.v1", record(n))
            .unwrap();
    }
    for segment in [
        "log.jsonl",
        "log-000000000004.jsonl",
        "log-000000000007.jsonl",
    ] {
        assert!(
            home.file(&format!("evidence/{segment}")).exists(),
            "{segment}"
        );
    }
    let r = home.run(&["evidence", "verify"]);
    assert_eq!(r.code, 0, "{}", r.stdout);
    let report = r.json();
    assert_eq!(
        (report["records"].as_u64(), report["all_segments"].as_bool()),
        (Some(4), Some(false)),
        "{report}"
    );
    assert_eq!(report["total_segments"], 3);
    let all = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(all.code, 0, "{}", all.stdout);
    assert_eq!(all.json()["records"], 7);
    assert_eq!(all.json()["all_segments"], true);
    let out = home.command(&["evidence", "verify"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the newest 2 of 3 segments") && text.contains("--all"),
        "{text}"
    );

    // One changed byte in the first segment: the append still lands, chained to the tail.
    let first = home.file("evidence/log.jsonl");
    let pristine = std::fs::read(&first).unwrap();
    let agents_at = pristine
        .windows(8)
        .position(|w| w == b"\"agents\"")
        .unwrap();
    flip_digit(&first, agents_at);
    let trip = json!({"schema": "evidence-record.v1", "agent": "agent-x", "breaker": "unauthorized_calls",
        "trigger": "tool_not_allowed", "threshold": 1.0, "observed": 1.0, "latch": "latch_abc", "level": "halt-all"});
    assert_eq!(
        store
            .evidence()
            .append("breaker", trip.as_object().unwrap().clone())
            .unwrap(),
        8
    );
    assert_eq!(home.run(&["evidence", "verify"]).code, 0);
    let all = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(all.code, 1, "{}", all.stdout);
    assert_eq!(all.json()["ok"], false);
    assert_eq!(all.json()["first_break"]["fault"], "broken_link");
    assert_eq!(all.json()["first_break"]["line"], 2);
    assert_eq!(
        home.run(&["evidence", "list"]).code_str(),
        "control_state_corrupt"
    );

    // A whole segment gone: the records it held are named missing.
    std::fs::remove_file(home.file("evidence/log-000000000004.jsonl")).unwrap();
    store
        .evidence()
        .append("control-observation.v1", record(9))
        .unwrap();
    let all = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(all.code, 1, "{}", all.stdout);
    let first_break = &all.json()["first_break"];
    assert_eq!(
        (first_break["fault"].as_str(), first_break["line"].as_u64()),
        (Some("broken_link"), Some(2)),
        "the first break is still the changed byte: {first_break}"
    );
    std::fs::write(&first, pristine).unwrap();
    let all = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(all.code, 1, "{}", all.stdout);
    let first_break = &all.json()["first_break"];
    assert_eq!(
        (first_break["fault"].as_str(), first_break["line"].as_u64()),
        (Some("missing"), Some(4)),
        "{first_break}"
    );
    assert!(
        first_break["message"]
            .as_str()
            .is_some_and(|m| m.contains("records 4 to 6 are missing")),
        "{first_break}"
    );
}

/// `GET /v1/drills` reads the drill index, never the history. An older home (no
/// `evidence/drills.json`, a head without its drill anchor) is indexed by the first read from a
/// whole verified log; after that every segment but the newest can be gone and the page still
/// shows the same drills (before, it read every segment: a missing one was an `error` and no
/// drills).
#[test]
fn the_drills_route_reads_the_drill_index_and_indexes_an_older_home_once() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let store = Store::open(home.path()).with_evidence_segment_records(3);
    for n in 1..=20 {
        let record = json!({"schema": "control-observation.v1", "harness_version": "h", "pass": n % 4 != 0, "agents": n});
        store
            .evidence()
            .append(
                "control-observation.v1",
                record.as_object().unwrap().clone(),
            )
            .unwrap();
    }
    // What an older stopline leaves.
    std::fs::remove_file(home.file("evidence/drills.json")).unwrap();
    let head_path = home.file("evidence/head.json");
    let mut head: Value = serde_json::from_slice(&std::fs::read(&head_path).unwrap()).unwrap();
    head.as_object_mut().unwrap().remove("drills");
    std::fs::write(&head_path, head.to_string()).unwrap();

    let gateway = gw::Gateway::start(&home, "");
    let token = home.token(&["--agent", "ops-desk", "--role", "operator"]);
    let newest = |reply: Value| -> (Value, Vec<u64>) {
        let agents = reply["drills"]
            .as_array()
            .unwrap_or_else(|| panic!("{reply}"))
            .iter()
            .map(|d| d["agents"].as_u64().unwrap())
            .collect();
        (reply["total"].clone(), agents)
    };
    let first = gateway.get("/v1/drills?limit=3", Some(&token)).json();
    assert_eq!(first["error"], Value::Null, "{first}");
    assert_eq!(newest(first), (json!(20), vec![20, 19, 18]));
    assert!(home.file("evidence/drills.json").exists(), "indexed");
    let head: Value = serde_json::from_slice(&std::fs::read(&head_path).unwrap()).unwrap();
    assert_eq!(head["drills"]["seq"], 20, "{head}");
    let verified = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(
        verified.json()["drill_index"],
        "agrees",
        "{}",
        verified.stdout
    );

    // Every segment but the newest gone: nothing the route reads.
    for first in (1..19).step_by(3) {
        let segment = home.file(&format!(
            "evidence/{}",
            stopline_store::evidence::segment_name(first)
        ));
        std::fs::remove_file(segment).unwrap();
    }
    let again = gateway.get("/v1/drills?limit=3", Some(&token)).json();
    assert_eq!(again["error"], Value::Null, "{again}");
    assert_eq!(newest(again), (json!(20), vec![20, 19, 18]));
    let all = gateway.get("/v1/drills?limit=1000", Some(&token)).json();
    assert_eq!(all["drills"].as_array().unwrap().len(), 20);
    // `evidence verify --all` still reads every segment, and names the missing ones.
    let verified = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(verified.code, 1, "{}", verified.stdout);
    assert_eq!(verified.json()["first_break"]["fault"], "missing");
}
