//! The conformance battery qualifies a binary and refuses a broken one.
//!
//! - The inventory holds at least 45 cases with unique snake_case ids and real expectations.
//! - The `stopline` binary built from this tree passes its own battery (`ok: true`).
//! - The same binary built with the `conformance-broken` feature, with
//!   `STOPLINE_CONFORMANCE_BREAK` naming two refusals to break, fails the battery (`ok: false`,
//!   exit 1) and the report names exactly the cases those refusals guard; without the variable
//!   the broken build behaves like the normal one.
//!
//! The binaries are built by nested `cargo build` calls (a test cannot depend on a binary of a
//! package that depends on this one). Each is *uplifted* to a directory of its own,
//! `<target>/conformance-normal/` and `<target>/conformance-broken/`, but compiled in this test
//! run's build directory (`CARGO_BUILD_BUILD_DIR`), so only the `stopline` crate itself is
//! compiled again and the suite's own `target/debug/stopline` is never replaced. (The normal
//! build was once uplifted there: a suite run with `--features stopline/failpoints` then had
//! its binary swapped mid-run for one without failpoints, and a test starting the binary in the
//! remove-then-link window found none.)
//!
//! Both builds carry the `failpoints` feature, as the README's suite does: the normal build is
//! then the suite's own artifacts, uplifted (no crate is compiled twice), and the broken one
//! recompiles only the `stopline` crate. Failpoints are inert unless `STOPLINE_FAILPOINTS` names
//! one, which the battery never does; the release binary, built without them, is qualified by
//! the same battery in `cargo xtask release-gate`.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use stopline_assurance::conformance::cases::inventory;

/// Builds and batteries run one at a time: two batteries at once on a small machine only test
/// the machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is <target>/tmp")
        .to_path_buf()
}

/// `cargo build -p stopline --bin stopline [--features F]`, uplifted into `artifacts`.
fn build(features: Option<&str>, artifacts: &Path) -> PathBuf {
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "-p", "stopline", "--bin", "stopline"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .env("CARGO_BUILD_BUILD_DIR", target_dir())
        .env("CARGO_TARGET_DIR", artifacts);
    if let Some(features) = features {
        cmd.args(["--features", features]);
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "cargo build {features:?} failed");
    let binary = artifacts.join("debug/stopline");
    assert!(binary.exists(), "{} was not built", binary.display());
    binary
}

/// Run `binary conformance --json [extra…]` with `env`; exit code and report.
fn battery(binary: &Path, extra: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut cmd = Command::new(binary);
    cmd.args(["conformance", "--json"]).args(extra);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd.output().expect("run the battery");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the battery printed no report ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

fn failed_ids(report: &Value) -> Vec<String> {
    report["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["pass"] != true)
        .map(|c| format!("{}: {}", c["id"].as_str().unwrap_or("?"), c["observation"]))
        .collect()
}

#[test]
fn the_inventory_holds_at_least_45_distinct_cases() {
    let cases = inventory();
    assert!(cases.len() >= 45, "only {} cases", cases.len());
    let mut ids: Vec<&str> = cases.iter().map(|c| c.id).collect();
    for id in &ids {
        assert!(
            !id.is_empty()
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{id:?} is not snake_case"
        );
    }
    ids.sort();
    let before = ids.len();
    ids.dedup();
    assert_eq!(before, ids.len(), "duplicate case ids");
    for case in &cases {
        assert!(
            case.expectation.len() > 20,
            "{}: no real expectation",
            case.id
        );
        assert!(case.budget >= 5, "{}: budget too small", case.id);
    }
}

#[test]
fn the_binary_passes_its_own_battery() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let binary = build(Some("failpoints"), &target_dir().join("conformance-normal"));
    let (code, report) = battery(&binary, &[], &[]);
    assert_eq!(
        (code, &report["ok"]),
        (0, &Value::Bool(true)),
        "failed cases: {:#?}",
        failed_ids(&report)
    );
    assert!(report["total"].as_u64() >= Some(45), "{}", report["total"]);
    assert_eq!(report["failed"], 0);
    let hash = report["binary_sha256"].as_str().unwrap_or_default();
    assert_eq!(hash.len(), 64, "binary_sha256: {hash:?}");
    for case in report["cases"].as_array().unwrap() {
        for field in ["id", "expectation", "observation"] {
            assert!(case[field].is_string(), "{case}: {field}");
        }
        assert!(case["pass"].is_boolean(), "{case}");
    }
}

#[test]
fn a_binary_with_broken_refusals_fails_the_battery_naming_the_cases() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let binary = build(
        Some("failpoints,conformance-broken"),
        &target_dir().join("conformance-broken"),
    );
    // Without the variable the broken build is the normal one: the switch is at run time.
    let (code, report) = battery(&binary, &["--filter", "reason_required"], &[]);
    assert_eq!((code, &report["ok"]), (0, &Value::Bool(true)), "{report}");

    let (code, report) = battery(
        &binary,
        &[],
        &[("STOPLINE_CONFORMANCE_BREAK", "reason_required,stale_token")],
    );
    assert_eq!(code, 1, "a failed battery must exit non-zero");
    assert_eq!(report["ok"], false);
    let failed = failed_ids(&report);
    assert_eq!(report["failed"].as_u64(), Some(failed.len() as u64));
    // Engage accepting a blank reason breaks exactly the reason_required case; check allowing a
    // stale token breaks every case that checks a stale token through the CLI.
    let expected = [
        "reason_required",
        "stale_control_epoch",
        "delegated_tokens_die_with_their_parent",
        "machine_recovery_clears_the_plan_and_mints_an_epoch",
        "engage_accepts_a_stale_token",
        "label_stop_revokes_every_carrier",
        "revoke_one_token",
    ];
    for id in expected {
        assert!(
            failed.iter().any(|f| f.starts_with(&format!("{id}: "))),
            "{id} did not fail: {failed:#?}"
        );
    }
    let unexpected: Vec<&String> = failed
        .iter()
        .filter(|f| !expected.iter().any(|id| f.starts_with(&format!("{id}: "))))
        .collect();
    assert!(
        unexpected.is_empty(),
        "cases the breaks do not touch failed: {unexpected:#?}"
    );
}
