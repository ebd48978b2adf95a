//! Turning parsed arguments into calls of `stopline-control`, and receipts into output.

use crate::cli::{
    BenchArg, ClassArg, Cli, Command, HookCommand, McpCommand, OpsCommand, OutcomeArg,
    RecoverCommand, RoleArg, TokenArgs, TokenCommand,
};
use crate::output::{self, compact};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use stopline_control::config::Config;
use stopline_control::{check, console, engage, owner, status, tokens, Context};
use stopline_core::budget::{parse_budget_arg, Budgets};
use stopline_core::{Decision, Refusal, RefusalCode, Role, TaskClass};
use stopline_store::Store;

fn default_home() -> PathBuf {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return PathBuf::from(state).join("stopline");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".local/state/stopline")
}

fn read_token(args: &TokenArgs) -> Result<Option<String>, Refusal> {
    if let Some(token) = &args.token {
        return Ok(Some(token.trim().to_string()));
    }
    if let Some(path) = &args.token_file {
        return token_from_file(path).map(Some);
    }
    Ok(std::env::var("STOPLINE_TOKEN")
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty()))
}

fn token_from_file(path: &Path) -> Result<String, Refusal> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .map_err(|e| {
            Refusal::new(
                RefusalCode::TokenInvalid,
                format!("--token-file {}: {e}", path.display()),
            )
        })
}

fn budgets(args: &[String]) -> Result<Budgets, Refusal> {
    args.iter().map(|a| parse_budget_arg(a)).collect()
}

/// Run the command; returns the exit code.
pub fn run(cli: Cli) -> i32 {
    let json = cli.json;
    if let Command::Hook(HookCommand::ClaudeCode) = &cli.command {
        // Before anything that could exit with another code: any other exit fails open.
        let home = cli.home.clone().unwrap_or_else(default_home);
        return stopline_mcp::entry::hook_claude_code(&home);
    }
    if let Command::ModelCheck = &cli.command {
        // Needs no control directory: it checks the code, in memory.
        return model_check(json);
    }
    if let Command::Completions { shell } = &cli.command {
        // Needs no control directory: it prints what the CLI definition says.
        return crate::manual::completions(*shell);
    }
    if let Command::Man = &cli.command {
        return crate::manual::man();
    }
    if let Command::Conformance { filter } = &cli.command {
        // Needs no control directory: every case makes its own throwaway home.
        return crate::conformance::run(json, filter.clone());
    }
    let home = cli.home.clone().unwrap_or_else(default_home);
    if let Command::Init = &cli.command {
        // Needs no configuration: it only makes the home whole.
        return init(&Store::open(home), json);
    }
    // Engage does not depend on config.toml (SPEC §12.1): with a broken one it lands on the
    // defaults and says `config_invalid` in its receipt. Every other command refuses.
    let mut config_warning = None;
    let config = match Config::load(&home.join("config.toml")) {
        Ok(config) => config,
        Err(error) if matches!(cli.command, Command::Engage { .. }) => {
            config_warning = Some(format!(
                "config_invalid: {error}; engaged with the default configuration"
            ));
            Config::default()
        }
        Err(error) if matches!(cli.command, Command::Check { .. }) => {
            // `check` always answers with a decision receipt: a block, exit 4.
            let refusal = error.to_refusal();
            let receipt = stopline_core::CheckReceipt::block(
                stopline_core::Mode::Emergency,
                refusal.code,
                refusal.message,
                Vec::new(),
            );
            print_check(json, &receipt);
            return 4;
        }
        Err(error) => {
            if is_owner_console_verb(&cli.command) {
                let bare = Context::new(Store::open(home.clone()), Config::default());
                if let Some(refusal) = console::refuse_before_config(&bare) {
                    return output::refusal(json, &refusal);
                }
            }
            return output::refusal(json, &error.to_refusal());
        }
    };
    let store = Store::open(home).with_read_timeout(std::time::Duration::from_millis(
        config.read_timeout_ms.max(1),
    ));
    let ctx = Context::new(store, config);
    let (ctx, distributed) = match cli.control.as_deref() {
        None => (ctx, None),
        Some(url) => match stopline_etcd::wiring::attach(ctx, url) {
            Ok((ctx, distributed)) => (ctx, Some(distributed)),
            Err(refusal) => return output::refusal(json, &refusal),
        },
    };
    if creates_home(&cli.command) {
        // Every command that writes to the home creates it whole first (SPEC §12.1).
        if let Err(error) = ctx.store.ensure_home() {
            return output::refusal(json, &error.to_refusal());
        }
    }
    match execute(&ctx, cli.command, json, distributed, config_warning) {
        Ok(code) => code,
        Err(refusal) => output::refusal(json, &refusal),
    }
}

