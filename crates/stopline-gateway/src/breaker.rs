//! Breakers: per-agent counters that trip into an agent-scoped latch, and per-upstream adapter
//! breakers (closed / open / half-open on consecutive failures, forced open on EMERGENCY).
//!
//! This module only counts and decides; engaging the latch, writing the evidence record and
//! raising the alert belong to `trip.rs`. An agent breaker trips once: until its latch is gone
//! from the view, the agent's calls are refused `breaker_open` even before the view shows it.

use crate::config::BreakerConfig;
use crate::error::ADAPTER_PREFIX;
use foldhash::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use stopline_core::{Refusal, RefusalCode};

/// The kinds of agent breaker (docs/reference.md §8), shared with every surface that trips.
pub use stopline_core::BreakerKind;

/// A trip to carry out: what crossed which threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct TripOrder {
    /// The agent.
    pub agent: String,
    /// The breaker.
    pub kind: BreakerKind,
    /// What happened last (e.g. `tool_not_allowed mcp:s:t`, `tool_calls`).
    pub trigger: String,
    /// The threshold.
    pub threshold: f64,
    /// The observed value.
    pub observed: f64,
    /// The route of the request that tripped it (for the log).
    pub route: std::sync::Arc<str>,
    /// True when the breaker only observes (`[breakers.mode]`): record and alert, engage
    /// nothing, keep admitting the agent.
    pub observe: bool,
}

#[derive(Debug, Default, Clone)]
struct AgentCounters {
    unauthorized: u32,
    refused_egress: u32,
    last_anomaly: Option<f64>,
    tripped: Option<String>,
}

/// One agent's breaker as the status page shows it (`GET /v1/budgets`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AgentBreakerSummary {
    /// The agent.
    pub agent: String,
    /// Unauthorized calls counted since the breaker was last reset.
    pub unauthorized_calls: u32,
    /// Refused egress attempts counted since the breaker was last reset.
    pub refused_egress: u32,
    /// The last anomaly score a monitor reported.
    pub last_anomaly_score: Option<f64>,
    /// Whether the breaker is tripped.
    pub tripped: bool,
    /// The latch file the trip engaged (absent while the trip is still being engaged).
    pub latch: Option<String>,
}

/// Per-agent counters.
#[derive(Debug, Default)]
pub struct AgentBreakers {
    agents: Mutex<HashMap<String, AgentCounters>>,
}

impl AgentBreakers {
    /// Count one event of `kind` (with `value` for anomaly scores); returns a trip order when a
    /// threshold is crossed for the first time.
    pub fn note(
        &self,
        config: &BreakerConfig,
        agent: &str,
        kind: BreakerKind,
        trigger: &str,
        value: f64,
    ) -> Option<TripOrder> {
        self.note_counted(config, agent, kind, trigger, value, None)
    }

    /// True while `agent`'s breaker is tripped here.
    pub fn is_tripped(&self, agent: &str) -> bool {
        let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents.get(agent).is_some_and(|c| c.tripped.is_some())
    }

    /// [`AgentBreakers::note`], with the event already counted elsewhere: `counted` is the
    /// fleet's count of `kind` after it (`None`: count it here).
    pub fn note_counted(
        &self,
        config: &BreakerConfig,
        agent: &str,
        kind: BreakerKind,
        trigger: &str,
        value: f64,
        counted: Option<u32>,
    ) -> Option<TripOrder> {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let counters = agents.entry(agent.to_string()).or_default();
        if kind == BreakerKind::AnomalyScore {
            counters.last_anomaly = Some(value);
        }
        if counters.tripped.is_some() {
            return None;
        }
        let (observed, threshold) = match kind {
            BreakerKind::UnauthorizedCalls => {
                counters.unauthorized = counted.unwrap_or(counters.unauthorized + 1);
                (
                    counters.unauthorized as f64,
                    config.unauthorized_calls as f64,
                )
            }
            BreakerKind::RefusedEgress => {
                counters.refused_egress = counted.unwrap_or(counters.refused_egress + 1);
                (counters.refused_egress as f64, config.refused_egress as f64)
            }
            BreakerKind::AnomalyScore => (value, config.anomaly_score),
            BreakerKind::BudgetExhausted => (value, value),
        };
        if observed < threshold {
            return None;
        }
        let observe = config.mode.of(kind) == stopline_core::policy::ConditionMode::Observe;
        if observe {
            // Met, and only observed: the count starts again, so the next crossing is
            // recorded too, and the agent is never refused for it.
            match kind {
                BreakerKind::UnauthorizedCalls => counters.unauthorized = 0,
                BreakerKind::RefusedEgress => counters.refused_egress = 0,
                BreakerKind::AnomalyScore | BreakerKind::BudgetExhausted => {}
            }
        } else {
            counters.tripped = Some(String::new());
        }
        Some(TripOrder {
            agent: agent.to_string(),
            kind,
            trigger: trigger.to_string(),
            threshold,
            observed,
            route: crate::logs::route(),
            observe,
        })
    }

