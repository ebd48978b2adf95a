//! Nothing in the control directory can block a reader (docs/reference.md §5): a FIFO, socket, directory
//! or symlink where a latch (or another control record) should be is opened
//! `O_NOFOLLOW | O_NONBLOCK`, found not to be a regular file, and read as a machine emergency or
//! a fault — `check` and `status` answer at once, and a supervised agent is killed.
//!
//! Reproduces a reported defect: a FIFO in `latches/` made `check` and `status` hang forever and wedged
//! the supervisor for good. The only time bound here is a hang detector (60 s), never a speed
//! assertion.

mod run_support;
mod util;

use run_support::*;
use util::{run_or_hang, Home, HANG};

fn mkfifo(path: &std::path::Path) {
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .expect("mkfifo");
}

#[test]
fn a_fifo_socket_directory_or_symlink_in_latches_is_a_machine_emergency_and_blocks_nobody() {
    for kind in ["fifo", "socket", "directory", "symlink"] {
        let home = Home::new();
        home.run(&["init"]).assert_ok();
        let entry = home.file("latches").join(format!("{kind}.json"));
        let _listener;
        match kind {
            "fifo" => mkfifo(&entry),
            "socket" => _listener = Some(std::os::unix::net::UnixListener::bind(&entry).unwrap()),
            "directory" => std::fs::create_dir(&entry).unwrap(),
            _ => std::os::unix::fs::symlink("/dev/zero", &entry).unwrap(),
        }
        let check = run_or_hang(
            home.command(&["--json", "check", "--class", "critical"]),
            &format!("check with a {kind} in latches/"),
        );
        assert_eq!(check.code, 4, "{kind}: {}", check.stdout);
        assert_eq!(
            check.json()["mode"],
            "EMERGENCY",
            "{kind}: {}",
            check.stdout
        );
        let status = run_or_hang(home.command(&["--json", "status"]), "status");
        status.assert_ok();
        let latches = status.json()["latches"].clone();
        let listed = latches
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["file"] == format!("{kind}.json"))
            .unwrap_or_else(|| panic!("{kind}: not listed: {latches}"))
            .clone();
        assert_eq!(listed["scope"], "machine", "{kind}: {listed}");
        assert_eq!(listed["level"], "emergency", "{kind}: {listed}");
        assert!(
            listed["problem"]
                .as_str()
                .unwrap_or_default()
                .contains("not a regular file"),
            "{kind}: {listed}"
        );
    }
}

#[test]
fn a_fifo_in_place_of_a_control_record_closes_every_gate_without_blocking() {
    for name in ["state.json", "epoch.json", "breakglass.wal.jsonl"] {
        let home = Home::new();
        home.run(&["init"]).assert_ok();
        mkfifo(&home.file(name));
        let check = run_or_hang(
            home.command(&["--json", "check", "--class", "critical"]),
            &format!("check with {name} a FIFO"),
        );
        assert_eq!(check.code, 4, "{name}: {}", check.stdout);
        assert!(check.json()["code"].is_string(), "{name}: {}", check.stdout);
        // And engage still lands: the latch stands alone.
        let engage = run_or_hang(
            home.command(&["--json", "engage", "--scope", "machine", "--reason", "fifo"]),
            "engage",
        );
        assert_eq!(
            engage.code, 0,
            "{name}: {} {}",
            engage.stdout, engage.stderr
        );
        assert_eq!(engage.json()["engaged"], true);
    }
}

#[test]
fn a_fifo_in_latches_stops_a_supervised_agent_instead_of_wedging_its_supervisor() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("fifo");
    let card = write_card(&home, &card(&run, "agent-a"));
    let out = open_dir("stopline-run-fifo-");
    let running = start_run(
        &home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        out.path(),
        "while :; do sleep 1; done",
    );
    wait_for_state(&home, &run, "agent-a", "running");
    mkfifo(&home.file("latches").join("planted.json"));
    // The supervisor reads the FIFO as a machine emergency and kills the agent; the run ends.
    let (code, stdout, stderr) = running.finish(HANG);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    let group = format!("/stopline/run-{run}.agent-a");
    assert_eq!(processes_in_group(&group), Vec::<u32>::new());
    let registered = registration(&home, &run, "agent-a").expect("registration");
    assert_eq!(registered["state"], "quiescent", "{registered}");
}
