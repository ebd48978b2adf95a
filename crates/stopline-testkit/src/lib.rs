//! The test kit the conformance battery and the integration tests share, so the two judge the
//! gateway's answers the same way instead of through two hand-written HTTP clients that drift.
//!
//! The battery ships in the release binary (`stopline conformance`, run by `cargo xtask
//! release-gate`), so this is an ordinary library of `stopline-assurance` and a dev-dependency
//! of the `stopline` integration tests. It holds no control logic and touches no control
//! directory: it only speaks HTTP on 127.0.0.1, as a client (`http`) and as a recording upstream
//! a gateway forwards to (`upstream`).
#![deny(missing_docs)]

pub mod http;
pub mod upstream;
