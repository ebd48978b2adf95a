//! The owner console: three predicates, each checked and reported separately (docs/reference.md §2).
//!
//! 1. `no_agent_session`: `STOPLINE_TOKEN` and `STOPLINE_SESSION` unset; this process is not in a
//!    cgroup stopline supervises; no process in its chain of parents is a supervised agent (each
//!    ancestor's cgroup, and the pids registered under `runs/`) — so `env -u` and `setsid` are
//!    not enough to pass.
//! 2. `operator_identity`: `--by NAME` names a configured operator (and, for a run scope, one of
//!    the run's `who_may_approve_restart`).
//! 3. `interactive_terminal`: stdin and stderr are terminals and this process is in the
//!    terminal's foreground process group.
//!
//! This is a console gate, not proof of a human. [`OwnerConsole`] can only be built by passing
//! all three, and every recovery verb takes one.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::sync::Arc;
use stopline_control::Context;
use stopline_core::{Refusal, RefusalCode};
use stopline_store::OwnerPlane;

/// The cgroup (below the cgroup2 root) under which the supervisor creates every agent's group.
pub const SUPERVISED_CGROUP: &str = "/stopline";

/// Proof, for this process, that the owner console predicates held, and with it the plane's
/// owner verbs (nothing else hands them out).
#[derive(Debug, Clone)]
pub struct OwnerConsole {
    by: String,
    plane: Arc<dyn OwnerPlane>,
}

impl OwnerConsole {
    /// The operator named by `--by`.
    pub fn by(&self) -> &str {
        &self.by
    }

    /// The control plane's owner verbs: drain, recovery, repair, reconciliation, key rotation.
    pub fn plane(&self) -> &dyn OwnerPlane {
        &*self.plane
    }
}

/// The cgroup v2 path of `pid` (the `0::` line of `/proc/<pid>/cgroup`).
pub fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// True when a cgroup path lies in the supervised tree.
pub fn is_supervised_cgroup(path: &str) -> bool {
    path == SUPERVISED_CGROUP || path.starts_with(&format!("{SUPERVISED_CGROUP}/"))
}

/// The parent pid of `pid`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// This process and its ancestors up to pid 1.
pub fn ancestry(pid: u32) -> Vec<u32> {
    let mut chain = vec![pid];
    let mut current = pid;
    while let Some(parent) = parent_of(current) {
        if parent == 0 || chain.contains(&parent) {
            break;
        }
        chain.push(parent);
        current = parent;
    }
    chain
}

/// Pids registered as supervised agents under `runs/*/workers/*.json` (field `pid`) by the
/// workers that may be live (the store's `runs.live/` index; a home without it is read whole).
/// A registration that cannot be read names no pid; the cgroup check below still finds a
/// supervised caller by its group.
fn registered_agent_pids(ctx: &Context) -> BTreeSet<u32> {
    ctx.store
        .runs()
        .live_worker_registrations()
        .into_iter()
        .flatten()
        .filter_map(|worker| worker.pid())
        .collect()
}

fn check_no_agent_session(ctx: &Context) -> Result<(), String> {
    for var in ["STOPLINE_TOKEN", "STOPLINE_SESSION"] {
        if std::env::var_os(var).is_some() {
            return Err(format!("{var} is set: this is an agent session"));
        }
    }
    let registered = registered_agent_pids(ctx);
    let me = std::process::id();
    // The cgroup2 mount as the supervisor finds it; none means nothing is supervised by cgroup
    // (the subreaper fallback is caught by the registered pids below).
    let hierarchy = match stopline_supervisor::Hierarchy::discover() {
        Ok(hierarchy) => Some(hierarchy),
        Err(stopline_supervisor::CgroupError::NoCgroup2) => None,
        Err(e) => return Err(format!("cannot read the cgroup mounts: {e}")),
    };
    for pid in ancestry(me) {
        // Fail closed: a cgroup that cannot be read is not proof of being outside the tree,
        // unless the process has simply ended during the walk.
        match hierarchy.as_ref().map(|h| h.supervised_cgroup_of(pid)) {
            Some(Ok(Some(group))) => {
                return Err(format!(
                    "process {pid} in this chain is in the supervised cgroup {}",
                    group.display()
                ))
            }
            Some(Err(e)) if pid == me || std::path::Path::new(&format!("/proc/{pid}")).exists() => {
                return Err(format!(
                    "cannot prove process {pid} is outside every supervised cgroup: {e}"
                ))
            }
            _ => {}
        }
        if let Some(group) = cgroup_of(pid).filter(|g| is_supervised_cgroup(g)) {
            return Err(format!(
                "process {pid} in this chain is in the supervised cgroup {group}"
            ));
        }
        if registered.contains(&pid) {
            return Err(format!("process {pid} in this chain is a supervised agent"));
        }
    }
    Ok(())
}

