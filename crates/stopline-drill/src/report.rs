//! The human rendering of drill reports (one drill, a series, a sweep) and the collection of
//! their failure reasons, for the binary's output. JSON stays the record; this is only text.

use serde_json::Value;

fn verdict(pass: &Value) -> &'static str {
    if pass == &Value::Bool(true) {
        "PASS"
    } else {
        "FAIL"
    }
}

fn num(value: &Value) -> String {
    match value.as_f64() {
        Some(v) => format!("{v}"),
        None => "-".into(),
    }
}

fn one(o: &Value) -> String {
    let t = &o["time_to_first_rejection_ms"];
    // At HALT_NONCRITICAL the target counts from the end of the gateway's hold.
    let target = match o.get("queue_timeout_ms").and_then(Value::as_u64) {
        Some(hold) => format!("target {} ms past the {hold} ms hold", o["target_ms"]),
        None => format!("target {} ms", o["target_ms"]),
    };
    let mut text = format!(
        "drill {} {}: {} agents x {} sub-agents, {} at {}\n  time to first rejection: p50 {} ms, p99 {} ms, max {} ms ({target})\n    of which: waiting for the call in flight p99 {} ms; the refused call itself p99 {} ms\n  engage returned after {} ms; last gateway acknowledgement after {} ms\n  after the trip: {} tool calls, {} writes, {} model calls, {} A2A messages; in flight at the trip: {}; effects: {}",
        o["drill_id"].as_str().unwrap_or_default(),
        verdict(&o["pass"]),
        o["agents"], o["subagents"],
        o["scope"].as_str().unwrap_or_default(),
        o["level"].as_str().unwrap_or_default(),
        num(&t["p50"]), num(&t["p99"]), num(&t["max"]),
        num(&o["in_flight_wait_ms"]["p99"]), num(&o["first_refused_call_ms"]["p99"]),
        num(&o["engage_returned_ms"]), num(&o["ack_ms"]),
        o["tool_calls_after_trip"], o["writes_after_trip"], o["model_calls_after_trip"],
        o["a2a_messages_after_trip"], o["in_flight_at_trip"], o["effects"],
    );
    if let Some(long) = o.get("a2a_long_task") {
        let detail = long["end"]["detail"].as_str().unwrap_or_default();
        let after = num(&long["ended_after_pull_ms"]);
        let stream = match long["end"]["how"].as_str().unwrap_or_default() {
            "refused" => format!("stream cut with {detail} {after} ms after the pull"),
            "ended" => format!("stream ended without a refusal {after} ms after the pull"),
            "error" => format!("stream failed: {detail}"),
            _ => "stream still open when the drill ended".to_string(),
        };
        text.push_str(&format!(
            "\n  long A2A task {}: {stream}; remote cancel {} ({} cancel(s) received)",
            long["task"].as_str().unwrap_or("(none)"),
            long["cancel"]
                .as_str()
                .unwrap_or_default()
                .replace('_', " "),
            o["a2a_cancels_received"],
        ));
    }
    text.push_str(&format!(
        "\n  gate closed (pull → last admission) after {} ms",
        num(&o["gate_closed_ms"])
    ));
    if let Some(b) = o.get("breakdown") {
        text.push_str(&parts_line("", b));
    }
    if let Some(floor) = o.get("floor") {
        let f = &floor["time_to_first_rejection_ms"];
        text.push_str(&format!(
            "\n  floor (stop engaged before the load): time to first rejection p50 {} ms, p99 {} ms, max {} ms; operations admitted {}",
            num(&f["p50"]), num(&f["p99"]), num(&f["max"]), floor["operations_admitted"]
        ));
        if let Some(b) = floor.get("breakdown") {
            text.push_str(&parts_line("floor ", b));
        }
    }
    for reason in o["reasons"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "\n  failed: {}",
            reason.as_str().unwrap_or_default()
        ));
    }
    text
}

