//! The walls an agent's process is started inside, beyond its group and network namespace: no
//! controlling terminal, no new privileges, process and memory ceilings, and a private mount
//! namespace with fresh `/tmp`, `/var/tmp`, `/run` and `/dev/shm` (docs/reference.md §6), and an IPC
//! namespace of its own (docs/reference.md §6).
//!
//! Everything here is prepared in the parent ([`Confinement::prepare`]: every path turned into a
//! C string, every directory to create listed) and applied in the child's pre-exec hook
//! ([`Prepared::apply_privileged`], then [`Prepared::apply_unprivileged`]) with raw system calls
//! only: the hook runs between `fork` and `exec` in a copy of a multi-threaded process and must
//! never allocate, lock or log.
//!
//! Why each wall: a session of its own (`setsid`) leaves the agent without a controlling
//! terminal, so it can neither push input into the operator's terminal (`TIOCSTI`) nor stop its
//! supervisor with a job-control character; `PR_SET_NO_NEW_PRIVS` keeps a set-uid binary from
//! giving the agent back what the uid drop took; the private mounts hide the host's path-based
//! unix sockets (a relay on `/tmp/*.sock`, daemons under `/run`) behind fresh empty filesystems,
//! with `--share PATH` mapping chosen paths back in. This module never changes the calling
//! process: only the forked child applies it.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directories that get a fresh, empty filesystem in a private mount namespace.
pub const MASKED_DIRS: [&str; 4] = ["/tmp", "/var/tmp", "/run", "/dev/shm"];

/// Resource ceilings applied with `setrlimit` before exec (the fallback where the cgroup
/// controllers are not enabled).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcessLimits {
    /// `RLIMIT_NPROC`: processes (and threads) of the agent's real uid.
    pub nproc: Option<u64>,
    /// `RLIMIT_AS`: address space of each process, in bytes.
    pub address_space: Option<u64>,
}

/// A private mount namespace: fresh [`MASKED_DIRS`], with `share` paths mapped back in.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrivateMounts {
    /// Absolute paths kept visible at the same place (the project root, `--share PATH`).
    pub share: Vec<PathBuf>,
}

/// What the child applies before exec, besides its group, namespace and identity.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confinement {
    /// Start a new session (`setsid`): no controlling terminal.
    pub new_session: bool,
    /// Set `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privs: bool,
    /// An IPC namespace of its own (`CLONE_NEWIPC`, needs root): SysV shared memory, message
    /// queues, semaphores and POSIX message queues the child makes die with its last process,
    /// and none of another's (or a uid's last holder's) is visible to it.
    pub new_ipc_namespace: bool,
    /// A PID namespace of its own (`CLONE_NEWPID`, with a fresh `/proc` mounted in the private
    /// mount namespace, so it sees only its own processes and command lines). Only with
    /// `mounts`. The child forked into the namespace (its pid 1) runs the program; the process
    /// the caller started stays outside it, waits for it and exits as it did.
    pub new_pid_namespace: bool,
    /// `setrlimit` ceilings.
    pub limits: ProcessLimits,
    /// A private mount namespace.
    pub mounts: Option<PrivateMounts>,
}

