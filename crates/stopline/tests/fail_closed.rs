//! Every fail-closed read of docs/reference.md §5: what cannot be trusted closes every gate, critical work
//! included, and status shows why.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;
use util::{write, Home};

/// A healthy home with a critical token minted before the damage.
fn home_with_critical_token() -> (Home, String) {
    let home = Home::new();
    home.engage("agent:someone-else", "emergency");
    let token = home.token(&["--agent", "monitor-1", "--role", "critical"]);
    let (code, _) = home.check(&["--class", "critical", "--token", &token]);
    assert_eq!(code, 0, "critical work is allowed before the damage");
    (home, token)
}

fn assert_closed(home: &Home, token: &str, expected_code: &str) {
    let (code, receipt) = home.check(&["--class", "critical", "--token", token]);
    assert_eq!(code, 4, "gate must be closed: {receipt}");
    assert_eq!(receipt["decision"], "block");
    assert_eq!(receipt["code"], expected_code, "{receipt}");
    let (code, _) = home.check(&["--class", "noncritical", "--agent", "anyone"]);
    assert_eq!(code, 4);
}

fn check_latch_entry(name: &str, bytes: Option<&[u8]>, setup: impl FnOnce(&Home)) {
    let (home, token) = home_with_critical_token();
    match bytes {
        Some(bytes) => write(&home.file("latches").join(name), bytes),
        None => setup(&home),
    }
    assert_closed(&home, &token, "break_glass_contained");
    let status = home.status();
    let machine: Vec<_> = status["latches"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["file"] == name)
        .collect();
    assert_eq!(machine.len(), 1, "{status}");
    assert_eq!(machine[0]["scope"], "machine");
    assert_eq!(machine[0]["level"], "emergency");
    assert!(machine[0]["problem"].is_string());
}

#[test]
fn empty_latch_is_a_machine_emergency() {
    check_latch_entry("latch_empty.json", Some(b""), |_| {});
}

#[test]
fn malformed_latch_is_a_machine_emergency() {
    check_latch_entry(
        "latch_bad.json",
        Some(b"{\"kind\":\"breakglass_latch\",\"id\":"),
        |_| {},
    );
}

#[test]
fn unknown_level_is_a_machine_emergency() {
    let body = br#"{"kind":"breakglass_latch","id":"latch_lv","scope":"agent:x","level":"gentle","by":"a","reason":"r","pid":1,"session":{"bound":null,"tier":"console"},"ts":"2026-01-01T00:00:00Z"}"#;
    check_latch_entry("latch_lv.json", Some(body), |_| {});
}

#[test]
fn unknown_scope_kind_is_a_machine_emergency() {
    let body = br#"{"kind":"breakglass_latch","id":"latch_sc","scope":"galaxy:far","level":"halt-noncritical","by":"a","reason":"r","pid":1,"session":{"bound":null,"tier":"console"},"ts":"2026-01-01T00:00:00Z"}"#;
    check_latch_entry("latch_sc.json", Some(body), |_| {});
}

#[test]
fn unreadable_latch_is_a_machine_emergency() {
    // Root reads any mode, so make the entry unreadable another way: a directory in its place.
    check_latch_entry("latch_dir.json", None, |home| {
        std::fs::create_dir_all(home.file("latches").join("latch_dir.json")).unwrap();
    });
}

#[test]
fn dangling_symlink_latch_is_a_machine_emergency() {
    check_latch_entry("latch_link.json", None, |home| {
        std::os::unix::fs::symlink(
            "/nonexistent/target",
            home.file("latches").join("latch_link.json"),
        )
        .unwrap();
    });
}

#[test]
fn unreadable_latch_directory_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    let latches = home.file("latches");
    std::fs::rename(&latches, home.file("latches.moved")).unwrap();
    std::fs::write(&latches, b"not a directory").unwrap();
    assert_closed(&home, &token, "control_state_corrupt");
}

#[test]
fn corrupt_wal_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    let wal = home.file("breakglass.wal.jsonl");
    let mut bytes = std::fs::read(&wal).unwrap();
    let i = bytes.iter().position(|&b| b == b'r').unwrap();
    bytes[i] = b'R';
    std::fs::write(&wal, bytes).unwrap();
    assert_closed(&home, &token, "control_wal_corrupt");
}

#[test]
fn torn_wal_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    let wal = home.file("breakglass.wal.jsonl");
    let mut file = std::fs::OpenOptions::new().append(true).open(&wal).unwrap();
    std::io::Write::write_all(&mut file, b"{\"seq\":99,\"prev\":\"00").unwrap();
    assert_closed(&home, &token, "control_wal_corrupt");
}

#[test]
fn wal_with_a_gap_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    let wal = home.file("breakglass.wal.jsonl");
    let text = std::fs::read_to_string(&wal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 2);
    std::fs::write(&wal, format!("{}\n", lines[1])).unwrap();
    assert_closed(&home, &token, "control_wal_corrupt");
}

#[test]
fn wal_ahead_of_epoch_snapshot_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    let epoch = home.file("epoch.json");
    let before = std::fs::read(&epoch).unwrap();
    home.engage("agent:third", "emergency");
    std::fs::write(&epoch, before).unwrap();
    assert_closed(&home, &token, "control_epoch_unconfirmed");
}

#[test]
fn missing_epoch_snapshot_after_advances_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    std::fs::remove_file(home.file("epoch.json")).unwrap();
    assert_closed(&home, &token, "control_epoch_unconfirmed");
}

#[test]
fn corrupt_epoch_snapshot_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    std::fs::write(home.file("epoch.json"), b"{\"seq\":").unwrap();
    assert_closed(&home, &token, "control_epoch_unconfirmed");
}

#[test]
fn corrupt_state_closes_every_gate() {
    let (home, token) = home_with_critical_token();
    std::fs::write(home.file("state.json"), b"RUNNING, honest").unwrap();
    assert_closed(&home, &token, "control_state_corrupt");
}

#[test]
fn deleted_latch_recorded_in_the_wal_is_a_machine_emergency() {
    let home = Home::new();
    let receipt = home.engage("agent:victim", "halt-all");
    let token = home.token(&["--agent", "bystander"]);
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &token]).0,
        0
    );
    let file = receipt["latch"]["file"].as_str().unwrap();
    std::fs::remove_file(home.file("latches").join(file)).unwrap();
    let (code, check) = home.check(&["--class", "noncritical", "--token", &token]);
    assert_eq!(
        code, 4,
        "someone deleted a stop: the whole machine is stopped: {check}"
    );
    let status = home.status();
    assert!(status["latches"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["file"] == file && l["scope"] == "machine"));
}

#[test]
fn an_empty_home_means_no_emergency() {
    // A missing home is `control_home_missing` (docs/reference.md §5, tests/home_whole.rs); one that
    // exists with nothing in it is "no stop".
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let (code, receipt) = home.check(&["--class", "noncritical", "--agent", "a"]);
    assert_eq!(code, 0, "{receipt}");
    assert_eq!(home.status()["phase"], "RUNNING");
}
