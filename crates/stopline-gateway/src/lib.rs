//! The enforcement point agents must pass (`stopline serve`, docs/reference.md §8).
//!
//! An HTTP API on tokio/axum decides every call from an in-memory view of latches and epochs
//! ([`view`]), refreshed by inotify and a periodic full reload (or, with a distributed backend,
//! by that backend's watch: [`ViewSource`]), closed when it cannot be refreshed. The [`Governor`]
//! is the one admission path: authentication, class, view decision, queueing, budgets,
//! breakers, the prepared operation, the re-check at dispatch. The gateway
//! registers itself in `servers/` and acknowledges every new latch on its own thread ([`acks`]).
//! It never reaches the recovery path: recover and drain are refused here unconditionally, and
//! the crate is built without the owner console (`stopline-owner`) or the store's owner verbs.
#![cfg_attr(test, allow(clippy::disallowed_methods))] // unit tests write their own fixtures
#![deny(missing_docs)]

pub mod acks;
mod admit;
pub mod alerts;
pub mod anthropic;
pub mod api;
pub mod breaker;
pub mod budget;
mod caller;
pub mod client;
pub mod config;
mod delegates;
pub mod error;
pub mod exchange;
pub use stopline_control::fleet;
mod a2a;
mod a2a_book;
mod a2a_task;
pub mod a2a_wire;
mod governor;
mod hosted;
pub mod inflight;
mod listener;
pub mod local_source;
pub mod logs;
pub mod metrics;
pub mod model;
pub mod outgoing;
mod page;
mod refusals;
pub mod registry;
pub mod reload;
mod request;
mod response_book;
mod responses;
mod routes;
pub mod server;
pub mod state;
pub mod stop_threads;
pub mod telemetry;
pub mod timeline;
mod trip;
pub mod usage;
pub mod view;
mod waiters;
mod watch;
mod webhook;

pub use admit::{Admission, CutWatch, Outcome};
pub use caller::{bearer_token, Caller};
pub use config::{GatewayConfig, McpServerConfig};
pub use error::{refusal_status, retry_after_s, GatewayError};
pub use governor::Governor;
pub use listener::HEADER_READ_TIMEOUT;
pub use local_source::LocalSource;
pub use server::{
    mcp_post_server, serve, serve_with, start, start_with, McpPost, Mount, MountFn, RunningGateway,
    ServeError, ServeOptions,
};
pub use stopline_control::view_feed::ViewFeed;
pub use stopline_control::view_source::{Distributed, ViewSource};
pub use watch::spawn_watcher;
