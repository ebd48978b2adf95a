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
}

impl ModelEnv {
    /// Ids start with the hex digit `tag`; the clock stands at `now_ms`.
    pub fn new(tag: u8, now_ms: i64) -> ModelEnv {
        ModelEnv {
            tag: tag & 0xf,
            now_ms,
            counter: AtomicU64::new(0),
        }
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
        4000 + u32::from(self.tag)
    }
    /// No model process is alive as far as a journal reader can tell: after a crash its writer
    /// is gone, and during a race a gate judging its journal as dead is the stricter reading.
    /// (Reading the real `/proc` would make the search depend on the machine it runs on.)
    fn process_start_time(&self, _pid: u32) -> Option<u64> {
        None
    }
}
