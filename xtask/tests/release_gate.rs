//! The release gate's qualification step against stand-in binaries (shell scripts answering
//! `conformance --json`): only a passing report of at least 45 cases for the very binary that
//! ran writes a manifest; every other outcome — a failed case, a non-zero exit, too few cases,
//! another binary's hash, garbage, a hang — refuses and leaves no manifest, not even a stale one.
//! A hang is killed with its descendants.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xtask::release_gate::{qualify, sha256};

/// A stand-in binary: `body` runs for `conformance --json`; `$SELF_SHA` is its own hash.
fn stand_in(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    let script = format!(
        "#!/bin/sh\nSELF_SHA=$(sha256sum \"$0\" | cut -d' ' -f1)\n[ \"$1 $2\" = \"conformance --json\" ] || exit 2\n{body}\n"
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A report of `total` cases, `failed` of them failing, for hash `$SELF_SHA` (or `sha`).
fn report(total: usize, failed: usize, sha: &str) -> String {
    let cases: Vec<String> = (0..total)
        .map(|i| {
            format!(
                r#"{{"id":"case_{i}","expectation":"e","observation":"o","pass":{}}}"#,
                i >= failed
            )
        })
        .collect();
    format!(
        r#"{{"ok":{},"total":{total},"failed":{failed},"binary_sha256":"{sha}","cases":[{}]}}"#,
        failed == 0,
        cases.join(",")
    )
}

fn gate(dir: &Path, binary: &Path, timeout: Duration) -> (Result<PathBuf, String>, PathBuf) {
    let manifest = dir.join("release-manifest.json");
    // A stale manifest from an earlier run must never survive a refusal.
    std::fs::write(&manifest, "{\"stale\":true}").unwrap();
    let result = qualify(dir, binary, &manifest, timeout).map_err(|e| e.to_string());
    (result, manifest)
}

fn refused(body: &str, why: &str) {
    let dir = tempfile::tempdir().unwrap();
    let binary = stand_in(dir.path(), "stopline", body);
    let (result, manifest) = gate(dir.path(), &binary, Duration::from_secs(20));
    let error = result.expect_err("the gate must refuse");
    assert!(error.contains(why), "{error}");
    assert!(!manifest.exists(), "a refused gate left a manifest");
    assert!(!dir.path().join("release-manifest.json.partial").exists());
}

#[test]
fn a_passing_battery_of_the_same_binary_writes_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!("echo '{}'", report(45, 0, "SELF"));
    let binary = stand_in(
        dir.path(),
        "stopline",
        &body.replace("\"SELF\"", "\"'$SELF_SHA'\""),
    );
    let (result, manifest) = gate(dir.path(), &binary, Duration::from_secs(20));
    let path = result.expect("qualified");
    assert_eq!(path, manifest);
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(written["sha256"], sha256(&binary).unwrap());
    assert_eq!(written["conformance"]["total"], 45);
    assert_eq!(written["conformance"]["ok"], true);
    assert!(written["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(written.get("stale").is_none());
}

#[test]
fn a_failed_case_refuses() {
    let body = format!("echo '{}'; exit 1", report(45, 1, "SELF"));
    refused(
        &body.replace("\"SELF\"", "\"'$SELF_SHA'\""),
        "conformance failed",
    );
}

#[test]
fn a_non_zero_exit_refuses_even_with_a_passing_report() {
    let body = format!("echo '{}'; exit 3", report(45, 0, "SELF"));
    refused(&body.replace("\"SELF\"", "\"'$SELF_SHA'\""), "exit Some(3)");
}

#[test]
fn too_few_cases_refuse() {
    let body = format!("echo '{}'", report(44, 0, "SELF"));
    refused(
        &body.replace("\"SELF\"", "\"'$SELF_SHA'\""),
        "only 44 cases",
    );
}

#[test]
fn another_binarys_report_refuses() {
    let body = format!("echo '{}'", report(45, 0, &"0".repeat(64)));
    refused(&body, "a different binary");
}

#[test]
fn garbage_refuses() {
    refused("echo 'all good, trust me'", "no valid report");
}

#[test]
fn a_hanging_battery_is_killed_with_its_descendants_and_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let body = format!("sleep 300 & echo $! > '{}'; wait", pid_file.display());
    let binary = stand_in(dir.path(), "stopline", &body);
    let started = Instant::now();
    let (result, manifest) = gate(dir.path(), &binary, Duration::from_secs(1));
    let error = result.expect_err("a hang must refuse");
    assert!(error.contains("no result within 1 s"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!manifest.exists());
    let grandchild = std::fs::read_to_string(&pid_file).unwrap();
    let alive = || {
        std::fs::read_to_string(format!("/proc/{}/stat", grandchild.trim()))
            .map(|stat| !stat.contains(") Z "))
            .unwrap_or(false)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(), "the battery's descendant {grandchild} survived");
}
