//! Recovery, drain and reconciliation need the owner console: no agent session, a configured
//! operator, a foreground terminal. Each failed predicate is named. Uncertainty survives recovery.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;
use util::{Home, Run, CLOCK_OFFSET};

/// `args` by the configured operator (`--by operator`).
fn by_operator<'a>(args: &[&'a str]) -> Vec<&'a str> {
    let mut args = args.to_vec();
    args.extend(["--by", "operator"]);
    args
}

/// `args` by the operator on the owner console: a pseudo-terminal, no agent session.
fn on_console(home: &Home, args: &[&str]) -> Run {
    home.run_on_pty(&by_operator(args), &[])
}

/// An operation journal of a gateway that crashed mid-call: prepared and dispatched, no outcome.
fn crashed_gateway_journal(home: &Home, op: &str, target: &str) {
    let dir = home.file("ops");
    std::fs::create_dir_all(&dir).unwrap();
    let lines = format!(
        "{{\"op\":\"{op}\",\"phase\":\"prepared\",\"ts\":\"2026-01-01T00:00:00.000Z\",\"ts_ms\":1767225600000,\"target\":\"{target}\",\"agent\":\"w\"}}\n{{\"op\":\"{op}\",\"phase\":\"dispatched\",\"ts\":\"2026-01-01T00:00:00.001Z\",\"ts_ms\":1767225600001}}\n"
    );
    // pid 4194304 is above the kernel's pid_max: this writer is certainly dead.
    std::fs::write(dir.join("gateway-4194304-1.jsonl"), lines).unwrap();
}

#[test]
fn recovery_is_refused_without_a_terminal() {
    let home = Home::new();
    home.engage("machine", "emergency");
    let r = home.run(&by_operator(&[
        "recover", "plan", "--scope", "machine", "--reason", "x",
    ]));
    assert_eq!(
        (r.code, r.code_str().as_str()),
        (1, "owner_control_required")
    );
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("interactive_terminal"), "{message}");
    assert!(
        !message.contains("operator_identity"),
        "only the failed predicate is named: {message}"
    );
    assert!(!message.contains("no_agent_session"), "{message}");
}

#[test]
fn recovery_is_refused_with_an_agent_session() {
    let home = Home::new();
    home.engage("machine", "emergency");
    for var in ["STOPLINE_TOKEN", "STOPLINE_SESSION"] {
        let r = home.run_on_pty(
            &[
                "recover", "plan", "--scope", "machine", "--reason", "x", "--by", "operator",
            ],
            &[(var, "anything")],
        );
        assert_eq!(r.code, 1, "{}", r.stdout);
        assert!(
            r.stderr.contains("owner_control_required") && r.stderr.contains("no_agent_session"),
            "{var}: {}",
            r.stderr
        );
        assert!(
            !r.stderr.contains("interactive_terminal"),
            "the pty passes: {}",
            r.stderr
        );
    }
}

#[test]
fn recovery_is_refused_for_an_unknown_operator() {
    let home = Home::new();
    home.engage("machine", "emergency");
    for by in [vec!["--by", "mallory"], vec![]] {
        let mut args = vec!["recover", "plan", "--scope", "machine", "--reason", "x"];
        args.extend(by.iter().copied());
        let r = home.run_on_pty(&args, &[]);
        assert_eq!(r.code, 1);
        assert!(r.stderr.contains("operator_identity"), "{}", r.stderr);
    }
    // Every failed predicate is named at once.
    let r = home.run_env(
        &[
            "recover", "plan", "--scope", "machine", "--reason", "x", "--by", "mallory",
        ],
        &[("STOPLINE_TOKEN", "t")],
    );
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    for predicate in [
        "no_agent_session",
        "operator_identity",
        "interactive_terminal",
    ] {
        assert!(
            message.contains(predicate),
            "{predicate} missing from {message}"
        );
    }
}

