//! The drill's own world: a throwaway control directory, the recording destination, and an
//! in-process gateway (the same `stopline_gateway::start` that `stopline serve` runs, with the
//! MCP proxy mounted) on a loopback port, configured to reach only the destination (its MCP
//! server, its model and its remote A2A agent).
//!
//! Nothing here touches the real home: the throwaway directory is removed when the drill ends.
//! The one knob a real gateway never has, a deliberately late view swap, is applied here only
//! when the options ask for it.

use crate::agents::Endpoints;
use crate::destination::Destination;
use crate::pull::Puller;
use crate::run::{Env, Teardown};
use crate::{setup, DrillError, DrillOptions};
use stopline_control::config::Config;
use stopline_control::Context;
use stopline_store::Store;

/// The drill's own gateway's `queue_timeout_s`: how long a noncritical call is held under
/// HALT_NONCRITICAL before it is refused `queued_timeout`.
const QUEUE_TIMEOUT_S: u64 = 1;

/// The MCP server name the drill's gateway routes to its destination.
pub(crate) const MCP_SERVER: &str = "drill";
/// The model name of drill model calls.
pub(crate) const MODEL: &str = "drill-model";
/// The A2A agent name the drill's gateway routes to its destination's remote agent.
pub(crate) const A2A_AGENT: &str = "drill";

/// Start the throwaway world on the current runtime.
pub(crate) async fn start(options: &DrillOptions) -> Result<Env, DrillError> {
    let dir = tempfile::Builder::new()
        .prefix("stopline-drill-")
        .tempdir()
        .map_err(|e| setup("throwaway home")(e.to_string()))?;
    let home = dir.path().join("home");
    let destination = Destination::start("127.0.0.1:0")
        .await
        .map_err(|e| setup("destination")(e.to_string()))?;
    // A held call under halt-noncritical is refused after queue_timeout_s: keep it short, so a
    // pause drill sees its first rejections within its window.
    let config = format!(
        "listen = \"127.0.0.1:0\"\nack_timeout_ms = 250\nqueue_timeout_s = {QUEUE_TIMEOUT_S}\n\
         reload_interval_ms = 1000\n\n[mcp.{MCP_SERVER}]\nurl = \"{}\"\n\n\
         [model]\nbase_url = \"{}\"\n\n[a2a.{A2A_AGENT}]\nurl = \"{}\"\n",
        destination.mcp_url(),
        destination.model_base_url(),
        destination.a2a_url()
    );
    std::fs::create_dir_all(&home)?;
    #[allow(clippy::disallowed_methods)] // the config of the drill's own throwaway home
    std::fs::write(home.join("config.toml"), config)?;
    let gateway = stopline_gateway::start(stopline_gateway::ServeOptions {
        home: home.clone(),
        config: None,
        listen: None,
        mount: Some(Box::new(stopline_mcp::http::router)),
        access_log: false,
    })
    .await
    .map_err(|e| setup("gateway")(e.to_string()))?;
    if let Some(delay) = options.slow_view {
        tracing::warn!(
            ?delay,
            "drill: the gateway's view swaps are deliberately late"
        );
        gateway.delay_view_swaps_for_drill(delay);
    }
    let config =
        Config::load(&home.join("config.toml")).map_err(|e| setup("config")(e.to_string()))?;
    let ctx = Context::new(Store::open(&home), config);
    let timeline = Some(gateway.timeline());
    let gateway_url = format!("http://{}", gateway.addr);
    Ok(Env {
        endpoints: Endpoints {
            gateway: gateway_url.clone(),
            mcp_server: MCP_SERVER.into(),
            model: Some(MODEL.into()),
            a2a: Some(A2A_AGENT.into()),
        },
        gateway_url,
        puller: Puller::Local(ctx.clone()),
        ctx,
        destination,
        label: "local".into(),
        timeline,
        queue_timeout_ms: QUEUE_TIMEOUT_S * 1000,
        teardown: Teardown::Local {
            gateway: Box::new(gateway),
            dir,
        },
    })
}
