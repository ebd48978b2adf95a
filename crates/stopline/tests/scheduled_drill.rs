//! The scheduled drill (`[drill] every`, docs/reference.md §8): `serve` drills its own gateway
//! on a synthetic run at that interval and records each as any drill; a failed one closes the
//! drill gate of its harness version (`stopline run` refuses `drill_required`) and is alerted
//! through `alert_command`.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures

mod gw;
mod run_support;
mod util;

use gw::Gateway;
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;
use util::Home;

fn config(hook: &Path, harness: &str, target_ms: u64) -> String {
    let script = format!(
        "cat >> {0}/alerts.jsonl; echo >> {0}/alerts.jsonl",
        hook.display()
    );
    format!(
        "[breakers]\nalert_command = [\"/bin/sh\", \"-c\", {}]\n\n[drill]\nevery = \"1s\"\nharness_version = \"{harness}\"\ntarget_ms = {target_ms}\n\n[mcp.stopline-drill]\nurl = \"http://127.0.0.1:{}/mcp\"\n",
        serde_json::to_string(&script).unwrap(),
        gw::free_port()
    )
}

/// The drill observations of `harness` in the home's evidence log.
fn drills(home: &Home, harness: &str) -> Vec<Value> {
    home.valid_evidence()
        .into_iter()
        .filter(|r| r["schema"] == "control-observation.v1" && r["harness_version"] == harness)
        .collect()
}

#[test]
fn a_scheduled_drill_runs_at_its_interval_and_is_recorded() {
    let home = Home::new();
    let hook = home.dir.path().join("hook");
    std::fs::create_dir_all(&hook).unwrap();
    let gateway = Gateway::start(&home, &config(&hook, "sched-pass", 60_000));
    let recorded = gw::within(Duration::from_secs(60), || {
        let found = drills(&home, "sched-pass");
        (!found.is_empty()).then_some(found)
    })
    .expect("a scheduled drill was recorded");
    assert_eq!(recorded[0]["pass"], true, "{}", recorded[0]);
    // The drill stopped only its own run, and lifted it: no latch is left.
    let status = home.status();
    assert!(
        status["latches"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["scope"]
                .as_str()
                .is_some_and(|s| s.starts_with("run:drill-"))),
        "{status}"
    );
    drop(gateway);
}

#[test]
fn a_failed_scheduled_drill_closes_the_gate_and_alerts() {
    let home = Home::new();
    let hook = home.dir.path().join("hook");
    std::fs::create_dir_all(&hook).unwrap();
    // A target no stop can meet: every drill fails.
    let gateway = Gateway::start(&home, &config(&hook, "sched-fail", 0));
    let failed = gw::within(Duration::from_secs(60), || {
        drills(&home, "sched-fail").into_iter().next()
    })
    .expect("a scheduled drill was recorded");
    assert_eq!(failed["pass"], false, "{failed}");
    let alert = gw::within(Duration::from_secs(30), || {
        std::fs::read_to_string(hook.join("alerts.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|a| a["harness_version"] == "sched-fail")
    })
    .expect("the failed drill was alerted");
    assert_eq!(alert["pass"], false, "{alert}");

    let run = run_support::run_id("gated");
    let mut card = run_support::card(&run, "agent-g");
    card["harness_version"] = json!("sched-fail");
    let path = run_support::write_card(&home, &card);
    let refused = run_support::run_true(&home, &path, &gateway.url());
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        format!("{}{}", refused.stdout, refused.stderr).contains("drill_required"),
        "{}{}",
        refused.stdout,
        refused.stderr
    );
}
