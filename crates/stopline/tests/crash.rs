//! Crash at every failpoint of engage, epoch advance and recovery apply; reopen; assert that a
//! published latch is never lost, the epoch never goes back, and no recovery reports
//! `recovered: true` while a covering latch exists. Also inject an I/O error at every step.
//! And at every step of an evidence append, a segment switch's included: no acknowledged record
//! is lost and the chain is never broken.
//!
//! Needs the binary built with `--features stopline/failpoints` (the README's test command does
//! this); without it the failpoint trace is empty and these tests fail rather than pass vacuously.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;
use serde_json::Value;
use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;
use util::Home;

/// The failpoints a command reaches, in order.
fn trace(home: &Home, args: &[&str], pty: bool) -> Vec<String> {
    let trace = home
        .dir
        .path()
        .join(format!("trace-{}", util::rand_suffix()));
    let env = [("STOPLINE_FAILPOINT_TRACE", trace.to_str().unwrap())];
    if pty {
        home.run_on_pty(args, &env).assert_ok();
    } else {
        home.run_env(args, &env).assert_ok();
    }
    let text = std::fs::read_to_string(&trace).unwrap_or_default();
    let mut seen = BTreeSet::new();
    let names: Vec<String> = text
        .lines()
        .filter(|n| seen.insert(n.to_string()))
        .map(String::from)
        .collect();
    assert!(
        !names.is_empty(),
        "no failpoint was reached: build the binary with --features stopline/failpoints"
    );
    names
}

/// Run `args` in `home` with the failpoint `name` armed to crash (`crash` aborts the process
/// there), on a pseudo-terminal when `pty` (the owner console's verbs), and assert it died there.
fn crash_at(home: &Home, args: &[&str], name: &str, pty: bool) {
    let armed = format!("{name}=crash");
    if pty {
        let crashed = home.run_on_pty(args, &[("STOPLINE_FAILPOINTS", &armed)]);
        assert_ne!(
            crashed.code, 0,
            "{name}: the process must die at its failpoint"
        );
    } else {
        let out = home
            .command(args)
            .env("STOPLINE_FAILPOINTS", armed)
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(6),
            "{name}: the process must abort at its failpoint"
        );
    }
}

/// The epoch after a crash: read it if confirmed, else repair on the owner console first.
fn epoch_after(home: &Home) -> u64 {
    let status = home.status();
    if status["faults"].as_array().is_some_and(|f| !f.is_empty()) {
        let (code, check) = home.check(&["--class", "critical", "--agent", "probe"]);
        assert_eq!(
            code, 4,
            "a damaged control state must close the gates: {check}"
        );
        let r = home.run_on_pty(
            &[
                "recover",
                "repair",
                "--reason",
                "after crash",
                "--by",
                "operator",
            ],
            &[],
        );
        assert_eq!(
            r.code, 0,
            "repair after a crash must succeed: {} {}",
            r.stdout, r.stderr
        );
        let status = home.status();
        assert_eq!(status["faults"], serde_json::json!([]), "{status}");
        return status["epoch"]["seq"].as_u64().unwrap();
    }
    status["epoch"]["seq"].as_u64().unwrap()
}

fn latch_files(home: &Home) -> BTreeSet<String> {
    home.entries("latches").into_iter().collect()
}

fn prepare_engage_home() -> Home {
    let home = Home::new();
    home.engage("agent:earlier", "emergency");
    home
}

fn engage_args(scope: &str) -> [&str; 9] {
    [
        "engage",
        "--scope",
        scope,
        "--level",
        "emergency",
        "--reason",
        "crash test",
        "--by",
        "crasher",
    ]
}

fn crash_every_engage_step(scope: &str) {
    let args = engage_args(scope);
    let names = trace(&prepare_engage_home(), &args, false);
    assert!(
        names.iter().any(|n| n.contains("epoch")),
        "engage at emergency advances the epoch: {names:?}"
    );
    let contained_at = names
        .iter()
        .position(|n| n == "engage.dirsync")
        .expect("engage.dirsync is a failpoint");
    for (index, name) in names.iter().enumerate() {
        let home = prepare_engage_home();
        let before = latch_files(&home);
        crash_at(&home, &args, name, false);
        let after = latch_files(&home);
        assert!(
            before.is_subset(&after),
            "{name}: an existing latch was lost"
        );
        if index > contained_at {
            assert_eq!(
                after.len(),
                before.len() + 1,
                "{name}: the latch was durable before the crash and must survive"
            );
            let (code, _) = home.check(&[
                "--class",
                "noncritical",
                "--agent",
                "probe",
                "--project",
                "/",
            ]);
            assert_eq!(code, 4, "{name}: the new stop must hold after the crash");
        }
        let epoch = epoch_after(&home);
        assert!(epoch >= 1, "{name}: the epoch went back to {epoch}");
        // Whatever survived, a fresh engage works afterwards and is durable.
        let r = home.run(&args);
        assert_eq!(r.code, 0, "{name}: engage after the crash: {}", r.stderr);
    }
}

#[test]
fn crash_at_every_step_of_a_machine_engage() {
    crash_every_engage_step("machine");
}

#[test]
fn crash_at_every_step_of_a_scoped_engage() {
    crash_every_engage_step("agent:target");
}

