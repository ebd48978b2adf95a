//! Reading the policy card a run is started under: JSON or TOML (converted to JSON), validated by
//! `stopline_core::policy::validate`, which names every missing field at once.
//!
//! Nothing here starts anything or writes anything: a card that fails here leaves no trace. The
//! agent a run supervises is `--agent`, or the only agent in the card's budgets; an ambiguous or
//! unknown agent is refused before anything starts.

use serde_json::Value;
use std::path::Path;
use stopline_core::budget::{BudgetKind, Budgets};
use stopline_core::policy::{self, PolicyCard};
use stopline_core::{Label, Level, Name, Refusal, RefusalCode};

/// The token lifetime when the card sets no `wall_clock_s` budget for the agent.
pub const DEFAULT_TTL_S: u64 = 3600;

/// A validated card, the JSON it was validated from (what is recorded), and the chosen agent.
#[derive(Debug, Clone)]
pub struct LoadedCard {
    /// The card as JSON (TOML cards converted), exactly what was validated.
    pub json: Value,
    /// The validated card.
    pub card: PolicyCard,
    /// The run id.
    pub run_id: Name,
    /// The agent this run supervises.
    pub agent: Name,
}

impl LoadedCard {
    /// The agent's budgets from the card, in the token's terms.
    pub fn budgets(&self) -> Budgets {
        self.card
            .budgets
            .get(self.agent.as_str())
            .into_iter()
            .flatten()
            .filter_map(|(kind, limit)| BudgetKind::parse(kind).map(|kind| (kind, *limit)))
            .collect()
    }

    /// The card's `labels` (`{"KEY": "VALUE", …}`, absent: none), signed into the run's token
    /// (docs/reference.md §6). A label that is not two names is `policy_card_incomplete`.
    pub fn labels(&self) -> Result<Vec<Label>, Refusal> {
        let Some(labels) = self.json.get("labels") else {
            return Ok(Vec::new());
        };
        let invalid = |why: String| Refusal::new(RefusalCode::PolicyCardIncomplete, why);
        let object = labels
            .as_object()
            .ok_or_else(|| invalid("labels must be a table of KEY = \"VALUE\"".into()))?;
        object
            .iter()
            .map(|(key, value)| {
                let value = value
                    .as_str()
                    .ok_or_else(|| invalid(format!("label {key} must be a string")))?;
                Label::parse(&format!("{key}={value}"))
                    .map_err(|refusal| invalid(format!("labels: {}", refusal.message)))
            })
            .collect()
    }

    /// The agent's `wall_clock_s` budget, if the card sets one.
    pub fn wall_clock_s(&self) -> Option<f64> {
        self.budgets().get(&BudgetKind::WallClockS).copied()
    }

    /// The token's lifetime: the wall-clock budget (rounded up, at least 1 s), else 3600 s.
    pub fn ttl_s(&self) -> u64 {
        match self.wall_clock_s() {
            Some(seconds) => (seconds.ceil() as u64).max(1),
            None => DEFAULT_TTL_S,
        }
    }

    /// The level a breaker of this card trips at (`breakers.trip_level`, default `halt-all`).
    pub fn trip_level(&self) -> Level {
        self.card
            .breakers
            .get("trip_level")
            .and_then(Value::as_str)
            .and_then(|level| Level::parse(level).ok())
            .unwrap_or(Level::HaltAll)
    }
}

fn incomplete(message: String) -> Refusal {
    Refusal::new(RefusalCode::PolicyCardIncomplete, message)
}

/// Parse card text: JSON when it parses as JSON, else TOML, converted to JSON.
pub fn parse_text(text: &str, path: &Path) -> Result<Value, Refusal> {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return Ok(value);
    }
    let table: toml::Value = toml::from_str(text).map_err(|e| {
        incomplete(format!(
            "{}: neither JSON nor TOML: {}",
            path.display(),
            e.message()
        ))
    })?;
    serde_json::to_value(table)
        .map_err(|e| incomplete(format!("{}: cannot convert TOML: {e}", path.display())))
}