/// The breakdown's line (`crate::breakdown`): p99 of each part over the callers, and the parts
/// of the caller at the p99 rank.
fn parts_line(what: &str, b: &Value) -> String {
    let p99 = b["slowest"].as_array().and_then(|s| s.last());
    let part = |name: &str| p99.map_or("-".into(), |p| num(&p[name]));
    format!(
        "\n  {what}breakdown: view held the latch after {} ms ({} calls woken); p99 of each part: to the handler {} ms, until latched {} ms, answering {} ms, delivery {} ms\n    the p99 caller: to the handler {} + until latched {} + answering {} + delivery {} = {} ms",
        num(&b["view_latched_ms"]), b["woken"],
        num(&b["to_handler_ms"]["p99"]), num(&b["until_latched_ms"]["p99"]),
        num(&b["answering_ms"]["p99"]), num(&b["delivery_ms"]["p99"]),
        part("to_handler_ms"), part("until_latched_ms"), part("answering_ms"),
        part("delivery_ms"), part("total_ms"),
    )
}

fn series(s: &Value) -> String {
    let m = &s["median"];
    let mut text = format!(
        "{} drills at {} agents x {} sub-agents: {} passed ({})\n  medians: time to first rejection p50 {} ms, p99 {} ms; floor p99 {} ms; gate closed {} ms (max {}); engage returned {} ms; acks {} ms\n  effects after the trip, all drills: {} (of {} effects; {} in flight at the trip)",
        s["drills"], s["agents"], s["subagents"], s["passed"], verdict(&s["pass"]),
        num(&m["time_to_first_rejection_p50_ms"]), num(&m["time_to_first_rejection_p99_ms"]),
        num(&m["floor_time_to_first_rejection_p99_ms"]), num(&m["gate_closed_ms"]),
        num(&m["gate_closed_max_ms"]),
        num(&m["engage_returned_ms"]), num(&m["ack_ms"]),
        s["effects_after_trip"], s["effects"], s["in_flight_at_trip"],
    );
    for (what, key) in [("", "breakdown"), ("floor's ", "floor_breakdown")] {
        let b = &m[key];
        let c = &b["p99_caller"];
        if c["total_ms"].is_number() {
            text.push_str(&format!(
                "\n  {what}p99 caller (medians): to the handler {} + until latched {} + answering {} + delivery {} = {} ms; view held the latch after {} ms",
                num(&c["to_handler_ms"]), num(&c["until_latched_ms"]), num(&c["answering_ms"]),
                num(&c["delivery_ms"]), num(&c["total_ms"]), num(&b["view_latched_ms"]),
            ));
        }
    }
    text
}

/// A report as text: a single drill, a series (`--repeat`), or a sweep.
pub fn human(report: &Value) -> String {
    if let Some(sweep) = report["sweep"].as_array() {
        let mut parts: Vec<String> = sweep.iter().map(series).collect();
        if let Some(plot) = report["plot"].as_str() {
            parts.push(format!("plot written to {plot}"));
        }
        return parts.join("\n");
    }
    if report.get("drills").is_some() {
        return series(report);
    }
    one(report)
}

/// Every failure reason anywhere in a report.
pub fn reasons_in(report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect(report, &mut out);
    out
}

fn collect(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("reasons", Value::Array(items)) => {
                        out.extend(items.iter().filter_map(|r| r.as_str().map(String::from)))
                    }
                    _ => collect(inner, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| collect(i, out)),
        _ => {}
    }
}

/// What `stopline drill` was asked for: one drill, `repeat` drills in a row, or (with `sizes`)
/// a sweep, each size `repeat` times, its plot written to `plot`. The report, and whether every
/// drill in it passed.
pub fn requested(
    options: &crate::DrillOptions,
    sizes: &[usize],
    repeat: usize,
    plot: Option<&std::path::Path>,
) -> Result<(Value, bool), crate::DrillError> {
    if !sizes.is_empty() {
        let (_, report) = crate::sweep(options, sizes, repeat, plot)?;
        let pass = report["pass"] == true;
        Ok((report, pass))
    } else if repeat > 1 {
        let series = crate::repeat(options, repeat)?;
        Ok((series.to_json(), series.pass()))
    } else {
        let observation = crate::drill(options)?;
        Ok((observation.to_json(), observation.pass))
    }
}

/// The error line of a failed report: every reason it gives, or a pointer to the report.
pub fn failure_line(report: &Value) -> String {
    let reasons = reasons_in(report);
    format!(
        "error: drill failed: {}",
        if reasons.is_empty() {
            "see the report".to_string()
        } else {
            reasons.join("; ")
        }
    )
}
