//! Following what an upstream answers, and what it declares about its tools.
//!
//! [`Tracker`] holds the admissions of forwarded requests until their answers arrive: an answer
//! finishes its admission (committed, or failed for an error or `isError`), an outright refusal
//! by the upstream fails them, and whatever is still open when the exchange ends is left in
//! doubt — never silently committed. At a stop the agent's open requests are answered at once
//! ([`Tracker::mute_open`]) while the tracker goes on watching for their real answers, which are
//! recorded but never shown to the agent; what is still open when the cut's wait ends is left
//! in doubt ([`Tracker::cut`]). [`ToolCatalog`] learns `readOnlyHint` from
//! `tools/list` results passing through. Nothing here forwards or decides anything.

use crate::govern::{id_key, Pending};
use crate::governor::Outcome;
use crate::jsonrpc::{Id, Incoming, Message};
use foldhash::HashMap;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Tool annotations learned from `tools/list` results passing through, per server. A tool
/// never seen, or seen without `readOnlyHint: true`, is not read-only.
#[derive(Debug, Default)]
pub struct ToolCatalog {
    read_only: Mutex<HashMap<String, HashMap<String, bool>>>,
}

impl ToolCatalog {
    /// True only when the server's `tools/list` declared `readOnlyHint: true` for `tool`.
    pub fn is_read_only(&self, server: &str, tool: &str) -> bool {
        let map = self.read_only.lock().unwrap_or_else(|e| e.into_inner());
        map.get(server)
            .and_then(|t| t.get(tool))
            .copied()
            .unwrap_or(false)
    }

    /// Learn from one `tools/list` result.
    pub fn learn(&self, server: &str, result: &Value) {
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            return;
        };
        let mut map = self.read_only.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(server.to_string()).or_default();
        for tool in tools {
            if let Some(name) = tool.get("name").and_then(Value::as_str) {
                let read_only =
                    tool.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true));
                entry.insert(name.to_string(), read_only);
            }
        }
    }
}

/// Follows answers for the forwarded requests of one exchange (or one stdio session).
///
/// An HTTP exchange forwards one message, so it tracks at most one request: the open requests
/// are a short list matched by id (ids are equal exactly when their [`id_key`]s are), not a map
/// of keys built per call.
pub struct Tracker {
    catalog: Arc<ToolCatalog>,
    server: Arc<str>,
    pending: Vec<Pending>,
    /// Requests the agent was already answered for (by a cut): their real answers are
    /// recorded, not forwarded.
    muted: Vec<Id>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("server", &self.server)
            .field("pending", &self.pending)
            .finish()
    }
}

impl Tracker {
    /// A tracker for `server`'s answers.
    pub fn new(catalog: Arc<ToolCatalog>, server: &str) -> Tracker {
        Tracker::for_server(catalog, Arc::from(server))
    }

    /// A tracker for `server`'s answers, its name shared.
    pub fn for_server(catalog: Arc<ToolCatalog>, server: Arc<str>) -> Tracker {
        Tracker {
            catalog,
            server,
            pending: Vec::new(),
            muted: Vec::new(),
        }
    }

    /// Track requests that were handed over.
    pub fn track(&mut self, pending: BTreeMap<String, Pending>) {
        for one in pending.into_values() {
            self.track_one(Some(one));
        }
    }

    /// Track one request that was handed over (a member's, if it is a request). A request
    /// still open under the same id is replaced (and dropped: left in doubt, as a map keyed by
    /// id always did).
    pub fn track_one(&mut self, pending: Option<Pending>) {
        let Some(pending) = pending else {
            return;
        };
        match self.position(&pending.id) {
            Some(at) => self.pending[at] = pending,
            None => self.pending.push(pending),
        }
    }

    fn position(&self, id: &Id) -> Option<usize> {
        self.pending.iter().position(|p| &p.id == id)
    }

