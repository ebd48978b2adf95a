//! Carrying out a breaker trip: an agent-scoped latch (level from `[breakers] trip_level`,
//! `by: "breaker:<kind>"`), an `evidence-record.v1` in the evidence log, and an alert (a log line,
//! plus the configured webhook or command).
//!
//! The latch comes first and through the same engage verb every surface uses; evidence and
//! alerts follow and their failures are logged, never allowed to undo or delay the stop.

use crate::breaker::{BreakerKind, TripOrder};
use crate::governor::Governor;
use serde_json::{json, Map, Value};
use stopline_control::engage;
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
    let kind = order.kind.as_str();
    let caller = engage::Caller {
        token: None,
        by: Some(format!("breaker:{kind}")),
        local: true,
    };
    let reason = format!(
        "breaker {kind} tripped: {} (observed {}, threshold {})",
        order.trigger, order.observed, order.threshold
    );
    let level = gov.inner.config.trip_level.as_str();
    let scope = format!("agent:{}", order.agent);
    let receipt = engage::engage(&gov.inner.ctx, &caller, &scope, Some(level), &reason);
    let latch = match &receipt {
        Ok(receipt) => receipt["latch"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        Err(refusal) => {
            tracing::error!(agent = %order.agent, kind, %refusal, "breaker trip could not engage a latch");
            String::new()
        }
    };
    if !latch.is_empty() {
        gov.inner
            .agents
            .tripped(&order.agent, &format!("{latch}.json"));
        gov.inner.view.refresh_fast();
    }
    let now = gov.now_ms();
    let record = json!({
        "schema": "evidence-record.v1",
        "agent": order.agent,
        "kind": if order.kind == BreakerKind::BudgetExhausted { "budget_exhausted" } else { "breaker" },
        "breaker": kind,
        "trigger": order.trigger,
        "threshold": order.threshold,
        "observed": order.observed,
        "latch": latch,
        "level": level,
        "gateway": gov.server_id(),
        "ts": stopline_store::env::rfc3339(now),
    });
    // The log line's own `kind` is the record's kind (the chain writes it), so it is not
    // repeated among the fields.
    let mut fields: Map<String, Value> = record.as_object().cloned().unwrap_or_default();
    let evidence_kind = fields
        .remove("kind")
        .and_then(|k| k.as_str().map(String::from))
        .unwrap_or_default();
    if let Err(error) = gov.inner.ctx.store.append_evidence(&evidence_kind, fields) {
        tracing::error!(%error, "cannot append the breaker's evidence record");
    }
    tracing::warn!(agent = %order.agent, kind, latch, trigger = %order.trigger, "ALERT: breaker tripped");
    alert(gov, &record);
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
