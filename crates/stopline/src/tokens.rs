//! `token issue|delegate|verify`: people get the token alone, `--json` its receipt.

use crate::cli::{RoleArg, TokenArgs, TokenCommand};
use crate::output;
use stopline_control::{tokens, Context};
use stopline_core::budget::{parse_budget_arg, Budgets};
use stopline_core::{Label, Refusal, RefusalCode, Role};

fn budgets(args: &[String]) -> Result<Budgets, Refusal> {
    args.iter().map(|a| parse_budget_arg(a)).collect()
}

fn labels(args: &[String]) -> Result<Vec<Label>, Refusal> {
    args.iter().map(|a| Label::parse(a)).collect()
}

/// Run one token verb.
pub fn execute(ctx: &Context, command: TokenCommand, json: bool) -> Result<i32, Refusal> {
    let minted = match command {
        TokenCommand::Issue {
            agent,
            role,
            project,
            run,
            ttl,
            budget,
            label,
        } => {
            let role = match role {
                RoleArg::Agent => Role::Agent,
                RoleArg::Monitor => Role::Monitor,
                RoleArg::Operator => Role::Operator,
                RoleArg::Critical => Role::Critical,
            };
            let args = tokens::IssueArgs {
                agent,
                role,
                project,
                run,
                ttl_s: ttl,
                budgets: budgets(&budget)?,
                labels: labels(&label)?,
            };
            tokens::issue(ctx, &args)?
        }
        TokenCommand::Delegate {
            parent,
            parent_file,
            agent,
            ttl,
            budget,
            label,
        } => {
            let parent = tokens::parent(parent, parent_file.as_deref())?;
            tokens::delegate(
                ctx,
                &parent,
                &agent,
                ttl,
                &budgets(&budget)?,
                &labels(&label)?,
            )?
        }
        TokenCommand::Verify { token, token_file } => {
            let token = crate::stop::presented(&TokenArgs { token, token_file })?
                .ok_or_else(|| Refusal::new(RefusalCode::TokenInvalid, "no token given"))?;
            let receipt = tokens::verify(ctx, &token);
            output::receipt(json, &receipt);
            return Ok(if receipt.valid { 0 } else { 1 });
        }
        TokenCommand::List => {
            output::receipt(json, &tokens::list(ctx)?);
            return Ok(0);
        }
        TokenCommand::Revoke {
            id,
            with_delegates,
            reason,
            by,
            token,
        } => {
            let presented = crate::stop::presented(&token)?;
            let receipt = tokens::revoke(
                ctx,
                &id,
                with_delegates,
                &reason,
                by.as_deref(),
                presented.as_deref(),
            )?;
            output::receipt(json, &receipt);
            return Ok(0);
        }
    };
    output::receipt(json, &tokens::minted_receipt(&minted));
    Ok(0)
}
