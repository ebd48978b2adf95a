//! Claude Code itself, contained end to end: the real `claude` CLI (npm
//! `@anthropic-ai/claude-code`, from the repository's `node_modules`) in print mode, its model
//! calls through the gateway's `/v1/messages` to a loopback Messages API stub that drives it
//! through Bash tool calls (`echo step-N >> steps.log`), its tools behind the PreToolUse hook
//! (`stopline hook claude-code`) in a settings file the agent's uid cannot write, run under a
//! uid of its own (under `stopline run`, the fresh one of `--user auto`). The stub holds the
//! session's fourth model call; the test stops the agent there and then lets the call go.
//! Whatever the session does next, no further tool runs (`steps.log` keeps three steps) and no
//! further model call reaches the stub.
//!
//! Non-essential traffic (telemetry, error reports, update checks) is switched off by its
//! documented variables, so nothing but model calls leaves the CLI; under `stopline run
//! --net gateway-only` nothing else could.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod agent_session;
mod gw;
mod run_support;
mod util;

use agent_session::StubFields;
use gw::{Gateway, Proc, Upstream};
use run_support::{card, registration, run_id, start_run_env, write_card};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::Home;

/// The uid and gid of the session run outside `stopline run`: no passwd entry, below `[run]
/// uid_range` (so no run's `--user auto` picks it) and not `nobody` (so no `--user nobody` run
/// elsewhere is refused `uid_in_use` because of this test).
const AGENT_UID: u32 = 61100;
/// The model call the stub holds: the one that carries this many tool results.
const HOLD_AT: u32 = 3;

/// The `claude` CLI of the repository's `node_modules` (`npm ci` installs it). Missing fails.
fn claude() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node_modules/.bin/claude");
    assert!(
        path.exists(),
        "{} is missing: run ./scripts/setup-test-deps.sh (npm ci)",
        path.display()
    );
    path
}

/// Variables that switch off everything but model calls.
const QUIET: [(&str, &str); 4] = [
    ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ("DISABLE_TELEMETRY", "1"),
    ("DISABLE_ERROR_REPORTING", "1"),
    ("DISABLE_AUTOUPDATER", "1"),
];

/// A session's files, outside `/tmp` (a gateway-only run may get a fresh one): a root-owned
/// settings file (0644 in a 0755 directory, so the agent reads but cannot write it) with the
/// PreToolUse hook, given per process with `--settings` (Claude Code's managed settings live at
/// the fixed `/etc/claude-code/managed-settings.json`, which a test must not touch), and a work
/// directory the agent writes.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch::with_local_settings(br#"{"disableAllHooks": true}"#)
    }

    /// [`Scratch::new`] with `local` as what the agent wrote in `.claude/settings.local.json`.
    fn with_local_settings(local: &[u8]) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("claude-code-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let settings = serde_json::json!({
            "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command",
                "command": format!("{} hook claude-code", util::bin()), "timeout": 60}]}]},
            "disableAllHooks": false
        });
        let path = dir.path().join("settings.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&settings).unwrap()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join("home")).unwrap();
        // What an agent may write in its own project: settings that switch every hook off.
        // The root-owned file's explicit `disableAllHooks: false` outranks them (flag settings
        // come before project and local ones); without it, this file would let step 4 run.
        std::fs::create_dir_all(work.join(".claude")).unwrap();
        std::fs::write(work.join(".claude/settings.local.json"), local).unwrap();
        for d in [work.clone(), work.join("home"), work.join(".claude")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        Scratch { dir }
    }

    fn settings(&self) -> PathBuf {
        self.dir.path().join("settings.json")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn release(&self) -> PathBuf {
        self.dir.path().join("release")
    }

    fn steps(&self) -> Vec<String> {
        std::fs::read_to_string(self.work().join("steps.log"))
            .unwrap_or_default()
            .lines()
            .map(String::from)
            .collect()
    }

    fn output(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.work().join(name)).unwrap_or_default();
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            read("claude.out"),
            read("claude.err")
        )
    }
}

