//! Resolving the user an agent runs as (`stopline run --user NAME`): uid, primary gid and the
//! supplementary groups.
//!
//! Resolution goes through the C library (`getpwnam_r`, `getgrouplist`), so users from NSS
//! sources beyond `/etc/passwd` resolve the same way `su` would. It happens in the parent,
//! before any fork: the child's pre-exec hook only applies the numbers. This module must never
//! change the identity of the calling process.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// Why a user could not be resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UserError {
    /// The name contains a NUL byte or is empty.
    #[error("invalid user name {0:?}")]
    InvalidName(String),
    /// No such user.
    #[error("no such user {0:?}")]
    Unknown(String),
    /// The C library reported an error.
    #[error("looking up user {name:?}: {source}")]
    Lookup {
        /// The user name.
        name: String,
        /// The error.
        source: std::io::Error,
    },
}

/// The numeric identity an agent is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserIdentity {
    /// The user name as given.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
    /// Every group it belongs to, the primary one included (what `setgroups` receives).
    pub groups: Vec<u32>,
    /// Its home directory from the passwd entry.
    pub home: PathBuf,
}

impl UserIdentity {
    /// Resolve `name` through the C library's passwd and group databases.
    pub fn resolve(name: &str) -> Result<UserIdentity, UserError> {
        let c_name = CString::new(name)
            .ok()
            .filter(|c| !c.as_bytes().is_empty())
            .ok_or_else(|| UserError::InvalidName(name.to_owned()))?;
        let (uid, gid, home) = lookup_passwd(name, &c_name)?;
        let groups = lookup_groups(name, &c_name, gid)?;
        Ok(UserIdentity {
            name: name.to_owned(),
            uid,
            gid,
            groups,
            home,
        })
    }

    /// A uid with no passwd entry (`--user auto`): primary group of the same number, no
    /// supplementary groups, named `uid-<uid>`, with `home` as its home.
    pub fn anonymous(uid: u32, home: PathBuf) -> UserIdentity {
        UserIdentity {
            name: format!("uid-{uid}"),
            uid,
            gid: uid,
            groups: vec![uid],
            home,
        }
    }

    /// True when this identity is the calling process's own real uid: running an agent as it
    /// gives the agent the caller's access (docs/reference.md §2 requires `--unconfined` for that).
    pub fn is_caller(&self) -> bool {
        self.uid == rustix::process::getuid().as_raw()
    }
}

fn lookup_passwd(name: &str, c_name: &CStr) -> Result<(u32, u32, PathBuf), UserError> {
    let mut buffer = vec![0u8; 4096];
    loop {
        // SAFETY: `passwd` is plain old data, valid when zeroed; getpwnam_r fills it in.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the duration of the call: `c_name` is a
        // NUL-terminated string, `entry` and `result` are live locals, and `buffer` is a
        // writable allocation of the length passed. getpwnam_r is the reentrant variant.
        let code = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut entry,
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                &mut result,
            )
        };
        if code == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 4, 0);
            continue;
        }
        if code != 0 {
            return Err(UserError::Lookup {
                name: name.to_owned(),
                source: std::io::Error::from_raw_os_error(code),
            });
        }
        if result.is_null() {
            return Err(UserError::Unknown(name.to_owned()));
        }
        let home = if entry.pw_dir.is_null() {
            PathBuf::from("/")
        } else {
            // SAFETY: on success `pw_dir` points to a NUL-terminated string inside `buffer`,
            // which is alive here; the bytes are copied out before `buffer` is dropped.
            let bytes = unsafe { CStr::from_ptr(entry.pw_dir) }.to_bytes().to_vec();
            PathBuf::from(std::ffi::OsString::from_vec(bytes))
        };
        return Ok((entry.pw_uid, entry.pw_gid, home));
    }
}

fn lookup_groups(name: &str, c_name: &CStr, gid: u32) -> Result<Vec<u32>, UserError> {
    let mut capacity: libc::c_int = 32;
    loop {
        let mut groups: Vec<libc::gid_t> = vec![0; usize::try_from(capacity).unwrap_or(32)];
        let mut count = capacity;
        // SAFETY: `groups` has room for `count` entries and `count` is a live local;
        // getgrouplist writes at most `count` entries and stores the real count in it.
        let code =
            unsafe { libc::getgrouplist(c_name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if code >= 0 {
            groups.truncate(usize::try_from(count).unwrap_or(0));
            if !groups.contains(&gid) {
                groups.insert(0, gid);
            }
            return Ok(groups);
        }
        if count <= capacity {
            // -1 without asking for more room: the library failed.
            if capacity >= 65536 {
                return Err(UserError::Lookup {
                    name: name.to_owned(),
                    source: std::io::Error::other("getgrouplist failed"),
                });
            }
            capacity *= 4;
        } else {
            capacity = count;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_resolves_to_uid_zero() {
        let root = UserIdentity::resolve("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(root.groups.contains(&0));
    }

    #[test]
    fn unknown_and_invalid_names_are_refused() {
        assert!(matches!(
            UserIdentity::resolve("no-such-user-stopline"),
            Err(UserError::Unknown(_))
        ));
        assert!(matches!(
            UserIdentity::resolve(""),
            Err(UserError::InvalidName(_))
        ));
        assert!(matches!(
            UserIdentity::resolve("a\0b"),
            Err(UserError::InvalidName(_))
        ));
    }
}
