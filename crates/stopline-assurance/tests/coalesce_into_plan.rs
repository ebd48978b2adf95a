//! Regression: an engage repeating a planned latch's scope, level and caller within the
//! one-second coalescing window used to be coalesced into that latch, so the recovery cleared
//! the new stop with it. The store now never coalesces into a latch a pending plan names; the
//! checker's scenario for it must find no violation.

use stopline_assurance::model_check::run;
use stopline_assurance::protocol::Options;

#[test]
fn an_engage_during_a_pending_plan_is_never_coalesced_into_a_planned_latch() {
    let options = Options {
        only: Some("coalesce-into-plan".into()),
        no_kills: true,
        ..Options::default()
    };
    let report = run(&options);
    assert_eq!(report.protocol.len(), 1, "the scenario must run");
    assert!(
        report.protocol[0].violations.is_empty(),
        "{}",
        report.text()
    );
}