/// The arguments of `claude -p` in every test.
fn claude_args(settings: &Path) -> Vec<String> {
    [
        "-p",
        "Record the steps.",
        "--settings",
        settings.to_str().unwrap(),
        "--model",
        "claude-test",
        "--allowedTools",
        "Bash",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    .map(String::from)
    .to_vec()
}

/// The Messages config with a price for `claude-test`.
fn config(upstream: &Upstream) -> String {
    gw::anthropic_config(upstream)
}

/// The Messages stub's field names (see the shared checks in `agent_session`).
const FIELDS: StubFields = StubFields {
    offers_tool: "bash",
    results: "tool_results",
};

fn wait_until_held(upstream: &Upstream, scratch: &Scratch) {
    agent_session::wait_until_held(upstream, || scratch.output());
}

fn assert_stopped_after_three_steps(upstream: &Upstream, scratch: &Scratch) {
    agent_session::assert_stopped_after_three_steps(
        upstream,
        &FIELDS,
        scratch.steps(),
        &scratch.output(),
    );
}

#[test]
fn a_claude_code_session_stopped_mid_way_makes_no_further_model_call_and_runs_no_further_tool() {
    let home = Home::new();
    let scratch = Scratch::new();
    let upstream = Upstream::start_anthropic_holding(&home, HOLD_AT, &scratch.release());
    let gateway = Gateway::start(&home, &config(&upstream));
    stopped_mid_way(&home, &scratch, &upstream, &gateway, &[]);
}

/// The agent writes `.claude/settings.local.json` with `env.STOPLINE_URL` aimed at its
/// own server answering "allow" to every check. Claude Code hands that environment to the hook;
/// with the gateway pinned in root's `hook.toml` (docs/reference.md §6) the hook still asks the real
/// gateway, and step 4 is blocked.
#[test]
fn an_agent_written_stopline_url_does_not_move_the_pinned_hook() {
    let home = Home::new();
    let (_fake, fake_url) = gw::fake_allow_gateway();
    let local = serde_json::json!({"disableAllHooks": true, "env": {"STOPLINE_URL": fake_url}});
    let scratch = Scratch::with_local_settings(&serde_json::to_vec(&local).unwrap());
    let upstream = Upstream::start_anthropic_holding(&home, HOLD_AT, &scratch.release());
    let gateway = Gateway::start(&home, &config(&upstream));
    // Root's pin, readable by the agent, writable by root alone.
    let pin = scratch.dir.path().join("hook.toml");
    std::fs::write(&pin, format!("url = \"{}\"\n", gateway.url())).unwrap();
    std::fs::set_permissions(&pin, std::fs::Permissions::from_mode(0o644)).unwrap();
    stopped_mid_way(
        &home,
        &scratch,
        &upstream,
        &gateway,
        &[("STOPLINE_TEST_HOOK_CONFIG", pin.to_str().unwrap())],
    );
}

/// Run a session until the stub holds its fourth model call, halt the agent, let the call go:
/// no fourth step runs, the hook said why, and the refused model call ended the session.
fn stopped_mid_way(
    home: &Home,
    scratch: &Scratch,
    upstream: &Upstream,
    gateway: &Gateway,
    env: &[(&str, &str)],
) {
    let token = home.token(&["--agent", "claude-coder"]);
    let stdout = std::fs::File::create(scratch.work().join("claude.out")).unwrap();
    let stderr = std::fs::File::create(scratch.work().join("claude.err")).unwrap();
    let mut command = Command::new(claude());
    command
        .args(claude_args(&scratch.settings()))
        .current_dir(scratch.work())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", scratch.work().join("home"))
        .env("ANTHROPIC_BASE_URL", gateway.url())
        .env("ANTHROPIC_API_KEY", &token)
        .env("STOPLINE_URL", gateway.url())
        .env("STOPLINE_TOKEN", &token)
        .envs(QUIET)
        .envs(env.iter().copied())
        .uid(AGENT_UID)
        .gid(AGENT_UID)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let mut session = Proc(command.spawn().expect("start claude"));

    wait_until_held(upstream, scratch);
    assert_eq!(scratch.steps().len(), 3, "{}", scratch.output());
    // A halt lets the held call finish: Claude Code gets its tool_use, and only the hook and
    // the gateway stand between it and a fourth step.
    home.engage("agent:claude-coder", "halt-all");
    std::fs::write(scratch.release(), b"go").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = session.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "claude did not end after the stop\n{}",
            scratch.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_stopped_after_three_steps(upstream, scratch);
    let output = scratch.output();
    assert!(!status.success(), "the session ended in an error\n{output}");
    let events: Vec<Value> = std::fs::read_to_string(scratch.work().join("claude.out"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let tool_results: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "user")
        .flat_map(|e| e["message"]["content"].as_array().into_iter().flatten())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    let blocked = tool_results.last().expect("tool results");
    assert!(
        blocked.to_string().contains("break_glass_contained"),
        "the hook refused step 4 and said why: {blocked}\n{output}"
    );
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "result")
        .unwrap_or_else(|| panic!("a final result\n{output}"));
    assert_eq!(
        (&result["is_error"], &result["api_error_status"]),
        (&Value::Bool(true), &serde_json::json!(403)),
        "the refused model call is what ended the session: {result}"
    );
    assert!(
        result["result"]
            .as_str()
            .is_some_and(|r| r.contains("break_glass_contained")),
        "the user is told why: {result}"
    );
}

#[test]
fn claude_code_under_stopline_run_is_stopped_mid_way() {
    let home = Home::new();
    let scratch = Scratch::new();
    let upstream = Upstream::start_anthropic_holding(&home, HOLD_AT, &scratch.release());
    let gateway = Gateway::start(&home, &config(&upstream));
    let run = run_id("claude");
    let card = write_card(&home, &card(&run, "claude-agent"));
    let script = r#"cd "$WORK" && HOME="$WORK/home" "$CLAUDE" "$@" > "$WORK/claude.out" 2> "$WORK/claude.err"; echo $? > "$WORK/claude.exit""#;
    let args = claude_args(&scratch.settings())
        .iter()
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let script = format!("set -- {args}\n{script}");
    let work = scratch.work();
    // By its canonical path: a `..` through a directory the private /tmp lacks would not resolve.
    let claude = std::fs::canonicalize(claude()).unwrap();
    let mut env: Vec<(&str, &str)> = vec![
        ("WORK", work.to_str().unwrap()),
        ("CLAUDE", claude.to_str().unwrap()),
    ];
    env.extend(QUIET);
    // The CLI lives in the clone's node_modules, which a fresh /tmp hides when the clone is
    // under /tmp (the program here is a shell, so the run cannot tell it needs them).
    let node_modules =
        std::fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node_modules"))
            .unwrap();
    let running = start_run_env(
        &home,
        &card,
        // `--user auto` (the default): a uid of its own.
        &[
            "--net",
            "gateway-only",
            "--gateway",
            &gateway.url(),
            "--share",
            node_modules.to_str().unwrap(),
        ],
        &work,
        &script,
        &env,
    );
    wait_until_held(&upstream, &scratch);
    assert_eq!(scratch.steps().len(), 3, "{}", scratch.output());
    home.engage(&format!("run:{run}"), "halt-all");
    std::fs::write(scratch.release(), b"go").unwrap();
    let (code, stdout, stderr) = running.finish(Duration::from_secs(120));
    assert_eq!(code, 1, "the run reports it was stopped: {stdout} {stderr}");
    assert_stopped_after_three_steps(&upstream, &scratch);
    let worker = registration(&home, &run, "claude-agent").unwrap();
    assert_eq!(worker["net"], "gateway-only", "{worker}");
    assert!(
        worker["user"]
            .as_str()
            .is_some_and(|u| u.starts_with("uid-")),
        "{worker}"
    );
}