    /// Record the latch a trip engaged.
    pub fn tripped(&self, agent: &str, latch_file: &str) {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents.entry(agent.to_string()).or_default().tripped = Some(latch_file.to_string());
    }

    /// The refusal for an agent whose breaker is tripped and whose latch `still_active` says is
    /// still in the view; an agent whose latch was lifted gets fresh counters.
    pub fn check(&self, agent: &str, still_active: impl Fn(&str) -> bool) -> Option<Refusal> {
        let mut agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let counters = agents.get_mut(agent)?;
        let latch = counters.tripped.clone()?;
        if latch.is_empty() || still_active(&latch) {
            return Some(Refusal::new(
                RefusalCode::BreakerOpen,
                format!("agent {agent}'s breaker is tripped ({latch})"),
            ));
        }
        *counters = AgentCounters::default();
        None
    }

    /// Every agent this gateway counted anything for, sorted by name.
    pub fn summaries(&self) -> Vec<AgentBreakerSummary> {
        let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<AgentBreakerSummary> = agents
            .iter()
            .map(|(agent, c)| AgentBreakerSummary {
                agent: agent.clone(),
                unauthorized_calls: c.unauthorized,
                refused_egress: c.refused_egress,
                last_anomaly_score: c.last_anomaly,
                tripped: c.tripped.is_some(),
                latch: c.tripped.clone().filter(|l| !l.is_empty()),
            })
            .collect();
        rows.sort_by(|a, b| a.agent.cmp(&b.agent));
        rows
    }

    /// Agents whose breaker is tripped.
    pub fn tripped_agents(&self) -> Vec<String> {
        let agents = self.agents.lock().unwrap_or_else(|p| p.into_inner());
        agents
            .iter()
            .filter(|(_, c)| c.tripped.is_some())
            .map(|(a, _)| a.clone())
            .collect()
    }
}

/// The state of one adapter breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterState {
    /// Calls pass.
    Closed,
    /// Calls are refused until the cooldown ends.
    Open,
    /// One trial call is allowed.
    HalfOpen,
    /// Refused because the machine is at EMERGENCY.
    ForcedOpen,
}

impl AdapterState {
    /// The state's name (`closed`, `half-open`, `open`, `forced-open`).
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterState::Closed => "closed",
            AdapterState::HalfOpen => "half-open",
            AdapterState::Open => "open",
            AdapterState::ForcedOpen => "forced-open",
        }
    }

    /// Gauge value for metrics: 0 closed, 1 half-open, 2 open, 3 forced open.
    pub fn gauge(self) -> i64 {
        match self {
            AdapterState::Closed => 0,
            AdapterState::HalfOpen => 1,
            AdapterState::Open => 2,
            AdapterState::ForcedOpen => 3,
        }
    }
}

#[derive(Debug, Clone)]
struct Adapter {
    failures: u32,
    opened: Option<Instant>,
    trial_out: bool,
}

/// Adapter breakers by upstream name (`model`, `mcp:<server>`).
#[derive(Debug, Default)]
pub struct AdapterBreakers {
    adapters: Mutex<HashMap<String, Adapter>>,
}

impl AdapterBreakers {
    fn state_of(adapter: &Adapter, cooldown: Duration) -> AdapterState {
        match adapter.opened {
            None => AdapterState::Closed,
            Some(at) if at.elapsed() >= cooldown => AdapterState::HalfOpen,
            Some(_) => AdapterState::Open,
        }
    }

