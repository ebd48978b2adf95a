//! Where the cgroup v2 hierarchy is, where stopline's groups live in it, and whether a process
//! sits inside one of them.
//!
//! The cgroup2 mount is discovered from `/proc/mounts` (fstype `cgroup2`); it is not always
//! `/sys/fs/cgroup` (hybrid layouts mount it at `/sys/fs/cgroup/unified`), so this module must
//! never hard-code a path. Every group stopline supervises lives under one parent group,
//! `<mount>/stopline/`. This module never creates a group other than that parent and never
//! moves or signals a process.

use crate::cgroup_error::CgroupError;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::path::{Component, Path, PathBuf};

/// The name of the parent group under the cgroup2 mount that holds every supervised group.
pub const PARENT_GROUP: &str = "stopline";

/// The cgroup v2 hierarchy as this machine mounts it, and stopline's parent group in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    mount: PathBuf,
    parent: PathBuf,
}

impl Hierarchy {
    /// Find the cgroup2 mount in `/proc/mounts`. Fails with [`CgroupError::NoCgroup2`] when none
    /// is mounted (the caller then falls back to the subreaper).
    pub fn discover() -> Result<Hierarchy, CgroupError> {
        let text = fs::read_to_string("/proc/mounts").map_err(|source| CgroupError::Io {
            path: PathBuf::from("/proc/mounts"),
            source,
        })?;
        Hierarchy::from_mounts(&text).ok_or(CgroupError::NoCgroup2)
    }

    /// The hierarchy described by the text of a `/proc/mounts` file: the first `cgroup2` entry.
    pub fn from_mounts(mounts: &str) -> Option<Hierarchy> {
        let mount = cgroup2_mount_point(mounts)?;
        Some(Hierarchy::at(mount))
    }

    /// A hierarchy mounted at `mount`, with stopline's parent group directly under it.
    pub fn at(mount: PathBuf) -> Hierarchy {
        let parent = mount.join(PARENT_GROUP);
        Hierarchy { mount, parent }
    }

    /// The cgroup2 mount point.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The absolute path of stopline's parent group (it may not exist yet).
    pub fn parent(&self) -> &Path {
        &self.parent
    }

    /// Create the parent group if it does not exist. Idempotent.
    pub fn ensure_parent(&self) -> Result<(), CgroupError> {
        match fs::create_dir(&self.parent) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(source) => Err(CgroupError::Io {
                path: self.parent.clone(),
                source,
            }),
        }
    }

    /// The group of `pid` if it lies under stopline's parent group, as an absolute path.
    ///
    /// Reads the `0::` line of `/proc/<pid>/cgroup`. An unreadable file is an error, never a
    /// "no": the owner-console check must fail closed when it cannot prove the process is
    /// outside every supervised group.
    pub fn supervised_cgroup_of(&self, pid: u32) -> Result<Option<PathBuf>, CgroupError> {
        let path = PathBuf::from(format!("/proc/{pid}/cgroup"));
        let text = fs::read_to_string(&path).map_err(|source| CgroupError::Io { path, source })?;
        let Some(relative) = unified_cgroup_path(&text) else {
            return Ok(None);
        };
        Ok(self.supervised_path(relative))
    }

    /// The absolute group path for a `0::` path, when it lies under stopline's parent group
    /// (whole components: `/stopline/x` is under it, `/stoplinex` is not).
    pub fn supervised_path(&self, relative: &str) -> Option<PathBuf> {
        let relative = Path::new(relative.trim_start_matches('/'));
        let mut components = relative.components();
        match components.next() {
            Some(Component::Normal(first)) if first == PARENT_GROUP => {}
            _ => return None,
        }
        // The parent group itself holds no agent; only groups below it are supervised.
        components.next()?;
        Some(self.mount.join(relative))
    }
}

/// The group of `pid` if it lies under stopline's parent group.
///
/// With no cgroup2 mount nothing can be supervised by cgroup, so the answer is `Ok(None)`
/// (processes supervised by the subreaper fallback are found by the parent-chain walk). An
/// unreadable `/proc/mounts` or `/proc/<pid>/cgroup` is an error: callers must treat it as
/// "cannot prove the process is unsupervised".
pub fn supervised_cgroup_of(pid: u32) -> Result<Option<PathBuf>, CgroupError> {
    match Hierarchy::discover() {
        Ok(hierarchy) => hierarchy.supervised_cgroup_of(pid),
        Err(CgroupError::NoCgroup2) => Ok(None),
        Err(other) => Err(other),
    }
}

/// The mount point of the first `cgroup2` filesystem in the text of `/proc/mounts`.
fn cgroup2_mount_point(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split(' ');
        let _source = fields.next()?;
        let target = fields.next()?;
        let fstype = fields.next()?;
        (fstype == "cgroup2").then(|| unescape_mount_field(target))
    })
}

/// Undo the octal escapes `/proc/mounts` uses for space, tab, newline and backslash.
fn unescape_mount_field(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\' && index + 4 <= bytes.len() {
            let digits = &bytes[index + 1..index + 4];
            if digits.iter().all(|digit| (b'0'..=b'7').contains(digit)) {
                let value = digits
                    .iter()
                    .fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                if let Ok(value) = u8::try_from(value) {
                    out.push(value);
                    index += 4;
                    continue;
                }
            }
        }
        out.push(bytes[index]);
        index += 1;
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The path of the `0::` (unified hierarchy) line of a `/proc/<pid>/cgroup` file.
pub fn unified_cgroup_path(proc_cgroup: &str) -> Option<&str> {
    proc_cgroup
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .map(|path| path.trim_end_matches(" (deleted)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_in_a_hybrid_layout() {
        let mounts = "tmpfs /sys/fs/cgroup tmpfs rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n";
        let hierarchy = Hierarchy::from_mounts(mounts).unwrap();
        assert_eq!(hierarchy.mount(), Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(
            hierarchy.parent(),
            Path::new("/sys/fs/cgroup/unified/stopline")
        );
    }

    #[test]
    fn no_cgroup2_mount_is_none() {
        assert!(Hierarchy::from_mounts("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n").is_none());
    }

    #[test]
    fn mount_points_with_escaped_spaces_are_unescaped() {
        let mounts = "none /mnt/my\\040cgroups cgroup2 rw 0 0\n";
        let hierarchy = Hierarchy::from_mounts(mounts).unwrap();
        assert_eq!(hierarchy.mount(), Path::new("/mnt/my cgroups"));
    }

    #[test]
    fn supervised_paths_match_whole_components() {
        let hierarchy = Hierarchy::at(PathBuf::from("/cg"));
        assert_eq!(
            hierarchy.supervised_path("/stopline/run-a.x"),
            Some(PathBuf::from("/cg/stopline/run-a.x"))
        );
        assert_eq!(
            hierarchy.supervised_path("/stopline/run-a.x/inner"),
            Some(PathBuf::from("/cg/stopline/run-a.x/inner"))
        );
        assert_eq!(hierarchy.supervised_path("/stoplinex/run"), None);
        assert_eq!(hierarchy.supervised_path("/stopline"), None);
        assert_eq!(hierarchy.supervised_path("/"), None);
        assert_eq!(hierarchy.supervised_path("/user.slice/stopline/x"), None);
    }

    #[test]
    fn the_unified_line_is_found_among_v1_lines() {
        let text = "4:memory:/a\n0::/stopline/run-1.x\n";
        assert_eq!(unified_cgroup_path(text), Some("/stopline/run-1.x"));
        assert_eq!(unified_cgroup_path("4:memory:/a\n"), None);
    }
}
