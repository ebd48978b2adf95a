//! The semantics of each step on the model filesystem: what it changes, what it returns.
//!
//! Creating, linking, renaming and removing change live directory entries only; `fsync` of a
//! file makes its live bytes durable; `sync_dir` makes a directory's live entries durable;
//! `truncate` is the repair's truncate-and-fsync. A lock is taken only when
//! [`FsState::enabled`] allows it (the search never schedules a blocked process).

use crate::protocol::fs_state::{components, FsState, Node, Proc};
use crate::protocol::op::{Blob, Failure, Op, OpResult};
use std::collections::BTreeMap;
use std::sync::Arc;

impl FsState {
    /// Perform `op` for `proc`. The caller checked [`FsState::enabled`].
    pub fn apply(&mut self, proc: Proc, op: &Op) -> OpResult {
        match self.apply_inner(proc, op) {
            Ok(result) => result,
            Err(failure) => OpResult::Failed(failure),
        }
    }

    /// Perform `op`, an append, as a full disk does: half of its bytes land (in the live file,
    /// never fsynced) and the write fails with `ENOSPC` (the search's append fault). `None`
    /// when `op` is not an append of at least two bytes to a file that exists or can be made.
    pub fn apply_partial(&mut self, op: &Op) -> Option<OpResult> {
        let Op::Append { path, bytes, .. } = op else {
            return None;
        };
        let half = bytes.bytes().len() / 2;
        if half == 0 {
            return None;
        }
        let ino = match self.resolve(path) {
            Some(ino) => ino,
            None => {
                let (dir, name) = self.parent(path).ok()?;
                let ino = self.new_file();
                self.live_mut(dir).insert(name, ino);
                ino
            }
        };
        let (live, _) = self.file_mut(ino).ok()?;
        *live = Blob::new([live.bytes(), &bytes.bytes()[..half]].concat());
        let end = live.bytes().len() as u64;
        Some(OpResult::Failed(Failure::NoSpace {
            landed: half as u64,
            end,
        }))
    }

