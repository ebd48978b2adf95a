//! Starting an agent's command: inside its group from its first instruction, with an explicit
//! environment, optionally as another user and inside the gateway-only network namespace.
//!
//! The child joins its group in a pre-exec hook (writing `0`, "myself", to the group's
//! `cgroup.procs`), so no instruction of the agent's program ever runs outside the group and
//! nothing it forks can be born outside it. The hook then enters the network namespace, then
//! applies the [`Confinement`] (a session of its own, ceilings, an IPC namespace, private
//! mounts, and under a PID namespace forks its pid 1, which goes on from here), then drops
//! privileges in the only safe order: `setgroups`, `setgid`, `setuid`, and last sets
//! `PR_SET_NO_NEW_PRIVS`. The environment starts empty: only what the caller passes reaches the
//! agent.
//!
//! The pre-exec hook runs between `fork` and `exec` in a copy of a possibly multi-threaded
//! process, so it must never allocate, lock or log: it makes raw system calls on values prepared
//! before the fork, and nothing else.

use crate::cgroup::Group;
use crate::confine::{ConfineError, Confinement};
use crate::user::UserIdentity;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Why an agent could not be started. When spawning fails, no agent code has run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// Preparing the child failed (opening the group's `cgroup.procs`, duplicating the
    /// namespace descriptor).
    #[error("preparing {what}: {source}")]
    Prepare {
        /// What was being prepared.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The confinement could not be prepared (a `--share` path that cannot be mapped in).
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// The fork, the pre-exec hook (joining the group, entering the namespace, dropping
    /// privileges) or the exec failed.
    #[error("starting {program:?}: {source}")]
    Spawn {
        /// The program.
        program: OsString,
        /// The error, as the child reported it.
        source: io::Error,
    },
}

/// Where one of the child's standard streams goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StdioMode {
    /// The supervisor's own stream.
    #[default]
    Inherit,
    /// `/dev/null`.
    Null,
    /// A pipe the caller reads or writes through the [`Child`] handle.
    Piped,
}

impl StdioMode {
    fn to_stdio(self) -> Stdio {
        match self {
            StdioMode::Inherit => Stdio::inherit(),
            StdioMode::Null => Stdio::null(),
            StdioMode::Piped => Stdio::piped(),
        }
    }
}

/// What to run and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The program (a path, or a name looked up in the `PATH` of [`CommandSpec::env`]).
    pub program: OsString,
    /// Its arguments, without the program name.
    pub args: Vec<OsString>,
    /// The complete environment. Nothing else is inherited.
    pub env: BTreeMap<OsString, OsString>,
    /// The working directory.
    pub cwd: PathBuf,
    /// Run as this user; `None` runs as the caller (`--unconfined`).
    pub user: Option<UserIdentity>,
    /// Standard input.
    pub stdin: StdioMode,
    /// Standard output.
    pub stdout: StdioMode,
    /// Standard error.
    pub stderr: StdioMode,
    /// The walls beyond the group, namespace and identity (session, no new privileges,
    /// ceilings, private mounts).
    pub confinement: Confinement,
}

impl CommandSpec {
    /// `program args…` with an empty environment, working directory `/`, as the caller, with
    /// inherited standard streams.
    pub fn new<P, I, A>(program: P, args: I) -> CommandSpec
    where
        P: Into<OsString>,
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        CommandSpec {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
            cwd: PathBuf::from("/"),
            user: None,
            stdin: StdioMode::Inherit,
            stdout: StdioMode::Inherit,
            stderr: StdioMode::Inherit,
            confinement: Confinement::default(),
        }
    }

    /// Add one environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> CommandSpec {
        self.env.insert(key.into(), value.into());
        self
    }
}

/// Where the child is placed before it executes anything.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpawnOptions<'a> {
    /// Join this group before exec.
    pub group: Option<&'a Group>,
    /// Enter this network namespace before exec (a descriptor of `/proc/…/ns/net`).
    pub netns: Option<BorrowedFd<'a>>,
    /// Make the child a child subreaper before exec, so orphans anywhere below it are
    /// re-parented to it rather than escaping the tree (the subreaper fallback).
    pub child_subreaper: bool,
}

