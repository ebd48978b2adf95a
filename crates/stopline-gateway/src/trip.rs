//! Carrying out a gateway's breaker trip: `stopline_control::trip::trip` (the agent-scoped latch,
//! level from `[breakers] trip_level`, `by: "breaker:<kind>"`, then the `evidence-record.v1`),
//! then what only a gateway does: remember the trip's latch, refresh the view, and raise the
//! alert (a log line, plus the configured webhook or command).
//!
//! The latch comes first; evidence and alerts follow and their failures are logged, never
//! allowed to undo or delay the stop.

use crate::breaker::{BreakerKind, TripOrder};
use crate::governor::Governor;
use serde_json::Value;
use stopline_control::trip::Surface;
use stopline_core::budget::BudgetKind;

/// Trip `agent`'s breaker for an exhausted budget (once).
pub(crate) fn budget_exhausted(
    gov: &Governor,
    agent: &str,
    kind: BudgetKind,
    limit: f64,
    observed: f64,
) {
    let order = gov.inner.agents.note(
        &gov.inner.config.breakers,
        agent,
        BreakerKind::BudgetExhausted,
        kind.as_str(),
        observed,
    );
    if let Some(mut order) = order {
        order.threshold = limit;
        spawn_trip(gov.clone(), order);
    }
}

/// Carry out `order` off the request path.
pub(crate) fn spawn_trip(gov: Governor, order: TripOrder) {
    let handle = tokio::runtime::Handle::try_current();
    let work = move || trip(&gov, &order);
    match handle {
        Ok(handle) => {
            handle.spawn_blocking(work);
        }
        Err(_) => {
            std::thread::spawn(work);
        }
    }
}

fn trip(gov: &Governor, order: &TripOrder) {
    let trip = stopline_control::trip::Trip {
        agent: order.agent.clone(),
        breaker: order.kind,
        trigger: order.trigger.clone(),
        threshold: order.threshold,
        observed: order.observed,
        level: gov.inner.config.trip_level,
        surface: Surface::Gateway(gov.server_id().to_string()),
    };
    let tripped = stopline_control::trip::trip(&gov.inner.ctx, &trip);
    let latch = tripped.latch.clone().unwrap_or_default();
    if !latch.is_empty() {
        gov.inner
            .agents
            .tripped(&order.agent, &format!("{latch}.json"));
        gov.inner.view.refresh_fast();
    }
    let kind = order.kind.as_str();
    tracing::warn!(agent = %order.agent, kind, latch, trigger = %order.trigger, "ALERT: breaker tripped");
    alert(gov, &tripped.record.to_json());
}

fn alert(gov: &Governor, record: &Value) {
    let breakers = &gov.inner.config.breakers;
    if let Some(url) = breakers.alert_webhook.clone() {
        let client = gov.http_client().clone();
        let body = record.to_string();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let sent = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                if let Err(error) = sent {
                    tracing::error!(%error, url, "breaker alert webhook failed");
                }
            });
        }
    }
    if let Some(command) = breakers.alert_command.clone().filter(|c| !c.is_empty()) {
        use std::io::Write;
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
