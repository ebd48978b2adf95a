//! Known issues of the store that the checker exhibits (not part of `stopline model-check`'s
//! standard scenarios, which must pass). When the store is fixed, this test fails: move the
//! scenario into `scenario::standard()` and delete the test.

use stopline_assurance::model_check::run;
use stopline_assurance::protocol::{Options, Property};

/// An engage repeating a planned latch's scope, level and caller within the one-second
/// coalescing window is coalesced into that latch, returns Ok naming it, and the recovery then
/// clears it: the stop made after the plan is lost.
#[test]
fn an_engage_coalesced_into_a_planned_latch_is_cleared_by_the_recovery() {
    let options = Options {
        known_issues: true,
        only: Some("coalesce-into-plan".into()),
        ..Options::default()
    };
    let report = run(&options);
    assert!(
        report.protocol[0]
            .violations
            .contains_key(&Property::StopWins),
        "{}",
        report.text()
    );
}
