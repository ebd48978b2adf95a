//! `stopline bench sessions`: how long an MCP session takes to open through the gateway when
//! its stdio tool server was started ahead (the warm spare) and when it is started for the
//! session (`warm_spare = false`), side by side against one gateway in one run.
//!
//! One throwaway home and one in-process gateway with two `[mcp.*]` tables running the same
//! command, one with a spare and one without. Sessions alternate between them; each is timed
//! from sending `initialize` to the end of its answer (the server's `serverInfo`), then ended
//! with `DELETE`. Between sessions the bench waits [`PAUSE`], the time a spare has to start
//! (agents do not open sessions back to back). Without `--server-command` the server is a
//! minimal POSIX `sh` MCP server, which starts at once: the figures are then the gateway's own
//! cost of a session (a uid, a cgroup, a process); with a real server they show its start-up.

use crate::stats::percentile;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use stopline_gateway::server::{start, ServeOptions};

/// `bench sessions`: its figures under one `sessions` key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionsReport {
    /// The figures.
    pub sessions: SessionsFigures,
}

/// Session opening times, warm spare beside cold start, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionsFigures {
    /// The tool server's command.
    pub command: Vec<String>,
    /// Sessions of each kind.
    pub iterations: usize,
    /// The pause between sessions ([`PAUSE`]).
    pub pause_ms: u64,
    /// A session on the server with a warm spare, p50.
    pub warm_p50_ms: f64,
    /// p99 of the same.
    pub warm_p99_ms: f64,
    /// A session whose server starts for it, p50.
    pub cold_p50_ms: f64,
    /// p99 of the same.
    pub cold_p99_ms: f64,
    /// Warm over cold at p50, two decimals (0 when cold is 0).
    pub warm_vs_cold: f64,
}

/// How long the bench waits between sessions.
pub const PAUSE: Duration = Duration::from_millis(300);

/// The default server: answers `initialize` (and any other request) with a server info.
const SH_SERVER: &str = r#"while IFS= read -r line; do id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p'); [ -n "$id" ] && printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"bench-sh","version":"1"}}}\n' "$id"; done"#;

/// The server's command: `server_command` split at spaces, else `/bin/sh -c <a minimal MCP
/// server>`.
pub fn command(server_command: Option<&str>) -> Vec<String> {
    let given: Vec<String> = server_command
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    if given.is_empty() {
        vec!["/bin/sh".into(), "-c".into(), SH_SERVER.into()]
    } else {
        given
    }
}

/// Run `iterations` sessions of each kind (5 to 50) against [`command`]`(server_command)`.
pub fn sessions(server_command: Option<&str>, iterations: usize) -> Result<SessionsReport, String> {
    let command = command(server_command);
    let iterations = iterations.clamp(5, 50);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let home = tempfile::Builder::new()
        .prefix("stopline-bench-sessions-")
        .tempdir()
        .map_err(|e| format!("a throwaway home: {e}"))?;
    runtime.block_on(run(command, iterations, home.path().to_path_buf()))
}

async fn run(
    command: Vec<String>,
    iterations: usize,
    home: PathBuf,
) -> Result<SessionsReport, String> {
    // A JSON array of strings is a TOML array of basic strings.
    let listed = serde_json::to_string(&command).map_err(|e| e.to_string())?;
    #[allow(clippy::disallowed_methods)] // the config of the benchmark's own throwaway home
    std::fs::write(
        home.join("config.toml"),
        format!(
            "listen = \"127.0.0.1:0\"\n[mcp.warm]\ncommand = {listed}\n\
             [mcp.cold]\ncommand = {listed}\nwarm_spare = false\n"
        ),
    )
    .map_err(|e| format!("writing the bench config: {e}"))?;
    let gateway = start(ServeOptions {
        home: home.clone(),
        config: None,
        listen: None,
        mount: Some(Box::new(stopline_mcp::http::router)),
        access_log: false,
    })
    .await
    .map_err(|e| format!("starting the gateway: {e}"))?;
    let token = crate::gateway::bench_token(&gateway.governor).await?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let base = format!("http://{}/mcp", gateway.addr);
    let (mut warm, mut cold) = (Vec::new(), Vec::new());
    for i in 0..iterations * 2 {
        tokio::time::sleep(PAUSE).await;
        let (server, times) = if i % 2 == 0 {
            ("warm", &mut warm)
        } else {
            ("cold", &mut cold)
        };
        times.push(open_and_close(&client, &format!("{base}/{server}"), &token).await?);
    }
    gateway.shutdown().await;
    warm.sort_unstable();
    cold.sort_unstable();
    let (warm_p50, cold_p50) = (percentile(&warm, 50.0), percentile(&cold, 50.0));
    Ok(SessionsReport {
        sessions: SessionsFigures {
            command,
            iterations,
            pause_ms: PAUSE.as_millis() as u64,
            warm_p50_ms: ms(warm_p50),
            warm_p99_ms: ms(percentile(&warm, 99.0)),
            cold_p50_ms: ms(cold_p50),
            cold_p99_ms: ms(percentile(&cold, 99.0)),
            warm_vs_cold: if cold_p50 > 0 {
                (warm_p50 as f64 / cold_p50 as f64 * 100.0).round() / 100.0
            } else {
                0.0
            },
        },
    })
}

/// One session: `initialize` to the end of its answer (µs), then `DELETE`.
async fn open_and_close(client: &reqwest::Client, url: &str, token: &str) -> Result<u64, String> {
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "stopline-bench", "version": "1"}}});
    let started = Instant::now();
    let reply = client
        .post(url)
        .bearer_auth(token)
        .header("Accept", "application/json, text/event-stream")
        .json(&init)
        .send()
        .await
        .map_err(|e| format!("initialize on {url}: {e}"))?;
    let session = reply
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let status = reply.status();
    let body = reply.text().await.map_err(|e| e.to_string())?;
    let elapsed = started.elapsed().as_micros() as u64;
    if !status.is_success() || !body.contains("serverInfo") {
        return Err(format!("initialize on {url} answered {status}: {body}"));
    }
    let session = session.ok_or_else(|| format!("{url} answered no Mcp-Session-Id"))?;
    client
        .delete(url)
        .bearer_auth(token)
        .header("Mcp-Session-Id", session)
        .send()
        .await
        .map_err(|e| format!("DELETE on {url}: {e}"))?;
    Ok(elapsed)
}

fn ms(us: u64) -> f64 {
    (us as f64 / 10.0).round() / 100.0
}
