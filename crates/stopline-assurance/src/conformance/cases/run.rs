//! The supervisor's gates (docs/reference.md §6, §11): `stopline run` starts nothing for an incomplete policy
//! card, after a failed drill of its harness version, or under a covering latch; a run's
//! recovery needs one of its own approvers. The evidence log's cases are in `evidence.rs`.

use super::{case, slow, Case};
use crate::conformance::http::Upstream;
use crate::conformance::sandbox::{Out, Sandbox};
use crate::conformance::steps::{refused, OPERATOR};
use crate::conformance::{ensure, harness, CaseError, Verdict};
use serde_json::{json, Value};

pub const CASES: &[Case] = &[
    case(
        "policy_card_incomplete",
        "run refuses a card missing required fields (naming each) or with a free-text stop condition: policy_card_incomplete, nothing started, nothing recorded",
        policy_card_incomplete,
    ),
    slow(
        "drill_required_after_a_failed_drill",
        "after a drill of a harness version fails (exit 1, pass false), run refuses that version drill_required; require_drill refuses a version never drilled",
        drill_required_after_a_failed_drill,
    ),
    case(
        "run_refused_under_a_covering_latch",
        "run refuses (run_contained) while a latch covers its run or its agent, and starts nothing",
        run_refused_under_a_covering_latch,
    ),
    slow(
        "run_recovery_requires_a_run_approver",
        "recovering a run scope on the console needs --by in the run's who_may_approve_restart: another operator is refused operator_identity, the approver may plan",
        run_recovery_requires_a_run_approver,
    ),
];

/// A complete card for `run_id` with one agent.
pub(super) fn card(run_id: &str, agent: &str) -> Value {
    json!({"schema": "policy-card.v1", "run_id": run_id, "harness_version": "harness-conformance",
        "stop_conditions": [{"kind": "manual"}, {"kind": "wall_clock"}, {"kind": "breaker"}],
        "budgets": {agent: {"tool_calls": 50, "steps": 20, "wall_clock_s": 600}},
        "breakers": {"unauthorized_calls": 5, "refused_egress": 3, "anomaly_score": 0.9, "trip_level": "halt-all"},
        "stop_handle": {"name": "conformance-stop", "levels": ["pause", "trip_breaker", "revoke_identity"],
                        "who_may_pull": ["anyone-admitted"], "who_may_approve_restart": ["operator"]},
        "time_to_stop_target_ms": 1000, "require_drill": false})
}

/// `run --unconfined --gateway URL -- sh -c 'touch MARKER'` under `card`: the run, and whether
/// the command started.
pub(super) fn attempt(s: &Sandbox, card: &Value, gateway: &str) -> Result<(Out, bool), CaseError> {
    let id = card["run_id"].as_str().unwrap_or("run");
    let path = s.dir().join(format!("card-{id}.json"));
    std::fs::write(&path, card.to_string()).map_err(harness)?;
    let marker = s.dir().join(format!("started-{id}"));
    let script = format!("touch '{}'", marker.display());
    let out = s.run(&[
        "run",
        "--policy",
        &path.display().to_string(),
        "--unconfined",
        // The marker lies in the sandbox under the host's /tmp, which gateway-only (the default)
        // hides from the agent: without --net host a run that started would look as if not.
        "--net",
        "host",
        "--gateway",
        gateway,
        "--",
        "/bin/sh",
        "-c",
        &script,
    ])?;
    Ok((out, marker.exists()))
}

pub(super) fn refused_run(
    s: &Sandbox,
    card: &Value,
    gateway: &str,
    code: &str,
    what: &str,
) -> Result<Out, CaseError> {
    let (out, started) = attempt(s, card, gateway)?;
    refused(&out, code, what)?;
    ensure(!started, || {
        format!("{what}: the command ran although the run was refused")
    })?;
    Ok(out)
}

