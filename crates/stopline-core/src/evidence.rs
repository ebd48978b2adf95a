//! `evidence-record.v1` (docs/reference.md §8, §9; `schemas/evidence-record.v1.json`): what a breaker trip or
//! a budget exhaustion files in the evidence log.
//!
//! One type for every surface that trips (the gateway, the stdio governor, the run loop's wall
//! clock), so their records cannot drift apart again; a test validates it against the schema.
//! The latch a trip engages is named by [`BreakerKind::by`] (`breaker:<kind>`, docs/reference.md §8).
//! Pure values only: the time comes from the caller and nothing here writes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The schema name every record carries.
pub const SCHEMA: &str = "evidence-record.v1";

/// The kinds of agent breaker (docs/reference.md §8). A budget that runs out trips the agent's breaker too,
/// as `budget_exhausted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerKind {
    /// Calls the agent was not authorized to make.
    UnauthorizedCalls,
    /// Egress the gateway refused.
    RefusedEgress,
    /// A monitor's anomaly score.
    AnomalyScore,
    /// A budget ran out.
    BudgetExhausted,
}

impl BreakerKind {
    /// The stable name (the schema's `breaker` enum).
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerKind::UnauthorizedCalls => "unauthorized_calls",
            BreakerKind::RefusedEgress => "refused_egress",
            BreakerKind::AnomalyScore => "anomaly_score",
            BreakerKind::BudgetExhausted => "budget_exhausted",
        }
    }

    /// The `by:` of the agent latch a trip of this breaker engages: `breaker:<kind>` (docs/reference.md §8).
    pub fn by(self) -> String {
        format!("breaker:{}", self.as_str())
    }

    /// The record's `kind` (and the evidence log line's): `budget_exhausted` for a budget,
    /// `breaker` for every other breaker.
    pub fn record_kind(self) -> &'static str {
        match self {
            BreakerKind::BudgetExhausted => "budget_exhausted",
            _ => "breaker",
        }
    }
}

/// One `evidence-record.v1`. Field order is the order the gateway has always written (it only
/// matters where a JSON map keeps insertion order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceRecord {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// The agent whose breaker tripped.
    pub agent: String,
    /// `breaker` or `budget_exhausted` ([`BreakerKind::record_kind`]).
    pub kind: String,
    /// Which breaker.
    pub breaker: BreakerKind,
    /// What set it off (the budget kind, the refused tool or egress, the anomaly).
    pub trigger: String,
    /// The configured threshold or budget limit.
    pub threshold: f64,
    /// The observed value that crossed it.
    pub observed: f64,
    /// The id of the agent latch the trip engaged; empty when the engage failed (the schema's
    /// convention; the failure is logged).
    pub latch: String,
    /// The level of that latch.
    pub level: crate::Level,
    /// The registration id of the gateway that tripped it (gateway trips only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// The supervised run whose wall clock ran out (run-loop trips only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// `observe` when the breaker only observes: the record and the alert, no latch (`latch`
    /// is empty). Absent for a breaker that enforces, as every record before modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::policy::ConditionMode>,
    /// RFC 3339 time of the record.
    pub ts: String,
}

impl EvidenceRecord {
    /// The record as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("an evidence record always serializes")
    }

    /// The fields of its evidence log line: everything but `kind`, which the chain writes as the
    /// line's own kind (pass [`EvidenceRecord::kind`] beside them).
    pub fn log_fields(&self) -> Map<String, Value> {
        let mut fields = match self.to_json() {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        fields.remove("kind");
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_and_kind_follow_the_breaker() {
        let names: Vec<_> = [
            BreakerKind::UnauthorizedCalls,
            BreakerKind::RefusedEgress,
            BreakerKind::AnomalyScore,
            BreakerKind::BudgetExhausted,
        ]
        .iter()
        .map(|k| (k.by(), k.record_kind()))
        .collect();
        assert_eq!(
            names,
            [
                ("breaker:unauthorized_calls".to_string(), "breaker"),
                ("breaker:refused_egress".to_string(), "breaker"),
                ("breaker:anomaly_score".to_string(), "breaker"),
                ("breaker:budget_exhausted".to_string(), "budget_exhausted"),
            ]
        );
    }
}
