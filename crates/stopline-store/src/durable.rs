//! Durable file helpers built from the `Fs` steps: directory creation, atomic replacement with
//! read-back, and the full-disk reserve.
//!
//! Atomic replacement writes a fresh temporary file (create_new, write, fsync), renames it over
//! the target and fsyncs the directory. A failed step leaves the old file in place; the temporary
//! file is removed best effort and never reused, so a failed fsync is never retried on the same
//! descriptor.

use crate::error::{IoContext, StoreError};
use crate::Store;
use std::path::Path;

/// Size of each file of the full-disk reserve: enough for many latches, epoch snapshots and WAL
/// lines.
pub const RESERVE_BYTES: usize = 128 * 1024;

impl Store {
    /// Create the control directory whole (docs/reference.md §5): the home (0700), `latches/`,
    /// `latches.staging/` and the full-disk reserve. Every verb that writes to the home starts
    /// here, and `stopline init` does only this, so the room a stop needs on a full disk (or a
    /// filesystem out of inodes) is taken before anyone fills it. Returns whether the reserve
    /// exists afterwards (making it is best effort: a stop never fails for want of it).
    pub fn ensure_home(&self) -> Result<bool, StoreError> {
        self.ensure_dirs(&[])?;
        Ok(self.ensure_reserve())
    }

    /// Create the control directory (0700) with `latches/` and `latches.staging/`, and `dirs`
    /// inside it. Everything but the reserve of [`Store::ensure_home`]: engage uses this before
    /// its latch and makes the reserve after it, so a first stop is not delayed by 256 KiB.
    pub fn ensure_dirs(&self, dirs: &[&Path]) -> Result<(), StoreError> {
        let home = self.layout.home().to_path_buf();
        self.fs
            .create_dir_all(&home, "home.mkdir")
            .context(|| format!("creating {}", home.display()))?;
        for dir in [self.layout.latches(), self.layout.staging()] {
            self.fs
                .create_dir_all(&dir, "dir.mkdir")
                .context(|| format!("creating {}", dir.display()))?;
        }
        for dir in dirs {
            self.fs
                .create_dir_all(dir, "dir.mkdir")
                .context(|| format!("creating {}", dir.display()))?;
        }
        Ok(())
    }

    /// `path`'s directory and a fresh temporary name beside it (`.<name>.tmp-<random>`), never
    /// reused, so a failed write is never retried on the same file.
    pub(crate) fn temporary_beside(&self, path: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = dir.join(format!(".{name}.tmp-{}", self.env.random_hex(6)));
        (dir, tmp)
    }

    /// Replace `path` atomically with `bytes`: temporary file, fsync, rename, fsync directory.
    pub fn replace_atomic(&self, path: &Path, bytes: &[u8], fp: &str) -> Result<(), StoreError> {
        let (dir, tmp) = self.temporary_beside(path);
        let dir = dir.as_path();
        let written = self
            .fs
            .write_new(&tmp, bytes, &format!("{fp}.tmp"))
            .context(|| format!("writing {}", tmp.display()));
        if let Err(error) = written {
            let _ = self.fs.remove_file(&tmp, "tmp.cleanup");
            return Err(error);
        }
        if let Err(error) = self
            .fs
            .rename(&tmp, path, &format!("{fp}.rename"))
            .context(|| format!("renaming over {}", path.display()))
        {
            let _ = self.fs.remove_file(&tmp, "tmp.cleanup");
            return Err(error);
        }
        self.fs
            .sync_dir(dir, &format!("{fp}.dirsync"))
            .context(|| format!("syncing {}", dir.display()))
    }

    /// Replace `path` atomically with `bytes` without waiting for the disk: a fresh temporary
    /// file (written, never fsynced), renamed over the target. Other processes see the new bytes
    /// at once; a crash may lose them (or leave the target empty). Only for liveness data that
    /// dies with its writer (a gateway's registration and acknowledgements): after a crash the
    /// writer is gone and its record is ignored or reported unreadable, never believed.
    pub fn replace_visible(&self, path: &Path, bytes: &[u8], fp: &str) -> Result<(), StoreError> {
        let (_, tmp) = self.temporary_beside(path);
        let written = self
            .fs
            .append(&tmp, bytes, false, &format!("{fp}.tmp"))
            .context(|| format!("writing {}", tmp.display()))
            .and_then(|()| {
                self.fs
                    .rename(&tmp, path, &format!("{fp}.rename"))
                    .context(|| format!("renaming over {}", path.display()))
            });
        if written.is_err() {
            let _ = self.fs.remove_file(&tmp, "tmp.cleanup");
        }
        written
    }

    /// Make sure the full-disk reserve exists, every file of it (best effort; returns whether
    /// it does). A file that could not be written whole is removed, so it holds nothing a stop
    /// may need.
    pub fn ensure_reserve(&self) -> bool {
        let mut whole = true;
        for path in self.layout.reserve_files().iter() {
            if matches!(self.fs.exists(path), Ok(true)) {
                continue;
            }
            if self
                .fs
                .write_new(path, &vec![0u8; RESERVE_BYTES], "reserve.create")
                .is_err()
            {
                let _ = self.fs.remove_file(path, "reserve.cleanup");
                whole = false;
            }
        }
        whole
    }

    /// Release one file of the reserve (the last that exists) so a stop can be written on a full
    /// disk, out of bytes or of inodes; the rest stays for the next stop. True if one was freed.
    pub(crate) fn release_reserve(&self) -> bool {
        for path in self.layout.reserve_files().iter().rev() {
            if self.fs.remove_file(path, "reserve.release").is_ok() {
                let _ = self.fs.sync_dir(self.layout.home(), "reserve.dirsync");
                return true;
            }
        }
        false
    }
}
