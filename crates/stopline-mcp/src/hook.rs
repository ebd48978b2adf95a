//! `stopline hook claude-code` and `stopline hook codex`: a Claude Code or Codex `PreToolUse`
//! hook that fails closed.
//!
//! Both run the hook before every tool call, with the event as JSON on stdin (`tool_name`,
//! `tool_input`, `session_id`, `cwd`, …). Exit 0 lets the call run; exit 2 blocks it and shows
//! stderr to the model as the reason. Any other exit fails *open* there (and so does Codex's exit
//! 2 with an empty stderr, or a hook past its `timeout`), so this hook turns every error, panic
//! and timeout into exit 2 with the reason on stderr: a watchdog thread exits 2 when the
//! decision takes too long, a panic hook exits 2 before unwinding can reach anything else, and
//! the decision itself runs under `catch_unwind`. It decides through the gateway (`POST
//! /v1/check` at `STOPLINE_URL` with `STOPLINE_TOKEN`) or, without one, the local control
//! directory (`stopline_control::check`), judging the event's `cwd` as the project.
//!
//! The agent controls the hook's environment (Claude Code passes a settings file's `env` to
//! it, and a `.claude/settings.local.json` is the agent's to write), so where decisions come
//! from is pinned by root (docs/reference.md §6 "The hook's target is pinned"): when
//! `/etc/stopline/hook.toml` exists, its `url`, `home` and `token_file` are used and
//! `STOPLINE_URL` and `STOPLINE_HOME` are ignored. The file must be owned by root and writable
//! by no one else, in a directory likewise; one that is not, or that does not parse, blocks
//! every call. A `failpoints` build (tests only) reads the path from
//! `STOPLINE_TEST_HOOK_CONFIG` instead; a release build has no such knob.

use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stopline_control::check::{check, CheckRequest};
use stopline_control::config::Config;
use stopline_control::Context;
use stopline_core::{Decision, Mode, TaskClass};
use stopline_store::Store;

/// The exit code that blocks the call.
pub const BLOCK: i32 = 2;
/// The largest event read from stdin.
const MAX_EVENT_BYTES: u64 = 8 * 1024 * 1024;
/// Default bound on the whole hook (Claude Code's own default timeout is 60 s).
const DEFAULT_TIMEOUT_MS: u64 = 20_000;
/// Default time a call held under HALT_NONCRITICAL waits for the halt to lift.
const DEFAULT_QUEUE_WAIT_MS: u64 = 10_000;

/// Which agent runs the hook: the events are the same but for their tools' names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Harness {
    /// Claude Code (`Write`, `Edit`, `MultiEdit`, `NotebookEdit` write files).
    ClaudeCode,
    /// Codex (`apply_patch` writes files; its shell is `Bash`).
    Codex,
}

/// Where decisions come from.
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// The agent whose events are judged.
    pub harness: Harness,
    /// The local control directory (used when `gateway` is `None`).
    pub home: PathBuf,
    /// `STOPLINE_URL`.
    pub gateway: Option<String>,
    /// `STOPLINE_TOKEN`.
    pub token: Option<String>,
}

/// Where root pins the hook's target.
pub const HOOK_CONFIG: &str = "/etc/stopline/hook.toml";

/// `/etc/stopline/hook.toml`: where decisions come from, outranking the environment.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedTarget {
    /// The gateway (outranks `STOPLINE_URL`).
    #[serde(default)]
    pub url: Option<String>,
    /// The local control directory (outranks `STOPLINE_HOME`), used when `url` is absent.
    #[serde(default)]
    pub home: Option<PathBuf>,
    /// A file holding the token (outranks `STOPLINE_TOKEN`).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

/// The path the pinned configuration is read from.
fn hook_config_path() -> PathBuf {
    stopline_store::failpoint::hook_config_override().unwrap_or_else(|| PathBuf::from(HOOK_CONFIG))
}

