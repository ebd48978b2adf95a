//! Prometheus metrics (`GET /metrics`): decisions by outcome and code, admission and call
//! latency histograms, budget use, breaker states, the latch count and the view's age.
//!
//! Counters and histograms are updated on the request path (lock-free atomics inside
//! prometheus-client); gauges that describe state are filled in at scrape time from the view,
//! the ledger and the breakers, so they can never drift from what admission actually uses.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::Duration;
use stopline_core::RefusalCode;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    outcome: &'static str,
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SurfaceLabels {
    surface: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BudgetLabels {
    token: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabels {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

/// The gateway's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    decisions: Family<DecisionLabels, Counter>,
    admission: Family<SurfaceLabels, Histogram>,
    calls: Family<SurfaceLabels, Histogram>,
    budget_used: Family<BudgetLabels, Gauge<f64, AtomicU64>>,
    budget_limit: Family<BudgetLabels, Gauge<f64, AtomicU64>>,
    adapter_state: Family<UpstreamLabels, Gauge>,
    agent_tripped: Family<AgentLabels, Gauge>,
    latches: Gauge,
    view_age_ms: Gauge,
    view_generation: Gauge,
    view_degraded: Gauge,
    /// The series every admitted call updates, taken from their families at their first use
    /// and kept: a family lookup hashes its labels under a lock, three times a call (the
    /// read-only path's profile, BENCHMARKS.md). Same series, same exposition.
    hot: Hot,
}

/// See [`Metrics::hot`]: the `allow` decision, and each proxy surface's two histograms.
#[derive(Debug, Default)]
struct Hot {
    allowed: OnceLock<Counter>,
    mcp_admission: OnceLock<Histogram>,
    mcp_calls: OnceLock<Histogram>,
    model_admission: OnceLock<Histogram>,
    model_calls: OnceLock<Histogram>,
}

/// The series of `family` for `labels`, kept in `cell` from its first use.
fn kept<'a, L, M>(cell: &'a OnceLock<M>, family: &Family<L, M, fn() -> M>, labels: &L) -> &'a M
where
    L: Clone + std::hash::Hash + Eq,
    M: Clone,
{
    cell.get_or_init(|| family.get_or_create(labels).clone())
}

fn histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00001, 2.0, 22))
}

