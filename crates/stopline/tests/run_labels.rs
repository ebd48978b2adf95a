//! A label stop across two supervised runs (docs/reference.md §1 Label, §6): each policy card's
//! `labels` are signed into its run's token and recorded in its worker's registration, so an
//! emergency on `label:task=ctf-17` reaches both groups from the engage itself and ends both
//! runs, while a run labelled otherwise keeps running.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use serde_json::json;
use std::path::Path;
use std::time::Duration;
use util::Home;

const AGENT: &str = "touch up; while :; do sleep 0.05; done";

fn labelled_run(
    home: &Home,
    gateway: &TestGateway,
    out: &Path,
    name: &str,
    agent: &str,
    task: &str,
) -> (String, RunningRun, String) {
    let run = run_id(name);
    let mut policy = card(&run, agent);
    policy["labels"] = json!({"task": task, "kind": "red-team"});
    let policy = write_card(home, &policy);
    let running = start_run(home, &policy, &["--gateway", &gateway.url()], out, AGENT);
    let worker = wait_for_state(home, &run, agent, "running");
    let cgroup = worker["cgroup"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        worker["labels"],
        json!(["kind=red-team", format!("task={task}")]),
        "{worker}"
    );
    (run, running, cgroup)
}

#[test]
fn a_label_emergency_ends_both_runs_that_carry_it_and_spares_the_other() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let (out_a, out_b, out_c) = (
        open_dir("stopline-run-label-a-"),
        open_dir("stopline-run-label-b-"),
        open_dir("stopline-run-label-c-"),
    );
    let (run_a, running_a, group_a) = labelled_run(
        &home,
        &gateway,
        out_a.path(),
        "label-a",
        "agent-a",
        "ctf-17",
    );
    let (run_b, running_b, group_b) = labelled_run(
        &home,
        &gateway,
        out_b.path(),
        "label-b",
        "agent-b",
        "ctf-17",
    );
    let (run_c, running_c, _) = labelled_run(
        &home,
        &gateway,
        out_c.path(),
        "label-c",
        "agent-c",
        "ctf-18",
    );

    let receipt = home.engage("label:task=ctf-17", "emergency");
    let mut reached: Vec<String> = receipt["groups_reached"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|g| g["cgroup"].as_str().unwrap_or_default().to_string())
        .collect();
    reached.sort();
    let mut expected = vec![group_a, group_b];
    expected.sort();
    assert_eq!(reached, expected, "{receipt}");
    for (run, agent, running) in [
        (&run_a, "agent-a", running_a),
        (&run_b, "agent-b", running_b),
    ] {
        let (code, _, stderr) = running.finish(Duration::from_secs(30));
        assert_eq!(code, 1, "{run}: {stderr}");
        let worker = registration(&home, run, agent).unwrap();
        assert_eq!(worker["state"], "quiescent", "{worker}");
    }
    let worker = registration(&home, &run_c, "agent-c").unwrap();
    assert_eq!(worker["state"], "running", "{worker}");
    home.engage(&format!("run:{run_c}"), "emergency");
    let (code, _, stderr) = running_c.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
}
