//! The owner console (docs/reference.md §2), one predicate at a time: every other predicate is made to pass,
//! so the refusal must name exactly the one that failed — and with all three failing, all three.
//! Every owner verb is guarded, not only `recover plan`.

use super::{case, Case};
use crate::conformance::pty::Terminal;
use crate::conformance::sandbox::{Out, Sandbox};
use crate::conformance::steps::{refused, OPERATOR};
use crate::conformance::{ensure, Verdict};

pub const CASES: &[Case] = &[
    case(
        "owner_console_requires_a_terminal",
        "recovery with stdin not a terminal is refused owner_control_required naming interactive_terminal only",
        requires_a_terminal,
    ),
    case(
        "owner_console_requires_the_controlling_terminal",
        "a terminal on stdin and stderr that is not the process's controlling terminal (not its foreground group) is refused interactive_terminal",
        requires_the_controlling_terminal,
    ),
    case(
        "owner_console_requires_stderr_on_the_terminal",
        "a controlling terminal on stdin with stderr redirected away is refused interactive_terminal",
        requires_stderr_on_the_terminal,
    ),
    case(
        "owner_console_refuses_an_agent_session",
        "on a real terminal with STOPLINE_TOKEN or STOPLINE_SESSION set, recovery is refused naming no_agent_session only",
        refuses_an_agent_session,
    ),
    case(
        "owner_console_refuses_a_supervised_ancestor",
        "a process whose parent chain holds a registered supervised agent is refused no_agent_session, even with a clean environment and its own session",
        refuses_a_supervised_ancestor,
    ),
    case(
        "owner_console_requires_an_operator",
        "on a real terminal, --by naming no configured operator (or absent) is refused naming operator_identity only",
        requires_an_operator,
    ),
    case(
        "owner_console_names_every_failed_predicate",
        "with all three predicates failing, the refusal names all three",
        names_every_failed_predicate,
    ),
    case(
        "owner_console_guards_every_owner_verb",
        "drain, recover plan/apply/repair and ops reconcile are all refused owner_control_required off the console",
        guards_every_owner_verb,
    ),
];

const PREDICATES: [&str; 3] = [
    "no_agent_session",
    "operator_identity",
    "interactive_terminal",
];

fn plan_args(by: &str) -> Vec<&str> {
    vec![
        "recover",
        "plan",
        "--scope",
        "machine",
        "--reason",
        "conformance",
        "--by",
        by,
    ]
}

/// Refused owner_control_required naming exactly `failed` among the three predicates.
fn names_only(out: &Out, failed: &[&str], what: &str) -> Result<(), crate::conformance::CaseError> {
    refused(out, "owner_control_required", what)?;
    for predicate in PREDICATES {
        let named = out.stderr.contains(predicate);
        ensure(named == failed.contains(&predicate), || {
            format!(
                "{what}: {predicate} {} in {:?}",
                if named { "wrongly named" } else { "not named" },
                out.stderr
            )
        })?;
    }
    Ok(())
}

fn requires_a_terminal(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let out = s.run(&plan_args(OPERATOR))?;
    names_only(&out, &["interactive_terminal"], "stdin /dev/null")?;
    ensure(s.entries("latches").len() == 1, || "the latch moved".into())?;
    Ok("stdin /dev/null: owner_control_required naming interactive_terminal only".into())
}

fn requires_the_controlling_terminal(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let out = s.pty(&plan_args(OPERATOR), &[], Terminal::NotControlling)?;
    names_only(
        &out,
        &["interactive_terminal"],
        "a terminal that is not the controlling one",
    )?;
    Ok(
        "stdin and stderr on a pty that is not the controlling terminal: interactive_terminal only"
            .into(),
    )
}

fn requires_stderr_on_the_terminal(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let out = s.pty(&plan_args(OPERATOR), &[], Terminal::StderrPiped)?;
    names_only(&out, &["interactive_terminal"], "stderr piped")?;
    ensure(out.stderr.contains("stderr"), || {
        format!("the message does not say stderr: {}", out.stderr)
    })?;
    Ok("controlling pty on stdin, stderr piped: interactive_terminal (stderr) only".into())
}

fn refuses_an_agent_session(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    for var in ["STOPLINE_TOKEN", "STOPLINE_SESSION"] {
        let out = s.pty(
            &plan_args(OPERATOR),
            &[(var, "anything")],
            Terminal::Controlling,
        )?;
        names_only(&out, &["no_agent_session"], &format!("{var} set"))?;
    }
    Ok("STOPLINE_TOKEN / STOPLINE_SESSION on a real console: no_agent_session only".into())
}

fn refuses_a_supervised_ancestor(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    // The battery itself is registered as a supervised agent: its children descend from it.
    let me = std::process::id();
    s.write(
        "runs/conformance-run/workers/agent.json",
        format!("{{\"pid\":{me},\"agent\":\"agent\",\"state\":\"running\"}}").as_bytes(),
    )?;
    let out = s.console(&plan_args(OPERATOR))?;
    names_only(&out, &["no_agent_session"], "a supervised ancestor")?;
    Ok(format!("parent pid {me} registered as a supervised agent: setsid + clean env still refused no_agent_session"))
}

fn requires_an_operator(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let out = s.console(&plan_args("mallory"))?;
    names_only(&out, &["operator_identity"], "--by mallory")?;
    let out = s.console(&["recover", "plan", "--scope", "machine", "--reason", "x"])?;
    names_only(&out, &["operator_identity"], "no --by")?;
    Ok("--by mallory and no --by on a real console: operator_identity only".into())
}

fn names_every_failed_predicate(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let out = s.run_with(&plan_args("mallory"), &[("STOPLINE_TOKEN", "t")], None)?;
    names_only(&out, &PREDICATES, "all three failing")?;
    Ok("agent session + unknown operator + no terminal: all three predicates named".into())
}

fn guards_every_owner_verb(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    let verbs: [&[&str]; 5] = [
        &[
            "drain",
            "--deadline",
            "30",
            "--reason",
            "x",
            "--by",
            OPERATOR,
        ],
        &[
            "recover", "plan", "--scope", "machine", "--reason", "x", "--by", OPERATOR,
        ],
        &["recover", "apply", "--plan", "plan_x", "--by", OPERATOR],
        &["recover", "repair", "--reason", "x", "--by", OPERATOR],
        &[
            "ops",
            "reconcile",
            "op_x",
            "--outcome",
            "failed",
            "--reason",
            "x",
            "--by",
            OPERATOR,
        ],
    ];
    for args in verbs {
        let out = s.run(args)?;
        refused(&out, "owner_control_required", &args[..2].join(" "))?;
    }
    ensure(s.entries("latches").len() == 1, || "the latch moved".into())?;
    Ok("drain, recover plan/apply/repair, ops reconcile off the console: each owner_control_required".into())
}
