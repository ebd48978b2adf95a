//! Reloading the configuration of a running gateway (`SIGHUP`, and `stopline reload`, which
//! sends it): docs/reference.md "Reload".
//!
//! The file is parsed and validated whole first; one that does not parse changes nothing (the
//! configuration in force stays, and the log says why). Then each changed key is either taken
//! live — the whole new value swapped in at once, so a call reads one configuration or the
//! other, never a mix — or, where the running gateway was built from it (its listener, its tool
//! servers, its threads, the control store it opened), kept as it was and named in the log as
//! needing a restart. A reload never touches latches, epochs or operations: it cannot lift or
//! weaken a stop the control state holds.

use crate::config::GatewayConfig;
use std::path::Path;

/// Keys a reload takes at once.
pub const LIVE: &[&str] = &[
    "prices",
    "model",
    "anthropic",
    "breakers",
    "queue_timeout_s",
    "cut_outcome_wait_s",
];

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reloaded {
    /// Keys whose new value is in force.
    pub applied: Vec<&'static str>,
    /// Keys that changed in the file but keep their old value until a restart.
    pub need_restart: Vec<&'static str>,
}

/// Re-read `path` and swap in what may change live; log what changed. `Err` (the reason) when
/// the file cannot be used: nothing changed.
pub(crate) fn reload(
    config: &crate::config::SharedConfig,
    path: &Path,
) -> Result<Reloaded, String> {
    let new = match GatewayConfig::load(path) {
        Ok(new) => new,
        Err(error) => {
            tracing::error!(config = %path.display(), "config reload refused, the configuration in force is kept: {}", error.why);
            return Err(error.why);
        }
    };
    let old = config.load_full();
    let (merged, reloaded) = merge(&old, new);
    config.store(std::sync::Arc::new(merged));
    if reloaded.applied.is_empty() && reloaded.need_restart.is_empty() {
        tracing::info!(config = %path.display(), "config reloaded: nothing changed");
    }
    if !reloaded.applied.is_empty() {
        tracing::info!(config = %path.display(), changed = %reloaded.applied.join(","), "config reloaded: in force now: {}", reloaded.applied.join(", "));
    }
    if !reloaded.need_restart.is_empty() {
        tracing::warn!(config = %path.display(), needs_restart = %reloaded.need_restart.join(","), "config reload: changed but kept until the gateway restarts: {}", reloaded.need_restart.join(", "));
    }
    Ok(reloaded)
}

/// The configuration to run on: `old` with the live keys of `new`; and which keys changed.
pub fn merge(old: &GatewayConfig, new: GatewayConfig) -> (GatewayConfig, Reloaded) {
    let mut reloaded = Reloaded::default();
    let (o, n) = (&old.base, &new.base);
    let mut restart = |changed: bool, key: &'static str| {
        if changed {
            reloaded.need_restart.push(key);
        }
    };
    restart(o.listen != n.listen, "listen");
    restart(o.operators != n.operators, "operators");
    restart(o.monitors != n.monitors, "monitors");
    restart(o.ack_timeout_ms != n.ack_timeout_ms, "ack_timeout_ms");
    restart(
        o.reload_interval_ms != n.reload_interval_ms,
        "reload_interval_ms",
    );
    restart(o.read_timeout_ms != n.read_timeout_ms, "read_timeout_ms");
    restart(o.permit_ttl_ms != n.permit_ttl_ms, "permit_ttl_ms");
    restart(o.mcp != n.mcp, "mcp");
    restart(o.a2a != n.a2a, "a2a");
    restart(o.run != n.run, "run");
    restart(o.retention != n.retention, "retention");
    restart(o.etcd != n.etcd, "etcd");
    restart(o.telemetry != n.telemetry, "telemetry");
    restart(o.drill != n.drill, "drill");
    restart(o.allowed_origins != n.allowed_origins, "allowed_origins");
    let mut merged = old.clone();
    let mut live = |changed: bool, key: &'static str| {
        if changed {
            reloaded.applied.push(key);
        }
    };
    live(o.prices != n.prices, "prices");
    live(o.model != n.model, "model");
    live(o.anthropic != n.anthropic, "anthropic");
    live(o.breakers != n.breakers, "breakers");
    live(o.queue_timeout_s != n.queue_timeout_s, "queue_timeout_s");
    live(
        o.cut_outcome_wait_s != n.cut_outcome_wait_s,
        "cut_outcome_wait_s",
    );
    merged.base.prices = new.base.prices.clone();
    merged.base.model = new.base.model.clone();
    merged.base.anthropic = new.base.anthropic.clone();
    merged.base.breakers = new.base.breakers.clone();
    merged.base.queue_timeout_s = new.base.queue_timeout_s;
    merged.base.cut_outcome_wait_s = new.base.cut_outcome_wait_s;
    merged.model = new.model;
    merged.anthropic = new.anthropic;
    merged.breakers = new.breakers;
    merged.trip_level = new.trip_level;
    // The registration's hash (what `stopline run` records of its gateway) names a file only
    // when the gateway runs on all of it.
    if reloaded.need_restart.is_empty() {
        merged.config_hash = new.config_hash;
    }
    (merged, reloaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> GatewayConfig {
        GatewayConfig::from_base(toml::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn allowed_origins_and_upstream_headers_wait_for_a_restart() {
        let old = config("");
        let new = config(
            "allowed_origins = [\"https://app.example\"]\n[mcp.r]\nurl = \"http://127.0.0.1:1/\"\nheaders = { X-Key = \"k\" }\n",
        );
        let (merged, reloaded) = merge(&old, new);
        assert_eq!(reloaded.need_restart, vec!["mcp", "allowed_origins"]);
        assert_eq!(merged.base.allowed_origins, None);
        assert!(merged.mcp_headers.is_empty());
    }

    #[test]
    fn live_keys_are_taken_and_the_others_kept_and_named() {
        let old = config("listen = \"127.0.0.1:1\"\n[prices.a]\ninput = 1.0\noutput = 1.0\n");
        let new = config(
            "listen = \"127.0.0.1:2\"\n[prices.b]\ninput = 2.0\noutput = 2.0\n[breakers]\ntrip_level = \"emergency\"\n",
        );
        let (merged, reloaded) = merge(&old, new);
        assert_eq!(reloaded.applied, vec!["prices", "breakers"]);
        assert_eq!(reloaded.need_restart, vec!["listen"]);
        assert_eq!(merged.base.listen, "127.0.0.1:1");
        assert!(merged.price("b").is_some() && merged.price("a").is_none());
        assert_eq!(merged.trip_level, stopline_core::Level::Emergency);
        for key in &reloaded.applied {
            assert!(LIVE.contains(key), "{key}");
        }
    }
}
