//! The Claude Code hook's target is pinned by root (docs/reference.md §6): the reported attack was an
//! agent pointing the hook's `STOPLINE_URL` at its own server answering "allow" (or
//! `STOPLINE_HOME` at a home it made), so its tools ran while it was stopped. With
//! `/etc/stopline/hook.toml` (here the path a `failpoints` build takes from
//! `STOPLINE_TEST_HOOK_CONFIG`) naming the real gateway or home, the environment no longer
//! chooses; a pin that is not root's alone, or does not parse, blocks.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use gw::{fake_allow_gateway, Gateway};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use util::{Home, Run};

fn hook(home: &Home, env: &[(&str, &str)]) -> Run {
    let cwd = home.dir.path().canonicalize().unwrap();
    let event = json!({"session_id": "s1", "transcript_path": "/dev/null", "cwd": cwd,
        "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}});
    let event = serde_json::to_vec(&event).unwrap();
    home.run_piped(&["hook", "claude-code"], &event, env)
}

/// A root-owned directory (0755) holding `hook.toml` (0644) with `text`.
fn pin(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("stopline-hook-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = dir.path().join("hook.toml");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    (dir, path)
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_stopline_url_aimed_at_an_allow_all_server_does_not_outrank_the_pinned_gateway() {
    let home = Home::new();
    let gateway = Gateway::start(&home, "");
    let token = home.token(&["--agent", "coder"]);
    home.engage("agent:coder", "emergency");
    let (_fake, fake_url) = fake_allow_gateway();
    let nowhere = home.dir.path().join("no-hook.toml");

    // The attack, with nothing pinned: the agent's server says allow.
    let attack = [
        ("STOPLINE_URL", fake_url.as_str()),
        ("STOPLINE_TOKEN", token.as_str()),
        ("STOPLINE_TEST_HOOK_CONFIG", s(&nowhere)),
    ];
    assert_eq!(
        hook(&home, &attack).code,
        0,
        "the fake allows when unpinned"
    );

    let (_dir, pinned) = pin(&format!("url = \"{}\"\n", gateway.url()));
    let r = hook(
        &home,
        &[
            ("STOPLINE_URL", fake_url.as_str()),
            ("STOPLINE_TOKEN", token.as_str()),
            ("STOPLINE_TEST_HOOK_CONFIG", s(&pinned)),
        ],
    );
    // The real gateway's answer: the stop revoked the token.
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("stale_control_epoch") && r.stderr.contains("agent:coder"),
        "{}",
        r.stderr
    );
}

#[test]
fn a_stopline_home_the_agent_made_does_not_outrank_the_pinned_home() {
    let home = Home::new();
    home.engage("agent:coder", "emergency");
    // The agent's own home: initialized, no latch in it.
    let made = Home::new();
    made.run(&["init"]).assert_ok();
    let nowhere = home.dir.path().join("no-hook.toml");
    assert_eq!(
        hook(&made, &[("STOPLINE_TEST_HOOK_CONFIG", s(&nowhere))]).code,
        0,
        "the agent's home allows when unpinned"
    );
    let (_dir, pinned) = pin(&format!("home = \"{}\"\n", home.path().display()));
    let r = hook(&made, &[("STOPLINE_TEST_HOOK_CONFIG", s(&pinned))]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("break_glass_contained"), "{}", r.stderr);
}

#[test]
fn a_pin_that_is_not_roots_alone_or_does_not_parse_blocks() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let good = format!("home = \"{}\"\n", home.path().display());
    let (_dir, pinned) = pin(&good);
    let env = [("STOPLINE_TEST_HOOK_CONFIG", s(&pinned))];
    assert_eq!(
        hook(&home, &env).code,
        0,
        "a sound pin of a home with no stop"
    );

    std::fs::set_permissions(&pinned, std::fs::Permissions::from_mode(0o666)).unwrap();
    let r = hook(&home, &env);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("writable by group or others"),
        "{}",
        r.stderr
    );

    std::fs::set_permissions(&pinned, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::chown(&pinned, Some(65534), None).unwrap();
    let r = hook(&home, &env);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not root"), "{}", r.stderr);

    std::os::unix::fs::chown(&pinned, Some(0), None).unwrap();
    std::fs::write(&pinned, "url = [not toml").unwrap();
    let r = hook(&home, &env);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("does not parse"), "{}", r.stderr);

    std::fs::write(&pinned, "urll = \"http://127.0.0.1:1\"\n").unwrap();
    let r = hook(&home, &env);
    assert_eq!(r.code, 2, "an unknown key is not ignored: {}", r.stderr);
}
