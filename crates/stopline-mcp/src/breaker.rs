//! Budgets and breakers for the local governor (no gateway in the path).
//!
//! The `tool_calls` budget is reserved before a call is admitted, so concurrent calls can never
//! overrun it; `wall_clock_s` is judged from the token's issue time. Exhausting a budget, or
//! reaching the `unauthorized_calls` threshold, trips the agent's breaker once per trigger
//! through `stopline_control::trip::trip`: an agent latch at the configured level engaged
//! `by: "breaker:<kind>"`, then an `evidence-record.v1` saying why. Counts live in this process only; the gateway's ledger is the one that spans processes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use stopline_control::trip::{Surface, Trip};
use stopline_control::Context;
use stopline_core::budget::BudgetKind;
use stopline_core::policy::ConditionMode;
use stopline_core::{BreakerKind, Level, Refusal, RefusalCode};
use stopline_token::Claims;

/// Per-agent counters and the trip action.
pub struct Breakers {
    ctx: Context,
    unauthorized_threshold: u64,
    /// `[breakers.mode] unauthorized_calls`.
    unauthorized_mode: ConditionMode,
    trip_level: Level,
    tool_calls: Mutex<HashMap<String, u64>>,
    unauthorized: Mutex<HashMap<String, u64>>,
    tripped: Mutex<HashSet<(String, String)>>,
}

impl Breakers {
    /// Breakers over `ctx` with the `[breakers]` threshold, its mode and the trip level.
    pub fn new(
        ctx: Context,
        unauthorized_threshold: u64,
        unauthorized_mode: ConditionMode,
        trip_level: Level,
    ) -> Breakers {
        Breakers {
            ctx,
            unauthorized_threshold,
            unauthorized_mode,
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
                self.trip(
                    &agent,
                    BreakerKind::BudgetExhausted,
                    "wall_clock_s",
                    limit,
                    elapsed,
                );
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
            BreakerKind::BudgetExhausted,
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
            let observed = *count;
            if observed >= self.unauthorized_threshold
                && self.unauthorized_mode == ConditionMode::Observe
            {
                // Only observed: recorded and alerted at each crossing, never tripped.
                *count = 0;
                drop(counts);
                self.observe(agent, observed);
                return;
            }
            observed
        };
        if observed >= self.unauthorized_threshold {
            self.trip(
                agent,
                BreakerKind::UnauthorizedCalls,
                "unauthorized_calls",
                self.unauthorized_threshold as f64,
                observed as f64,
            );
        }
    }

    /// An unauthorized-calls breaker that only observes, met: its evidence record, no latch.
    fn observe(&self, agent: &str, observed: u64) {
        if agent.is_empty() {
            return;
        }
        tracing::warn!(%agent, breaker = "unauthorized_calls", observed, "breaker met (observe only: nothing engaged)");
        let trip = Trip {
            agent: agent.to_string(),
            breaker: BreakerKind::UnauthorizedCalls,
            trigger: "unauthorized_calls".into(),
            threshold: self.unauthorized_threshold as f64,
            observed: observed as f64,
            level: self.trip_level,
            surface: Surface::Stdio,
            mode: ConditionMode::Observe,
        };
        stopline_control::trip::trip(&self.ctx, &trip);
    }

    /// Trip `agent`'s breaker once per trigger: the latch first, then the evidence
    /// (`stopline_control::trip::trip`, as the gateway and the run loop do).
    fn trip(
        &self,
        agent: &str,
        breaker: BreakerKind,
        trigger: &str,
        threshold: f64,
        observed: f64,
    ) {
        if agent.is_empty()
            || !self
                .tripped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert((agent.to_string(), trigger.to_string()))
        {
            return;
        }
        tracing::warn!(%agent, breaker = breaker.as_str(), %trigger, observed, threshold, "breaker tripped");
        let trip = Trip {
            agent: agent.to_string(),
            breaker,
            trigger: trigger.to_string(),
            threshold,
            observed,
            level: self.trip_level,
            surface: Surface::Stdio,
            mode: ConditionMode::Enforce,
        };
        stopline_control::trip::trip(&self.ctx, &trip);
    }
}
