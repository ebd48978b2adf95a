//! The drill's effect log: every effect the destination executed (a tool call, a write, a model
//! call, a message the remote A2A agent received), stamped with the caller's request id and the
//! moment it was executed. The destination's routes (`crate::destination`) and the remote A2A
//! agent (`crate::remote_agent`) both write into it, each before answering; the drill matches
//! it against the operation registry (`crate::matching`).

use std::sync::Mutex;

/// What an effect was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// A tool call (`lookup`).
    ToolCall,
    /// A write (`write`).
    Write,
    /// A model call.
    Model,
    /// A message received by the remote A2A agent (a send, streamed or not).
    A2aMessage,
}

/// One executed effect.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Effect {
    /// The caller's request id (JSON-RPC id as JSON text, or the model call's metadata id).
    pub request_id: String,
    /// What it was.
    pub kind: EffectKind,
    /// Unix microseconds at which the destination executed it.
    pub at_unix_us: i64,
}

/// Unix microseconds now.
pub fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// Every effect executed so far, in the order recorded.
#[derive(Debug, Default)]
pub struct EffectLog {
    effects: Mutex<Vec<Effect>>,
}

impl EffectLog {
    /// Record one effect, stamped now.
    pub fn record(&self, request_id: String, kind: EffectKind) {
        let effect = Effect {
            request_id,
            kind,
            at_unix_us: unix_us(),
        };
        self.effects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(effect);
    }

    /// Every effect recorded so far.
    pub fn effects(&self) -> Vec<Effect> {
        self.effects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
