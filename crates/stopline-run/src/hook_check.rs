//! The preflight of a contained Claude Code (docs/reference.md §6, docs/wiring-agents.md "Claude Code,
//! contained"): the `stopline hook claude-code` its settings name must be executable by the uid
//! the agent will run as. Claude Code runs a tool without a word when its hook cannot be started
//! (installed under `/root/.local/bin`, say), so a hook the agent cannot execute is no guard at
//! all, and the run is refused (`policy_card_incomplete`) naming the path.
//!
//! The settings read are the ones Claude Code would use: the managed settings
//! (`/etc/claude-code/managed-settings.json`), a `--settings FILE` (or inline JSON) on its
//! command line, and the project's `.claude/settings.json` and `.claude/settings.local.json`.
//! Every `command` hook that runs `hook claude-code` is checked: its program resolved (an
//! absolute path, or looked up in the agent's `PATH`), search permission for the uid on every
//! directory on the way, execute permission on the file itself, and (under `gateway-only`)
//! visibility through the agent's private mounts. Permissions are read from mode bits (no ACLs).

use serde_json::Value;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use stopline_core::{Refusal, RefusalCode};
use stopline_supervisor::UserIdentity;

/// Where Claude Code's managed settings live.
pub const MANAGED_SETTINGS: &str = "/etc/claude-code/managed-settings.json";

/// What the check needs to know of the run.
pub struct HookCheck<'a> {
    /// The command and its arguments.
    pub command: &'a [OsString],
    /// The project root (the agent's working directory).
    pub project: &'a Path,
    /// The agent's identity; `None` runs it as the caller.
    pub identity: Option<&'a UserIdentity>,
    /// The `PATH` the agent gets.
    pub path_var: Option<&'a str>,
    /// Under `gateway-only`: the paths mapped into its private mounts (the project included).
    pub private_mounts: Option<&'a [PathBuf]>,
}

/// True when `command` starts Claude Code: its program, or (for `node cli.js`) an argument, is
/// `claude` or lies in a `claude-code` package.
pub fn is_claude_code(command: &[OsString]) -> bool {
    let names = |arg: &OsString| {
        let path = Path::new(arg);
        path.file_name().is_some_and(|n| n == "claude")
            || path.components().any(|c| c.as_os_str() == "claude-code")
    };
    match command.split_first() {
        Some((program, args)) => {
            names(program)
                || (Path::new(program)
                    .file_name()
                    .is_some_and(|n| n == "node" || n == "bun")
                    && args.first().is_some_and(names))
        }
        None => false,
    }
}

/// Interpreters whose first argument that is not an option is the program they run.
const INTERPRETERS: [&str; 9] = [
    "node", "bun", "deno", "python", "python3", "sh", "bash", "dash", "perl",
];

/// The files the agent's command needs before it runs anything of its own: its program (as
/// found on the agent's `PATH`, and where its symlinks lead), the interpreter of a `#!` script,
/// and the script an interpreter (`node`, `python3`, `sh`, …) is given as its first argument.
fn needed_paths(check: &HookCheck<'_>) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let add = |path: PathBuf, found: &mut Vec<PathBuf>| {
        if let Ok(real) = std::fs::canonicalize(&path) {
            if !found.contains(&real) {
                found.push(real);
            }
        }
        if !found.contains(&path) {
            found.push(path);
        }
    };
    let Some((program, args)) = check.command.split_first() else {
        return found;
    };
    let Some(resolved) = resolve(&program.to_string_lossy(), check.path_var) else {
        return found;
    };
    if !resolved.is_file() {
        return found;
    }
    add(resolved.clone(), &mut found);
    if let Some(interpreter) = shebang(&resolved) {
        add(interpreter, &mut found);
    }
    let is_interpreter = resolved
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| {
            INTERPRETERS
                .iter()
                .any(|i| n == *i || n.starts_with("python3."))
        });
    if is_interpreter {
        let script = args
            .iter()
            .map(|a| a.to_string_lossy())
            .find(|a| !a.starts_with('-'));
        if let Some(script) = script.filter(|s| s.starts_with('/')) {
            let script = PathBuf::from(script.as_ref());
            if script.is_file() {
                add(script, &mut found);
            }
        }
    }
    found
}

/// The absolute interpreter a `#!` line names, if `path` starts with one.
fn shebang(path: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::io::Read::read(&mut std::fs::File::open(path).ok()?, &mut head).ok()?;
    let text = std::str::from_utf8(head[..n].strip_prefix(b"#!")?).ok()?;
    let interpreter = text.lines().next()?.split_whitespace().next()?;
    interpreter
        .starts_with('/')
        .then(|| PathBuf::from(interpreter))
}

