//! The operator's day outside the gateway: `stopline reload` (validate, then `SIGHUP` every
//! gateway of this host), and the latch alerts of a CLI command that found no gateway to tell.
//!
//! A gateway alerts every latch change it observes (`stopline_gateway::alerts`). When none
//! runs, `engage`, `disengage` and `recover apply` hand their changes to a detached
//! `stopline alert-deliver` (its own process group, the records on its stdin) and return
//! without waiting for it: the alert never stands on the stop's path, and its retries outlive
//! the command. Every record names its sender; the same change sent by a gateway and a CLI has
//! the same `alert_id` (docs/reference.md "Alerts").

use crate::output;
use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use stopline_control::Context;
use stopline_core::alert::{changes, LatchAlert, LatchChange};
use stopline_core::{LatchRecord, Refusal, RefusalCode};
use stopline_gateway::alerts::{Handoff, Hooks};

/// `stopline reload`: validate the file with the gateway's own parser, then signal.
pub fn reload(ctx: &Context, config: Option<PathBuf>, json: bool) -> Result<i32, Refusal> {
    let path = config.unwrap_or_else(|| ctx.store.layout().home().join("config.toml"));
    stopline_gateway::config::GatewayConfig::load(&path).map_err(|e| e.to_refusal())?;
    output::receipt(
        json,
        &stopline_control::reload::signal_gateways(ctx, &path)?,
    );
    Ok(0)
}

/// The well-formed latches and the epoch sequence, as a CLI command sees them now; `None` when
/// no alert hook is configured (nothing would be sent, so nothing is read).
pub fn latches(ctx: &Context) -> Option<(Vec<LatchRecord>, u64)> {
    Hooks::of(&ctx.config.breakers)?;
    let view = ctx.plane.load_view();
    let latches = view
        .latches
        .iter()
        .filter_map(|l| l.record.clone())
        .collect();
    Some((latches, view.epoch.seq))
}

/// After an engage: alert its latch when no gateway took it (none acknowledged or was waited
/// for) and the engage made a new latch.
pub fn after_engage(ctx: &Context, receipt: &stopline_control::receipts::EngageReceipt) {
    let no_gateway = receipt.acknowledged_by.is_empty() && receipt.unacknowledged.is_empty();
    if no_gateway && !receipt.coalesced {
        hand_off(
            ctx,
            vec![(LatchChange::Engaged, receipt.latch.record.clone())],
        );
    }
}

/// After a disengage or a recovery: alert what changed since `before`, when no gateway runs.
pub fn after_change(ctx: &Context, before: Option<(Vec<LatchRecord>, u64)>) {
    let Some(before) = before else { return };
    if !stopline_control::acks::live_servers(ctx).0.is_empty() {
        return;
    }
    let Some((after, epoch)) = latches(ctx) else {
        return;
    };
    let found: Vec<(LatchChange, LatchRecord)> = changes(&before.0, &after, epoch > before.1)
        .into_iter()
        .map(|(change, latch)| (change, latch.clone()))
        .collect();
    hand_off(ctx, found);
}

fn hand_off(ctx: &Context, found: Vec<(LatchChange, LatchRecord)>) {
    let Some(hooks) = Hooks::of(&ctx.config.breakers) else {
        return;
    };
    if found.is_empty() {
        return;
    }
    let sender = format!("cli:{}", std::process::id());
    let ts = stopline_core::time::rfc3339_seconds(ctx.store.now_ms() / 1000);
    let records = found
        .iter()
        .map(|(change, latch)| LatchAlert::new(*change, latch, &sender, &ts))
        .collect();
    let handoff = Handoff { hooks, records };
    if let Err(error) = spawn_delivery(&handoff) {
        output::error_line(&format!(
            "warning: the latch alert was not handed to alert-deliver: {error}"
        ));
    }
}

/// Start `stopline alert-deliver` in a process group of its own, hand it `handoff`, and return.
fn spawn_delivery(handoff: &Handoff) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let body = serde_json::to_vec(handoff).map_err(std::io::Error::other)?;
    // This binary, detached, delivering the alert the engage hands it (never waited for).
    #[allow(clippy::disallowed_methods)]
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("alert-deliver")
        .process_group(0)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(&body)?;
    }
    // Not waited for: it outlives this command (its parent becomes init when this one exits).
    drop(child);
    Ok(())
}

/// `stopline alert-deliver`: read a [`Handoff`] from stdin and deliver each record.
pub fn deliver_from_stdin() -> i32 {
    let mut text = String::new();
    if let Err(error) = std::io::stdin().read_to_string(&mut text) {
        return output::refusal(
            false,
            &Refusal::new(RefusalCode::BadRequest, error.to_string()),
        );
    }
    let handoff: Handoff = match serde_json::from_str(&text) {
        Ok(handoff) => handoff,
        Err(error) => {
            let refusal = Refusal::new(
                RefusalCode::BadRequest,
                format!("alert-deliver reads the alert hand-off as JSON: {error}"),
            );
            return output::refusal(false, &refusal);
        }
    };
    for record in &handoff.records {
        let body = serde_json::to_string(record).unwrap_or_default();
        if let Err(error) = stopline_gateway::alerts::deliver_blocking(&handoff.hooks, &body) {
            output::error_line(&format!("alert not delivered: {error}"));
            return 1;
        }
    }
    0
}
