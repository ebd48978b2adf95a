//! A supervisor that cannot make an inotify instance (EMFILE: the user's `max_user_instances`
//! used up elsewhere on a faulty machine) still confirms a freeze and a kill: it polls
//! `cgroup.events` instead of waiting for a notification that cannot come (docs/reference.md §5: a stop
//! never fails quietly).
//!
//! The failure is injected where the supervisor makes its `cgroup.events` watch
//! (`supervisor.events.inotify=emfile`); a test cannot use the real limit without changing a
//! machine-wide sysctl under the other tests (it is per real uid, so a user namespace does not
//! help). Needs `--features stopline/failpoints`: without it nothing fails and the test proves
//! nothing (it passes).

mod run_support;
mod util;

use run_support::*;
use std::time::Duration;
use util::Home;

fn events(cgroup: &str) -> String {
    std::fs::read_to_string(format!("{cgroup}/cgroup.events")).unwrap()
}

#[test]
fn without_inotify_a_freeze_and_a_kill_are_still_confirmed() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("no-inotify");
    let out = open_dir("stopline-run-no-inotify-");
    let (mut running, root, child) = start_counting(
        &home,
        &gateway,
        &run,
        "agent-n",
        out.path(),
        &[
            ("STOPLINE_FAILPOINTS", "supervisor.events.inotify=emfile"),
            ("STOPLINE_LOG", "warn"),
        ],
    );

    home.engage(&format!("run:{run}"), "halt-noncritical");
    let frozen = running.await_state(&home, &run, "agent-n", "frozen");
    let cgroup = frozen["cgroup"].as_str().unwrap().to_string();
    assert!(events(&cgroup).contains("frozen 1"), "{}", events(&cgroup));
    assert!(is_alive(root) && is_alive(child));

    home.engage(&format!("run:{run}"), "emergency");
    let stopped = running.await_state(&home, &run, "agent-n", "quiescent");
    assert!(
        stopped["quiescent_observed_at"].is_string(),
        "the kill is confirmed by an observation: {stopped}"
    );
    assert!(!is_alive(root) && !is_alive(child));
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
    // The confirmations came by polling: the watch was refused every time it was asked for.
    assert!(
        stderr.contains("cannot watch cgroup.events; polling it instead"),
        "{stderr}"
    );
}
