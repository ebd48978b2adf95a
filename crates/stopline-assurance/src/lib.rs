//! `stopline model-check` (docs/reference.md §11): the four-mode machine, and the real protocol explored
//! exhaustively with a crash at every step.
//!
//! The crate also holds `stopline conformance` ([`conformance`]): the boundary battery run
//! against the binary itself, as child processes in throwaway homes.
//!
//! **Part 1** ([`fourmode`]) enumerates the paper's 20 state/input pairs through
//! `stopline_core::fourmode::transition` and `stopline_core::admit` — the functions the binary
//! uses — and checks P1–P3, the admission vectors, reachability and the recovery edges.
//!
//! **Part 2** ([`protocol`]) runs the store's real protocol code — `Store::engage`,
//! `recover_apply`, `disengage`, `drain`, and a gateway's `load_view` + `ControlView::decide` —
//! as concurrent processes over a model filesystem with crash semantics, explores every
//! interleaving of their filesystem steps, crashes the machine after every step, and kills
//! each process alone at every scheduling point while the others run on.
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
//! a crashed machine. Answers are memoized per (process, history). This is replay ("re-run from
//! the initial state with a chosen prefix"), done per process rather than per schedule, so a
//! schedule costs no thread handoffs, and a state reached by two schedules is explored once (a
//! visited set over the filesystem, the histories of running processes, the outcomes of
//! finished ones, and the ghost facts the properties need).
//!
//! # The reduction, and why it is sound
//!
//! Every path follows one *discipline* per scenario ([`protocol::visibility`]): *quiet* (no
//! racing process changes it: `reserve.bin`, `keys/`, `ops/`, and `breakglass.cleared/` and
//! `state.json` when no recovery or drain races), *guarded* (changed only under the WAL's
//! exclusive lock, read under a WAL lock: the WAL, `epoch.json`, and `state.json` when only a
//! drain writes it), *private* (a `.<file>.tmp-<id>` in the home or an entry of
//! `latches.staging/`: only its writer touches it, and nobody reads it after a crash; in the
//! `staged-gate` scenario, whose gate reads it, `latches.staging/` is shared), or
//! *shared* (`latches/`, and the cleared folders and `state.json` when a recovery races — its
//! last step writes `state.json` outside the lock). A step is *invisible* — it runs without a
//! scheduling decision — when it reads a quiet path, reads a guarded path while holding the WAL
//! lock, creates a directory that exists (directories are never removed), or touches a private
//! path. Everything else is a scheduling point: every step on `latches/`, every change of the
//! WAL or `epoch.json`, every lock and unlock, every directory fsync, and a gate's start. The
//! disciplines are checked at every explored step; a step that breaks one stops the search
//! (`broken`), so a protocol change cannot silently hide interleavings.
//!
//! An invisible step commutes with every step of every other process: a read of an object
//! nobody can change meanwhile returns the same bytes wherever it is placed, and a step on a
//! private name changes only that name. So any interleaving equals — in every observation the
//! properties make — one in which each invisible step runs right after its process's previous
//! step, which is how the search runs them. Returning is not a choice either: a process about to
//! return returns at once, which only makes more gates "start after" it (more obligations).
//!
//! Crashes are not reduced. Every state the search enters is crashed four ways (power cut,
//! kill of everything, two torn-write variants) and restarted ([`protocol::restart`]); after a
//! step that changes no file, entry or returned fact the four images are those of the state
//! before, already judged there. A crash that in some other interleaving falls between two
//! invisible steps of one process leaves the same disk up to private leftovers (a read changes
//! nothing, a private file is never read after a crash), which is why crash images are compared
//! with private names hidden. A single process killed while the machine keeps running is a
//! branch at every scheduling point (not for gates, whose kill only drops reads, nor for a
//! process about to return); a kill commutes with the forced steps of others and with its own
//! invisible steps, so nothing is lost by not trying it between them.
//!
//! # What is not modelled
//!
//! I/O errors other than crashes (a failing fsync, a full disk); a crash during the restart
//! phase's own repair; more than one racing process of each kind per scenario (three processes
//! per scenario: two racers and a gate); writes torn other than at half the unsynced tail or at
//! its first newline.
#![deny(missing_docs)]

pub mod conformance;
pub mod fourmode;
pub mod model_check;
pub mod protocol;
