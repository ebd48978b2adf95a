//! Drilling a live gateway (`--against URL`): the drill's callers go through the live gateway,
//! the stop is pulled through its `/v1/engage`, and only the drill's own run is stopped.
//!
//! The live gateway must route an MCP server named `stopline-drill` (`[mcp.stopline-drill]` in
//! the home's `config.toml`) to a loopback URL ending in `/mcp`; the drill's destination binds
//! that address, so it sees every effect the gateway lets through. Model calls are made only
//! when the gateway's `[model] base_url` is that same address (a gateway dedicated to drills);
//! a real model upstream is never called by a drill. A2A sends and the long A2A task likewise,
//! only when `[a2a.stopline-drill] url` is `http://<that address>/a2a`. Tokens are minted with
//! the home's key and the operation registry matched is the home's, so the gateway must run
//! over the drill's home.

use crate::agents::Endpoints;
use crate::destination::Destination;
use crate::pull::Puller;
use crate::run::{Env, Teardown};
use crate::DrillError;
use std::path::Path;
use stopline_control::config::Config;
use stopline_control::{tokens, Context};
use stopline_core::Role;
use stopline_gateway::GatewayConfig;
use stopline_store::Store;

/// The MCP server a live gateway must route to the drill's destination.
pub(crate) const MCP_SERVER: &str = "stopline-drill";
/// The model name of drill model calls.
pub(crate) const MODEL: &str = "stopline-drill";
/// The A2A agent a live gateway may route to the drill's remote A2A agent.
pub(crate) const A2A_AGENT: &str = "stopline-drill";

/// `http://127.0.0.1:PORT/mcp` → `127.0.0.1:PORT`, only for loopback addresses.
fn loopback_addr(url: &str, path: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let addr = rest.strip_suffix(path)?;
    let ip = addr.rsplit_once(':')?.0;
    matches!(ip, "127.0.0.1" | "localhost" | "[::1]").then(|| addr.to_string())
}

/// Check the live gateway and its configuration, and start the destination it routes to.
pub(crate) async fn start(home: &Path, url: &str, drill_id: &str) -> Result<Env, DrillError> {
    let url = url.trim_end_matches('/').to_string();
    let against = |why: String| DrillError::Against {
        url: url.clone(),
        why,
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| against(e.to_string()))?;
    let health = client
        .get(format!("{url}/healthz"))
        .send()
        .await
        .map_err(|e| against(format!("unreachable: {e}")))?;
    if !health.status().is_success() {
        return Err(against(format!("/healthz answered {}", health.status())));
    }
    let config_path = home.join("config.toml");
    let gateway_config = GatewayConfig::load(&config_path).map_err(|e| against(e.to_string()))?;
    let mcp_url = gateway_config
        .mcp
        .get(MCP_SERVER)
        .and_then(|s| s.url.clone())
        .ok_or_else(|| {
            against(format!(
                "{} has no [mcp.{MCP_SERVER}] url: route it to a free loopback address, e.g. url = \"http://127.0.0.1:7079/mcp\"",
                config_path.display()
            ))
        })?;
    let addr = loopback_addr(&mcp_url, "/mcp").ok_or_else(|| {
        against(format!(
            "[mcp.{MCP_SERVER}] url {mcp_url} is not http://<loopback>:<port>/mcp"
        ))
    })?;
    let destination = Destination::start(&addr)
        .await
        .map_err(|e| against(format!("cannot listen on {addr} for the destination: {e}")))?;
    let model = gateway_config
        .model
        .as_ref()
        .and_then(|m| loopback_addr(m.base_url.trim_end_matches('/'), "/v1"))
        .filter(|model_addr| model_addr == &addr)
        .map(|_| MODEL.to_string());
    let a2a = gateway_config
        .a2a
        .get(A2A_AGENT)
        .and_then(|a| loopback_addr(a.url.trim_end_matches('/'), "/a2a"))
        .filter(|a2a_addr| a2a_addr == &addr)
        .map(|_| A2A_AGENT.to_string());
    let config = Config::load(&config_path).map_err(|e| against(e.to_string()))?;
    let ctx = Context::new(Store::open(home), config);
    let puller_ctx = ctx.clone();
    let puller_name = format!("drill-{drill_id}-puller");
    let minted = tokio::task::spawn_blocking(move || {
        tokens::issue(
            &puller_ctx,
            &tokens::IssueArgs::new(puller_name, Role::Monitor, 3600),
        )
    })
    .await
    .map_err(|e| against(e.to_string()))??;
    Ok(Env {
        endpoints: Endpoints {
            gateway: url.clone(),
            mcp_server: MCP_SERVER.into(),
            model,
            a2a,
        },
        gateway_url: url.clone(),
        queue_timeout_ms: gateway_config.base.queue_timeout_s.saturating_mul(1000),
        puller: Puller::Remote {
            url: url.clone(),
            token: minted.token,
            client,
        },
        ctx,
        destination,
        label: url,
        timeline: None,
        teardown: Teardown::Remote,
    })
}

#[cfg(test)]
mod tests {
    use super::loopback_addr;

    #[test]
    fn only_loopback_destinations() {
        assert_eq!(
            loopback_addr("http://127.0.0.1:7079/mcp", "/mcp").as_deref(),
            Some("127.0.0.1:7079")
        );
        assert_eq!(loopback_addr("http://10.0.0.2:7079/mcp", "/mcp"), None);
        assert_eq!(loopback_addr("https://127.0.0.1:7079/mcp", "/mcp"), None);
        assert_eq!(loopback_addr("http://127.0.0.1:7079/x", "/mcp"), None);
    }
}
