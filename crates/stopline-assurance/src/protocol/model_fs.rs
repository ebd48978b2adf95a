//! The store's `Fs` seam over the model: every `Fs` call becomes [`Op`] steps.
//!
//! [`ModelFs`] turns each call into the steps of `op.rs` and hands them to a [`Step`]: the
//! process replayer (`oracle.rs`), which answers from a recorded history, or `solo::Solo`, which
//! applies them at once to an `FsState` (the setup and restart phases, where one process runs
//! alone). Handle numbers count per `ModelFs`, so a process numbers its handles the same way
//! in every interleaving.

use crate::protocol::op::{Blob, Failure, Op, OpResult};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use stopline_store::fs::{FileId, Fs, LockGuard};

/// Something that performs (or replays) one step.
pub trait Step: Send + Sync + 'static {
    /// Perform `op` and return its result.
    fn step(&self, op: Op) -> OpResult;
}

/// The `Fs` seam over a [`Step`].
pub struct ModelFs<S: Step> {
    stepper: Arc<S>,
    handles: AtomicU32,
    /// Whether an append that lands partly is cut back before its error (the real seam's
    /// rule, docs/reference.md §5); `false` only for the planted bug `AppendNotCutBack`.
    cut_back: bool,
}

impl<S: Step> ModelFs<S> {
    /// A seam whose steps go to `stepper`.
    pub fn new(stepper: Arc<S>) -> ModelFs<S> {
        ModelFs {
            stepper,
            handles: AtomicU32::new(0),
            cut_back: true,
        }
    }

    /// This seam with an append that does not cut back what a failed write left (the planted
    /// bug `AppendNotCutBack`): the next line is glued onto the torn one.
    pub fn without_cut_back(mut self) -> ModelFs<S> {
        self.cut_back = false;
        self
    }

    fn handle(&self) -> u32 {
        self.handles.fetch_add(1, Ordering::SeqCst)
    }

    fn run(&self, op: Op) -> io::Result<OpResult> {
        self.stepper.step(op).io()
    }

    fn unit(&self, op: Op) -> io::Result<()> {
        self.run(op).map(|_| ())
    }
}

struct ModelGuard<S: Step> {
    stepper: Arc<S>,
    path: PathBuf,
    handle: u32,
}

impl<S: Step> LockGuard for ModelGuard<S> {}

impl<S: Step> Drop for ModelGuard<S> {
    fn drop(&mut self) {
        let _ = self.stepper.step(Op::Unlock {
            path: self.path.clone(),
            handle: self.handle,
        });
    }
}

fn owned(path: &Path) -> PathBuf {
    path.to_path_buf()
}

impl<S: Step> Fs for ModelFs<S> {
    fn write_new(&self, path: &Path, bytes: &[u8], fp: &str) -> io::Result<()> {
        let (path, handle) = (owned(path), self.handle());
        let fp_of = |step: &str| format!("{fp}.{step}");
        self.unit(Op::Create {
            path: path.clone(),
            handle,
            fp: fp_of("create"),
        })?;
        let bytes = Blob::new(bytes.to_vec());
        self.unit(Op::Write {
            path: path.clone(),
            handle,
            bytes,
            fp: fp_of("write"),
        })?;
        self.unit(Op::Fsync {
            path,
            handle,
            fp: fp_of("fsync"),
        })
    }

    fn append(&self, path: &Path, bytes: &[u8], sync: bool, fp: &str) -> io::Result<()> {
        self.append_end(path, bytes, sync, fp).map(|_| ())
    }

