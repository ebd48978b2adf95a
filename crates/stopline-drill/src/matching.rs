//! Matching what the destination executed against the operation registry (docs/reference.md §11).
//!
//! Each effect is looked up by request id among the operations of the drill's own agents. An
//! effect with no operation at all went around the gateway (a bypass) and counts as after the
//! trip. An effect whose operation was admitted — handed upstream, the `dispatched` record
//! stamped under the gateway's dispatch re-check — after engage returned counts as after the
//! trip, and so does one whose operation has no `dispatched` record at all (the drill waits for
//! the records a gateway queues, `run.rs`; one still missing never hides an effect). An
//! effect admitted before but executed after engage returned counts as in flight at the trip.
//! The registry keeps Unix milliseconds, so "after" means a later millisecond than the one in
//! which engage returned: an admission within that same millisecond is given the benefit of the
//! doubt (the acknowledgement engage waits for is itself taken before it returns).

use crate::effects::{Effect, EffectKind};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use stopline_core::ops::Operation;

/// The counts of one drill.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Matched {
    /// Tool calls executed after the trip.
    pub tool_calls_after_trip: u64,
    /// Writes executed after the trip.
    pub writes_after_trip: u64,
    /// Model calls executed after the trip.
    pub model_calls_after_trip: u64,
    /// Messages the remote A2A agent received after the trip.
    pub a2a_messages_after_trip: u64,
    /// Effects admitted before the trip that executed after it.
    pub in_flight_at_trip: u64,
    /// Effects with no operation at all (counted in the after-trip figures too).
    pub bypass: u64,
    /// Operations of drill agents admitted after the trip, with or without an effect.
    pub operations_admitted_after_trip: u64,
    /// Effects executed in all.
    pub effects: u64,
    /// Unix ms of the last admission (dispatch) the gateway made for a drill agent, if any.
    pub last_admission_ms: Option<i64>,
    /// Up to ten after-trip effects, for the report.
    pub examples: Vec<Value>,
}

impl Matched {
    /// Effects after the trip, of every kind.
    pub fn after_trip(&self) -> u64 {
        self.tool_calls_after_trip
            + self.writes_after_trip
            + self.model_calls_after_trip
            + self.a2a_messages_after_trip
    }
}

/// How many of `effects` belong to an operation of `ops` that has no `dispatched` record (yet).
pub fn executed_undispatched(effects: &[Effect], ops: &BTreeMap<String, Operation>) -> usize {
    let undispatched: std::collections::HashSet<&str> = ops
        .values()
        .filter(|op| !op.dispatched)
        .filter_map(|op| op.request_id.as_deref())
        .collect();
    effects
        .iter()
        .filter(|e| undispatched.contains(e.request_id.as_str()))
        .count()
}

