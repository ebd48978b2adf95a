//! Policy cards (`policy-card.v1`): what a run must record before it starts (docs/reference.md §6).
//!
//! Validation is over a parsed JSON value (the caller converts TOML first) and names *every*
//! missing or invalid field at once, so an operator fixes a card in one pass. Free text is not a
//! stop condition; levels are a subset of the stop handle's three.

use crate::refusal::{Refusal, RefusalCode};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// The stop-condition kinds the gateway or supervisor enforces.
pub const STOP_CONDITION_KINDS: [&str; 5] = [
    "budget_exhausted",
    "breaker",
    "anomaly",
    "wall_clock",
    "manual",
];
/// The conditions that always stop: a card may not set them to observe (docs/reference.md §6).
pub const ALWAYS_ENFORCED: [&str; 2] = ["wall_clock", "budget_exhausted"];
/// The breakers whose mode a card's `breakers.mode` (and the gateway's `[breakers.mode]`) sets.
pub const MODAL_BREAKERS: [&str; 3] = ["unauthorized_calls", "refused_egress", "anomaly_score"];

/// What a met stop condition or tripped breaker does (docs/reference.md §6, §8).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConditionMode {
    /// Engage its latch and stop (the default).
    #[default]
    Enforce,
    /// Write its evidence record and raise the alert; engage nothing.
    Observe,
}

impl ConditionMode {
    /// `enforce` or `observe`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionMode::Enforce => "enforce",
            ConditionMode::Observe => "observe",
        }
    }

    fn parse(value: &Value) -> Option<ConditionMode> {
        serde_json::from_value(value.clone()).ok()
    }
}

/// The stop handle's levels.
pub const HANDLE_LEVELS: [&str; 3] = ["pause", "trip_breaker", "revoke_identity"];

/// A validated policy card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyCard {
    /// Always `policy-card.v1`.
    pub schema: String,
    /// The run id.
    pub run_id: String,
    /// The harness version (drills are recorded against it).
    pub harness_version: String,
    /// Stop conditions.
    pub stop_conditions: Vec<Value>,
    /// Per-agent budgets: agent → kind → limit.
    pub budgets: BTreeMap<String, BTreeMap<String, f64>>,
    /// Breaker thresholds.
    pub breakers: Value,
    /// The stop handle.
    pub stop_handle: StopHandle,
    /// Target time to stop.
    pub time_to_stop_target_ms: u64,
    /// Whether a passing drill of this harness version is required.
    pub require_drill: bool,
    /// Process and memory ceilings of each agent (optional; `pids` defaults to 4096).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<Limits>,
}

impl PolicyCard {
    /// The card's conditions and breakers that only observe, by name: `stop_conditions[i]:<kind>`
    /// and `breakers.<breaker>`, in the card's order (empty when everything enforces).
    pub fn observe_only(&self) -> Vec<String> {
        let observe = |mode: Option<&Value>| {
            mode.and_then(ConditionMode::parse) == Some(ConditionMode::Observe)
        };
        let mut names: Vec<String> = self
            .stop_conditions
            .iter()
            .enumerate()
            .filter(|(_, c)| observe(c.get("mode")))
            .map(|(i, c)| {
                let kind = c.get("kind").and_then(Value::as_str).unwrap_or("?");
                format!("stop_conditions[{i}]:{kind}")
            })
            .collect();
        if let Some(modes) = self.breakers.get("mode").and_then(Value::as_object) {
            names.extend(
                modes
                    .iter()
                    .filter(|(_, mode)| observe(Some(mode)))
                    .map(|(breaker, _)| format!("breakers.{breaker}")),
            );
        }
        names
    }
}

/// The card's `limits`: ceilings the supervisor sets on each agent's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Processes (and threads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Memory in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
}

/// The stop handle of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StopHandle {
    /// Its name.
    pub name: String,
    /// Levels it can apply.
    pub levels: Vec<String>,
    /// Who may pull it.
    pub who_may_pull: Vec<String>,
    /// Who may approve a restart.
    pub who_may_approve_restart: Vec<String>,
}

fn nonempty_str(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str)
        .is_some_and(|s| !s.trim().is_empty())
}

