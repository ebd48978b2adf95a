//! The drill's record, `control-observation.v1` (docs/reference.md §9), its verdict, and its filing in the
//! evidence log of the home, where `stopline run` reads drills by `harness_version` and `pass`.
//!
//! The drill fails when any effect executed after the trip (A2A messages the remote agent
//! received included), when the long A2A task open at a HALT_ALL or EMERGENCY was not cut with
//! the refusal, when any operation of its agents was admitted after the trip, when a caller was
//! never refused during the window, or when the p99 time to first rejection is above
//! `target_ms`. Each failure is named in `reasons`.
//!
//! At HALT_NONCRITICAL the gateway holds a noncritical call `queue_timeout_s` before it refuses
//! it `queued_timeout` (docs/reference.md §1, "Admission"), by design: no caller can be refused
//! sooner. What that level promises is judged instead: nothing admitted or executed after the
//! trip (as at every level), every caller refused within the window, and the p99 time to first
//! rejection within the hold plus `target_ms` (`queue_timeout_ms` in the record); the time to
//! first rejection itself is reported as a figure.

use crate::agents::CallerReport;
use crate::breakdown::Breakdown;
use crate::long_task::{LongTaskObserved, StreamEnd};
use crate::matching::Matched;
use crate::pull::Pull;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use stopline_bench::stats::{round_ms, summarize, Summary};
use stopline_store::Store;

/// Calls made during the drill, by what came back.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Calls {
    /// Succeeded before the pull.
    pub ok_before_pull: u64,
    /// Succeeded at or after the pull (in flight when it landed, or after the trip).
    pub ok_after_pull: u64,
    /// Refused at or after the pull.
    pub refused_after_pull: u64,
    /// Refused before the pull (unexpected).
    pub refused_before_pull: u64,
    /// Transport or upstream errors.
    pub errors: u64,
    /// Refusal codes seen after the pull.
    pub refusal_codes: BTreeMap<String, u64>,
}

/// One drill's `control-observation.v1`.
#[derive(Debug, Clone, Serialize)]
pub struct Observation {
    /// Always `control-observation.v1`.
    pub schema: &'static str,
    /// The harness version it is recorded against.
    pub harness_version: String,
    /// Top-level agents.
    pub agents: usize,
    /// Sub-agents per agent.
    pub subagents: usize,
    /// The stop level.
    pub level: String,
    /// The stopped scope.
    pub scope: String,
    /// RFC 3339 time of the pull.
    pub pulled_at: String,
    /// Pull → engage receipt.
    pub engage_returned_ms: f64,
    /// Pull → last gateway acknowledgement (`null` when none acknowledged).
    pub ack_ms: Option<f64>,
    /// Pull → the last admission (dispatch) the gateway made for any drill caller: how long
    /// the gate took to close (0 when its last admission came before the pull; `null` when it
    /// admitted nothing at all). Millisecond resolution (the registry's).
    pub gate_closed_ms: Option<f64>,
    /// Over every caller (agents and sub-agents): pull → its first refused call.
    pub time_to_first_rejection_ms: Summary,
    /// Over the same callers: how long that first refused call took (send → refusal). The
    /// rest of the time to first rejection is the wait for the call in flight at the pull.
    pub first_refused_call_ms: Summary,
    /// Over the same callers: pull → sending the call that was refused (0 when it was sent
    /// before the pull); calls in flight finish on their own (docs/reference.md §8), so this is their tail.
    pub in_flight_wait_ms: Summary,
    /// Tool calls executed after the trip.
    pub tool_calls_after_trip: u64,
    /// Writes executed after the trip.
    pub writes_after_trip: u64,
    /// Model calls executed after the trip.
    pub model_calls_after_trip: u64,
    /// Messages the remote A2A agent received after the trip.
    pub a2a_messages_after_trip: u64,
    /// Effects admitted before the trip that executed after it.
    pub in_flight_at_trip: u64,
    /// The window watched after the trip (engage returned).
    pub window_ms: u64,
    /// The p99 time-to-first-rejection target (at HALT_NONCRITICAL, past `queue_timeout_ms`).
    pub target_ms: u64,
    /// At HALT_NONCRITICAL only: the gateway's hold before a noncritical call is refused
    /// `queued_timeout` (its `queue_timeout_s`), which the p99 is judged beyond.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_timeout_ms: Option<u64>,
    /// The verdict.
    pub pass: bool,
    /// Why it failed (empty when it passed).
    pub reasons: Vec<String>,
    /// The drill's id (its run is `run:drill-<id>`).
    pub drill_id: String,
    /// `local` or the live gateway's URL.
    pub gateway: String,
    /// Callers (agents and sub-agents).
    pub callers: usize,
    /// Callers never refused during the window.
    pub callers_never_rejected: usize,
    /// Effects with no operation at all (included in the after-trip counts).
    pub bypass: u64,
    /// Operations of drill agents admitted after the trip.
    pub operations_admitted_after_trip: u64,
    /// Effects executed in all.
    pub effects: u64,
    /// Whether model calls reached the drill's destination (always locally).
    pub model_calls_exercised: bool,
    /// Whether A2A sends reached the drill's remote A2A agent (always locally).
    pub a2a_exercised: bool,
    /// Cancels the remote A2A agent received (the gateway's, at the stop).
    pub a2a_cancels_received: u64,
    /// The long streaming A2A task one agent kept open (absent when A2A is not exercised).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub a2a_long_task: Option<LongTaskObserved>,
    /// Longest successful call before the pull.
    pub longest_task_ms: f64,
    /// Engage start → latch durable, from the receipt.
    pub time_to_contained_ms: Option<f64>,
    /// The part of engage spent collecting every gateway's acknowledgement (after the latch,
    /// WAL and epoch were durable), from the receipt.
    pub ack_collect_ms: Option<f64>,
    /// The latch file.
    pub latch: String,
    /// Gateways that acknowledged.
    pub acknowledged_by: Vec<String>,
    /// Live gateways that did not.
    pub unacknowledged: Vec<String>,
    /// What the callers saw.
    pub calls: Calls,
    /// Up to ten effects after the trip.
    pub after_trip_examples: Vec<Value>,
    /// Where each caller's time to first rejection went, from the in-process gateway's
    /// timeline (`crate::breakdown`; absent against a live gateway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Breakdown>,
    /// With `--floor`: the same load against a gateway whose stop was engaged before it started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<Floor>,
}

