//! The acknowledgement protocol between an engage and the gateways (docs/reference.md,
//! "Acknowledgements"): one JSON line each way over loopback TCP. The engage asks whether a
//! gateway's view holds a latch ([`AckRequest`]); the gateway answers [`AckReply`]. Both sides
//! read and write only these types; fields in sorted order, as the lines have always been.

use serde::{Deserialize, Serialize};

/// The engage's question: does your view hold `latch`, within `timeout_ms`?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckRequest {
    /// The latch file.
    pub latch: String,
    /// How long the gateway may wait for its view to hold it (absent: its default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The gateway's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckReply {
    /// True only when the view holds the latch and no call admitted under an older view is
    /// still being handed upstream.
    pub ack: bool,
    /// The view generation that holds it (an acknowledgement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// The answering gateway's id (absent when the request could not be read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// Why not (a refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl AckReply {
    /// The latch is held by view `generation` of `server`.
    pub fn acknowledged(server: &str, generation: u64) -> AckReply {
        AckReply {
            ack: true,
            generation: Some(generation),
            server: Some(server.to_string()),
            why: None,
        }
    }

    /// Not acknowledged, and why (`server`: absent when the request could not be read).
    pub fn refused(server: Option<&str>, why: &str) -> AckReply {
        AckReply {
            ack: false,
            generation: None,
            server: server.map(str::to_string),
            why: Some(why.to_string()),
        }
    }
}
