//! Which agent opened which MCP session (`Mcp-Session-Id`), so that one agent cannot ride a
//! session another agent opened. A session's id comes from the upstream (or from the stdio
//! bridge) on `initialize` and is bound to the caller then; later messages on it must come from
//! the same agent. The table is bounded: when full it is cleared, which only loses this
//! cross-agent check (session ids are unguessable), never admission, which judges every call.
//! Each binding remembers when its session was last used, so that the proxy can end an HTTP
//! upstream's sessions whose agents went quiet ([`SessionBindings::take_idle`]).

use crate::governor::Caller;
use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use stopline_core::{Refusal, RefusalCode};

/// Session bindings kept before the table is cleared.
const MAX_BOUND_SESSIONS: usize = 65_536;

/// `<server>\0<session id>` → the agent that opened the session, when it was last used, and
/// how many of its streams are open.
#[derive(Debug, Default)]
pub struct SessionBindings {
    bound: Mutex<HashMap<String, Binding>>,
}

#[derive(Debug)]
struct Binding {
    agent: String,
    used: Instant,
    /// Its agent's open `GET` streams: a session with one is in use however quiet it is.
    streams: Arc<AtomicUsize>,
}

/// A session's open stream, held for as long as the stream is: while any is held the session
/// is not idle, and its release counts as a use.
#[derive(Debug)]
pub struct StreamHold(Arc<AtomicUsize>);

impl Drop for StreamHold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn key(server: &str, headers: &HeaderMap) -> Option<String> {
    let id = headers.get("mcp-session-id")?.to_str().ok()?;
    Some(format!("{server}\0{id}"))
}

impl SessionBindings {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Binding>> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuse a session opened by another agent.
    pub fn check(&self, server: &str, headers: &HeaderMap, caller: &Caller) -> Result<(), Refusal> {
        let Some(key) = key(server, headers) else {
            return Ok(());
        };
        match self.table().get_mut(&key) {
            Some(binding) if *binding.agent != *caller.agent => Err(Refusal::new(
                RefusalCode::TokenInvalid,
                "this MCP session was opened by another agent",
            )),
            Some(binding) => {
                binding.used = Instant::now();
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Bind the session named in `headers` to `caller` (first binding wins).
    pub fn bind(&self, server: &str, headers: &HeaderMap, caller: &Caller) {
        if let Some(key) = key(server, headers) {
            let mut table = self.table();
            if table.len() >= MAX_BOUND_SESSIONS {
                table.clear();
            }
            table.entry(key).or_insert_with(|| Binding {
                agent: caller.agent.to_string(),
                used: Instant::now(),
                streams: Arc::default(),
            });
        }
    }

    /// Forget every session of `server` unused for `idle` or longer, and return their ids.
    pub fn take_idle(&self, server: &str, idle: Duration) -> Vec<String> {
        let prefix = format!("{server}\0");
        let now = Instant::now();
        let mut taken = Vec::new();
        self.table().retain(|key, binding| {
            let open = binding.streams.load(Ordering::SeqCst) > 0;
            if open {
                binding.used = now;
            }
            let expired = !open && now.duration_since(binding.used) >= idle;
            match key.strip_prefix(&prefix) {
                Some(id) if expired => {
                    taken.push(id.to_string());
                    false
                }
                _ => true,
            }
        });
        taken
    }

    /// Hold the session named in `headers` in use while a stream of it is open (`None`: no
    /// bound session).
    pub fn hold(&self, server: &str, headers: &HeaderMap) -> Option<StreamHold> {
        let key = key(server, headers)?;
        let table = self.table();
        let streams = table.get(&key)?.streams.clone();
        streams.fetch_add(1, Ordering::SeqCst);
        Some(StreamHold(streams))
    }

    /// Forget the session named in `headers`.
    pub fn forget(&self, server: &str, headers: &HeaderMap) {
        if let Some(key) = key(server, headers) {
            self.table().remove(&key);
        }
    }
}
