//! The one I/O seam of the control directory.
//!
//! Every byte the store reads or writes goes through [`Fs`], one method per durable step, each
//! named by a failpoint. [`RealFs`] is the binary's implementation; the model checker supplies
//! an in-memory one with crash semantics, and so steps exactly the protocol code the binary runs.
//!
//! Contract of a durable step: when it returns `Ok`, what it wrote survives a crash (for
//! `write_new`, the file's contents; a directory entry only after `sync_dir` of its directory).
//! A failed fsync is never retried on the same descriptor: the kernel may have dropped the dirty
//! pages and a retry would report a false success. Callers write a fresh file instead.

use crate::failpoint;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// A held file lock; released on drop.
pub trait LockGuard: Send {}

/// The store's filesystem operations. `fp` names the failpoint of each step.
pub trait Fs: Send + Sync {
    /// `create_new` + write all + fsync the file (mode 0600). Fails if `path` exists.
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()>;
    /// Append `bytes` (creating the file 0600 if needed), then fsync when `sync`.
    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()>;
    /// fsync a directory, making its entries durable.
    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()>;
    /// Create `to` as a hard link of `from` (fails if `to` exists).
    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()>;
    /// Rename `from` over `to`.
    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()>;
    /// Remove a file.
    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()>;
    /// Create a directory and its parents, mode 0700. Existing directories are fine.
    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()>;
    /// Truncate a file to `len` bytes and fsync it.
    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()>;
    /// Read a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// The names in a directory, sorted.
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Whether a path exists (without following a final symlink).
    fn exists(&self, path: &Path) -> io::Result<bool>;
    /// Take an advisory lock on `path`, exclusive or shared. With `create`, a missing file is
    /// created 0600; without it, a missing file is `NotFound`.
    fn lock(&self, path: &Path, exclusive: bool, create: bool) -> io::Result<Box<dyn LockGuard>>;
}

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct FlockGuard(#[allow(dead_code)] File);
impl LockGuard for FlockGuard {}

fn open_0600(path: &Path, append: bool, create_new: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).mode(0o600);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true);
    }
    if append {
        options.append(true);
    }
    options.open(path)
}

impl Fs for RealFs {
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
        failpoint::hit(&format!("{fp}.create"))?;
        let mut file = open_0600(path, false, true)?;
        failpoint::hit(&format!("{fp}.write"))?;
        file.write_all(bytes)?;
        failpoint::hit(&format!("{fp}.fsync"))?;
        file.sync_all()
    }

    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()> {
        failpoint::hit(&format!("{fp}.write"))?;
        let mut file = open_0600(path, true, false)?;
        file.write_all(bytes)?;
        if sync {
            failpoint::hit(&format!("{fp}.fsync"))?;
            file.sync_data()?;
        }
        Ok(())
    }

    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        File::open(dir)?.sync_all()
    }

    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::hard_link(from, to)
    }

    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::remove_file(path)
    }

    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }

    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()> {
        failpoint::hit(fp)?;
        let file = OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        File::open(path)?.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        match fs::symlink_metadata(path) {
            Ok(_) => Ok(true),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn lock(&self, path: &Path, exclusive: bool, create: bool) -> io::Result<Box<dyn LockGuard>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let operation = if exclusive {
            rustix::fs::FlockOperation::LockExclusive
        } else {
            rustix::fs::FlockOperation::LockShared
        };
        rustix::fs::flock(&file, operation)?;
        Ok(Box::new(FlockGuard(file)))
    }
}
