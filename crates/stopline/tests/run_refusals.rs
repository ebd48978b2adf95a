//! What `stopline run` refuses before anything starts: an incomplete policy card (every missing
//! field named), a harness version whose last drill failed (or, with `require_drill`, that never
//! passed), a latch covering the run, an unreachable gateway, the caller's own uid without
//! `--unconfined`, an ambiguous agent. A refusal starts no process and, before the card is
//! accepted, writes nothing under `runs/`.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod run_support;
mod util;

use run_support::*;
use serde_json::json;
use std::time::Duration;
use util::Home;

/// Run `sh -c 'touch MARKER'` under `card` with `flags`; return (exit code, stderr).
fn attempt(home: &Home, card: &serde_json::Value, flags: &[&str]) -> (i32, String, bool) {
    let path = write_card(home, card);
    let marker = home
        .dir
        .path()
        .join(format!("started-{}", util::rand_suffix()));
    let script = format!("touch '{}'", marker.display());
    let running = start_run(home, &path, flags, home.dir.path(), &script);
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    (code, stderr, marker.exists())
}

fn check_refused(home: &Home, card: &serde_json::Value, flags: &[&str], code: &str) -> String {
    let (exit, stderr, started) = attempt(home, card, flags);
    assert_eq!(exit, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("error: {code}:")),
        "expected {code}: {stderr}"
    );
    assert!(
        !started,
        "the command ran although the run was refused ({code})"
    );
    stderr
}

/// "Observe, then enforce" never reaches what must stop: a card whose `wall_clock` or
/// `budget_exhausted` condition only observes is `policy_card_incomplete` and starts nothing,
/// and a card whose anomaly condition and breaker only observe runs with its run record
/// naming them (docs/reference.md §6).
#[test]
fn a_card_that_only_observes_what_must_stop_is_refused() {
    let home = Home::new();
    let gateway = TestGateway::start();
    for kind in ["wall_clock", "budget_exhausted"] {
        let mut observing = card(&run_id("observe"), "a");
        observing["stop_conditions"] =
            json!([{"kind": "manual"}, {"kind": kind, "mode": "observe"}]);
        let stderr = check_refused(
            &home,
            &observing,
            &["--unconfined", "--gateway", &gateway.url()],
            "policy_card_incomplete",
        );
        assert!(
            stderr.contains(&format!("stop_conditions[1].mode ({kind} always enforces")),
            "{stderr}"
        );
    }
    let mut breaker = card(&run_id("observe"), "a");
    breaker["breakers"]["mode"] = json!({"budget_exhausted": "observe"});
    check_refused(
        &home,
        &breaker,
        &["--unconfined", "--gateway", &gateway.url()],
        "policy_card_incomplete",
    );
    assert!(!home.file("runs").exists(), "a refused card left a record");

    let run = run_id("watching");
    let mut watching = card(&run, "a");
    watching["stop_conditions"] =
        json!([{"kind": "wall_clock"}, {"kind": "anomaly", "threshold": 0.9, "mode": "observe"}]);
    watching["breakers"]["mode"] =
        json!({"refused_egress": "observe", "unauthorized_calls": "enforce"});
    let path = write_card(&home, &watching);
    let ran = run_true(&home, &path, &gateway.url());
    ran.assert_ok();
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(home.file(&format!("runs/{run}/run.json"))).unwrap())
            .unwrap();
    assert_eq!(
        record["observe_only"],
        json!(["stop_conditions[1]:anomaly", "breakers.refused_egress"]),
        "{record}"
    );
}

