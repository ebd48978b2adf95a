//! The owner's verbs: `drain`, `recover plan|apply|repair`, `ops list|compact|reconcile`. Each
//! console verb proves the owner console first (`stopline_owner::console::prove`), which hands
//! it the plane's owner verbs.

use crate::cli::{Command, OpsCommand, OutcomeArg, RecoverCommand};
use crate::output;
use std::sync::Arc;
use stopline_control::{engage, ops, Context};
use stopline_core::Refusal;
use stopline_owner::{self as owner, console, OwnerPlane};

/// Run one owner verb.
pub fn execute(
    ctx: &Context,
    plane: Arc<dyn OwnerPlane>,
    command: Command,
    json: bool,
) -> Result<i32, Refusal> {
    match command {
        Command::Drain {
            deadline,
            reason,
            by,
        } => {
            let console = console::prove(ctx, plane, by.as_deref(), None)?;
            let deadline = u64::try_from(deadline).unwrap_or(0);
            output::receipt(json, &owner::drain(&console, deadline, &reason)?);
            Ok(0)
        }
        Command::Recover(command) => recover(ctx, plane, command, json),
        Command::Ops(command) => operations(ctx, plane, command, json),
        _ => unreachable!("not an owner verb"),
    }
}

fn recover(
    ctx: &Context,
    plane: Arc<dyn OwnerPlane>,
    command: RecoverCommand,
    json: bool,
) -> Result<i32, Refusal> {
    match command {
        RecoverCommand::Plan { scope, reason, by } => {
            let scope = engage::parse_scope(&scope)?;
            let approvers = owner::run_approvers(ctx, &scope);
            let console = console::prove(ctx, plane, by.as_deref(), approvers.as_deref())?;
            output::receipt(json, &owner::recover_plan(ctx, &console, &scope, &reason)?);
        }
        RecoverCommand::Apply { plan, by } => {
            let console = console::prove(ctx, plane, by.as_deref(), None)?;
            let before = crate::alerts::latches(ctx);
            output::receipt(json, &owner::recover_apply(&console, &plan)?);
            crate::alerts::after_change(ctx, before);
        }
        RecoverCommand::Repair { reason, by } => {
            let console = console::prove(ctx, plane, by.as_deref(), None)?;
            output::receipt(json, &owner::repair(ctx, &console, &reason)?);
        }
        RecoverCommand::RotateKey { reason, by, adopt } => {
            let console = console::prove(ctx, plane, by.as_deref(), None)?;
            output::receipt(json, &owner::rotate_key(ctx, &console, &reason, adopt)?);
        }
    }
    Ok(0)
}

fn operations(
    ctx: &Context,
    plane: Arc<dyn OwnerPlane>,
    command: OpsCommand,
    json: bool,
) -> Result<i32, Refusal> {
    match command {
        OpsCommand::Compact => {
            let receipt = ops::compact(ctx);
            output::receipt(json, &receipt);
            Ok(receipt.exit_code())
        }
        OpsCommand::List {
            unresolved,
            older_than,
        } => {
            output::receipt(json, &ops::list(ctx, unresolved, older_than));
            Ok(0)
        }
        OpsCommand::Reconcile {
            id,
            outcome,
            reason,
            by,
        } => {
            let console = console::prove(ctx, plane, by.as_deref(), None)?;
            let outcome = match outcome {
                OutcomeArg::Committed => "committed",
                OutcomeArg::Failed => "failed",
                OutcomeArg::Abandoned => "abandoned",
            };
            output::receipt(json, &owner::reconcile(&console, &id, outcome, &reason)?);
            Ok(0)
        }
    }
}
