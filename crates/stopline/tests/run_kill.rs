//! `stopline run` kills every process of a stopped agent — forked children, a `setsid`
//! double-forked daemon, processes that ignore SIGTERM — and status says FROZEN_SAFE only after
//! the group was observed empty (KILLING before), with both phases of stop evidence in order.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use std::time::Duration;
use util::Home;

/// Forks 50 children and a double-forked `setsid` daemon, all ignoring SIGTERM; records pids.
const ESCAPING_AGENT: &str = r#"
trap '' TERM
i=0
while [ $i -lt 50 ]; do
  sh -c 'trap "" TERM; while :; do sleep 1; done' &
  echo $! >> "$OUT/pids"
  i=$((i+1))
done
( setsid sh -c 'trap "" TERM; echo $$ >> "$OUT/daemon"; while :; do sleep 1; done' & )
while :; do sleep 1; done
"#;

/// An RFC 3339 UTC time as (seconds part, nanoseconds), comparable whatever its fraction length.
fn instant(text: &str) -> (String, u64) {
    let text = text.trim_end_matches('Z');
    let (seconds, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = format!("{fraction:0<9}");
    (seconds.to_string(), digits[..9].parse().unwrap())
}

#[test]
fn an_engaged_run_is_killed_to_the_last_process_and_status_waits_for_the_observation() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("kill");
    let card = write_card(&home, &card(&run, "agent-a"));
    let out = open_dir("stopline-run-kill-");
    let running = start_run_env(
        &home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        out.path(),
        ESCAPING_AGENT,
        &[("OUT", out.path().to_str().unwrap())],
    );
    let group = format!("/stopline/run-{run}.agent-a");
    // The agent writes its PID namespace's numbers (gateway-only): the host's are looked up.
    let children = wait_for("50 children", Duration::from_secs(20), || {
        let pids = pids_in(&out.path().join("pids"));
        let host: Vec<u32> = pids.iter().filter_map(|p| host_pid(&group, *p)).collect();
        (pids.len() >= 50 && host.len() == pids.len()).then_some(host)
    });
    let daemon = wait_for("the daemon", Duration::from_secs(20), || {
        pids_in(&out.path().join("daemon"))
            .first()
            .and_then(|p| host_pid(&group, *p))
    });
    let registered = wait_for_state(&home, &run, "agent-a", "running");
    assert_eq!(registered["method"], "cgroup2");
    assert_eq!(registered["unconfined"], true);
    assert!(
        processes_in_group(&group).contains(&daemon),
        "the daemon is still in the group"
    );
    assert_eq!(home.status()["phase"], "RUNNING");

    // Hold the supervisor still so the moment between the latch and the observation is visible.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(running.pid() as i32).unwrap(),
        rustix::process::Signal::STOP,
    )
    .unwrap();
    let receipt = home.engage(&format!("run:{run}"), "emergency");
    let latch_id = receipt["latch"]["id"].as_str().unwrap().to_string();
    let status = home.status();
    assert_eq!(
        status["phase"], "KILLING",
        "a latch alone is not containment: {status}"
    );
    assert_eq!(status["workers"][0]["covered"], true);
    assert_eq!(status["workers"][0]["state"], "running");
    // The engage reached the group itself (docs/reference.md §6): nothing of the agent is left, though
    // the stopped supervisor has not yet observed and recorded it.
    assert_eq!(receipt["groups_reached"][0]["confirmed"], true, "{receipt}");
    assert!(children.iter().all(|pid| !is_alive(*pid)) && !is_alive(daemon));

    rustix::process::kill_process(
        rustix::process::Pid::from_raw(running.pid() as i32).unwrap(),
        rustix::process::Signal::CONT,
    )
    .unwrap();
    let (code, stdout, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("break_glass_contained") && stderr.contains(&latch_id),
        "{stderr}"
    );
    // Named like every refusal a latch causes (docs/reference.md §4): who, why, scope, level, age.
    let by = receipt["latch"]["by"].as_str().unwrap();
    for named in [
        by,
        "reason: \"test stop\"",
        "level emergency",
        "ago",
        "do not retry",
    ] {
        assert!(stderr.contains(named), "{named:?} in {stderr}");
    }

    // Every process is gone: the recorded ones, and anything else in the group.
    for pid in children.iter().chain([&daemon]) {
        assert!(!is_alive(*pid), "pid {pid} survived");
    }
    assert_eq!(processes_in_group(&group), Vec::<u32>::new());

    let worker = registration(&home, &run, "agent-a").unwrap();
    assert_eq!(worker["state"], "quiescent");
    let issued = worker["kill_issued_at"]
        .as_str()
        .expect("kill_issued_at")
        .to_string();
    let observed = worker["quiescent_observed_at"]
        .as_str()
        .expect("quiescent_observed_at")
        .to_string();
    assert!(
        instant(&issued) <= instant(&observed),
        "{issued} > {observed}"
    );

    let phases: Vec<_> = evidence(&home)
        .into_iter()
        .filter(|e| e["kind"] == "stop_observation" && e["run"] == run.as_str())
        .collect();
    assert_eq!(phases.len(), 2, "{phases:?}");
    assert_eq!(
        (
            phases[0]["phase"].as_str(),
            phases[0]["confirmed"].as_bool()
        ),
        (Some("kill_issued"), Some(false))
    );
    assert_eq!(
        (
            phases[1]["phase"].as_str(),
            phases[1]["confirmed"].as_bool()
        ),
        (Some("quiescent_observed"), Some(true))
    );
    assert!(phases[0]["seq"].as_u64() < phases[1]["seq"].as_u64());
    for phase in &phases {
        assert_eq!(phase["latches"][0], latch_id.as_str());
        assert_eq!(phase["method"], "cgroup2");
    }
    assert_eq!(phases[1]["observed_at"], observed.as_str());

    let status = home.status();
    assert_eq!(status["phase"], "FROZEN_SAFE", "{status}");
    assert_eq!(status["affected_worker_quiescence_confirmed"], true);
}