    /// Admit a call to `upstream`, or refuse it `breaker_open` (forced when `emergency`).
    pub fn admit(
        &self,
        config: &BreakerConfig,
        upstream: &str,
        emergency: bool,
    ) -> Result<(), Refusal> {
        if emergency {
            return Err(Refusal::new(
                RefusalCode::BreakerOpen,
                format!("{ADAPTER_PREFIX}{upstream} is forced open: the machine is at EMERGENCY"),
            ));
        }
        let cooldown = Duration::from_millis(config.adapter_cooldown_ms);
        let mut adapters = self.adapters.lock().unwrap_or_else(|p| p.into_inner());
        let Some(adapter) = adapters.get_mut(upstream) else {
            return Ok(());
        };
        match AdapterBreakers::state_of(adapter, cooldown) {
            AdapterState::Closed => Ok(()),
            AdapterState::HalfOpen if !adapter.trial_out => {
                adapter.trial_out = true;
                Ok(())
            }
            _ => Err(Refusal::new(
                RefusalCode::BreakerOpen,
                format!(
                    "{ADAPTER_PREFIX}{upstream} is open after {} consecutive failures",
                    adapter.failures
                ),
            )),
        }
    }

    /// Record the result of a call that reached (or tried to reach) `upstream`.
    pub fn record(&self, config: &BreakerConfig, upstream: &str, ok: bool) {
        let mut adapters = self.adapters.lock().unwrap_or_else(|p| p.into_inner());
        let adapter = adapters.entry(upstream.to_string()).or_insert(Adapter {
            failures: 0,
            opened: None,
            trial_out: false,
        });
        adapter.trial_out = false;
        if ok {
            adapter.failures = 0;
            adapter.opened = None;
        } else {
            adapter.failures += 1;
            if adapter.failures >= config.adapter_failures.max(1) || adapter.opened.is_some() {
                adapter.opened = Some(Instant::now());
            }
        }
    }

    /// Every adapter's state (forced open when `emergency`).
    pub fn states(&self, config: &BreakerConfig, emergency: bool) -> Vec<(String, AdapterState)> {
        let cooldown = Duration::from_millis(config.adapter_cooldown_ms);
        let adapters = self.adapters.lock().unwrap_or_else(|p| p.into_inner());
        adapters
            .iter()
            .map(|(name, a)| {
                let state = if emergency {
                    AdapterState::ForcedOpen
                } else {
                    AdapterBreakers::state_of(a, cooldown)
                };
                (name.clone(), state)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_breaker_trips_once_at_the_threshold() {
        let config = BreakerConfig {
            unauthorized_calls: 2,
            ..BreakerConfig::default()
        };
        let breakers = AgentBreakers::default();
        let kind = BreakerKind::UnauthorizedCalls;
        assert!(breakers.note(&config, "w", kind, "t", 0.0).is_none());
        let order = breakers.note(&config, "w", kind, "t", 0.0).unwrap();
        assert_eq!((order.observed, order.threshold), (2.0, 2.0));
        assert!(breakers.note(&config, "w", kind, "t", 0.0).is_none());
        breakers.tripped("w", "latch_1.json");
        let summary = &breakers.summaries()[0];
        assert_eq!((summary.unauthorized_calls, summary.tripped), (2, true));
        assert_eq!(summary.latch.as_deref(), Some("latch_1.json"));
        assert!(breakers.check("w", |_| true).is_some());
        assert!(breakers.check("w", |_| false).is_none());
        assert!(breakers.check("w", |_| true).is_none());
    }

    #[test]
    fn adapter_opens_after_consecutive_failures_and_half_opens_after_cooldown() {
        let config = BreakerConfig {
            adapter_failures: 2,
            adapter_cooldown_ms: 20,
            ..BreakerConfig::default()
        };
        let adapters = AdapterBreakers::default();
        adapters.record(&config, "model", false);
        assert!(adapters.admit(&config, "model", false).is_ok());
        adapters.record(&config, "model", false);
        assert!(adapters.admit(&config, "model", false).is_err());
        std::thread::sleep(Duration::from_millis(30));
        assert!(adapters.admit(&config, "model", false).is_ok());
        assert!(
            adapters.admit(&config, "model", false).is_err(),
            "one trial only"
        );
        adapters.record(&config, "model", true);
        assert!(adapters.admit(&config, "model", false).is_ok());
        assert!(adapters.admit(&config, "model", true).is_err());
    }
}