/// The floor of a drill: every caller refused from its first call, so the time from a "pull"
/// (no engage: the stop was already in force) to each caller's first refusal is what the
/// machine takes to answer that many callers at all, without any gateway reaction in it.
#[derive(Debug, Clone, Serialize)]
pub struct Floor {
    /// Over every caller: the pull moment → its first refusal after it.
    pub time_to_first_rejection_ms: Summary,
    /// Over the same callers: that refused call, send → refusal.
    pub first_refused_call_ms: Summary,
    /// Callers (agents and sub-agents).
    pub callers: usize,
    /// Callers never refused after the pull moment.
    pub callers_never_rejected: usize,
    /// Operations the gateway admitted for drill callers (must be 0: the stop came first).
    pub operations_admitted: u64,
    /// Where each caller's time went (no latch to wait for; absent against a live gateway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Breakdown>,
}

impl Floor {
    /// The floor from the callers' reports and the operations admitted.
    pub fn build(reports: &[CallerReport], operations_admitted: u64) -> Floor {
        let ms = |d: &std::time::Duration| d.as_secs_f64() * 1000.0;
        let firsts: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.first_rejection.as_ref().map(ms))
            .collect();
        let calls: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.first_refused_call.as_ref().map(ms))
            .collect();
        Floor {
            callers_never_rejected: reports.len() - firsts.len(),
            time_to_first_rejection_ms: summarize(&firsts),
            first_refused_call_ms: summarize(&calls),
            callers: reports.len(),
            operations_admitted,
            breakdown: None,
        }
    }
}

/// Everything a verdict is built from.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// The options' harness version, level, scope, target, counts.
    pub options: &'a crate::DrillOptions,
    /// The resolved scope.
    pub scope: String,
    /// The drill id.
    pub drill_id: String,
    /// `local` or the URL.
    pub gateway: String,
    /// The pull.
    pub pull: &'a Pull,
    /// The callers' reports.
    pub reports: &'a [CallerReport],
    /// The matching.
    pub matched: Matched,
    /// The effective window.
    pub window_ms: u64,
    /// Longest successful call before the pull, ms.
    pub longest_task_ms: f64,
    /// Whether model calls were made.
    pub model_calls_exercised: bool,
    /// Whether A2A sends were made.
    pub a2a_exercised: bool,
    /// Cancels the remote A2A agent received.
    pub a2a_cancels_received: u64,
    /// The long A2A task, when there was one.
    pub a2a_long_task: Option<LongTaskObserved>,
    /// The gateway's `queue_timeout_s`, in ms.
    pub queue_timeout_ms: u64,
}

