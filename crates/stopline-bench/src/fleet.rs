//! `stopline bench fleet`: what a budgeted tool call costs when its budget is kept in etcd (one
//! ledger for the fleet: a reservation and a settlement per call, compare-and-swap transactions on
//! the agent chain's keys) against the same call on the local control directory, side by side.
//!
//! The bench starts its own etcd member on loopback (Debian's `etcd-server`: `/usr/bin/etcd`, or
//! `--etcd PATH`) with a throwaway data directory, and two real `stopline serve` processes of this
//! binary: one on a local home, one on a home whose plane is that etcd (`--control etcd://…`).
//! Both forward to one in-process MCP upstream. Each gateway serves two agents: one with a
//! `tool_calls` budget and one without, so the report separates the fleet ledger's cost from the
//! plane's. Every round calls every path in turn (each worker rotates which path goes first),
//! at concurrency 1 and 8; the report gives each round's p50/p99 per path and the medians over
//! the rounds of the added latency (over the direct call) and of `etcd ÷ local`.
//!
//! The budgets are exactly the number of calls the bench makes: after the last round one more
//! call on each budgeted path must be refused `budget_exhausted` (`budget_enforced`), so a figure
//! can never come from a path that skipped its ledger. Figures are reported, never asserted.
//! etcd here runs without TLS or auth (the documented deployment has both: a TLS session is
//! set up once per connection; auth adds a token check per request on etcd's side).
#![allow(clippy::disallowed_methods)] // `bench fleet`: its own etcd, gateways and throwaway homes, never a real home

use crate::gateway::{call, handshake, latencies, rpc_text, BenchError, Target};
use crate::procs::{free_port, serve, within, BenchHome, Children};
use crate::stats::{median, percentile};
use crate::upstream::start_upstream;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where Debian's `etcd-server` puts etcd.
pub const DEFAULT_ETCD: &str = "/usr/bin/etcd";

/// The concurrency levels measured.
pub const LEVELS: [usize; 2] = [1, 8];

fn err(e: impl std::fmt::Display) -> BenchError {
    BenchError::new(format!("bench fleet: {e}"))
}

/// The report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    /// Rounds per level.
    pub rounds: usize,
    /// Calls per path in each round and level.
    pub calls_per_round: usize,
    /// One per concurrency level.
    pub levels: Vec<FleetLevel>,
    /// After the last round, one more call on each budgeted path was refused
    /// `budget_exhausted` (the local one, the etcd one): the budgets were kept.
    pub budget_enforced: [bool; 2],
    /// What was measured.
    pub method: String,
}

/// One concurrency level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetLevel {
    /// Callers at once.
    pub concurrency: usize,
    /// Each round's figures.
    pub rounds: Vec<FleetRound>,
    /// Median over the rounds of each path's added p50 over the direct call, µs.
    pub median_added_p50_us: PathFigures,
    /// Median over the rounds of the budgeted call's added p50, etcd ÷ local.
    pub median_ratio_etcd_vs_local_budgeted: f64,
    /// Median over the rounds of the unbudgeted call's added p50, etcd ÷ local.
    pub median_ratio_etcd_vs_local_unbudgeted: f64,
}

/// One figure per path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PathFigures {
    /// Straight to the upstream.
    pub direct: i64,
    /// Local plane, agent without a budget.
    pub local: i64,
    /// Local plane, agent with a `tool_calls` budget.
    pub local_budgeted: i64,
    /// etcd plane, agent without a budget.
    pub etcd: i64,
    /// etcd plane, agent with a `tool_calls` budget (the fleet ledger).
    pub etcd_budgeted: i64,
}

/// One round at one level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FleetRound {
    /// p50 per path, µs.
    pub p50_us: PathFigures,
    /// p99 per path, µs.
    pub p99_us: PathFigures,
}

impl FleetRound {
    fn added_p50(&self) -> PathFigures {
        let d = self.p50_us.direct;
        PathFigures {
            direct: 0,
            local: self.p50_us.local - d,
            local_budgeted: self.p50_us.local_budgeted - d,
            etcd: self.p50_us.etcd - d,
            etcd_budgeted: self.p50_us.etcd_budgeted - d,
        }
    }
}

fn ratio(a: i64, b: i64) -> f64 {
    (a as f64 / b.max(1) as f64 * 100.0).round() / 100.0
}

/// Start an etcd member on loopback in `dir`; its client URL.
fn start_etcd(etcd: &Path, dir: &Path, children: &mut Children) -> Result<String, BenchError> {
    let (client, peer) = (free_port()?, free_port()?);
    let log = std::fs::File::create(dir.join("etcd.log")).map_err(err)?;
    let child = Command::new(etcd)
        .args(["--name", "bench"])
        .arg("--data-dir")
        .arg(dir.join("etcd"))
        .args([
            "--listen-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args([
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{client}"),
        ])
        .args(["--listen-peer-urls", &format!("http://127.0.0.1:{peer}")])
        .args([
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
        ])
        .args([
            "--initial-cluster",
            &format!("bench=http://127.0.0.1:{peer}"),
        ])
        .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| err(format!("cannot start {}: {e}", etcd.display())))?;
    children.0.push(child);
    Ok(format!("etcd://127.0.0.1:{client}?prefix=/stopline-bench"))
}