fn policy_card_incomplete(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    let incomplete = json!({"schema": "policy-card.v1", "run_id": "incomplete"});
    let out = refused_run(
        s,
        &incomplete,
        &gateway.url(),
        "policy_card_incomplete",
        "a bare card",
    )?;
    for field in [
        "harness_version",
        "stop_conditions",
        "budgets",
        "breakers",
        "who_may_approve_restart",
        "time_to_stop_target_ms",
    ] {
        ensure(out.stderr.contains(field), || {
            format!("{field} not named: {}", out.stderr)
        })?;
    }
    let mut free_text = card("free-text", "a");
    free_text["stop_conditions"] = json!([{"kind": "when it feels wrong"}]);
    refused_run(
        s,
        &free_text,
        &gateway.url(),
        "policy_card_incomplete",
        "a free-text stop condition",
    )?;
    ensure(!s.file("runs").exists(), || {
        "a refused card left a record under runs/".into()
    })?;
    Ok("bare card: policy_card_incomplete naming every missing field; free-text condition refused; nothing ran or was recorded".into())
}

fn drill_required_after_a_failed_drill(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    // A drill that cannot meet its target: a gateway view held 300 ms late against a 0 ms target.
    let drill = s.small_drill(&[
        "--target-ms",
        "0",
        "--slow-view-ms",
        "300",
        "--harness-version",
        "harness-failing",
    ])?;
    let observation = drill.json();
    ensure(drill.code == 1 && observation["pass"] == false, || {
        format!("the failing drill: {}", drill.brief())
    })?;
    let mut c = card("after-failed-drill", "agent-d");
    c["harness_version"] = json!("harness-failing");
    let out = refused_run(
        s,
        &c,
        &gateway.url(),
        "drill_required",
        "after a failed drill",
    )?;
    ensure(out.stderr.contains("harness-failing"), || {
        format!("the version is not named: {}", out.stderr)
    })?;
    let mut never = card("never-drilled", "agent-d");
    never["harness_version"] = json!("harness-never");
    never["require_drill"] = json!(true);
    refused_run(
        s,
        &never,
        &gateway.url(),
        "drill_required",
        "require_drill without a passing drill",
    )?;
    Ok(format!(
        "drill exit 1 (pass false, p99 {} ms); run under harness-failing: drill_required; require_drill on a never-drilled version: drill_required",
        observation["time_to_first_rejection_ms"]["p99"]
    ))
}

fn run_refused_under_a_covering_latch(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    s.engage("run:covered", "halt-noncritical")?;
    refused_run(
        s,
        &card("covered", "agent-l"),
        &gateway.url(),
        "run_contained",
        "run:covered halted",
    )?;
    s.engage("agent:agent-m", "halt-all")?;
    refused_run(
        s,
        &card("other", "agent-m"),
        &gateway.url(),
        "run_contained",
        "agent:agent-m halted",
    )?;
    Ok(
        "run:covered halt-noncritical and agent:agent-m halt-all: run_contained, nothing started"
            .into(),
    )
}

fn run_recovery_requires_a_run_approver(s: &Sandbox) -> Verdict {
    let gateway = Upstream::start().map_err(harness)?;
    s.write("config.toml", b"operators = [\"operator\", \"alice\"]\n")?;
    let run = s.run_id("approved");
    let scope = format!("run:{run}");
    let mut c = card(&run, "agent-r");
    c["stop_handle"]["who_may_approve_restart"] = json!(["alice"]);
    let (out, started) = attempt(s, &c, &gateway.url())?;
    ensure(out.code == 0 && started, || {
        format!("the run did not start: {}", out.brief())
    })?;
    s.engage(&scope, "emergency")?;
    let args = |by: &'static str| {
        [
            "recover",
            "plan",
            "--scope",
            scope.as_str(),
            "--reason",
            "checked",
            "--by",
            by,
        ]
    };
    let other = s.console(&args(OPERATOR))?;
    refused(
        &other,
        "owner_control_required",
        "an operator who is not the run's approver",
    )?;
    ensure(
        other.stderr.contains("operator_identity")
            && !other.stderr.contains("interactive_terminal"),
        || other.stderr.clone(),
    )?;
    let alice = s.console(&args("alice"))?;
    ensure(alice.code == 0 && alice.json()["plan"].is_string(), || {
        format!("alice: {}", alice.brief())
    })?;
    Ok("run:approved (approvers [alice]): --by operator refused operator_identity; --by alice planned".into())
}
