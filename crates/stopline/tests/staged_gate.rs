//! The gate closes before the disk answers (docs/reference.md §5): a latch body written into
//! `latches.staging/` and never linked into `latches/` makes the served gateway refuse the
//! calls it covers at once, while `status` (the CLI's and the gateway's) still shows nothing
//! engaged; a body that does not parse changes nothing; and once its 2 s pass without its
//! entry appearing, the gateway admits again.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::Gateway;
use serde_json::{json, Value};
use std::time::Duration;
use util::Home;

/// A latch record as an engage stages it, for `agent:<agent>` at halt-all.
fn body(id: &str, agent: &str) -> String {
    json!({
        "kind": "breakglass_latch",
        "id": id,
        "scope": format!("agent:{agent}"),
        "level": "halt-all",
        "by": "tester",
        "reason": "staged by hand",
        "pid": 1,
        "session": {"bound": null, "tier": "console"},
        "ts": "2026-12-07T00:00:00.000Z",
    })
    .to_string()
}

fn check(gateway: &Gateway, token: &str) -> Value {
    gateway
        .post("/v1/check", Some(token), &json!({"class": "noncritical"}))
        .json()
}

#[test]
fn a_staged_latch_refuses_calls_but_is_never_reported_engaged_and_lapses_after_two_seconds() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "reload_interval_ms = 60000");
    let worker = home.token(&["--agent", "w"]);
    let other = home.token(&["--agent", "other"]);
    assert_eq!(check(&gateway, &worker)["decision"], "allow");
    let staging = home.file("latches.staging");

    // A torn body for `w`, then a whole one for another agent: once the other's is in force,
    // the gateway has listed and read the torn one too, and ignored it.
    std::fs::write(
        staging.join("latch_torn.json"),
        &body("latch_torn", "w")[..40],
    )
    .unwrap();
    std::fs::write(
        staging.join("latch_other.json"),
        body("latch_other", "other"),
    )
    .unwrap();
    gw::within(Duration::from_secs(10), || {
        (check(&gateway, &other)["decision"] == "block").then_some(())
    })
    .expect("the other agent's staged latch was never in force");
    assert_eq!(
        check(&gateway, &worker)["decision"],
        "allow",
        "a staged body that does not parse changes nothing"
    );

    std::fs::write(staging.join("latch_staged.json"), body("latch_staged", "w")).unwrap();
    let refused = gw::within(Duration::from_secs(10), || {
        let receipt = check(&gateway, &worker);
        (receipt["decision"] == "block").then_some(receipt)
    })
    .expect("the staged latch never refused the call");
    assert!(
        refused.to_string().contains("latch_staged"),
        "the refusal names the staged latch: {refused}"
    );

    // Never engaged as far as anything that reports is concerned.
    let status = home.run(&["status"]);
    assert_eq!(status.json()["latches"], json!([]), "{}", status.stdout);
    assert_eq!(status.json()["phase"], "RUNNING", "{}", status.stdout);
    let served = gateway.get("/v1/status", Some(&worker)).json();
    assert_eq!(served["latches"], json!([]), "{served}");
    assert!(home.file("latches").read_dir().unwrap().next().is_none());

    // Its 2 s pass with no entry in `latches/`: admitted again, the staged file still there.
    gw::within(Duration::from_secs(20), || {
        (check(&gateway, &worker)["decision"] == "allow").then_some(())
    })
    .expect("the staged latch never lapsed");
    assert!(staging.join("latch_staged.json").exists());
    assert_eq!(
        check(&gateway, &worker)["decision"],
        "allow",
        "a lapsed body does not count again"
    );
}
