//! `halt-noncritical` freezes a supervised agent's group (its processes exist and make no
//! progress) and disengaging thaws it (progress resumes); the agent then ends by itself.

mod run_support;
mod util;

use run_support::*;
use std::time::Duration;
use util::Home;

const COUNTING_AGENT: &str = r#"
sleep 1000 &
echo $! > "$OUT/child"
i=0
while :; do
  i=$((i+1))
  echo $i > "$OUT/counter.tmp" && mv "$OUT/counter.tmp" "$OUT/counter"
  [ -e "$OUT/finish" ] && { kill $(cat "$OUT/child"); wait; exit 0; }
  sleep 0.02
done
"#;

fn counter(out: &std::path::Path) -> u64 {
    read(out, "counter")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_pause_freezes_the_group_and_disengage_thaws_it() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("freeze");
    let card = write_card(&home, &card(&run, "agent-p"));
    let out = open_dir("stopline-run-freeze-");
    let running = start_run_env(
        &home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        out.path(),
        COUNTING_AGENT,
        &[("OUT", out.path().to_str().unwrap())],
    );
    wait_for("the counter to move", Duration::from_secs(20), || {
        (counter(out.path()) > 3).then_some(())
    });
    let child = pids_in(&out.path().join("child"))[0];
    let root = wait_for_state(&home, &run, "agent-p", "running")["pid"]
        .as_u64()
        .unwrap() as u32;

    home.engage(&format!("run:{run}"), "halt-noncritical");
    let frozen = wait_for_state(&home, &run, "agent-p", "frozen");
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
    wait_for_state(&home, &run, "agent-p", "running");
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
