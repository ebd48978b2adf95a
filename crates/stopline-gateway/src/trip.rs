//! Carrying out a gateway's breaker trip: `stopline_control::trip::trip` (the agent-scoped latch,
//! level from `[breakers] trip_level`, `by: "breaker:<kind>"`, then the `evidence-record.v1`),
//! then what only a gateway does: remember the trip's latch, refresh the view, and raise the
//! alert (a log line, plus the configured webhook, `webhook.rs`, or command).
//!
//! The latch comes first; evidence and alerts follow and their failures are logged, never
//! allowed to undo or delay the stop.

use crate::breaker::{AgentBreakers, BreakerKind, TripOrder};
use crate::client::UpstreamClient;
use crate::config::BreakerConfig;
use crate::view::ViewHolder;
use serde_json::Value;
use std::sync::Arc;
use stopline_control::trip::Surface;
use stopline_control::Context;
use stopline_core::budget::BudgetKind;
use stopline_core::Level;

/// What a gateway's trip needs, and nothing of the governor: the governor owns one and hands
/// it orders (so this module never reaches back into the governor).
#[derive(Debug, Clone)]
pub(crate) struct Tripper {
    ctx: Context,
    agents: Arc<AgentBreakers>,
    view: Arc<ViewHolder>,
    breakers: BreakerConfig,
    level: Level,
    server_id: String,
    /// The gateway's pooled client, which webhooks are sent with.
    upstream: UpstreamClient,
    /// The runtime webhooks are sent on: the gateway's (a trip runs on a blocking thread).
    runtime: Option<tokio::runtime::Handle>,
}

impl Tripper {
    /// A tripper for the gateway `server_id`, counting in `agents` and refreshing `view`.
    pub(crate) fn new(
        ctx: Context,
        agents: Arc<AgentBreakers>,
        view: Arc<ViewHolder>,
        config: &crate::config::GatewayConfig,
        server_id: String,
        upstream: UpstreamClient,
    ) -> Tripper {
        Tripper {
            ctx,
            agents,
            view,
            breakers: config.breakers.clone(),
            level: config.trip_level,
            server_id,
            upstream,
            runtime: tokio::runtime::Handle::try_current().ok(),
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
            &self.breakers,
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
            level: self.level,
            surface: Surface::Gateway(self.server_id.clone()),
        };
        let tripped = stopline_control::trip::trip(&self.ctx, &trip);
        let latch = tripped.latch.clone().unwrap_or_default();
        if !latch.is_empty() {
            self.agents.tripped(&order.agent, &format!("{latch}.json"));
            self.view.refresh_fast();
        }
        let kind = order.kind.as_str();
        tracing::warn!(agent = %order.agent, route = %order.route, kind, latch, trigger = %order.trigger, "ALERT: breaker tripped");
        self.alert(&tripped.record.to_json());
    }

    fn alert(&self, record: &Value) {
        let breakers = &self.breakers;
        if let Some(url) = breakers.alert_webhook.clone() {
            let client = self.upstream.clone();
            let body = record.to_string();
            match &self.runtime {
                Some(runtime) => {
                    runtime.spawn(async move {
                        crate::webhook::post(&client, &url, body, crate::webhook::WEBHOOK_TIMEOUT)
                            .await
                    });
                }
                None => tracing::error!("breaker alert webhook not sent: no runtime to send it on"),
            }
        }
        if let Some(command) = breakers.alert_command.clone().filter(|c| !c.is_empty()) {
            use std::io::Write;
            // The operator's `alert_command`: the gateway owns the process it starts for a trip.
            #[allow(clippy::disallowed_methods)]
            let spawned = std::process::Command::new(&command[0])
                .args(&command[1..])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::null())
                .spawn();
            match spawned {
                Ok(mut child) => {
                    if let Some(mut stdin) = child.stdin.take() {
                        let _ = stdin.write_all(record.to_string().as_bytes());
                    }
                    std::thread::spawn(move || child.wait());
                }
                Err(error) => tracing::error!(%error, "breaker alert command failed"),
            }
        }
    }
}
