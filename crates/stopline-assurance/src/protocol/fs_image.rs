//! Views of the model filesystem: the digests that identify states and crash images, and the
//! disk a power cut leaves behind.
//!
//! A digest walks the tree from `/` and numbers inodes in the order it meets them, so it does
//! not depend on inode numbering (which differs between schedules). [`View`] chooses what it
//! covers: everything (the search's identity of a state), what reads see (after a kill), or what
//! survives a power cut. [`Private`] leaves out names no reader ever observes, so two crash
//! images that differ only in a writer's leftovers are restarted once.

use crate::protocol::fs_state::{FsState, Node};
use crate::protocol::hash::Hash128;
use crate::protocol::op::Blob;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

/// Which side of the state a digest covers.
#[derive(Clone, Copy)]
pub enum View<'a> {
    /// Everything: live and durable, handles and locks (the search's state identity).
    Exact,
    /// What reads see (the disk after every process is killed).
    Live,
    /// The disk after a power cut: durable entries, and each file's bytes as `cut` keeps them.
    Cut(&'a dyn Fn(&Blob, &Blob) -> Option<usize>),
}

impl View<'_> {
    /// An identity of a file's bytes under this view.
    fn bytes(&self, live: &Blob, durable: &Blob) -> (u64, u64, usize) {
        match self {
            View::Exact => (live.sum(), durable.sum(), usize::MAX),
            View::Live => (live.sum(), 0, usize::MAX),
            View::Cut(cut) => match cut(live, durable) {
                Some(keep) => (durable.sum(), live.sum(), keep),
                None => (durable.sum(), 0, usize::MAX),
            },
        }
    }
}

/// The names no reader observes: `.<file>.tmp-<id>` in the home, and all of the staging folder.
#[derive(Debug, Clone)]
pub struct Private {
    /// The home's name under `/`.
    pub home: String,
    /// The staging folder's name in the home.
    pub staging: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Root,
    Home,
    Staging,
    Other,
    Hidden,
}

impl Kind {
    fn child(self, name: &str, private: Option<&Private>) -> Kind {
        let Some(p) = private else { return Kind::Other };
        match self {
            Kind::Root if name == p.home => Kind::Home,
            Kind::Home if name == p.staging => Kind::Staging,
            Kind::Home if name.starts_with('.') && name.contains(".tmp-") => Kind::Hidden,
            Kind::Staging => Kind::Hidden,
            _ => Kind::Other,
        }
    }
}

impl FsState {
    /// The state after a power cut: the tree along durable entries, each file's bytes chosen
    /// by `bytes(live, durable)` (normally the durable bytes; a torn write keeps more).
    pub fn power_cut(&self, bytes: &dyn Fn(&Blob, &Blob) -> Blob) -> FsState {
        self.cut(bytes, None)
    }

    /// The state after a power cut in which the live entries that `ahead` names reached the
    /// disk with their live bytes, renamed after the last fsync of their directory and never
    /// fsynced themselves (ext4 writes a file renamed over another back with the rename), while
    /// every other file keeps only its durable bytes. `None` when no such entry differs from
    /// what the plain power cut keeps.
    pub fn power_cut_ahead(&self, ahead: &dyn Fn(&str) -> bool) -> Option<FsState> {
        let differs = self.nodes.iter().any(|node| match &**node {
            Node::Dir { live, durable } => live.iter().any(|(name, &child)| {
                ahead(name)
                    && (durable.get(name) != Some(&child)
                        || matches!(&*self.nodes[child], Node::File { live, durable } if live != durable))
            }),
            Node::File { .. } => false,
        });
        if !differs {
            return None;
        }
        Some(self.cut(&|_, durable| durable.clone(), Some(ahead)))
    }

    /// The tree rebuilt from the root along durable entries (and, with `ahead`, the live entries
    /// it names), each file's bytes chosen by `bytes(live, durable)`.
    fn cut(
        &self,
        bytes: &dyn Fn(&Blob, &Blob) -> Blob,
        ahead: Option<&dyn Fn(&str) -> bool>,
    ) -> FsState {
        let mut out = FsState {
            nodes: Vec::new(),
            handles: BTreeMap::new(),
            locks: BTreeMap::new(),
        };
        let mut map: HashMap<usize, usize> = HashMap::new();
        self.rebuild(0, &mut out, &mut map, bytes, ahead);
        out
    }

