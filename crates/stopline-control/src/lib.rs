//! The control plane's verbs, shared by the CLI and the gateway.
//!
//! `engage`, `check`, `status`, `disengage`, `drain`, recovery and repair, operation
//! reconciliation and token minting live here as functions that take a [`Context`] and return
//! typed receipts. The binary only parses arguments and prints; the gateway calls the same
//! functions, so every surface judges a stop the same way.
//!
//! Recovery, drain, repair and reconciliation are reachable only through [`console::OwnerConsole`],
//! which can only be built by proving the three owner-console predicates in this process.
#![deny(missing_docs)]

pub mod acks;
pub mod bench;
pub mod check;
pub mod config;
pub mod console;
pub mod context;
pub mod engage;
pub mod evidence;
pub mod home;
pub mod live;
pub mod open;
pub mod ops;
pub mod owner;
pub mod reach;
pub mod receipts;
pub mod reload;
pub mod run;
pub mod status;
pub mod tokens;
pub mod trip;

pub use context::Context;
