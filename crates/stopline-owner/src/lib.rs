//! The owner console's verbs: drain, recover plan/apply, repair, rotate-key, reconcile.
//!
//! Each takes an [`OwnerConsole`], which only `console::prove` can build, and re-proves nothing
//! itself: the caller proves the console immediately before calling (plan and apply each prove
//! it again). The console holds the plane's owner verbs ([`OwnerPlane`], the store's with its
//! `owner` feature), the only way to them: `Context::plane`, an `Arc<dyn ControlPlane>`, has
//! none. The gateway and the MCP proxy do not link this crate, and their own graph does not
//! enable the store's `owner` feature (xtask's crate-graph invariant; docs/reference.md, "The
//! owner console").
#![deny(missing_docs)]

pub mod console;
pub mod receipts;

pub use stopline_store::OwnerPlane;

use console::OwnerConsole;
use receipts::{
    DrainReceipt, ReconcileReceipt, RecoverApplyReceipt, RecoverPlanReceipt, RepairReceipt,
    RotateKeyReceipt,
};
use serde_json::Value;
use stopline_control::Context;
use stopline_core::{Refusal, Scope};

/// The run's `who_may_approve_restart`, from its recorded policy card (`runs/<id>/policy-card.json`).
pub fn run_approvers(ctx: &Context, scope: &Scope) -> Option<Vec<String>> {
    let Scope::Run(id) = scope else { return None };
    let card = ctx.store.runs().run_card(id.as_str()).ok().flatten()?;
    Some(
        card.pointer("/stop_handle/who_may_approve_restart")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
    )
}

/// `recover plan`.
pub fn recover_plan(
    ctx: &Context,
    console: &OwnerConsole,
    scope: &Scope,
    reason: &str,
) -> Result<RecoverPlanReceipt, Refusal> {
    let census = ctx.store.ops().census();
    let plan = console
        .plane()
        .recover_plan(scope, reason, console.by(), &census)
        .map_err(|e| e.to_refusal())?;
    Ok(RecoverPlanReceipt {
        plan,
        by: console.by().to_string(),
    })
}

/// `recover apply`.
pub fn recover_apply(console: &OwnerConsole, plan: &str) -> Result<RecoverApplyReceipt, Refusal> {
    let receipt = console
        .plane()
        .recover_apply(plan, console.by())
        .map_err(|e| e.to_refusal())?;
    Ok(RecoverApplyReceipt(receipt))
}

/// `recover repair`.
pub fn repair(
    ctx: &Context,
    console: &OwnerConsole,
    reason: &str,
) -> Result<RepairReceipt, Refusal> {
    let issued = ctx
        .store
        .keys()
        .highest_issued_epoch()
        .map_err(|e| e.to_refusal())?;
    let receipt = console
        .plane()
        .repair(reason, console.by(), issued)
        .map_err(|e| e.to_refusal())?;
    Ok(RepairReceipt(receipt))
}

/// `recover rotate-key`: this host's verification key replaces the one the distributed plane
/// publishes and is pinned here; with `adopt`, the key the plane publishes now is pinned (the
/// owner rotated it from another host). A local home refuses: it verifies with its own key.
pub fn rotate_key(
    ctx: &Context,
    console: &OwnerConsole,
    reason: &str,
    adopt: bool,
) -> Result<RotateKeyReceipt, Refusal> {
    let reason = stopline_core::refusal::require_reason(reason)?;
    let key = if adopt {
        None
    } else {
        Some(ctx.signing_key()?.verifying_key().to_bytes())
    };
    let standing = console
        .plane()
        .rotate_key(key)
        .map_err(|e| e.to_refusal())?;
    tracing::warn!(by = console.by(), %reason, adopt, "the plane's verification key was rotated");
    Ok(RotateKeyReceipt {
        verify_key_sha256: stopline_core::wal::sha256_hex(&standing),
        adopted: adopt,
    })
}

/// `drain`.
pub fn drain(
    console: &OwnerConsole,
    deadline_s: u64,
    reason: &str,
) -> Result<DrainReceipt, Refusal> {
    let record = console
        .plane()
        .drain(deadline_s, reason, console.by())
        .map_err(|e| e.to_refusal())?;
    Ok(DrainReceipt {
        draining: true,
        state: record,
    })
}

/// `ops reconcile`.
pub fn reconcile(
    console: &OwnerConsole,
    op: &str,
    outcome: &str,
    reason: &str,
) -> Result<ReconcileReceipt, Refusal> {
    let operation = console
        .plane()
        .reconcile(op, outcome, reason, console.by())
        .map_err(|e| e.to_refusal())?;
    Ok(ReconcileReceipt {
        reconciled: true,
        operation,
    })
}
