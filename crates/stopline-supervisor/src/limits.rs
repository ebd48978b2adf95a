//! Process and memory ceilings of a worker (the policy card's `limits`, docs/reference.md §6): through
//! the group's `pids.max` and `memory.max` where those controllers are enabled in the cgroup v2
//! hierarchy, else `RLIMIT_NPROC` (per the run's own uid) and `RLIMIT_AS` set before exec.
//!
//! Without a ceiling an agent can fork until the machine's `pid_max` is exhausted, and then the
//! operator cannot fork `stopline engage`. The method actually used is reported in status,
//! because the fallback is weaker: `RLIMIT_NPROC` does not bind a process with
//! `CAP_SYS_RESOURCE` (an agent run `--unconfined` as root) and `RLIMIT_AS` caps each process,
//! not their sum. This module never lowers a ceiling below what it was asked for and never
//! reports a method it did not apply.

use crate::cgroup::{CgroupError, Group};
use crate::confine::ProcessLimits;
use crate::hierarchy::Hierarchy;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The default process ceiling when the card names none.
pub const DEFAULT_PIDS: u64 = 4096;

/// The ceilings asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Processes (tasks) of the worker.
    pub pids: Option<u64>,
    /// Memory, in MiB.
    pub memory_mb: Option<u64>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            pids: Some(DEFAULT_PIDS),
            memory_mb: None,
        }
    }
}

/// How a ceiling was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitMethod {
    /// `pids.max` / `memory.max` of the worker's group.
    Cgroup,
    /// `RLIMIT_NPROC` / `RLIMIT_AS` set before exec.
    Rlimit,
}

/// What status reports about a worker's ceilings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedLimits {
    /// The process ceiling.
    pub pids: Option<u64>,
    /// How it was applied.
    pub pids_method: Option<LimitMethod>,
    /// The memory ceiling in MiB.
    pub memory_mb: Option<u64>,
    /// How it was applied.
    pub memory_method: Option<LimitMethod>,
}

/// True when `controller` is enabled for the children of stopline's parent group (its
/// `cgroup.subtree_control` lists it), enabling it there first if the parent may.
fn controller_enabled(hierarchy: &Hierarchy, controller: &str) -> bool {
    let parent = hierarchy.parent();
    let listed = |file: &str| {
        std::fs::read_to_string(parent.join(file))
            .map(|text| text.split_whitespace().any(|c| c == controller))
            .unwrap_or(false)
    };
    if listed("cgroup.subtree_control") {
        return true;
    }
    if !listed("cgroup.controllers") {
        return false;
    }
    // The parent group holds no process of its own, so enabling a controller for its children
    // is allowed; a refusal leaves the fallback.
    let _ = std::fs::write(
        parent.join("cgroup.subtree_control"),
        format!("+{controller}"),
    );
    listed("cgroup.subtree_control")
}

fn write_limit(group: &Group, file: &str, value: u64) -> Result<(), CgroupError> {
    let path = group.path().join(file);
    std::fs::write(&path, value.to_string()).map_err(|source| CgroupError::Io { path, source })
}

/// Apply `limits` to `group` where its controllers allow; what is left goes into `fallback`
/// (the rlimits the child sets before exec). `group` is `None` for the subreaper fallback.
pub fn apply(
    limits: &Limits,
    hierarchy: Option<&Hierarchy>,
    group: Option<&Group>,
    fallback: &mut ProcessLimits,
) -> Result<AppliedLimits, CgroupError> {
    let in_group = |controller: &str| match (hierarchy, group) {
        (Some(hierarchy), Some(group)) => {
            controller_enabled(hierarchy, controller)
                && Path::new(&group.path().join(format!("{controller}.max"))).exists()
        }
        _ => false,
    };
    let mut applied = AppliedLimits {
        pids: limits.pids,
        pids_method: None,
        memory_mb: limits.memory_mb,
        memory_method: None,
    };
    if let Some(pids) = limits.pids {
        if let (true, Some(group)) = (in_group("pids"), group) {
            write_limit(group, "pids.max", pids)?;
            applied.pids_method = Some(LimitMethod::Cgroup);
        } else {
            fallback.nproc = Some(pids);
            applied.pids_method = Some(LimitMethod::Rlimit);
        }
    }
    if let Some(mb) = limits.memory_mb {
        let bytes = mb.saturating_mul(1024 * 1024);
        if let (true, Some(group)) = (in_group("memory"), group) {
            write_limit(group, "memory.max", bytes)?;
            applied.memory_method = Some(LimitMethod::Cgroup);
        } else {
            fallback.address_space = Some(bytes);
            applied.memory_method = Some(LimitMethod::Rlimit);
        }
    }
    Ok(applied)
}
