//! Drills run in-process against their own gateway: a few small drills in a row leave nothing
//! executed after the trip (no tool call, write, model call or A2A message; the long A2A task
//! open at the stop cut with the refusal and cancelled at its remote), and a gateway that swaps its view in late fails the drill and says
//! why. (The 20 × (100 × 2) figures are a manual run, recorded in BENCHMARKS.md; these stay
//! small to keep CI time low.)

use stopline_drill::long_task::{RemoteCancel, StreamEnd};
use stopline_drill::{DrillOptions, Observation};

fn options(home: &std::path::Path, agents: usize, subagents: usize) -> DrillOptions {
    let mut options = DrillOptions::new(home.to_path_buf());
    options.agents = agents;
    options.subagents = subagents;
    // Long enough for the first calls (connections, journals) to land even on a busy machine.
    options.pull_after_ms = 1000;
    // What these tests guard is nothing after the trip; the time target is a benchmark figure,
    // not something a debug build on a busy CI machine can promise.
    options.target_ms = 30_000;
    options
}

fn after_trip(o: &Observation) -> u64 {
    o.tool_calls_after_trip
        + o.writes_after_trip
        + o.model_calls_after_trip
        + o.a2a_messages_after_trip
}

#[test]
fn three_drills_in_a_row_leave_no_effect_after_the_trip() {
    let home = tempfile::tempdir().unwrap();
    let series = stopline_drill::repeat(&options(home.path(), 20, 2), 3).unwrap();
    let effects: u64 = series.observations.iter().map(|o| o.effects).sum();
    assert!(effects > 0, "the callers did real work");
    for o in &series.observations {
        eprintln!("{}", serde_json::to_string(&o.to_json()).unwrap());
        assert_eq!(after_trip(o), 0, "{:?}", o.after_trip_examples);
        assert_eq!(o.operations_admitted_after_trip, 0);
        assert_eq!(o.callers, 60);
        assert_eq!(
            o.callers_never_rejected, 0,
            "every caller, sub-agents included, is refused"
        );
        assert!(o.model_calls_exercised);
        // The long A2A task was open at the stop: its stream was cut with the refusal, and the
        // remote received the cancel of it (the one task open: plain sends open none), whose
        // answer the send's operation records.
        assert!(o.a2a_exercised);
        let long = o
            .a2a_long_task
            .as_ref()
            .expect("a local drill keeps a long A2A task");
        assert!(long.open_before_pull && long.task.is_some(), "{long:?}");
        assert_eq!(
            long.end,
            StreamEnd::Refused("break_glass_contained".into()),
            "{long:?}"
        );
        assert_eq!(o.a2a_cancels_received, 1, "{long:?}");
        assert!(
            matches!(
                long.cancel,
                RemoteCancel::Confirmed | RemoteCancel::NotConfirmed
            ),
            "{long:?}"
        );
        // Acknowledged within ack_timeout_ms or named as unacknowledged, never lost.
        assert_eq!(o.acknowledged_by.len() + o.unacknowledged.len(), 1);
        assert!(o.ack_ms.is_none_or(|a| a <= o.engage_returned_ms));
        assert!(o.pass, "{:?}", o.reasons);
    }
    // Each drill is filed, against the default harness version, in the home's evidence log.
    let store = stopline_store::Store::open(home.path());
    let filed: Vec<_> = store
        .evidence()
        .entries()
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "control-observation.v1")
        .collect();
    assert_eq!(filed.len(), 3);
    assert!(filed
        .iter()
        .all(|e| e.body["harness_version"] == "drill" && e.body["pass"] == true));
}