#[test]
fn machine_recovery_on_the_owner_console_clears_the_planned_latches_and_mints_an_epoch() {
    let home = Home::new();
    let before = home.token(&["--agent", "w"]);
    let engaged = home.engage("machine", "emergency");
    let plan = on_console(
        &home,
        &[
            "recover",
            "plan",
            "--scope",
            "machine",
            "--reason",
            "investigated",
        ],
    );
    plan.assert_ok();
    let plan = plan.json();
    assert_eq!(
        plan["latches"],
        serde_json::json!([engaged["latch"]["file"]])
    );
    let plan_id = plan["plan"].as_str().unwrap();
    let apply = on_console(&home, &["recover", "apply", "--plan", plan_id]);
    apply.assert_ok();
    let apply = apply.json();
    assert_eq!(apply["recovered"], true);
    assert_eq!(apply["state"], "RUNNING");
    let new_epoch = apply["new_epoch"].as_u64().unwrap();
    assert!(home.entries("latches").is_empty());
    assert_eq!(
        home.entries(&format!("breakglass.cleared/epoch-{new_epoch}")),
        vec![engaged["latch"]["file"].as_str().unwrap()]
    );
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &before]);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("stale_control_epoch")),
        "pre-stop tokens stay dead after recovery"
    );
    let after = home.token(&["--agent", "w"]);
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &after]).0,
        0
    );
    assert_eq!(home.status()["phase"], "RUNNING");
    // Applying twice is refused.
    let again = on_console(&home, &["recover", "apply", "--plan", plan_id]);
    assert!(again.stderr.contains("plan_unknown"), "{}", again.stderr);
    let unknown = on_console(&home, &["recover", "apply", "--plan", "plan_nope"]);
    assert!(
        unknown.stderr.contains("plan_unknown"),
        "{}",
        unknown.stderr
    );
}

#[test]
fn a_stop_engaged_after_the_plan_survives_the_recovery() {
    let home = Home::new();
    home.engage("machine", "emergency");
    let plan = on_console(
        &home,
        &["recover", "plan", "--scope", "machine", "--reason", "x"],
    )
    .json();
    let racing = home.engage("machine", "halt-all");
    let apply = on_console(
        &home,
        &["recover", "apply", "--plan", plan["plan"].as_str().unwrap()],
    )
    .json();
    assert_eq!(apply["recovered"], false);
    assert_eq!(apply["state"], "FROZEN_SAFE");
    assert_eq!(
        apply["surviving"],
        serde_json::json!([racing["latch"]["file"]])
    );
    assert_eq!(home.status()["state"], "FROZEN_SAFE");
    assert_eq!(home.check(&["--class", "noncritical", "--agent", "a"]).0, 4);
}

#[test]
fn recovery_carries_unresolved_operations_forward_and_they_block_until_reconciled() {
    let home = Home::new();
    crashed_gateway_journal(&home, "op_crashed01", "mcp:everything:write-file");
    home.engage("machine", "emergency");
    let status = home.status();
    assert_eq!(status["phase"], "RECONCILING", "{status}");
    assert_eq!(status["unresolved"]["destination"][0]["op"], "op_crashed01");
    let plan = on_console(
        &home,
        &["recover", "plan", "--scope", "machine", "--reason", "x"],
    )
    .json();
    assert_eq!(
        plan["carried_forward_operations"][0]["operation"]["op"],
        "op_crashed01"
    );
    let apply = on_console(
        &home,
        &["recover", "apply", "--plan", plan["plan"].as_str().unwrap()],
    )
    .json();
    assert_eq!(apply["recovered"], true);
    let token = home.token(&["--agent", "w"]);
    let (code, receipt) = home.check(&[
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "mcp:everything:write-file",
    ]);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("unresolved_operation")),
        "{receipt}"
    );
    assert_eq!(
        home.check(&[
            "--class",
            "noncritical",
            "--token",
            &token,
            "--target",
            "mcp:everything:echo"
        ])
        .0,
        0,
        "other targets are free"
    );
    let listed = home.run(&["ops", "list", "--unresolved"]).json();
    assert_eq!(listed["operations"].as_array().unwrap().len(), 1);
    let aged = home.run(&["ops", "list", "--older-than", "60"]).json();
    assert_eq!(
        aged["operations"][0]["op"], "op_crashed01",
        "the age-based in-doubt query finds it"
    );
    let young = home
        .run(&["ops", "list", "--older-than", "999999999"])
        .json();
    assert_eq!(young["operations"].as_array().unwrap().len(), 0);
    let refused = home.run(&by_operator(&[
        "ops",
        "reconcile",
        "op_crashed01",
        "--outcome",
        "failed",
        "--reason",
        "checked",
    ]));
    assert_eq!(refused.code_str(), "owner_control_required");
    let r = on_console(
        &home,
        &[
            "ops",
            "reconcile",
            "op_crashed01",
            "--outcome",
            "failed",
            "--reason",
            "checked upstream",
        ],
    );
    r.assert_ok();
    assert_eq!(
        home.check(&[
            "--class",
            "noncritical",
            "--token",
            &token,
            "--target",
            "mcp:everything:write-file"
        ])
        .0,
        0
    );
    let again = on_console(
        &home,
        &[
            "ops",
            "reconcile",
            "op_crashed01",
            "--outcome",
            "failed",
            "--reason",
            "x",
        ],
    );
    assert!(
        again.stderr.contains("operation_unknown"),
        "{}",
        again.stderr
    );
}

