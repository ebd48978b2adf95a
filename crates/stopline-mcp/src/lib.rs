//! MCP under stopline: every tool call an agent makes through MCP is governed.
//!
//! - [`http`]: the Streamable HTTP proxy the gateway mounts at `/mcp/<server>`.
//! - [`stdio`]: `stopline mcp proxy`, which wraps a stdio MCP server.
//! - [`serve`]: `stopline mcp serve`, an MCP server offering exactly `engage` and `status`.
//! - [`hook`]: `stopline hook claude-code`, a PreToolUse hook that fails closed.
//!
//! All of them parse with [`jsonrpc`] and judge through the [`Governor`] seam ([`gateway`] in
//! the gateway, [`local`] over the control directory, [`remote`] through a gateway's API); none
//! decides admission on its own, and none offers any path to recovery.
#![deny(missing_docs)]

pub mod breaker;
pub mod entry;
pub mod frame;
pub mod gateway;
pub mod govern;
pub mod governor;
pub mod hook;
pub mod http;
pub mod jsonrpc;
pub mod local;
mod local_admission;
pub mod origin;
pub mod pump;
pub mod remote;
pub mod reply;
pub mod resume;
pub mod serve;
pub mod sessions;
pub mod sse;
pub mod stdio;
mod stdio_child;
mod stdio_session;
mod stdio_spawn;
mod stdio_upstream;
pub mod track;
mod upstream;

pub use governor::{Admission, Call, Caller, Governor, Outcome};