/// A started agent.
#[derive(Debug)]
pub struct Spawned {
    /// The child handle; the caller waits on it.
    pub child: Child,
    /// Its pid.
    pub pid: u32,
}

/// Start `spec` as [`SpawnOptions`] says. On success the child already runs inside the group,
/// the namespace and the identity it was given.
pub fn spawn(spec: &CommandSpec, options: &SpawnOptions<'_>) -> Result<Spawned, SpawnError> {
    let mut command = command(spec, options)?;
    let child = command.spawn().map_err(|source| SpawnError::Spawn {
        program: spec.program.clone(),
        source,
    })?;
    let pid = child.id();
    tracing::debug!(pid, program = ?spec.program, "agent started");
    Ok(Spawned { child, pid })
}

/// The [`Command`] [`spawn()`] starts, with its pre-exec hook installed, for callers that start
/// it themselves (the gateway converts it to an async command for its tool servers).
pub fn command(spec: &CommandSpec, options: &SpawnOptions<'_>) -> Result<Command, SpawnError> {
    let procs: Option<OwnedFd> = match options.group {
        Some(group) => {
            let path = group.procs_path();
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|source| SpawnError::Prepare {
                    what: path.display().to_string(),
                    source,
                })?;
            Some(OwnedFd::from(file))
        }
        None => None,
    };
    let netns: Option<OwnedFd> = match options.netns {
        Some(fd) => Some(
            fd.try_clone_to_owned()
                .map_err(|source| SpawnError::Prepare {
                    what: "network namespace descriptor".into(),
                    source,
                })?,
        ),
        None => None,
    };
    let identity: Option<(libc::uid_t, libc::gid_t, Vec<libc::gid_t>)> = spec
        .user
        .as_ref()
        .map(|user| (user.uid, user.gid, user.groups.clone()));
    let child_subreaper = options.child_subreaper;
    let mut confinement = spec.confinement.prepare(&spec.cwd)?;

    let mut command = Command::new(&spec.program);
    command
        .args(&spec.args)
        .env_clear()
        .envs(&spec.env)
        .current_dir(&spec.cwd)
        .stdin(spec.stdin.to_stdio())
        .stdout(spec.stdout.to_stdio())
        .stderr(spec.stderr.to_stdio());

    let hook = move || -> io::Result<()> {
        if let Some(procs) = &procs {
            join_group(procs.as_fd())?;
        }
        if let Some(netns) = &netns {
            rustix::thread::move_into_link_name_space(
                netns.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .map_err(errno_to_io)?;
        }
        if child_subreaper {
            rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
                .map_err(errno_to_io)?;
        }
        confinement.apply_privileged()?;
        confinement.enter_pid_namespace()?;
        if let Some((uid, gid, groups)) = &identity {
            drop_privileges(*uid, *gid, groups)?;
        }
        confinement.apply_unprivileged()?;
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec. It only makes system calls
    // (write, setns, prctl, setsid, setrlimit, unshare, mount, fork, waitpid, close_range,
    // setgroups, setgid, setuid) on descriptors, numbers and C strings prepared above, and
    // builds errors with
    // `from_raw_os_error`, which does not allocate. The one vector it pushes to had its room
    // reserved before the fork. It takes no lock and touches no state shared with other
    // threads of the parent.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(command)
}

/// Move the calling process into the group whose `cgroup.procs` is open as `procs`.
/// The kernel reads the pid `0` as "the writing process" (cgroup_procs_write_start).
fn join_group(procs: BorrowedFd<'_>) -> io::Result<()> {
    let written = rustix::io::write(procs, b"0").map_err(errno_to_io)?;
    if written == 1 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EIO))
    }
}

/// `setgroups`, then `setgid`, then `setuid`: once the uid is dropped the others are no longer
/// permitted, so any other order leaves root's groups behind.
fn drop_privileges(uid: libc::uid_t, gid: libc::gid_t, groups: &[libc::gid_t]) -> io::Result<()> {
    // SAFETY: `groups` points to `groups.len()` valid gids for the duration of the call.
    if unsafe { libc::setgroups(groups.len(), groups.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain system call wrappers taking numbers.
    if unsafe { libc::setgid(gid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::setuid(uid) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn errno_to_io(errno: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(errno.raw_os_error())
}
