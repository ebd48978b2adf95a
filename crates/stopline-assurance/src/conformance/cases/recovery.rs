//! Recovery on the owner console (SPEC §4 Recovery): it clears exactly the planned latches and
//! mints an epoch that keeps pre-stop authority dead; a stop that races it survives as
//! FROZEN_SAFE; uncertainty is carried forward and blocks its target until reconciled; a scoped
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
        "an operation with no outcome is carried forward by the plan and still blocks its target after recovery (unresolved_operation); other targets pass",
        carries_unresolved_operations,
    ),
    case(
        "unresolved_operation_blocks_until_reconciled_on_the_console",
        "an unresolved operation blocks its target until the owner console reconciles it; reconciling off the console is refused, twice is operation_unknown",
        reconcile_on_the_console,
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
    let prepared = json!({"op": op, "phase": "prepared", "ts": "2026-01-01T00:00:00.000Z",
        "ts_ms": 1767225600000u64, "target": target, "agent": "w"});
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
    crashed_journal(s, "op_crashed02", "model:gpt-in-doubt")?;
    let token = s.token(&["--agent", "w"])?;
    let target = [
        "--class",
        "noncritical",
        "--token",
        &token,
        "--target",
        "model:gpt-in-doubt",
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