impl Metrics {
    /// A fresh registry with every metric registered.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("stopline");
        let decisions = Family::<DecisionLabels, Counter>::default();
        let admission = Family::<SurfaceLabels, Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        let calls = Family::<SurfaceLabels, Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        let budget_used = Family::default();
        let budget_limit = Family::default();
        let adapter_state = Family::default();
        let agent_tripped = Family::default();
        let latches = Gauge::default();
        let view_age_ms = Gauge::default();
        let view_generation = Gauge::default();
        let view_degraded = Gauge::default();
        registry.register(
            "decisions",
            "Admission decisions by outcome and refusal code",
            decisions.clone(),
        );
        registry.register(
            "admission_seconds",
            "Time to admit a call (queueing included)",
            admission.clone(),
        );
        registry.register(
            "call_seconds",
            "Time from admission to outcome",
            calls.clone(),
        );
        registry.register(
            "budget_used",
            "Budget used per token and kind",
            budget_used.clone(),
        );
        registry.register(
            "budget_limit",
            "Budget limit per token and kind",
            budget_limit.clone(),
        );
        registry.register(
            "adapter_breaker_state",
            "0 closed, 1 half-open, 2 open, 3 forced open",
            adapter_state.clone(),
        );
        registry.register(
            "agent_breaker_tripped",
            "1 when the agent's breaker is tripped",
            agent_tripped.clone(),
        );
        registry.register(
            "latches",
            "Active latches in the gateway's view",
            latches.clone(),
        );
        registry.register(
            "view_age_ms",
            "Milliseconds since the view was last read",
            view_age_ms.clone(),
        );
        registry.register(
            "view_generation",
            "Generation of the gateway's view",
            view_generation.clone(),
        );
        registry.register(
            "view_degraded",
            "1 when change notification is lost",
            view_degraded.clone(),
        );
        Metrics {
            registry,
            decisions,
            admission,
            calls,
            budget_used,
            budget_limit,
            adapter_state,
            agent_tripped,
            latches,
            view_age_ms,
            view_generation,
            view_degraded,
            hot: Hot::default(),
        }
    }

    /// Count one decision (static labels: nothing is allocated on the request path).
    pub fn decision(&self, outcome: &'static str, code: Option<RefusalCode>) {
        let labels = DecisionLabels {
            outcome,
            code: code.map(|c| c.as_str()).unwrap_or_default(),
        };
        if outcome == "allow" && code.is_none() {
            let allowed = &self.hot.allowed;
            allowed
                .get_or_init(|| self.decisions.get_or_create(&labels).clone())
                .inc();
            return;
        }
        self.decisions.get_or_create(&labels).inc();
    }

    /// Observe the time one admission took.
    pub fn admission_latency(&self, surface: &'static str, elapsed: Duration) {
        let labels = SurfaceLabels { surface };
        let seconds = elapsed.as_secs_f64();
        match surface {
            "mcp" => kept(&self.hot.mcp_admission, &self.admission, &labels).observe(seconds),
            "model" => kept(&self.hot.model_admission, &self.admission, &labels).observe(seconds),
            _ => self.admission.get_or_create(&labels).observe(seconds),
        }
    }

    /// Observe the time one call took from admission to outcome.
    pub fn call_latency(&self, surface: &'static str, elapsed: Duration) {
        let labels = SurfaceLabels { surface };
        let seconds = elapsed.as_secs_f64();
        match surface {
            "mcp" => kept(&self.hot.mcp_calls, &self.calls, &labels).observe(seconds),
            "model" => kept(&self.hot.model_calls, &self.calls, &labels).observe(seconds),
            _ => self.calls.get_or_create(&labels).observe(seconds),
        }
    }

    /// Render the text exposition after filling the state gauges.
    pub fn render(&self, state: &ScrapeState) -> String {
        self.latches.set(state.latches as i64);
        self.view_age_ms.set(state.view_age_ms);
        self.view_generation.set(state.view_generation as i64);
        self.view_degraded.set(i64::from(state.view_degraded));
        for (token, kind, used, limit) in &state.budgets {
            let labels = BudgetLabels {
                token: token.chars().take(8).collect(),
                kind: kind.clone(),
            };
            self.budget_used.get_or_create(&labels).set(*used);
            self.budget_limit.get_or_create(&labels).set(*limit);
        }
        for (upstream, gauge) in &state.adapters {
            self.adapter_state
                .get_or_create(&UpstreamLabels {
                    upstream: upstream.clone(),
                })
                .set(*gauge);
        }
        for agent in &state.tripped_agents {
            self.agent_tripped
                .get_or_create(&AgentLabels {
                    agent: agent.clone(),
                })
                .set(1);
        }
        let mut text = String::new();
        let _ = encode(&mut text, &self.registry);
        text
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The state gauges, gathered at scrape time.
#[derive(Debug, Default)]
pub struct ScrapeState {
    /// Active latches.
    pub latches: usize,
    /// Age of the view.
    pub view_age_ms: i64,
    /// Its generation.
    pub view_generation: u64,
    /// Whether change notification is degraded.
    pub view_degraded: bool,
    /// (token, kind, used, limit).
    pub budgets: Vec<(String, String, f64, f64)>,
    /// (upstream, state gauge).
    pub adapters: Vec<(String, i64)>,
    /// Tripped agents.
    pub tripped_agents: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The series kept from their first use are the families' own: what is exposed is what
    /// looking them up every time exposed (no series before its first use, every count in it).
    #[test]
    fn kept_series_expose_as_looked_up_ones() {
        let metrics = Metrics::new();
        let fresh = metrics.render(&ScrapeState::default());
        assert!(!fresh.contains("outcome=\"allow\""), "{fresh}");
        assert!(!fresh.contains("surface=\"mcp\""), "{fresh}");
        metrics.decision("allow", None);
        metrics.decision("allow", None);
        metrics.decision("block", Some(RefusalCode::BudgetExhausted));
        for surface in ["mcp", "model", "other"] {
            metrics.admission_latency(surface, Duration::from_millis(1));
            metrics.call_latency(surface, Duration::from_millis(2));
            metrics.call_latency(surface, Duration::from_millis(3));
        }
        let text = metrics.render(&ScrapeState::default());
        assert!(
            text.contains("stopline_decisions_total{outcome=\"allow\",code=\"\"} 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "stopline_decisions_total{outcome=\"block\",code=\"budget_exhausted\"} 1"
            ),
            "{text}"
        );
        for surface in ["mcp", "model", "other"] {
            for (name, count) in [("admission", 1), ("call", 2)] {
                let line =
                    format!("stopline_{name}_seconds_count{{surface=\"{surface}\"}} {count}");
                assert!(text.contains(&line), "{line} in {text}");
            }
        }
    }
}