    fn apply_inner(&mut self, proc: Proc, op: &Op) -> Result<OpResult, Failure> {
        match op {
            Op::Begin => {}
            Op::Create { path, handle, .. } => {
                let (dir, name) = self.parent(path)?;
                if self.live_mut(dir).contains_key(&name) {
                    return Err(Failure::AlreadyExists);
                }
                let ino = self.new_file();
                self.live_mut(dir).insert(name, ino);
                self.handles.insert((proc, *handle), ino);
            }
            Op::Write { handle, bytes, .. } => {
                let ino = *self.handles.get(&(proc, *handle)).ok_or(Failure::Io)?;
                let (live, _) = self.file_mut(ino)?;
                *live = Blob::new([live.bytes(), bytes.bytes()].concat());
            }
            Op::Fsync { handle, .. } | Op::AppendFsync { handle, .. } => {
                let ino = self.handles.remove(&(proc, *handle)).ok_or(Failure::Io)?;
                let (live, durable) = self.file_mut(ino)?;
                *durable = live.clone();
            }
            Op::Append {
                path,
                handle,
                bytes,
                sync,
                ..
            } => {
                let ino = match self.resolve(path) {
                    Some(ino) => ino,
                    None => {
                        let (dir, name) = self.parent(path)?;
                        let ino = self.new_file();
                        self.live_mut(dir).insert(name, ino);
                        ino
                    }
                };
                let (live, _) = self.file_mut(ino)?;
                *live = Blob::new([live.bytes(), bytes.bytes()].concat());
                let end = live.bytes().len() as u64;
                if *sync {
                    self.handles.insert((proc, *handle), ino);
                }
                // Where the file ended just after these bytes (`Fs::append_end`).
                return Ok(OpResult::Identity(ino as u64, end));
            }
            Op::SyncDir { dir, .. } => {
                let ino = self.resolve(dir).ok_or(Failure::NotFound)?;
                match Arc::make_mut(&mut self.nodes[ino]) {
                    Node::Dir { live, durable } => *durable = live.clone(),
                    Node::File { .. } => return Err(Failure::Io),
                }
            }
            Op::HardLink { from, to, .. } => {
                let ino = self.resolve(from).ok_or(Failure::NotFound)?;
                self.file_mut(ino)?;
                let (dir, name) = self.parent(to)?;
                if self.live_mut(dir).contains_key(&name) {
                    return Err(Failure::AlreadyExists);
                }
                self.live_mut(dir).insert(name, ino);
            }
            Op::Rename { from, to, .. } => {
                let (from_dir, from_name) = self.parent(from)?;
                let ino = *self
                    .live_mut(from_dir)
                    .get(&from_name)
                    .ok_or(Failure::NotFound)?;
                self.file_mut(ino)?;
                let (to_dir, to_name) = self.parent(to)?;
                self.live_mut(from_dir).remove(&from_name);
                self.live_mut(to_dir).insert(to_name, ino);
            }
            Op::Remove { path, .. } => {
                let (dir, name) = self.parent(path)?;
                let ino = *self.live_mut(dir).get(&name).ok_or(Failure::NotFound)?;
                self.file_mut(ino)?;
                self.live_mut(dir).remove(&name);
            }
            Op::CreateDirAll { path, .. } => {
                let mut ino = 0;
                for name in components(path) {
                    ino = match self.entries(ino).ok_or(Failure::Io)?.get(name) {
                        Some(&child) => child,
                        None => {
                            let dir = Node::Dir {
                                live: BTreeMap::new(),
                                durable: BTreeMap::new(),
                            };
                            let child = self.new_node(dir);
                            self.live_mut(ino).insert(name.to_string(), child);
                            child
                        }
                    };
                }
                self.entries(ino).ok_or(Failure::Io)?;
            }
            Op::Truncate { path, len, .. } => {
                let ino = self.resolve(path).ok_or(Failure::NotFound)?;
                let (live, durable) = self.file_mut(ino)?;
                let keep = (*len as usize).min(live.bytes().len());
                *live = Blob::new(live.bytes()[..keep].to_vec());
                *durable = live.clone();
            }
            Op::Read { path } => {
                let ino = self.resolve(path).ok_or(Failure::NotFound)?;
                let (live, _) = self.file_mut(ino)?;
                return Ok(OpResult::Bytes(live.clone()));
            }
            Op::Identify { path } => {
                let ino = self.resolve(path).ok_or(Failure::NotFound)?;
                let (live, _) = self.file_mut(ino)?;
                let len = live.bytes().len() as u64;
                return Ok(OpResult::Identity(ino as u64, len));
            }
            Op::ReadDir { dir } => {
                let ino = self.resolve(dir).ok_or(Failure::NotFound)?;
                let names = self
                    .entries(ino)
                    .ok_or(Failure::Io)?
                    .keys()
                    .cloned()
                    .collect();
                return Ok(OpResult::Names(names));
            }
            Op::Exists { path } => return Ok(OpResult::Flag(self.resolve(path).is_some())),
            Op::Lock {
                path,
                exclusive,
                create,
                handle,
                bounded,
            } => {
                if *bounded && !self.lock_available(path, *exclusive) {
                    return Err(Failure::WouldBlock);
                }
                if self.resolve(path).is_none() {
                    if !create {
                        return Err(Failure::NotFound);
                    }
                    let (dir, name) = self.parent(path)?;
                    let ino = self.new_file();
                    self.live_mut(dir).insert(name, ino);
                }
                let state = self.locks.entry(path.clone()).or_default();
                if *exclusive {
                    state.exclusive = Some((proc, *handle));
                } else {
                    state.shared.insert((proc, *handle));
                }
            }
            Op::Unlock { path, handle } => {
                if let Some(state) = self.locks.get_mut(path) {
                    if state.exclusive == Some((proc, *handle)) {
                        state.exclusive = None;
                    }
                    state.shared.remove(&(proc, *handle));
                    if state.exclusive.is_none() && state.shared.is_empty() {
                        self.locks.remove(path);
                    }
                }
            }
        }
        Ok(OpResult::Done)
    }
}
