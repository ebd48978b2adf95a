//! The home exists before it is needed, and a missing one never reads as "no stop"
//! (docs/reference.md §5).
//!
//! Reproduces a reported defect: on a fresh home, the first engage failed with `No space left on device`
//! once an agent had filled the filesystem's inodes (`latches/`, `latches.staging/` and the
//! reserve were made only by the first engage), and `check` kept answering `allow`; and `check`
//! with a wrong `STOPLINE_HOME`, or the Claude Code hook without `STOPLINE_URL`, allowed
//! everything. The filesystem here is a real tmpfs with a handful of inodes, filled by a real
//! process.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod gw;
mod util;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::Home;

/// A tmpfs with few inodes, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(inodes: u32) -> SmallFs {
        let dir = tempfile::Builder::new()
            .prefix("stopline-inodes-")
            .tempdir_in("/tmp")
            .unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size=16m,nr_inodes={inodes},mode=0700"))
            .arg("tmpfs")
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(
            status.success(),
            "mount -t tmpfs needs root (the test suite runs as root)"
        );
        SmallFs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fill every free inode, as a runaway agent would: create files until the kernel refuses.
    fn fill(&self) {
        let junk = self.path().join("junk");
        std::fs::create_dir(&junk).expect("a directory for the junk");
        let filled = Command::new("sh")
            .arg("-c")
            .arg("i=0; while touch \"$1/f$i\" 2>/dev/null; do i=$((i+1)); done; echo $i")
            .arg("sh")
            .arg(&junk)
            .output()
            .expect("fill the inodes");
        let count: u32 = String::from_utf8_lossy(&filled.stdout)
            .trim()
            .parse()
            .unwrap();
        assert!(count > 0 || junk.read_dir().is_ok());
        // Nothing can be created any more.
        assert_eq!(
            std::fs::File::create(self.path().join("one-more"))
                .unwrap_err()
                .raw_os_error(),
            Some(28),
            "the filesystem still has free inodes"
        );
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn run(home: &Path, args: &[&str]) -> util::Run {
    Command::new(util::bin())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .arg("--home")
        .arg(home)
        .arg("--json")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run stopline")
        .into()
}

fn engage_on_a_full_filesystem(first_writer: &[&str]) {
    let fs = SmallFs::mount(64);
    let home: PathBuf = fs.path().join("home");
    run(&home, first_writer).assert_ok();
    fs.fill();
    let engage = run(
        &home,
        &[
            "engage",
            "--scope",
            "machine",
            "--reason",
            "inodes exhausted",
        ],
    );
    assert_eq!(engage.code, 0, "{}\n{}", engage.stdout, engage.stderr);
    let receipt = engage.json();
    assert_eq!(receipt["engaged"], true, "{receipt}");
    assert!(
        receipt["warnings"]
            .to_string()
            .contains("disk_full_reserve_released"),
        "{receipt}"
    );
    let check = run(&home, &["check", "--class", "critical"]);
    assert_eq!(check.code, 4, "{}", check.stdout);
    assert_eq!(check.json()["mode"], "EMERGENCY");
}

#[test]
fn the_first_engage_after_init_lands_on_a_filesystem_out_of_inodes() {
    engage_on_a_full_filesystem(&["init"]);
}

#[test]
fn the_first_engage_after_any_writing_command_lands_on_a_filesystem_out_of_inodes() {
    engage_on_a_full_filesystem(&["token", "issue", "--agent", "worker"]);
}

#[test]
fn init_creates_the_home_whole_and_only_that() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(home.path()), 0o700);
    assert_eq!(mode(home.file("latches")), 0o700);
    assert_eq!(mode(home.file("latches.staging")), 0o700);
    assert_eq!(mode(home.file("reserve.bin")), 0o600);
    let mut names: Vec<String> = std::fs::read_dir(home.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "latches",
            "latches.staging",
            "reserve.1.bin",
            "reserve.2.bin",
            "reserve.bin"
        ]
    );
    // Again: nothing changes, still success.
    home.run(&["init"]).assert_ok();
}

