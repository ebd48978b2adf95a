//! The gates and the supervisor: `serve` (the gateway), `mcp proxy|serve`, `hook claude-code|codex`,
//! `run`. Each is a crate's entry point; this file only wires arguments to it.

use crate::cli::{AgentKindArg, Command, HookCommand, McpCommand, NetArg};
use crate::output;
use crate::wiring::Wiring;
use stopline_control::Context;
use stopline_core::{Refusal, RefusalCode};
use stopline_run::{AgentKind, NetMode, RunRequest};

/// Run one gate.
pub fn execute(ctx: &Context, command: Command, wiring: Wiring) -> Result<i32, Refusal> {
    match command {
        Command::Mcp(McpCommand::Proxy {
            token,
            name,
            command,
        }) => stopline_mcp::entry::proxy(ctx, crate::stop::presented(&token)?, &name, command),
        Command::Mcp(McpCommand::Serve) => stopline_mcp::entry::serve(ctx),
        Command::Hook(HookCommand::ClaudeCode) => Ok(stopline_mcp::entry::hook_claude_code(
            ctx.store.layout().home(),
        )),
        Command::Hook(HookCommand::Codex) => {
            Ok(stopline_mcp::entry::hook_codex(ctx.store.layout().home()))
        }
        Command::Serve {
            listen,
            config,
            access_log,
            ..
        } => {
            // The schedule reads `[drill]` (and the alert hooks) from the configuration this
            // gateway serves: `--config` when given, the home's config.toml otherwise. A file
            // that does not load is refused by serve itself, just below.
            let scheduled = match config.as_deref() {
                Some(path) => match stopline_control::config::Config::load(path) {
                    Ok(loaded) => Context {
                        config: std::sync::Arc::new(loaded),
                        ..ctx.clone()
                    },
                    Err(_) => ctx.clone(),
                },
                None => ctx.clone(),
            };
            crate::scheduled::spawn(&scheduled);
            let options = stopline_gateway::ServeOptions {
                home: ctx.store.layout().home().to_path_buf(),
                config,
                listen,
                mount: Some(Box::new(stopline_mcp::http::router)),
                access_log,
            };
            stopline_gateway::serve_with(options, wiring.distributed).map_err(|e| match e {
                stopline_gateway::ServeError::Config(error) => error.to_refusal(),
                stopline_gateway::ServeError::Refused(refusal) => refusal,
                stopline_gateway::ServeError::Telemetry(error) => {
                    Refusal::new(RefusalCode::ConfigInvalid, error.to_string())
                }
                other => Refusal::new(RefusalCode::ControlIo, other.to_string()),
            })?;
            Ok(0)
        }
        Command::Run {
            policy,
            agent,
            user,
            unconfined,
            net,
            share,
            stdin,
            gateway,
            agent_kind,
            command,
        } => {
            let request = RunRequest {
                policy,
                agent,
                user,
                unconfined,
                net: match net {
                    NetArg::GatewayOnly => NetMode::GatewayOnly,
                    NetArg::Host => NetMode::Host,
                },
                stdin,
                share,
                gateway,
                agent_kind: agent_kind.map(|kind| match kind {
                    AgentKindArg::Codex => AgentKind::Codex,
                    AgentKindArg::ClaudeCode => AgentKind::ClaudeCode,
                    AgentKindArg::Other => AgentKind::Other,
                }),
                command,
            };
            run(ctx, &request, wiring.json)
        }
        _ => unreachable!("not a gate"),
    }
}

/// `run`: the agent's exit code when it ended by itself; exit 1 with the stop's code when a stop
/// ended it (the agent's own output went to the inherited streams).
fn run(ctx: &Context, request: &RunRequest, json: bool) -> Result<i32, Refusal> {
    let outcome = stopline_run::run(ctx, request).map_err(|e| e.to_refusal())?;
    if let Some(stopped) = outcome.stopped {
        return Err(stopped);
    }
    if json {
        output::json(&outcome.record.to_json());
    }
    Ok(outcome.exit_code)
}
