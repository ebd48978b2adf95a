//! The write-ahead log `wal.jsonl` ([`Store::wal`]): what a verb outside the store may read of
//! it. Appends happen only inside the store's protocol steps (engage, advance, recover,
//! disengage, drain), under the WAL's lock; the hot path reads from the last checkpoint
//! ([`checkpoint`]).

use crate::Store;

pub mod checkpoint;

/// The WAL of one control directory ([`Store::wal`]).
#[derive(Debug, Clone, Copy)]
pub struct Wal<'a> {
    store: &'a Store,
}

impl Store {
    /// The WAL of this control directory.
    pub fn wal(&self) -> Wal<'_> {
        Wal { store: self }
    }
}