#[test]
fn drain_bounds_and_preconditions() {
    let home = Home::new();
    let r = on_console(&home, &["drain", "--deadline", "30", "--reason", "x"]);
    assert!(
        r.stderr.contains("drain_requires_machine_latch"),
        "{}",
        r.stderr
    );
    home.engage("agent:w", "emergency");
    let r = on_console(&home, &["drain", "--deadline", "30", "--reason", "x"]);
    assert!(
        r.stderr.contains("drain_requires_machine_latch"),
        "a scoped latch is not enough: {}",
        r.stderr
    );
    home.engage("machine", "emergency");
    for bad in ["0", "3601", "-5"] {
        let r = on_console(&home, &["drain", "--deadline", bad, "--reason", "x"]);
        assert!(
            r.stderr.contains("drain_deadline_out_of_range"),
            "{bad}: {}",
            r.stderr
        );
    }
    let r = home.run(&by_operator(&[
        "drain",
        "--deadline",
        "30",
        "--reason",
        "x",
    ]));
    assert_eq!(r.code_str(), "owner_control_required");
    let r = on_console(
        &home,
        &[
            "drain",
            "--deadline",
            "1",
            "--reason",
            "let prepared work finish",
        ],
    );
    r.assert_ok();
    assert_eq!(home.status()["phase"], "DRAINING");
    // 1.1 s later, by the store's clock (no sleep; needs --features stopline/failpoints).
    let after = home.run_env(&["status"], &[(CLOCK_OFFSET, "1100")]);
    after.assert_ok();
    let status = after.json();
    assert_eq!(
        status["state"], "FROZEN_SAFE",
        "after the deadline (a build without stopline/failpoints ignores {CLOCK_OFFSET}): {status}"
    );
    assert_eq!(status["phase"], "FROZEN_SAFE");
}

#[test]
fn repair_truncates_a_torn_tail_and_rebuilds_the_epoch_keeping_evidence() {
    let home = Home::new();
    home.engage("agent:a", "emergency");
    let token = home.token(&["--agent", "b"]);
    let wal = home.file("breakglass.wal.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&wal).unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":3,\"pr").unwrap();
    std::fs::remove_file(home.file("epoch.json")).unwrap();
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &token]).1["code"],
        "control_wal_corrupt"
    );
    let r = home.run(&by_operator(&["recover", "repair", "--reason", "torn"]));
    assert_eq!(r.code_str(), "owner_control_required");
    let r = on_console(
        &home,
        &["recover", "repair", "--reason", "torn tail after a crash"],
    );
    r.assert_ok();
    let receipt = r.json();
    assert!(receipt["wal_truncated_bytes"].as_u64().unwrap() > 0);
    assert_eq!(receipt["epoch_rebuilt"], true);
    assert_eq!(
        home.entries("recovery-evidence").len(),
        1,
        "the torn WAL bytes are kept"
    );
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &token]).0,
        0
    );
    // A WAL broken in the middle is refused.
    let text = std::fs::read_to_string(&wal).unwrap();
    std::fs::write(&wal, text.replacen("engage", "engagf", 1)).unwrap();
    let r = on_console(&home, &["recover", "repair", "--reason", "x"]);
    assert!(r.stderr.contains("repair_refused"), "{}", r.stderr);
}
