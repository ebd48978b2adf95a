//! `stopline reload`: ask every gateway of this host that serves this home to re-read its
//! configuration (`SIGHUP`; the gateway's `reload.rs` says what it takes live). The caller
//! validates the file first (the binary, with the gateway's own parser), so a file that does not
//! parse is refused here and no gateway is disturbed.
//!
//! Only live registrations are signalled, and only processes whose start time is the one the
//! registration recorded: a pid reused by another process since is never signalled.

use crate::context::Context;
use serde::Serialize;
use stopline_core::{Refusal, RefusalCode};

/// The receipt of `stopline reload`.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadReceipt {
    /// The configuration file that was validated.
    pub config: String,
    /// The gateways (registration ids) sent `SIGHUP`.
    pub signalled: Vec<String>,
    /// Registrations that could not be read or signalled.
    pub warnings: Vec<String>,
}

impl std::fmt::Display for ReloadReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "config {} is valid", self.config)?;
        write!(
            f,
            "reload sent to {} gateway(s): {} (each logs what it changed, and what needs a restart)",
            self.signalled.len(),
            self.signalled.join(", ")
        )?;
        for warning in &self.warnings {
            write!(f, "\nwarning: {warning}")?;
        }
        Ok(())
    }
}

/// Send `SIGHUP` to every live gateway of this host registered for this home.
pub fn signal_gateways(ctx: &Context, config: &std::path::Path) -> Result<ReloadReceipt, Refusal> {
    let (servers, mut warnings) = crate::acks::live_servers(ctx);
    let mut signalled = Vec::new();
    for server in servers {
        // A registration of another host (a distributed plane) names a pid of that host.
        if stopline_store::ops::process_start_time(server.pid) != Some(server.start_time) {
            continue;
        }
        let Some(pid) = rustix::process::Pid::from_raw(server.pid as i32) else {
            continue;
        };
        match rustix::process::kill_process(pid, rustix::process::Signal::HUP) {
            Ok(()) => signalled.push(server.id),
            Err(error) => warnings.push(format!("{}: SIGHUP not sent: {error}", server.id)),
        }
    }
    if signalled.is_empty() {
        return Err(Refusal::new(
            RefusalCode::GatewayUnreachable,
            format!(
                "no live gateway of this host serves {}: nothing was reloaded{}",
                ctx.store.layout().home().display(),
                warnings
                    .first()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default()
            ),
        ));
    }
    Ok(ReloadReceipt {
        config: config.display().to_string(),
        signalled,
        warnings,
    })
}