    /// Observe one message from the upstream. Returns true when it answered a tracked request.
    pub fn observe(&mut self, message: &Message) -> bool {
        let Message::Response { id, outcome } = message else {
            return false;
        };
        let Some(at) = self.position(id) else {
            return false;
        };
        let pending = self.pending.remove(at);
        if let (Ok(result), "tools/list") = (outcome, pending.method.as_str()) {
            self.catalog.learn(&self.server, &result.to_value());
        }
        let failed = match outcome {
            Ok(result) => result.member("isError").0 == Some(Value::Bool(true)),
            Err(_) => true,
        };
        pending.admission.finish(if failed {
            Outcome::Failed
        } else {
            Outcome::Committed
        });
        true
    }

    /// True when an answer must be read for what it says: a `tools/list` (the catalog learns
    /// from it) or a request whose admission records its outcome. Otherwise
    /// [`Tracker::answered`] finishes them without reading the answer.
    pub fn reads_answers(&self) -> bool {
        self.pending
            .iter()
            .any(|p| p.method == "tools/list" || p.admission.records_outcome())
    }

    /// The upstream answered and nothing open needs the answer read
    /// ([`Tracker::reads_answers`] is false): every open request is finished as answered.
    pub fn answered(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            pending.admission.finish(Outcome::Committed);
        }
    }

    /// Answered locally already: mark every open request so, and return their ids (the caller
    /// answers them). They stay tracked, so their real outcome is still recorded.
    pub fn mute_open(&mut self) -> Vec<Id> {
        let ids = self.open_ids();
        self.muted.extend(ids.iter().cloned());
        ids
    }

    /// False for an upstream answer to a request the agent was already answered for.
    pub fn forwardable(&self, message: &Message) -> bool {
        match message {
            Message::Response { id, .. } => !self.muted.contains(id),
            _ => true,
        }
    }

    /// Observe every message of a frame from the upstream.
    pub fn observe_frame(&mut self, frame: &Incoming) {
        for message in frame.messages() {
            self.observe(message);
        }
    }

    /// Every open request, no longer tracked (their admissions handed on, not finished).
    pub fn take_pending(&mut self) -> Vec<Pending> {
        std::mem::take(&mut self.pending)
    }

    /// True when every tracked request has been answered.
    pub fn is_done(&self) -> bool {
        self.pending.is_empty()
    }

    /// Ids still awaiting an answer.
    pub fn open_ids(&self) -> Vec<Id> {
        self.pending.iter().map(|p| p.id.clone()).collect()
    }

    /// Stop waiting for `id`: its operation is left in doubt (its upstream went away).
    pub fn abandon(&mut self, id: &str, reason: &str) -> Option<Id> {
        let at = self.pending.iter().position(|p| id_key(&p.id) == id)?;
        let pending = self.pending.remove(at);
        pending
            .admission
            .finish(Outcome::InDoubt(reason.to_string()));
        Some(pending.id)
    }

    /// The upstream could not be reached at all: nothing open was delivered.
    pub fn unreachable(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            pending.admission.finish(Outcome::UpstreamUnreachable);
        }
    }

    /// The upstream refused the messages outright (an HTTP 4xx): nothing open was executed.
    pub fn refused_by_upstream(&mut self) {
        for pending in std::mem::take(&mut self.pending) {
            pending.admission.finish(Outcome::Failed);
        }
    }

    /// A cut exchange gave no outcome in time: every open operation is left in doubt.
    pub fn cut(&mut self, reason: &str) {
        for pending in std::mem::take(&mut self.pending) {
            pending.admission.cut(reason);
        }
    }

    /// The exchange ended without answers: every open operation is left in doubt.
    pub fn finish(&mut self, reason: &str) {
        for pending in std::mem::take(&mut self.pending) {
            pending
                .admission
                .finish(Outcome::InDoubt(reason.to_string()));
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.finish("the exchange ended before the upstream answered");
    }
}