/// Why a confinement could not be prepared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineError {
    /// A shared path is not absolute, does not exist, or contains a NUL byte.
    #[error("--share {path}: {why}")]
    Share {
        /// The path.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// One path mapped back into the private namespace.
#[derive(Debug)]
struct SharedPath {
    source: CString,
    target: CString,
    is_dir: bool,
    /// Ancestors of `target` to create inside the fresh filesystem, outermost first.
    create: Vec<CString>,
}

/// A [`Confinement`] in the form the pre-exec hook applies without allocating.
#[derive(Debug)]
pub struct Prepared {
    new_session: bool,
    no_new_privs: bool,
    new_ipc_namespace: bool,
    new_pid_namespace: bool,
    limits: ProcessLimits,
    mounts: Option<PreparedMounts>,
}

#[derive(Debug)]
struct PreparedMounts {
    masked: Vec<(CString, &'static std::ffi::CStr)>,
    shares: Vec<SharedPath>,
    /// Room for one detached tree per share, reserved before the fork.
    trees: Vec<OwnedFd>,
    cwd: CString,
}

/// Make the calling process ignore `SIGTSTP`, `SIGTTIN` and `SIGTTOU` (the supervisor: a
/// job-control character on its terminal must never stop the process that enforces a stop).
/// Its agents get the default dispositions back before exec.
pub fn ignore_job_control_signals() {
    for signal in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
        // SAFETY: setting a disposition to SIG_IGN installs no handler and touches no memory.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.as_os_str().as_bytes()).ok()
}

fn lexically_under(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

impl Confinement {
    /// Everything the hook needs, as C strings. `cwd` is the child's working directory: it is
    /// entered again after the mounts, so its path resolves through the new tree.
    pub fn prepare(&self, cwd: &Path) -> Result<Prepared, ConfineError> {
        let mounts = match &self.mounts {
            None => None,
            Some(private) => Some(prepare_mounts(private, cwd)?),
        };
        Ok(Prepared {
            new_session: self.new_session,
            no_new_privs: self.no_new_privs,
            new_ipc_namespace: self.new_ipc_namespace,
            new_pid_namespace: self.new_pid_namespace && mounts.is_some(),
            limits: self.limits,
            mounts,
        })
    }
}

fn prepare_mounts(private: &PrivateMounts, cwd: &Path) -> Result<PreparedMounts, ConfineError> {
    let mut shares_wanted: Vec<PathBuf> = Vec::new();
    for path in &private.share {
        let refuse = |why: &str| ConfineError::Share {
            path: path.clone(),
            why: why.into(),
        };
        if !path.is_absolute() {
            return Err(refuse("must be an absolute path"));
        }
        let canonical = std::fs::canonicalize(path).map_err(|e| refuse(&e.to_string()))?;
        shares_wanted.push(canonical);
    }
    let masked_dirs: Vec<&'static str> = MASKED_DIRS
        .into_iter()
        .filter(|dir| {
            // A shared masked directory stays as it is; a missing one needs no mask.
            !shares_wanted.iter().any(|s| s == Path::new(dir)) && Path::new(dir).is_dir()
        })
        .collect();
    let mut masked = Vec::new();
    for dir in &masked_dirs {
        let mode: &'static std::ffi::CStr = if *dir == "/run" {
            c"mode=0755"
        } else {
            c"mode=1777"
        };
        masked.push((c_path(Path::new(dir)).expect("no NUL"), mode));
    }
    // The working directory is shared whenever a mask would hide it.
    if let Ok(cwd) = std::fs::canonicalize(cwd) {
        shares_wanted.push(cwd);
    }
    let mut shares = Vec::new();
    for path in shares_wanted {
        let Some(dir) = masked_dirs
            .iter()
            .map(Path::new)
            .find(|dir| lexically_under(&path, dir) && path != *dir)
        else {
            continue;
        };
        if shares
            .iter()
            .any(|s: &SharedPath| s.target.as_bytes() == path.as_os_str().as_bytes())
        {
            continue;
        }
        let refuse = |why: &str| ConfineError::Share {
            path: path.clone(),
            why: why.into(),
        };
        let is_dir = path.is_dir();
        let mut create = Vec::new();
        let mut ancestors: Vec<&Path> =
            path.ancestors().skip(1).take_while(|a| *a != dir).collect();
        ancestors.reverse();
        for ancestor in ancestors {
            create.push(c_path(ancestor).ok_or_else(|| refuse("contains a NUL byte"))?);
        }
        let c = c_path(&path).ok_or_else(|| refuse("contains a NUL byte"))?;
        shares.push(SharedPath {
            source: c.clone(),
            target: c,
            is_dir,
            create,
        });
    }
    let trees = Vec::with_capacity(shares.len());
    let cwd = c_path(cwd).ok_or_else(|| ConfineError::Share {
        path: cwd.to_owned(),
        why: "the working directory contains a NUL byte".into(),
    })?;
    Ok(PreparedMounts {
        masked,
        shares,
        trees,
        cwd,
    })
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

impl Prepared {
    /// The steps that must run while the child still has its privileges: the session, the
    /// resource ceilings and the mounts. Called in the pre-exec hook, before the uid drop.
    pub fn apply_privileged(&mut self) -> io::Result<()> {
        if self.new_session {
            rustix::process::setsid().map_err(errno)?;
        }
        // The supervisor ignores the job-control signals; an ignored disposition survives
        // exec, so the agent gets the defaults back.
        for signal in [libc::SIGTSTP, libc::SIGTTIN, libc::SIGTTOU] {
            // SAFETY: `signal` with SIG_DFL is async-signal-safe and touches no memory.
            unsafe { libc::signal(signal, libc::SIG_DFL) };
        }
        let limit = |value: u64| rustix::process::Rlimit {
            current: Some(value),
            maximum: Some(value),
        };
        if let Some(nproc) = self.limits.nproc {
            rustix::process::setrlimit(rustix::process::Resource::Nproc, limit(nproc))
                .map_err(errno)?;
        }
        if let Some(bytes) = self.limits.address_space {
            rustix::process::setrlimit(rustix::process::Resource::As, limit(bytes))
                .map_err(errno)?;
        }
        if self.new_ipc_namespace {
            // SAFETY: CLONE_NEWIPC only changes this (single-threaded, forked) process's IPC
            // namespace; `unshare_unsafe` is unsafe only for CLONE_FILES.
            unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWIPC) }
                .map_err(errno)?;
        }
        if let Some(mounts) = &mut self.mounts {
            mounts.apply()?;
        }
        Ok(())
    }

    /// With a PID namespace: enter it. Called in the pre-exec hook after
    /// [`Prepared::apply_privileged`] (the private mounts exist) and before the uid drop.
    ///
    /// `unshare(CLONE_NEWPID)` puts only the caller's later children in the new namespace, so
    /// this forks: the child, pid 1 of the namespace, mounts a fresh `/proc` over the private
    /// mount namespace's and returns to exec the program. The parent (the process the
    /// supervisor started, still in its group) closes every descriptor — the standard streams
    /// and the spawn's error pipe are the child's alone — waits for the child and exits as it
    /// did; it never returns. When pid 1 ends, the kernel kills the rest of the namespace.
    pub fn enter_pid_namespace(&self) -> io::Result<()> {
        if !self.new_pid_namespace {
            return Ok(());
        }
        // SAFETY: CLONE_NEWPID only changes where this (single-threaded, forked) process's later
        // children are born; `unshare_unsafe` is unsafe only for CLONE_FILES.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWPID) }
            .map_err(errno)?;
        // SAFETY: this process is the single-threaded child of a fork, between fork and exec;
        // both sides of this fork only make system calls from here on.
        let child = unsafe { libc::fork() };
        if child < 0 {
            return Err(io::Error::last_os_error());
        }
        if child > 0 {
            relay_exit(child);
        }
        rustix::mount::mount(
            c"proc",
            c"/proc",
            c"proc",
            rustix::mount::MountFlags::NOSUID
                | rustix::mount::MountFlags::NODEV
                | rustix::mount::MountFlags::NOEXEC,
            None,
        )
        .map_err(errno)?;
        Ok(())
    }

    /// The step that runs last, after the uid drop: no new privileges through exec.
    pub fn apply_unprivileged(&self) -> io::Result<()> {
        if self.no_new_privs {
            rustix::thread::set_no_new_privs(true).map_err(errno)?;
        }
        Ok(())
    }
}

/// The parent side of [`Prepared::enter_pid_namespace`]: wait for `child` and end as it ended.
/// Raw system calls only (between fork and exec).
fn relay_exit(child: libc::pid_t) -> ! {
    // SAFETY: close_range takes numbers; closing every descriptor of this process touches no
    // memory. Where it is missing (before Linux 5.9) the descriptors stay open until the exit,
    // which only delays the end of the agent's streams to the end of the agent.
    unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: `status` is a valid out-pointer for the duration of the call.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        if waited == child {
            if libc::WIFEXITED(status) {
                // SAFETY: `_exit` ends the process without running anything of the parent's.
                unsafe { libc::_exit(libc::WEXITSTATUS(status)) };
            }
            if libc::WIFSIGNALED(status) {
                let signal = libc::WTERMSIG(status);
                // SAFETY: resetting a disposition and signalling oneself make no allocation;
                // if the signal does not end the process, `_exit` does.
                unsafe {
                    libc::signal(signal, libc::SIG_DFL);
                    libc::kill(libc::getpid(), signal);
                    libc::_exit(128 + signal);
                }
            }
            continue;
        }
        if waited < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: as above.
            unsafe { libc::_exit(127) };
        }
    }
}

