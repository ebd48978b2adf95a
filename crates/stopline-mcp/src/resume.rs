//! Requests whose answer a server will deliver on a resumed stream (MCP 2025-11-25, SEP-1699):
//! the server closes a `POST`'s event stream after a priming event (one with an `id`), and the
//! client reconnects with `GET` and `Last-Event-ID` to receive the answer there.
//!
//! When such a stream ends with requests still open, their admissions are parked here under
//! their session instead of being left in doubt at once; a `GET` that resumes that session
//! (it carries `Last-Event-ID`) takes them over, and its stream records their outcomes as any
//! stream does. What no resumption delivered within `cut_outcome_wait_s` is left in doubt
//! (docs/reference.md §8).

use crate::govern::Pending;
use crate::governor::Outcome;
use axum::http::HeaderMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Parked requests by `<server>\0<session id>`, each with the ticket of its parking.
#[derive(Debug, Default)]
pub struct Parked {
    entries: Mutex<HashMap<String, Vec<(u64, Pending)>>>,
    tickets: AtomicU64,
}

/// Where a stream's open requests go if it ends after a priming event.
#[derive(Debug, Clone)]
pub struct Resume {
    /// The proxy's parked requests.
    pub parked: Arc<Parked>,
    /// The session's key (`<server>\0<session id>`).
    pub key: String,
    /// How long a resumption may take to deliver them (`cut_outcome_wait_s`).
    pub wait: Duration,
    /// The stream is itself a resumption (`GET` with `Last-Event-ID`): what it took over and
    /// did not deliver is parked again when it ends, primed or not.
    pub resumed: bool,
}

/// The session key of a request to `server` with `headers` (`None`: no session).
pub fn session_key(server: &str, headers: &HeaderMap) -> Option<String> {
    let id = headers.get("mcp-session-id")?.to_str().ok()?;
    Some(format!("{server}\0{id}"))
}

impl Parked {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(u64, Pending)>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Park `pending` under `resume.key`; whatever of it is still parked after `resume.wait`
    /// is left in doubt.
    pub fn park(self: &Arc<Self>, resume: &Resume, pending: Vec<Pending>) {
        if pending.is_empty() {
            return;
        }
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        self.table()
            .entry(resume.key.clone())
            .or_default()
            .extend(pending.into_iter().map(|p| (ticket, p)));
        let (parked, key, wait) = (self.clone(), resume.key.clone(), resume.wait);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let expired: Vec<Pending> = {
                let mut table = parked.table();
                let Some(entries) = table.get_mut(&key) else {
                    return;
                };
                let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(entries)
                    .into_iter()
                    .partition(|(t, _)| *t == ticket);
                *entries = kept;
                if entries.is_empty() {
                    table.remove(&key);
                }
                expired.into_iter().map(|(_, p)| p).collect()
            };
            let why = format!(
                "the server ended the stream after a priming event and no resumption (GET with Last-Event-ID) delivered the answer within cut_outcome_wait_s ({} s)",
                wait.as_secs()
            );
            for pending in expired {
                pending.admission.finish(Outcome::InDoubt(why.clone()));
            }
        });
    }

    /// Every request parked under `key`, taken over by the stream that resumes it.
    pub fn claim(&self, key: &str) -> Vec<Pending> {
        self.table()
            .remove(key)
            .map(|entries| entries.into_iter().map(|(_, p)| p).collect())
            .unwrap_or_default()
    }
}
