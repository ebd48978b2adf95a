//! Drills in series: `--repeat K` (K drills in a row at one size, each filed) and `--sweep
//! 10,50,100,200` (K drills at each number of agents, with the plot of time to first rejection
//! against the number of agents).
//!
//! Figures across drills are medians of the per-drill figures; a series fails when any drill in
//! it failed, and every drill's own record stays in the evidence log either way.

use crate::breakdown::{Breakdown, Parts};
use crate::observation::Observation;
use crate::plot::{self, Point};
use crate::progress::Progress;
use crate::{DrillError, DrillOptions};
use serde_json::{json, Value};
use std::path::Path;
use stopline_bench::stats::median;

/// The summary of drills at one size.
#[derive(Debug, Clone)]
pub struct Series {
    /// Every drill's record.
    pub observations: Vec<Observation>,
}

impl Series {
    /// True when every drill passed.
    pub fn pass(&self) -> bool {
        self.observations.iter().all(|o| o.pass)
    }

    fn medians(&self, f: impl Fn(&Observation) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = self.observations.iter().filter_map(f).collect();
        (!values.is_empty()).then(|| median(values.iter().copied()))
    }

    /// The series as JSON: medians, totals and one line per drill.
    pub fn to_json(&self) -> Value {
        let first = self.observations.first();
        let total = |f: fn(&Observation) -> u64| self.observations.iter().map(f).sum::<u64>();
        json!({
            "agents": first.map(|o| o.agents),
            "subagents": first.map(|o| o.subagents),
            "drills": self.observations.len(),
            "passed": self.observations.iter().filter(|o| o.pass).count(),
            "pass": self.pass(),
            "effects_after_trip": total(|o| o.tool_calls_after_trip + o.writes_after_trip + o.model_calls_after_trip + o.a2a_messages_after_trip),
            "tool_calls_after_trip": total(|o| o.tool_calls_after_trip),
            "writes_after_trip": total(|o| o.writes_after_trip),
            "model_calls_after_trip": total(|o| o.model_calls_after_trip),
            "a2a_messages_after_trip": total(|o| o.a2a_messages_after_trip),
            "in_flight_at_trip": total(|o| o.in_flight_at_trip),
            "effects": total(|o| o.effects),
            "median": {
                "time_to_first_rejection_p50_ms": self.medians(|o| Some(o.time_to_first_rejection_ms.p50)),
                "time_to_first_rejection_p99_ms": self.medians(|o| Some(o.time_to_first_rejection_ms.p99)),
                "time_to_first_rejection_max_ms": self.medians(|o| Some(o.time_to_first_rejection_ms.max)),
                "first_refused_call_p99_ms": self.medians(|o| Some(o.first_refused_call_ms.p99)),
                "in_flight_wait_p99_ms": self.medians(|o| Some(o.in_flight_wait_ms.p99)),
                "engage_returned_ms": self.medians(|o| Some(o.engage_returned_ms)),
                "ack_ms": self.medians(|o| o.ack_ms),
                "ack_collect_ms": self.medians(|o| o.ack_collect_ms),
                "time_to_contained_ms": self.medians(|o| o.time_to_contained_ms),
                "longest_task_ms": self.medians(|o| Some(o.longest_task_ms)),
                "gate_closed_ms": self.medians(|o| o.gate_closed_ms),
                "gate_closed_max_ms": self.observations.iter().filter_map(|o| o.gate_closed_ms).reduce(f64::max),
                "floor_time_to_first_rejection_p50_ms": self.medians(|o| o.floor.as_ref().map(|f| f.time_to_first_rejection_ms.p50)),
                "floor_time_to_first_rejection_p99_ms": self.medians(|o| o.floor.as_ref().map(|f| f.time_to_first_rejection_ms.p99)),
                "breakdown": breakdown_medians(self, |o| o.breakdown.as_ref()),
                "floor_breakdown": breakdown_medians(self, |o| o.floor.as_ref().and_then(|f| f.breakdown.as_ref())),
            },
            "runs": self.observations.iter().map(|o| json!({
                "drill_id": o.drill_id, "pass": o.pass,
                "time_to_first_rejection_ms": o.time_to_first_rejection_ms,
                "first_refused_call_ms": o.first_refused_call_ms,
                "in_flight_wait_ms": o.in_flight_wait_ms,
                "engage_returned_ms": o.engage_returned_ms, "ack_ms": o.ack_ms,
                "gate_closed_ms": o.gate_closed_ms,
                "floor": o.floor,
                "breakdown": o.breakdown,
                "ack_collect_ms": o.ack_collect_ms, "time_to_contained_ms": o.time_to_contained_ms,
                "after_trip": o.tool_calls_after_trip + o.writes_after_trip + o.model_calls_after_trip + o.a2a_messages_after_trip,
                "in_flight_at_trip": o.in_flight_at_trip, "effects": o.effects,
                "reasons": o.reasons,
            })).collect::<Vec<_>>(),
        })
    }
}

