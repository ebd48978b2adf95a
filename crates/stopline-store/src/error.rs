//! The store's typed errors. Corruption is kept apart from I/O failure and from refusals, and
//! every error maps to one stable refusal code.

use std::io;
use stopline_core::{Refusal, RefusalCode};

/// What can go wrong in a store operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The request was refused (bad input, wrong state); nothing was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The control state cannot be trusted; the code says which part.
    #[error("{code}: {detail}")]
    Corrupt {
        /// control_wal_corrupt, control_epoch_unconfirmed or control_state_corrupt.
        code: RefusalCode,
        /// What is wrong.
        detail: String,
    },
    /// An I/O error that is not corruption.
    #[error("control_io: {context}: {source}")]
    Io {
        /// What the store was doing.
        context: String,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl StoreError {
    /// The stable refusal code of this error.
    pub fn code(&self) -> RefusalCode {
        match self {
            StoreError::Refused(refusal) => refusal.code,
            StoreError::Corrupt { code, .. } => *code,
            StoreError::Io { .. } => RefusalCode::ControlIo,
        }
    }

    /// This error as a refusal (code and message).
    pub fn to_refusal(&self) -> Refusal {
        match self {
            StoreError::Refused(refusal) => refusal.clone(),
            StoreError::Corrupt { code, detail } => Refusal::new(*code, detail.clone()),
            other => Refusal::new(other.code(), other.to_string()),
        }
    }

    /// True when this is a bounded lock another process still held at its bound (a process
    /// frozen while it holds the WAL lock, say): nothing was read or written under it.
    pub fn is_lock_busy(&self) -> bool {
        matches!(self, StoreError::Io { source, .. } if crate::fs::lock_busy(source))
    }

    /// True when a read did not finish in its bound: a lock still held at its bound (by a
    /// stopped process, say), or an entry that took longer than `fs::ENTRY_READ_BOUND` to read
    /// (docs/reference.md §5: both are faults of a read that has not finished, not of a corrupt state).
    pub fn is_unfinished_read(&self) -> bool {
        self.is_lock_busy()
            || matches!(self, StoreError::Io { source, .. } if source.kind() == io::ErrorKind::TimedOut)
    }

    /// A refusal with `code`.
    pub fn refused(code: RefusalCode, message: impl Into<String>) -> StoreError {
        StoreError::Refused(Refusal::new(code, message))
    }

    /// A corruption error.
    pub fn corrupt(code: RefusalCode, detail: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            code,
            detail: detail.into(),
        }
    }
}

/// Attach context to an I/O result.
pub trait IoContext<T> {
    /// Wrap an I/O error with what the store was doing.
    fn context(self, context: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Io {
            context: context(),
            source,
        })
    }
}
