//! A stop reaches the group even when the supervisor cannot (docs/reference.md §6): with the supervising
//! `stopline run` stopped by SIGSTOP, an emergency engage writes `cgroup.kill` into the covered
//! group itself and the group is empty when the engage returns; a halt freezes it. Once the
//! supervisor runs again it observes and records what happened, and after a lifted pause it
//! thaws a group it did not freeze itself.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use std::path::Path;
use std::time::Duration;
use util::Home;

fn signal(pid: u32, signal: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

fn group_events(cgroup: &str) -> String {
    std::fs::read_to_string(format!("{cgroup}/cgroup.events")).unwrap_or_default()
}

/// The agent: three sleeping children and a heartbeat file.
const AGENT: &str = "for i in 1 2 3; do sleep 600 & done; touch up; while :; do date +%s%N > beat; sleep 0.05; done";

/// A run of [`AGENT`] as `agent`, supervised by `stopline run` (more environment: `env`) in
/// the project directory `out`, once its worker registered as running.
/// Destructure it binding `gateway` to a name (`gateway: _gateway`): `..` would drop the
/// gateway the run reports to at once.
struct Supervised {
    gateway: TestGateway,
    run: String,
    running: RunningRun,
    worker: serde_json::Value,
}

fn supervise(home: &Home, out: &Path, name: &str, agent: &str, env: &[(&str, &str)]) -> Supervised {
    let gateway = TestGateway::start();
    let run = run_id(name);
    let card = write_card(home, &card(&run, agent));
    let running = start_run_env(home, &card, &["--gateway", &gateway.url()], out, AGENT, env);
    let worker = wait_for_state(home, &run, agent, "running");
    Supervised {
        gateway,
        run,
        running,
        worker,
    }
}

#[test]
fn an_emergency_empties_the_group_while_the_supervisor_is_stopped() {
    let home = Home::new();
    let out = open_dir("stopline-run-reach-");
    let Supervised {
        gateway: _gateway,
        run,
        running,
        worker,
    } = supervise(&home, out.path(), "reach", "agent-k", &[]);
    wait_for("the agent's children", Duration::from_secs(30), || {
        out.path().join("up").exists().then_some(())
    });
    let cgroup = worker["cgroup"].as_str().unwrap().to_string();
    let group_name = cgroup.rsplit('/').next().unwrap().to_string();
    assert!(processes_in_group(&group_name).len() >= 4);
    signal(running.pid(), rustix::process::Signal::STOP);

    let receipt = home.engage(&format!("run:{run}"), "emergency");
    let reached = receipt["groups_reached"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(reached.len(), 1, "{receipt}");
    assert_eq!(reached[0]["cgroup"], cgroup.as_str(), "{receipt}");
    assert_eq!(reached[0]["order"], "kill", "{receipt}");
    assert_eq!(reached[0]["confirmed"], true, "{receipt}");
    // A fresh walk of /proc, with the supervisor still stopped: nothing of the agent is left.
    assert_eq!(processes_in_group(&group_name), Vec::<u32>::new());
    assert!(
        group_events(&cgroup).contains("populated 0"),
        "{}",
        group_events(&cgroup)
    );

    signal(running.pid(), rustix::process::Signal::CONT);
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
    let worker = registration(&home, &run, "agent-k").unwrap();
    assert_eq!(worker["state"], "quiescent", "{worker}");
}

#[test]
fn a_pause_freezes_the_group_while_the_supervisor_is_stopped_and_is_thawed_after() {
    let home = Home::new();
    let out = open_dir("stopline-run-reach-freeze-");
    let Supervised {
        gateway: _gateway,
        run,
        running,
        worker,
    } = supervise(&home, out.path(), "reach-freeze", "agent-q", &[]);
    let cgroup = worker["cgroup"].as_str().unwrap().to_string();
    signal(running.pid(), rustix::process::Signal::STOP);
    let receipt = home.engage(&format!("run:{run}"), "halt-noncritical");
    let reached = receipt["groups_reached"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(reached.len(), 1, "{receipt}");
    assert_eq!(reached[0]["order"], "freeze", "{receipt}");
    assert_eq!(reached[0]["confirmed"], true, "{receipt}");
    assert!(
        group_events(&cgroup).contains("frozen 1"),
        "{}",
        group_events(&cgroup)
    );

    // Lifted while the supervisor still cannot act; once it runs again it thaws the group.
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
    signal(running.pid(), rustix::process::Signal::CONT);
    wait_for("the group thawed", Duration::from_secs(20), || {
        group_events(&cgroup).contains("frozen 0").then_some(())
    });
    home.engage(&format!("run:{run}"), "emergency");
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
}

/// The supervisor has read its order (no stop yet) when an emergency lands and the engage
/// empties the group itself; only then does the supervisor look at its agent. The agent died
/// of the stop, not by itself: the run ends stopped (exit 1), never as the agent's own SIGKILL
/// death (exit 137). A failpoint parks the supervisor exactly after its read.
#[test]
fn an_agent_killed_by_an_engage_just_after_the_supervisor_read_its_order_ends_the_run_stopped() {
    let home = Home::new();
    let out = open_dir("stopline-run-reach-race-");
    let park = out.path().join("park");
    let failpoints = format!("run.wake.ordered=stop_if:{}", park.display());
    let Supervised {
        gateway: _gateway,
        run,
        running,
        ..
    } = supervise(
        &home,
        out.path(),
        "reach-race",
        "agent-r",
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    std::fs::write(&park, "").unwrap();
    wait_for(
        "the supervisor parked after its read",
        Duration::from_secs(20),
        || process_state(running.pid()).filter(|s| s == "T"),
    );

    let receipt = home.engage(&format!("run:{run}"), "emergency");
    assert_eq!(receipt["groups_reached"][0]["confirmed"], true, "{receipt}");

    std::fs::remove_file(&park).unwrap();
    signal(running.pid(), rustix::process::Signal::CONT);
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "the run ended stopped: {stderr}");
    let worker = registration(&home, &run, "agent-r").unwrap();
    assert_eq!(worker["state"], "quiescent", "{worker}");
}

/// The supervisor has read its order (no stop yet) when a pause lands and the engage freezes
/// the group itself: once resumed, the supervisor must not thaw a group frozen by a stop its
/// order was read too early to hold (it thawed it until its next read, the agent running on
/// after the engage's receipt said frozen). Watched with inotify on `cgroup.events`: any change
/// of it after the engage returned is a thaw. Needs `--features stopline/failpoints`.
#[test]
fn a_pause_engaged_just_after_the_supervisor_read_its_order_is_not_undone_by_it() {
    use rustix::fs::inotify;
    let home = Home::new();
    let out = open_dir("stopline-run-reach-pause-race-");
    let park = out.path().join("park");
    let failpoints = format!("run.wake.ordered=stop_if:{}", park.display());
    let Supervised {
        gateway: _gateway,
        run,
        running,
        worker,
    } = supervise(
        &home,
        out.path(),
        "reach-pause-race",
        "agent-u",
        &[("STOPLINE_FAILPOINTS", &failpoints)],
    );
    let cgroup = worker["cgroup"].as_str().unwrap().to_string();
    std::fs::write(&park, "").unwrap();
    wait_for(
        "the supervisor parked after its read",
        Duration::from_secs(20),
        || process_state(running.pid()).filter(|s| s == "T"),
    );
    let receipt = home.engage(&format!("run:{run}"), "halt-noncritical");
    assert_eq!(receipt["groups_reached"][0]["confirmed"], true, "{receipt}");
    assert!(group_events(&cgroup).contains("frozen 1"));
    // Past the kernel's 10 ms notification window of the freeze, then watch.
    std::thread::sleep(Duration::from_millis(50));
    let watch =
        inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC).unwrap();
    inotify::add_watch(
        &watch,
        format!("{cgroup}/cgroup.events"),
        inotify::WatchFlags::MODIFY,
    )
    .unwrap();

    std::fs::remove_file(&park).unwrap();
    signal(running.pid(), rustix::process::Signal::CONT);
    // The supervisor's next reads find the pause; its registration says so.
    wait_for_state(&home, &run, "agent-u", "frozen");
    std::thread::sleep(Duration::from_millis(300));
    let mut buffer = [0u8; 1024];
    let changed = rustix::io::read(&watch, &mut buffer);
    assert_eq!(
        changed.map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "cgroup.events changed after the engage froze the group: the supervisor thawed it"
    );
    assert!(group_events(&cgroup).contains("frozen 1"));
    home.engage(&format!("run:{run}"), "emergency");
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
}

/// The state letter of `pid` (`/proc/<pid>/stat`), `None` once it is gone.
fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next().map(String::from)
}