/// The paths a gateway-only run maps into the agent's private mounts because its command needs
/// them, and the refusals when it cannot: a needed file under a fresh `/tmp`, `/var/tmp`, `/run`
/// or `/dev/shm` that lies in a `node_modules` tree (an npm-installed CLI, such as `claude` or
/// `codex` from a checkout under /tmp) maps that tree; any other is refused, naming the file and
/// the `--share` that maps it; and a program its uid cannot execute is refused, naming why.
/// Else the agent fails to start with a bare "Permission denied" or "not found"
/// (docs/reference.md §6).
pub fn command_visible(check: &HookCheck<'_>) -> Result<Vec<PathBuf>, Refusal> {
    let refuse = |message: String| Refusal::new(RefusalCode::BadRequest, message);
    let needed = needed_paths(check);
    let mut mapped: Vec<PathBuf> = Vec::new();
    if let Some(given) = check.private_mounts {
        for path in &needed {
            let mut all = given.to_vec();
            all.extend(mapped.iter().cloned());
            let Some(masked) = hidden_by_private_mounts(path, &all) else {
                continue;
            };
            let tree = path
                .ancestors()
                .take_while(|a| *a != Path::new(masked))
                .find(|a| a.file_name().is_some_and(|n| n == "node_modules"));
            if let Some(tree) = tree {
                mapped.push(tree.to_path_buf());
                continue;
            }
            let top = path
                .strip_prefix(masked)
                .ok()
                .and_then(|rest| rest.components().next())
                .map_or_else(
                    || PathBuf::from(masked),
                    |first| Path::new(masked).join(first),
                );
            return Err(refuse(format!(
                "the agent's command needs {}, which it cannot see: {masked} is a fresh filesystem in its private mounts; map it with --share {} (or install it outside {masked})",
                path.display(),
                top.display()
            )));
        }
    }
    if let Some(program) = needed.first() {
        if let Err(why) = executable_by(program, check.identity) {
            return Err(refuse(format!(
                "the agent's program {} cannot be executed by its uid ({why})",
                program.display()
            )));
        }
    }
    Ok(mapped)
}

/// Refuse the run of a Codex agent when the hook its `CODEX_HOME` will name, `program hook
/// codex`, cannot be executed by its uid or is hidden by its private mounts: Codex runs every
/// tool call whose hook cannot start.
pub fn codex_hook_executable(check: &HookCheck<'_>, program: &Path) -> Result<(), Refusal> {
    let refuse = |message: String| Refusal::new(RefusalCode::PolicyCardIncomplete, message);
    if let Err(why) = executable_by(program, check.identity) {
        return Err(refuse(format!(
            "the Codex hook runs {}, which the agent's uid cannot execute ({why}), so Codex would run every tool unchecked; install stopline where the agent can execute it (e.g. /usr/local/bin)",
            program.display()
        )));
    }
    if let Some(mounts) = check.private_mounts {
        if let Some(masked) = hidden_by_private_mounts(program, mounts) {
            return Err(refuse(format!(
                "the Codex hook runs {}, which the agent cannot see: {masked} is a fresh filesystem in its private mounts (--share {} or install stopline elsewhere)",
                program.display(),
                program.parent().unwrap_or(program).display()
            )));
        }
    }
    Ok(())
}

