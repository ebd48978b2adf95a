//! The verbs that measure and prove: `model-check`, `drill`, `evidence list|verify`, `bench`
//! (`conformance` is `conformance.rs`). Reports are the crates' own; this file wires arguments
//! to them and prints what they return.

use crate::cli::{BenchArg, Command, DrillArgs, EvidenceCommand};
use crate::output;
use serde_json::Value;
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
            revocations,
            samples,
            idle_window_s,
            server_command,
            etcd,
            nginx,
            bare_listen,
            bare_upstream,
        } => {
            let sizes = stopline_bench::history::HistorySizes {
                operations,
                cycles,
                evidence,
                runs,
                revocations,
            };
            let idle = std::time::Duration::from_secs_f64(idle_window_s.clamp(0.1, 600.0));
            let settings = stopline_bench::measure::Settings {
                iterations,
                sizes,
                samples,
                idle,
                server_command,
                etcd,
                nginx,
                bare_proxy: bare_listen.zip(bare_upstream),
            };
            let report = bench(ctx, which, settings)?;
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

fn io(error: impl std::fmt::Display) -> Refusal {
    Refusal::new(RefusalCode::ControlIo, error.to_string())
}

/// `bench` (docs/reference.md §3): one measure, or (without `which`) the four of the default set
/// side by side (`stopline_bench::measure::run`).
fn bench(
    ctx: &Context,
    which: Option<BenchArg>,
    settings: stopline_bench::measure::Settings,
) -> Result<Value, Refusal> {
    use stopline_bench::measure::Measure;
    let which = which.map(|which| match which {
        BenchArg::Engage => Measure::Engage,
        BenchArg::Admission => Measure::Admission,
        BenchArg::Kill => Measure::Kill,
        BenchArg::Gateway => Measure::Gateway,
        BenchArg::Sessions => Measure::Sessions,
        BenchArg::History => Measure::History,
        BenchArg::Fleet => Measure::Fleet,
        BenchArg::BareProxy => Measure::BareProxy,
    });
    let exe = std::env::current_exe().map_err(io)?;
    stopline_bench::measure::run(ctx.store.layout().home(), &exe, which, settings)
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
