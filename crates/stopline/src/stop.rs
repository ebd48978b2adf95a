//! The stop verbs: `engage`, `disengage`, `status`, `check`, `init` — arguments to
//! `stopline-control` calls, receipts to output and exit codes.

use crate::cli::{ClassArg, Command, TokenArgs};
use crate::output;
use crate::wiring::Wiring;
use stopline_control::{check, engage, status, tokens, Context};
use stopline_core::{Refusal, RefusalCode, TaskClass};
use stopline_store::Store;

/// The token a command was given (`--token`, `--token-file`, `STOPLINE_TOKEN`).
pub fn presented(args: &TokenArgs) -> Result<Option<String>, Refusal> {
    tokens::presented(args.token.as_deref(), args.token_file.as_deref())
}

/// `init`: create the home whole (docs/reference.md §5) and nothing else.
pub fn init(store: &Store, json: bool) -> i32 {
    match stopline_control::home::init(store) {
        Ok(receipt) => {
            output::receipt(json, &receipt);
            0
        }
        Err(refusal) => output::refusal(json, &refusal),
    }
}

/// Run one stop verb.
pub fn execute(ctx: &Context, command: Command, wiring: &Wiring) -> Result<i32, Refusal> {
    let json = wiring.json;
    match command {
        Command::Engage {
            scope,
            reason,
            level,
            by,
            token,
        } => {
            // Only in a `conformance-broken` test build with the break named: accept a blank reason.
            let blank = reason.trim().is_empty();
            let reason = if blank && crate::conformance::broken("reason_required") {
                "(blank)".to_string()
            } else {
                reason
            };
            let claims = presented(&token)?
                .map(|t| engage::verify_token(ctx, &t))
                .transpose()?;
            let caller = engage::Caller {
                token: claims,
                by,
                local: true,
            };
            let mut receipt = engage::engage(ctx, &caller, &scope, level.as_deref(), &reason)?;
            receipt.warnings.extend(wiring.config_warning.clone());
            output::receipt(json, &receipt);
            // After the receipt: the alert is handed off, never awaited.
            crate::alerts::after_engage(ctx, &receipt);
            Ok(0)
        }
        Command::Disengage {
            scope,
            reason,
            by,
            token,
        } => {
            let presented = presented(&token)?;
            let before = crate::alerts::latches(ctx);
            let receipt =
                engage::disengage(ctx, &scope, &reason, by.as_deref(), presented.as_deref())?;
            output::receipt(json, &receipt);
            if let Some(warning) = receipt.warning() {
                output::error_line(&warning);
            }
            crate::alerts::after_change(ctx, before);
            Ok(0)
        }
        Command::Status => {
            // No home at all is not a stop to report on: it was never made (docs/reference.md §3).
            let home = ctx.store.layout().home();
            if wiring.distributed.is_none() && !home.exists() {
                return Err(Refusal::new(
                    RefusalCode::ControlHomeMissing,
                    format!(
                        "no control directory here ({}): run `stopline init`",
                        home.display()
                    ),
                ));
            }
            output::receipt(json, &status::status(ctx));
            Ok(0)
        }
        Command::Check {
            class,
            token,
            agent,
            project,
            run,
            target,
        } => {
            let token = match presented(&token) {
                Ok(token) => token,
                Err(refusal) => Some(format!("unreadable:{}", refusal.message)),
            };
            let request = check::CheckRequest {
                class: match class {
                    ClassArg::Critical => TaskClass::Critical,
                    ClassArg::Noncritical => TaskClass::Noncritical,
                },
                token,
                agent,
                project,
                run,
                target,
            };
            let receipt = check::check(ctx, &request);
            output::receipt(json, &receipt);
            // Only in a `conformance-broken` test build with the break named: allow a stale token.
            let stale = receipt.code == Some(RefusalCode::StaleControlEpoch);
            if crate::conformance::broken("stale_token") && stale {
                return Ok(0);
            }
            Ok(receipt.exit_code())
        }
        Command::Init => {
            output::receipt(json, &stopline_control::home::init_on_plane(ctx)?);
            Ok(0)
        }
        _ => unreachable!("not a stop verb"),
    }
}
