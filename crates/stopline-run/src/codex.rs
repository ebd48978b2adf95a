//! A Codex agent's own `CODEX_HOME` (docs/reference.md §6 "Codex, contained").
//!
//! Codex ignores `OPENAI_BASE_URL` and reads its model provider and its hooks from
//! `$CODEX_HOME/config.toml`. For a Codex agent the run makes a fresh directory whose
//! `config.toml` names one provider, the gateway as the agent reaches it, authenticated with the
//! agent's own token through `env_key = "STOPLINE_TOKEN"` (no key is written anywhere), and one
//! `PreToolUse` hook running `stopline hook codex`, marked trusted the way Codex records a hook
//! a user reviewed (its `trusted_hash`), since Codex runs no untrusted hook.
//!
//! The directory is the agent's to write (Codex keeps its sessions and logs there) but
//! `config.toml` is not: the directory is sticky (mode 1777) and the file belongs to the
//! supervisor's uid, so the agent can neither edit, replace nor remove it. The directory is
//! removed when the run ends.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use stopline_core::{Refusal, RefusalCode};

/// The bound on the hook Codex enforces (s): past it Codex runs the tool, so it is well above
/// the hook's own bound (20 s by default), past which the hook blocks.
pub const HOOK_TIMEOUT_S: u64 = 60;

/// True when `command` starts Codex: its program, or (for `node codex.js`) an argument, is
/// `codex` or lies in the `@openai/codex` package.
pub fn is_codex(command: &[OsString]) -> bool {
    let names = |arg: &OsString| {
        let path = Path::new(arg);
        let parts: Vec<_> = path.components().map(|c| c.as_os_str()).collect();
        path.file_name().is_some_and(|n| n == "codex")
            || parts
                .windows(2)
                .any(|w| w[0] == "@openai" && w[1] == "codex")
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

/// The run's `CODEX_HOME`, removed (with what Codex wrote in it) when dropped.
#[derive(Debug)]
pub struct CodexHome {
    dir: PathBuf,
}

impl CodexHome {
    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for CodexHome {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), %error, "the run's CODEX_HOME could not be removed");
        }
    }
}

/// The command line of the hook: `program hook codex`, the program quoted for the shell Codex
/// runs it with.
pub fn hook_command(program: &Path) -> String {
    let text = program.display().to_string();
    let plain = text
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+".contains(&b));
    if plain {
        format!("{text} hook codex")
    } else {
        format!("'{}' hook codex", text.replace('\'', r"'\''"))
    }
}

/// The hash Codex records for a trusted command hook of `PreToolUse` with no matcher: SHA-256
/// of the canonical JSON (keys sorted, no spaces) of its normalized identity.
pub fn trusted_hash(command: &str, timeout_s: u64) -> String {
    // Fields in sorted order: serialized as declared, this is the canonical form.
    #[derive(serde::Serialize)]
    struct Handler<'a> {
        #[serde(rename = "async")]
        is_async: bool,
        command: &'a str,
        timeout: u64,
        #[serde(rename = "type")]
        kind: &'a str,
    }
    #[derive(serde::Serialize)]
    struct Identity<'a> {
        event_name: &'a str,
        hooks: [Handler<'a>; 1],
    }
    let identity = Identity {
        event_name: "pre_tool_use",
        hooks: [Handler {
            is_async: false,
            command,
            timeout: timeout_s,
            kind: "command",
        }],
    };
    let bytes = serde_json::to_vec(&identity).unwrap_or_default();
    format!("sha256:{}", stopline_core::wal::sha256_hex(&bytes))
}

/// The `config.toml` of a Codex home at `dir`.
pub fn config_toml(dir: &Path, gateway_url: &str, hook: &str) -> String {
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let key = format!("{}:pre_tool_use:0:0", dir.join("config.toml").display());
    format!(
        "# Written by `stopline run`: Codex's model calls go to the gateway with the agent's own\n\
         # token, and every tool call is judged by the stop first (`stopline hook codex`).\n\
         model_provider = \"stopline\"\n\
         # The gateway refuses provider-side tools unless `[model] allow_hosted_tools` names\n\
         # them (`-c web_search=live` when it allows web_search).\n\
         web_search = \"disabled\"\n\
         \n\
         [model_providers.stopline]\n\
         name = \"stopline gateway\"\n\
         base_url = {base_url}\n\
         env_key = \"STOPLINE_TOKEN\"\n\
         wire_api = \"responses\"\n\
         \n\
         [[hooks.PreToolUse]]\n\
         [[hooks.PreToolUse.hooks]]\n\
         type = \"command\"\n\
         command = {command}\n\
         timeout = {HOOK_TIMEOUT_S}\n\
         \n\
         [hooks.state.{key}]\n\
         trusted_hash = {hash}\n",
        base_url = quote(&format!("{}/v1", gateway_url.trim_end_matches('/'))),
        command = quote(hook),
        key = quote(&key),
        hash = quote(&trusted_hash(hook, HOOK_TIMEOUT_S)),
    )
}

