//! A state of the search: the filesystem, each process's history and result, and the ghost
//! facts the properties need (who returned before whom, which latches a process published,
//! what a recovery's last rescan listed, which halts a disengage recorded as lifted).

use crate::protocol::fs_image::View;
use crate::protocol::fs_state::FsState;
use crate::protocol::hash::digest;
use crate::protocol::oracle::History;
use crate::protocol::process::Outcome;
use std::collections::{BTreeMap, BTreeSet};
use stopline_core::Level;

/// One process in a state.
#[derive(Clone, Default)]
pub struct ProcState {
    /// Its steps so far.
    pub history: History,
    /// Its result, once it returned.
    pub outcome: Option<Outcome>,
}

/// Facts about the run so far that no file records.
#[derive(Clone, Default, Hash)]
pub struct Ghost {
    /// Latch files the racing engages published: file → (scope, level).
    pub published: BTreeMap<String, (String, Level)>,
    /// Processes in the order they returned.
    pub returned: Vec<usize>,
    /// For each process that began: how many processes had returned by then.
    pub began_after: BTreeMap<usize, usize>,
    /// Each recovery's last listing of `latches/`.
    pub rescans: BTreeMap<usize, Vec<String>>,
    /// Latch files named by a `disengaged` record some disengage appended to the WAL.
    pub disengaged: BTreeSet<String>,
    /// Latch files named by a `recovery_intent` a racing plan appended to the WAL.
    pub planned: BTreeSet<String>,
    /// `<run>/<agent>` of every supervised worker that may be running now: from the moment its
    /// supervisor's `begin_run` made its last step (the agent is started right after) until its
    /// supervisor began writing its `exited` registration. A killed supervisor's agent runs on.
    pub live_workers: BTreeSet<String>,
    /// For each reach that began: the workers live when it began.
    pub live_at_begin: BTreeMap<usize, BTreeSet<String>>,
    /// Appends the search has failed so far on this path (a full disk: part of the bytes
    /// landed, then `ENOSPC`), at most [`crate::protocol::Scenario::append_faults`].
    pub append_faults: u8,
}

/// A state of the search.
#[derive(Clone)]
pub struct State {
    /// The filesystem.
    pub fs: FsState,
    /// The processes.
    pub procs: Vec<ProcState>,
    /// The ghost facts (shared until changed).
    pub ghost: std::sync::Arc<Ghost>,
}

impl State {
    /// The start of a scenario.
    pub fn initial(fs: FsState, procs: usize) -> State {
        State {
            fs,
            procs: vec![ProcState::default(); procs],
            ghost: std::sync::Arc::default(),
        }
    }

    /// The ghost facts, to change.
    pub fn ghost_mut(&mut self) -> &mut Ghost {
        std::sync::Arc::make_mut(&mut self.ghost)
    }

    /// Identity for the visited set: two states with equal keys have equal futures.
    pub fn key(&self) -> u128 {
        // A process that returned (or was killed) has no future: only its outcome matters.
        let procs: Vec<(u128, &Option<Outcome>)> = self
            .procs
            .iter()
            .map(|p| match &p.outcome {
                Some(_) => (0, &p.outcome),
                None => (p.history.sum, &p.outcome),
            })
            .collect();
        digest(&(self.fs.digest(View::Exact, None), procs, &self.ghost))
    }

    /// The returned processes, in order, with their outcomes.
    pub fn returned(&self, upto: usize) -> Vec<(usize, &Outcome)> {
        self.ghost.returned[..upto]
            .iter()
            .filter_map(|&p| self.procs[p].outcome.as_ref().map(|o| (p, o)))
            .collect()
    }

    /// True when every process has returned.
    pub fn finished(&self) -> bool {
        self.procs.iter().all(|p| p.outcome.is_some())
    }
}

/// Latch files named (field `latches`) by records of `kind` in appended WAL bytes.
pub fn named_in_wal(bytes: &[u8], kind: &str) -> Vec<String> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
        .filter(|v| v.get("kind").and_then(|k| k.as_str()) == Some(kind))
        .flat_map(|v| {
            v.get("latches")
                .and_then(|l| l.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(String::from))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}