fn check_operator(
    ctx: &Context,
    by: Option<&str>,
    approvers: Option<&[String]>,
) -> Result<String, String> {
    let Some(by) = by.map(str::trim).filter(|b| !b.is_empty()) else {
        return Err("--by NAME is required".into());
    };
    if !ctx.is_operator(by) {
        return Err(format!("{by:?} is not a configured operator"));
    }
    if let Some(approvers) = approvers {
        if !approvers.iter().any(|a| a == by) {
            return Err(format!(
                "{by:?} is not in the run's who_may_approve_restart"
            ));
        }
    }
    Ok(by.to_string())
}

fn check_terminal() -> Result<(), String> {
    if !std::io::stdin().is_terminal() {
        return Err("stdin is not a terminal".into());
    }
    if !std::io::stderr().is_terminal() {
        return Err("stderr is not a terminal".into());
    }
    let foreground = rustix::termios::tcgetpgrp(rustix::stdio::stdin())
        .map_err(|e| format!("the terminal's foreground process group cannot be read: {e}"))?;
    let ours = rustix::process::getpgrp();
    if foreground != ours {
        return Err("this process is not in the terminal's foreground process group".into());
    }
    Ok(())
}

/// The predicates that need no configuration — not an agent session, an interactive terminal —
/// for an owner-console verb whose configuration cannot be read: a caller failing them (a
/// confined agent cannot even read the control directory) is refused `owner_control_required`
/// naming them, rather than told about a file it may not read. `None` when both hold (then the
/// configuration's own error is the answer).
pub fn refuse_before_config(ctx: &Context) -> Option<Refusal> {
    let mut failed = Vec::new();
    if let Err(why) = check_no_agent_session(ctx) {
        failed.push(format!("no_agent_session: {why}"));
    }
    if let Err(why) = check_terminal() {
        failed.push(format!("interactive_terminal: {why}"));
    }
    (!failed.is_empty()).then(|| {
        Refusal::new(
            RefusalCode::OwnerControlRequired,
            format!(
                "the owner console is required; failed: {} (and the configuration cannot be read)",
                failed.join("; ")
            ),
        )
    })
}

/// Prove the owner console. `plane` is the control plane's owner side (the one `ctx.plane` is
/// the shared side of); `approvers` is the run's `who_may_approve_restart` when recovering a run
/// scope. On refusal every failed predicate is named.
pub fn prove(
    ctx: &Context,
    plane: Arc<dyn OwnerPlane>,
    by: Option<&str>,
    approvers: Option<&[String]>,
) -> Result<OwnerConsole, Refusal> {
    let session = check_no_agent_session(ctx);
    let operator = check_operator(ctx, by, approvers);
    let terminal = check_terminal();
    let mut failed = Vec::new();
    if let Err(why) = &session {
        failed.push(format!("no_agent_session: {why}"));
    }
    if let Err(why) = &operator {
        failed.push(format!("operator_identity: {why}"));
    }
    if let Err(why) = &terminal {
        failed.push(format!("interactive_terminal: {why}"));
    }
    match operator {
        Ok(by) if failed.is_empty() => Ok(OwnerConsole { by, plane }),
        _ => Err(Refusal::new(
            RefusalCode::OwnerControlRequired,
            format!(
                "the owner console is required; failed: {}",
                failed.join("; ")
            ),
        )),
    }
}