/// Medians over the drills of their breakdowns (`crate::breakdown`): when the view held the
/// latch, each part's p99 over the callers, and the parts of the caller at the p99 rank (the
/// fastest of the slowest), which add up to that drill's p99.
fn breakdown_medians(series: &Series, of: fn(&Observation) -> Option<&Breakdown>) -> Value {
    let m = |f: &dyn Fn(&Breakdown) -> Option<f64>| series.medians(|o| of(o).and_then(f));
    let p99_caller = |f: fn(&Parts) -> f64| m(&|b: &Breakdown| b.slowest.last().map(f));
    json!({
        "view_latched_ms": m(&|b| b.view_latched_ms),
        "wake_scan_ms": m(&|b| b.wake_scan_ms),
        "woken": m(&|b| b.woken.map(|w| w as f64)),
        "in_flight": m(&|b| Some(b.in_flight as f64)),
        "to_handler_p99_ms": m(&|b| Some(b.to_handler_ms.p99)),
        "until_latched_p99_ms": m(&|b| Some(b.until_latched_ms.p99)),
        "answering_p99_ms": m(&|b| Some(b.answering_ms.p99)),
        "delivery_p99_ms": m(&|b| Some(b.delivery_ms.p99)),
        "p99_caller": {
            "to_handler_ms": p99_caller(|p| p.to_handler_ms),
            "until_latched_ms": p99_caller(|p| p.until_latched_ms),
            "answering_ms": p99_caller(|p| p.answering_ms),
            "delivery_ms": p99_caller(|p| p.delivery_ms),
            "total_ms": p99_caller(|p| p.total_ms),
        },
    })
}

/// `count` drills in a row with `options`.
pub fn repeat(options: &DrillOptions, count: usize) -> Result<Series, DrillError> {
    let bar = Progress::new(options.progress, count as u64, "drills");
    let mut single = options.clone();
    single.progress = options.progress && count == 1;
    let mut observations = Vec::with_capacity(count);
    for i in 0..count.max(1) {
        bar.message(format!(
            "drill {} of {count} at {} agents",
            i + 1,
            options.agents
        ));
        observations.push(crate::drill(&single)?);
        bar.inc();
    }
    bar.finish();
    Ok(Series { observations })
}

/// `repeat` drills at each number of agents in `sizes`; with `plot`, write the SVG there.
pub fn sweep(
    options: &DrillOptions,
    sizes: &[usize],
    repeat_each: usize,
    plot_to: Option<&Path>,
) -> Result<(Vec<Series>, Value), DrillError> {
    let mut all = Vec::new();
    for &agents in sizes {
        let mut at = options.clone();
        at.agents = agents;
        all.push(repeat(&at, repeat_each)?);
    }
    let points: Vec<Point> = all
        .iter()
        .map(|s| Point {
            agents: s.observations.first().map_or(0, |o| o.agents),
            p50_ms: s
                .medians(|o| Some(o.time_to_first_rejection_ms.p50))
                .unwrap_or(0.0),
            p99_ms: s
                .medians(|o| Some(o.time_to_first_rejection_ms.p99))
                .unwrap_or(0.0),
        })
        .collect();
    if let Some(path) = plot_to {
        let title = format!(
            "Time from the pull to each caller's first rejected call ({} sub-agents per agent; median of {} drills)",
            options.subagents, repeat_each
        );
        #[allow(clippy::disallowed_methods)] // the plot file the user named
        std::fs::write(path, plot::svg(&title, &points, Some(10.0)))?;
    }
    let report = json!({
        "sweep": all.iter().map(Series::to_json).collect::<Vec<_>>(),
        "plot": plot_to.map(|p| p.display().to_string()),
        "pass": all.iter().all(Series::pass),
    });
    Ok((all, report))
}