/// Validate a card, naming every missing or invalid field (`policy_card_incomplete`).
pub fn validate(card: &Value) -> Result<PolicyCard, Refusal> {
    let mut missing: Vec<String> = Vec::new();
    let get = |path: &str| card.pointer(path);
    if get("/schema").and_then(Value::as_str) != Some("policy-card.v1") {
        missing.push("schema (must be \"policy-card.v1\")".into());
    }
    for field in ["run_id", "harness_version"] {
        if !nonempty_str(get(&format!("/{field}"))) {
            missing.push(field.into());
        }
    }
    if let Some(run) = get("/run_id").and_then(Value::as_str) {
        if crate::scope::Name::parse(run).is_err() {
            missing.push("run_id (must be [a-z0-9][a-z0-9._-]{0,63})".into());
        }
    }
    match get("/stop_conditions").and_then(Value::as_array) {
        Some(conditions) if !conditions.is_empty() => {
            for (i, c) in conditions.iter().enumerate() {
                let kind = c.get("kind").and_then(Value::as_str);
                if !kind.is_some_and(|k| STOP_CONDITION_KINDS.contains(&k)) {
                    missing.push(format!(
                        "stop_conditions[{i}].kind (one of {})",
                        STOP_CONDITION_KINDS.join(", ")
                    ));
                }
                if kind == Some("anomaly") && c.get("threshold").and_then(Value::as_f64).is_none() {
                    missing.push(format!("stop_conditions[{i}].threshold"));
                }
                match c.get("mode").map(ConditionMode::parse) {
                    None | Some(Some(ConditionMode::Enforce)) => {}
                    Some(Some(ConditionMode::Observe)) => {
                        if let Some(kind) = kind.filter(|k| ALWAYS_ENFORCED.contains(k)) {
                            missing.push(format!(
                                "stop_conditions[{i}].mode ({kind} always enforces: a run must stop when it is met)"
                            ));
                        }
                    }
                    Some(None) => {
                        missing.push(format!("stop_conditions[{i}].mode (enforce or observe)"))
                    }
                }
            }
        }
        _ => missing.push("stop_conditions".into()),
    }
    match get("/budgets").and_then(Value::as_object) {
        Some(agents) if !agents.is_empty() => {
            for (agent, budgets) in agents {
                if crate::scope::Name::parse(agent).is_err() {
                    missing.push(format!("budgets.{agent} (not a valid agent name)"));
                }
                match budgets.as_object() {
                    Some(map) if !map.is_empty() => {
                        for (kind, limit) in map {
                            if crate::budget::BudgetKind::parse(kind).is_none() {
                                missing
                                    .push(format!("budgets.{agent}.{kind} (unknown budget kind)"));
                            }
                            if !limit.as_f64().is_some_and(|l| l.is_finite() && l >= 0.0) {
                                missing
                                    .push(format!("budgets.{agent}.{kind} (must be a number ≥ 0)"));
                            }
                        }
                    }
                    _ => missing.push(format!("budgets.{agent}")),
                }
            }
        }
        _ => missing.push("budgets".into()),
    }
    match get("/breakers").and_then(Value::as_object) {
        Some(b) => {
            for field in ["unauthorized_calls", "refused_egress", "anomaly_score"] {
                if !b.get(field).is_some_and(Value::is_number) {
                    missing.push(format!("breakers.{field}"));
                }
            }
            match b.get("mode") {
                None => {}
                Some(Value::Object(modes)) => {
                    for (breaker, mode) in modes {
                        if !MODAL_BREAKERS.contains(&breaker.as_str()) {
                            missing.push(format!(
                                "breakers.mode.{breaker} (one of {}; budget_exhausted always enforces)",
                                MODAL_BREAKERS.join(", ")
                            ));
                        } else if ConditionMode::parse(mode).is_none() {
                            missing.push(format!("breakers.mode.{breaker} (enforce or observe)"));
                        }
                    }
                }
                Some(_) => missing
                    .push("breakers.mode (a table of breaker = \"enforce\" or \"observe\")".into()),
            }
            if let Some(level) = b.get("trip_level") {
                if level
                    .as_str()
                    .is_none_or(|l| crate::admission::Level::parse(l).is_err())
                {
                    missing.push(
                        "breakers.trip_level (halt-noncritical, halt-all or emergency)".into(),
                    );
                }
            }
        }
        None => missing.push("breakers".into()),
    }
    if !nonempty_str(get("/stop_handle/name")) {
        missing.push("stop_handle.name".into());
    }
    match get("/stop_handle/levels").and_then(Value::as_array) {
        Some(levels)
            if !levels.is_empty()
                && levels
                    .iter()
                    .all(|l| l.as_str().is_some_and(|l| HANDLE_LEVELS.contains(&l))) => {}
        _ => missing.push(
            "stop_handle.levels (a non-empty subset of pause, trip_breaker, revoke_identity)"
                .into(),
        ),
    }
    for field in ["who_may_pull", "who_may_approve_restart"] {
        let ok = get(&format!("/stop_handle/{field}"))
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty() && a.iter().all(|v| nonempty_str(Some(v))));
        if !ok {
            missing.push(format!("stop_handle.{field}"));
        }
    }
    if get("/time_to_stop_target_ms")
        .and_then(Value::as_u64)
        .is_none_or(|t| t == 0)
    {
        missing.push("time_to_stop_target_ms".into());
    }
    if !get("/require_drill").is_some_and(Value::is_boolean) {
        missing.push("require_drill".into());
    }
    if let Some(limits) = get("/limits") {
        match limits.as_object() {
            Some(map) => {
                for (key, value) in map {
                    if !["pids", "memory_mb"].contains(&key.as_str()) {
                        missing.push(format!("limits.{key} (unknown limit; pids or memory_mb)"));
                    } else if value.as_u64().is_none_or(|n| n == 0) {
                        missing.push(format!("limits.{key} (must be an integer ≥ 1)"));
                    }
                }
            }
            None => missing.push("limits (an object with pids and/or memory_mb)".into()),
        }
    }
    if !missing.is_empty() {
        return Err(Refusal::new(
            RefusalCode::PolicyCardIncomplete,
            format!(
                "the policy card is missing or has invalid: {}",
                missing.join(", ")
            ),
        ));
    }
    serde_json::from_value(card.clone()).map_err(|e| {
        Refusal::new(
            RefusalCode::PolicyCardIncomplete,
            format!("the policy card does not parse: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Value {
        serde_json::json!({"schema":"policy-card.v1","run_id":"eval-88220","harness_version":"harness-3.2.1",
            "stop_conditions":[{"kind":"budget_exhausted"},{"kind":"breaker"},{"kind":"anomaly","threshold":0.9},{"kind":"wall_clock"},{"kind":"manual"}],
            "budgets":{"agent-a":{"steps":200,"tool_calls":500,"tokens":2000000,"spend_usd":5.0,"wall_clock_s":1800}},
            "breakers":{"unauthorized_calls":5,"refused_egress":3,"anomaly_score":0.9,"trip_level":"halt-all"},
            "stop_handle":{"name":"eval-stop","levels":["pause","trip_breaker","revoke_identity"],"who_may_pull":["anyone-admitted"],"who_may_approve_restart":["operator"]},
            "time_to_stop_target_ms":1000,"require_drill":false})
    }

    #[test]
    fn the_spec_example_is_complete() {
        assert_eq!(validate(&example()).unwrap().run_id, "eval-88220");
    }

    /// What must stop is never only observed; anything else may be, and is named.
    #[test]
    fn modes_observe_anything_but_the_wall_clock_and_budgets() {
        let mut card = example();
        assert!(validate(&card).unwrap().observe_only().is_empty());
        card["stop_conditions"][2]["mode"] = "observe".into();
        card["stop_conditions"][1]["mode"] = "enforce".into();
        card["breakers"]["mode"] = serde_json::json!({"anomaly_score": "observe"});
        assert_eq!(
            validate(&card).unwrap().observe_only(),
            ["stop_conditions[2]:anomaly", "breakers.anomaly_score"]
        );
        for (condition, mode, named) in [
            (
                0,
                "observe",
                "stop_conditions[0].mode (budget_exhausted always enforces",
            ),
            (
                3,
                "observe",
                "stop_conditions[3].mode (wall_clock always enforces",
            ),
            (4, "watch", "stop_conditions[4].mode (enforce or observe)"),
        ] {
            let mut bad = card.clone();
            bad["stop_conditions"][condition]["mode"] = mode.into();
            let refusal = validate(&bad).unwrap_err();
            assert_eq!(refusal.code, RefusalCode::PolicyCardIncomplete);
            assert!(refusal.message.contains(named), "{}", refusal.message);
        }
        let mut loud = card.clone();
        loud["breakers"]["mode"]["anomaly_score"] = "loud".into();
        assert!(validate(&loud)
            .unwrap_err()
            .message
            .contains("breakers.mode.anomaly_score (enforce or observe)"));
        let mut budget = card.clone();
        budget["breakers"]["mode"] = serde_json::json!({"budget_exhausted": "observe"});
        assert!(validate(&budget)
            .unwrap_err()
            .message
            .contains("breakers.mode.budget_exhausted"));
    }

    #[test]
    fn limits_are_optional_and_checked_when_given() {
        let mut card = example();
        card["limits"] = serde_json::json!({"pids": 64, "memory_mb": 512});
        let limits = validate(&card).unwrap().limits.unwrap();
        assert_eq!((limits.pids, limits.memory_mb), (Some(64), Some(512)));
        for bad in [
            serde_json::json!({"pids": 0}),
            serde_json::json!({"pids": -1}),
            serde_json::json!({"cpus": 2}),
            serde_json::json!("many"),
        ] {
            card["limits"] = bad.clone();
            let err = validate(&card).unwrap_err();
            assert!(err.message.contains("limits"), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn every_missing_field_is_named() {
        let err = validate(&serde_json::json!({"schema":"policy-card.v1"})).unwrap_err();
        assert_eq!(err.code, RefusalCode::PolicyCardIncomplete);
        for field in [
            "run_id",
            "harness_version",
            "stop_conditions",
            "budgets",
            "breakers",
            "stop_handle.name",
            "time_to_stop_target_ms",
            "require_drill",
        ] {
            assert!(
                err.message.contains(field),
                "{field} not named in {}",
                err.message
            );
        }
        let mut card = example();
        card["stop_conditions"] = serde_json::json!([{"kind":"when it feels wrong"}]);
        assert!(validate(&card)
            .unwrap_err()
            .message
            .contains("stop_conditions[0].kind"));
    }
}
