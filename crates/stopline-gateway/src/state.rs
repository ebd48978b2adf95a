//! The shared state every HTTP handler is given: the admission path and this gateway's
//! registration. A leaf of the HTTP side: `server.rs` builds it, the handlers read it.

use crate::governor::Governor;
use crate::registry::Registry;
use std::sync::Arc;

/// The shared state of the HTTP handlers.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The admission path.
    pub gov: Governor,
    /// This gateway's registration.
    pub registry: Arc<Registry>,
}
