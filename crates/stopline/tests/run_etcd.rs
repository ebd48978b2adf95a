//! `stopline run` with `--control etcd://…`: the supervisor honours the distributed plane, not
//! only its own control directory. A stop engaged on another host through etcd kills this host's
//! run to the last process; losing etcd freezes the run once the permit (2 s) lapses — an outage
//! is not a stop, but nothing runs on unconfirmed news — and etcd's return thaws it. Real etcd
//! on loopback, real cgroups, real processes.

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod run_support;
mod util;

use etcd_support::Host;
use run_support::*;
use std::path::Path;
use std::time::Duration;

/// Five children that ignore SIGTERM, and a tick every 50 ms into `$OUT/ticks`.
const AGENT: &str = r#"
trap '' TERM
i=0
while [ $i -lt 5 ]; do
  sh -c 'trap "" TERM; while :; do sleep 1; done' &
  echo $! >> "$OUT/pids"
  i=$((i+1))
done
while :; do echo t >> "$OUT/ticks"; sleep 0.05; done
"#;

fn ticks(out: &Path) -> usize {
    std::fs::read_to_string(out.join("ticks"))
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Start the agent on `here` under `--control url`; returns the run, its id and the pids.
fn start(
    here: &Host,
    url: &str,
    test: &str,
    out: &Path,
    gateway: &TestGateway,
) -> (RunningRun, String, Vec<u32>) {
    let run = run_id(test);
    let card = write_card(&here.home, &card(&run, "agent-a"));
    let running = start_run_global(
        &here.home,
        &["--control", url],
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        out,
        AGENT,
        &[("OUT", out.to_str().unwrap())],
    );
    // The agent writes its PID namespace's numbers (gateway-only): the host's are looked up.
    let group = format!("run-{run}.agent-a");
    let pids = wait_for("5 children", Duration::from_secs(20), || {
        let pids = pids_in(&out.join("pids"));
        let host: Vec<u32> = pids.iter().filter_map(|p| host_pid(&group, *p)).collect();
        (pids.len() >= 5 && host.len() == pids.len()).then_some(host)
    });
    wait_for_state(&here.home, &run, "agent-a", "running");
    (running, run, pids)
}

#[test]
fn a_stop_engaged_on_another_host_through_etcd_kills_this_hosts_run() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/run-etcd-kill");
    let here = Host::new(&url, "");
    let there = Host::new(&url, "");
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-etcd-kill-");
    let (running, run, pids) = start(&here, &url, "etcd-kill", out.path(), &gateway);

    let receipt = there.engage(&format!("run:{run}"), "emergency");
    let latch = receipt["latch"]["id"].as_str().unwrap().to_string();
    assert!(
        receipt["warnings"].as_array().is_none_or(|w| w.is_empty()),
        "the stop reached etcd: {receipt}"
    );
    // The latch lives in etcd, not in this host's directory: only the plane can stop the run.
    assert_eq!(here.home.entries("latches"), Vec::<String>::new());

    let (code, stdout, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("break_glass_contained") && stderr.contains(&latch),
        "{stderr}"
    );
    for pid in &pids {
        assert!(!is_alive(*pid), "pid {pid} survived");
    }
    let worker = registration(&here.home, &run, "agent-a").unwrap();
    assert_eq!(worker["state"], "quiescent", "{worker}");
    // Both phases of stop evidence name the etcd latch.
    let phases: Vec<_> = evidence(&here.home)
        .into_iter()
        .filter(|e| e["schema"] == "stop-observation.v1")
        .collect();
    assert_eq!(phases.len(), 2, "{phases:?}");
    assert!(
        phases.iter().all(|p| p["latches"][0] == latch.as_str()),
        "{phases:?}"
    );
}

#[test]
fn losing_etcd_freezes_the_run_after_the_permit_and_its_return_thaws_it() {
    let mut etcd = cluster::Cluster::start(1);
    let url = etcd.url("/run-etcd-permit");
    let here = Host::new(&url, "");
    let gateway = TestGateway::start();
    let out = open_dir("stopline-run-etcd-permit-");
    let (running, run, pids) = start(&here, &url, "etcd-permit", out.path(), &gateway);

    etcd.kill(0);
    let frozen = wait_for_state(&here.home, &run, "agent-a", "frozen");
    assert_eq!(frozen["method"], "cgroup2", "{frozen}");
    // Frozen means no progress (the group is frozen, not killed).
    let before = ticks(out.path());
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(ticks(out.path()), before, "a frozen agent made progress");
    assert!(
        pids.iter().all(|pid| is_alive(*pid)),
        "an outage is not a kill"
    );

    etcd.restart(0);
    wait_for_state(&here.home, &run, "agent-a", "running");
    let thawed = ticks(out.path());
    wait_for("progress after the thaw", Duration::from_secs(10), || {
        (ticks(out.path()) > thawed).then_some(())
    });

    // And a stop through the returned etcd still ends it.
    here.engage(&format!("run:{run}"), "emergency");
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
    for pid in &pids {
        assert!(!is_alive(*pid), "pid {pid} survived");
    }
}
