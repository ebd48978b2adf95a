//! The control plane's verbs, shared by the CLI and the gateway.
//!
//! `engage`, `check`, `status`, `disengage`, `drain`, recovery and repair, operation
//! reconciliation and token minting live here as functions that take a [`Context`] and return
//! typed receipts. The binary only parses arguments and prints; the gateway calls the same
//! functions, so every surface judges a stop the same way.
//!
//! Recovery, drain, repair and reconciliation are not here: they are `stopline-owner`'s, behind
//! its owner console, and `stopline run`'s supervisor loop is `stopline-run`'s, so the gateway
//! and the MCP proxy, which depend on this crate, link neither (docs/reference.md, "The owner
//! console"). `view_source` and `view_feed` are what a gateway's view is read from and fed
//! through, here so the etcd backend and the gateway share them without depending on each other.
#![deny(missing_docs)]

pub mod acks;
pub mod check;
pub mod config;
pub mod context;
pub mod engage;
pub mod evidence;
pub mod fleet;
pub mod home;
pub mod live;
pub mod open;
pub mod ops;
pub mod reach;
pub mod receipts;
pub mod reload;
pub mod status;
pub mod tokens;
pub mod trip;
pub mod view_feed;
pub mod view_source;

pub use context::Context;
