//! Carrying out a gateway's breaker trip: `stopline_control::trip::trip` (the agent-scoped latch,
//! level from `[breakers] trip_level`, `by: "breaker:<kind>"`, then the `evidence-record.v1`),
//! then what only a gateway does: remember the trip's latch, refresh the view, and raise the
//! alert (a log line, plus the configured webhook or command, queued to `alerts.rs`).
//!
//! The latch comes first; evidence and alerts follow and their failures are logged, never
//! allowed to undo or delay the stop.

use crate::alerts::Alerts;
use crate::breaker::{AgentBreakers, BreakerKind, TripOrder};
use crate::config::SharedConfig;
use crate::view::ViewHolder;
use serde_json::Value;
use std::sync::Arc;
use stopline_control::trip::Surface;
use stopline_control::Context;
use stopline_core::budget::BudgetKind;
use stopline_core::policy::ConditionMode;

/// What a gateway's trip needs, and nothing of the governor: the governor owns one and hands
/// it orders (so this module never reaches back into the governor).
#[derive(Debug, Clone)]
pub(crate) struct Tripper {
    ctx: Context,
    agents: Arc<AgentBreakers>,
    view: Arc<ViewHolder>,
    /// The configuration in force (thresholds, trip level, hooks), read at each trip.
    config: SharedConfig,
    server_id: String,
    /// Where the trip's alert is queued (`alerts.rs`).
    alerts: Option<Alerts>,
}

impl Tripper {
    /// A tripper for the gateway `server_id`, counting in `agents` and refreshing `view`.
    pub(crate) fn new(
        ctx: Context,
        agents: Arc<AgentBreakers>,
        view: Arc<ViewHolder>,
        config: SharedConfig,
        server_id: String,
        alerts: Option<Alerts>,
    ) -> Tripper {
        Tripper {
            ctx,
            agents,
            view,
            config,
            server_id,
            alerts,
        }
    }

    /// Trip `agent`'s breaker for an exhausted budget (once).
    pub(crate) fn budget_exhausted(
        &self,
        agent: &str,
        kind: BudgetKind,
        limit: f64,
        observed: f64,
    ) {
        let order = self.agents.note(
            &self.config.load().breakers,
            agent,
            BreakerKind::BudgetExhausted,
            kind.as_str(),
            observed,
        );
        if let Some(mut order) = order {
            order.threshold = limit;
            self.spawn(order);
        }
    }

    /// Carry out `order` off the request path.
    pub(crate) fn spawn(&self, order: TripOrder) {
        let tripper = self.clone();
        let work = move || tripper.trip(&order);
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn_blocking(work);
            }
            Err(_) => {
                std::thread::spawn(work);
            }
        }
    }

    fn trip(&self, order: &TripOrder) {
        let trip = stopline_control::trip::Trip {
            agent: order.agent.clone(),
            breaker: order.kind,
            trigger: order.trigger.clone(),
            threshold: order.threshold,
            observed: order.observed,
            level: self.config.load().trip_level,
            surface: Surface::Gateway(self.server_id.clone()),
            mode: if order.observe {
                ConditionMode::Observe
            } else {
                ConditionMode::Enforce
            },
        };
        let tripped = stopline_control::trip::trip(&self.ctx, &trip);
        let latch = tripped.latch.clone().unwrap_or_default();
        if !latch.is_empty() {
            self.agents.tripped(&order.agent, &format!("{latch}.json"));
            self.view.refresh_fast();
        }
        let kind = order.kind.as_str();
        if order.observe {
            tracing::warn!(agent = %order.agent, route = %order.route, kind, trigger = %order.trigger, "ALERT: breaker met (observe only: nothing engaged)");
        } else {
            tracing::warn!(agent = %order.agent, route = %order.route, kind, latch, trigger = %order.trigger, "ALERT: breaker tripped");
        }
        self.alert(&tripped.record.to_json());
    }

    fn alert(&self, record: &Value) {
        match &self.alerts {
            Some(alerts) => alerts.send(record.to_string()),
            None => tracing::error!("breaker alert not sent: no runtime to deliver it on"),
        }
    }
}