/// Refuse the run of a Claude Code agent when a stopline hook its settings name cannot be
/// executed by its uid.
pub fn hook_executable(check: &HookCheck<'_>) -> Result<(), Refusal> {
    let refuse = |message: String| Refusal::new(RefusalCode::PolicyCardIncomplete, message);
    for (source, settings) in settings_sources(check) {
        for hook in stopline_hooks(&settings) {
            let Some(program) = hook.split_whitespace().next() else {
                continue;
            };
            let resolved = resolve(program, check.path_var).ok_or_else(|| {
                refuse(format!(
                    "the Claude Code hook {hook:?} in {source}: {program:?} is not found on the agent's PATH, so Claude Code would run every tool unchecked"
                ))
            })?;
            if let Err(why) = executable_by(&resolved, check.identity) {
                return Err(refuse(format!(
                    "the Claude Code hook in {source} runs {}, which the agent's uid cannot execute ({why}), so Claude Code would run every tool unchecked; install stopline where the agent can execute it (e.g. /usr/local/bin)",
                    resolved.display()
                )));
            }
            if let Some(mounts) = check.private_mounts {
                if let Some(masked) = hidden_by_private_mounts(&resolved, mounts) {
                    return Err(refuse(format!(
                        "the Claude Code hook in {source} runs {}, which the agent cannot see: {masked} is a fresh filesystem in its private mounts (--share the path or install stopline elsewhere)",
                        resolved.display()
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The settings Claude Code will read, each with where it came from. A file that cannot be read
/// or parsed is skipped (Claude Code would not use it either).
fn settings_sources(check: &HookCheck<'_>) -> Vec<(String, Value)> {
    fn from_file(path: &Path, found: &mut Vec<(String, Value)>) {
        let Ok(bytes) = std::fs::read(path) else {
            return;
        };
        if let Ok(value) = serde_json::from_slice::<Value>(&bytes) {
            found.push((path.display().to_string(), value));
        }
    }
    let mut found = Vec::new();
    from_file(Path::new(MANAGED_SETTINGS), &mut found);
    let args: Vec<&OsString> = check.command.iter().collect();
    for (at, arg) in args.iter().enumerate() {
        let text = arg.to_string_lossy();
        let given = match text.strip_prefix("--settings=") {
            Some(value) => Some(value.to_string()),
            None if text == "--settings" => args.get(at + 1).map(|a| a.to_string_lossy().into()),
            None => None,
        };
        let Some(given) = given else { continue };
        if given.trim_start().starts_with('{') {
            if let Ok(value) = serde_json::from_str::<Value>(&given) {
                found.push(("the --settings JSON".to_string(), value));
            }
        } else {
            from_file(&check.project.join(given), &mut found);
        }
    }
    for local in [".claude/settings.json", ".claude/settings.local.json"] {
        from_file(&check.project.join(local), &mut found);
    }
    found
}

/// Every `command` hook in `settings` that runs stopline's Claude Code hook.
fn stopline_hooks(settings: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let Some(events) = settings.get("hooks").and_then(Value::as_object) else {
        return found;
    };
    for matchers in events.values().filter_map(Value::as_array) {
        for matcher in matchers {
            let hooks = matcher.get("hooks").and_then(Value::as_array);
            for hook in hooks.into_iter().flatten() {
                let command = hook.get("command").and_then(Value::as_str);
                if let Some(command) = command.filter(|c| c.contains("hook claude-code")) {
                    found.push(command.to_string());
                }
            }
        }
    }
    found
}

/// `program` as a path: absolute as given, else the first executable file of that name on
/// `path_var`.
fn resolve(program: &str, path_var: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    path_var?
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| candidate.is_file())
}

/// The permission bits that apply to `identity` for a file owned by `uid`:`gid` with `mode`
/// (owner, else group, else other), shifted to the "other" position.
fn bits_for(identity: &UserIdentity, uid: u32, gid: u32, mode: u32) -> u32 {
    if identity.uid == uid {
        (mode >> 6) & 0o7
    } else if identity.gid == gid || identity.groups.contains(&gid) {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    }
}

/// `Ok` when `identity` may execute `path`: search on every directory up to it (as written and
/// after symlinks), execute on the regular file it names. The caller (`None`) is asked of the
/// kernel.
fn executable_by(path: &Path, identity: Option<&UserIdentity>) -> Result<(), String> {
    let Some(identity) = identity else {
        return rustix::fs::access(path, rustix::fs::Access::EXEC_OK)
            .map_err(|e| format!("{}: {e}", path.display()));
    };
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for candidate in [path, real.as_path()] {
        for dir in candidate.ancestors().skip(1) {
            let meta = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            if bits_for(identity, meta.uid(), meta.gid(), meta.mode()) & 0o1 == 0 {
                return Err(format!(
                    "uid {} has no search permission on {} (mode {:o}, owner {})",
                    identity.uid,
                    dir.display(),
                    meta.mode() & 0o7777,
                    meta.uid()
                ));
            }
        }
    }
    let meta = std::fs::metadata(&real).map_err(|e| format!("{}: {e}", real.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", real.display()));
    }
    if bits_for(identity, meta.uid(), meta.gid(), meta.mode()) & 0o1 == 0 {
        return Err(format!(
            "uid {} has no execute permission on {} (mode {:o}, owner {})",
            identity.uid,
            real.display(),
            meta.mode() & 0o7777,
            meta.uid()
        ));
    }
    Ok(())
}

/// The masked directory that hides `path` from the agent, when no mapped path brings it back.
fn hidden_by_private_mounts(path: &Path, mapped: &[PathBuf]) -> Option<&'static str> {
    let masked = stopline_supervisor::confine::MASKED_DIRS
        .into_iter()
        .find(|dir| path.starts_with(dir))?;
    let brought_back = mapped.iter().any(|m| {
        let m = std::fs::canonicalize(m).unwrap_or_else(|_| m.clone());
        path.starts_with(&m)
    });
    (!brought_back).then_some(masked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn claude_code_is_told_by_its_program() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(is_claude_code(&args(&["claude", "-p", "hi"])));
        assert!(is_claude_code(&args(&["/usr/local/bin/claude"])));
        assert!(is_claude_code(&args(&[
            "node",
            "/usr/lib/node_modules/@anthropic-ai/claude-code/cli.js"
        ])));
        assert!(!is_claude_code(&args(&["/bin/sh", "-c", "claude"])));
        assert!(!is_claude_code(&args(&["codex"])));
    }

    #[test]
    fn only_stopline_hooks_are_taken() {
        let settings = json!({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
            {"type": "command", "command": "/root/.local/bin/stopline hook claude-code", "timeout": 60},
            {"type": "command", "command": "jq ."}
        ]}]}});
        assert_eq!(
            stopline_hooks(&settings),
            vec!["/root/.local/bin/stopline hook claude-code".to_string()]
        );
        assert!(stopline_hooks(&json!({})).is_empty());
    }

    #[test]
    fn permission_bits_follow_owner_group_other() {
        let who = UserIdentity::anonymous(61200, PathBuf::from("/tmp"));
        assert_eq!(bits_for(&who, 0, 0, 0o700), 0);
        assert_eq!(bits_for(&who, 0, 0, 0o755), 0o5);
        assert_eq!(bits_for(&who, 61200, 0, 0o700), 0o7);
    }
}
