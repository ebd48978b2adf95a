//! The handle on the operation registry, [`Ops`], which [`Store::ops`] hands out. Its verbs are
//! defined beside their concern (`ops.rs`, `ops_snapshot.rs`, `ops_archive.rs`); the type lives
//! here, in a leaf module, so those files name it without naming one another.

use crate::Store;

/// The operation registry of one control directory ([`Store::ops`]): a writer's journal, the
/// reads every gate and the census start from, and the journals' upkeep (snapshots, archive).
#[derive(Debug, Clone, Copy)]
pub struct Ops<'a> {
    pub(crate) store: &'a Store,
}

impl Store {
    /// The operation registry of this control directory.
    pub fn ops(&self) -> Ops<'_> {
        Ops { store: self }
    }
}
