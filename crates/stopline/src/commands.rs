//! Dispatch: open the control plane the command needs, then hand it to its verb family (`stop`,
//! `owner`, `tokens`, `gates`, `assurance`); a broken configuration is `stopline_control::open`'s.

use crate::cli::{Cli, Command, EtcdCommand, HookCommand, OpsCommand, TokenCommand};
use crate::output;
use crate::wiring::Wiring;
use std::sync::Arc;
use stopline_control::home::default_home;
use stopline_control::open::{open, OnBrokenConfig, Opened};
use stopline_core::Refusal;
use stopline_owner::OwnerPlane;
use stopline_store::Store;

/// Run the command; returns the exit code.
pub fn run(cli: Cli) -> i32 {
    let json = cli.json;
    let home = cli.home.clone().unwrap_or_else(default_home);
    match &cli.command {
        // Before anything that could exit with another code: any other exit fails open.
        Command::Hook(HookCommand::ClaudeCode) => {
            return stopline_mcp::entry::hook_claude_code(&home)
        }
        Command::Hook(HookCommand::Codex) => return stopline_mcp::entry::hook_codex(&home),
        // Need no control directory: they check the code, each case in a throwaway home.
        Command::ModelCheck => return crate::assurance::model_check(json),
        // Need no control directory: they print what the CLI definition says.
        Command::Completions { shell } => return crate::manual::completions(*shell),
        Command::Man => return crate::manual::man(),
        // Printing the set-up needs no home and no etcd.
        Command::Etcd(EtcdCommand::Roles {
            prefix,
            apply: false,
            ..
        }) => return output::outcome(json, stopline_etcd::roles::plan(prefix)),
        Command::Conformance { filter } => return crate::conformance::run(json, filter.clone()),
        // Reads its hooks and records from stdin; the command that started it had the home.
        Command::AlertDeliver => return crate::alerts::deliver_from_stdin(),
        // Needs no configuration: it only makes the home whole (with --control, it also pins the
        // plane's verification key, below).
        Command::Init if cli.control.is_none() => {
            return crate::stop::init(&Store::open(home), json)
        }
        _ => {}
    }
    let (ctx, config_warning) = match open(home, on_broken_config(&cli.command)) {
        Opened::Ready(ctx, warning) => (ctx, warning),
        Opened::Blocked(receipt) => {
            output::receipt(json, &receipt);
            return receipt.exit_code();
        }
        Opened::Refused(refusal) => return output::refusal(json, &refusal),
    };
    let (ctx, distributed, owner_plane) = match crate::wiring::attach(ctx, cli.control.as_deref()) {
        Ok(attached) => attached,
        Err(refusal) => return output::refusal(json, &refusal),
    };
    if creates_home(&cli.command) {
        // Every command that writes to the home creates it whole first (docs/reference.md §5).
        if let Err(error) = ctx.store.ensure_home() {
            return output::refusal(json, &error.to_refusal());
        }
    }
    let wiring = Wiring {
        json,
        distributed,
        config_warning,
    };
    let control = cli.control.as_deref();
    match execute(&ctx, owner_plane, cli.command, wiring, control) {
        Ok(code) => code,
        Err(refusal) => output::refusal(json, &refusal),
    }
}

fn execute(
    ctx: &stopline_control::Context,
    owner_plane: Arc<dyn OwnerPlane>,
    command: Command,
    wiring: Wiring,
    control: Option<&str>,
) -> Result<i32, Refusal> {
    let json = wiring.json;
    match command {
        command @ (Command::Engage { .. }
        | Command::Disengage { .. }
        | Command::Status
        | Command::Check { .. }
        | Command::Init) => crate::stop::execute(ctx, command, &wiring),
        Command::Token(command) => crate::tokens::execute(ctx, command, json),
        command @ (Command::Drain { .. } | Command::Recover(_) | Command::Ops(_)) => {
            crate::owner::execute(ctx, owner_plane, command, json)
        }
        command @ (Command::Mcp(_)
        | Command::Hook(_)
        | Command::Serve { .. }
        | Command::Run { .. }) => crate::gates::execute(ctx, command, wiring),
        Command::Completions { shell } => Ok(crate::manual::completions(shell)),
        Command::Reload { config } => crate::alerts::reload(ctx, config, json),
        Command::AlertDeliver => Ok(crate::alerts::deliver_from_stdin()),
        Command::Etcd(command) => etcd(ctx, command, control, json),
        Command::Man => Ok(crate::manual::man()),
        command @ (Command::ModelCheck
        | Command::Conformance { .. }
        | Command::Drill(_)
        | Command::Evidence(_)
        | Command::Bench { .. }) => crate::assurance::execute(ctx, command, json),
    }
}

/// `etcd roles --apply`: through `--control`, connecting as `[etcd]` says.
fn etcd(
    ctx: &stopline_control::Context,
    command: EtcdCommand,
    control: Option<&str>,
    json: bool,
) -> Result<i32, Refusal> {
    let EtcdCommand::Roles {
        prefix,
        root_password_file: root,
        operator_password_file: operator,
        gateway_password_file: gateway,
        ..
    } = command;
    let files = stopline_etcd::roles::PasswordFiles {
        root,
        operator,
        gateway,
    };
    let home = ctx.store.layout().home();
    let applied = stopline_etcd::roles::apply_from(&ctx.config.etcd, home, control, &prefix, files);
    output::receipt(json, &applied?);
    Ok(0)
}

/// What a broken `config.toml` means to `command`.
fn on_broken_config(command: &Command) -> OnBrokenConfig {
    match command {
        Command::Engage { .. } => OnBrokenConfig::Defaults,
        Command::Check { .. } => OnBrokenConfig::Block,
        // The verbs only the owner console may run (docs/reference.md §2).
        Command::Recover(_)
        | Command::Drain { .. }
        | Command::Ops(OpsCommand::Reconcile { .. }) => {
            OnBrokenConfig::ConsoleFirst(stopline_owner::console::refuse_before_config)
        }
        _ => OnBrokenConfig::Refuse,
    }
}

/// The commands that write to the home as their purpose, and so create it whole first (engage
/// makes it after validating; gates never do: a missing home is `control_home_missing` to them).
fn creates_home(command: &Command) -> bool {
    matches!(
        command,
        Command::Token(TokenCommand::Issue { .. })
            | Command::Token(TokenCommand::Delegate { .. })
            | Command::Serve { .. }
            | Command::Run { .. }
    )
}
