//! Processes as functions of their histories: the real store code, replayed on demand.
//!
//! A process is deterministic given the results of its steps (its clock, ids and pid come from
//! a per-process [`ModelEnv`]). So "what does process `p` do next, after history `h`?" has one
//! answer, found by running the real store call on a fresh OS thread whose `Fs` answers every
//! step from `h` — checking that the process asks for exactly the recorded op, which would
//! expose any nondeterminism — and reports the first step beyond `h` (or the call's return).
//! Past that point every call of the thread fails with an I/O error, exactly as for a process
//! whose machine crashed; the thread runs out and its result is discarded. Answers are cached
//! by (process, history digest), so the search pays one replay per distinct process history.

use crate::protocol::hash::digest;
use crate::protocol::model_fs::{ModelFs, Step};
use crate::protocol::op::{Failure, Op, OpResult};
use crate::protocol::process::{Outcome, ProcSpec};
use crate::protocol::solo::ModelEnv;
use std::collections::HashMap;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use stopline_store::Store;

/// A process's history, shared between states (a persistent list).
#[derive(Clone, Default)]
pub struct History {
    head: Option<Arc<(History, Op, OpResult)>>,
    /// Digest of every (op, result) so far.
    pub sum: u128,
    /// Number of steps.
    pub len: usize,
}

impl History {
    /// This history and one more step.
    pub fn push(&self, op: Op, result: OpResult) -> History {
        let sum = digest(&(self.sum, &op, &result));
        History {
            head: Some(Arc::new((self.clone(), op, result))),
            sum,
            len: self.len + 1,
        }
    }

    /// The last step.
    pub fn last(&self) -> Option<(&Op, &OpResult)> {
        self.head.as_deref().map(|(_, op, result)| (op, result))
    }

    /// The steps, oldest first.
    pub fn steps(&self) -> Vec<(Op, OpResult)> {
        let mut out = Vec::with_capacity(self.len);
        let mut cursor = self.head.clone();
        while let Some(node) = cursor {
            out.push((node.1.clone(), node.2.clone()));
            cursor = node.0.head.clone();
        }
        out.reverse();
        out
    }
}

/// What a process does after a history.
#[derive(Clone, Debug)]
pub enum Next {
    /// It asks for this step.
    Op(Op),
    /// It returns.
    Done(Outcome),
    /// It asked for a different step than the history recorded (nondeterminism), or panicked.
    Broken(String),
}

struct Replay {
    steps: Vec<(Op, OpResult)>,
    position: Mutex<(usize, bool)>,
    report: Mutex<Option<Sender<Next>>>,
}

impl Replay {
    fn send(&self, next: Next) {
        if let Some(tx) = self
            .report
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = tx.send(next);
        }
    }
}

impl Step for Replay {
    fn step(&self, op: Op) -> OpResult {
        let mut position = self.position.lock().unwrap_or_else(PoisonError::into_inner);
        let (index, ended) = *position;
        if ended {
            return OpResult::Failed(Failure::Io);
        }
        match self.steps.get(index) {
            Some((recorded, result)) if *recorded == op => {
                position.0 += 1;
                result.clone()
            }
            Some((recorded, _)) => {
                position.1 = true;
                self.send(Next::Broken(format!(
                    "asked for {op:?} where {recorded:?} was recorded"
                )));
                OpResult::Failed(Failure::Io)
            }
            None => {
                position.1 = true;
                self.send(Next::Op(op));
                OpResult::Failed(Failure::Io)
            }
        }
    }
}

/// How to build a process's store.
#[derive(Clone)]
pub struct ProcessSetup {
    /// The control directory.
    pub home: std::path::PathBuf,
    /// The clock for the scenario's processes.
    pub now_ms: i64,
    /// The racing process that is a live gateway to the others (`Scenario::live_spend_writer`).
    pub live_spend_writer: Option<usize>,
    /// The racing stores' `[retention] spend_journal_bytes`, when the scenario sets it.
    pub spend_rewrite_bytes: Option<u64>,
    /// The racing stores' `Store::with_ops_snapshot_every`, when the scenario sets it.
    pub ops_snapshot_every: Option<u64>,
    /// A bug to plant in every process's store.
    #[cfg(feature = "planted-bugs")]
    pub planted: stopline_store::planted::PlantedBug,
}

/// The cache of process behaviour.
pub struct Oracle {
    specs: Vec<ProcSpec>,
    setup: ProcessSetup,
    cache: HashMap<(usize, u128), Next>,
    /// Replays run (cache misses).
    pub replays: u64,
}

impl Oracle {
    /// The oracle of `specs`.
    pub fn new(specs: Vec<ProcSpec>, setup: ProcessSetup) -> Oracle {
        Oracle {
            specs,
            setup,
            cache: HashMap::new(),
            replays: 0,
        }
    }

    /// What process `proc` does after `history`.
    pub fn next(&mut self, proc: usize, history: &History) -> Next {
        if history.len == 0 {
            return Next::Op(Op::Begin);
        }
        if let Some(next) = self.cache.get(&(proc, history.sum)) {
            return next.clone();
        }
        self.replays += 1;
        let next = self.replay(proc, history.steps());
        self.cache.insert((proc, history.sum), next.clone());
        next
    }

    fn replay(&self, proc: usize, steps: Vec<(Op, OpResult)>) -> Next {
        let (tx, rx) = channel();
        let replay = Arc::new(Replay {
            steps,
            position: Mutex::new((0, false)),
            report: Mutex::new(Some(tx)),
        });
        let spec = self.specs[proc].clone();
        let setup = self.setup.clone();
        let worker = replay.clone();
        let thread = std::thread::Builder::new()
            .name(format!("model-p{proc}"))
            .spawn(move || {
                #[allow(unused_mut)]
                let mut fs = ModelFs::new(worker.clone());
                #[cfg(feature = "planted-bugs")]
                if setup.planted == stopline_store::planted::PlantedBug::AppendNotCutBack {
                    fs = fs.without_cut_back();
                }
                let fs = Arc::new(fs);
                let tag = 0xa + proc as u8;
                let env = Arc::new(
                    ModelEnv::new(tag, setup.now_ms)
                        .with_live(setup.live_spend_writer.map(ModelEnv::racer_pid)),
                );
                let store = Store::with_io(&setup.home, fs, env)
                    .with_wal_checkpoint_every(crate::protocol::scenario::MODEL_CHECKPOINT_EVERY)
                    .with_evidence_segment_records(
                        crate::protocol::scenario::MODEL_EVIDENCE_SEGMENT_RECORDS,
                    )
                    .with_evidence_keep_segments(Some(
                        crate::protocol::scenario::MODEL_EVIDENCE_KEEP_SEGMENTS,
                    ))
                    .with_spend_compact_after(crate::protocol::scenario::MODEL_SPEND_COMPACT_AFTER);
                let store = match setup.spend_rewrite_bytes {
                    Some(bytes) => store.with_spend_rewrite_bytes(bytes),
                    None => store,
                };
                let store = match setup.ops_snapshot_every {
                    Some(bytes) => store.with_ops_snapshot_every(bytes),
                    None => store,
                };
                #[cfg(feature = "planted-bugs")]
                let store = store.with_planted_bug(setup.planted);
                if let OpResult::Failed(_) = worker.step(Op::Begin) {
                    return;
                }
                let outcome = spec.run(&store);
                worker.send(Next::Done(outcome));
            });
        let Ok(thread) = thread else {
            return Next::Broken("could not start a process thread".into());
        };
        let next = rx
            .recv()
            .unwrap_or_else(|_| Next::Broken("the process panicked".into()));
        let _ = thread.join();
        next
    }
}
