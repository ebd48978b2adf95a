//! The real check passes: the four-mode machine and every protocol scenario, no violation.

use stopline_assurance::model_check::run;
use stopline_assurance::protocol::Options;

#[test]
fn the_real_protocol_passes_every_property() {
    let only = std::env::var("MC_ONLY").ok();
    let report = run(&Options {
        progress: true,
        only,
        ..Options::default()
    });
    println!("{}", report.text());
    assert!(report.ok(), "{}", report.text());
}