/// Refuse a path that someone other than root owns or may write.
fn root_held(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != 0 {
        return Err(format!(
            "{} is owned by uid {}, not root; blocking the call",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o}); blocking the call",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Read `path` as the pinned target: `Ok(None)` when it does not exist; an `Err` (which blocks)
/// when it or its directory is not root's alone, or it does not parse.
pub fn read_pinned(path: &Path) -> Result<Option<PinnedTarget>, String> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(format!(
                "cannot read {}: {e}; blocking the call",
                path.display()
            ))
        }
    };
    // The file opened (a symlink followed to its end), then its directory.
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot stat {}: {e}; blocking the call", path.display()))?;
    root_held(path, &meta)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let dir_meta = std::fs::metadata(dir)
        .map_err(|e| format!("cannot stat {}: {e}; blocking the call", dir.display()))?;
    root_held(dir, &dir_meta)?;
    let mut text = String::new();
    file.take(64 * 1024)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {}: {e}; blocking the call", path.display()))?;
    let pinned: PinnedTarget = toml::from_str(&text)
        .map_err(|e| format!("{} does not parse ({e}); blocking the call", path.display()))?;
    if pinned.url.as_deref().is_none_or(|u| u.trim().is_empty()) && pinned.home.is_none() {
        return Err(format!(
            "{} names neither url nor home; blocking the call",
            path.display()
        ));
    }
    Ok(Some(pinned))
}

/// `options` (from the environment) under the pinned target, when there is one.
fn pinned(options: &HookOptions) -> Result<HookOptions, String> {
    let Some(pinned) = read_pinned(&hook_config_path())? else {
        return Ok(options.clone());
    };
    let token = match &pinned.token_file {
        Some(file) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read the token file {}: {e}", file.display()))?
                .trim()
                .to_string(),
        ),
        None => options.token.clone(),
    };
    let url = pinned
        .url
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty());
    Ok(HookOptions {
        harness: options.harness,
        // Read only without a url, and then `read_pinned` saw a home: never STOPLINE_HOME.
        home: pinned.home.unwrap_or_default(),
        gateway: url,
        token,
    })
}

fn env_ms(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Run the hook; the return value is the process exit code (0 allow, 2 block).
pub fn run(options: HookOptions) -> i32 {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("stopline hook: internal error ({info}); blocking the call");
        std::process::exit(BLOCK);
    }));
    let timeout = Duration::from_millis(env_ms("STOPLINE_HOOK_TIMEOUT_MS", DEFAULT_TIMEOUT_MS));
    std::thread::spawn(move || {
        std::thread::sleep(timeout);
        eprintln!(
            "stopline hook: no decision within {} ms; blocking the call",
            timeout.as_millis()
        );
        std::process::exit(BLOCK);
    });
    match std::panic::catch_unwind(|| decide(&options)) {
        Ok(Ok(())) => 0,
        Ok(Err(reason)) => {
            eprintln!("stopline: {reason}");
            BLOCK
        }
        Err(_) => {
            eprintln!("stopline hook: internal error; blocking the call");
            BLOCK
        }
    }
}

/// The files a Codex `apply_patch` call writes: every `*** Add File:`, `*** Update File:`,
/// `*** Delete File:` and `*** Move to:` line of its patch (`tool_input.command`, or the input
/// itself when it is a string), in order.
pub fn patch_paths(tool_input: &Value) -> Vec<String> {
    let text = tool_input
        .get("command")
        .or_else(|| tool_input.get("input"))
        .or_else(|| tool_input.get("patch"))
        .unwrap_or(tool_input)
        .as_str()
        .unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let line = line.trim_end();
            [
                "*** Add File: ",
                "*** Update File: ",
                "*** Delete File: ",
                "*** Move to: ",
            ]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
        })
        .map(|path| path.trim().to_string())
        .filter(|path| !path.is_empty())
        .collect()
}

