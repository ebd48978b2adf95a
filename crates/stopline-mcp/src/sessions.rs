//! Which agent opened which MCP session (`Mcp-Session-Id`), so that one agent cannot ride a
//! session another agent opened. A session's id comes from the upstream (or from the stdio
//! bridge) on `initialize` and is bound to the caller then; later messages on it must come from
//! the same agent. The table is bounded: when full it is cleared, which only loses this
//! cross-agent check (session ids are unguessable), never admission, which judges every call.

use crate::governor::Caller;
use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::Mutex;
use stopline_core::{Refusal, RefusalCode};

/// Session bindings kept before the table is cleared.
const MAX_BOUND_SESSIONS: usize = 65_536;

/// `<server>\0<session id>` → the agent that opened the session.
#[derive(Debug, Default)]
pub struct SessionBindings {
    bound: Mutex<HashMap<String, String>>,
}

fn key(server: &str, headers: &HeaderMap) -> Option<String> {
    let id = headers.get("mcp-session-id")?.to_str().ok()?;
    Some(format!("{server}\0{id}"))
}

impl SessionBindings {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuse a session opened by another agent.
    pub fn check(&self, server: &str, headers: &HeaderMap, caller: &Caller) -> Result<(), Refusal> {
        let Some(key) = key(server, headers) else {
            return Ok(());
        };
        match self.table().get(&key) {
            Some(agent) if **agent != *caller.agent => Err(Refusal::new(
                RefusalCode::TokenInvalid,
                "this MCP session was opened by another agent",
            )),
            _ => Ok(()),
        }
    }

    /// Bind the session named in `headers` to `caller` (first binding wins).
    pub fn bind(&self, server: &str, headers: &HeaderMap, caller: &Caller) {
        if let Some(key) = key(server, headers) {
            let mut table = self.table();
            if table.len() >= MAX_BOUND_SESSIONS {
                table.clear();
            }
            table.entry(key).or_insert_with(|| caller.agent.to_string());
        }
    }

    /// Forget the session named in `headers`.
    pub fn forget(&self, server: &str, headers: &HeaderMap) {
        if let Some(key) = key(server, headers) {
            self.table().remove(&key);
        }
    }
}