/// The commands that write to the home as their purpose, and so create it whole before they
/// read it. Engage makes it itself, after validating its input (a refused engage creates
/// nothing); gates (`check`, the hook, `mcp proxy`) never create it: a missing home is
/// `control_home_missing` to them.
fn creates_home(command: &Command) -> bool {
    matches!(
        command,
        Command::Token(TokenCommand::Issue { .. })
            | Command::Token(TokenCommand::Delegate { .. })
            | Command::Serve { .. }
            | Command::Run { .. }
    )
}

/// The verbs only the owner console may run (SPEC §3).
fn is_owner_console_verb(command: &Command) -> bool {
    matches!(
        command,
        Command::Recover(_) | Command::Drain { .. } | Command::Ops(OpsCommand::Reconcile { .. })
    )
}

/// Print a check receipt.
fn print_check(json: bool, receipt: &stopline_core::CheckReceipt) {
    let value = serde_json::to_value(receipt).unwrap_or_default();
    output::receipt(json, &value, |r| {
        format!(
            "{} ({}){}",
            r["decision"].as_str().unwrap_or_default(),
            r["mode"].as_str().unwrap_or_default(),
            r["code"]
                .as_str()
                .map(|c| format!(": {c}: {}", r["message"].as_str().unwrap_or_default()))
                .unwrap_or_default()
        )
    });
}

/// `stopline init`: create the home whole (SPEC §12.1) and nothing else.
fn init(store: &Store, json: bool) -> i32 {
    match store.ensure_home() {
        Ok(reserve) => {
            let receipt = json!({
                "home": store.layout().home().display().to_string(),
                "created": true,
                "reserve": reserve,
            });
            output::receipt(json, &receipt, |r| {
                format!(
                    "control directory {} is ready{}",
                    r["home"].as_str().unwrap_or_default(),
                    if r["reserve"] == true {
                        ""
                    } else {
                        " (warning: the full-disk reserve could not be written)"
                    }
                )
            });
            0
        }
        Err(error) => output::refusal(json, &error.to_refusal()),
    }
}