impl PreparedMounts {
    fn apply(&mut self) -> io::Result<()> {
        use rustix::mount::{
            mount, mount_change, move_mount, open_tree, MountFlags, MountPropagationFlags,
            MoveMountFlags, OpenTreeFlags,
        };
        // SAFETY: CLONE_NEWNS only changes this (single-threaded, forked) process's mount
        // namespace; `unshare_unsafe` is unsafe only for CLONE_FILES.
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNS) }
            .map_err(errno)?;
        // Nothing mounted here may propagate back to the host.
        mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )
        .map_err(errno)?;
        // Detached copies of what is shared, taken before the masks hide them.
        self.trees.clear();
        for share in &self.shares {
            let tree = open_tree(
                rustix::fs::CWD,
                share.source.as_c_str(),
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_RECURSIVE,
            )
            .map_err(errno)?;
            // Within the capacity reserved before the fork: no allocation.
            if self.trees.len() < self.trees.capacity() {
                self.trees.push(tree);
            } else {
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
        }
        for (dir, data) in &self.masked {
            mount(
                c"tmpfs",
                dir.as_c_str(),
                c"tmpfs",
                MountFlags::NOSUID | MountFlags::NODEV,
                Some(*data),
            )
            .map_err(errno)?;
        }
        for (share, tree) in self.shares.iter().zip(self.trees.iter()) {
            for dir in &share.create {
                match rustix::fs::mkdir(dir.as_c_str(), rustix::fs::Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(errno(e)),
                }
            }
            if share.is_dir {
                match rustix::fs::mkdir(
                    share.target.as_c_str(),
                    rustix::fs::Mode::from_raw_mode(0o755),
                ) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(errno(e)),
                }
            } else {
                rustix::fs::open(
                    share.target.as_c_str(),
                    rustix::fs::OFlags::CREATE
                        | rustix::fs::OFlags::WRONLY
                        | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::from_raw_mode(0o644),
                )
                .map_err(errno)?;
            }
            move_mount(
                tree,
                c"",
                rustix::fs::CWD,
                share.target.as_c_str(),
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )
            .map_err(errno)?;
        }
        self.trees.clear();
        // The working directory was entered before the masks: enter it again by its path.
        rustix::process::chdir(self.cwd.as_c_str()).map_err(errno)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_under_a_masked_dir_are_prepared_with_their_ancestors() {
        let dir = tempfile::Builder::new()
            .prefix("confine-")
            .tempdir_in("/tmp")
            .unwrap();
        let inner = dir.path().join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        let confinement = Confinement {
            mounts: Some(PrivateMounts {
                share: vec![inner.clone()],
            }),
            ..Confinement::default()
        };
        let prepared = confinement.prepare(Path::new("/")).unwrap();
        let mounts = prepared.mounts.unwrap();
        assert_eq!(mounts.shares.len(), 1);
        assert_eq!(
            mounts.shares[0].target.as_bytes(),
            inner.as_os_str().as_bytes()
        );
        assert_eq!(
            mounts.shares[0].create.len(),
            2,
            "{:?}",
            mounts.shares[0].create
        );
        assert!(mounts.masked.iter().any(|(d, _)| d.as_bytes() == b"/tmp"));
    }

    #[test]
    fn relative_or_missing_shares_are_refused() {
        for path in ["relative/path", "/no/such/path/stopline"] {
            let confinement = Confinement {
                mounts: Some(PrivateMounts {
                    share: vec![PathBuf::from(path)],
                }),
                ..Confinement::default()
            };
            assert!(confinement.prepare(Path::new("/")).is_err(), "{path}");
        }
    }
}