#[test]
fn an_io_error_at_any_step_after_containment_is_a_warning_never_not_engaged() {
    let args = engage_args("agent:target");
    let names = trace(&prepare_engage_home(), &args, false);
    let contained_at = names.iter().position(|n| n == "engage.dirsync").unwrap();
    for name in &names[contained_at + 1..] {
        let home = prepare_engage_home();
        let r = home.run_env(&args, &[("STOPLINE_FAILPOINTS", &format!("{name}=error"))]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        let receipt = r.json();
        assert_eq!(receipt["engaged"], true);
        assert!(
            !receipt["warnings"].as_array().unwrap().is_empty(),
            "{name}: the failure must be reported"
        );
        assert!(home
            .file("latches")
            .join(receipt["latch"]["file"].as_str().unwrap())
            .exists());
    }
}

#[test]
fn a_failed_latch_fsync_is_not_retried_on_the_same_file() {
    let home = prepare_engage_home();
    let args = engage_args("machine");
    let r = home.run_env(
        &args,
        &[("STOPLINE_FAILPOINTS", "engage.latch.fsync=error")],
    );
    // Both attempts hit the same failpoint: the stop is reported as not durable, and each attempt
    // left its own fresh file (never the same one rewritten), which still closes the gates.
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert_eq!(r.code_str(), "latch_not_durable");
    let machine_latches: Vec<String> = latch_files(&home).into_iter().collect();
    assert_eq!(
        machine_latches.len(),
        3,
        "the earlier latch plus two fresh attempts: {machine_latches:?}"
    );
    assert_eq!(
        home.check(&["--class", "noncritical", "--agent", "probe"])
            .0,
        4
    );
}

#[test]
fn a_full_disk_releases_the_reserve_so_the_stop_is_still_written() {
    let home = prepare_engage_home();
    assert!(
        home.file("reserve.bin").exists(),
        "the reserve exists after the first engage"
    );
    // The first latch write fails with ENOSPC; the reserve is released and a fresh latch written.
    let args = engage_args("machine");
    let r = home.run_env(
        &args,
        &[(
            "STOPLINE_FAILPOINTS",
            "engage.latch.create=enospc;reserve.create=error",
        )],
    );
    // With create armed for every attempt the stop cannot be written at all: refused honestly.
    assert_eq!(r.code_str(), "latch_not_durable", "{}", r.stdout);
    let message = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(message.contains("disk_full_reserve_released"), "{message}");
    assert!(
        !home.file("reserve.bin").exists(),
        "the reserve was released for the stop"
    );

    // The realistic case: the disk is full once; the released reserve makes room for a fresh latch.
    let home = prepare_engage_home();
    let r = home.run_env(
        &args,
        &[("STOPLINE_FAILPOINTS", "engage.latch.create=enospc_once")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let receipt = r.json();
    assert_eq!(receipt["engaged"], true);
    let warnings = receipt["warnings"].to_string();
    assert!(
        warnings.contains("disk_full_reserve_released"),
        "{warnings}"
    );
    assert!(home
        .file("latches")
        .join(receipt["latch"]["file"].as_str().unwrap())
        .exists());
}

#[test]
fn a_failed_latch_fsync_once_is_answered_with_a_fresh_file() {
    let home = prepare_engage_home();
    let args = engage_args("machine");
    let r = home.run_env(
        &args,
        &[("STOPLINE_FAILPOINTS", "engage.latch.fsync=error_once")],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let receipt = r.json();
    assert!(
        receipt["warnings"]
            .to_string()
            .contains("latch_publish_failed"),
        "{receipt}"
    );
    // The first attempt's file stays (it still counts as a stop); the receipt names the fresh one.
    assert_eq!(latch_files(&home).len(), 3);
    assert!(latch_files(&home).contains(receipt["latch"]["file"].as_str().unwrap()));
}

fn prepare_recovery_home() -> (Home, String, Value) {
    let home = Home::new();
    home.engage("machine", "emergency");
    let plan = home.run_on_pty(
        &[
            "recover",
            "plan",
            "--scope",
            "machine",
            "--reason",
            "crash test",
            "--by",
            "operator",
        ],
        &[],
    );
    plan.assert_ok();
    let plan_id = plan.json()["plan"].as_str().unwrap().to_string();
    // A stop engaged after the plan: it must survive every crash and every retry.
    let racing = home.engage("machine", "halt-all");
    (home, plan_id, racing)
}

#[test]
fn crash_at_every_step_of_recovery_apply() {
    let (home, plan, _) = prepare_recovery_home();
    let names = trace(
        &home,
        &["recover", "apply", "--plan", &plan, "--by", "operator"],
        true,
    );
    assert!(
        names.iter().any(|n| n.starts_with("recover.epoch")),
        "{names:?}"
    );
    for name in &names {
        let (home, plan, racing) = prepare_recovery_home();
        let racing_file = racing["latch"]["file"].as_str().unwrap().to_string();
        let epoch_before = home.status()["epoch"]["seq"].as_u64().unwrap();
        crash_at(
            &home,
            &["recover", "apply", "--plan", &plan, "--by", "operator"],
            name,
            true,
        );
        assert!(
            latch_files(&home).contains(&racing_file),
            "{name}: the racing stop was lost"
        );
        assert_eq!(
            home.check(&["--class", "noncritical", "--agent", "probe"])
                .0,
            4,
            "{name}: gates must stay closed"
        );
        let epoch = epoch_after(&home);
        assert!(
            epoch >= epoch_before,
            "{name}: epoch went back from {epoch_before} to {epoch}"
        );
        // Retry the same plan: it may have been applied already (plan_unknown) or apply now.
        let retry = home.run_on_pty(
            &["recover", "apply", "--plan", &plan, "--by", "operator"],
            &[],
        );
        if retry.code == 0 {
            let receipt = retry.json();
            assert_eq!(
                receipt["recovered"], false,
                "{name}: recovered while {racing_file} covers the machine"
            );
            assert_eq!(receipt["state"], "FROZEN_SAFE");
        } else {
            assert!(
                retry.stderr.contains("plan_unknown"),
                "{name}: {}",
                retry.stderr
            );
        }
        assert_eq!(
            home.check(&["--class", "noncritical", "--agent", "probe"])
                .0,
            4,
            "{name}: no false all-clear"
        );
    }
}

/// A home whose `ops/` holds the journal of a gateway that is gone: 40 resolved tool calls by
/// `worker`, then one dispatched on `mcp:s:write` whose outcome was never recorded.
fn prepare_ops_home() -> Home {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let mut lines = String::new();
    let line = |op: &str, phase: &str, extra: &str| {
        format!("{{\"op\":\"{op}\",\"phase\":\"{phase}\",\"ts\":\"2026-12-03T00:00:00Z\",\"ts_ms\":1{extra}}}\n")
    };
    for i in 0..40 {
        let op = format!("op_done{i:04}");
        lines += &line(
            &op,
            "prepared",
            ",\"target\":\"mcp:s:echo\",\"agent\":\"worker\"",
        );
        lines += &line(&op, "dispatched", "");
        lines += &line(&op, "outcome", ",\"outcome\":\"committed\"");
    }
    lines += &line(
        "op_open",
        "prepared",
        ",\"target\":\"mcp:s:write\",\"agent\":\"worker\"",
    );
    lines += &line("op_open", "dispatched", "");
    std::fs::create_dir_all(home.file("ops")).unwrap();
    util::write(&home.file("ops/gateway-1-1.jsonl"), lines.as_bytes());
    home
}

/// The operation without outcome is still in doubt and still blocks its agent on its target.
fn assert_open_op_kept(home: &Home, name: &str) {
    let list = home.run(&["ops", "list", "--unresolved"]);
    list.assert_ok();
    let ops = list.json()["operations"].clone();
    assert_eq!(
        ops.as_array().map(|a| a.len()),
        Some(1),
        "{name}: exactly the open operation is unresolved: {ops}"
    );
    assert_eq!(ops[0]["op"], "op_open", "{name}: {ops}");
    assert_eq!(ops[0]["blocking"], true, "{name}: {ops}");
    let (code, check) = home.check(&[
        "--class",
        "noncritical",
        "--agent",
        "worker",
        "--target",
        "mcp:s:write",
    ]);
    assert_eq!(
        code, 4,
        "{name}: the agent is blocked on its target: {check}"
    );
    assert_eq!(check["code"], "unresolved_operation", "{name}: {check}");
    let (code, check) = home.check(&[
        "--class",
        "noncritical",
        "--agent",
        "worker",
        "--target",
        "mcp:s:echo",
    ]);
    assert_eq!(
        code, 0,
        "{name}: resolved operations block nothing: {check}"
    );
}

#[test]
fn crash_at_every_step_of_an_operation_journal_snapshot_and_archive() {
    for retention in ["archive", "prune"] {
        let prepare = || {
            let home = prepare_ops_home();
            util::write(
                &home.file("config.toml"),
                format!("[retention]\ngone_journals = \"{retention}\"\n").as_bytes(),
            );
            home
        };
        let names = trace(&prepare(), &["ops", "compact"], false);
        let mut steps = vec![
            "ops.snapshot.rename",
            "ops.snapshot.tmp.write",
            "ops.archive.snapshot.rename",
            "ops.archive.link",
            "ops.archive.link.dirsync",
            "ops.archive.remove",
            "ops.archive.dirsync",
        ];
        if retention == "prune" {
            steps.push("ops.archive.prune");
        }
        for step in steps {
            assert!(
                names.iter().any(|n| n == step),
                "{retention}: {step} is a failpoint: {names:?}"
            );
        }
        for name in &names {
            let home = prepare();
            crash_at(&home, &["ops", "compact"], name, false);
            assert_open_op_kept(&home, name);
            let (code, check) = home.check(&[
                "--class",
                "noncritical",
                "--agent",
                "worker",
                "--target",
                "mcp:s:write",
            ]);
            assert_eq!(
                (code, check["code"].as_str()),
                (4, Some("unresolved_operation")),
                "{retention} {name}: the doubt still blocks its agent: {check}"
            );
            // Whatever survived, compacting again works and keeps exactly the open operation,
            // now in the archive's open set and nowhere in ops/.
            home.run(&["ops", "compact"]).assert_ok();
            assert_open_op_kept(&home, name);
            assert!(
                !home.file("ops/gateway-1-1.jsonl").exists()
                    && !home.file("ops/gateway-1-1.open.json").exists(),
                "{retention} {name}: the gone writer's journal left ops/"
            );
            assert!(
                home.file("ops/archive/open.json").exists(),
                "{retention} {name}: the archive's open set was written"
            );
            assert_eq!(
                home.file("ops/archive/gateway-1-1.jsonl").exists(),
                retention == "archive",
                "{retention} {name}: the history is kept unless pruned"
            );
            let (code, check) = home.check(&[
                "--class",
                "noncritical",
                "--agent",
                "worker",
                "--target",
                "mcp:s:write",
            ]);
            assert_eq!(code, 4, "{retention} {name}: still blocked: {check}");
            let (code, check) = home.check(&[
                "--class",
                "noncritical",
                "--agent",
                "worker",
                "--target",
                "mcp:s:echo",
            ]);
            assert_eq!(code, 0, "{retention} {name}: {check}");
        }
    }
}

/// A home whose next emergency engage writes a WAL checkpoint: an emergency, then enough halt
/// cycles that the engage's records cross the checkpoint interval (64 lines), built once and
/// copied for every crash.
fn prepare_checkpoint_template() -> Home {
    let home = prepare_engage_home();
    // 2 lines (latch_engaged, epoch_advance), then 2 per cycle: 126 lines, a checkpoint at 64.
    home.halt_cycles(62);
    assert!(home.file("breakglass.wal.checkpoint.json").exists());
    home
}

fn copy_home(template: &Home) -> Home {
    let home = Home::new();
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(template.path())
        .arg(home.path())
        .status()
        .unwrap();
    assert!(status.success());
    home
}

#[test]
fn crash_at_every_step_of_a_wal_checkpoint() {
    let template = prepare_checkpoint_template();
    let args = engage_args("agent:late");
    let names = trace(&copy_home(&template), &args, false);
    assert!(
        names.iter().any(|n| n == "wal.checkpoint.rename")
            && names.iter().any(|n| n == "wal.checkpoint.dirsync"),
        "the engage writes a checkpoint, every step a failpoint: {names:?}"
    );
    let contained_at = names.iter().position(|n| n == "engage.dirsync").unwrap();
    for (index, name) in names.iter().enumerate() {
        let home = copy_home(&template);
        let before = latch_files(&home);
        crash_at(&home, &args, name, false);
        let after = latch_files(&home);
        assert!(before.is_subset(&after), "{name}: a latch was lost");
        if index > contained_at {
            assert_eq!(after.len(), before.len() + 1, "{name}: the stop is durable");
            let (code, _) = home.check(&["--class", "noncritical", "--agent", "late"]);
            assert_eq!(code, 4, "{name}: the new stop holds after the crash");
        }
        let epoch = epoch_after(&home);
        assert!(epoch >= 1, "{name}: the epoch went back to {epoch}");
        // Whatever checkpoint survived, the view read from it is the view of the whole WAL.
        let from_checkpoint = home.status();
        let _ = std::fs::remove_file(home.file("breakglass.wal.checkpoint.json"));
        let whole = home.status();
        for field in ["latches", "epoch", "faults", "phase"] {
            assert_eq!(
                from_checkpoint[field], whole[field],
                "{name}: {field} differs between the checkpoint and the whole WAL"
            );
        }
        let r = home.run(&args);
        assert_eq!(r.code, 0, "{name}: engage after the crash: {}", r.stderr);
    }
}

/// The evidence log's segment bound in the evidence crash tests.
const EVIDENCE_SEGMENT: u64 = 3;

/// Not a test of its own: the child process of `crash_at_every_step_of_an_evidence_append`,
/// run by it (this test binary re-executed with `--exact`) to append one evidence record to the
/// home `STOPLINE_TEST_EVIDENCE_HOME` names, three records to a segment, so the parent can
/// crash it at a failpoint. Without that variable it does nothing.
#[test]
fn evidence_append_child_process() {
    let Some(home) = std::env::var_os("STOPLINE_TEST_EVIDENCE_HOME") else {
        return;
    };
    let keep = std::env::var("STOPLINE_TEST_EVIDENCE_KEEP")
        .ok()
        .map(|k| k.parse().unwrap());
    let store = stopline_store::Store::open(home)
        .with_evidence_segment_records(EVIDENCE_SEGMENT)
        .with_evidence_keep_segments(keep);
    // `STOPLINE_TEST_EVIDENCE_GATE`: read the drills as the drill gate does (which builds an
    // older home's index) instead of appending.
    if std::env::var_os("STOPLINE_TEST_EVIDENCE_GATE").is_some() {
        store.evidence().drills().unwrap();
        return;
    }
    let pass = std::env::var("STOPLINE_TEST_EVIDENCE_PASS").map_or(true, |p| p == "true");
    let record = serde_json::json!({"schema": "control-observation.v1", "harness_version": "child", "pass": pass});
    store
        .evidence()
        .append(
            "control-observation.v1",
            record.as_object().unwrap().clone(),
        )
        .unwrap();
}

/// Run `evidence_append_child_process` on `home` with `env`.
fn append_in_child(home: &Home, env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "evidence_append_child_process", "--nocapture"])
        .env("STOPLINE_TEST_EVIDENCE_HOME", home.path())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A home whose evidence log holds `records` records, three to a segment; with `unanchored`, the
/// head names the record before the newest (as a crash between an append and its head leaves it).
fn prepare_evidence_home(records: u64, unanchored: bool) -> Home {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let store =
        stopline_store::Store::open(home.path()).with_evidence_segment_records(EVIDENCE_SEGMENT);
    let mut head = Vec::new();
    for n in 1..=records {
        if n == records {
            head = std::fs::read(home.file("evidence/head.json")).unwrap_or_default();
        }
        let record = serde_json::json!({"schema": "control-observation.v1", "harness_version": "h", "pass": true, "agents": n});
        store
            .evidence()
            .append(
                "control-observation.v1",
                record.as_object().unwrap().clone(),
            )
            .unwrap();
    }
    if unanchored {
        std::fs::write(home.file("evidence/head.json"), head).unwrap();
    }
    home
}

/// Every record of the log, across segments, as raw lines (oldest first).
fn evidence_lines(home: &Home) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(home.file("evidence"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("log") && n.ends_with(".jsonl"))
        .collect();
    // `log.jsonl` first, then `log-<first>.jsonl` by first record (zero-padded).
    names.sort_by_key(|n| (n != "log.jsonl", n.clone()));
    names
        .iter()
        .flat_map(|n| {
            std::fs::read_to_string(home.file(&format!("evidence/{n}")))
                .unwrap()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn verify_all(home: &Home, name: &str) -> Value {
    let r = home.run(&["evidence", "verify", "--all"]);
    assert_eq!(r.code, 0, "{name}: the chain after the crash: {}", r.stdout);
    r.json()
}

#[test]
fn crash_at_every_step_of_an_evidence_append() {
    // Three records: the next one starts a segment. Four: it goes after the fourth. Four with
    // the fourth unanchored: it is fsynced and anchored before the fifth is written.
    for (records, unanchored, steps) in [
        (
            3,
            false,
            &[
                "evidence.segment.write",
                "evidence.segment.fsync",
                "evidence.segment.dirsync",
                "evidence.head.tmp.create",
                "evidence.head.rename",
                "evidence.head.dirsync",
            ][..],
        ),
        (
            4,
            false,
            &[
                "evidence.head.confirm",
                "evidence.append.write",
                "evidence.append.fsync",
                "evidence.head.rename",
            ][..],
        ),
        (
            4,
            true,
            &[
                "evidence.confirm.fsync",
                "evidence.confirm.dirsync",
                "evidence.head.rename",
                "evidence.append.fsync",
            ][..],
        ),
    ] {
        let home = prepare_evidence_home(records, unanchored);
        let trace = home.dir.path().join("trace");
        let out = append_in_child(
            &home,
            &[("STOPLINE_FAILPOINT_TRACE", trace.to_str().unwrap())],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut seen = BTreeSet::new();
        let names: Vec<String> = std::fs::read_to_string(&trace)
            .unwrap_or_default()
            .lines()
            .filter(|n| seen.insert(n.to_string()))
            .map(String::from)
            .collect();
        for step in steps {
            assert!(
                names.iter().any(|n| n == step),
                "{records} records: {step} is a failpoint of the append (build with --features stopline/failpoints): {names:?}"
            );
        }
        if records == 3 {
            assert!(home.file("evidence/log-000000000004.jsonl").exists());
        }
        for name in &names {
            let home = prepare_evidence_home(records, unanchored);
            let acknowledged = evidence_lines(&home);
            let out = append_in_child(&home, &[("STOPLINE_FAILPOINTS", &format!("{name}=crash"))]);
            assert_eq!(
                out.status.signal(),
                Some(6),
                "{records} records, {name}: the process must abort at its failpoint"
            );
            // Every acknowledged record is there as it was; the crashed one at most follows.
            let after = evidence_lines(&home);
            assert_eq!(
                after[..acknowledged.len()],
                acknowledged[..],
                "{records} records, {name}: an acknowledged record changed or was lost"
            );
            assert!(after.len() <= acknowledged.len() + 1, "{name}: {after:?}");
            let report = verify_all(&home, name);
            assert_eq!(report["records"], after.len(), "{name}: {report}");
            assert!(
                report["unanchored_lines"].as_u64() <= Some(1),
                "{name}: {report}"
            );
            // The next append chains on from whatever survived, in the segment it belongs to.
            let out = append_in_child(&home, &[]);
            assert!(
                out.status.success(),
                "{records} records, {name}: the append after the crash: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let report = verify_all(&home, name);
            assert_eq!(report["records"], after.len() + 1, "{name}: {report}");
            assert_eq!(report["unanchored_lines"], 0, "{name}: {report}");
            let segments: Vec<(u64, u64)> = report["segments"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| (s["first"].as_u64().unwrap(), s["records"].as_u64().unwrap()))
                .collect();
            for (first, held) in &segments {
                assert!(
                    (1..=EVIDENCE_SEGMENT).contains(held) && (first - 1) % EVIDENCE_SEGMENT == 0,
                    "{name}: segments {segments:?}"
                );
            }
        }
    }
}

/// The drills of harness version `child` as the drill gate reads them (the drill index) and as
/// a full read of the log does: the last `pass`, whether any passed, and how many drills.
fn drills_both_ways(home: &Home) -> (String, String) {
    let store = stopline_store::Store::open(home.path());
    let answer = |index: &stopline_store::evidence::drills::DrillIndex| {
        let h = index.history("child");
        format!("{:?} {} {}", h.last_passed, h.any_passed, index.total)
    };
    let gate = store
        .evidence()
        .drills()
        .map_or_else(|fault| format!("refused: {fault}"), |i| answer(&i));
    let full = store.evidence().entries().map_or_else(
        |fault| format!("refused: {fault}"),
        |entries| {
            answer(&stopline_store::evidence::drills::DrillIndex::from_entries(
                &entries,
            ))
        },
    );
    (gate, full)
}

/// The failpoints one child run reaches with `env`, in order, each once.
fn child_trace(home: &Home, env: &[(&str, &str)]) -> Vec<String> {
    let trace = home
        .dir
        .path()
        .join(format!("trace-{}", util::rand_suffix()));
    let mut env = env.to_vec();
    env.push(("STOPLINE_FAILPOINT_TRACE", trace.to_str().unwrap()));
    let out = append_in_child(home, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = BTreeSet::new();
    std::fs::read_to_string(&trace)
        .unwrap_or_default()
        .lines()
        .filter(|n| seen.insert(n.to_string()))
        .map(String::from)
        .collect()
}

/// The drill index: a failing drill appended after passing ones (in the middle of a
/// segment, starting one, and after a drill line a crash left unanchored and unindexed), and the
/// drill gate building an older home's index, crashed at every step: the gate then answers
/// what a full read of the log answers (never the pass of the drills before), `evidence verify
/// --all` finds the index agreeing with the log, and so again after the next append.
#[test]
fn crash_at_every_step_of_a_drill_append_and_an_index_build_the_gate_answers_as_the_log() {
    let failing = [("STOPLINE_TEST_EVIDENCE_PASS", "false")];
    let gate = [("STOPLINE_TEST_EVIDENCE_GATE", "1")];
    // (records before, the home's state, what the crashed child does, the new steps it must reach)
    type Case<'a> = (u64, &'a str, &'a [(&'a str, &'a str)], &'a [&'a str]);
    let cases: [Case; 4] = [
        (
            4,
            "current",
            &failing,
            &[
                "evidence.drills-recent.tmp.create",
                "evidence.drills-recent.tmp.fsync",
                "evidence.drills-recent.rename",
                "evidence.drills-recent.dirsync",
                "evidence.drills.tmp.create",
                "evidence.drills.tmp.fsync",
                "evidence.drills.rename",
                "evidence.drills.dirsync",
            ],
        ),
        (3, "current", &failing, &["evidence.drills.rename"]),
        (
            4,
            "unindexed",
            &failing,
            &["evidence.confirm.fsync", "evidence.drills.rename"],
        ),
        (
            4,
            "older",
            &gate,
            &[
                "evidence.drills.rename",
                "evidence.drills.dirsync",
                "evidence.head.rename",
            ],
        ),
    ];
    // `records` records, the last a passing drill of `child`, then the state.
    let prepare = |records: u64, state: &str| {
        let home = prepare_evidence_home(records - 1, false);
        let store = stopline_store::Store::open(home.path());
        let passed = serde_json::json!({"schema": "control-observation.v1", "harness_version": "child", "pass": true});
        store
            .clone()
            .with_evidence_segment_records(EVIDENCE_SEGMENT)
            .evidence()
            .append(
                "control-observation.v1",
                passed.as_object().unwrap().clone(),
            )
            .unwrap();
        match state {
            // A crash after the newest drill's fsync, before its index and head: both one
            // drill behind.
            "unindexed" => {
                let head = std::fs::read(home.file("evidence/head.json")).unwrap();
                let index = std::fs::read(home.file("evidence/drills.json")).unwrap();
                let record = serde_json::json!({"schema": "control-observation.v1", "harness_version": "child", "pass": false});
                store
                    .with_evidence_segment_records(EVIDENCE_SEGMENT)
                    .evidence()
                    .append(
                        "control-observation.v1",
                        record.as_object().unwrap().clone(),
                    )
                    .unwrap();
                std::fs::write(home.file("evidence/head.json"), head).unwrap();
                std::fs::write(home.file("evidence/drills.json"), index).unwrap();
            }
            // What an older stopline leaves: no index, a head without the drill anchor, and a
            // failed drill of `child` last.
            "older" => {
                let record = serde_json::json!({"schema": "control-observation.v1", "harness_version": "child", "pass": false});
                store
                    .with_evidence_segment_records(EVIDENCE_SEGMENT)
                    .evidence()
                    .append(
                        "control-observation.v1",
                        record.as_object().unwrap().clone(),
                    )
                    .unwrap();
                std::fs::remove_file(home.file("evidence/drills.json")).unwrap();
                let mut head: Value = serde_json::from_slice(
                    &std::fs::read(home.file("evidence/head.json")).unwrap(),
                )
                .unwrap();
                head.as_object_mut().unwrap().remove("drills");
                std::fs::write(home.file("evidence/head.json"), head.to_string()).unwrap();
            }
            _ => {}
        }
        home
    };
    for (records, state, env, steps) in cases {
        let names = child_trace(&prepare(records, state), env);
        for step in steps {
            assert!(
                names.iter().any(|n| n == step),
                "{state} {records}: {step} is a failpoint (build with --features stopline/failpoints): {names:?}"
            );
        }
        for name in &names {
            let home = prepare(records, state);
            let armed = format!("{name}=crash");
            let mut crashed = env.to_vec();
            crashed.push(("STOPLINE_FAILPOINTS", &armed));
            let out = append_in_child(&home, &crashed);
            assert_eq!(
                out.status.signal(),
                Some(6),
                "{state} {records}, {name}: the process must abort at its failpoint"
            );
            let (gate, full) = drills_both_ways(&home);
            assert_eq!(gate, full, "{state} {records}, {name}: after the crash");
            let report = verify_all(&home, name);
            assert_eq!(report["drill_index"], "agrees", "{name}: {report}");
            // The next append (a passing drill) lands, and the gate still reads as the log.
            let out = append_in_child(&home, &[]);
            assert!(
                out.status.success(),
                "{state} {records}, {name}: the append after the crash: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let (gate, full) = drills_both_ways(&home);
            assert_eq!(
                gate, full,
                "{state} {records}, {name}: after the next append"
            );
            assert!(gate.starts_with("Some(true)"), "{name}: {gate}");
            let report = verify_all(&home, name);
            assert_eq!(report["drill_index"], "agrees", "{name}: {report}");
        }
    }
}

/// `[retention] evidence_keep_segments`: a crash at every step of the pruning a segment switch
/// does (the marker, each removal, the directory fsync) leaves a chain that verifies from the
/// marker (or from record 1), every record of the kept segments, and an append that lands.
#[test]
fn crash_at_every_step_of_an_evidence_pruning() {
    let keep = [("STOPLINE_TEST_EVIDENCE_KEEP", "1")];
    let home = prepare_evidence_home(6, false);
    let trace = home.dir.path().join("trace");
    let mut env = keep.to_vec();
    env.push(("STOPLINE_FAILPOINT_TRACE", trace.to_str().unwrap()));
    let out = append_in_child(&home, &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!home.file("evidence/log.jsonl").exists(), "pruned");
    let report = verify_all(&home, "no crash");
    assert_eq!(
        (
            report["pruned_through"].as_u64(),
            report["records"].as_u64()
        ),
        (Some(6), Some(1)),
        "{report}"
    );
    let text = std::fs::read_to_string(&trace).unwrap();
    let mut seen = BTreeSet::new();
    let names: Vec<&str> = text.lines().filter(|n| seen.insert(*n)).collect();
    for step in [
        "evidence.prune.mark.rename",
        "evidence.prune.mark.dirsync",
        "evidence.prune.remove",
        "evidence.prune.dirsync",
    ] {
        assert!(names.contains(&step), "{step}: {names:?}");
    }
    for name in names {
        let home = prepare_evidence_home(6, false);
        let mut env = keep.to_vec();
        let armed = format!("{name}=crash");
        env.push(("STOPLINE_FAILPOINTS", &armed));
        let out = append_in_child(&home, &env);
        assert_eq!(out.status.signal(), Some(6), "{name}: must abort there");
        let report = verify_all(&home, name);
        let pruned = report["pruned_through"].as_u64().unwrap_or(0);
        let records = report["records"].as_u64().unwrap();
        assert!(
            pruned + records >= 6,
            "{name}: an acknowledged record of a kept segment is gone: {report}"
        );
        let out = append_in_child(&home, &keep);
        assert!(
            out.status.success(),
            "{name}: the append after the crash: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = verify_all(&home, name);
        let pruned = report["pruned_through"].as_u64().unwrap_or(0);
        let records = report["records"].as_u64().unwrap();
        assert!(pruned + records >= 7, "{name}: {report}");
        assert_eq!(report["unanchored_lines"], 0, "{name}: {report}");
    }
}

/// The spending journal lines of a gone gateway: two reservations of 1 tool call on `t` (its
/// parent `p` too) that settled at 1, then one of 2 on `t` alone that never settled (in doubt).
fn gone_spend_journal(home: &Home, writer: &str) {
    use stopline_store::spend::SpendLine;
    let one: stopline_core::budget::Budgets =
        [(stopline_core::budget::BudgetKind::ToolCalls, 1.0)].into();
    let two: stopline_core::budget::Budgets =
        [(stopline_core::budget::BudgetKind::ToolCalls, 2.0)].into();
    let chain = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let mut bytes = Vec::new();
    let lines = [
        SpendLine::Reserved {
            id: "a".into(),
            chain: chain(&["t", "p"]),
            amounts: one.clone(),
            ts_ms: 1,
        },
        SpendLine::Settled {
            id: "a".into(),
            used: one.clone(),
        },
        SpendLine::Reserved {
            id: "b".into(),
            chain: chain(&["t", "p"]),
            amounts: one.clone(),
            ts_ms: 2,
        },
        SpendLine::Settled {
            id: "b".into(),
            used: one.clone(),
        },
        SpendLine::Reserved {
            id: "c".into(),
            chain: chain(&["t"]),
            amounts: two,
            ts_ms: 3,
        },
    ];
    for line in lines {
        bytes.extend(serde_json::to_vec(&line).unwrap());
        bytes.push(b'\n');
    }
    std::fs::create_dir_all(home.file("spend")).unwrap();
    util::write(&home.file(&format!("spend/{writer}.jsonl")), &bytes);
}

/// What the spending journals say `t` and `p` spent, as a new gateway's first reservation sees
/// it (no process has start time 1, so every writer of these homes is gone).
fn spent(home: &Home, name: &str) -> (f64, f64) {
    let store = stopline_store::Store::open(home.path());
    let journal = store.spend().journal("probe").unwrap();
    let lock = journal
        .lock()
        .unwrap_or_else(|e| panic!("{name}: the spending cannot be read: {e}"));
    let kind = stopline_core::budget::BudgetKind::ToolCalls;
    let of = |account: &str| lock.elsewhere().used.get(account).map_or(0.0, |b| b[&kind]);
    (of("t"), of("p"))
}

/// `spend/` and `spend/archive/`'s journals.
fn spend_journals(home: &Home, dir: &str) -> Vec<String> {
    let mut names: Vec<String> = home
        .entries(dir)
        .into_iter()
        .filter(|n| n.ends_with(".jsonl"))
        .collect();
    names.sort();
    names
}

/// Spend compaction (`ops compact`, a gateway's upkeep): a crash at every step leaves every
/// gone writer's spending counted exactly once — settled use at what it used, the reservation
/// that never settled at its bound — and the next pass and the next reservation land. Twice:
/// on a home never compacted (three gone journals), and on one compacted before with one more
/// gone journal (the pass that forgets the names of journals already moved).
#[test]
fn crash_at_every_step_of_a_spend_compaction() {
    let writers = [
        "gateway-3000300-1",
        "gateway-3000301-1",
        "gateway-3000302-1",
    ];
    for retention in ["archive", "prune"] {
        for again in [false, true] {
            let prepare = || {
                let home = Home::new();
                home.run(&["init"]).assert_ok();
                util::write(
                    &home.file("config.toml"),
                    format!("[retention]\ngone_journals = \"{retention}\"\n").as_bytes(),
                );
                for writer in writers {
                    gone_spend_journal(&home, writer);
                }
                if again {
                    home.run(&["ops", "compact"]).assert_ok();
                    gone_spend_journal(&home, "gateway-3000303-1");
                }
                home
            };
            let journals = if again { 4.0 } else { 3.0 };
            let exact = (4.0 * journals, 2.0 * journals);
            let home = prepare();
            assert_eq!(spent(&home, "before"), exact, "{retention}");
            let names = trace(&home, &["ops", "compact"], false);
            let mut steps = vec![
                "spend.compact.snapshot.rename",
                "spend.compact.snapshot.dirsync",
                "spend.compact.link",
                "spend.compact.link.dirsync",
                "spend.compact.remove",
                "spend.compact.dirsync",
            ];
            steps.push(if again {
                "spend.compact.forget.dirsync"
            } else {
                "spend.compact.mkdir"
            });
            if retention == "prune" {
                steps.extend(["spend.compact.prune", "spend.compact.prune.dirsync"]);
            }
            for step in steps {
                assert!(
                    names.iter().any(|n| n == step),
                    "{retention} {again}: {step} is a failpoint: {names:?}"
                );
            }
            assert_eq!(spent(&home, "compacted"), exact, "{retention} {again}");
            assert!(spend_journals(&home, "spend").is_empty());
            for name in names.iter().filter(|n| n.starts_with("spend.")) {
                let home = prepare();
                crash_at(&home, &["ops", "compact"], name, false);
                let at = format!("{retention} {again} {name}");
                assert_eq!(spent(&home, &at), exact, "{at}: after the crash");
                home.run(&["ops", "compact"]).assert_ok();
                assert_eq!(spent(&home, &at), exact, "{at}: compacted again");
                assert!(
                    spend_journals(&home, "spend").is_empty(),
                    "{at}: every gone journal left spend/: {:?}",
                    spend_journals(&home, "spend")
                );
                let archived = spend_journals(&home, "spend/archive").len();
                let kept = if retention == "prune" {
                    0
                } else {
                    journals as usize
                };
                assert_eq!(archived, kept, "{at}: kept on disk unless pruned");
                // The next reservation lands, and counts once.
                let store = stopline_store::Store::open(home.path());
                let journal = store.spend().journal("next").unwrap();
                let one: stopline_core::budget::Budgets =
                    [(stopline_core::budget::BudgetKind::ToolCalls, 1.0)].into();
                journal
                    .lock()
                    .unwrap()
                    .reserved(&["t".to_string()], &one)
                    .unwrap_or_else(|e| panic!("{at}: the next reservation: {e}"));
                let kind = stopline_core::budget::BudgetKind::ToolCalls;
                let seen = store.spend().journal("probe").unwrap();
                let lock = seen.lock().unwrap();
                assert_eq!(lock.elsewhere().in_flight["t"][&kind], 1.0, "{at}");
                assert_eq!(lock.elsewhere().used["t"][&kind], exact.0, "{at}");
            }
        }
    }
}

/// Calls of the child below before the one whose reservation rewrites its journal.
const SPEND_CALLS: usize = 30;

/// A live gateway's spending, as `spend_rewrite_child_process` leaves it: a reservation of 2
/// tool calls on `t` left open, then `SPEND_CALLS` of 1 on `t` and `p` settled at 1, then (when
/// nothing stopped it) one more of 1 on `t` and `p`, settled; its journal is rewritten at that
/// last reservation when `STOPLINE_TEST_SPEND_BYTES` is the length of the journal before it.
/// Without `STOPLINE_TEST_SPEND_HOME` it does nothing.
#[test]
fn spend_rewrite_child_process() {
    let Some(home) = std::env::var_os("STOPLINE_TEST_SPEND_HOME") else {
        return;
    };
    let bytes = std::env::var("STOPLINE_TEST_SPEND_BYTES")
        .map(|b| b.parse().unwrap())
        .unwrap_or(u64::MAX);
    let store = stopline_store::Store::open(home).with_spend_rewrite_bytes(bytes);
    let journal = store.spend().journal("gateway").unwrap();
    let kind = stopline_core::budget::BudgetKind::ToolCalls;
    let one: stopline_core::budget::Budgets = [(kind, 1.0)].into();
    let two: stopline_core::budget::Budgets = [(kind, 2.0)].into();
    let chain = ["t".to_string(), "p".to_string()];
    journal.lock().unwrap().reserved(&chain[..1], &two).unwrap();
    for _ in 0..SPEND_CALLS {
        let id = journal.lock().unwrap().reserved(&chain, &one).unwrap();
        journal.settled(&id, &one).unwrap();
    }
    let first = journal.lock().unwrap().reserved(&chain, &one);
    let id = match first {
        Ok(id) => id,
        Err(error) => {
            // An injected error: the reservation was refused; the next one lands.
            println!("refused: {error}");
            journal.lock().unwrap().reserved(&chain, &one).unwrap()
        }
    };
    journal.settled(&id, &one).unwrap();
    println!("journal: {}", journal_len(&store));
}

/// The length of the one spending journal in `store`'s `spend/`.
fn journal_len(store: &stopline_store::Store) -> u64 {
    let spend = store.layout().spend();
    let journals: Vec<_> = std::fs::read_dir(&spend)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".jsonl"))
        .collect();
    assert_eq!(journals.len(), 1, "{journals:?}");
    journals[0].metadata().unwrap().len()
}

/// Run `spend_rewrite_child_process` on `home` with `env`.
fn spend_in_child(home: &Home, env: &[(&str, &str)]) -> std::process::Output {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "spend_rewrite_child_process", "--nocapture"])
        .env("STOPLINE_TEST_SPEND_HOME", home.path())
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// A live writer's rewrite of its own spending journal: a child aborted at every step of it
/// (before the rename: a temporary file left; after it, before `spend/` is fsynced) leaves its
/// spending counted exactly once — the calls settled at 1, the open reservation (in doubt now,
/// its writer gone) at its bound — the temporary file is never read and the next upkeep removes
/// it, and the next reservation lands and counts once. An I/O error at each step refuses that
/// reservation only: the writer's next one lands, its journal still counted exactly.
#[test]
fn crash_at_every_step_of_a_live_spend_journal_rewrite() {
    let calls = SPEND_CALLS as f64;
    // The length of the journal before the last reservation: the bound that rewrites there.
    let bytes = {
        let home = Home::new();
        home.run(&["init"]).assert_ok();
        let store = stopline_store::Store::open(home.path());
        let out = spend_in_child(&home, &[]);
        assert!(out.status.success(), "{out:?}");
        let whole = journal_len(&store);
        // The last call's pair of lines (the same length at every call).
        let text = std::fs::read_to_string(home.file(&format!(
            "spend/{}",
            home.entries("spend")
                .into_iter()
                .find(|n| n.ends_with(".jsonl"))
                .unwrap()
        )))
        .unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines.len(),
            1 + 2 * (SPEND_CALLS + 1),
            "not rewritten: {text}"
        );
        let last = lines[lines.len() - 2..]
            .iter()
            .map(|l| l.len() + 1)
            .sum::<usize>();
        (whole - last as u64).to_string()
    };
    let env = |armed: Option<&str>| {
        let mut env = vec![("STOPLINE_TEST_SPEND_BYTES", bytes.clone())];
        if let Some(armed) = armed {
            env.push(("STOPLINE_FAILPOINTS", armed.to_string()));
        }
        env
    };
    let run = |home: &Home, armed: Option<&str>| {
        let env = env(armed);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        spend_in_child(home, &env)
    };
    let prepare = || {
        let home = Home::new();
        home.run(&["init"]).assert_ok();
        home
    };
    // Uninterrupted: rewritten at the last reservation, every call counted once.
    let home = prepare();
    let trace_file = home.dir.path().join("trace");
    let out = {
        let mut env = env(None);
        env.push((
            "STOPLINE_FAILPOINT_TRACE",
            trace_file.to_str().unwrap().to_string(),
        ));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        spend_in_child(&home, &env)
    };
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        spent(&home, "rewritten"),
        (calls + 1.0 + 2.0, calls + 1.0),
        "every settled call, and the open one in doubt"
    );
    let lines = std::fs::read_to_string(home.file(&format!(
        "spend/{}",
        home.entries("spend")
            .into_iter()
            .find(|n| n.ends_with(".jsonl"))
            .unwrap()
    )))
    .unwrap();
    assert!(lines.lines().count() < 10, "rewritten: {lines}");
    let mut seen = BTreeSet::new();
    let steps: Vec<String> = std::fs::read_to_string(&trace_file)
        .unwrap_or_default()
        .lines()
        .filter(|n| n.starts_with("spend.rewrite"))
        .filter(|n| seen.insert(n.to_string()))
        .map(String::from)
        .collect();
    for step in [
        "spend.rewrite.tmp.create",
        "spend.rewrite.tmp.write",
        "spend.rewrite.tmp.fsync",
        "spend.rewrite.rename",
        "spend.rewrite.dirsync",
    ] {
        assert!(
            steps.iter().any(|n| n == step),
            "{step} is a failpoint: {steps:?} (build with --features stopline/failpoints)"
        );
    }
    let before = (calls + 2.0, calls);
    for step in &steps {
        let home = prepare();
        let out = run(&home, Some(&format!("{step}=crash")));
        assert_eq!(out.status.signal(), Some(6), "{step}: {out:?}");
        assert_eq!(spent(&home, step), before, "{step}: after the crash");
        let leftover = home
            .entries("spend")
            .into_iter()
            .filter(|n| n.contains(".tmp-"))
            .count();
        home.run(&["ops", "compact"]).assert_ok();
        assert_eq!(spent(&home, step), before, "{step}: compacted");
        let left: Vec<String> = home
            .entries("spend")
            .into_iter()
            .filter(|n| n.ends_with(".jsonl") || n.contains(".tmp-"))
            .collect();
        assert!(
            left.is_empty(),
            "{step}: the journal and the {leftover} leftover(s) left spend/: {left:?}"
        );
        let store = stopline_store::Store::open(home.path());
        let journal = store.spend().journal("next").unwrap();
        let kind = stopline_core::budget::BudgetKind::ToolCalls;
        let one: stopline_core::budget::Budgets = [(kind, 1.0)].into();
        journal
            .lock()
            .unwrap()
            .reserved(&["t".to_string()], &one)
            .unwrap_or_else(|e| panic!("{step}: the next reservation: {e}"));
        let probe = store.spend().journal("probe").unwrap();
        let lock = probe.lock().unwrap();
        assert_eq!(lock.elsewhere().in_flight["t"][&kind], 1.0, "{step}");
        assert_eq!(lock.elsewhere().used["t"][&kind], before.0, "{step}");
    }
    for step in &steps {
        let home = prepare();
        let out = run(&home, Some(&format!("{step}=error_once")));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{step}: {out:?}");
        assert!(stdout.contains("refused: "), "{step}: {stdout}");
        assert_eq!(
            spent(&home, step),
            (calls + 1.0 + 2.0, calls + 1.0),
            "{step}: an error refuses one reservation, loses nothing"
        );
    }
}