/// Make the run's `CODEX_HOME` under `parent`: a fresh sticky directory holding `config.toml`.
pub fn prepare(
    parent: &Path,
    run_id: &str,
    gateway_url: &str,
    stopline: &Path,
) -> Result<CodexHome, Refusal> {
    let io = |what: &str, path: &Path, e: std::io::Error| {
        Refusal::new(
            RefusalCode::ControlIo,
            format!("the Codex home: {what} {}: {e}", path.display()),
        )
    };
    let parent = std::fs::canonicalize(parent).map_err(|e| io("resolving", parent, e))?;
    let dir = parent.join(format!("stopline-codex-{run_id}-{}", std::process::id()));
    // Never an existing directory (someone else's, or a symlink planted in a shared /tmp).
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| io("creating", &dir, e))?;
    let home = CodexHome { dir };
    let path = home.dir.join("config.toml");
    let text = config_toml(&home.dir, gateway_url, &hook_command(stopline));
    // The supervisor's own config for the agent, in the directory it just created (create_new:
    // never an existing file); not a control-directory file, so not the store's.
    #[allow(clippy::disallowed_methods)]
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
        .map_err(|e| io("writing", &path, e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io("writing", &path, e))?;
    use std::os::unix::fs::PermissionsExt;
    // Sticky: the agent writes its own files here, never the supervisor's config.toml.
    std::fs::set_permissions(&home.dir, std::fs::Permissions::from_mode(0o1777))
        .map_err(|e| io("opening", &home.dir, e))?;
    Ok(home)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codex_is_told_by_its_program() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(is_codex(&args(&["codex", "exec", "hi"])));
        assert!(is_codex(&args(&["/repo/node_modules/.bin/codex"])));
        assert!(is_codex(&args(&[
            "node",
            "/usr/lib/node_modules/@openai/codex/bin/codex.js"
        ])));
        assert!(!is_codex(&args(&["/bin/sh", "-c", "codex"])));
        assert!(!is_codex(&args(&["claude"])));
    }

    #[test]
    fn the_hook_is_quoted_only_when_it_must_be() {
        assert_eq!(
            hook_command(Path::new("/usr/local/bin/stopline")),
            "/usr/local/bin/stopline hook codex"
        );
        assert_eq!(
            hook_command(Path::new("/opt/my tools/stopline")),
            "'/opt/my tools/stopline' hook codex"
        );
    }

    /// The hash Codex 0.171 itself computed for this hook (read back from a config it trusted).
    #[test]
    fn the_trusted_hash_is_codexs() {
        assert_eq!(
            trusted_hash("/work/target-h4/x/run/hook.sh", 60),
            "sha256:18dc724179c8b51dc364faa5544cb612386b8b080b3026f4dc7674cc5d72c59b"
        );
    }

    #[test]
    fn the_config_names_the_gateway_the_hook_and_no_key() {
        let text = config_toml(
            Path::new("/tmp/stopline-codex-r1-7"),
            "http://10.0.0.1:7077",
            "/usr/local/bin/stopline hook codex",
        );
        let value: toml::Value = toml::from_str(&text).unwrap();
        let provider = &value["model_providers"]["stopline"];
        assert_eq!(
            provider["base_url"].as_str(),
            Some("http://10.0.0.1:7077/v1")
        );
        assert_eq!(provider["env_key"].as_str(), Some("STOPLINE_TOKEN"));
        assert_eq!(value["model_provider"].as_str(), Some("stopline"));
        assert_eq!(value["web_search"].as_str(), Some("disabled"));
        let hook = &value["hooks"]["PreToolUse"][0]["hooks"][0];
        assert_eq!(
            hook["command"].as_str(),
            Some("/usr/local/bin/stopline hook codex")
        );
        let state =
            &value["hooks"]["state"]["/tmp/stopline-codex-r1-7/config.toml:pre_tool_use:0:0"];
        assert!(state["trusted_hash"]
            .as_str()
            .is_some_and(|h| h.starts_with("sha256:")));
    }
}