/// The operation target a tool call touches: `mcp:<server>:<tool>` for MCP tools
/// (`mcp__<server>__<tool>`), `file:<path>` for Claude Code's file-writing tools and for the
/// first file a Codex `apply_patch` writes.
pub fn target_of(
    harness: Harness,
    tool_name: &str,
    tool_input: &Value,
    cwd: Option<&Path>,
) -> Option<String> {
    if harness == Harness::Codex && tool_name == "apply_patch" {
        let first = patch_paths(tool_input).into_iter().next()?;
        return file_target(&first, cwd);
    }
    target(tool_name, tool_input, cwd)
}

/// The operation target a Claude Code tool call touches: `mcp:<server>:<tool>` for MCP tools
/// (`mcp__<server>__<tool>`), `file:<path>` for its file-writing tools.
pub fn target(tool_name: &str, tool_input: &Value, cwd: Option<&Path>) -> Option<String> {
    if let Some(rest) = tool_name.strip_prefix("mcp__") {
        let (server, tool) = rest.split_once("__")?;
        let server = stopline_core::Name::parse(server).ok()?;
        return Some(format!("mcp:{server}:{tool}"));
    }
    if !matches!(tool_name, "Write" | "Edit" | "MultiEdit" | "NotebookEdit") {
        return None;
    }
    let path = tool_input
        .get("file_path")
        .or_else(|| tool_input.get("notebook_path"))?
        .as_str()?;
    file_target(path, cwd)
}

/// `file:<canonical path>` for `path` (relative to `cwd`).
fn file_target(path: &str, cwd: Option<&Path>) -> Option<String> {
    let path = match (Path::new(path).is_absolute(), cwd) {
        (true, _) => PathBuf::from(path),
        (false, Some(cwd)) => cwd.join(path),
        (false, None) => return None,
    };
    // The file may not exist yet: canonicalize its directory and keep its name.
    let canonical = std::fs::canonicalize(&path).ok().or_else(|| {
        Some(
            std::fs::canonicalize(path.parent()?)
                .ok()?
                .join(path.file_name()?),
        )
    })?;
    Some(format!("file:{}", canonical.display()))
}

/// Judge the event on stdin: `Ok` allows, `Err(reason)` blocks.
fn decide(options: &HookOptions) -> Result<(), String> {
    let options = &pinned(options)?;
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(MAX_EVENT_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the hook event: {e}"))?;
    let event: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("the hook event is not JSON ({e}); blocking the call"))?;
    let tool_name = event
        .get("tool_name")
        .and_then(Value::as_str)
        .ok_or("the hook event has no tool_name; blocking the call")?;
    if let Some(name) = event.get("hook_event_name").and_then(Value::as_str) {
        if name != "PreToolUse" {
            return Err(format!(
                "this hook judges PreToolUse events, not {name}; blocking"
            ));
        }
    }
    let cwd = event.get("cwd").and_then(Value::as_str).map(PathBuf::from);
    let tool_input = event.get("tool_input").unwrap_or(&Value::Null);
    let target = target_of(options.harness, tool_name, tool_input, cwd.as_deref());
    let action = if target.as_deref().is_some_and(|t| t.starts_with("file:")) {
        "write"
    } else {
        "tool_call"
    };
    let deadline = Instant::now()
        + Duration::from_millis(env_ms("STOPLINE_HOOK_QUEUE_WAIT_MS", DEFAULT_QUEUE_WAIT_MS));
    loop {
        let (decision, mode, reason) = match &options.gateway {
            Some(url) => {
                let mut targets = gateway_targets(target.as_deref(), cwd.as_deref(), tool_input);
                if options.harness == Harness::Codex && tool_name == "apply_patch" {
                    for path in patch_paths(tool_input) {
                        if let Some(more) = file_target(&path, cwd.as_deref()) {
                            if !targets.contains(&more) {
                                targets.push(more);
                            }
                        }
                    }
                }
                ask_gateway(url, options.token.as_deref(), action, &targets)
            }
            None => ask_local(options, cwd.as_deref(), target.as_deref())?,
        };
        match decision {
            Decision::Allow => return Ok(()),
            Decision::Queue if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(250))
            }
            _ => {
                let code = reason.split(':').next().and_then(|c| {
                    serde_json::from_value::<stopline_core::RefusalCode>(Value::from(c)).ok()
                });
                return Err(if stopline_core::view::shows_mode(code, mode) {
                    format!("{tool_name} was not run ({mode}): {reason}")
                } else {
                    format!("{tool_name} was not run: {reason}")
                });
            }
        }
    }
}

