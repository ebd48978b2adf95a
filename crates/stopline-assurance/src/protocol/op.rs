//! One step of a process: the operation it asked the filesystem for, and what it got back.
//!
//! Every call of the store's `Fs` seam becomes one or more [`Op`]s: `write_new` is three
//! (create, write, fsync — the failpoint names `<fp>.create`, `<fp>.write`, `<fp>.fsync`),
//! `append` with sync is two, every other call is one, and dropping a lock guard is an
//! `Unlock`. A process's *history* (its ops and their results) determines everything it does
//! next, because the store code is deterministic given its inputs; that is what lets the
//! checker memoize processes instead of re-running them for every interleaving.

use crate::protocol::hash::Hash128;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Immutable bytes with their digest computed once (file contents are cloned into every state).
#[derive(Clone)]
pub struct Blob(Arc<(Vec<u8>, u64)>);

impl Blob {
    /// Wrap `bytes`.
    pub fn new(bytes: Vec<u8>) -> Blob {
        let mut hasher = Hash128::default();
        hasher.write(&bytes);
        let sum = hasher.finish();
        Blob(Arc::new((bytes, sum)))
    }
    /// No bytes.
    pub fn empty() -> Blob {
        Blob::new(Vec::new())
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.0 .0
    }
    /// The cached digest of the bytes.
    pub fn sum(&self) -> u64 {
        self.0 .1
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Blob) -> bool {
        self.sum() == other.sum() && self.bytes() == other.bytes()
    }
}
impl Eq for Blob {}
impl Hash for Blob {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.sum().hash(state);
    }
}
impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.bytes().len())
    }
}

/// One atomic filesystem step. `handle` numbers are per process, so a process asks for the
/// same op in every interleaving; `fp` is the store's failpoint name of the step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum Op {
    /// The process starts (a scheduling point, so a gate can start before or after a return).
    Begin,
    Create {
        path: PathBuf,
        handle: u32,
        fp: String,
    },
    Write {
        path: PathBuf,
        handle: u32,
        bytes: Blob,
        fp: String,
    },
    Fsync {
        path: PathBuf,
        handle: u32,
        fp: String,
    },
    Append {
        path: PathBuf,
        handle: u32,
        bytes: Blob,
        sync: bool,
        fp: String,
    },
    AppendFsync {
        path: PathBuf,
        handle: u32,
        fp: String,
    },
    SyncDir {
        dir: PathBuf,
        fp: String,
    },
    HardLink {
        from: PathBuf,
        to: PathBuf,
        fp: String,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
        fp: String,
    },
    Remove {
        path: PathBuf,
        fp: String,
    },
    CreateDirAll {
        path: PathBuf,
        fp: String,
    },
    Truncate {
        path: PathBuf,
        len: u64,
        fp: String,
    },
    Read {
        path: PathBuf,
    },
    /// The inode at `path` and its length (`Fs::identify`).
    Identify {
        path: PathBuf,
    },
    ReadDir {
        dir: PathBuf,
    },
    Exists {
        path: PathBuf,
    },
    Lock {
        path: PathBuf,
        exclusive: bool,
        create: bool,
        handle: u32,
        /// Taken with a bound: when another process holds the lock, the step fails at once
        /// (`WouldBlock`, the bound ran out) instead of waiting. Any real wait that ends in the
        /// lock is the interleaving where the holder released it first.
        bounded: bool,
    },
    Unlock {
        path: PathBuf,
        handle: u32,
    },
}

impl Op {
    /// The step's name: its failpoint string, or `read`, `read_dir`, `lock.exclusive`, ….
    pub fn name(&self) -> String {
        match self {
            Op::Begin => "begin".into(),
            Op::Create { fp, .. }
            | Op::Write { fp, .. }
            | Op::Fsync { fp, .. }
            | Op::Append { fp, .. }
            | Op::AppendFsync { fp, .. }
            | Op::SyncDir { fp, .. }
            | Op::HardLink { fp, .. }
            | Op::Rename { fp, .. }
            | Op::Remove { fp, .. }
            | Op::CreateDirAll { fp, .. }
            | Op::Truncate { fp, .. } => fp.clone(),
            Op::Read { .. } => "read".into(),
            Op::Identify { .. } => "identify".into(),
            Op::ReadDir { .. } => "read_dir".into(),
            Op::Exists { .. } => "exists".into(),
            Op::Lock { exclusive, .. } => if *exclusive {
                "lock.exclusive"
            } else {
                "lock.shared"
            }
            .into(),
            Op::Unlock { .. } => "unlock".into(),
        }
    }