/// Run the fleet bench: `calls` per path, level and round, `rounds` rounds.
pub fn fleet(
    exe: &Path,
    etcd: Option<&Path>,
    calls: usize,
    rounds: usize,
) -> Result<FleetReport, BenchError> {
    let etcd = etcd.unwrap_or(Path::new(DEFAULT_ETCD));
    if !etcd.exists() {
        return Err(err(format!(
            "{} not found: install Debian's etcd-server, or give --etcd PATH",
            etcd.display()
        )));
    }
    let base = tempfile::Builder::new()
        .prefix("stopline-bench-fleet-")
        .tempdir()
        .map_err(err)?;
    let runtime = stopline_gateway::server::runtime("stopline-bench").map_err(err)?;
    let mut children = Children::default();
    let (calls, rounds) = (calls.max(16), rounds.max(1));
    runtime.block_on(run(exe, etcd, base.path(), calls, rounds, &mut children))
}

async fn run(
    exe: &Path,
    etcd: &Path,
    base: &Path,
    calls: usize,
    rounds: usize,
    children: &mut Children,
) -> Result<FleetReport, BenchError> {
    let upstream = start_upstream().await?;
    let (upstream_url, upstream_server) = (upstream.url, upstream.server);
    let url = start_etcd(etcd, base, children)?;
    let local = BenchHome {
        dir: base.join("local"),
        control: None,
    };
    let fleet = BenchHome {
        dir: base.join("fleet"),
        control: Some(url),
    };
    // Every call the budgeted agent will make: the warm-up, then each level of each round
    // (`latencies` gives each worker ⌈calls / c⌉ calls).
    let warmup = 4 * 16usize.div_ceil(4);
    let planned = warmup + rounds * LEVELS.iter().map(|&c| calls.div_ceil(c) * c).sum::<usize>();
    let mut targets = vec![Target {
        url: upstream_url.clone(),
        session: None,
        token: None,
    }];
    let exe_owned = exe.to_path_buf();
    for home in [&local, &fleet] {
        std::fs::create_dir_all(&home.dir).map_err(err)?;
        let port = free_port()?;
        std::fs::write(
            home.dir.join("config.toml"),
            format!(
                "listen = \"127.0.0.1:{port}\"\n[mcp.bench]\nurl = \"{upstream_url}\"\ntrust_read_only_hints = true\n"
            ),
        )
        .map_err(err)?;
        // etcd takes a moment to elect itself: init until it answers.
        let exe = exe_owned.clone();
        within(Duration::from_secs(20), || {
            home.cli(&exe, &["init"]).map(drop)
        })?;
        let unbudgeted = home.token(&exe, "bench-free", None)?;
        let budgeted = home.token(&exe, "bench-budgeted", Some(planned))?;
        let addr = format!("127.0.0.1:{port}");
        serve(&exe, home, &addr, children)?;
        for token in [unbudgeted, budgeted] {
            targets.push(Target {
                url: format!("http://{addr}/mcp/bench"),
                session: None,
                token: Some(token),
            });
        }
    }
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()
        .map_err(err)?;
    for target in &mut targets {
        handshake(&client, target).await?;
    }
    // Warm every path (connections, token caches, the fleet's accounts).
    latencies(&client, &targets, 4, 16).await?;
    let mut levels: Vec<FleetLevel> = LEVELS
        .iter()
        .map(|&concurrency| FleetLevel {
            concurrency,
            rounds: Vec::new(),
            median_added_p50_us: PathFigures::default(),
            median_ratio_etcd_vs_local_budgeted: 0.0,
            median_ratio_etcd_vs_local_unbudgeted: 0.0,
        })
        .collect();
    for _ in 0..rounds {
        for level in &mut levels {
            let all = latencies(&client, &targets, level.concurrency, calls).await?;
            let at = |p: f64| {
                let f = |i: usize| percentile(&all[i], p) as i64;
                PathFigures {
                    direct: f(0),
                    local: f(1),
                    local_budgeted: f(2),
                    etcd: f(3),
                    etcd_budgeted: f(4),
                }
            };
            level.rounds.push(FleetRound {
                p50_us: at(50.0),
                p99_us: at(99.0),
            });
        }
    }
    for level in &mut levels {
        let added: Vec<PathFigures> = level.rounds.iter().map(FleetRound::added_p50).collect();
        let of = |f: fn(&PathFigures) -> i64| median(added.iter().map(f));
        level.median_added_p50_us = PathFigures {
            direct: 0,
            local: of(|a| a.local),
            local_budgeted: of(|a| a.local_budgeted),
            etcd: of(|a| a.etcd),
            etcd_budgeted: of(|a| a.etcd_budgeted),
        };
        level.median_ratio_etcd_vs_local_budgeted = median(
            added
                .iter()
                .map(|a| ratio(a.etcd_budgeted, a.local_budgeted)),
        );
        level.median_ratio_etcd_vs_local_unbudgeted =
            median(added.iter().map(|a| ratio(a.etcd, a.local)));
    }
    // The budgets were spent exactly: one more call on each budgeted path is refused (a
    // refusal is an HTTP error or a JSON-RPC error in the body; either names the code).
    let mut budget_enforced = [false; 2];
    for (slot, index) in [(0, 2), (1, 4)] {
        let answer = match rpc_text(&client, &targets[index], &call("echo", 0, 0)).await {
            Ok(body) => body,
            Err(refused) => refused.to_string(),
        };
        budget_enforced[slot] = answer.contains("budget_exhausted");
    }
    upstream_server.abort();
    Ok(FleetReport {
        rounds,
        calls_per_round: calls,
        levels,
        budget_enforced,
        method: "two real `stopline serve` processes (a local home; a home on a loopback etcd member without TLS or auth), one in-process MCP upstream, the read-only tool `echo`; per round every path called in turn by each worker; medians over rounds".into(),
    })
}
