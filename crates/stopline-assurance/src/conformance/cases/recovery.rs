//! Recovery on the owner console (docs/reference.md §3 Recovery): it clears exactly the planned latches and
//! mints an epoch that keeps pre-stop authority dead; a stop that races it survives as
//! FROZEN_SAFE; uncertainty is carried forward and blocks its target until reconciled — for its
//! own agent's chain only, and for nobody when it is a model request (docs/reference.md §8); a scoped
//! recovery touches nothing else. Repair is in `repair.rs`.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{allowed, blocked, refused, OPERATOR};
use crate::conformance::{ensure, Verdict};
use serde_json::json;

pub const CASES: &[Case] = &[
    case(
        "machine_recovery_clears_the_plan_and_mints_an_epoch",
        "a console recovery clears exactly the planned latch into breakglass.cleared/epoch-N, ends RUNNING, keeps pre-stop tokens stale and admits fresh ones",
        machine_recovery,
    ),
    case(
        "plan_unknown",
        "applying an unknown plan, or a plan a second time, is refused plan_unknown",
        plan_unknown,
    ),
    case(
        "stop_during_recovery_survives_frozen_safe",
        "a stop engaged after the plan survives the apply: recovered false, FROZEN_SAFE, the racing latch named surviving, gates closed",
        stop_during_recovery_survives,
    ),
    case(
        "recovery_carries_unresolved_operations_forward",
        "an operation with no outcome is carried forward by the plan and still blocks its agent on its target after recovery (unresolved_operation); other targets pass",
        carries_unresolved_operations,
    ),
    case(
        "unresolved_operation_blocks_until_reconciled_on_the_console",
        "an unresolved tool operation blocks its agent on its target until the owner console reconciles it; reconciling off the console is refused, twice is operation_unknown",
        reconcile_on_the_console,
    ),
    case(
        "unresolved_operation_blocks_only_its_agent",
        "a tool operation left in doubt by a dead gateway blocks its agent and that agent's sub-agents on its target, naming the operation, the agent and `stopline ops reconcile`; a bystander passes",
        blocks_only_its_agent,
    ),
    case(
        "unresolved_operation_blocks_everyone_when_configured",
        "a tool operation prepared under unresolved_blocks = \"everyone\" blocks every agent on its target",
        blocks_everyone_when_configured,
    ),
    case(
        "unresolved_model_operation_blocks_nobody",
        "a model request left in doubt blocks nobody (its own agent included) and is still shown unresolved, blocking nobody",
        model_operation_blocks_nobody,
    ),
    case(
        "scoped_recovery_spares_other_scopes",
        "recovering agent:a clears only its latch, never writes state.json, and leaves agent:b stopped",
        scoped_recovery_spares_other_scopes,
    ),
];

/// A journal left by a gateway that crashed mid-call: prepared and dispatched, no outcome.
fn crashed_journal(
    s: &Sandbox,
    op: &str,
    target: &str,
) -> Result<(), crate::conformance::CaseError> {
    crashed_journal_with(s, op, target, json!({}))
}

/// [`crashed_journal`] with more fields on the prepared line (`root`, `blocks`).
fn crashed_journal_with(
    s: &Sandbox,
    op: &str,
    target: &str,
    extra: serde_json::Value,
) -> Result<(), crate::conformance::CaseError> {
    let mut prepared = json!({"op": op, "phase": "prepared", "ts": "2026-01-01T00:00:00.000Z",
        "ts_ms": 1767225600000u64, "target": target, "agent": "w"});
    if let (Some(line), Some(extra)) = (prepared.as_object_mut(), extra.as_object()) {
        line.extend(extra.clone());
    }
    let dispatched = json!({"op": op, "phase": "dispatched", "ts": "2026-01-01T00:00:00.001Z",
        "ts_ms": 1767225600001u64});
    // pid 4194304 is above the kernel's pid_max: this writer is certainly dead.
    s.write(
        "ops/gateway-4194304-1.jsonl",
        format!("{prepared}\n{dispatched}\n").as_bytes(),
    )
}

