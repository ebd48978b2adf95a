//! The scheduled drill of `serve` (`[drill] every`, docs/reference.md §8): a thread beside the
//! gateway that, every interval, drills the gateway it runs beside on a synthetic run
//! (`drill --against` its own listen address, found in its registration under `servers/`),
//! records the observation as any drill (so a failed one closes the drill gate of its harness
//! version), and alerts a failure through `[breakers] alert_webhook` / `alert_command`.
//!
//! The thread never touches the gateway's state: it is a client of it, as `stopline drill
//! --against` is. A drill that cannot run is logged, alerted and recorded as a failed drill of
//! its harness version (closing that version's drill gate: a stop that cannot be drilled has
//! not been shown to work), never fatal to `serve`.

use stopline_control::Context;

/// The record and alert of a scheduled drill that could not run: what a failed observation
/// says, with the refusal in its place. Recorded as a drill (`control-observation.v1`,
/// `pass: false`), so it closes the drill gate of its harness version.
#[derive(serde::Serialize)]
struct NotRun<'a> {
    schema: &'static str,
    harness_version: &'a str,
    pass: bool,
    scheduled: bool,
    error: stopline_core::Refusal,
}

/// Start the schedule when `[drill] every` is set; nothing otherwise.
pub fn spawn(ctx: &Context) {
    let Some(every) = ctx.config.drill.every else {
        return;
    };
    let ctx = ctx.clone();
    let started = std::thread::Builder::new()
        .name("stopline-drill-schedule".into())
        .spawn(move || loop {
            std::thread::sleep(every.0);
            drill_once(&ctx);
        });
    if let Err(error) = started {
        tracing::error!(%error, "the scheduled drill could not be started");
    }
}

/// This gateway's URL, from its registration (`None` until it has registered).
fn own_url(ctx: &Context) -> Option<String> {
    let pid = std::process::id();
    let (servers, _) = stopline_control::acks::live_servers(ctx);
    servers
        .into_iter()
        .find(|s| s.pid == pid)
        .map(|s| format!("http://{}", s.listen))
}

fn drill_once(ctx: &Context) {
    let Some(url) = own_url(ctx) else {
        tracing::warn!("scheduled drill skipped: this gateway has not registered yet");
        return;
    };
    let config = &ctx.config.drill;
    let mut options = stopline_drill::DrillOptions::new(ctx.store.layout().home().to_path_buf());
    options.harness_version = config.harness_version.clone();
    options.target_ms = config.target_ms;
    options.mode = stopline_drill::Mode::Against(url.clone());
    options.progress = false;
    options.record = true;
    let alert = match stopline_drill::drill(&options) {
        Ok(observation) if observation.pass => {
            tracing::info!(harness_version = %config.harness_version, "scheduled drill passed");
            None
        }
        Ok(observation) => {
            tracing::error!(harness_version = %config.harness_version, reasons = ?observation.reasons, "ALERT: scheduled drill failed: the drill gate of this harness version is closed");
            serde_json::to_string(&observation).ok()
        }
        Err(error) => {
            let refusal = error.to_refusal();
            tracing::error!(%refusal, "ALERT: scheduled drill could not run: the drill gate of this harness version is closed");
            let not_run = NotRun {
                schema: stopline_store::evidence::drills::DRILL_SCHEMA,
                harness_version: &config.harness_version,
                pass: false,
                scheduled: true,
                error: refusal,
            };
            if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&not_run) {
                if let Err(error) = ctx
                    .store
                    .evidence()
                    .append(stopline_store::evidence::drills::DRILL_SCHEMA, fields)
                {
                    tracing::error!(%error, "the scheduled drill that could not run was not recorded");
                }
            }
            serde_json::to_string(&not_run).ok()
        }
    };
    if let (Some(body), Some(hooks)) = (
        alert,
        stopline_gateway::alerts::Hooks::of(&ctx.config.breakers),
    ) {
        if let Err(error) = stopline_gateway::alerts::deliver_blocking(&hooks, &body) {
            tracing::error!(%error, "the scheduled drill's alert was not delivered");
        }
    }
}
