//! `stopline model-check` (SPEC §9): the four-mode machine, and the real protocol explored
//! exhaustively with a crash at every step.
//!
//! **Part 1** ([`fourmode`]) enumerates the paper's 20 state/input pairs through
//! `stopline_core::fourmode::transition` and `stopline_core::admit` — the functions the binary
//! uses — and checks P1–P3, the admission vectors, reachability and the recovery edges.
//!
//! **Part 2** ([`protocol`]) runs the store's real protocol code — `Store::engage`,
//! `recover_apply`, `disengage`, `drain`, and a gateway's `load_view` + `ControlView::decide` —
//! as concurrent processes over a model filesystem with crash semantics, and explores every
//! interleaving of their filesystem steps, crashing the machine after every step.
//!
//! # How the real code is stepped
//!
//! Every byte the store touches goes through `stopline_store::fs::Fs`; the model implements it
//! ([`protocol::model_fs`]) and turns each call into atomic steps named by the store's failpoint
//! strings. A process is a real store call on its own OS thread. Because the store code is
//! deterministic given the results of its steps (clock, ids and pid come from a per-process
//! `Env`), a process is a function from its *history* (the steps it took and their results) to
//! its next step. The search therefore never holds threads across interleavings: to learn what
//! process P does after history h, it runs P's real call on a fresh thread whose `Fs` answers
//! from h — asserting that P asks for exactly the recorded steps — and reports the first step
//! beyond h ([`protocol::oracle`]); past that point every call fails with an I/O error, as for
//! a crashed machine. Answers are memoized per (process, history). This is the replay of the
//! brief ("re-run from the initial state with a chosen prefix"), done per process rather than
//! per schedule, so a schedule costs no thread handoffs and a state reached by two schedules is
//! explored once (a visited set over filesystem + histories + ghost facts).
//!
//! # The reduction, and why it is sound
//!
//! Only steps another process could observe are scheduling points. A step is *invisible*
//! ([`protocol::visibility`]) when it is (a) a read of something no other process can change
//! at that moment: the WAL and `epoch.json` while the reader holds the WAL lock (every change to
//! them is made under the exclusive lock — checked at every explored step), `reserve.bin`,
//! `keys/` and `ops/` (no scenario process changes them — checked), an existing directory
//! (the store never removes or renames a directory — checked); or (b) any step on a private
//! name: a `.<file>.tmp-<id>` in the home or an entry of `latches.staging/`, which no other
//! process and no restart ever lists or reads (they become visible only through a later
//! rename or link, which is a scheduling point). Everything else is a scheduling point: every
//! step on `latches/` and `breakglass.cleared/` (entries, contents, listings), on `state.json`
//! (written outside the lock by a recovery's last step), every change to the WAL or
//! `epoch.json`, every lock and unlock, every directory fsync, and each process's start.
//!
//! An invisible step commutes with every step of every other process: a read of an object
//! that cannot change meanwhile returns the same bytes wherever it is placed, and a step on a
//! private name changes only that name, which nobody else reads. So any interleaving equals
//! (in every observation the properties make) one in which each invisible step runs right after
//! its process's previous step — which is how the search runs them, without branching. Crashes
//! are not reduced: every state the search enters, after every step visible or not, is crashed
//! four ways (power cut, kill, two torn-write variants) and restarted. A crash that in some
//! other interleaving falls between two invisible steps of one process while other processes
//! advanced leaves the same disk up to private leftovers (reads change nothing; a private file
//! is never read after a crash), and the crash images are compared with private names hidden
//! for exactly that reason. Returning is also not a choice: a process that is about to return
//! returns at once, which only makes more gates "start after" it, so it strengthens the checks.
//!
//! # What is not modelled
//!
//! I/O errors other than crashes (a failing fsync, a full disk); a crash during the restart
//! phase's own repair; more than one racing process of each kind per scenario; process kill of
//! a subset of processes (a crash stops all of them).
#![deny(missing_docs)]

pub mod fourmode;
pub mod model_check;
pub mod protocol;
