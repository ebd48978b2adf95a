//! Hash-chained JSON-lines logs on disk: the breakglass WAL and the evidence log.
//!
//! The line format and verification live in `stopline_core::wal`; this file only reads and
//! appends under a lock. Appends hold an exclusive lock on the log file, readers a shared one,
//! so a torn line can only be a crash's remnant. An append builds every line from the verified
//! log it just read, writes them in one `write`, and fsyncs once.

use crate::error::{IoContext, StoreError};
use crate::fs::LockGuard;
use crate::Store;
use serde_json::{Map, Value};
use std::io;
use std::path::Path;
use stopline_core::wal::{self, WalLog};
use stopline_core::wal_record::WalRecord;
use stopline_core::RefusalCode;

impl Store {
    /// Take the exclusive append lock of a chained log (creating the file).
    ///
    /// When this creates the log, its directory is fsynced before anything is appended, so a
    /// power cut cannot lose the whole file's entry after records were fsynced into it (found by
    /// the model checker).
    pub(crate) fn lock_log_exclusive(&self, path: &Path) -> Result<Box<dyn LockGuard>, StoreError> {
        self.lock_log_exclusive_within(path, self.lock_wait)
    }

    /// As [`Store::lock_log_exclusive`], waiting at most `wait` for another holder (`None`:
    /// for as long as it holds the lock). A lock still held at the bound is an `Io` error whose
    /// source is `WouldBlock` ([`crate::fs::lock_busy`]).
    pub(crate) fn lock_log_exclusive_within(
        &self,
        path: &Path,
        wait: Option<std::time::Duration>,
    ) -> Result<Box<dyn LockGuard>, StoreError> {
        let existed = self
            .fs
            .exists(path)
            .context(|| format!("checking {}", path.display()))?;
        let guard = self
            .fs
            .lock(path, true, true, wait)
            .context(|| format!("locking {}", path.display()))?;
        if !existed {
            let dir = path.parent().unwrap_or(Path::new("/"));
            self.fs
                .sync_dir(dir, "log.create.dirsync")
                .context(|| format!("syncing {}", dir.display()))?;
        }
        Ok(guard)
    }

    /// Take a shared lock on a chained log; `None` when the log does not exist.
    pub(crate) fn lock_log_shared(
        &self,
        path: &Path,
    ) -> Result<Option<Box<dyn LockGuard>>, StoreError> {
        self.lock_log_shared_within(path, self.lock_wait)
    }

    /// As [`Store::lock_log_shared`], waiting at most `wait` for a writer that holds the lock.
    pub(crate) fn lock_log_shared_within(
        &self,
        path: &Path,
        wait: Option<std::time::Duration>,
    ) -> Result<Option<Box<dyn LockGuard>>, StoreError> {
        match self.fs.lock(path, false, false, wait) {
            Ok(guard) => Ok(Some(guard)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).context(|| format!("locking {}", path.display())),
        }
    }

    /// Read and verify a chained log (the caller holds a lock). A missing file is empty.
    pub(crate) fn read_log(&self, path: &Path, corrupt: RefusalCode) -> Result<WalLog, StoreError> {
        let bytes = self.read_optional(path)?.unwrap_or_default();
        wal::verify(&bytes)
            .map_err(|fault| StoreError::corrupt(corrupt, format!("{}: {fault}", path.display())))
    }

    /// Append `records` after `log`, in one write and one fsync. The caller holds the
    /// exclusive lock and passes the log it read under that lock. Returns the new log.
    pub(crate) fn append_log(
        &self,
        path: &Path,
        log: &WalLog,
        records: Vec<WalRecord>,
        fp: &str,
    ) -> Result<WalLog, StoreError> {
        let ts = crate::env::rfc3339(self.env.now_ms());
        let mut next = log.clone();
        let mut bytes = Vec::new();
        for record in records {
            let (seq, line) = wal::record_line(next.last(), &ts, &record);
            let entry = wal::record_entry(seq, &line, record);
            bytes.extend_from_slice(&line);
            bytes.push(b'\n');
            next.entries.push(entry);
        }
        self.fs
            .append(path, &bytes, true, fp)
            .context(|| format!("appending to {}", path.display()))?;
        let last_len = bytes[..bytes.len().saturating_sub(1)]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(bytes.len(), |p| bytes.len() - p - 1);
        next.end = log
            .end
            .filter(|_| !bytes.is_empty())
            .map(|(len, _)| (len + bytes.len() as u64, last_len as u64));
        if path == self.layout.wal() {
            self.maybe_checkpoint_wal(&next);
        }
        Ok(next)
    }

    /// Read a file, `None` when it does not exist.
    pub(crate) fn read_optional(&self, path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
        match self.fs.read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).context(|| format!("reading {}", path.display())),
        }
    }
}

/// Build a JSON field map from pairs.
pub fn fields(pairs: impl IntoIterator<Item = (&'static str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
