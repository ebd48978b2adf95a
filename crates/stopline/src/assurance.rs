//! The verbs that measure and prove: `model-check`, `drill`, `evidence list|verify`, `bench`
//! (`conformance` is `conformance.rs`). Reports are the crates' own; this file wires arguments
//! to them and prints what they return.

use crate::cli::{BenchArg, Command, DrillArgs, EvidenceCommand};
use crate::output;
use serde_json::{Map, Value};
use stopline_control::{evidence, Context};
use stopline_core::{Refusal, RefusalCode};

/// Run one assurance verb.
pub fn execute(ctx: &Context, command: Command, json: bool) -> Result<i32, Refusal> {
    match command {
        Command::ModelCheck => Ok(model_check(json)),
        Command::Conformance { filter } => Ok(crate::conformance::run(json, filter)),
        Command::Drill(args) => drill(ctx, args, json),
        Command::Evidence(EvidenceCommand::List) => {
            output::receipt(json, &evidence::list(ctx)?);
            Ok(0)
        }
        Command::Evidence(EvidenceCommand::Verify { all }) => {
            let receipt = evidence::verify(ctx, all);
            output::receipt(json, &receipt);
            Ok(receipt.exit_code())
        }
        Command::Bench {
            which,
            iterations,
            operations,
            cycles,
            evidence,
            runs,
            samples,
            idle_window_s,
            server_command,
        } => {
            let sizes = stopline_bench::history::HistorySizes {
                operations,
                cycles,
                evidence,
                runs,
            };
            let idle = std::time::Duration::from_secs_f64(idle_window_s.clamp(0.1, 600.0));
            let (samples, server) = (samples.unwrap_or(15), server_command);
            let report = bench(ctx, which, iterations, sizes, samples, idle, server)?;
            output::report(json, &report);
            Ok(0)
        }
        _ => unreachable!("not an assurance verb"),
    }
}

/// `model-check` (docs/reference.md §11): exit 0 when every property holds, 1 on a counterexample.
pub fn model_check(json: bool) -> i32 {
    let options = stopline_assurance::protocol::Options {
        progress: true,
        ..Default::default()
    };
    let report = stopline_assurance::model_check::run(&options);
    output::verdict(json, &report.json(), &report.text(), report.ok())
}

/// A typed bench report as the JSON the bench command prints.
fn to_value(report: impl serde::Serialize) -> Result<Value, Refusal> {
    serde_json::to_value(report).map_err(io)
}

fn io(error: impl std::fmt::Display) -> Refusal {
    Refusal::new(RefusalCode::ControlIo, error.to_string())
}

/// `bench` (docs/reference.md §3): one measure, or (without `which`) the four of docs/reference.md §3 side by side. A measure this
/// machine cannot take (the kill needs cgroup v2 and root) is reported as such, never left out.
fn bench(
    ctx: &Context,
    which: Option<BenchArg>,
    iterations: usize,
    sizes: stopline_bench::history::HistorySizes,
    samples: usize,
    idle: std::time::Duration,
    server_command: Option<String>,
) -> Result<Value, Refusal> {
    let home = ctx.store.layout().home().to_path_buf();
    let router = || Some(Box::new(stopline_mcp::http::router) as _);
    let failed = |error: String| Value::Object(Map::from_iter([("error".into(), error.into())]));
    match which {
        Some(BenchArg::History) => {
            let exe = std::env::current_exe().map_err(io)?;
            stopline_bench::history::history(&exe, sizes, samples, idle).map_err(io)
        }
        Some(BenchArg::Kill) => stopline_bench::kill::kill(&home, iterations).and_then(to_value),
        Some(BenchArg::Gateway) => {
            stopline_bench::gateway::gateway(iterations, router()).map_err(io)
        }
        Some(BenchArg::Engage) => {
            let engage = stopline_bench::engage::engage(&home, iterations).map_err(io)?;
            Ok(Value::Object(Map::from_iter([("engage".into(), engage)])))
        }
        Some(BenchArg::Sessions) => {
            stopline_bench::sessions::sessions(server_command.as_deref(), iterations)
                .map_err(|e| Refusal::new(RefusalCode::ControlIo, e))
        }
        Some(BenchArg::Admission) => {
            let admission = stopline_bench::engage::admission(iterations.max(1) * 1000);
            Ok(Value::Object(Map::from_iter([(
                "admission".into(),
                admission,
            )])))
        }
        None => {
            let mut runs = Map::new();
            let engage = stopline_bench::engage::engage(&home, iterations).map_err(io)?;
            runs.insert("engage".into(), engage);
            let admission = stopline_bench::engage::admission(iterations.max(1) * 1000);
            runs.insert("admission".into(), admission);
            let gateway = stopline_bench::gateway::gateway(iterations, router());
            runs.insert(
                "gateway".into(),
                gateway.unwrap_or_else(|e| failed(e.to_string())),
            );
            let kill = stopline_bench::kill::kill(&home, iterations.min(5)).and_then(to_value);
            runs.insert(
                "kill".into(),
                kill.unwrap_or_else(|r| failed(r.to_string())),
            );
            Ok(Value::Object(runs))
        }
    }
}

/// `drill` (docs/reference.md §11): one drill, `--repeat` drills in a row, or a `--sweep`; exit 1 if any failed.
fn drill(ctx: &Context, args: DrillArgs, json: bool) -> Result<i32, Refusal> {
    let mut options = stopline_drill::DrillOptions::new(ctx.store.layout().home().to_path_buf());
    options.agents = args.agents;
    options.subagents = args.subagents;
    options.pull_after_ms = args.pull_after_ms;
    options.window_ms = args.window_ms;
    options.scope = args.scope;
    options.level = args.level;
    options.harness_version = args.harness_version;
    options.target_ms = args.target_ms;
    options.progress = !json;
    options.slow_view = args.slow_view_ms.map(std::time::Duration::from_millis);
    options.floor = args.floor;
    if let Some(url) = args.against {
        options.mode = stopline_drill::Mode::Against(url);
    }
    let (report, pass) =
        stopline_drill::report::requested(&options, &args.sweep, args.repeat, args.plot.as_deref())
            .map_err(|e| e.to_refusal())?;
    if json {
        output::json(&report);
    } else {
        output::line(&stopline_drill::report::human(&report));
    }
    if !pass {
        output::error_line(&stopline_drill::report::failure_line(&report));
    }
    Ok(if pass { 0 } else { 1 })
}