    /// The paths the step names (first the one it acts on).
    pub fn paths(&self) -> Vec<&Path> {
        match self {
            Op::Begin => Vec::new(),
            Op::HardLink { from, to, .. } | Op::Rename { from, to, .. } => vec![from, to],
            Op::Create { path, .. }
            | Op::Write { path, .. }
            | Op::Fsync { path, .. }
            | Op::Append { path, .. }
            | Op::AppendFsync { path, .. }
            | Op::Remove { path, .. }
            | Op::CreateDirAll { path, .. }
            | Op::Truncate { path, .. }
            | Op::Read { path }
            | Op::Identify { path }
            | Op::Exists { path }
            | Op::Lock { path, .. }
            | Op::Unlock { path, .. } => vec![path],
            Op::SyncDir { dir, .. } | Op::ReadDir { dir } => vec![dir],
        }
    }

    /// `name path[ -> path]`, paths relative to `home`, for traces.
    pub fn describe(&self, home: &Path) -> String {
        let rel = |p: &Path| {
            let text = p.strip_prefix(home).unwrap_or(p).display().to_string();
            if text.is_empty() {
                ".".to_string()
            } else {
                text
            }
        };
        let paths: Vec<String> = self.paths().into_iter().map(rel).collect();
        if paths.is_empty() {
            self.name()
        } else {
            format!("{} {}", self.name(), paths.join(" -> "))
        }
    }
}

/// What a step returned.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum OpResult {
    /// Success without data.
    Done,
    /// File contents.
    Bytes(Blob),
    /// Directory entries, sorted.
    Names(Vec<String>),
    /// `exists`.
    Flag(bool),
    /// `identify`: the inode (numbers are never reused in the model) and its length.
    Identity(u64, u64),
    /// Failure, by kind.
    Failed(Failure),
}

/// The error kinds the model produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// `ENOENT`.
    NotFound,
    /// `EEXIST`.
    AlreadyExists,
    /// Any other error (also every call of a crashed process).
    Io,
    /// A bounded lock another process held (`EWOULDBLOCK` after the bound).
    WouldBlock,
    /// A full disk (`ENOSPC`) after part of an append landed: its first `landed` bytes, which
    /// end at byte `end` of the file (the search's append fault, docs/reference.md §5).
    NoSpace {
        /// Bytes of the append that are in the file.
        landed: u64,
        /// Where they end.
        end: u64,
    },
}

impl OpResult {
    /// As the `io::Result` the store sees.
    pub fn io(&self) -> io::Result<OpResult> {
        match self {
            OpResult::Failed(Failure::NotFound) => Err(io::ErrorKind::NotFound.into()),
            OpResult::Failed(Failure::AlreadyExists) => Err(io::ErrorKind::AlreadyExists.into()),
            OpResult::Failed(Failure::Io) => Err(io::Error::other("model: I/O error")),
            OpResult::Failed(Failure::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "model: the lock is held by another process",
            )),
            OpResult::Failed(Failure::NoSpace { .. }) => Err(no_space()),
            other => Ok(other.clone()),
        }
    }

    /// A short rendering for traces.
    pub fn describe(&self) -> String {
        match self {
            OpResult::Done => "ok".into(),
            OpResult::Bytes(blob) => format!("ok ({} bytes)", blob.bytes().len()),
            OpResult::Names(names) => format!("ok [{}]", names.join(", ")),
            OpResult::Flag(flag) => format!("ok ({flag})"),
            OpResult::Identity(ino, len) => format!("ok (inode {ino}, {len} bytes)"),
            OpResult::Failed(failure) => format!("error {failure:?}"),
        }
    }
}

/// The error of a full disk, as the kernel reports it.
pub fn no_space() -> io::Error {
    io::Error::from_raw_os_error(28)
}
