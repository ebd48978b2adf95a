//! One process alone on the model ([`Solo`]: the setup and restart phases), and the
//! deterministic clock, id source and pid every model process uses ([`ModelEnv`]).
//!
//! Ids are `<tag><counter>` in hex, with a tag per process, so two processes never mint the
//! same latch or temporary name and a process mints the same names in every interleaving.

use crate::protocol::fs_state::{FsState, Proc};
use crate::protocol::model_fs::Step;
use crate::protocol::op::{Failure, Op, OpResult};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use stopline_store::env::Env;

/// One process running alone: each step is applied at once.
pub struct Solo {
    proc: Proc,
    state: Mutex<FsState>,
}

impl Solo {
    /// `proc` alone on `state`.
    pub fn new(proc: Proc, state: FsState) -> Arc<Solo> {
        Arc::new(Solo {
            proc,
            state: Mutex::new(state),
        })
    }

    /// The filesystem as the process left it.
    pub fn state(&self) -> FsState {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Step for Solo {
    fn step(&self, op: Op) -> OpResult {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.enabled(&op) {
            // A process alone that waits for a lock would wait forever.
            return OpResult::Failed(Failure::Io);
        }
        state.apply(self.proc, &op)
    }
}

/// A deterministic clock, id source and pid for one process.
#[derive(Debug)]
pub struct ModelEnv {
    tag: u8,
    now_ms: i64,
    counter: AtomicU64,
    /// The pid of a process that is alive (with start time 1) for as long as this env's
    /// process runs: a live gateway of the race.
    live: Option<u32>,
    /// This process's pid, when not `4000 + tag`.
    pid: Option<u32>,
}

impl ModelEnv {
    /// Ids start with the hex digit `tag`; the clock stands at `now_ms`.
    pub fn new(tag: u8, now_ms: i64) -> ModelEnv {
        ModelEnv {
            tag: tag & 0xf,
            now_ms,
            counter: AtomicU64::new(0),
            live: None,
            pid: None,
        }
    }

    /// This env with process `pid` alive (start time 1) as far as a journal reader can tell.
    pub fn with_live(mut self, pid: Option<u32>) -> ModelEnv {
        self.live = pid;
        self
    }

    /// This env's process numbered `pid`.
    pub fn with_pid(mut self, pid: u32) -> ModelEnv {
        self.pid = Some(pid);
        self
    }

    /// The pid of the racing process `proc` (tag `0xa + proc`).
    pub fn racer_pid(proc: usize) -> u32 {
        4000 + u32::from(0xa + proc as u8)
    }
}

impl Env for ModelEnv {
    fn now_ms(&self) -> i64 {
        self.now_ms
    }
    fn random_hex(&self, bytes: usize) -> String {
        let count = self.counter.fetch_add(1, Ordering::SeqCst);
        let width = (bytes * 2).max(2) - 1;
        let text = format!("{:x}{count:0width$x}", self.tag);
        text[text.len() - bytes * 2..].to_string()
    }
    fn pid(&self) -> u32 {
        self.pid.unwrap_or(4000 + u32::from(self.tag))
    }
    /// No model process is alive as far as a journal reader can tell: after a crash its writer
    /// is gone, and during a race a gate judging its journal as dead is the stricter reading.
    /// (Reading the real `/proc` would make the search depend on the machine it runs on.) But
    /// the scenario's live writer, if it names one, during the race (`with_live`).
    fn process_start_time(&self, pid: u32) -> Option<u64> {
        (self.live == Some(pid)).then_some(1)
    }
}