impl Observation {
    /// Build the record and its verdict.
    pub fn build(inputs: Inputs<'_>) -> Observation {
        let Inputs {
            options,
            pull,
            reports,
            matched,
            ..
        } = &inputs;
        let firsts: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.first_rejection)
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        let never = reports.len() - firsts.len();
        let ms_of = |d: &std::time::Duration| d.as_secs_f64() * 1000.0;
        let refused_calls: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.first_refused_call.as_ref().map(ms_of))
            .collect();
        let waits: Vec<f64> = reports
            .iter()
            .filter_map(|r| r.first_refused_sent.as_ref().map(ms_of))
            .collect();
        let ttfr = summarize(&firsts);
        let mut calls = Calls::default();
        for r in reports.iter() {
            calls.ok_before_pull += r.ok_before_pull;
            calls.ok_after_pull += r.ok_after_pull;
            calls.refused_before_pull += r.refused_before_pull;
            calls.errors += r.errors;
            for (code, n) in &r.refusals {
                calls.refused_after_pull += n;
                *calls.refusal_codes.entry(code.clone()).or_default() += n;
            }
        }
        let mut reasons = Vec::new();
        if matched.after_trip() > 0 {
            reasons.push(format!(
                "{} effect(s) executed after the trip ({} tool calls, {} writes, {} model calls, {} A2A messages; {} with no operation at all)",
                matched.after_trip(), matched.tool_calls_after_trip, matched.writes_after_trip,
                matched.model_calls_after_trip, matched.a2a_messages_after_trip, matched.bypass
            ));
        }
        let ends_remote_work = matches!(
            stopline_core::Level::parse(&options.level),
            Ok(stopline_core::Level::HaltAll | stopline_core::Level::Emergency)
        );
        if let Some(long) = inputs.a2a_long_task.as_ref() {
            if ends_remote_work
                && long.open_before_pull
                && !matches!(long.end, StreamEnd::Refused(_))
            {
                reasons.push(format!(
                    "the long A2A task open at the stop was not cut with a refusal (its stream: {:?})",
                    long.end
                ));
            }
        }
        if matched.operations_admitted_after_trip > 0 {
            reasons.push(format!(
                "{} operation(s) admitted after engage returned",
                matched.operations_admitted_after_trip
            ));
        }
        if never > 0 {
            reasons.push(format!(
                "{never} caller(s) were never refused within the {} ms window",
                inputs.window_ms
            ));
        }
        // A pause holds noncritical calls before refusing them: its first rejections are
        // judged past that hold, not as if they were refused at once.
        let held = matches!(
            stopline_core::Level::parse(&options.level),
            Ok(stopline_core::Level::HaltNoncritical)
        )
        .then_some(inputs.queue_timeout_ms);
        let bound = options.target_ms as f64 + held.unwrap_or(0) as f64;
        if ttfr.p99 > bound {
            reasons.push(match held {
                None => format!(
                    "time to first rejection p99 {} ms is above the target of {} ms",
                    ttfr.p99, options.target_ms
                ),
                Some(hold) => format!(
                    "time to first rejection p99 {} ms is above the {hold} ms hold of a noncritical call plus the target of {} ms",
                    ttfr.p99, options.target_ms
                ),
            });
        }
        let ms = |d: std::time::Duration| round_ms(d.as_secs_f64() * 1000.0);
        Observation {
            schema: "control-observation.v1",
            harness_version: options.harness_version.clone(),
            agents: options.agents,
            subagents: options.subagents,
            level: stopline_core::Level::parse(&options.level)
                .map_or_else(|_| options.level.clone(), |l| l.as_str().to_string()),
            scope: inputs.scope.clone(),
            pulled_at: stopline_store::env::rfc3339(pull.pulled_unix_ms),
            engage_returned_ms: ms(pull.engage_returned),
            ack_ms: pull.ack.map(ms),
            gate_closed_ms: matched
                .last_admission_ms
                .map(|last| round_ms(((last - pull.pulled_unix_ms) as f64).max(0.0))),
            time_to_first_rejection_ms: ttfr,
            first_refused_call_ms: summarize(&refused_calls),
            in_flight_wait_ms: summarize(&waits),
            tool_calls_after_trip: matched.tool_calls_after_trip,
            writes_after_trip: matched.writes_after_trip,
            model_calls_after_trip: matched.model_calls_after_trip,
            a2a_messages_after_trip: matched.a2a_messages_after_trip,
            in_flight_at_trip: matched.in_flight_at_trip,
            window_ms: inputs.window_ms,
            target_ms: options.target_ms,
            queue_timeout_ms: held,
            pass: reasons.is_empty(),
            reasons,
            drill_id: inputs.drill_id.clone(),
            gateway: inputs.gateway.clone(),
            callers: reports.len(),
            callers_never_rejected: never,
            bypass: matched.bypass,
            operations_admitted_after_trip: matched.operations_admitted_after_trip,
            effects: matched.effects,
            model_calls_exercised: inputs.model_calls_exercised,
            a2a_exercised: inputs.a2a_exercised,
            a2a_cancels_received: inputs.a2a_cancels_received,
            a2a_long_task: inputs.a2a_long_task.clone(),
            longest_task_ms: round_ms(inputs.longest_task_ms),
            time_to_contained_ms: Some(round_ms(pull.receipt.time_to_contained_us as f64 / 1000.0)),
            ack_collect_ms: pull
                .receipt
                .ack_collect_us
                .map(|us| round_ms(us as f64 / 1000.0)),
            latch: pull.receipt.latch.file.clone(),
            acknowledged_by: pull.receipt.acknowledged_by.clone(),
            unacknowledged: pull.receipt.unacknowledged.clone(),
            calls,
            after_trip_examples: matched.examples.clone(),
            breakdown: None,
            floor: None,
        }
    }

    /// The record as JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Append the record to `store`'s evidence log; returns its line number.
    pub fn file(&self, store: &Store) -> Result<u64, stopline_core::Refusal> {
        let fields: Map<String, Value> = match self.to_json() {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        store
            .evidence()
            .append(self.schema, fields)
            .map_err(|e| e.to_refusal())
    }
}
