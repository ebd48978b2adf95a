//! The live-run index (`runs.live/`): `status`, an engage's reach and the owner
//! console read the runs that may be live, never every run that ever ran — and a stop still
//! reaches every live worker: when its supervisor died at any step of its start or end, when
//! the agent removed its own entry, on a home full of finished runs.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use std::path::Path;
use std::time::Duration;
use util::Home;

/// The agent: three sleeping children and a file saying it started.
const AGENT: &str = "for i in 1 2 3; do sleep 600 & done; touch up; while :; do sleep 0.05; done";

/// The entries of `runs.live/` but its marker.
fn live_entries(home: &Home) -> Vec<String> {
    home.entries("runs.live")
        .into_iter()
        .filter(|n| n != "complete")
        .collect()
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

/// Run `card` with the failpoint `name` armed to crash the supervisor, and wait for it to die.
fn run_crashing_at(
    home: &Home,
    card: &Path,
    out: &Path,
    name: &str,
    gateway: &TestGateway,
    script: &str,
) {
    let armed = format!("{name}=crash");
    let running = start_run_env(
        home,
        card,
        &["--gateway", &gateway.url()],
        out,
        script,
        &[("STOPLINE_FAILPOINTS", &armed)],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(
        code, -1,
        "{name}: the supervisor must abort there: {stderr}"
    );
}

/// The supervisor aborts at its worker's first registration, after the agent started: nothing
/// in `runs/` says the worker runs (on the old code an engage's reach found nothing, and the
/// agent ran on), but its entry in `runs.live/` does — the emergency empties its group.
#[test]
fn a_supervisor_dead_before_its_first_registration_leaves_an_agent_the_stop_still_reaches() {
    for (n, name) in ["runs.worker.tmp.create", "runs.worker.rename"]
        .into_iter()
        .enumerate()
    {
        let home = Home::new();
        let out = open_dir("stopline-live-crash-");
        let gateway = TestGateway::start();
        let run = run_id(&format!("live-crash-{n}"));
        let card = write_card(&home, &card(&run, "agent-c"));
        run_crashing_at(&home, &card, out.path(), name, &gateway, AGENT);
        wait_for("the agent started", Duration::from_secs(30), || {
            out.path().join("up").exists().then_some(())
        });
        let group = format!("run-{run}.agent-c");
        assert!(
            processes_in_group(&group).len() >= 4,
            "{name}: the agent outlives its supervisor"
        );
        let entries = live_entries(&home);
        assert_eq!(entries.len(), 1, "{name}");
        let entry: serde_json::Value = serde_json::from_slice(
            &std::fs::read(home.file("runs.live").join(&entries[0])).unwrap(),
        )
        .unwrap();
        let cgroup = entry["cgroup"].as_str().unwrap().to_string();
        // status keeps the entry: its supervisor is gone, its group is not empty.
        let status = home.status();
        assert_eq!(live_entries(&home).len(), 1, "{name}: {status}");
        let receipt = home.engage(&format!("run:{run}"), "emergency");
        let reached = receipt["groups_reached"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(reached.len(), 1, "{name}: {receipt}");
        assert_eq!(reached[0]["confirmed"], true, "{name}: {receipt}");
        assert_eq!(processes_in_group(&group), Vec::<u32>::new(), "{name}");
        // Nothing of the run is live now: the next census takes the entry out.
        home.status();
        assert_eq!(live_entries(&home), Vec::<String>::new(), "{name}");
        assert_eq!(reached[0]["cgroup"], cgroup.as_str(), "{name}: {receipt}");
        std::fs::remove_dir(&cgroup).unwrap();
    }
}

/// Every step of a run's start before the agent, and of its end after it: the supervisor
/// aborted at each. A worker that never started, or has ended, leaves no live worker behind;
/// its entry (whole, torn or missing) is taken out by the next census once its supervisor is
/// gone, `status` then has no hole, and the run id runs again.
/// The names of the failpoints one run of `card` reaches, in order.
fn traced_run(home: &Home, card: &Path, out: &Path, gateway: &TestGateway) -> Vec<String> {
    let trace = home
        .dir
        .path()
        .join(format!("trace-{}", util::rand_suffix()));
    let running = start_run_env(
        home,
        card,
        &["--gateway", &gateway.url()],
        out,
        "true",
        &[("STOPLINE_FAILPOINT_TRACE", trace.to_str().unwrap())],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    std::fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// The durable steps of `runs/` and `runs.live/` a run takes before its agent starts (before
/// its first registration), and those of its entry's removal at its end.
fn run_steps(names: &[String]) -> Vec<String> {
    let first_registration = names
        .iter()
        .position(|n| n.starts_with("runs.worker"))
        .unwrap();
    let mut points: Vec<String> = names[..first_registration]
        .iter()
        .filter(|n| n.starts_with("runs."))
        .cloned()
        .collect();
    points.extend(
        names
            .iter()
            .filter(|n| n.starts_with("runs.live.remove"))
            .cloned(),
    );
    points.dedup();
    points
}

/// After a supervisor died at `name`: the next census takes its entry out (its supervisor is
/// gone, nothing of it runs), `status` then has no hole, no worker is left listed.
fn nothing_live_after(home: &Home, name: &str) {
    let status = home.status();
    assert_eq!(
        live_entries(home),
        Vec::<String>::new(),
        "{name}: the census keeps an entry nothing live stands behind: {status}"
    );
    let status = home.status();
    assert_eq!(status["workers"], serde_json::json!([]), "{name}: {status}");
    assert_eq!(
        status["affected_worker_quiescence_confirmed"], true,
        "{name}: {status}"
    );
}

/// Every step of a run's start before the agent, and of its end after it: the supervisor
/// aborted at each. A worker that never started, or has ended, leaves no live worker behind;
/// its entry (whole, torn or missing) is taken out by the next census once its supervisor is
/// gone, `status` then has no hole, and the run id runs again.
#[test]
fn a_crash_at_every_new_step_leaves_nothing_live_and_the_next_census_takes_the_entry_out() {
    let home = Home::new();
    let out = open_dir("stopline-live-steps-");
    let gateway = TestGateway::start();
    let run = run_id("live-steps");
    let card = write_card(&home, &card(&run, "agent-s"));
    let fresh = run_steps(&traced_run(&home, &card, out.path(), &gateway));
    let points = run_steps(&traced_run(&home, &card, out.path(), &gateway));
    for expected in [
        "runs.live.entry.create",
        "runs.live.entry.write",
        "runs.live.entry.fsync",
        "runs.live.entry.dirsync",
        "runs.record.rename",
        "runs.live.remove",
        "runs.live.remove.dirsync",
    ] {
        assert!(
            points.iter().any(|p| p == expected),
            "{expected} in {points:?}"
        );
    }
    for name in &points {
        run_crashing_at(&home, &card, out.path(), name, &gateway, "true");
        nothing_live_after(&home, name);
    }
    let running = start_run(
        &home,
        &card,
        &["--gateway", &gateway.url()],
        out.path(),
        "true",
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "the run id runs again: {stderr}");
    assert_eq!(live_entries(&home), Vec::<String>::new());

    // The steps only a fresh home's first run takes (the index and the run's directory made),
    // each on a fresh home.
    let first_only: Vec<&String> = fresh.iter().filter(|n| !points.contains(n)).collect();
    assert!(
        first_only
            .iter()
            .any(|n| *n == "runs.live.complete.dirsync"),
        "{first_only:?}"
    );
    for name in first_only {
        let home = Home::new();
        let card = write_card(&home, &card_for(&run));
        run_crashing_at(&home, &card, out.path(), name, &gateway, "true");
        nothing_live_after(&home, name);
        let running = start_run(
            &home,
            &card,
            &["--gateway", &gateway.url()],
            out.path(),
            "true",
        );
        let (code, _, stderr) = running.finish(Duration::from_secs(30));
        assert_eq!(code, 0, "{name}: the run id runs again: {stderr}");
    }
}

fn card_for(run: &str) -> serde_json::Value {
    card(run, "agent-s")
}

/// An agent able to write the home removes its own entry: the emergency still empties its group
/// (its registration names the group), with the warning `group_not_indexed`.
#[test]
fn an_agent_that_removed_its_own_entry_is_still_reached() {
    let home = Home::new();
    let out = open_dir("stopline-live-removed-");
    let gateway = TestGateway::start();
    let run = run_id("live-removed");
    let card = write_card(&home, &card(&run, "agent-x"));
    let running = start_run(
        &home,
        &card,
        &["--gateway", &gateway.url()],
        out.path(),
        AGENT,
    );
    let worker = wait_for_state(&home, &run, "agent-x", "running");
    wait_for("the agent started", Duration::from_secs(30), || {
        out.path().join("up").exists().then_some(())
    });
    for entry in live_entries(&home) {
        std::fs::remove_file(home.file("runs.live").join(entry)).unwrap();
    }
    // The supervisor cannot act: only the engage's own reach can stop the agent.
    signal(running.pid(), rustix::process::Signal::STOP);
    let receipt = home.engage(&format!("run:{run}"), "emergency");
    let reached = receipt["groups_reached"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(reached.len(), 1, "{receipt}");
    assert_eq!(reached[0]["cgroup"], worker["cgroup"], "{receipt}");
    assert_eq!(reached[0]["confirmed"], true, "{receipt}");
    assert!(
        receipt["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("group_not_indexed")),
        "{receipt}"
    );
    let group = worker["cgroup"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(processes_in_group(&group), Vec::<u32>::new());
    signal(running.pid(), rustix::process::Signal::CONT);
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
}

/// A home with many finished runs, one of whose registrations is unreadable: `status` and the
/// engage read none of them (the old code read every one: it listed 300 exited workers, saw
/// the unreadable one as a hole in its census and warned `group_not_reached` on every engage),
/// and a live run among them is still listed and reached.
#[test]
fn status_and_engage_on_a_home_of_many_finished_runs_read_only_the_live_one() {
    let home = Home::new();
    let out = open_dir("stopline-live-many-");
    let gateway = TestGateway::start();
    let finished = run_id("live-finished");
    let card_path = write_card(&home, &card(&finished, "agent-f"));
    let running = start_run(
        &home,
        &card_path,
        &["--gateway", &gateway.url()],
        out.path(),
        "true",
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    let done = home.file(&format!("runs/{finished}"));
    for n in 0..300 {
        let copy = home.file(&format!("runs/old-{n}"));
        std::fs::create_dir_all(copy.join("workers")).unwrap();
        for file in ["policy-card.json", "run.json", "workers/agent-f.json"] {
            std::fs::copy(done.join(file), copy.join(file)).unwrap();
        }
    }
    std::fs::write(home.file("runs/old-7/workers/agent-f.json"), b"{unreadable").unwrap();

    let status = home.status();
    assert_eq!(status["workers"], serde_json::json!([]), "{status}");
    assert_eq!(
        status["affected_worker_quiescence_confirmed"], true,
        "{status}"
    );

    let live = run_id("live-among");
    let card_path = write_card(&home, &card(&live, "agent-l"));
    let running = start_run(
        &home,
        &card_path,
        &["--gateway", &gateway.url()],
        out.path(),
        AGENT,
    );
    wait_for_state(&home, &live, "agent-l", "running");
    let status = home.status();
    let workers = status["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1, "{status}");
    assert_eq!(workers[0]["run"], live.as_str(), "{status}");
    signal(running.pid(), rustix::process::Signal::STOP);
    let receipt = home.engage("machine", "emergency");
    assert_eq!(
        receipt["groups_reached"].as_array().unwrap().len(),
        1,
        "{receipt}"
    );
    assert_eq!(receipt["groups_reached"][0]["confirmed"], true, "{receipt}");
    assert!(
        !receipt["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("group_not_reached")),
        "{receipt}"
    );
    signal(running.pid(), rustix::process::Signal::CONT);
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
}
