//! Budgets and breakers for the local governor (no gateway in the path).
//!
//! The `tool_calls` budget is reserved before a call is admitted, so concurrent calls can never
//! overrun it; `wall_clock_s` is judged from the token's issue time. Exhausting a budget, or
//! reaching the `unauthorized_calls` threshold, trips the agent's breaker once: an agent latch
//! at the configured level engaged `by: "breaker:<kind>"`, then an `evidence-record.v1` saying
//! why. Counts live in this process only; the gateway's ledger is the one that spans processes.

use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use stopline_control::{engage, Context};
use stopline_core::budget::BudgetKind;
use stopline_core::{Level, Refusal, RefusalCode};
use stopline_token::Claims;

/// Per-agent counters and the trip action.
pub struct Breakers {
    ctx: Context,
    unauthorized_threshold: u64,
    trip_level: Level,
    tool_calls: Mutex<HashMap<String, u64>>,
    unauthorized: Mutex<HashMap<String, u64>>,
    tripped: Mutex<HashSet<(String, String)>>,
}

impl Breakers {
    /// Breakers over `ctx` with the `[breakers]` threshold and trip level.
    pub fn new(ctx: Context, unauthorized_threshold: u64, trip_level: Level) -> Breakers {
        Breakers {
            ctx,
            unauthorized_threshold,
            trip_level,
            tool_calls: Mutex::default(),
            unauthorized: Mutex::default(),
            tripped: Mutex::default(),
        }
    }

    /// Reserve one tool call against `claims`' budgets, or trip and refuse.
    pub fn reserve_tool_call(&self, claims: &Claims, now_s: i64) -> Result<(), Refusal> {
        let agent = claims.agent().map(|a| a.to_string()).unwrap_or_default();
        if let Some(&limit) = claims.budgets.get(&BudgetKind::WallClockS) {
            let elapsed = (now_s - claims.iat) as f64;
            if elapsed > limit {
                self.trip(&agent, "budget_exhausted", "wall_clock_s", limit, elapsed);
                return Err(Refusal::new(
                    RefusalCode::BudgetExhausted,
                    format!("wall_clock_s budget {limit} exhausted"),
                ));
            }
        }
        let Some(&limit) = claims.budgets.get(&BudgetKind::ToolCalls) else {
            return Ok(());
        };
        let observed = {
            let mut counts = self.tool_calls.lock().unwrap_or_else(|e| e.into_inner());
            let count = counts.entry(claims.jti.clone()).or_default();
            if (*count as f64) < limit {
                *count += 1;
                return Ok(());
            }
            *count + 1
        };
        self.trip(
            &agent,
            "budget_exhausted",
            "tool_calls",
            limit,
            observed as f64,
        );
        Err(Refusal::new(
            RefusalCode::BudgetExhausted,
            format!("tool_calls budget {limit} exhausted ({observed} needed)"),
        ))
    }

    /// Count a call refused by policy (`tool_not_allowed`).
    pub fn unauthorized(&self, agent: &str) {
        let observed = {
            let mut counts = self.unauthorized.lock().unwrap_or_else(|e| e.into_inner());
            let count = counts.entry(agent.to_string()).or_default();
            *count += 1;
            *count
        };
        if observed >= self.unauthorized_threshold {
            self.trip(
                agent,
                "breaker",
                "unauthorized_calls",
                self.unauthorized_threshold as f64,
                observed as f64,
            );
        }
    }

    /// Trip `agent`'s breaker once per trigger: the latch first, then the evidence.
    fn trip(&self, agent: &str, kind: &str, trigger: &str, threshold: f64, observed: f64) {
        if agent.is_empty()
            || !self
                .tripped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((agent.to_string(), trigger.to_string()))
        {
            return;
        }
        let caller = engage::Caller {
            token: None,
            by: Some(format!("breaker:{trigger}")),
            local: true,
        };
        let reason = format!("{kind}: {trigger} reached {observed} (threshold {threshold})");
        let latch = match engage::engage(
            &self.ctx,
            &caller,
            &format!("agent:{agent}"),
            Some(self.trip_level.as_str()),
            &reason,
        ) {
            Ok(receipt) => receipt["latch"]["id"].clone(),
            Err(refusal) => {
                tracing::error!(%agent, code = %refusal.code, "a breaker trip could not engage: {}", refusal.message);
                // An empty latch id: the schema's convention for a trip whose engage failed.
                Value::String(String::new())
            }
        };
        tracing::warn!(%agent, %kind, %trigger, observed, threshold, "breaker tripped");
        let record = json!({
            "schema": "evidence-record.v1", "agent": agent, "kind": kind, "trigger": trigger,
            "threshold": threshold, "observed": observed, "latch": latch,
            "ts": stopline_store::env::rfc3339(self.ctx.store.now_ms()),
        });
        if let Value::Object(record) = record {
            if let Err(error) = self.ctx.store.append_evidence(kind, record) {
                tracing::error!(%agent, "the evidence record was not written: {error}");
            }
        }
    }
}