#[test]
fn a_gateway_that_refreshes_its_view_late_fails_the_drill() {
    let home = tempfile::tempdir().unwrap();
    let mut slow = options(home.path(), 4, 1);
    slow.harness_version = "harness-slow".into();
    // Far beyond ack_timeout_ms (250), so engage returns while the old view still admits, even
    // on a busy machine where engage itself is slow.
    slow.slow_view = Some(std::time::Duration::from_millis(3000));
    slow.window_ms = Some(1500);
    let o = stopline_drill::drill(&slow).unwrap();
    eprintln!("{}", serde_json::to_string(&o.to_json()).unwrap());
    assert!(!o.pass);
    assert!(
        after_trip(&o) > 0,
        "calls admitted on the old view after engage returned"
    );
    assert!(o.operations_admitted_after_trip > 0);
    assert!(
        o.reasons
            .iter()
            .any(|r| r.contains("executed after the trip")),
        "{:?}",
        o.reasons
    );
    assert_eq!(o.unacknowledged.len(), 1, "engage gave up waiting for it");
    // The failure is on record for that harness version.
    let entries = stopline_store::Store::open(home.path())
        .evidence()
        .entries()
        .unwrap();
    let last = entries.last().unwrap();
    assert_eq!(
        (
            last.body["harness_version"].as_str(),
            last.body["pass"].as_bool()
        ),
        (Some("harness-slow"), Some(false))
    );
}

#[test]
fn a_scope_that_misses_some_callers_is_refused_before_anything_is_stopped() {
    let home = tempfile::tempdir().unwrap();
    let mut o = options(home.path(), 2, 1);
    o.scope = Some("agent:someone-else".into());
    let error = stopline_drill::drill(&o).unwrap_err();
    assert_eq!(error.to_refusal().code.as_str(), "scope_invalid", "{error}");
    let mut against = options(home.path(), 2, 1);
    against.mode = stopline_drill::Mode::Against("http://127.0.0.1:1".into());
    against.scope = Some("machine".into());
    assert_eq!(
        stopline_drill::drill(&against)
            .unwrap_err()
            .to_refusal()
            .code
            .as_str(),
        "scope_invalid"
    );
    assert!(!home.path().join("evidence").exists(), "nothing was filed");
}

/// `--floor`: the same load against a fresh gateway whose stop was engaged before it started.
/// Nothing of the floor's callers is admitted, every one of them is refused after the pull
/// moment, and the drill itself reports when its gateway made its last admission.
#[test]
fn the_floor_admits_nothing_and_refuses_every_caller() {
    let home = tempfile::tempdir().unwrap();
    let mut options = options(home.path(), 10, 2);
    options.floor = true;
    let o = stopline_drill::drill(&options).unwrap();
    assert!(o.pass, "{:?}", o.reasons);
    let floor = o.floor.as_ref().expect("--floor reports the floor");
    assert_eq!(floor.callers, 30);
    assert_eq!(
        floor.operations_admitted, 0,
        "the stop came before the load"
    );
    assert_eq!(floor.callers_never_rejected, 0);
    assert!(floor.time_to_first_rejection_ms.p99 >= floor.time_to_first_rejection_ms.p50);
    let gate_closed = o
        .gate_closed_ms
        .expect("the drill's gateway admitted calls");
    assert!(gate_closed >= 0.0);
    let json = o.to_json();
    assert!(
        json["gate_closed_ms"].is_number()
            && json["floor"]["time_to_first_rejection_ms"]["p99"].is_number()
    );
    // Where the time went: every caller's first refused call is found in the gateway's
    // timeline, in the drill and in its floor, and the drill's view took the latch in.
    let breakdown = o.breakdown.as_ref().expect("a local drill has a timeline");
    assert_eq!(breakdown.matched, o.callers - o.callers_never_rejected);
    assert!(breakdown.view_latched_ms.is_some(), "{breakdown:?}");
    assert!(breakdown.in_flight <= breakdown.matched);
    let slowest = breakdown.slowest.first().expect("the slowest caller");
    assert_eq!(slowest.total_ms, o.time_to_first_rejection_ms.max);
    let floor_breakdown = floor.breakdown.as_ref().expect("the floor's timeline");
    assert_eq!(floor_breakdown.matched, floor.callers);
    assert_eq!(floor_breakdown.view_latched_ms, None);
    assert!(json["breakdown"]["slowest"][0]["total_ms"].is_number());
}
