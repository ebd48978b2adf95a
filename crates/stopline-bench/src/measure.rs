//! Which measure `stopline bench` takes, and the one place that runs it: the binary maps its
//! arguments here and prints what comes back.

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;
use stopline_core::{Refusal, RefusalCode};

/// One measure of `stopline bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Time to contained against a bare fsync'd create (`engage.rs`).
    Engage,
    /// One admission decision (`engage.rs`).
    Admission,
    /// Killing a group through `run`'s loop beside a bare `cgroup.kill` (`kill.rs`).
    Kill,
    /// A proxied MCP call beside the direct call and a bare proxy (`gateway.rs`).
    Gateway,
    /// An MCP session's start, warm spare against cold (`sessions.rs`).
    Sessions,
    /// An aged home beside a fresh one (`history.rs`).
    History,
    /// A budgeted call kept in etcd beside the local ledger (`fleet.rs`).
    Fleet,
    /// Not a measure: the bare proxy `gateway` starts as its own process, serving until ended.
    BareProxy,
}

/// The options only some measures read.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Calls, kills or engages per measure.
    pub iterations: usize,
    /// `history`: the aged home's sizes.
    pub sizes: crate::history::HistorySizes,
    /// `history`: samples per measure and home (default 15); `fleet`: rounds (default 5);
    /// `gateway`: rounds (default 7; 3 in the default set).
    pub samples: Option<usize>,
    /// `history`: how long an idle gateway is sampled.
    pub idle: Duration,
    /// `sessions`: the stdio tool server to start.
    pub server_command: Option<String>,
    /// `fleet`: the etcd binary.
    pub etcd: Option<PathBuf>,
    /// `gateway`: the nginx binary (default: Debian's, when installed).
    pub nginx: Option<PathBuf>,
    /// `bare-proxy`: where it listens and its upstream.
    pub bare_proxy: Option<(String, String)>,
}

fn io(error: impl std::fmt::Display) -> Refusal {
    Refusal::new(RefusalCode::ControlIo, error.to_string())
}

fn to_value(report: impl serde::Serialize) -> Result<Value, Refusal> {
    serde_json::to_value(report).map_err(io)
}

fn named(name: &str, value: Value) -> Value {
    Value::Object(Map::from_iter([(name.into(), value)]))
}

/// Run `which` (or, without one, engage, admission, gateway and kill side by side) with scratch
/// homes beside `home` and `exe` the binary the process-level measures start. A measure this
/// machine cannot take in the default set (the kill needs cgroup v2 and root) is reported as an
/// `error` in its place, never left out.
pub fn run(
    home: &Path,
    exe: &Path,
    which: Option<Measure>,
    settings: Settings,
) -> Result<Value, Refusal> {
    let Settings {
        iterations,
        sizes,
        samples,
        idle,
        server_command,
        etcd,
        nginx,
        bare_proxy,
    } = settings;
    let failed = |error: String| named("error", error.into());
    match which {
        Some(Measure::History) => crate::history::history(exe, sizes, samples.unwrap_or(15), idle)
            .map_err(io)
            .and_then(to_value),
        Some(Measure::Fleet) => {
            crate::fleet::fleet(exe, etcd.as_deref(), iterations, samples.unwrap_or(5))
                .map_err(io)
                .and_then(to_value)
        }
        Some(Measure::BareProxy) => match bare_proxy {
            Some((listen, upstream)) => crate::gateway::bare::serve_forever(&listen, &upstream)
                .map(|()| Value::Null)
                .map_err(io),
            _ => Err(io(
                "bench bare-proxy needs --bare-listen ADDR --bare-upstream URL",
            )),
        },
        Some(Measure::Kill) => crate::kill::kill(home, iterations).and_then(to_value),
        Some(Measure::Gateway) => {
            crate::gateway::gateway(exe, iterations, samples.unwrap_or(7), nginx.as_deref())
                .map_err(io)
                .and_then(to_value)
        }
        Some(Measure::Engage) => Ok(named(
            "engage",
            to_value(crate::engage::engage(home, iterations).map_err(io)?)?,
        )),
        Some(Measure::Sessions) => crate::sessions::sessions(server_command.as_deref(), iterations)
            .map_err(io)
            .and_then(to_value),
        Some(Measure::Admission) => Ok(named(
            "admission",
            to_value(crate::engage::admission(iterations.max(1) * 1000))?,
        )),
        None => {
            let mut runs = Map::new();
            let engage = crate::engage::engage(home, iterations).map_err(io)?;
            runs.insert("engage".into(), to_value(engage)?);
            let admission = crate::engage::admission(iterations.max(1) * 1000);
            runs.insert("admission".into(), to_value(admission)?);
            let gateway =
                crate::gateway::gateway(exe, iterations, samples.unwrap_or(3), nginx.as_deref())
                    .map_err(io)
                    .and_then(to_value);
            runs.insert(
                "gateway".into(),
                gateway.unwrap_or_else(|e| failed(e.to_string())),
            );
            let kill = crate::kill::kill(home, iterations.min(5)).and_then(to_value);
            runs.insert(
                "kill".into(),
                kill.unwrap_or_else(|r| failed(r.to_string())),
            );
            Ok(Value::Object(runs))
        }
    }
}
