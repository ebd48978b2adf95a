//! The Codex CLI contained end to end: the real `codex` (npm `@openai/codex`, pinned in
//! package.json, from the repository's `node_modules`) in `codex exec`, offline, its model calls
//! through the gateway's `/v1/responses` to a loopback Responses API stub that drives it through
//! shell tool calls (`echo step-N >> steps.log`) and holds the session's fourth model call. The
//! test stops the agent there and then lets the call go: whatever Codex does next, no further
//! step runs and no further model call reaches the stub.
//!
//! Under `stopline run` nothing is wired by hand: the run gives Codex a `CODEX_HOME` of its own
//! whose provider is the gateway (the agent's token, no provider key) and whose hook is
//! `stopline hook codex`. In the hook-only set-up (no `stopline run`), the same `config.toml`
//! in a directory the agent cannot change, and the hook alone stands between the held call's
//! tool call and a fourth step.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod agent_session;
mod gw;
mod run_support;
mod util;

use agent_session::StubFields;
use gw::{Gateway, Proc, Upstream};
use run_support::{card, registration, run_id, start_run_env, write_card};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use util::Home;

/// The uid of the session run outside `stopline run`: no passwd entry, below `[run] uid_range`,
/// and not the Claude Code test's.
const AGENT_UID: u32 = 61101;
/// The model call the stub holds: the one that carries this many tool outputs.
const HOLD_AT: u32 = 3;
/// A provider key in the caller's environment, which must never reach the agent.
const CALLERS_KEY: &str = "sk-callers-own-provider-key";

/// The repository's `node_modules` (`npm ci` installs it). Missing fails.
fn node_modules() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../node_modules");
    std::fs::canonicalize(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run ./scripts/setup-test-deps.sh (npm ci)",
            path.display()
        )
    })
}

/// The `codex` CLI of the repository's `node_modules`.
fn codex() -> PathBuf {
    let path = node_modules().join(".bin/codex");
    assert!(
        path.exists(),
        "{} is missing: run ./scripts/setup-test-deps.sh (npm ci)",
        path.display()
    );
    path
}

/// The arguments of `codex exec` in every test: no approvals and no sandbox of Codex's own
/// (the stop is what contains it), no git repository needed.
const CODEX_ARGS: [&str; 6] = [
    "exec",
    "--dangerously-bypass-approvals-and-sandbox",
    "--skip-git-repo-check",
    "-m",
    "gpt-test",
    "Record the steps.",
];

/// A session's files, outside `/tmp` (a gateway-only run gets a fresh one): a work directory the
/// agent writes, and the release file the test creates to let the held call go.
struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix("codex-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(work.join("home")).unwrap();
        for d in [work.clone(), work.join("home")] {
            std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        Scratch { dir }
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn release(&self) -> PathBuf {
        self.dir.path().join("release")
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.work().join(name)).unwrap_or_default()
    }

    fn steps(&self) -> Vec<String> {
        self.read("steps.log").lines().map(String::from).collect()
    }

    fn output(&self) -> String {
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            self.read("codex.out"),
            self.read("codex.err")
        )
    }
}

/// The Responses API stub holding the shell-offering call that carries [`HOLD_AT`] outputs.
fn upstream(home: &Home, scratch: &Scratch) -> Upstream {
    let hold_at = HOLD_AT.to_string();
    let release = scratch.release();
    Upstream::start_script_with(
        home,
        "fake_codex_upstream.py",
        &[
            ("STUB_HOLD_AT", &hold_at),
            ("STUB_RELEASE", release.to_str().unwrap()),
        ],
    )
}

/// The Responses stub's field names (see the shared checks in `agent_session`).
const FIELDS: StubFields = StubFields {
    offers_tool: "shell",
    results: "tool_outputs",
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
    // Every call the stub saw came through the gateway, with the gateway's key.
    for call in &upstream.executed() {
        assert_eq!(
            call["authorization"],
            format!("Bearer {}", gw::UPSTREAM_KEY),
            "{call}"
        );
    }
}