/// Load, validate and choose the agent. Every refusal is `policy_card_incomplete` except an
/// agent the card does not name, which is `bad_request`.
pub fn load(path: &Path, agent: Option<&str>) -> Result<LoadedCard, Refusal> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| incomplete(format!("{}: {e}", path.display())))?;
    let json = parse_text(&text, path)?;
    let card = policy::validate(&json)?;
    let run_id = Name::parse(&card.run_id)?;
    let agent = choose_agent(&card, agent)?;
    let loaded = LoadedCard {
        json,
        card,
        run_id,
        agent,
    };
    loaded.labels()?;
    Ok(loaded)
}

fn choose_agent(card: &PolicyCard, agent: Option<&str>) -> Result<Name, Refusal> {
    let named: Vec<&String> = card.budgets.keys().collect();
    match agent {
        Some(agent) => {
            let agent = Name::parse(agent)?;
            if card.budgets.contains_key(agent.as_str()) {
                Ok(agent)
            } else {
                Err(Refusal::new(
                    RefusalCode::BadRequest,
                    format!(
                        "--agent {agent}: the policy card has no budgets for it (agents: {named:?})"
                    ),
                ))
            }
        }
        None if named.len() == 1 => Name::parse(named[0]),
        None => Err(Refusal::new(
            RefusalCode::BadRequest,
            format!(
                "the policy card names {} agents ({named:?}): choose one with --agent",
                named.len()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOML_CARD: &str = r#"
schema = "policy-card.v1"
run_id = "eval-1"
harness_version = "h-1"
time_to_stop_target_ms = 1000
require_drill = false
stop_conditions = [{ kind = "manual" }, { kind = "wall_clock" }]
[budgets.agent-a]
wall_clock_s = 2.5
tool_calls = 10
[budgets.agent-b]
steps = 3
[breakers]
unauthorized_calls = 5
refused_egress = 3
anomaly_score = 0.9
[stop_handle]
name = "stop"
levels = ["pause"]
who_may_pull = ["anyone-admitted"]
who_may_approve_restart = ["operator"]
"#;

    #[test]
    fn toml_cards_validate_as_json_and_the_agent_must_be_unambiguous() {
        let json = parse_text(TOML_CARD, Path::new("card.toml")).unwrap();
        let card = policy::validate(&json).unwrap();
        assert_eq!(
            choose_agent(&card, None).unwrap_err().code,
            RefusalCode::BadRequest
        );
        let agent = choose_agent(&card, Some("agent-a")).unwrap();
        let loaded = LoadedCard {
            json,
            run_id: Name::parse(&card.run_id).unwrap(),
            card,
            agent,
        };
        assert_eq!(loaded.ttl_s(), 3);
        assert_eq!(loaded.budgets().get(&BudgetKind::ToolCalls), Some(&10.0));
        assert_eq!(loaded.trip_level(), Level::HaltAll);
    }

    /// The JSON Schema in `schemas/` and the validator agree on what is required: every field the
    /// schema requires (top level and stop handle) is one the validator names when it is missing.
    #[test]
    fn the_schema_requires_what_the_validator_requires() {
        let schema: Value =
            serde_json::from_str(include_str!("../../../schemas/policy-card.v1.json")).unwrap();
        let refusal = policy::validate(&serde_json::json!({"stop_handle": {}})).unwrap_err();
        let required = |pointer: &str| -> Vec<String> {
            schema
                .pointer(pointer)
                .and_then(Value::as_array)
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        for field in required("/required") {
            assert!(
                refusal.message.contains(&field),
                "{field}: {}",
                refusal.message
            );
        }
        for field in required("/properties/stop_handle/required") {
            let named = format!("stop_handle.{field}");
            assert!(
                refusal.message.contains(&named),
                "{named}: {}",
                refusal.message
            );
        }
        let kinds = schema
            .pointer("/$defs/stop_condition/properties/kind/enum")
            .unwrap();
        assert_eq!(kinds, &serde_json::json!(policy::STOP_CONDITION_KINDS));
        let levels = schema
            .pointer("/properties/stop_handle/properties/levels/items/enum")
            .unwrap();
        assert_eq!(levels, &serde_json::json!(policy::HANDLE_LEVELS));
    }

    #[test]
    fn garbage_is_incomplete() {
        let err = parse_text("{{{", Path::new("x")).unwrap_err();
        assert_eq!(err.code, RefusalCode::PolicyCardIncomplete);
    }
}
