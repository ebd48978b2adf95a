//! The acknowledgement protocol between an engage and the gateways (docs/reference.md,
//! "Acknowledgements"): one JSON line each way over loopback TCP. The engage asks whether a
//! gateway's view holds a latch ([`AckRequest`]); the gateway answers [`AckReply`]. Both sides
//! read and write only these types; fields in sorted order, as the lines have always been.
//!
//! Who to ask is the gateways' registration, [`ServerRecord`] (`servers/<id>.json`, or the
//! etcd plane's `servers/` key): the gateway writes it every heartbeat, the engage, `status` and
//! the etcd plane read it. Its fields are written in the type's order (pretty JSON, the form it
//! has always had; the golden `tests/golden/server-record.json` proves it).

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

/// `token revoke`'s question: does your view hold revision `revision` of epoch scope `scope`
/// (the revocation's, or a later one), within `timeout_ms`? One JSON line
/// `{"revision":R,"scope":"token:<jti>","timeout_ms":M}`, answered with an [`AckReply`] like a
/// latch's. A gateway that speaks only [`AckRequest`] cannot read it and answers no
/// acknowledgement, so the revoke names it unacknowledged (docs/reference.md §9,
/// "Acknowledgements"). A scope's revision, not the global sequence: in etcd mode a gateway's
/// sequence is the larger of the plane's and its host's, which says nothing of the plane's
/// revocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochAckRequest {
    /// The revision the revocation advanced its scope to.
    pub revision: u64,
    /// The scope (stored form, `token:<jti>` or `token:<jti>+delegates`).
    pub scope: String,
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

/// `servers/<id>.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ServerRecord {
    /// The registration id (file stem).
    pub id: String,
    /// The gateway's pid.
    pub pid: u32,
    /// Its start time (field 22 of `/proc/<pid>/stat`), to tell a reused pid.
    pub start_time: u64,
    /// Its acknowledgement protocol version.
    pub protocol: u32,
    /// The HTTP address it serves.
    pub listen: String,
    /// The loopback address of its acknowledgement thread.
    pub ack_addr: String,
    /// Unix ms of the last heartbeat.
    pub heartbeat_ms: i64,
    /// Latch files its view holds with no older call still waiting to be handed upstream.
    #[serde(default)]
    pub acknowledged: Vec<String>,
    /// True when its change notification is lost and only periodic reloads refresh its view.
    #[serde(default)]
    pub degraded: bool,
    /// Notes about its view (watch lost, overflow, …).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Hash of its configuration file.
    #[serde(default)]
    pub config_hash: String,
    /// Budgets of the tokens it serves that are near their limit (at least
    /// [`NEAR_LIMIT`] of it used or reserved), as of its last heartbeat.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets_near_limit: Vec<BudgetNearLimit>,
}

/// The share of a limit at which a budget counts as near it.
pub const NEAR_LIMIT: f64 = 0.8;

/// One budget of one token near its limit, as a gateway reports it in its registration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BudgetNearLimit {
    /// The token's acting agent.
    pub agent: String,
    /// The first characters of the token's id.
    pub token: String,
    /// The budget kind (`tool_calls`, `usd`, …).
    pub kind: String,
    /// The limit signed into the token.
    pub limit: f64,
    /// Settled use.
    pub used: f64,
    /// Reserved by calls not yet settled.
    pub reserved: f64,
}

impl BudgetNearLimit {
    /// True when `used + reserved` is at least [`NEAR_LIMIT`] of `limit`.
    pub fn is_near(limit: f64, used: f64, reserved: f64) -> bool {
        limit <= 0.0 || used + reserved >= NEAR_LIMIT * limit
    }
}

/// A live gateway that does not cover the latches, as `status` names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UncoveredServer {
    /// A registered gateway that leaves a latch unacknowledged or speaks an older protocol.
    Lagging {
        /// Its registration id.
        id: String,
        /// The HTTP address it serves.
        listen: String,
        /// Its acknowledgement protocol version.
        protocol: u32,
        /// True when that protocol is older than this binary's.
        older_protocol: bool,
        /// The latch files it has not acknowledged.
        unacknowledged_latches: Vec<String>,
        /// True when only periodic reloads refresh its view.
        degraded: bool,
    },
    /// The gateway answering `/v1/status`, which has had no word from the distributed backend.
    PermitLapsed {
        /// Its registration id.
        id: String,
        /// Always true.
        permit_lapsed: bool,
        /// Why it cannot vouch for stops engaged elsewhere.
        why: String,
    },
}

#[cfg(test)]
mod tests {
    use super::{AckRequest, EpochAckRequest};

    /// The two questions a gateway reads on one socket never read as each other: an engage's
    /// latch is never taken for a revocation, and a revocation reaches a gateway that knows only
    /// latches as something it cannot read (so it answers no acknowledgement).
    #[test]
    fn a_revocation_and_a_latch_question_never_read_as_each_other() {
        let revocation = format!(
            r#"{{"revision":7,"scope":"token:{}","timeout_ms":250}}"#,
            "a".repeat(32)
        );
        let read: EpochAckRequest = serde_json::from_str(&revocation).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), revocation);
        assert!(serde_json::from_str::<AckRequest>(&revocation).is_err());
        let latch = r#"{"latch":"latch_1.json","timeout_ms":250}"#;
        assert!(serde_json::from_str::<EpochAckRequest>(latch).is_err());
    }
}
