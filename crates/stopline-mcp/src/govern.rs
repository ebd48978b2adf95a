//! Governing MCP traffic message by message, shared by the HTTP and stdio proxies.
//!
//! [`govern_frame`] judges every member of a frame from the agent through the [`Governor`]:
//! requests, notifications and the agent's responses alike. A `tools/call` carries whether the
//! tool is known to be read-only ([`ToolCatalog`], learned from the upstream's `tools/list`); the governor records every other one as a
//! destination operation before it is admitted. Refused requests are answered locally with a
//! JSON-RPC error carrying the stopline code in `error.data`; refused notifications and
//! responses are dropped. [`Governed::dispatch`] re-checks each admitted member right before it
//! is handed over; the survivors are forwarded one by one, each re-serialized on its own — never
//! as a batch (docs/reference.md §8: an upstream need not answer batches, and one that does not would
//! leave every member in flight forever). Frames that break [`crate::frame`]'s rules never get
//! here.
//! What comes back is followed by [`crate::track::Tracker`].

use crate::governor::{Admission, Call, Caller, Governor, Outcome};
use crate::jsonrpc::{Id, Incoming, Message, STOPLINE_REFUSED};
use std::collections::BTreeMap;
use stopline_core::{Refusal, RefusalCode};

pub use crate::track::{ToolCatalog, Tracker};

/// A forwarded request whose answer is awaited.
pub struct Pending {
    /// Its id, as the agent sent it.
    pub id: Id,
    /// Its method.
    pub method: String,
    /// Its admission, finished when the answer arrives.
    pub admission: Box<dyn Admission>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("id", &self.id)
            .field("method", &self.method)
            .finish()
    }
}

/// The result of governing one frame.
#[derive(Default)]
pub struct Governed {
    /// Admitted members with their admissions, in order.
    admitted: Vec<(Message, Box<dyn Admission>)>,
    /// True when the frame was a batch.
    batch: bool,
    /// Error responses answered locally, never forwarded.
    pub local: Vec<Message>,
    /// Every refusal, requests' and notifications' alike (the first sets an HTTP status).
    pub refusals: Vec<Refusal>,
}

/// One member that survived dispatch: forwarded on its own.
#[derive(Debug)]
pub struct Member {
    /// The message, as judged (re-serialized when forwarded).
    pub message: Message,
    /// For a request: its admission, finished when the answer arrives.
    pub pending: Option<Pending>,
}

impl Member {
    /// The single-message frame that is forwarded.
    pub fn frame(&self) -> Incoming {
        Incoming::Single(self.message.clone())
    }

    /// Its pending request by id key, if it is a request.
    pub fn take_pending(&mut self) -> BTreeMap<String, Pending> {
        self.pending
            .take()
            .map(|p| (id_key(&p.id), p))
            .into_iter()
            .collect()
    }
}

/// What survives dispatch: the members to hand over, in order, one by one.
#[derive(Debug, Default)]
pub struct Dispatch {
    /// The members, in frame order.
    pub members: Vec<Member>,
}

/// A stable key for a request id (ids are strings or integers).
pub fn id_key(id: &Id) -> String {
    id.to_string()
}

/// The JSON-RPC error response for a refused request.
pub fn refusal_response(id: Id, refusal: &Refusal) -> Message {
    let text = format!("{}: {}", refusal.code, refusal.message);
    Message::error_with(id, STOPLINE_REFUSED, &text, Some(refusal))
}

/// The [`Call`] a message is judged as.
pub fn call_for(server: &str, catalog: &ToolCatalog, message: &Message) -> Result<Call, Refusal> {
    let (method, tool, request_id) = match message {
        Message::Request { id, method, params } if method == "tools/call" => {
            // The params are forwarded as the agent wrote them, so a tool named twice would
            // leave the upstream to choose which one runs: refused, never guessed.
            let tool = match params.as_ref().map(|p| p.unique_str("name")) {
                Some(Ok(Some(tool))) => tool,
                Some(Err(times)) => {
                    return Err(Refusal::new(
                        RefusalCode::BadRequest,
                        format!("tools/call names its tool {times} times (params.name)"),
                    ))
                }
                _ => {
                    return Err(Refusal::new(
                        RefusalCode::BadRequest,
                        "tools/call needs params.name",
                    ))
                }
            };
            // Both are recorded with the call's operation: bounded (docs/reference.md §6).
            stopline_core::refusal::bounded_record("tools/call params.name", &tool)?;
            let request_id = id_key(id);
            stopline_core::refusal::bounded_record("the JSON-RPC id", &request_id)?;
            (method.clone(), Some(tool), Some(request_id))
        }
        Message::Request { id, method, .. } => (method.clone(), None, Some(id_key(id))),
        Message::Notification { method, .. } => (method.clone(), None, None),
        Message::Response { .. } => ("response".to_string(), None, None),
    };
    let read_only = tool
        .as_deref()
        .is_some_and(|t| catalog.is_read_only(server, t));
    Ok(Call {
        server: server.to_string(),
        method,
        tool,
        read_only,
        request_id,
    })
}

