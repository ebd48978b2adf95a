//! Admission (docs/reference.md §1, §3 `check`): each level's decision for each class, scoped stops covering
//! exactly what they name, and identity that cannot be proven treated as covered.

use super::{case, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{allowed, blocked, decision};
use crate::conformance::{ensure, harness, Verdict};

pub const CASES: &[Case] = &[
    case(
        "halted_noncritical_queues",
        "under halt-noncritical, noncritical work is queued (check exit 3, halted_noncritical) and critical work allowed",
        halted_noncritical_queues,
    ),
    case(
        "halt_all_blocks_noncritical_only",
        "under halt-all, noncritical work is blocked break_glass_contained, a critical-role token is allowed, and an agent's claim of critical is judged noncritical",
        halt_all_blocks_noncritical_only,
    ),
    case(
        "emergency_blocks_critical_work",
        "under an emergency, critical work is blocked too",
        emergency_blocks_critical_work,
    ),
    case(
        "project_stop_matches_whole_components",
        "a project stop covers its subdirectories and spares a sibling sharing its prefix",
        project_stop_matches_whole_components,
    ),
    case(
        "run_stop_spares_other_runs",
        "a run stop blocks that run's authority and spares another run",
        run_stop_spares_other_runs,
    ),
    case(
        "unprovable_identity_is_covered",
        "a caller naming an agent without a token is covered by every agent latch; a token of an unrelated agent is not",
        unprovable_identity_is_covered,
    ),
    case(
        "check_never_allows_on_error",
        "check answers an unreadable token file or garbage token with a block receipt (exit 4), never exit 0",
        check_never_allows_on_error,
    ),
];

fn halted_noncritical_queues(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w"])?;
    let critical = s.token(&["--agent", "audit", "--role", "critical"])?;
    s.engage("agent:w", "halt-noncritical")?;
    let (code, receipt) = s.check_token(&token)?;
    ensure(
        code == 3
            && receipt["decision"] == "queue"
            && receipt["code"] == "halted_noncritical"
            && receipt["mode"] == "HALT_NONCRITICAL",
        || format!("expected queue halted_noncritical (exit 3), got exit {code}: {receipt}"),
    )?;
    let c = s.check(&["--class", "critical", "--token", &critical])?;
    allowed(&c, "critical work under halt-noncritical")?;
    Ok(format!(
        "noncritical: exit 3 {}; critical: allow",
        decision(&receipt)
    ))
}

fn halt_all_blocks_noncritical_only(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w"])?;
    let critical = s.token(&["--agent", "audit", "--role", "critical"])?;
    s.engage("machine", "halt-all")?;
    let c = s.check_token(&token)?;
    blocked(&c, "break_glass_contained", "noncritical under halt-all")?;
    ensure(c.1["mode"] == "HALT_ALL", || format!("mode: {}", c.1))?;
    allowed(
        &s.check(&["--class", "critical", "--token", &critical])?,
        "a critical-role token under halt-all",
    )?;
    blocked(
        &s.check(&["--class", "critical", "--token", &token])?,
        "break_glass_contained",
        "an agent token claiming critical",
    )?;
    Ok("agent token: block break_glass_contained (HALT_ALL); critical role: allow; agent claiming critical: block".into())
}

fn emergency_blocks_critical_work(s: &Sandbox) -> Verdict {
    s.engage("machine", "emergency")?;
    // Minted after the stop, so the refusal is admission at EMERGENCY, not a stale epoch.
    let critical = s.token(&["--agent", "audit", "--role", "critical"])?;
    let c = s.check(&["--class", "critical", "--token", &critical])?;
    blocked(
        &c,
        "break_glass_contained",
        "critical work under an emergency",
    )?;
    ensure(c.1["mode"] == "EMERGENCY", || format!("mode: {}", c.1))?;
    Ok(format!(
        "critical-role token minted after a machine emergency: exit 4 {}",
        decision(&c.1)
    ))
}

fn project_stop_matches_whole_components(s: &Sandbox) -> Verdict {
    let a = s.dir().join("srv/a");
    let ab = s.dir().join("srv/ab");
    let sub = a.join("sub");
    for dir in [&sub, &ab] {
        std::fs::create_dir_all(dir).map_err(harness)?;
    }
    let (a, ab, sub) = (
        a.display().to_string(),
        ab.display().to_string(),
        sub.display().to_string(),
    );
    let token_sub = s.token(&["--agent", "wa", "--project", &sub])?;
    let token_ab = s.token(&["--agent", "wab", "--project", &ab])?;
    s.engage(&format!("project:{a}"), "halt-all")?;
    blocked(
        &s.check_token(&token_sub)?,
        "break_glass_contained",
        "a token under the stopped project",
    )?;
    blocked(
        &s.check(&["--class", "noncritical", "--agent", "x", "--project", &sub])?,
        "break_glass_contained",
        "a subdirectory of the stopped project",
    )?;
    allowed(
        &s.check_token(&token_ab)?,
        "a sibling project sharing the prefix",
    )?;
    allowed(
        &s.check(&[
            "--class",
            "noncritical",
            "--token",
            &token_ab,
            "--project",
            &ab,
        ])?,
        "the sibling named by --project",
    )?;
    Ok(format!("project:{a} blocks {sub}; spares {ab}"))
}

fn run_stop_spares_other_runs(s: &Sandbox) -> Verdict {
    let mine = s.token(&["--agent", "w1", "--run", "eval-1"])?;
    let other = s.token(&["--agent", "w2", "--run", "eval-2"])?;
    s.engage("run:eval-1", "halt-all")?;
    blocked(
        &s.check_token(&mine)?,
        "break_glass_contained",
        "the stopped run's token",
    )?;
    allowed(&s.check_token(&other)?, "another run's token")?;
    Ok("run:eval-1 halt-all: its token blocked; eval-2's allowed".into())
}

fn unprovable_identity_is_covered(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "bystander"])?;
    s.engage("agent:somebody", "halt-all")?;
    let c = s.check(&["--class", "noncritical", "--agent", "bystander"])?;
    ensure(c.0 == 4, || {
        format!(
            "--agent without a token was not covered: exit {}: {}",
            c.0, c.1
        )
    })?;
    allowed(&s.check_token(&token)?, "the same agent with a token")?;
    Ok(format!(
        "--agent bystander without a token: exit 4 {}; with its token: allow",
        decision(&c.1)
    ))
}

fn check_never_allows_on_error(s: &Sandbox) -> Verdict {
    // A home that exists, so the refusal is about the token (a missing home is
    // control_home_missing: `control_home_missing_refuses_gates`).
    let init = s.run(&["init"])?;
    ensure(init.code == 0, || format!("init: {}", init.brief()))?;
    let missing = s.dir().join("no-token-here");
    let c = s.check(&[
        "--class",
        "noncritical",
        "--token-file",
        &missing.display().to_string(),
    ])?;
    blocked(&c, "token_invalid", "an unreadable --token-file")?;
    let g = s.check(&["--class", "critical", "--token", "stl1.not.atoken"])?;
    blocked(&g, "token_invalid", "a garbage token")?;
    let e = s.run_with(
        &["check", "--class", "noncritical"],
        &[("STOPLINE_TOKEN", "garbage")],
        None,
    )?;
    ensure(e.code == 4, || {
        format!("a garbage STOPLINE_TOKEN: {}", e.brief())
    })?;
    Ok("unreadable token file, garbage --token, garbage STOPLINE_TOKEN: each exit 4 block token_invalid".into())
}