fn execute(
    ctx: &Context,
    command: Command,
    json: bool,
    distributed: Option<stopline_gateway::Distributed>,
    config_warning: Option<String>,
) -> Result<i32, Refusal> {
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
            let claims = read_token(&token)?
                .map(|t| engage::verify_token(ctx, &t))
                .transpose()?;
            let caller = engage::Caller {
                token: claims,
                by,
                local: true,
            };
            let mut receipt = engage::engage(ctx, &caller, &scope, level.as_deref(), &reason)?;
            if let Some(warning) = config_warning {
                if let Some(warnings) = receipt["warnings"].as_array_mut() {
                    warnings.push(warning.into());
                }
            }
            output::receipt(json, &receipt, |r| {
                let mut text = format!(
                    "engaged {} at {} ({}){}",
                    r["latch"]["scope"].as_str().unwrap_or_default(),
                    r["latch"]["level"].as_str().unwrap_or_default(),
                    r["latch"]["file"].as_str().unwrap_or_default(),
                    if r["coalesced"] == true {
                        ", coalesced into the existing latch"
                    } else {
                        ""
                    }
                );
                for w in r["warnings"].as_array().into_iter().flatten() {
                    text.push_str(&format!("\nwarning: {}", w.as_str().unwrap_or_default()));
                }
                text
            });
            Ok(0)
        }
        Command::Disengage {
            scope,
            reason,
            by,
            token,
        } => {
            let presented = read_token(&token)?;
            let receipt =
                engage::disengage(ctx, &scope, &reason, by.as_deref(), presented.as_deref())?;
            output::receipt(json, &receipt, |r| {
                format!(
                    "disengaged {}: cleared {}",
                    r["scope"].as_str().unwrap_or_default(),
                    compact(&r["cleared"])
                )
            });
            Ok(0)
        }
        Command::Init => Ok(init(&ctx.store, json)),
        Command::Status => {
            let receipt = status::status(ctx);
            output::receipt(json, &receipt, human_status);
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
            let token = match read_token(&token) {
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
            print_check(json, &receipt);
            // Only in a `conformance-broken` test build with the break named: allow a stale token.
            let stale = receipt.code == Some(RefusalCode::StaleControlEpoch);
            if crate::conformance::broken("stale_token") && stale {
                return Ok(0);
            }
            Ok(match receipt.decision {
                Decision::Allow => 0,
                Decision::Queue => 3,
                Decision::Block => 4,
            })
        }
        Command::Token(command) => token_command(ctx, command, json),
        Command::Drain {
            deadline,
            reason,
            by,
        } => {
            let console = console::prove(ctx, by.as_deref(), None)?;
            let deadline = u64::try_from(deadline).unwrap_or(0);
            let receipt = owner::drain(ctx, &console, deadline, &reason)?;
            output::receipt(json, &receipt, |r| {
                format!(
                    "draining until {}",
                    r["state"]["deadline"].as_str().unwrap_or_default()
                )
            });
            Ok(0)
        }
        Command::Recover(command) => recover_command(ctx, command, json),
        Command::Ops(command) => ops_command(ctx, command, json),
        Command::Mcp(McpCommand::Proxy {
            token,
            name,
            command,
        }) => stopline_mcp::entry::proxy(ctx, read_token(&token)?, &name, command),
        Command::Mcp(McpCommand::Serve) => stopline_mcp::entry::serve(ctx),
        Command::Hook(HookCommand::ClaudeCode) => Ok(stopline_mcp::entry::hook_claude_code(
            ctx.store.layout().home(),
        )),
        Command::Serve { listen, config } => {
            let options = stopline_gateway::ServeOptions {
                home: ctx.store.layout().home().to_path_buf(),
                config,
                listen,
                mount: Some(Box::new(stopline_mcp::http::router)),
            };
            stopline_gateway::serve_with(options, distributed).map_err(|e| match e {
                stopline_gateway::ServeError::Config(error) => error.to_refusal(),
                stopline_gateway::ServeError::Refused(refusal) => refusal,
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
            command,
        } => {
            let request = stopline_control::run::RunRequest {
                policy,
                agent,
                user,
                unconfined,
                net: match net {
                    crate::cli::NetArg::GatewayOnly => stopline_control::run::NetMode::GatewayOnly,
                    crate::cli::NetArg::Host => stopline_control::run::NetMode::Host,
                },
                stdin,
                share,
                gateway,
                command,
            };
            run_command(ctx, &request, json)
        }
        Command::ModelCheck => Ok(model_check(json)),
        Command::Completions { shell } => Ok(crate::manual::completions(shell)),
        Command::Man => Ok(crate::manual::man()),
        Command::Conformance { filter } => Ok(crate::conformance::run(json, filter)),
        Command::Drill(args) => drill_command(ctx, args, json),
        Command::Evidence(crate::cli::EvidenceCommand::List) => {
            let receipt = stopline_control::evidence::list(ctx)?;
            output::receipt(json, &receipt, |r| {
                let records = r["records"].as_array().cloned().unwrap_or_default();
                records.iter().map(compact).collect::<Vec<_>>().join("\n")
            });
            Ok(0)
        }
        Command::Evidence(crate::cli::EvidenceCommand::Verify) => {
            let receipt = stopline_control::evidence::verify(ctx);
            output::receipt(json, &receipt, |r| match &r["first_break"] {
                Value::Null => {
                    format!(
                    "{} records, chain intact; {} trip(s); operations admitted after a trip: {}",
                    r["records"], r["trips"], compact(&r["operations_after_trip"])
                )
                }
                fault => format!("BROKEN: {}", fault["message"].as_str().unwrap_or_default()),
            });
            Ok(if receipt["ok"] == true { 0 } else { 1 })
        }
        Command::Bench {
            which,
            iterations,
            operations,
            cycles,
            evidence,
            samples,
            idle_window_s,
        } => {
            let home = ctx.store.layout().home().to_path_buf();
            let mut runs = serde_json::Map::new();
            if matches!(which, Some(BenchArg::History)) {
                let exe = std::env::current_exe()
                    .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?;
                let sizes = stopline_gateway::history::HistorySizes {
                    operations,
                    cycles,
                    evidence,
                };
                let receipt = stopline_gateway::history::history(
                    &exe,
                    sizes,
                    samples.unwrap_or(15),
                    std::time::Duration::from_secs_f64(idle_window_s.clamp(0.1, 600.0)),
                )
                .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?;
                output::receipt(json, &receipt, |r| {
                    serde_json::to_string_pretty(r).unwrap_or_default()
                });
                return Ok(0);
            }
            if matches!(which, Some(BenchArg::Kill)) {
                let receipt = stopline_control::run::bench::kill(&home, iterations)?;
                output::receipt(json, &receipt, |r| {
                    serde_json::to_string_pretty(r).unwrap_or_default()
                });
                return Ok(0);
            }
            if matches!(which, Some(BenchArg::Gateway)) {
                let receipt = stopline_gateway::bench::gateway(
                    iterations,
                    Some(Box::new(stopline_mcp::http::router)),
                )
                .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?;
                output::receipt(json, &receipt, |r| {
                    serde_json::to_string_pretty(r).unwrap_or_default()
                });
                return Ok(0);
            }
            if matches!(which, None | Some(BenchArg::Engage)) {
                runs.insert(
                    "engage".into(),
                    stopline_control::bench::engage(&home, iterations)
                        .map_err(|e| Refusal::new(RefusalCode::ControlIo, e.to_string()))?,
                );
            }
            if matches!(which, None | Some(BenchArg::Admission)) {
                runs.insert(
                    "admission".into(),
                    stopline_control::bench::admission(iterations.max(1) * 1000),
                );
            }
            if which.is_none() {
                // All four side by side (SPEC §11). A measure this machine cannot take (the
                // kill needs cgroup v2 and root) is reported as such, never left out silently.
                let gateway = stopline_gateway::bench::gateway(
                    iterations,
                    Some(Box::new(stopline_mcp::http::router)),
                );
                runs.insert(
                    "gateway".into(),
                    gateway.unwrap_or_else(|e| json!({"error": e.to_string()})),
                );
                let kill = stopline_control::run::bench::kill(&home, iterations.min(5));
                runs.insert(
                    "kill".into(),
                    kill.unwrap_or_else(|r| json!({"error": r.to_string()})),
                );
            }
            let value = Value::Object(runs);
            output::receipt(json, &value, |r| {
                serde_json::to_string_pretty(r).unwrap_or_default()
            });
            Ok(0)
        }
    }
}

/// `model-check` (SPEC §9): exit 0 when every property holds, 1 on a counterexample.
fn model_check(json: bool) -> i32 {
    let options = stopline_assurance::protocol::Options {
        progress: true,
        ..Default::default()
    };
    let report = stopline_assurance::model_check::run(&options);
    output::verdict(json, &report.json(), &report.text(), report.ok())
}

fn token_command(ctx: &Context, command: TokenCommand, json: bool) -> Result<i32, Refusal> {
    let minted = match command {
        TokenCommand::Issue {
            agent,
            role,
            project,
            run,
            ttl,
            budget,
        } => {
            let role = match role {
                RoleArg::Agent => Role::Agent,
                RoleArg::Monitor => Role::Monitor,
                RoleArg::Operator => Role::Operator,
                RoleArg::Critical => Role::Critical,
            };
            tokens::issue(
                ctx,
                &tokens::IssueArgs {
                    agent,
                    role,
                    project,
                    run,
                    ttl_s: ttl,
                    budgets: budgets(&budget)?,
                },
            )?
        }
        TokenCommand::Delegate {
            parent,
            parent_file,
            agent,
            ttl,
            budget,
        } => {
            let parent = match (parent, parent_file) {
                (Some(p), _) => p,
                (None, Some(file)) => token_from_file(&file)?,
                (None, None) => std::env::var("STOPLINE_TOKEN")
                    .map_err(|_| Refusal::new(RefusalCode::TokenInvalid, "--parent is required"))?,
            };
            tokens::delegate(ctx, &parent, &agent, ttl, &budgets(&budget)?)?
        }
        TokenCommand::Verify { token, token_file } => {
            let token = match read_token(&TokenArgs { token, token_file })? {
                Some(token) => token,
                None => return Err(Refusal::new(RefusalCode::TokenInvalid, "no token given")),
            };
            let receipt = tokens::verify(ctx, &token);
            output::receipt(json, &receipt, |r| match r["code"].as_str() {
                None => "valid".to_string(),
                Some(code) => format!("invalid: {code}"),
            });
            return Ok(if receipt["valid"] == true { 0 } else { 1 });
        }
    };
    if json {
        output::receipt(true, &tokens::minted_receipt(&minted), |_| String::new());
    } else {
        output::line(&minted.token);
    }
    Ok(0)
}

fn recover_command(ctx: &Context, command: RecoverCommand, json: bool) -> Result<i32, Refusal> {
    match command {
        RecoverCommand::Plan { scope, reason, by } => {
            let scope = engage::parse_scope(&scope)?;
            let approvers = owner::run_approvers(ctx, &scope);
            let console = console::prove(ctx, by.as_deref(), approvers.as_deref())?;
            let receipt = owner::recover_plan(ctx, &console, &scope, &reason)?;
            output::receipt(json, &receipt, |r| {
                format!(
                    "plan {} for {}: clears {}; carries forward {} unresolved operation(s){}\napply with: stopline recover apply --plan {} --by {}",
                    r["plan"].as_str().unwrap_or_default(), r["scope"].as_str().unwrap_or_default(), compact(&r["latches"]),
                    r["carried_forward_operations"].as_array().map_or(0, Vec::len),
                    if r["registry_errors"].as_array().is_some_and(|a| !a.is_empty()) { format!("; registry errors: {}", compact(&r["registry_errors"])) } else { String::new() },
                    r["plan"].as_str().unwrap_or_default(), console.by()
                )
            });
            Ok(0)
        }
        RecoverCommand::Apply { plan, by } => {
            let console = console::prove(ctx, by.as_deref(), None)?;
            let receipt = owner::recover_apply(ctx, &console, &plan)?;
            output::receipt(json, &receipt, |r| {
                format!(
                    "recovered: {} state: {} new epoch: {} cleared: {} surviving: {}",
                    r["recovered"],
                    r["state"].as_str().unwrap_or_default(),
                    r["new_epoch"],
                    compact(&r["cleared"]),
                    compact(&r["surviving"])
                )
            });
            Ok(0)
        }
        RecoverCommand::Repair { reason, by } => {
            let console = console::prove(ctx, by.as_deref(), None)?;
            let receipt = owner::repair(ctx, &console, &reason)?;
            output::receipt(json, &receipt, compact);
            Ok(0)
        }
    }
}

fn ops_command(ctx: &Context, command: OpsCommand, json: bool) -> Result<i32, Refusal> {
    match command {
        OpsCommand::Compact => {
            let (written, errors) = ctx.store.snapshot_ops_journals(1);
            let receipt = json!({"snapshots_written": written, "errors": errors});
            output::receipt(json, &receipt, |r| {
                format!(
                    "{} journal snapshot(s) rewritten{}",
                    r["snapshots_written"],
                    if errors.is_empty() {
                        String::new()
                    } else {
                        format!("; errors: {}", compact(&r["errors"]))
                    }
                )
            });
            Ok(if errors.is_empty() { 0 } else { 1 })
        }
        OpsCommand::List {
            unresolved,
            older_than,
        } => {
            let (ops, errors) = ctx.store.operations();
            let selected: Vec<_> = match older_than {
                Some(secs) => ctx
                    .store
                    .in_doubt_older_than((secs as i64).saturating_mul(1000)),
                None => ops
                    .into_values()
                    .filter(|op| !unresolved || op.is_unresolved())
                    .collect(),
            };
            // Whom each unresolved one blocks now: in doubt (its writer gone, or marked so) and
            // not a model request. One still in flight blocks nobody yet.
            let census = ctx.store.census();
            let list: Vec<Value> = selected
                .iter()
                .map(|op| {
                    let mut value = serde_json::to_value(op).unwrap_or_default();
                    if op.is_unresolved() {
                        let entry = census.entries().find(|e| e.operation.op == op.op);
                        let in_flight = entry.is_some_and(|e| e.in_flight);
                        value["in_flight"] = json!(in_flight);
                        value["blocking"] = json!(entry.is_some_and(|e| e.blocking));
                    }
                    value
                })
                .collect();
            let receipt = json!({"operations": list, "errors": errors});
            output::receipt(json, &receipt, |r| {
                r["operations"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(human_operation)
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            Ok(0)
        }
        OpsCommand::Reconcile {
            id,
            outcome,
            reason,
            by,
        } => {
            let console = console::prove(ctx, by.as_deref(), None)?;
            let outcome = match outcome {
                OutcomeArg::Committed => "committed",
                OutcomeArg::Failed => "failed",
                OutcomeArg::Abandoned => "abandoned",
            };
            let receipt = owner::reconcile(ctx, &console, &id, outcome, &reason)?;
            output::receipt(json, &receipt, |r| {
                format!(
                    "reconciled {} as {outcome}",
                    r["operation"]["op"].as_str().unwrap_or_default()
                )
            });
            Ok(0)
        }
    }
}

/// One operation of `ops list` (and `status`): id, target, agent, outcome, and for one without
/// an outcome whom it blocks.
fn human_operation(op: &Value) -> String {
    let mut line = format!(
        "{} {} by {} {}",
        op["op"].as_str().unwrap_or_default(),
        op["target"].as_str().unwrap_or_default(),
        op["agent"].as_str().unwrap_or("?"),
        op["outcome"].as_str().unwrap_or("UNRESOLVED")
    );
    if op["outcome"].is_null() {
        let blocks = op["blocks"].as_str().unwrap_or("everyone");
        line.push_str(&match (op["in_flight"] == true, blocks) {
            (true, _) => " (in flight: blocks nobody yet)".to_string(),
            (false, "nobody") => " (blocks nobody: a model request)".to_string(),
            (false, "everyone") => " (blocks every agent on this target)".to_string(),
            (false, agent) => format!(
                " (blocks {} and its sub-agents on this target)",
                agent.trim_start_matches("agent:")
            ),
        });
    }
    line
}

fn human_status(r: &Value) -> String {
    let mut lines = vec![format!(
        "phase: {}  state: {}  epoch: {}",
        r["phase"].as_str().unwrap_or_default(),
        r["state"].as_str().unwrap_or_default(),
        r["epoch"]["seq"]
    )];
    for latch in r["latches"].as_array().into_iter().flatten() {
        lines.push(format!(
            "latch {} {} {} by {}: {}",
            latch["file"].as_str().unwrap_or_default(),
            latch["scope"].as_str().unwrap_or_default(),
            latch["level"].as_str().unwrap_or_default(),
            latch["by"].as_str().unwrap_or("?"),
            latch["reason"]
                .as_str()
                .or(latch["problem"].as_str())
                .unwrap_or_default()
        ));
    }
    for fault in r["faults"].as_array().into_iter().flatten() {
        lines.push(format!(
            "fault {}: {}",
            fault["code"].as_str().unwrap_or_default(),
            fault["message"].as_str().unwrap_or_default()
        ));
    }
    let unresolved = &r["unresolved"];
    let count: usize = ["file", "destination", "model"]
        .iter()
        .map(|k| unresolved[k].as_array().map_or(0, Vec::len))
        .sum();
    if count > 0 {
        lines.push(format!(
            "{count} unresolved operation(s); see `stopline ops list --unresolved`"
        ));
        for kind in ["file", "destination", "model"] {
            for op in unresolved[kind].as_array().into_iter().flatten() {
                lines.push(format!("  {}", human_operation(op)));
            }
        }
    }
    lines.join("\n")
}

/// `run`: the agent's exit code when it ended by itself; exit 1 with the stop's code when a stop
/// ended it (the agent's own output went to the inherited streams).
fn run_command(
    ctx: &Context,
    request: &stopline_control::run::RunRequest,
    json: bool,
) -> Result<i32, Refusal> {
    let outcome = stopline_control::run::run(ctx, request).map_err(|e| e.to_refusal())?;
    if let Some(stopped) = outcome.stopped {
        return Err(stopped);
    }
    if json {
        output::receipt(true, &outcome.record, |_| String::new());
    }
    Ok(outcome.exit_code)
}

/// `drill` (SPEC §8): one drill, `--repeat` drills in a row, or a `--sweep`; exit 1 if any failed.
fn drill_command(ctx: &Context, args: crate::cli::DrillArgs, json: bool) -> Result<i32, Refusal> {
    let mut options = stopline_drill::DrillOptions::new(ctx.store.layout().home().to_path_buf());
    options.agents = args.agents;
    options.subagents = args.subagents;
    options.pull_after_ms = args.pull_after_ms;
    options.window_ms = args.window_ms;
    options.scope = args.scope;
    options.level = args.level;
    options.harness_version = args.harness_version;
    options.target_ms = args.target_ms;
    options.progress = !json;
    options.slow_view = args.slow_view_ms.map(std::time::Duration::from_millis);
    if let Some(url) = args.against {
        options.mode = stopline_drill::Mode::Against(url);
    }
    let failed = |e: stopline_drill::DrillError| e.to_refusal();
    let (report, pass) = if !args.sweep.is_empty() {
        let (_, report) =
            stopline_drill::sweep(&options, &args.sweep, args.repeat, args.plot.as_deref())
                .map_err(failed)?;
        let pass = report["pass"] == true;
        (report, pass)
    } else if args.repeat > 1 {
        let series = stopline_drill::repeat(&options, args.repeat).map_err(failed)?;
        (series.to_json(), series.pass())
    } else {
        let observation = stopline_drill::drill(&options).map_err(failed)?;
        (observation.to_json(), observation.pass)
    };
    output::receipt(json, &report, stopline_drill::report::human);
    if !pass {
        let reasons = stopline_drill::report::reasons_in(&report);
        output::error_line(&format!(
            "error: drill failed: {}",
            if reasons.is_empty() {
                "see the report".to_string()
            } else {
                reasons.join("; ")
            }
        ));
    }
    Ok(if pass { 0 } else { 1 })
}
