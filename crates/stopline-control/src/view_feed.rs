//! What a view source's threads may do to the view they keep fresh: [`ViewFeed`], the narrow
//! side of the gateway's `ViewHolder` that its `local_source.rs`, `watch.rs` and a distributed
//! source (etcd's) see.
//!
//! This is a leaf on purpose: the holder owns its source (`view.rs` → a `ViewSource`), and the
//! source's threads feed the holder back through this trait, so neither module needs the other
//! to be written and the stop path's view code has no import cycle. A feed only ever asks for a
//! read or records a note; it never decides anything.

/// The view as its source's threads see it.
pub trait ViewFeed: Send + Sync {
    /// Re-read latches, WAL, epoch and state (something changed).
    fn refresh_fast(&self);
    /// Re-read everything, the census of unresolved operations included (something may have
    /// been missed).
    fn refresh_full(&self);
    /// Re-read what the operation journals gained (another process's journal changed): the
    /// census of unresolved operations, nothing else. A source that cannot tell reads all.
    fn refresh_journals(&self) {
        self.refresh_full();
    }
    /// Latches first: put latches that appeared in the local `latches/` into the view at once,
    /// before the locked read. Returns whether anything was added.
    fn add_appeared_latches(&self) -> bool;
    /// Staged latches (docs/reference.md §5, "The gate closes before the disk answers"): read
    /// what was written into the local `latches.staging/` and count each body that parses for
    /// admission at once. Returns true when a staged body's file went away, so a fresh read is
    /// due before it is forgotten. A source without a local staging directory does nothing.
    fn add_staged_latches(&self) -> bool {
        false
    }
    /// Forget staged bodies whose time passed; how long until the next one's passes, if any
    /// is staged (the watch wakes then).
    fn expire_staged(&self) -> Option<std::time::Duration> {
        None
    }
    /// Record that change notification degraded (`degraded`: only periodic reloads refresh
    /// now) or hiccupped; shown in status.
    fn note(&self, note: String, degraded: bool);
}