#[test]
fn an_incomplete_card_starts_nothing_and_records_nothing() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let incomplete = json!({"schema": "policy-card.v1", "run_id": run_id("incomplete")});
    let stderr = check_refused(
        &home,
        &incomplete,
        &["--unconfined", "--gateway", &gateway.url()],
        "policy_card_incomplete",
    );
    for field in [
        "harness_version",
        "stop_conditions",
        "budgets",
        "breakers",
        "stop_handle.name",
        "stop_handle.levels",
        "who_may_pull",
        "who_may_approve_restart",
        "time_to_stop_target_ms",
        "require_drill",
    ] {
        assert!(stderr.contains(field), "{field} not named: {stderr}");
    }
    assert!(!home.file("runs").exists(), "a refused card left a record");
    let mut free_text = card(&run_id("free"), "a");
    free_text["stop_conditions"] = json!([{"kind": "when it feels wrong"}]);
    check_refused(
        &home,
        &free_text,
        &["--unconfined", "--gateway", &gateway.url()],
        "policy_card_incomplete",
    );
    assert!(!home.file("runs").exists());
}

#[test]
fn a_failed_last_drill_refuses_and_a_passing_one_admits() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let store = stopline_store::Store::open(home.path());
    let drill = |version: &str, pass: bool| {
        let record = json!({"schema": "control-observation.v1", "harness_version": version, "pass": pass, "agents": 1});
        store
            .evidence()
            .append(
                "control-observation.v1",
                record.as_object().unwrap().clone(),
            )
            .unwrap();
    };
    let flags = ["--unconfined", "--gateway", &gateway.url()];
    let run = run_id("drill");
    let mut c = card(&run, "agent-d");
    c["harness_version"] = json!("harness-9");
    drill("harness-9", true);
    drill("harness-9", false);
    drill("other-harness", true);
    let stderr = check_refused(&home, &c, &flags, "drill_required");
    assert!(
        stderr.contains("harness-9") && stderr.contains("failed"),
        "{stderr}"
    );
    assert!(!home.file(&format!("runs/{run}")).exists());

    drill("harness-9", true);
    let (code, stderr, started) = attempt(&home, &c, &flags);
    assert_eq!((code, started), (0, true), "{stderr}");

    let mut required = card(&run_id("required"), "agent-d");
    required["harness_version"] = json!("never-drilled");
    required["require_drill"] = json!(true);
    check_refused(&home, &required, &flags, "drill_required");
    required["require_drill"] = json!(false);
    let (code, stderr, _) = attempt(&home, &required, &flags);
    assert_eq!(
        code, 0,
        "without require_drill no drill is needed: {stderr}"
    );
}

#[test]
fn a_covering_latch_refuses_the_run() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let flags = ["--unconfined", "--gateway", &gateway.url()];
    let run = run_id("latched");
    home.engage(&format!("run:{run}"), "halt-noncritical");
    check_refused(&home, &card(&run, "agent-l"), &flags, "run_contained");
    home.engage("agent:agent-m", "halt-all");
    check_refused(
        &home,
        &card(&run_id("other"), "agent-m"),
        &flags,
        "run_contained",
    );
    let project = std::fs::canonicalize(home.dir.path()).unwrap();
    home.engage(&format!("project:{}", project.display()), "halt-all");
    check_refused(
        &home,
        &card(&run_id("proj"), "agent-z"),
        &flags,
        "run_contained",
    );
    assert!(!home.file("runs").exists());
}

#[test]
fn an_unreachable_gateway_refuses_the_run() {
    let home = Home::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let c = card(&run_id("nogw"), "agent-g");
    check_refused(
        &home,
        &c,
        &["--unconfined", "--gateway", &format!("http://{closed}")],
        "gateway_unreachable",
    );
    let sick = TestGateway::answering(503);
    check_refused(
        &home,
        &c,
        &["--unconfined", "--gateway", &sick.url()],
        "gateway_unreachable",
    );
    // STOPLINE_URL is the default when --gateway is absent.
    let path = write_card(&home, &c);
    let running = start_run_env(
        &home,
        &path,
        &["--unconfined"],
        home.dir.path(),
        "exit 0",
        &[("STOPLINE_URL", &format!("http://{closed}"))],
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 1);
    assert!(
        stderr.contains("gateway_unreachable") && stderr.contains(&closed.to_string()),
        "{stderr}"
    );
    assert!(!home.file("runs").exists());
}

