//! Budgets: the kinds an authority can carry, and the rule that a child's fit inside its parent's.
//!
//! Budgets travel with the authority (signed into tokens). Enforcement — reservation before
//! dispatch and settlement after — belongs to the gateway; this module only names the kinds and
//! compares limits.

use crate::refusal::{Refusal, RefusalCode};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A budget kind (docs/reference.md §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    /// Model requests.
    Steps,
    /// Tool calls.
    ToolCalls,
    /// Model tokens, input and output.
    Tokens,
    /// Spend in US dollars.
    SpendUsd,
    /// Wall-clock seconds since the authority was issued.
    WallClockS,
}

impl BudgetKind {
    /// Every kind.
    pub const ALL: [BudgetKind; 5] = [
        BudgetKind::Steps,
        BudgetKind::ToolCalls,
        BudgetKind::Tokens,
        BudgetKind::SpendUsd,
        BudgetKind::WallClockS,
    ];

    /// The stable string form.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Steps => "steps",
            BudgetKind::ToolCalls => "tool_calls",
            BudgetKind::Tokens => "tokens",
            BudgetKind::SpendUsd => "spend_usd",
            BudgetKind::WallClockS => "wall_clock_s",
        }
    }

    /// Parse a kind name.
    pub fn parse(text: &str) -> Option<BudgetKind> {
        BudgetKind::ALL.into_iter().find(|k| k.as_str() == text)
    }
}

impl fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Limits by kind. Absent kinds are unlimited.
pub type Budgets = BTreeMap<BudgetKind, f64>;

/// Parse `KIND=N` (as given to `--budget`). N must be finite and ≥ 0.
pub fn parse_budget_arg(arg: &str) -> Result<(BudgetKind, f64), Refusal> {
    let bad = |why: &str| Refusal::new(RefusalCode::BadRequest, format!("--budget {arg:?}: {why}"));
    let (kind, value) = arg.split_once('=').ok_or_else(|| bad("expected KIND=N"))?;
    let kind = BudgetKind::parse(kind.trim()).ok_or_else(|| bad("unknown kind"))?;
    let value: f64 = value.trim().parse().map_err(|_| bad("not a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(bad("must be a finite number ≥ 0"));
    }
    Ok((kind, value))
}

/// The budgets a child gets: each requested limit must fit inside the parent's; a kind the
/// parent limits and the child does not name is inherited at the parent's limit.
pub fn carve(parent: &Budgets, requested: &Budgets) -> Result<Budgets, Refusal> {
    let mut child = parent.clone();
    for (&kind, &limit) in requested {
        if !limit.is_finite() || limit < 0.0 {
            return Err(Refusal::new(
                RefusalCode::BadRequest,
                format!("{kind} must be ≥ 0"),
            ));
        }
        if let Some(&cap) = parent.get(&kind) {
            if limit > cap {
                return Err(Refusal::new(
                    RefusalCode::BudgetExhausted,
                    format!("child {kind} {limit} exceeds the parent's {cap}"),
                ));
            }
        }
        child.insert(kind, limit);
    }
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_budgets_fit_inside_the_parent() {
        let parent: Budgets = [(BudgetKind::ToolCalls, 10.0)].into();
        let ok = carve(&parent, &[(BudgetKind::ToolCalls, 4.0)].into()).unwrap();
        assert_eq!(ok[&BudgetKind::ToolCalls], 4.0);
        assert!(carve(&parent, &[(BudgetKind::ToolCalls, 11.0)].into()).is_err());
        let inherited = carve(&parent, &Budgets::new()).unwrap();
        assert_eq!(inherited, parent);
        assert_eq!(
            parse_budget_arg("spend_usd=0.5").unwrap(),
            (BudgetKind::SpendUsd, 0.5)
        );
        assert!(parse_budget_arg("spend_usd=-1").is_err());
        assert!(parse_budget_arg("calls=1").is_err());
    }
}