/// No flags but the run's own: `stopline run` tells Codex by `--agent-kind` (its program here
/// is a shell script), gives it a `CODEX_HOME` whose provider is the gateway and whose hook is
/// `stopline hook codex`, and stops it mid-way. The caller's provider key reaches neither its
/// environment nor its files.
#[test]
fn codex_under_stopline_run_is_stopped_mid_way_with_no_provider_key() {
    let home = Home::new();
    let scratch = Scratch::new();
    let upstream = upstream(&home, &scratch);
    let gateway = Gateway::start(&home, &gw::model_config(&upstream));
    let run = run_id("codex");
    let card = write_card(&home, &card(&run, "codex-agent"));
    let script = r#"cd "$WORK" && env > "$WORK/agent.env" && cp -r "$CODEX_HOME" "$WORK/codex-home" && HOME="$WORK/home" "$CODEX" "$@" > "$WORK/codex.out" 2> "$WORK/codex.err"; echo $? > "$WORK/codex.exit""#;
    let args = CODEX_ARGS.map(|a| format!("'{a}'")).join(" ");
    let script = format!("set -- {args}\n{script}");
    let work = scratch.work();
    let codex = codex();
    let node_modules = node_modules();
    let running = start_run_env(
        &home,
        &card,
        &[
            "--net",
            "gateway-only",
            "--gateway",
            &gateway.url(),
            "--agent-kind",
            "codex",
            // The CLI lives in the clone's node_modules, hidden when the clone is under /tmp.
            "--share",
            node_modules.to_str().unwrap(),
        ],
        &work,
        &script,
        &[
            ("WORK", work.to_str().unwrap()),
            ("CODEX", codex.to_str().unwrap()),
            ("OPENAI_API_KEY", CALLERS_KEY),
        ],
    );
    wait_until_held(&upstream, &scratch);
    assert_eq!(scratch.steps().len(), 3, "{}", scratch.output());
    home.engage(&format!("run:{run}"), "halt-all");
    std::fs::write(scratch.release(), b"go").unwrap();
    let (code, stdout, stderr) = running.finish(Duration::from_secs(120));
    assert_eq!(code, 1, "the run reports it was stopped: {stdout} {stderr}");
    assert_stopped_after_three_steps(&upstream, &scratch);

    // What the agent had: its own token, a CODEX_HOME, and no provider key anywhere.
    let env = scratch.read("agent.env");
    assert!(env.contains("CODEX_HOME="), "{env}");
    let copied = work.join("codex-home");
    let config = std::fs::read_to_string(copied.join("config.toml")).unwrap();
    assert!(config.contains("hook codex"), "{config}");
    assert!(config.contains("env_key = \"STOPLINE_TOKEN\""), "{config}");
    for secret in [CALLERS_KEY, gw::UPSTREAM_KEY] {
        assert!(!env.contains(secret), "{secret} in the agent's environment");
        for entry in walk(&copied) {
            let bytes = std::fs::read(&entry).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "{secret} in {}",
                entry.display()
            );
        }
    }
    let worker = registration(&home, &run, "codex-agent").unwrap();
    assert_eq!(worker["net"], "gateway-only", "{worker}");
    // The run's CODEX_HOME is gone with the run.
    let dir = env
        .lines()
        .find_map(|l| l.strip_prefix("CODEX_HOME="))
        .unwrap();
    assert!(!Path::new(dir).exists(), "{dir} outlived the run");
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Gateway only, no `stopline run` (two tool calls already delivered ran after an
/// emergency). A halt lets the held call finish, so Codex gets its fourth shell call: the hook
/// (`stopline hook codex`, from a `config.toml` the agent's uid cannot change) refuses it with
/// the latch's code, and the refused model call after it never reaches the upstream.
#[test]
fn codex_with_the_hook_alone_is_stopped_mid_way() {
    let home = Home::new();
    let scratch = Scratch::new();
    let upstream = upstream(&home, &scratch);
    let gateway = Gateway::start(&home, &gw::model_config(&upstream));
    let token = home.token(&["--agent", "codex-coder"]);
    // CODEX_HOME: sticky, so the agent writes its sessions there but not the root-owned config.
    let codex_home = scratch.dir.path().join("codex-home");
    std::fs::create_dir(&codex_home).unwrap();
    let hook = stopline_run::codex::hook_command(Path::new(util::bin()));
    let config = stopline_run::codex::config_toml(&codex_home, &gateway.url(), &hook);
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    std::fs::set_permissions(
        codex_home.join("config.toml"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&codex_home, std::fs::Permissions::from_mode(0o1777)).unwrap();

    let stdout = std::fs::File::create(scratch.work().join("codex.out")).unwrap();
    let stderr = std::fs::File::create(scratch.work().join("codex.err")).unwrap();
    let mut command = Command::new(codex());
    command
        .args(CODEX_ARGS)
        .current_dir(scratch.work())
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", scratch.work().join("home"))
        .env("CODEX_HOME", &codex_home)
        .env("STOPLINE_URL", gateway.url())
        .env("STOPLINE_TOKEN", &token)
        .uid(AGENT_UID)
        .gid(AGENT_UID)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let mut session = Proc(command.spawn().expect("start codex"));

    wait_until_held(&upstream, &scratch);
    assert_eq!(scratch.steps().len(), 3, "{}", scratch.output());
    home.engage("agent:codex-coder", "halt-all");
    std::fs::write(scratch.release(), b"go").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if session.0.try_wait().unwrap().is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "codex did not end after the stop\n{}",
            scratch.output()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_stopped_after_three_steps(&upstream, &scratch);
    let output = scratch.output();
    assert!(
        output.contains("blocked by PreToolUse hook") && output.contains("break_glass_contained"),
        "the hook refused step 4 and said why\n{output}"
    );
}
