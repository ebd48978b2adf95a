//! The signing key of a fresh home is created by whichever command needs it first, and two
//! commands may start at once (two `stopline run`s on a new home did, in a full suite run:
//! the second read the first one's key while it was still empty and refused
//! `control_state_corrupt`). The key must appear under its name only whole.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;

use std::process::Stdio;
use std::time::{Duration, Instant};
use util::Home;

/// A first token issue parked (SIGSTOP) after creating its key file but before writing it; a
/// second token issue meanwhile gets a key and a token; the first, resumed, signs with the
/// same key. On the old code the second refused `control_state_corrupt`.
#[test]
fn a_second_command_on_a_fresh_home_never_reads_a_half_made_key() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let park = home.path().with_extension("park");
    std::fs::write(&park, b"").unwrap();
    let mut first = home.command(&["token", "issue", "--agent", "first"]);
    first
        .env(
            "STOPLINE_FAILPOINTS",
            format!("keys.create.write=stop_if:{}", park.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let first = first.spawn().unwrap();
    // Wait until the first is stopped at the failpoint (its state in /proc is `T`).
    let stat = format!("/proc/{}/stat", first.id());
    let started = Instant::now();
    while !std::fs::read_to_string(&stat)
        .map(|s| s.split(") ").nth(1).is_some_and(|r| r.starts_with('T')))
        .unwrap_or(false)
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the first command never reached keys.create.write"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = home.run(&["token", "verify", &home.token(&["--agent", "second"])]);
    second.assert_ok();
    std::fs::remove_file(&park).unwrap();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(first.id() as i32).unwrap(),
        rustix::process::Signal::CONT,
    )
    .unwrap();
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = String::from_utf8(out.stdout).unwrap();
    // Both tokens verify against the one key the home holds.
    home.run(&["token", "verify", token.trim()]).assert_ok();
    let keys = home.entries("keys");
    assert!(
        keys.iter().all(|k| !k.starts_with(".signing.key.tmp-")),
        "{keys:?}"
    );
}

/// A command that crashes between creating the key and writing it leaves no key, and the next
/// command makes one. On the old code it left an empty `keys/signing.key` that refused every
/// token after it.
#[test]
fn a_crash_while_the_key_is_made_leaves_no_half_made_key() {
    for step in ["keys.create.write", "keys.create.fsync", "keys.link"] {
        let home = Home::new();
        home.run(&["init"]).assert_ok();
        let crashed = home.run_env(
            &["token", "issue", "--agent", "crashed"],
            &[("STOPLINE_FAILPOINTS", &format!("{step}=crash"))],
        );
        assert_ne!(crashed.code, 0, "{step}: the command was not stopped there");
        let token = home.token(&["--agent", "after"]);
        home.run(&["token", "verify", &token]).assert_ok();
    }
}
