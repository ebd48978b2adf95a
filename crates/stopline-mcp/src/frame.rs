//! The frame rules every MCP surface applies before governing anything (docs/reference.md §8).
//!
//! - Only `notifications/*` methods may be sent without an id. Any other method sent as a
//!   notification — a `tools/call` above all — would have no answer to carry a refusal, no id to
//!   record, and no outcome to observe; it is refused whole and never forwarded.
//! - A batch whose requests (or whose responses) share an id is refused whole: two requests
//!   with one id cannot both be answered, tracked and recorded, so none is executed.
//!
//! The HTTP proxy answers a refused frame with HTTP 400; the stdio proxy with a JSON-RPC
//! "Invalid Request" error (id `null`). Nothing of a refused frame reaches the upstream.

use crate::govern::id_key;
use crate::jsonrpc::{Incoming, Message, INVALID_REQUEST};
use serde_json::Value;
use std::collections::BTreeSet;

/// Why a frame is refused whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// A method other than `notifications/*` sent without an id.
    #[error("{0:?} was sent as a notification (no id); only notifications/* may be, so nothing of this frame was forwarded")]
    NotificationNotAllowed(String),
    /// Two members of a batch share an id.
    #[error("the batch carries id {0} twice; nothing of it was executed")]
    DuplicateId(String),
}

impl FrameError {
    /// The JSON-RPC error response (id `null`: the frame has no single id to answer).
    pub fn to_response(&self) -> Message {
        Message::error(
            Value::Null,
            INVALID_REQUEST,
            &format!("invalid request: {self}"),
            Some(serde_json::json!({"code": "bad_request", "message": self.to_string()})),
        )
    }
}

/// True when `method` may be sent without an id.
pub fn may_be_notification(method: &str) -> bool {
    method.starts_with("notifications/")
}

/// Check `frame` against the rules above.
pub fn check_frame(frame: &Incoming) -> Result<(), FrameError> {
    let mut requests = BTreeSet::new();
    let mut responses = BTreeSet::new();
    for message in frame.messages() {
        match message {
            Message::Notification { method, .. } if !may_be_notification(method) => {
                return Err(FrameError::NotificationNotAllowed(method.clone()));
            }
            Message::Notification { .. } => {}
            Message::Request { id, .. } => {
                if !requests.insert(id_key(id)) {
                    return Err(FrameError::DuplicateId(id_key(id)));
                }
            }
            Message::Response { id, .. } => {
                if !id.is_null() && !responses.insert(id_key(id)) {
                    return Err(FrameError::DuplicateId(id_key(id)));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::parse;

    fn check(input: &str) -> Result<(), FrameError> {
        check_frame(&parse(input.as_bytes()).unwrap())
    }

    #[test]
    fn notifications_and_duplicate_ids() {
        assert_eq!(
            check(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Ok(())
        );
        assert_eq!(
            check(r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"w"}}"#),
            Err(FrameError::NotificationNotAllowed("tools/call".into()))
        );
        assert_eq!(
            check(r#"{"jsonrpc":"2.0","method":"ping"}"#),
            Err(FrameError::NotificationNotAllowed("ping".into()))
        );
        assert_eq!(
            check(
                r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call"},{"jsonrpc":"2.0","id":1,"method":"tools/call"}]"#
            ),
            Err(FrameError::DuplicateId("1".into()))
        );
        assert_eq!(
            check(
                r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"b","method":"ping"}]"#
            ),
            Ok(())
        );
        assert_eq!(
            check(
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":1,"result":{}}]"#
            ),
            Ok(()),
            "a request and a response live in different id spaces"
        );
        assert_eq!(
            check(
                r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"tools/list"}]"#
            ),
            Err(FrameError::NotificationNotAllowed("tools/list".into()))
        );
    }
}