fn ask_local(
    options: &HookOptions,
    cwd: Option<&Path>,
    target: Option<&str>,
) -> Result<(Decision, Mode, String), String> {
    let config = Config::load(&options.home.join("config.toml"))
        .map_err(|e| format!("config_invalid: {e}"))?;
    let store = Store::open(&options.home).with_read_timeout(std::time::Duration::from_millis(
        config.read_timeout_ms.max(1),
    ));
    let ctx = Context::new(store, config);
    let request = CheckRequest {
        class: TaskClass::Noncritical,
        token: options.token.clone(),
        agent: None,
        project: cwd.map(|c| c.display().to_string()),
        run: None,
        target: target.map(String::from),
    };
    let receipt = check(&ctx, &request);
    let reason = format!(
        "{}: {}",
        receipt.code.map(|c| c.as_str()).unwrap_or("allowed"),
        receipt.message
    );
    Ok((receipt.decision, receipt.mode, reason))
}

/// The targets the hook sends the gateway: the tool's operation target first, then the event's
/// `cwd` and every file path of the tool's input (`file_path`, `path`, `notebook_path`) as
/// `file:<canonical path>`, so a `project:` stop covering any of them blocks the call in
/// gateway mode as it does in local mode (docs/reference.md §6).
pub fn gateway_targets(
    target: Option<&str>,
    cwd: Option<&Path>,
    tool_input: &Value,
) -> Vec<String> {
    let mut targets: Vec<String> = target.map(String::from).into_iter().collect();
    let mut add = |path: PathBuf| {
        let text = format!("file:{}", canonical_or_parent(&path).display());
        if !targets.contains(&text) {
            targets.push(text);
        }
    };
    if let Some(cwd) = cwd.filter(|c| c.is_absolute()) {
        add(cwd.to_path_buf());
    }
    for field in ["file_path", "path", "notebook_path"] {
        let Some(path) = tool_input.get(field).and_then(Value::as_str) else {
            continue;
        };
        let path = Path::new(path);
        match (path.is_absolute(), cwd) {
            (true, _) => add(path.to_path_buf()),
            (false, Some(cwd)) if cwd.is_absolute() => add(cwd.join(path)),
            _ => {}
        }
    }
    targets
}

/// The canonical form of `path`, or of its nearest existing ancestor with the rest appended
/// (a file about to be written does not exist yet).
fn canonical_or_parent(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut current = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(current) {
            return rest
                .iter()
                .rev()
                .fold(canonical, |acc, part| acc.join(part));
        }
        match (current.parent(), current.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                current = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

fn ask_gateway(
    url: &str,
    token: Option<&str>,
    action: &str,
    targets: &[String],
) -> (Decision, Mode, String) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return (
                Decision::Block,
                Mode::Emergency,
                format!("internal error: {e}"),
            )
        }
    };
    let governor = crate::remote::RemoteGovernor::new(url);
    let receipt =
        runtime.block_on(governor.check_targets(token.unwrap_or_default(), false, action, targets));
    let reason = match receipt.refusal {
        Some(refusal) => format!("{}: {}", refusal.code, refusal.message),
        None => "allowed".into(),
    };
    (receipt.decision, receipt.mode, reason)
}
