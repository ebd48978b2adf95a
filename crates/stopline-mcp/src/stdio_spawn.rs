//! Starting and ending the stdio tool servers the gateway runs (`[mcp.<server>] command`,
//! docs/reference.md §6): a scrubbed environment, a uid of their own, a cgroup of their own under the
//! gateway's, and an end that reaches every process they started.
//!
//! A tool server is code the agent talks to, so it is held like the agent: it gets only `PATH`,
//! `HOME` and `LANG` of the gateway's environment plus `[mcp.<server>] env` (the gateway's
//! upstream key never reaches it); as root it runs under `[mcp.<server>] user`, by default a
//! fresh uid leased for the session; it starts in a session of its own with no new privileges;
//! and it lives in `<gateway's cgroup>/stopline-mcp-<server>-<session>`, so ending it
//! (`cgroup.kill`) also ends whatever it forked or `setsid`-ed away. Without a cgroup it can
//! create, the gateway falls back to killing the process group and says so in its log.
//! This module never starts a server with the gateway's own environment.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use stopline_gateway::config::McpServerConfig;
use stopline_supervisor::{CommandSpec, Confinement, Group, StdioMode, UidLease, UserIdentity};

/// The default `[mcp.<server>] session_idle_s`.
pub const DEFAULT_SESSION_IDLE_S: u64 = 300;

/// The variables of the gateway's environment a tool server inherits.
pub const INHERITED: [&str; 3] = ["PATH", "HOME", "LANG"];

/// A started tool server's hold on the machine: its group and its uid. Dropping it kills the
/// group (and the caller kills the process group too).
pub struct Held {
    group: Option<Group>,
    _lease: Option<UidLease>,
}

impl Held {
    /// Kill every process of the server (its whole group), then remove the group once empty,
    /// on a thread of its own so no caller waits.
    pub fn end(&mut self) {
        let Some(group) = self.group.take() else {
            return;
        };
        let _ = group.kill();
        let _ = std::thread::Builder::new()
            .name("stopline-mcp-reap".into())
            .spawn(move || {
                let report = group.kill_until_quiescent(std::time::Duration::from_secs(5));
                match report {
                    Ok(report) if report.confirmed() => {
                        let _ = group.remove();
                    }
                    other => tracing::warn!(
                        group = %group.path().display(),
                        "a tool server's group was not observed empty: {other:?}"
                    ),
                }
            });
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.end();
    }
}

/// The environment of a tool server: `PATH`, `HOME`, `LANG` of `gateway_env`, then `extra`.
pub fn server_environment(
    gateway_env: impl IntoIterator<Item = (OsString, OsString)>,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = gateway_env
        .into_iter()
        .filter(|(name, _)| INHERITED.iter().any(|keep| name == keep))
        .collect();
    for (name, value) in extra {
        env.insert(name.into(), value.into());
    }
    env
}

/// The gateway's own cgroup v2 directory, from `/proc/self/cgroup`.
fn own_cgroup() -> Option<PathBuf> {
    let hierarchy = stopline_supervisor::Hierarchy::discover().ok()?;
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let relative = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(
        hierarchy
            .mount()
            .join(relative.trim().trim_start_matches('/')),
    )
}

fn identity(config: &McpServerConfig) -> Result<(Option<UserIdentity>, Option<UidLease>), String> {
    if !rustix::process::geteuid().is_root() {
        // Only root can start a server as another uid; a non-root gateway runs it as itself.
        return Ok((None, None));
    }
    let home = PathBuf::from("/");
    match config.user.as_deref() {
        None | Some("auto") => {
            let range = stopline_supervisor::uid::DEFAULT_UID_RANGE;
            let lease = UidLease::fresh(range).map_err(|e| format!("uid_in_use: {e}"))?;
            Ok((
                Some(UserIdentity::anonymous(lease.uid(), home)),
                Some(lease),
            ))
        }
        Some(number) if number.bytes().all(|b| b.is_ascii_digit()) => {
            let uid: u32 = number
                .parse()
                .map_err(|_| format!("user {number:?} is not a uid"))?;
            let lease = UidLease::exact(uid).map_err(|e| format!("uid_in_use: {e}"))?;
            Ok((Some(UserIdentity::anonymous(uid, home)), Some(lease)))
        }
        Some(name) => {
            let user = UserIdentity::resolve(name).map_err(|e| e.to_string())?;
            let lease = UidLease::exact(user.uid).map_err(|e| format!("uid_in_use: {e}"))?;
            Ok((Some(user), Some(lease)))
        }
    }
}

/// Prepare `command` for the session `session` of `server`: the command (not yet started)
/// and what holds it.
pub fn prepare(
    server: &str,
    session: &str,
    command: &[String],
    config: &McpServerConfig,
) -> std::io::Result<(tokio::process::Command, Held)> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("empty command"))?;
    let (user, lease) = identity(config).map_err(std::io::Error::other)?;
    let mut spec = CommandSpec::new(program, args);
    spec.env = server_environment(std::env::vars_os(), &config.env);
    spec.cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    spec.user = user;
    spec.stdin = StdioMode::Piped;
    spec.stdout = StdioMode::Piped;
    // Relayed line by line into the gateway's log, each prefixed with the server's name.
    spec.stderr = StdioMode::Piped;
    spec.confinement = Confinement {
        new_session: true,
        no_new_privs: true,
        // Its own SysV objects, none of a uid's last holder's (docs/reference.md §6); needs root.
        new_ipc_namespace: rustix::process::geteuid().is_root(),
        ..Confinement::default()
    };
    let group = own_cgroup().and_then(|parent| {
        let short: String = session.chars().take(12).collect();
        let path = parent.join(format!("stopline-mcp-{server}-{short}"));
        match std::fs::create_dir(&path) {
            Ok(()) => Some(Group::at_path(path)),
            Err(error) => {
                tracing::warn!(
                    path = %path.display(),
                    %error,
                    "no cgroup of its own for the tool server; its end reaches its process group only"
                );
                None
            }
        }
    });
    let options = stopline_supervisor::SpawnOptions {
        group: group.as_ref(),
        netns: None,
        child_subreaper: false,
    };
    let std_command = stopline_supervisor::command(&spec, &options).map_err(|e| {
        if let Some(group) = &group {
            let _ = group.remove();
        }
        std::io::Error::other(e.to_string())
    })?;
    let mut command = tokio::process::Command::from(std_command);
    command.kill_on_drop(true);
    Ok((
        command,
        Held {
            group,
            _lease: lease,
        },
    ))
}

/// The session's idle bound.
pub fn idle_bound(config: &McpServerConfig) -> std::time::Duration {
    std::time::Duration::from_secs(config.session_idle_s.unwrap_or(DEFAULT_SESSION_IDLE_S))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_path_home_lang_and_the_configured_env_reach_a_server() {
        let gateway = [
            ("PATH", "/bin"),
            ("HOME", "/root"),
            ("LANG", "C.UTF-8"),
            ("UPSTREAM_API_KEY", "sk-real"),
            ("STOPLINE_HOME", "/secret"),
            ("TERM", "xterm"),
        ]
        .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let extra = BTreeMap::from([("DEBUG".to_string(), "1".to_string())]);
        let env = server_environment(gateway, &extra);
        let names: Vec<String> = env
            .keys()
            .map(|k| k.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["DEBUG", "HOME", "LANG", "PATH"]);
    }
}