/// Govern one frame from `caller` towards `server`.
pub async fn govern_frame(
    governor: &dyn Governor,
    catalog: &ToolCatalog,
    server: &str,
    caller: &Caller,
    frame: Incoming,
) -> Governed {
    let mut governed = Governed {
        batch: matches!(frame, Incoming::Batch(_)),
        ..Governed::default()
    };
    // A single message is judged without a list made for it.
    let (single, batch) = match frame {
        Incoming::Single(message) => (Some(message), Vec::new()),
        Incoming::Batch(messages) => (None, messages),
    };
    for message in single.into_iter().chain(batch) {
        let judged = match call_for(server, catalog, &message) {
            Ok(call) => governor.admit(caller, &call).await,
            Err(refusal) => Err(refusal),
        };
        match judged {
            Ok(admission) => governed.admitted.push((message, admission)),
            Err(refusal) => governed.refuse(caller, message, refusal),
        }
    }
    governed
}

impl Governed {
    fn refuse(&mut self, caller: &Caller, message: Message, refusal: Refusal) {
        tracing::info!(agent = %caller.agent, method = ?message.method(), code = %refusal.code, "mcp message refused");
        if let Message::Request { id, .. } = message {
            self.local.push(refusal_response(id, &refusal));
        }
        self.refusals.push(refusal);
    }

    /// True when any member was admitted.
    pub fn has_admitted(&self) -> bool {
        !self.admitted.is_empty()
    }

    /// Refuse every admitted member after all (its upstream is gone); nothing was dispatched.
    pub fn refuse_admitted(&mut self, caller: &Caller, refusal: Refusal) {
        for (message, admission) in std::mem::take(&mut self.admitted) {
            admission.finish(Outcome::UpstreamUnreachable);
            self.refuse(caller, message, refusal.clone());
        }
    }

    /// True when the frame was a batch.
    pub fn is_batch(&self) -> bool {
        self.batch
    }

    /// Re-check every admitted member right before handing the frame over; refused ones are
    /// answered locally. Notifications and responses are finished here (nothing comes back).
    pub fn dispatch(&mut self, caller: &Caller) -> Dispatch {
        let mut dispatch = Dispatch::default();
        for (message, mut admission) in std::mem::take(&mut self.admitted) {
            if let Err(refusal) = admission.dispatch() {
                self.refuse(caller, message, refusal);
                continue;
            }
            let pending = match &message {
                Message::Request { id, method, .. } => Some(Pending {
                    id: id.clone(),
                    method: method.clone(),
                    admission,
                }),
                _ => {
                    admission.finish(Outcome::Committed);
                    None
                }
            };
            dispatch.members.push(Member { message, pending });
        }
        dispatch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use stopline_core::LatchRef;

    /// A refusal is written straight to its text with no tree made for it, and that text is
    /// byte for byte what the tree of the same answer prints (compact, members sorted): the
    /// canonical message, and whoever reads it, see no difference.
    #[test]
    fn a_refusal_is_written_as_its_tree_prints() {
        let latch = LatchRef {
            by: "safety \"monitor\"".into(),
            engaged_at: Some("2026-12-06T03:00:00Z".into()),
            id: "latch_7f2a".into(),
            level: "emergency".into(),
            reason: "anomalous é\n\u{1}".into(),
            scope: "agent:example-worker".into(),
        };
        let unknown_time = LatchRef {
            engaged_at: None,
            ..latch.clone()
        };
        let refusals = [
            Refusal::new(RefusalCode::BreakGlassContained, "stopped").with_latch(Some(latch)),
            Refusal::new(RefusalCode::BreakGlassContained, "stopped")
                .with_latch(Some(unknown_time)),
            Refusal::new(RefusalCode::TokenInvalid, "no token"),
        ];
        for refusal in &refusals {
            for id in [json!(7), json!("a\"b")] {
                let tree = json!({
                    "error": {
                        "code": STOPLINE_REFUSED,
                        "data": serde_json::to_value(refusal).unwrap(),
                        "message": format!("{}: {}", refusal.code, refusal.message),
                    },
                    "id": id,
                    "jsonrpc": "2.0",
                });
                let written = refusal_response(id, refusal).to_bytes();
                assert_eq!(String::from_utf8(written).unwrap(), tree.to_string());
            }
        }
    }
}