#[test]
fn the_wall_clock_budget_trips_a_breaker_latch_and_kills() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("wall");
    let mut card = card(&run, "agent-w");
    card["budgets"]["agent-w"]["wall_clock_s"] = serde_json::json!(1);
    let card = write_card(&home, &card);
    let running = start_run(
        &home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        home.dir.path(),
        "trap '' TERM; sleep 1000 & sleep 1000",
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("budget_exhausted"), "{stderr}");
    let records: Vec<_> = evidence(&home)
        .into_iter()
        .filter(|e| e["kind"] == "budget_exhausted" && e["trigger"] == "wall_clock_s")
        .collect();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["schema"], "evidence-record.v1");
    assert_eq!(records[0]["agent"], "agent-w");
    assert!(records[0]["observed"].as_f64().unwrap() >= 1.0);
    let latch = records[0]["latch"].as_str().expect("a breaker latch");
    let status = home.status();
    let engaged = status["latches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["id"] == latch)
        .unwrap();
    assert_eq!(
        (engaged["scope"].as_str(), engaged["by"].as_str()),
        (Some("agent:agent-w"), Some("breaker:wall_clock"))
    );
    assert_eq!(
        registration(&home, &run, "agent-w").unwrap()["state"],
        "quiescent"
    );
}

#[test]
fn a_control_state_that_cannot_be_read_is_a_stop_order() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("fault");
    let card = write_card(&home, &card(&run, "agent-f"));
    let running = start_run(
        &home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        home.dir.path(),
        "sleep 1000",
    );
    wait_for_state(&home, &run, "agent-f", "running");
    std::fs::write(home.file("state.json"), b"{ torn").unwrap();
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("control_state_corrupt"), "{stderr}");
    let worker = registration(&home, &run, "agent-f").unwrap();
    assert_eq!(worker["state"], "quiescent");
    assert_eq!(worker["stop_cause"]["kind"], "control_state");
}

#[test]
fn an_agent_that_ends_by_itself_passes_its_exit_code_and_a_scrubbed_environment() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("exit");
    let card = write_card(&home, &card(&run, "agent-e"));
    let out = open_dir("stopline-run-env-");
    let running = start_run_env(
        &home,
        &card,
        &["--unconfined", "--gateway", &gateway.url()],
        out.path(),
        "env > \"$OUT/env\"; cat /proc/self/cgroup > \"$OUT/cgroup\"; exit 7",
        &[
            ("OUT", out.path().to_str().unwrap()),
            ("OPENAI_API_KEY", "sk-real-provider-key"),
            ("ANTHROPIC_API_KEY", "anthropic-key"),
            ("VENDOR_X_API_KEY", "vendor-key"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("STOPLINE_HOME", "/should/not/leak"),
            ("KEEP_THIS", "kept"),
        ],
    );
    let (code, stdout, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 7, "{stderr}");
    let record: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (record["outcome"].as_str(), record["exit_code"].as_i64()),
        (Some("exited"), Some(7))
    );
    let env = read(out.path(), "env").unwrap();
    let var = |name: &str| {
        env.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
    };
    let token = var("STOPLINE_TOKEN").expect("a token");
    assert!(token.starts_with("stl1."));
    assert_eq!(var("OPENAI_API_KEY"), Some(token.clone()));
    assert_eq!(var("STOPLINE_SESSION"), Some(format!("{run}/agent-e")));
    assert_eq!(var("STOPLINE_URL"), Some(gateway.url()));
    assert_eq!(
        var("OPENAI_BASE_URL"),
        Some(format!("{}/v1", gateway.url()))
    );
    assert_eq!(var("KEEP_THIS").as_deref(), Some("kept"));
    // Anthropic SDKs authenticate to the gateway with the agent's token, never the caller's key.
    assert_eq!(var("ANTHROPIC_API_KEY"), Some(token.clone()));
    for gone in ["VENDOR_X_API_KEY", "AWS_SECRET_ACCESS_KEY", "STOPLINE_HOME"] {
        assert_eq!(var(gone), None, "{gone} leaked");
    }
    assert!(!env.contains("sk-real-provider-key"));
    assert!(read(out.path(), "cgroup")
        .unwrap()
        .contains(&format!("0::/stopline/run-{run}.agent-e")));

    // The token carries the run, the project and the card's budgets.
    let verified = home.run(&["token", "verify", &token]);
    let subject = &verified.json()["subject"];
    assert_eq!(subject["runs"][0], run.as_str(), "{}", verified.stdout);
    let project = std::fs::canonicalize(out.path()).unwrap();
    assert_eq!(subject["projects"][0], project.to_str().unwrap());

    let worker = registration(&home, &run, "agent-e").unwrap();
    assert_eq!(
        (worker["state"].as_str(), worker["exit_code"].as_i64()),
        (Some("exited"), Some(7))
    );
    let recorded: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.file(&format!("runs/{run}/run.json"))).unwrap())
            .unwrap();
    assert_eq!(
        recorded["gateway"]["config_sha256"],
        serde_json::Value::Null
    );
    assert!(recorded["gateway"]["config_hash_source"]
        .as_str()
        .unwrap()
        .starts_with("unknown"));
    assert_eq!(home.status()["phase"], "RUNNING");
}