    fn append_end(
        &self,
        path: &Path,
        bytes: &[u8],
        sync: bool,
        fp: &str,
    ) -> io::Result<Option<u64>> {
        let (path, handle) = (owned(path), self.handle());
        let appended = self.stepper.step(Op::Append {
            path: path.clone(),
            handle,
            bytes: Blob::new(bytes.to_vec()),
            sync,
            fp: format!("{fp}.write"),
        });
        if let OpResult::Failed(Failure::NoSpace { landed, end }) = appended {
            // The real seam's rule (`fs.rs`, `append_file`): what landed is cut back (truncate
            // and fsync) while nothing follows it, before the failure is reported.
            if self.cut_back {
                let now = self.identify(&path)?;
                if now.is_some_and(|id| id.len == end) {
                    self.truncate(&path, end - landed, &format!("{fp}.cutback"))?;
                }
            }
            return Err(crate::protocol::op::no_space());
        }
        let appended = appended.io()?;
        let OpResult::Identity(_, end) = appended else {
            return Err(io::Error::other(format!(
                "model: append returned {appended:?}"
            )));
        };
        if sync {
            self.unit(Op::AppendFsync {
                path,
                handle,
                fp: format!("{fp}.fsync"),
            })?;
        }
        Ok(Some(end))
    }

    fn sync_dir(&self, dir: &Path, fp: &str) -> io::Result<()> {
        self.unit(Op::SyncDir {
            dir: owned(dir),
            fp: fp.into(),
        })
    }

    fn hard_link(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        self.unit(Op::HardLink {
            from: owned(from),
            to: owned(to),
            fp: fp.into(),
        })
    }

    fn rename(&self, from: &Path, to: &Path, fp: &str) -> io::Result<()> {
        self.unit(Op::Rename {
            from: owned(from),
            to: owned(to),
            fp: fp.into(),
        })
    }

    fn remove_file(&self, path: &Path, fp: &str) -> io::Result<()> {
        self.unit(Op::Remove {
            path: owned(path),
            fp: fp.into(),
        })
    }

    fn create_dir_all(&self, path: &Path, fp: &str) -> io::Result<()> {
        self.unit(Op::CreateDirAll {
            path: owned(path),
            fp: fp.into(),
        })
    }

    fn truncate(&self, path: &Path, len: u64, fp: &str) -> io::Result<()> {
        self.unit(Op::Truncate {
            path: owned(path),
            len,
            fp: fp.into(),
        })
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.run(Op::Read { path: owned(path) })? {
            OpResult::Bytes(blob) => Ok(blob.bytes().to_vec()),
            other => Err(io::Error::other(format!("model: read returned {other:?}"))),
        }
    }

    /// The model's inode numbers are never reused, so the inode stands for the birth time too.
    /// (Reads stay unidentified: every reader of a model scenario looks once.)
    fn identify(&self, path: &Path) -> io::Result<Option<FileId>> {
        match self.run(Op::Identify { path: owned(path) })? {
            OpResult::Identity(ino, len) => Ok(Some(FileId {
                dev: 0,
                ino,
                len,
                ctime_ns: 0,
                born_ns: Some(i128::from(ino)),
            })),
            other => Err(io::Error::other(format!(
                "model: identify returned {other:?}"
            ))),
        }
    }

    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        match self.run(Op::ReadDir { dir: owned(dir) })? {
            OpResult::Names(names) => Ok(names),
            other => Err(io::Error::other(format!(
                "model: read_dir returned {other:?}"
            ))),
        }
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        match self.run(Op::Exists { path: owned(path) })? {
            OpResult::Flag(flag) => Ok(flag),
            other => Err(io::Error::other(format!(
                "model: exists returned {other:?}"
            ))),
        }
    }

    fn lock(
        &self,
        path: &Path,
        exclusive: bool,
        create: bool,
        wait: Option<std::time::Duration>,
    ) -> io::Result<Box<dyn LockGuard>> {
        let (path, handle) = (owned(path), self.handle());
        self.unit(Op::Lock {
            path: path.clone(),
            exclusive,
            create,
            handle,
            bounded: wait.is_some(),
        })?;
        Ok(Box::new(ModelGuard {
            stepper: self.stepper.clone(),
            path,
            handle,
        }))
    }
}