fn machine_recovery(s: &Sandbox) -> Verdict {
    let before = s.token(&["--agent", "w"])?;
    let engaged = s.engage("machine", "emergency")?;
    let file = Sandbox::latch_file(&engaged);
    let plan = s.plan("machine")?;
    ensure(plan["latches"] == json!([file]), || {
        format!("the plan does not fix {file}: {plan}")
    })?;
    let apply = s.apply(&plan)?;
    let receipt = apply.json();
    ensure(
        apply.code == 0 && receipt["recovered"] == true && receipt["state"] == "RUNNING",
        || format!("apply: {}", apply.brief()),
    )?;
    let epoch = receipt["new_epoch"].as_u64().unwrap_or(0);
    ensure(
        s.entries(&format!("breakglass.cleared/epoch-{epoch}")) == vec![file.clone()]
            && s.entries("latches").is_empty(),
        || {
            format!(
                "cleared: {:?}, latches: {:?}",
                s.entries(&format!("breakglass.cleared/epoch-{epoch}")),
                s.entries("latches")
            )
        },
    )?;
    blocked(
        &s.check_token(&before)?,
        "stale_control_epoch",
        "the pre-stop token after recovery",
    )?;
    let fresh = s.token(&["--agent", "w"])?;
    allowed(&s.check_token(&fresh)?, "a token minted after recovery")?;
    Ok(format!(
        "cleared {file} into epoch-{epoch}; RUNNING; pre-stop token stale, fresh token allowed"
    ))
}

fn plan_unknown(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let unknown = s.console(&["recover", "apply", "--plan", "plan_nope", "--by", OPERATOR])?;
    refused(&unknown, "plan_unknown", "an unknown plan")?;
    let plan = s.plan("machine")?;
    let first = s.apply(&plan)?;
    ensure(first.code == 0, || {
        format!("first apply: {}", first.brief())
    })?;
    let again = s.apply(&plan)?;
    refused(&again, "plan_unknown", "the same plan twice")?;
    Ok("plan_nope and a second apply of a used plan: plan_unknown".into())
}

fn stop_during_recovery_survives(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let plan = s.plan("machine")?;
    let racing = s.engage("machine", "halt-all")?;
    let apply = s.apply(&plan)?;
    let receipt = apply.json();
    let racing_file = Sandbox::latch_file(&racing);
    ensure(
        receipt["recovered"] == false
            && receipt["state"] == "FROZEN_SAFE"
            && receipt["surviving"] == json!([racing_file]),
        || format!("apply after a racing stop: {}", apply.brief()),
    )?;
    let status = s.status()?;
    ensure(status["state"] == "FROZEN_SAFE", || {
        format!("status: {}", status["state"])
    })?;
    let c = s.check(&["--class", "noncritical", "--agent", "a"])?;
    ensure(c.0 == 4, || format!("a gate opened: {}", c.1))?;
    Ok(format!(
        "recovered false, FROZEN_SAFE, surviving [{racing_file}]; gates closed"
    ))
}

fn carries_unresolved_operations(s: &Sandbox) -> Verdict {
    crashed_journal(s, "op_crashed01", "mcp:everything:write-file")?;
    s.engage("machine", "emergency")?;
    let plan = s.plan("machine")?;
    ensure(
        plan["carried_forward_operations"][0]["operation"]["op"] == "op_crashed01",
        || format!("not carried forward: {plan}"),
    )?;
    let apply = s.apply(&plan)?;
    ensure(apply.json()["recovered"] == true, || {
        format!("apply: {}", apply.brief())
    })?;
    let token = s.token(&["--agent", "w"])?;
    let c = s.check(&[
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "mcp:everything:write-file",
    ])?;
    blocked(&c, "unresolved_operation", "the carried-forward target")?;
    let other = s.check(&[
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "mcp:everything:echo",
    ])?;
    allowed(&other, "another target")?;
    Ok("op_crashed01 carried forward; after recovery its target blocked unresolved_operation; echo allowed".into())
}

fn reconcile_on_the_console(s: &Sandbox) -> Verdict {
    crashed_journal(s, "op_crashed02", "mcp:everything:write-file")?;
    let token = s.token(&["--agent", "w"])?;
    let target = [
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "mcp:everything:write-file",
    ];
    blocked(
        &s.check(&target)?,
        "unresolved_operation",
        "before reconciliation",
    )?;
    let args = [
        "ops",
        "reconcile",
        "op_crashed02",
        "--outcome",
        "failed",
        "--reason",
        "checked",
        "--by",
        OPERATOR,
    ];
    refused(
        &s.run(&args)?,
        "owner_control_required",
        "reconcile off the console",
    )?;
    let out = s.console(&args)?;
    ensure(out.code == 0, || {
        format!("reconcile on the console: {}", out.brief())
    })?;
    allowed(&s.check(&target)?, "after reconciliation")?;
    refused(&s.console(&args)?, "operation_unknown", "reconciling twice")?;
    Ok("target blocked unresolved_operation; reconcile off console refused; on console ok; target allowed; twice operation_unknown".into())
}