#[test]
fn check_refuses_a_home_that_does_not_exist() {
    let home = Home::new();
    assert!(!home.path().exists());
    for class in ["critical", "noncritical"] {
        let (code, receipt) = home.check(&["--class", class, "--agent", "worker"]);
        assert_eq!(code, 4, "{receipt}");
        assert_eq!(receipt["code"], "control_home_missing", "{receipt}");
    }
    assert!(!home.path().exists(), "a gate created the home");
}

#[test]
fn the_claude_code_hook_without_stopline_url_refuses_a_home_that_does_not_exist() {
    let home = Home::new();
    let out = home.run_piped(
        &["hook", "claude-code"],
        br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}"#,
        &[],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("control_home_missing"),
        "{}",
        out.stderr
    );
}

/// `status` before `init` said `FROZEN_SAFE`, a fault and "quiescence confirmed:
/// yes". There is nothing to report on: it refuses `control_home_missing` (exit 1), says to run
/// `stopline init`, never "confirmed", and creates nothing.
#[test]
fn status_before_init_says_to_run_init_and_never_confirmed() {
    let home = Home::new();
    let json = home.run(&["status"]);
    assert_eq!(json.code, 1, "{} {}", json.stdout, json.stderr);
    assert_eq!(
        json.json()["error"]["code"],
        "control_home_missing",
        "{}",
        json.stdout
    );
    let text = home.command(&["status"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&text.stderr);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert_eq!(text.status.code(), Some(1), "{stdout} {stderr}");
    assert!(
        stderr.contains("no control directory here") && stderr.contains("run `stopline init`"),
        "{stderr}"
    );
    assert!(
        !stdout.contains("confirmed") && !stderr.contains("confirmed"),
        "{stdout} {stderr}"
    );
    assert!(!home.path().exists(), "status created the home");
    home.run(&["init"]).assert_ok();
    home.status();
}

/// The Codex hook fails closed on a missing home as the Claude Code one does, and says why on
/// stderr (Codex runs the tool on an exit 2 with nothing there).
#[test]
fn the_codex_hook_without_stopline_url_refuses_a_home_that_does_not_exist() {
    let home = Home::new();
    let out = home.run_piped(
        &["hook", "codex"],
        br#"{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"},"cwd":"/"}"#,
        &[],
    );
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains("control_home_missing"),
        "{}",
        out.stderr
    );
    assert!(!home.path().exists(), "the hook created the home");
}

#[test]
fn a_gateway_whose_home_vanished_refuses_with_503() {
    let home = Home::new();
    let gateway = gw::Gateway::start(&home, "[model]\nbase_url = \"http://127.0.0.1:9/v1\"\n");
    let token = home.token(&["--agent", "worker"]);
    std::fs::remove_dir_all(home.path()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let reply = gateway.post(
            "/v1/check",
            Some(&token),
            &serde_json::json!({"class": "noncritical", "action": "tool_call"}),
        );
        if reply.json()["code"] == "control_home_missing" {
            assert_eq!(reply.json()["decision"], "block");
            break;
        }
        assert!(Instant::now() < deadline, "never refused: {}", reply.body);
        std::thread::sleep(Duration::from_millis(50));
    }
    let reply = gateway.post(
        "/v1/chat/completions",
        Some(&token),
        &serde_json::json!({"model": "m", "messages": []}),
    );
    assert_eq!(
        (reply.status, reply.code().as_str()),
        (503, "control_home_missing"),
        "{}",
        reply.body
    );
    assert!(
        !home.path().exists(),
        "the gateway re-created a vanished home"
    );
}

#[test]
fn the_mcp_stdio_proxy_refuses_a_home_that_does_not_exist() {
    let home = Home::new();
    let token = home.token(&["--agent", "worker"]);
    std::fs::remove_dir_all(home.path()).unwrap();
    let mut child = home
        .command(&["mcp", "proxy", "--token", &token, "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            concat!(
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}"#,
                "\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let reply: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(reply["id"], 1, "{stdout}");
    assert_eq!(
        reply["error"]["data"]["code"], "control_home_missing",
        "{stdout}"
    );
    assert!(!home.path().exists(), "the proxy created the home");
}
