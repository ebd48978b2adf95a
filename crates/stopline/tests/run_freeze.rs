//! `halt-noncritical` freezes a supervised agent's group (its processes exist and make no
//! progress) and disengaging thaws it (progress resumes); the agent then ends by itself.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use std::time::Duration;
use util::Home;

#[test]
fn a_pause_freezes_the_group_and_disengage_thaws_it() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("freeze");
    let out = open_dir("stopline-run-freeze-");
    let (mut running, root, child) =
        start_counting(&home, &gateway, &run, "agent-p", out.path(), &[]);

    home.engage(&format!("run:{run}"), "halt-noncritical");
    let frozen = running.await_state(&home, &run, "agent-p", "frozen");
    assert_eq!(
        frozen["kill_issued_at"],
        serde_json::Value::Null,
        "a pause is not a kill"
    );
    let held = counter(out.path());
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(counter(out.path()), held, "a frozen agent made progress");
    assert!(
        is_alive(root) && is_alive(child),
        "a pause keeps the processes"
    );
    let cgroup = frozen["cgroup"].as_str().unwrap();
    let events = std::fs::read_to_string(format!("{cgroup}/cgroup.events")).unwrap();
    assert!(events.contains("frozen 1"), "{events}");

    let r = home.run(&[
        "disengage",
        "--scope",
        &format!("run:{run}"),
        "--reason",
        "resume",
        "--by",
        "operator",
    ]);
    r.assert_ok();
    running.await_state(&home, &run, "agent-p", "running");
    wait_for("progress after the thaw", Duration::from_secs(20), || {
        (counter(out.path()) > held + 3).then_some(())
    });

    std::fs::write(out.path().join("finish"), b"").unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        registration(&home, &run, "agent-p").unwrap()["state"],
        "exited"
    );
    assert!(!is_alive(child));
}

/// True when `pid` is stopped (state `T` in `/proc/<pid>/stat`).
fn is_stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|text| {
        text[text.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .next()
            == Some("T")
    })
}

/// The supervisor lists `latches/` without the WAL lock before its full read. A disengage that
/// removed the pause between that listing and the read of the entry left it an entry that
/// could not be read, which was judged a machine emergency: the agent whose pause was being
/// lifted was killed (the first test of this file failed so, once in CI, under load). Here the
/// supervisor is parked exactly there (`latches.listed=stop_if:`) while the pause is lifted.
/// Needs `--features stopline/failpoints`: without it the supervisor never parks and the test
/// fails waiting for it.
#[test]
fn a_pause_lifted_between_the_supervisors_listing_and_its_read_thaws_and_never_kills() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("freeze-listed");
    let out = open_dir("stopline-run-freeze-listed-");
    let park = home.dir.path().join("park-after-listing");
    let failpoints = format!("latches.listed=stop_if:{}", park.display());
    let (mut running, _, _) = start_counting(
        &home,
        &gateway,
        &run,
        "agent-l",
        out.path(),
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    home.engage(&format!("run:{run}"), "halt-noncritical");
    running.await_state(&home, &run, "agent-l", "frozen");

    // The next read lists the pause and stops before reading its entry.
    std::fs::write(&park, b"").unwrap();
    wait_for(
        "the supervisor to park after listing latches/ (a failpoints build)",
        Duration::from_secs(20),
        || is_stopped(running.pid()).then_some(()),
    );
    let lifted = home.run(&[
        "disengage",
        "--scope",
        &format!("run:{run}"),
        "--reason",
        "resume",
        "--by",
        "operator",
    ]);
    lifted.assert_ok();
    assert_eq!(lifted.json()["cleared"].as_array().map(Vec::len), Some(1));
    std::fs::remove_file(&park).unwrap();
    let pid = rustix::process::Pid::from_raw(running.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();

    let thawed = running.await_state(&home, &run, "agent-l", "running");
    assert_eq!(
        thawed["kill_issued_at"],
        serde_json::Value::Null,
        "{thawed}"
    );
    let held = counter(out.path());
    wait_for("progress after the thaw", Duration::from_secs(20), || {
        (counter(out.path()) > held + 3).then_some(())
    });
    std::fs::write(out.path().join("finish"), b"").unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        registration(&home, &run, "agent-l").unwrap()["state"],
        "exited"
    );
}
