//! The real check passes: the four-mode machine and every protocol scenario, no violation,
//! and the report has the shape docs/reference.md §3 fixes.

use stopline_assurance::model_check::run;
use stopline_assurance::protocol::properties::Property;
use stopline_assurance::protocol::Options;

#[test]
fn the_real_protocol_passes_every_property() {
    let report = run(&Options::default());
    assert!(report.ok(), "{}", report.text());
    let json = report.json();
    assert_eq!(json["ok"], true);
    let four = &json["four_mode"];
    let figures = ["pairs", "accepted", "rejected", "reachable", "max_depth"];
    let got: Vec<u64> = figures.iter().map(|f| four[f].as_u64().unwrap()).collect();
    assert_eq!(got, [20, 13, 7, 4, 1]);
    assert!(four["properties"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["pass"] == true));
    let protocol = &json["protocol"];
    assert!(protocol["states"].as_u64().unwrap() > 10_000);
    let properties = protocol["properties"].as_array().unwrap();
    // Every property of the verdict is reported, by name and in order (SpendKept,
    // LiveWorkersReached and DrillGateAsTheLog made 14; RecordReadableIffDurable 15; the etcd
    // plane's high-water mark, PlaneBelowMarksRefused, 16; the bounded tail's
    // FoldSparesLiveAuthority, 17; revoking one token's RevokeRefusesOnlyItsTokens, 18; the
    // staged gate's StagedOnlyRefusesMore, 19).
    let names: Vec<&str> = properties
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let expected: Vec<&str> = Property::ALL.iter().map(|p| p.name()).collect();
    assert_eq!(names, expected);
    assert_eq!(properties.len(), 19);
    assert!(properties
        .iter()
        .all(|p| p["pass"] == true && p["checks"].as_u64() > Some(0)));
    let text = report.text();
    assert!(text.contains("RESULT: ALL PROPERTIES VERIFIED"), "{text}");
    assert!(!text.contains("[FAIL]"), "{text}");
}

#[test]
fn a_label_stop_racing_an_agent_stop_revokes_the_delegate_that_added_the_label() {
    let options = Options {
        only: Some("label-vs-agent".into()),
        ..Options::default()
    };
    let report = run(&options);
    assert!(report.ok(), "{}", report.text());
    let scenario = &report.protocol[0];
    assert_eq!(scenario.name, "label-vs-agent");
    let json = report.json();
    let properties = json["protocol"]["properties"].as_array().unwrap();
    let pre_stop = properties
        .iter()
        .find(|p| p["name"] == Property::NoPreStopAuthority.name())
        .unwrap();
    // The label emergency's outcome obliged the gate to refuse the delegate.
    assert!(pre_stop["checks"].as_u64() > Some(0), "{pre_stop}");
}