    fn rebuild(
        &self,
        ino: usize,
        out: &mut FsState,
        map: &mut HashMap<usize, usize>,
        bytes: &dyn Fn(&Blob, &Blob) -> Blob,
        ahead: Option<&dyn Fn(&str) -> bool>,
    ) -> usize {
        if let Some(&done) = map.get(&ino) {
            return done;
        }
        let slot = out.new_node(Node::Dir {
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
        });
        map.insert(ino, slot);
        out.nodes[slot] = Arc::new(match &*self.nodes[ino] {
            Node::File { live, durable } => {
                let kept = bytes(live, durable);
                Node::File {
                    live: kept.clone(),
                    durable: kept,
                }
            }
            Node::Dir { durable, live } => {
                let mut entries: BTreeMap<String, usize> = durable
                    .iter()
                    .filter(|(name, _)| !ahead.is_some_and(|ahead| ahead(name)))
                    .map(|(name, &child)| {
                        (name.clone(), self.rebuild(child, out, map, bytes, ahead))
                    })
                    .collect();
                if let Some(ahead) = ahead {
                    // The entries ahead of their directory's fsync, as they are live, with
                    // their live bytes.
                    for (name, &child) in live.iter().filter(|(name, _)| ahead(name)) {
                        let slot = match &*self.nodes[child] {
                            Node::File { live, .. } => out.new_node(Node::File {
                                live: live.clone(),
                                durable: live.clone(),
                            }),
                            Node::Dir { .. } => self.rebuild(child, out, map, bytes, None),
                        };
                        entries.insert(name.clone(), slot);
                    }
                }
                Node::Dir {
                    live: entries.clone(),
                    durable: entries,
                }
            }
        });
        slot
    }

    /// A digest of the state as `view` sees it, independent of inode numbering. With
    /// `private`, entries no reader ever observes are left out.
    pub fn digest(&self, view: View<'_>, private: Option<&Private>) -> u128 {
        self.digests(&[view], private)[0]
    }

    /// [`FsState::digest`] for several views in one walk. They must all walk the same
    /// entries: all `Cut`, or a single `Exact` or `Live`.
    pub fn digests(&self, views: &[View<'_>], private: Option<&Private>) -> Vec<u128> {
        let mut hs = vec![Hash128::default(); views.len()];
        let each = |hs: &mut Vec<Hash128>, value: &dyn Fn(&mut Hash128)| {
            hs.iter_mut().for_each(value);
        };
        let mut ids = vec![u32::MAX; self.nodes.len()];
        let mut next_id = 1u32;
        ids[0] = 0;
        let mut stack: Vec<(usize, Kind)> = vec![(0, Kind::Root)];
        while let Some((ino, kind)) = stack.pop() {
            each(&mut hs, &|h| ids[ino].hash(h));
            match &*self.nodes[ino] {
                Node::File { live, durable } => {
                    for (h, view) in hs.iter_mut().zip(views) {
                        0u8.hash(h);
                        view.bytes(live, durable).hash(h);
                    }
                }
                Node::Dir { live, durable } => {
                    each(&mut hs, &|h| 1u8.hash(h));
                    let (first, second) = match views[0] {
                        View::Exact => (Some(live), Some(durable)),
                        View::Live => (Some(live), None),
                        View::Cut(_) => (Some(durable), None),
                    };
                    for (tag, entries) in [(2u8, first), (3u8, second)] {
                        let Some(entries) = entries else { continue };
                        each(&mut hs, &|h| tag.hash(h));
                        for (name, &child) in entries {
                            let child_kind = kind.child(name, private);
                            if child_kind == Kind::Hidden {
                                continue;
                            }
                            if ids[child] == u32::MAX {
                                ids[child] = next_id;
                                next_id += 1;
                                stack.push((child, child_kind));
                            }
                            let id = ids[child];
                            each(&mut hs, &|h| (name, id).hash(h));
                        }
                    }
                }
            }
        }
        if let View::Exact = views[0] {
            let h = &mut hs[0];
            for (key, &ino) in &self.handles {
                if ids[ino] == u32::MAX {
                    ids[ino] = next_id;
                    next_id += 1;
                    if let Node::File { live, durable } = &*self.nodes[ino] {
                        (live.sum(), durable.sum()).hash(h);
                    }
                }
                (key, ids[ino]).hash(h);
            }
            self.locks.hash(h);
        }
        hs.iter().map(Hash128::finish128).collect()
    }
}
