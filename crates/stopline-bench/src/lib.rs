//! Every benchmark of stopline (`stopline bench …`, docs/reference.md §3) in one crate, with one
//! quantile ([`stats::quantile`], nearest rank) for every figure — the benches' and the drill's
//! (`stopline-drill` reads its statistics from here). Figures are reported, never asserted.
//!
//! The enforcement crates keep only what needs their internals, as probes that return raw
//! samples: `stopline_supervisor::kill_samples` (a bare `cgroup.kill`) and
//! `stopline_run::kill_probe::sample` (a latch through `run`'s reaction loop). Nothing of this
//! crate is linked by the gateway or the MCP proxy.

pub mod authority;
pub mod engage;
pub mod error;
pub mod fleet;
pub mod gateway;
pub mod history;
pub mod kill;
pub mod measure;
pub mod procs;
pub mod sessions;
pub mod stats;
mod upstream;