/// `check --token T --target TARGET`.
fn check_target(
    s: &Sandbox,
    token: &str,
    target: &str,
) -> Result<(i32, serde_json::Value), crate::conformance::CaseError> {
    s.check(&[
        "--class",
        "noncritical",
        "--token",
        token,
        "--target",
        target,
    ])
}

fn blocks_only_its_agent(s: &Sandbox) -> Verdict {
    crashed_journal(s, "op_crashed03", "mcp:everything:write-file")?;
    let target = "mcp:everything:write-file";
    let w = s.token(&["--agent", "w"])?;
    let child = s.delegate(&w, "w-helper")?;
    let bystander = s.token(&["--agent", "b"])?;
    let own = check_target(s, &w, target)?;
    blocked(&own, "unresolved_operation", "its own agent")?;
    let message = own.1["message"].as_str().unwrap_or_default().to_string();
    ensure(
        [
            "op_crashed03",
            "agent w",
            "stopline ops reconcile op_crashed03",
        ]
        .iter()
        .all(|needle| message.contains(needle)),
        || format!("the refusal does not name the operation, the agent and the command: {message}"),
    )?;
    blocked(
        &check_target(s, &child, target)?,
        "unresolved_operation",
        "its agent's sub-agent",
    )?;
    allowed(&check_target(s, &bystander, target)?, "a bystander")?;
    let status = s.status()?;
    ensure(
        status["unresolved"]["destination"][0]["blocks"] == "agent:w"
            && status["unresolved"]["destination"][0]["blocking"] == true,
        || {
            format!(
                "status does not say whom it blocks: {}",
                status["unresolved"]
            )
        },
    )?;
    Ok("w and its sub-agent blocked unresolved_operation (op, agent and command named); bystander allowed; status blocks agent:w".into())
}

fn blocks_everyone_when_configured(s: &Sandbox) -> Verdict {
    crashed_journal_with(
        s,
        "op_crashed04",
        "mcp:everything:write-file",
        json!({"blocks": "everyone"}),
    )?;
    let bystander = s.token(&["--agent", "b"])?;
    blocked(
        &check_target(s, &bystander, "mcp:everything:write-file")?,
        "unresolved_operation",
        "a bystander",
    )?;
    allowed(
        &check_target(s, &bystander, "mcp:everything:echo")?,
        "another target",
    )?;
    Ok("a bystander blocked unresolved_operation on the target; other targets allowed".into())
}

fn model_operation_blocks_nobody(s: &Sandbox) -> Verdict {
    crashed_journal(s, "op_crashed05", "model:gpt-in-doubt")?;
    let w = s.token(&["--agent", "w"])?;
    allowed(&check_target(s, &w, "model:gpt-in-doubt")?, "its own agent")?;
    let status = s.status()?;
    let model = &status["unresolved"]["model"][0];
    ensure(
        model["op"] == "op_crashed05" && model["blocks"] == "nobody" && model["blocking"] == false,
        || {
            format!(
                "not shown unresolved and blocking nobody: {}",
                status["unresolved"]
            )
        },
    )?;
    Ok("its own agent allowed on the model; status lists it unresolved, blocking nobody".into())
}

fn scoped_recovery_spares_other_scopes(s: &Sandbox) -> Verdict {
    let a = s.engage("agent:a", "emergency")?;
    let b = s.engage("agent:b", "emergency")?;
    let plan = s.plan("agent:a")?;
    let apply = s.apply(&plan)?;
    ensure(apply.code == 0 && apply.json()["recovered"] == true, || {
        format!("apply: {}", apply.brief())
    })?;
    let left = s.entries("latches");
    ensure(left == vec![Sandbox::latch_file(&b)], || {
        format!(
            "after recovering agent:a ({}) latches are {left:?}",
            Sandbox::latch_file(&a)
        )
    })?;
    ensure(!s.file("state.json").exists(), || {
        "a scoped recovery wrote state.json".into()
    })?;
    let fresh_b = s.token(&["--agent", "b"])?;
    blocked(
        &s.check_token(&fresh_b)?,
        "break_glass_contained",
        "agent:b",
    )?;
    let fresh_a = s.token(&["--agent", "a"])?;
    allowed(&s.check_token(&fresh_a)?, "agent:a after its recovery")?;
    Ok("agent:a cleared; agent:b latch kept and blocking; state.json never written".into())
}