/// Match `effects` against `ops`, considering only operations of agents named `agent_prefix…`;
/// `trip_unix_us` is the moment engage returned.
pub fn match_effects(
    effects: &[Effect],
    ops: &BTreeMap<String, Operation>,
    agent_prefix: &str,
    trip_unix_us: i64,
) -> Matched {
    let trip_ms = trip_unix_us.div_euclid(1000);
    // When the gateway handed it upstream. An operation with no `dispatched` record was not
    // handed upstream, or its record is missing; one whose effect was executed anyway is
    // judged as admitted after the trip, so a missing record never hides an effect.
    let admitted_ms = |op: &Operation| op.dispatched_ms.unwrap_or(op.prepared_ms);
    let executed_at_ms = |op: &Operation| op.dispatched_ms.unwrap_or(i64::MAX);
    let ours: Vec<&Operation> = ops
        .values()
        .filter(|op| {
            op.agent
                .as_deref()
                .is_some_and(|a| a.starts_with(agent_prefix))
        })
        .collect();
    let by_request: HashMap<&str, &Operation> = ours
        .iter()
        .filter_map(|op| op.request_id.as_deref().map(|r| (r, *op)))
        .collect();
    let mut matched = Matched {
        effects: effects.len() as u64,
        operations_admitted_after_trip: ours
            .iter()
            .filter(|op| op.dispatched && admitted_ms(op) > trip_ms)
            .count() as u64,
        last_admission_ms: ours
            .iter()
            .filter(|op| op.dispatched)
            .map(|op| admitted_ms(op))
            .max(),
        ..Matched::default()
    };
    for effect in effects {
        let op = by_request.get(effect.request_id.as_str());
        let after = match op {
            None => {
                matched.bypass += 1;
                true
            }
            Some(op) => executed_at_ms(op) > trip_ms,
        };
        if after {
            match effect.kind {
                EffectKind::ToolCall => matched.tool_calls_after_trip += 1,
                EffectKind::Write => matched.writes_after_trip += 1,
                EffectKind::Model => matched.model_calls_after_trip += 1,
                EffectKind::A2aMessage => matched.a2a_messages_after_trip += 1,
            }
            if matched.examples.len() < 10 {
                matched.examples.push(json!({
                    "request_id": effect.request_id,
                    "kind": effect.kind,
                    "executed_after_trip_us": effect.at_unix_us - trip_unix_us,
                    "operation": op.map(|o| o.op.clone()),
                    "admitted_after_trip_ms": op.map(|o| admitted_ms(o) - trip_ms),
                }));
            }
        } else if effect.at_unix_us > trip_unix_us {
            matched.in_flight_at_trip += 1;
        }
    }
    matched
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::ops::OpKind;

    fn op(id: &str, request: &str, prepared: i64, dispatched: Option<i64>) -> Operation {
        Operation {
            op: id.into(),
            target: "mcp:drill:write".into(),
            kind: OpKind::Destination,
            agent: Some("drill-x-a0".into()),
            root: Some("drill-x-a0".into()),
            blocks: stopline_core::ops::Blocks::Agent("drill-x-a0".into()),
            request_id: Some(request.into()),
            prepared_ms: prepared,
            dispatched: dispatched.is_some(),
            dispatched_ms: dispatched,
            in_doubt: false,
            outcome: Some("committed".into()),
            writer: "gateway-1-1".into(),
            doubt: None,
            task: None,
        }
    }

    fn effect(request: &str, kind: EffectKind, at_us: i64) -> Effect {
        Effect {
            request_id: request.into(),
            kind,
            at_unix_us: at_us,
        }
    }

    #[test]
    fn before_in_flight_after_and_bypass_are_told_apart() {
        let trip_us = 10_000_500; // engage returned in ms 10_000
        let ops: BTreeMap<_, _> = [
            op("op_a", "1", 9_990, Some(9_995)), // admitted and executed before
            op("op_b", "2", 9_998, Some(10_000)), // admitted in the trip's ms, executed after
            op("op_c", "3", 9_999, Some(10_001)), // admitted after: a violation
            op("op_d", "4", 10_002, Some(10_003)), // admitted after, no effect seen
            op("op_e", "5", 9_997, Some(9_999)), // an A2A send admitted before the trip
            op("op_f", "6", 10_000, Some(10_004)), // an A2A send admitted after: a violation
        ]
        .into_iter()
        .map(|o| (o.op.clone(), o))
        .collect();
        let effects = [
            effect("1", EffectKind::Write, 9_996_000),
            effect("2", EffectKind::Write, 10_000_900),
            effect("3", EffectKind::ToolCall, 10_001_200),
            effect("99", EffectKind::Model, 10_002_000), // no operation: a bypass
            effect("5", EffectKind::A2aMessage, 9_999_500),
            effect("6", EffectKind::A2aMessage, 10_004_100),
        ];
        let m = match_effects(&effects, &ops, "drill-x-", trip_us);
        assert_eq!(m.in_flight_at_trip, 1);
        assert_eq!(m.tool_calls_after_trip, 1);
        assert_eq!(m.model_calls_after_trip, 1);
        assert_eq!(m.writes_after_trip, 0);
        assert_eq!(m.bypass, 1);
        assert_eq!(m.a2a_messages_after_trip, 1);
        assert_eq!(m.operations_admitted_after_trip, 3);
        assert_eq!(m.after_trip(), 3);
    }

    /// A gateway queues its `dispatched` records; one not (yet) written when the registry is
    /// read must not make an executed effect look admitted before the trip.
    #[test]
    fn an_effect_whose_dispatched_record_is_missing_counts_after_the_trip() {
        let trip_us = 10_000_500;
        let ops: BTreeMap<_, _> = [op("op_a", "1", 9_990, None)]
            .into_iter()
            .map(|o| (o.op.clone(), o))
            .collect();
        let effects = [effect("1", EffectKind::Write, 9_996_000)];
        assert_eq!(executed_undispatched(&effects, &ops), 1);
        let m = match_effects(&effects, &ops, "drill-x-", trip_us);
        assert_eq!((m.writes_after_trip, m.in_flight_at_trip), (1, 0));
        assert_eq!(m.after_trip(), 1);
    }

    #[test]
    fn operations_of_other_agents_never_match() {
        let mut other = op("op_z", "1", 1, Some(2));
        other.agent = Some("real-agent".into());
        let ops = BTreeMap::from([(other.op.clone(), other)]);
        let m = match_effects(
            &[effect("1", EffectKind::Write, 3_000)],
            &ops,
            "drill-x-",
            10_000,
        );
        assert_eq!((m.bypass, m.writes_after_trip), (1, 1));
    }
}
