//! The `stopline` command-line definition (docs/reference.md §3) as a library target, so repository tooling
//! (`cargo xtask dist`) generates the shell completions and the man page from the very
//! definition the binary parses, and they can never drift apart.
//!
//! Nothing else belongs here: the binary's wiring stays in `main.rs` and its siblings, and this
//! target must not grow control logic (that lives in `stopline-control`).
#![deny(missing_docs)]

pub mod cli;
