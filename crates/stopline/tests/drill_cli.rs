//! `stopline drill` through the real binary: drills in a row pass with nothing executed after
//! the trip and file records that validate against `schemas/control-observation.v1.json`; a
//! drill against a gateway that swaps its view in late fails (exit 1) and says why. Kept small
//! for CI time, and with a lenient time target (a debug build on a shared CI machine): the
//! 20 × (100 × 2) figures are a manual release run recorded in BENCHMARKS.md.

mod util;

use serde_json::Value;
use util::Home;

fn evidence(home: &Home) -> Vec<Value> {
    let r = home.run(&["evidence", "list"]);
    r.assert_ok();
    r.json()["records"].as_array().unwrap().clone()
}

#[test]
fn three_drills_in_a_row_pass_with_nothing_after_the_trip_and_file_valid_records() {
    let home = Home::new();
    let r = home.run(&[
        "drill",
        "--agents",
        "20",
        "--subagents",
        "2",
        "--repeat",
        "3",
        "--pull-after-ms",
        "800",
        // What this test guards is nothing after the trip; the time target is a figure of the
        // benchmark, not of a debug build on a busy CI machine.
        "--target-ms",
        "30000",
    ]);
    eprintln!("{}\n{}", r.stdout, r.stderr);
    r.assert_ok();
    // A drill that passes logs no error: its gateways' threads stop with them and say nothing
    // about the throwaway home deleted after them (they did, twice a drill).
    let errors: Vec<&str> = r.stderr.lines().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let series = r.json();
    assert_eq!(series["drills"], 3);
    assert_eq!(series["passed"], 3);
    assert_eq!(series["effects_after_trip"], 0);
    assert!(series["effects"].as_u64().unwrap() > 0);
    let records = evidence(&home);
    assert_eq!(records.len(), 3);
    // As written in the log, too (not only as `evidence list` renders it).
    assert_eq!(home.valid_evidence().len(), 3);
    for record in &records {
        util::validate("control-observation.v1.json", record);
        assert_eq!(record["kind"], "control-observation.v1");
        assert_eq!(
            (record["harness_version"].as_str(), record["pass"].as_bool()),
            (Some("drill"), Some(true))
        );
        assert_eq!(record["callers"], 60);
        assert_eq!(record["callers_never_rejected"], 0);
        assert_eq!(record["operations_admitted_after_trip"], 0);
        for field in [
            "tool_calls_after_trip",
            "writes_after_trip",
            "model_calls_after_trip",
        ] {
            assert_eq!(record[field], 0, "{field}");
        }
        assert!(record["scope"].as_str().unwrap().starts_with("run:drill-"));
    }
    let verify = home.run(&["evidence", "verify"]);
    assert_eq!(verify.code, 0, "{}", verify.stdout);
}

#[test]
fn a_drill_against_a_gateway_that_refreshes_its_view_late_fails_and_says_why() {
    let home = Home::new();
    let r = home.run(&[
        "drill",
        "--agents",
        "4",
        "--subagents",
        "1",
        "--pull-after-ms",
        "300",
        "--harness-version",
        "harness-slow",
        "--slow-view-ms",
        "3000",
        "--window-ms",
        "1500",
    ]);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("error: drill failed"), "{}", r.stderr);
    assert!(r.stderr.contains("executed after the trip"), "{}", r.stderr);
    let observation = r.json();
    util::validate("control-observation.v1.json", &observation);
    assert_eq!(observation["pass"], false);
    let after: u64 = [
        "tool_calls_after_trip",
        "writes_after_trip",
        "model_calls_after_trip",
    ]
    .iter()
    .map(|f| observation[f].as_u64().unwrap())
    .sum();
    assert!(after > 0, "{observation}");
    assert_eq!(observation["unacknowledged"].as_array().unwrap().len(), 1);
    // On record against its harness version, where `stopline run` will find the failure.
    let records = evidence(&home);
    let last = records.last().unwrap();
    assert_eq!(
        (last["harness_version"].as_str(), last["pass"].as_bool()),
        (Some("harness-slow"), Some(false))
    );
}

#[test]
fn a_drill_that_would_not_stop_all_its_callers_is_refused_before_it_starts() {
    let home = Home::new();
    let r = home.run(&["drill", "--agents", "2", "--scope", "agent:someone-else"]);
    assert_eq!(
        (r.code, r.code_str().as_str()),
        (1, "scope_invalid"),
        "{}",
        r.stderr
    );
    let r = home.run(&[
        "drill",
        "--against",
        "http://127.0.0.1:1",
        "--scope",
        "machine",
    ]);
    assert_eq!(
        (r.code, r.code_str().as_str()),
        (1, "scope_invalid"),
        "{}",
        r.stderr
    );
    assert!(!home.file("evidence").exists());
}

/// At HALT_NONCRITICAL the gateway holds every noncritical call `queue_timeout_s` (1 s in the
/// drill's own gateway) before refusing it `queued_timeout`, so no caller can be refused
/// sooner: the drill judges the p99 past that hold, and judges what a pause promises (nothing
/// admitted or executed after the trip, every caller refused). With a target below the hold a
/// drill that judged the p99 as if calls were refused at once would always fail.
#[test]
fn a_pause_drill_judges_its_first_rejections_past_the_hold() {
    let home = Home::new();
    let r = home.run(&[
        "drill",
        "--agents",
        "3",
        "--subagents",
        "1",
        "--pull-after-ms",
        "300",
        "--level",
        "halt-noncritical",
        "--target-ms",
        "999",
    ]);
    eprintln!("{}\n{}", r.stdout, r.stderr);
    r.assert_ok();
    let observation = r.json();
    util::validate("control-observation.v1.json", &observation);
    assert_eq!(observation["pass"], true, "{observation}");
    assert_eq!(observation["level"], "halt-noncritical");
    assert_eq!(observation["queue_timeout_ms"], 1000);
    assert_eq!(observation["callers_never_rejected"], 0);
    assert_eq!(observation["operations_admitted_after_trip"], 0);
    assert!(
        observation["calls"]["refusal_codes"]["queued_timeout"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "held calls are refused queued_timeout: {observation}"
    );
    // The time to first rejection is still reported, as a figure.
    assert!(observation["time_to_first_rejection_ms"]["p99"].is_number());
    // At the other levels the record carries no hold.
    let r = home.run(&["drill", "--agents", "2", "--target-ms", "30000"]);
    r.assert_ok();
    assert!(r.json().get("queue_timeout_ms").is_none());
}
