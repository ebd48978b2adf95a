//! The typed receipts of the control verbs: `Serialize` for `--json` and the gateway's API,
//! `Display` for people. One type per verb, so no surface reads a receipt back by string keys.
//!
//! JSON goes through [`Receipt::to_json`]: a `serde_json` map, whose keys come out sorted,
//! exactly as the receipts built with `json!` always printed (the JSON shapes of docs/reference.md
//! stay byte-compatible). The `Display` of each is the text `stopline` prints without `--json`.

mod engage;
mod evidence;
mod status;
mod status_text;
mod tokens;

pub use engage::{
    DisengageReceipt, EngageEpoch, EngageReceipt, EngagedLatch, GroupOrder, GroupReached,
};
pub use evidence::{EvidenceListReceipt, EvidenceVerifyReceipt};
pub use status::{
    AgentStatusView, GatewayStatus, GatewayViewReport, InitReceipt, OperationLine,
    OpsCompactReceipt, OpsListReceipt, StatusReceipt, WorkerView,
};
pub use stopline_core::ack::UncoveredServer;
pub use tokens::{MintedReceipt, TokenListReceipt, TokenRevokeReceipt, TokenVerifyReceipt};

use serde::Serialize;
use serde_json::Value;

/// A verb's receipt.
pub trait Receipt: Serialize + std::fmt::Display {
    /// The receipt as JSON (keys sorted, as a `serde_json` map keeps them).
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}

impl<T: Serialize + std::fmt::Display> Receipt for T {}

/// Compact one-line JSON of `value`, as the text receipts show lists and nested records (the
/// owner's receipts in `stopline-owner` too).
pub fn compact<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_value(value)
        .map(|v| v.to_string())
        .unwrap_or_default()
}
