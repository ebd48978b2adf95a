//! The distributed control plane: stopline's latches, epochs, WAL, state and gateway
//! registrations kept in etcd (docs/reference.md §10), selected by `--control etcd://HOST:PORT[,…][?prefix=/p]`.
//!
//! [`EtcdPlane`] implements `stopline_store::ControlPlane` with the local control directory's
//! names under the prefix and the same fail-closed reads; a latch, its WAL record and its epoch
//! advance commit in one etcd transaction. An engage that cannot reach etcd still contains its
//! own host through the local directory, so every view is the merge of both. [`EtcdSource`] is
//! the gateway's view source in etcd mode: a watch on the prefix, a permit that lapses without
//! word from etcd (closing noncritical work), and a leased registration with acknowledgements.
//!
//! The etcd client is async; this crate runs it on its own small runtime and offers synchronous
//! calls with deadlines ([`client`]), so no caller's runtime is ever blocked or needed.
#![deny(missing_docs)]

pub mod access;
pub mod breakers;
pub mod budget_record;
pub mod budgets;
pub mod client;
mod control_plane;
mod engage;
mod epoch;
pub mod gateways;
mod halts;
pub mod marks;
pub mod merge;
pub mod names;
pub mod plane;
pub mod read;
mod recovery;
mod register;
mod repair;
pub mod roles;
pub mod source;
pub mod url;
pub mod wiring;

pub use client::{EtcdClient, EtcdError};
/// The etcd client crate this backend speaks through (for tests and tools that need raw keys).
pub use etcd_client;
pub use plane::EtcdPlane;
pub use source::{EtcdSource, DEFAULT_PERMIT_TTL};
pub use url::EtcdTarget;