#[test]
fn the_callers_own_uid_needs_unconfined_and_the_agent_must_be_unambiguous() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let me = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into());
    let c = card(&run_id("own"), "agent-o");
    let stderr = check_refused(
        &home,
        &c,
        &["--user", &me, "--gateway", &gateway.url()],
        "bad_request",
    );
    assert!(stderr.contains("--unconfined"), "{stderr}");

    let mut two = card(&run_id("two"), "agent-1");
    two["budgets"]["agent-2"] = json!({"steps": 1});
    let stderr = check_refused(
        &home,
        &two,
        &["--unconfined", "--gateway", &gateway.url()],
        "bad_request",
    );
    assert!(stderr.contains("--agent"), "{stderr}");
    let (code, stderr, started) = attempt(
        &home,
        &two,
        &[
            "--unconfined",
            "--agent",
            "agent-2",
            "--gateway",
            &gateway.url(),
        ],
    );
    assert_eq!((code, started), (0, true), "{stderr}");

    // Both --user and --unconfined is a usage error (neither is `--user auto`, the default).
    let path = write_card(&home, &c);
    let r = home.run(&[
        "run",
        "--policy",
        path.to_str().unwrap(),
        "--user",
        "nobody",
        "--unconfined",
        "--",
        "true",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn a_toml_card_is_recorded_as_json_before_the_run_starts() {
    let home = Home::new();
    let gateway = TestGateway::start();
    let run = run_id("toml");
    let text = format!(
        r#"schema = "policy-card.v1"
run_id = "{run}"
harness_version = "h-toml"
time_to_stop_target_ms = 500
require_drill = false
stop_conditions = [{{ kind = "manual" }}, {{ kind = "anomaly", threshold = 0.8 }}]
[budgets.agent-t]
tool_calls = 3
[breakers]
unauthorized_calls = 1
refused_egress = 1
anomaly_score = 0.8
[stop_handle]
name = "h"
levels = ["pause", "revoke_identity"]
who_may_pull = ["anyone-admitted"]
who_may_approve_restart = ["operator"]
"#
    );
    let path = home.dir.path().join("card.toml");
    std::fs::write(&path, text).unwrap();
    // The agent checks that the card and run record exist before its first instruction runs.
    let script = format!(
        "test -s '{}' && test -s '{}'",
        home.file(&format!("runs/{run}/policy-card.json")).display(),
        home.file(&format!("runs/{run}/run.json")).display()
    );
    let running = start_run(
        &home,
        &path,
        &["--unconfined", "--gateway", &gateway.url()],
        home.dir.path(),
        &script,
    );
    let (code, _, stderr) = running.finish(Duration::from_secs(30));
    assert_eq!(code, 0, "{stderr}");
    let recorded: serde_json::Value = serde_json::from_slice(
        &std::fs::read(home.file(&format!("runs/{run}/policy-card.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(recorded["schema"], "policy-card.v1");
    util::validate("policy-card.v1.json", &recorded);
    assert_eq!(recorded["budgets"]["agent-t"]["tool_calls"], 3);
}

/// `stopline run -- PROGRAM` with `flags`, from `project`, and what it printed.
fn run_program(
    home: &Home,
    card: &serde_json::Value,
    flags: &[&str],
    project: &std::path::Path,
    program: &[&str],
) -> util::Run {
    let path = write_card(home, card);
    let mut args = vec!["--json", "run", "--policy", path.to_str().unwrap()];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(program);
    let mut command = home.command(&args);
    command.current_dir(project);
    util::run_or_hang(command, "stopline run")
}

/// A program under /tmp is hidden by the agent's fresh /tmp under `--net
/// gateway-only`; the agent used to fail to start with a bare "Permission denied" / "not
/// found". The run is refused before anything starts, naming the path and the `--share` that
/// maps it; with that `--share`, it runs.
#[test]
fn a_program_hidden_by_the_private_tmp_is_named_with_the_share_that_maps_it() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let gateway = TestGateway::start();
    let outside = open_dir("stopline-hidden-");
    let program = outside.path().join("bin/agent.sh");
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    std::fs::write(&program, "#!/bin/sh\necho agent-ran\n").unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        program.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let project = tempfile::Builder::new()
        .prefix("project-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = run_id("hidden");
    let flags = ["--net", "gateway-only", "--gateway", &gateway.url()];
    let refused = run_program(
        &home,
        &card(&run, "agent-h"),
        &flags,
        project.path(),
        &[program.to_str().unwrap()],
    );
    assert_eq!(refused.code, 1, "{} {}", refused.stdout, refused.stderr);
    let error = &refused.json()["error"];
    assert_eq!(error["code"], "bad_request", "{error}");
    let message = error["message"].as_str().unwrap();
    let top = outside.path().canonicalize().unwrap();
    assert!(
        message.contains(&program.canonicalize().unwrap().display().to_string())
            && message.contains(&format!("--share {}", top.display())),
        "{message}"
    );
    assert!(!refused.stdout.contains("agent-ran"), "{}", refused.stdout);

    let top = top.display().to_string();
    let flags = [
        "--net",
        "gateway-only",
        "--gateway",
        &gateway.url(),
        "--share",
        &top,
    ];
    let shared = run_program(
        &home,
        &card(&run_id("shared"), "agent-h"),
        &flags,
        project.path(),
        &[program.to_str().unwrap()],
    );
    assert_eq!(shared.code, 0, "{} {}", shared.stdout, shared.stderr);
    assert!(
        shared.stdout.contains("agent-ran") || shared.stderr.contains("agent-ran"),
        "{} {}",
        shared.stdout,
        shared.stderr
    );
}

/// An npm CLI in a `node_modules` under /tmp (a checkout there) runs as is: the run maps the
/// `node_modules` tree its program lies in (and only that) into the agent's mounts.
#[test]
fn a_program_in_a_node_modules_tree_under_tmp_is_mapped_in() {
    use std::os::unix::fs::PermissionsExt;
    let home = Home::new();
    let gateway = TestGateway::start();
    let outside = open_dir("stopline-checkout-");
    let package = outside.path().join("node_modules/some-cli");
    std::fs::create_dir_all(&package).unwrap();
    std::fs::create_dir_all(outside.path().join("node_modules/.bin")).unwrap();
    std::fs::write(
        package.join("cli.sh"),
        "#!/bin/sh\necho cli-ran; cat \"$(dirname \"$0\")/../../secret\" 2>/dev/null; exit 0\n",
    )
    .unwrap();
    std::fs::write(outside.path().join("secret"), "not for the agent").unwrap();
    std::fs::set_permissions(
        package.join("cli.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    for d in ["node_modules", "node_modules/some-cli", "node_modules/.bin"] {
        std::fs::set_permissions(
            outside.path().join(d),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
    }
    let link = outside.path().join("node_modules/.bin/some-cli");
    std::os::unix::fs::symlink("../some-cli/cli.sh", &link).unwrap();
    let project = tempfile::Builder::new()
        .prefix("project-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    std::fs::set_permissions(project.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let flags = ["--net", "gateway-only", "--gateway", &gateway.url()];
    let ran = run_program(
        &home,
        &card(&run_id("npm"), "agent-n"),
        &flags,
        project.path(),
        &[link.to_str().unwrap()],
    );
    let out = format!("{} {}", ran.stdout, ran.stderr);
    assert_eq!(ran.code, 0, "{out}");
    assert!(out.contains("cli-ran"), "{out}");
    assert!(
        !out.contains("not for the agent"),
        "only the tree is mapped: {out}"
    );
}
