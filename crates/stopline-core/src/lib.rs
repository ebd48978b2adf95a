//! The pure domain of stopline: what a stop *means*, with no I/O.
//!
//! Everything here is a value or a pure function: scopes and their matching rules, stop levels
//! and subject modes, the admission function, the paper's four-mode transition table, the epoch
//! map and its revocation rule, refusal codes, and the record shapes written by the store.
//!
//! This crate must never touch the filesystem, the network, the clock or a thread. Callers pass
//! in the time, the bytes and the canonicalized paths; that is what lets the model checker and
//! the fuzz targets drive exactly the code the binary runs.
#![deny(missing_docs)]

pub mod ack;
pub mod admission;
pub mod alert;
pub mod budget;
pub mod call;
pub mod epoch;
pub mod evidence;
pub mod failpoints;
pub mod fourmode;
pub mod latch;
pub mod minted;
pub mod ops;
pub mod phase;
pub mod policy;
pub mod refusal;
pub mod run_record;
pub mod scope;
pub mod staged;
pub mod state;
pub mod subject;
pub mod text;
pub mod time;
pub mod view;
pub mod wal;
pub mod wal_record;
pub mod worker;

pub use admission::{admit, Decision, Level, Mode, TaskClass};
pub use epoch::{AuthorityStatus, EpochMap, IndexedEpochMap};
pub use evidence::{BreakerKind, EvidenceRecord};
pub use latch::{ActiveLatch, LatchRecord, LatchRef};
pub use refusal::{Refusal, RefusalCode};
pub use scope::{Label, Name, Scope};
pub use state::{ControlState, StateRecord};
pub use subject::{Role, Subject};
pub use view::{CheckReceipt, ControlView};
