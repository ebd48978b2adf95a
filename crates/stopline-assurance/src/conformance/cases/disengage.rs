//! Disengage (docs/reference.md §3 Disengage): only a current operator or monitor lifts a halt, never the
//! stopped agent itself, never an emergency; it lifts exactly one scope, and a halt keeps the
//! authority it paused.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{allowed, blocked, refused};
use crate::conformance::{ensure, Verdict};

pub const CASES: &[Case] = &[
    case(
        "disengage_not_permitted_for_the_stopped_agent",
        "an agent cannot lift its own halt, by --token or through STOPLINE_TOKEN (disengage_not_permitted), and the latch stays",
        disengage_not_permitted_for_the_stopped_agent,
    ),
    case(
        "disengage_not_permitted_for_unknown_names",
        "--by naming neither an operator nor a monitor is refused disengage_not_permitted",
        disengage_not_permitted_for_unknown_names,
    ),
    case(
        "emergency_requires_recovery",
        "disengage of a scope holding an emergency latch is refused emergency_requires_recovery and the latch stays",
        emergency_requires_recovery,
    ),
    case(
        "disengage_lifts_exactly_one_scope",
        "a monitor lifting agent:w leaves the machine halt in force; lifting both restores the paused token (halts keep authority)",
        disengage_lifts_exactly_one_scope,
    ),
];

fn disengage(
    s: &Sandbox,
    scope: &str,
    who: &[&str],
) -> Result<crate::conformance::sandbox::Out, crate::conformance::CaseError> {
    let mut args = vec!["disengage", "--scope", scope, "--reason", "lift it"];
    args.extend_from_slice(who);
    s.run(&args)
}

fn disengage_not_permitted_for_the_stopped_agent(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w"])?;
    s.engage("agent:w", "halt-all")?;
    let out = disengage(s, "agent:w", &["--token", &token])?;
    refused(
        &out,
        "disengage_not_permitted",
        "--token <the stopped agent's>",
    )?;
    let out = s.run_with(
        &[
            "disengage",
            "--scope",
            "agent:w",
            "--reason",
            "x",
            "--by",
            "operator",
        ],
        &[("STOPLINE_TOKEN", &token)],
        None,
    )?;
    refused(
        &out,
        "disengage_not_permitted",
        "--by operator inside the agent's session",
    )?;
    ensure(s.entries("latches").len() == 1, || {
        "the latch was removed".into()
    })?;
    Ok(
        "--token and STOPLINE_TOKEN of the stopped agent: disengage_not_permitted; latch kept"
            .into(),
    )
}

fn disengage_not_permitted_for_unknown_names(s: &Sandbox) -> Verdict {
    s.engage("agent:w", "halt-all")?;
    for who in [&["--by", "random-person"][..], &[][..]] {
        let out = disengage(s, "agent:w", who)?;
        refused(
            &out,
            "disengage_not_permitted",
            &format!("disengage {who:?}"),
        )?;
    }
    ensure(s.entries("latches").len() == 1, || {
        "the latch was removed".into()
    })?;
    Ok("--by random-person and no caller at all: disengage_not_permitted; latch kept".into())
}

fn emergency_requires_recovery(s: &Sandbox) -> Verdict {
    s.engage("agent:w", "emergency")?;
    let out = disengage(s, "agent:w", &["--by", "operator"])?;
    refused(
        &out,
        "emergency_requires_recovery",
        "disengage of an emergency",
    )?;
    ensure(s.entries("latches").len() == 1, || {
        "the latch was removed".into()
    })?;
    Ok("operator disengage of agent:w emergency: emergency_requires_recovery; latch kept".into())
}

fn disengage_lifts_exactly_one_scope(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w"])?;
    s.engage("agent:w", "halt-all")?;
    s.engage("machine", "halt-all")?;
    let out = disengage(s, "agent:w", &["--by", "safety-monitor"])?;
    ensure(out.code == 0, || {
        format!("monitor disengage: {}", out.brief())
    })?;
    blocked(
        &s.check_token(&token)?,
        "break_glass_contained",
        "the machine halt is still in force",
    )?;
    let out = disengage(s, "machine", &["--by", "operator"])?;
    ensure(out.code == 0, || {
        format!("operator disengage: {}", out.brief())
    })?;
    allowed(&s.check_token(&token)?, "the token paused by the halts")?;
    ensure(s.entries("latches").is_empty(), || {
        format!("{:?}", s.entries("latches"))
    })?;
    Ok("agent:w lifted by a monitor, machine still halts w; machine lifted by an operator; pre-halt token allowed".into())
}
