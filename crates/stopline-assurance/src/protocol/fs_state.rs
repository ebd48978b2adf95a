//! An in-memory filesystem with crash semantics: what survives a power cut, and what not.
//!
//! Inodes hold a file's *live* bytes (what reads see) and its *durable* bytes (what survives a
//! power cut): `fsync` of a file copies live to durable. Directories hold live entries and
//! durable entries: an entry becomes durable only at `sync_dir` of that directory — creating,
//! linking, renaming or removing changes only the live entries. A rename between two
//! directories is durable in each only once each is synced. A power cut rebuilds the tree from
//! the root along durable entries with durable bytes; everything else is lost. Hard links share
//! an inode. Advisory locks belong to (process, handle) and vanish with a crash.
//!
//! Nothing here knows the store's layout; `visibility.rs` and the crash images decide what the
//! names mean.

use crate::protocol::op::{Blob, Failure, Op};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A process number; the setup and restart phases use their own.
pub type Proc = u8;

#[derive(Clone)]
pub(crate) enum Node {
    File {
        live: Blob,
        durable: Blob,
    },
    Dir {
        live: BTreeMap<String, usize>,
        durable: BTreeMap<String, usize>,
    },
}

#[derive(Clone, Default, Hash)]
pub(crate) struct LockState {
    pub(crate) exclusive: Option<(Proc, u32)>,
    pub(crate) shared: BTreeSet<(Proc, u32)>,
}

/// The whole filesystem: inodes (0 is `/`), open handles, and advisory locks.
#[derive(Clone)]
pub struct FsState {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) handles: BTreeMap<(Proc, u32), usize>,
    pub(crate) locks: BTreeMap<PathBuf, LockState>,
}

impl Default for FsState {
    fn default() -> Self {
        FsState::new()
    }
}

/// The names along `path` (the model's paths are absolute UTF-8 without `.` or `..`).
pub(crate) fn components(path: &Path) -> impl Iterator<Item = &str> {
    path.to_str()
        .unwrap_or("")
        .split('/')
        .filter(|c| !c.is_empty())
}

impl FsState {
    /// An empty filesystem: only `/`.
    pub fn new() -> FsState {
        let root = Node::Dir {
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
        };
        FsState {
            nodes: vec![Arc::new(root)],
            handles: BTreeMap::new(),
            locks: BTreeMap::new(),
        }
    }

    pub(crate) fn entries(&self, ino: usize) -> Option<&BTreeMap<String, usize>> {
        match &*self.nodes[ino] {
            Node::Dir { live, .. } => Some(live),
            Node::File { .. } => None,
        }
    }

    /// The inode at `path` along live entries.
    pub fn resolve(&self, path: &Path) -> Option<usize> {
        components(path).try_fold(0, |ino, name| self.entries(ino)?.get(name).copied())
    }

    pub(crate) fn parent(&self, path: &Path) -> Result<(usize, String), Failure> {
        let name = path
            .file_name()
            .ok_or(Failure::Io)?
            .to_string_lossy()
            .into_owned();
        let dir = self
            .resolve(path.parent().ok_or(Failure::Io)?)
            .ok_or(Failure::NotFound)?;
        self.entries(dir).ok_or(Failure::Io)?;
        Ok((dir, name))
    }

    pub(crate) fn live_mut(&mut self, dir: usize) -> &mut BTreeMap<String, usize> {
        match Arc::make_mut(&mut self.nodes[dir]) {
            Node::Dir { live, .. } => live,
            Node::File { .. } => unreachable!("parent() checked that this is a directory"),
        }
    }

    pub(crate) fn new_node(&mut self, node: Node) -> usize {
        self.nodes.push(Arc::new(node));
        self.nodes.len() - 1
    }

    pub(crate) fn new_file(&mut self) -> usize {
        self.new_node(Node::File {
            live: Blob::empty(),
            durable: Blob::empty(),
        })
    }

    pub(crate) fn file_mut(&mut self, ino: usize) -> Result<(&mut Blob, &mut Blob), Failure> {
        match Arc::make_mut(&mut self.nodes[ino]) {
            Node::File { live, durable } => Ok((live, durable)),
            Node::Dir { .. } => Err(Failure::Io),
        }
    }

    /// Who holds the lock of `path`: `Some(true)` exclusive, `Some(false)` shared, for `proc`.
    pub fn holds_lock(&self, proc: Proc, path: &Path) -> Option<bool> {
        let state = self.locks.get(path)?;
        if state.exclusive.is_some_and(|(p, _)| p == proc) {
            return Some(true);
        }
        state
            .shared
            .iter()
            .any(|(p, _)| *p == proc)
            .then_some(false)
    }

    /// Whether `op` could run now: a lock held in a conflicting mode blocks it.
    pub fn enabled(&self, op: &Op) -> bool {
        let Op::Lock {
            path,
            exclusive,
            bounded,
            ..
        } = op
        else {
            return true;
        };
        *bounded || self.lock_available(path, *exclusive)
    }

    /// Whether a lock on `path` could be granted now.
    pub(crate) fn lock_available(&self, path: &Path, exclusive: bool) -> bool {
        match self.locks.get(path) {
            None => true,
            Some(state) => state.exclusive.is_none() && (!exclusive || state.shared.is_empty()),
        }
    }

    /// Make everything durable (the end of a scenario's setup: its initial state is on disk).
    pub fn persist_all(&mut self) {
        for node in &mut self.nodes {
            match Arc::make_mut(node) {
                Node::File { live, durable } => *durable = live.clone(),
                Node::Dir { live, durable } => *durable = live.clone(),
            }
        }
    }

    /// Forget open handles and locks: every process that had them is gone.
    pub fn drop_processes(&mut self) {
        self.handles.clear();
        self.locks.clear();
    }

    /// Forget the handles and locks of one process: it was killed, the kernel closed its files.
    pub fn drop_process(&mut self, proc: Proc) {
        self.handles.retain(|(p, _), _| *p != proc);
        for state in self.locks.values_mut() {
            if state.exclusive.is_some_and(|(p, _)| p == proc) {
                state.exclusive = None;
            }
            state.shared.retain(|(p, _)| *p != proc);
        }
        self.locks
            .retain(|_, s| s.exclusive.is_some() || !s.shared.is_empty());
    }

    /// Whether `path` is a directory (along live entries).
    pub fn is_dir(&self, path: &Path) -> bool {
        self.resolve(path)
            .is_some_and(|ino| matches!(*self.nodes[ino], Node::Dir { .. }))
    }

    /// The live bytes of the file at `path`, if there is one.
    pub fn live_bytes(&self, path: &Path) -> Option<Vec<u8>> {
        match &*self.nodes[self.resolve(path)?] {
            Node::File { live, .. } => Some(live.bytes().to_vec()),
            Node::Dir { .. } => None,
        }
    }

    /// Live names in `dir` (empty when it does not exist).
    pub fn live_names(&self, dir: &Path) -> Vec<String> {
        self.resolve(dir)
            .and_then(|ino| self.entries(ino))
            .map(|entries| entries.keys().cloned().collect())
            .unwrap_or_default()
    }
}
