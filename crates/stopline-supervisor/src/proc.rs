//! Reading the process table from `/proc`: pid, parent, state and start time of each process.
//!
//! The start time (field 22 of `/proc/<pid>/stat`, in clock ticks since boot) pairs with the pid
//! to name one process for its whole life: a pid that is reused gets a different start time. The
//! subreaper fallback relies on that to never signal a stranger. This module only reads; it
//! must never signal or wait on a process.

use std::collections::HashMap;
use std::fs;
use std::io;

/// One line of `/proc/<pid>/stat`, reduced to what supervision needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// The process id.
    pub pid: u32,
    /// The parent's pid (0 for the kernel's own roots).
    pub ppid: u32,
    /// The state letter: `R`, `S`, `D`, `T`, `t`, `Z`, `X`, …
    pub state: char,
    /// Start time in clock ticks after boot; with the pid it identifies the process.
    pub starttime: u64,
}

impl ProcStat {
    /// A zombie (`Z`) or dead (`X`/`x`) process has exited: it runs nothing and holds only a pid.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// Stopped by a signal (`T`) or a tracer (`t`).
    pub fn is_stopped(&self) -> bool {
        matches!(self.state, 'T' | 't')
    }
}

/// Parse the text of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let mut rest = text.get(close + 1..)?.split_whitespace();
    // After the name: state (3), ppid (4), …, starttime (22). Field 3 is rest[0].
    let state = rest.next()?.chars().next()?;
    let ppid = rest.next()?.parse().ok()?;
    let starttime = rest.nth(22 - 5)?.parse().ok()?;
    Some(ProcStat {
        pid,
        ppid,
        state,
        starttime,
    })
}

/// Read `/proc/<pid>/stat`. `Ok(None)` when the process does not exist (any more).
pub fn read_stat(pid: u32) -> io::Result<Option<ProcStat>> {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => Ok(parse_stat(&text)),
        Err(error) if is_gone(&error) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Every process visible in `/proc`. Processes that exit during the walk are skipped.
pub fn all_processes() -> io::Result<Vec<ProcStat>> {
    let mut out = Vec::new();
    for entry in fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(stat) = read_stat(pid)? {
            out.push(stat);
        }
    }
    Ok(out)
}

/// The chain of parents of `pid`, nearest first, up to and including pid 1 (the owner-console
/// check walks it against the registered runs). A process that vanishes mid-walk ends the
/// chain early; an unreadable `/proc` entry is an error, never a shorter chain.
pub fn ancestors(pid: u32) -> io::Result<Vec<ProcStat>> {
    let mut chain = Vec::new();
    let mut current = read_stat(pid)?;
    while let Some(stat) = current {
        if stat.ppid == 0 || chain.len() > 4096 {
            break;
        }
        let parent = read_stat(stat.ppid)?;
        if let Some(parent) = parent {
            chain.push(parent);
        }
        current = parent;
    }
    Ok(chain)
}

/// True when `pid` is asleep in the kernel waiting for its `vfork` child (a `vfork`, or a
/// `clone`/`clone3` asking `CLONE_VFORK`, as `posix_spawn` does) to exec or exit. Such a parent
/// cannot take a SIGSTOP, nor run any instruction of its own, until that child lets it go, so a
/// freeze counts it as held once the child is stopped (the cgroup v2 freezer counts it frozen
/// for the same reason). Read from `/proc/<pid>/syscall` (the syscall it is blocked in) and
/// `/proc/<pid>/wchan` (where it sleeps): anything unreadable or unexpected is "no", so a doubt
/// keeps the freeze pending rather than confirming it.
pub fn waits_for_vfork_child(pid: u32) -> bool {
    let Ok(syscall) = fs::read_to_string(format!("/proc/{pid}/syscall")) else {
        return false;
    };
    let mut fields = syscall.split_whitespace();
    let Some(number) = fields.next().and_then(|n| n.parse::<i64>().ok()) else {
        return false;
    };
    let flags = fields
        .next()
        .and_then(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0);
    let clone_family = is_vfork_syscall(number)
        || (number == libc::SYS_clone && flags & libc::CLONE_VFORK as u64 != 0)
        || number == libc::SYS_clone3;
    clone_family
        && fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|wchan| {
            matches!(
                wchan.trim(),
                "kernel_clone" | "wait_for_vfork_done" | "_do_fork" | "do_fork"
            )
        })
}

#[cfg(target_arch = "x86_64")]
fn is_vfork_syscall(number: i64) -> bool {
    number == libc::SYS_vfork
}

#[cfg(not(target_arch = "x86_64"))]
fn is_vfork_syscall(_number: i64) -> bool {
    false
}

/// True when a stop signal (`SIGSTOP`) is pending for `pid`, sent but not yet taken (a
/// process asleep in the kernel takes it only when it returns to user space). `SIGCONT`
/// discards it; a thaw must, or the process stops by itself after the thaw.
pub fn stop_pending(pid: u32) -> io::Result<bool> {
    let status = match fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(text) => text,
        Err(error) if is_gone(&error) => return Ok(false),
        Err(error) => return Err(error),
    };
    let bit = 1u64 << (libc::SIGSTOP - 1);
    Ok(status
        .lines()
        .filter_map(|line| {
            line.strip_prefix("SigPnd:")
                .or_else(|| line.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & bit != 0))
}

/// Map each pid to its children, from one walk of `/proc`.
pub fn children_map(processes: &[ProcStat]) -> HashMap<u32, Vec<ProcStat>> {
    let mut map: HashMap<u32, Vec<ProcStat>> = HashMap::new();
    for process in processes {
        map.entry(process.ppid).or_default().push(*process);
    }
    map
}

/// A read of `/proc/<pid>/…` that failed because the process is gone.
fn is_gone(error: &io::Error) -> bool {
    // ESRCH is returned for a process that exited between opening and reading.
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_holds_spaces_and_parens() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 \
                    1000 200 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                pid: 4242,
                ppid: 17,
                state: 'S',
                starttime: 987654,
            })
        );
    }

    #[test]
    fn our_own_stat_reads_back() {
        let me = std::process::id();
        let stat = read_stat(me).unwrap().unwrap();
        assert_eq!(stat.pid, me);
        assert!(!stat.has_exited());
    }

    #[test]
    fn our_ancestors_end_at_pid_one() {
        let chain = ancestors(std::process::id()).unwrap();
        assert_eq!(
            chain.first().map(|p| p.pid),
            Some(rustix::process::getppid().unwrap().as_raw_nonzero().get() as u32)
        );
        assert_eq!(chain.last().map(|p| p.pid), Some(1));
    }
}
