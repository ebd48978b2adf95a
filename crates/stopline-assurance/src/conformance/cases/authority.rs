//! Authority and epochs (docs/reference.md §1, §5 Epochs, §3): an emergency revokes what was minted before
//! it, through every delegation link, and nothing else; future, forged and expired tokens are
//! refused; a stale token can still pull a stop.

use super::{case, slow, Case};
use crate::conformance::sandbox::Sandbox;
use crate::conformance::steps::{allowed, altered_signature, blocked, refused};
use crate::conformance::{ensure, harness, Verdict};

pub const CASES: &[Case] = &[
    case(
        "stale_control_epoch",
        "a token minted before an emergency of its agent is refused stale_control_epoch by check and by token verify",
        stale_control_epoch,
    ),
    case(
        "delegated_tokens_die_with_their_parent",
        "stopping an agent revokes its delegated tokens down the chain, spares an unrelated chain, and its stale token can delegate nothing",
        delegated_tokens_die_with_their_parent,
    ),
    case(
        "future_control_epoch",
        "a token claiming an epoch the control plane never issued is refused future_control_epoch; an older one still passes",
        future_control_epoch,
    ),
    case(
        "token_invalid",
        "tokens signed by another control plane's key, with an altered signature, or malformed are refused token_invalid",
        token_invalid,
    ),
    slow(
        "token_expired",
        "a token past its lifetime is refused token_expired by check and reported expired by token verify",
        token_expired,
    ),
    case(
        "engage_accepts_a_stale_token",
        "a validly signed token made stale by a stop can still engage another stop (refusing to stop is the more dangerous default)",
        engage_accepts_a_stale_token,
    ),
    case(
        "label_stop_revokes_every_carrier",
        "an emergency on label:KEY=VALUE revokes every token carrying the label across runs, a delegate that inherited it and one that added it, spares other labels, and no delegate can change it",
        label_stop_revokes_every_carrier,
    ),
    case(
        "revoke_one_token",
        "token revoke refuses exactly that token (its agent's other token and its delegate keep working); --with-delegates refuses the delegate too; an unknown id is bad_request and changes nothing",
        revoke_one_token,
    ),
    case(
        "ttl_too_long",
        "a token or a delegate asking to live longer than max_ttl_s (default a day) is refused ttl_too_long",
        ttl_too_long,
    ),
    case(
        "delegation_cannot_widen_budgets",
        "a delegated token cannot carry more budget than its parent (budget_exhausted)",
        delegation_cannot_widen_budgets,
    ),
];

fn stale_control_epoch(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w"])?;
    allowed(&s.check_token(&token)?, "before the stop")?;
    s.engage("agent:w", "emergency")?;
    blocked(
        &s.check_token(&token)?,
        "stale_control_epoch",
        "after the stop",
    )?;
    let verify = s.run(&["token", "verify", &token])?;
    let v = verify.json();
    ensure(
        verify.code == 1 && v["valid"] == false && v["code"] == "stale_control_epoch",
        || format!("token verify of a stale token: {}", verify.brief()),
    )?;
    Ok(
        "check: block stale_control_epoch; token verify: valid false, stale_control_epoch, exit 1"
            .into(),
    )
}

fn revoke_one_token(s: &Sandbox) -> Verdict {
    let leaked = s.token(&["--agent", "w"])?;
    let sibling = s.token(&["--agent", "w"])?;
    let child = s.delegate(&leaked, "helper")?;
    let jti = stopline_token::decode_unverified(&leaked)
        .map_err(|e| crate::conformance::CaseError::Harness(format!("setup: decode: {e}")))?
        .jti;
    let revoke = |extra: &[&str]| {
        let mut args = vec![
            "token",
            "revoke",
            jti.as_str(),
            "--reason",
            "leaked",
            "--by",
            crate::conformance::steps::OPERATOR,
        ];
        args.extend_from_slice(extra);
        s.run(&args)
    };
    let unknown = s.run(&[
        "token",
        "revoke",
        &"0".repeat(32),
        "--reason",
        "leaked",
        "--by",
        crate::conformance::steps::OPERATOR,
    ])?;
    refused(&unknown, "bad_request", "revoking an id nobody minted")?;
    allowed(&s.check_token(&leaked)?, "before the revoke")?;
    let out = revoke(&[])?;
    ensure(out.code == 0 && out.json()["revoked"] == true, || {
        format!("token revoke: {}", out.brief())
    })?;
    blocked(
        &s.check_token(&leaked)?,
        "stale_control_epoch",
        "the revoked token",
    )?;
    allowed(&s.check_token(&sibling)?, "its agent's other token")?;
    allowed(
        &s.check_token(&child)?,
        "its delegate, without --with-delegates",
    )?;
    let out = revoke(&["--with-delegates"])?;
    ensure(out.code == 0, || {
        format!("token revoke --with-delegates: {}", out.brief())
    })?;
    blocked(
        &s.check_token(&child)?,
        "stale_control_epoch",
        "its delegate, with --with-delegates",
    )?;
    allowed(&s.check_token(&sibling)?, "its agent's other token, still")?;
    Ok("revoked: stale_control_epoch; sibling allowed; delegate allowed, then refused with --with-delegates; unknown id bad_request".into())
}

fn delegated_tokens_die_with_their_parent(s: &Sandbox) -> Verdict {
    let parent = s.token(&["--agent", "parent"])?;
    let child = s.delegate(&parent, "child")?;
    let grandchild = s.delegate(&child, "grandchild")?;
    let other = s.token(&["--agent", "other"])?;
    let other_child = s.delegate(&other, "helper")?;
    s.engage("agent:parent", "emergency")?;
    for (name, token) in [
        ("parent", &parent),
        ("child", &child),
        ("grandchild", &grandchild),
    ] {
        blocked(&s.check_token(token)?, "stale_control_epoch", name)?;
    }
    for (name, token) in [("other", &other), ("other's child", &other_child)] {
        allowed(&s.check_token(token)?, name)?;
    }
    let late = s.run(&["token", "delegate", "--parent", &parent, "--agent", "late"])?;
    refused(
        &late,
        "stale_control_epoch",
        "delegating from the stopped parent",
    )?;
    Ok("parent, child, grandchild: stale_control_epoch; other chain allowed; delegate from stale parent refused".into())
}

fn label_stop_revokes_every_carrier(s: &Sandbox) -> Verdict {
    let run_a = s.token(&[
        "--agent",
        "red-a",
        "--run",
        "eval-1",
        "--label",
        "task=ctf-17",
    ])?;
    let run_b = s.token(&[
        "--agent",
        "red-b",
        "--run",
        "eval-2",
        "--label",
        "task=ctf-17",
    ])?;
    let inherited = s.delegate(&run_b, "helper")?;
    let plain = s.token(&["--agent", "plain", "--run", "eval-1"])?;
    let adds = s.run(&[
        "token",
        "delegate",
        "--parent",
        &plain,
        "--agent",
        "scout",
        "--label",
        "task=ctf-17",
    ])?;
    let added = adds.json()["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure(adds.code == 0 && !added.is_empty(), || {
        format!("setup: a delegate adding the label: {}", adds.brief())
    })?;
    let other = s.token(&["--agent", "red-c", "--label", "task=ctf-18"])?;
    let changed = s.run(&[
        "token",
        "delegate",
        "--parent",
        &run_a,
        "--agent",
        "x",
        "--label",
        "task=ctf-18",
    ])?;
    refused(
        &changed,
        "bad_request",
        "a delegate changing an inherited label",
    )?;
    s.engage("label:task=ctf-17", "emergency")?;
    for (name, token) in [
        ("run eval-1", &run_a),
        ("run eval-2", &run_b),
        ("the delegate that inherited it", &inherited),
        ("the delegate that added it", &added),
    ] {
        blocked(&s.check_token(token)?, "stale_control_epoch", name)?;
    }
    for (name, token) in [("unlabeled parent", &plain), ("task=ctf-18", &other)] {
        allowed(&s.check_token(token)?, name)?;
    }
    Ok("two runs and both delegates: stale_control_epoch; the unlabeled parent and another label allowed; changing a label: bad_request".into())
}

fn ttl_too_long(s: &Sandbox) -> Verdict {
    let long = s.run(&["token", "issue", "--agent", "w", "--ttl", "86401"])?;
    refused(&long, "ttl_too_long", "token issue --ttl 86401")?;
    let parent = s.token(&["--agent", "w", "--ttl", "86400"])?;
    let child = s.run(&[
        "token", "delegate", "--parent", &parent, "--agent", "c", "--ttl", "86401",
    ])?;
    refused(&child, "ttl_too_long", "token delegate --ttl 86401")?;
    Ok("issue and delegate past 86400 s: ttl_too_long; 86400 s minted".into())
}

fn future_control_epoch(s: &Sandbox) -> Verdict {
    let old = s.token(&["--agent", "w"])?;
    s.engage("agent:a", "emergency")?;
    s.engage("agent:b", "emergency")?;
    let late = s.token(&["--agent", "w"])?;
    // Rewind the lineage (as a restored backup would): the late token now claims a future epoch.
    for file in ["breakglass.wal.jsonl", "epoch.json"] {
        std::fs::remove_file(s.file(file)).map_err(harness)?;
    }
    for latch in s.entries("latches") {
        std::fs::remove_file(s.file("latches").join(latch)).map_err(harness)?;
    }
    blocked(
        &s.check_token(&late)?,
        "future_control_epoch",
        "a token from the future",
    )?;
    let verify = s.run(&["token", "verify", &late])?;
    ensure(verify.json()["code"] == "future_control_epoch", || {
        format!("token verify: {}", verify.brief())
    })?;
    allowed(&s.check_token(&old)?, "a token of epoch 0")?;
    Ok("after rewinding WAL and epoch: epoch-2 token blocked future_control_epoch (check and verify); epoch-0 token allowed".into())
}

fn token_invalid(s: &Sandbox) -> Verdict {
    let foreign_home = s.dir().join("other-plane");
    let out = s.output(
        s.command_in(&foreign_home, &["token", "issue", "--agent", "w"]),
        None,
        "token issue (other plane)",
    )?;
    let foreign = out.json()["token"].as_str().unwrap_or_default().to_string();
    ensure(!foreign.is_empty(), || format!("setup: {}", out.brief()))?;
    let own = s.token(&["--agent", "w"])?;
    let altered = altered_signature(&own);
    for (name, token) in [
        ("another plane's key", foreign.as_str()),
        ("an altered signature", altered.as_str()),
        ("garbage", "stl1.not.atoken"),
    ] {
        blocked(&s.check_token(token)?, "token_invalid", name)?;
        let verify = s.run(&["token", "verify", token])?;
        ensure(verify.code == 1 && verify.json()["valid"] == false, || {
            format!("token verify of {name}: {}", verify.brief())
        })?;
    }
    Ok(
        "foreign key, altered signature, garbage: check block token_invalid; verify valid false"
            .into(),
    )
}

fn token_expired(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w", "--ttl", "1"])?;
    std::thread::sleep(std::time::Duration::from_millis(2100));
    blocked(
        &s.check_token(&token)?,
        "token_expired",
        "a token past its ttl",
    )?;
    let verify = s.run(&["token", "verify", &token])?;
    ensure(
        verify.code == 1 && verify.json()["code"] == "expired",
        || format!("token verify: {}", verify.brief()),
    )?;
    Ok("ttl 1 s, checked after 2.1 s: block token_expired; verify code expired".into())
}

fn engage_accepts_a_stale_token(s: &Sandbox) -> Verdict {
    let token = s.token(&["--agent", "w"])?;
    s.engage("agent:w", "emergency")?;
    blocked(&s.check_token(&token)?, "stale_control_epoch", "setup")?;
    let by_flag = s.run(&[
        "engage",
        "--scope",
        "machine",
        "--level",
        "halt-all",
        "--reason",
        "stale but signed",
        "--token",
        &token,
    ])?;
    ensure(
        by_flag.code == 0 && by_flag.json()["engaged"] == true,
        || format!("engage --token <stale>: {}", by_flag.brief()),
    )?;
    let by_env = s.run_with(
        &[
            "engage",
            "--scope",
            "run:r9",
            "--reason",
            "stale but signed",
        ],
        &[("STOPLINE_TOKEN", &token)],
        None,
    )?;
    ensure(by_env.code == 0, || {
        format!("engage with STOPLINE_TOKEN: {}", by_env.brief())
    })?;
    ensure(by_flag.json()["latch"]["session"]["bound"] == "w", || {
        format!(
            "the latch does not name the token's agent: {}",
            by_flag.json()["latch"]
        )
    })?;
    Ok("stale token engaged machine halt-all (--token) and run:r9 (STOPLINE_TOKEN); latch bound to w".into())
}

fn delegation_cannot_widen_budgets(s: &Sandbox) -> Verdict {
    let parent = s.token(&["--agent", "lead", "--budget", "steps=10"])?;
    let out = s.run(&[
        "token", "delegate", "--parent", &parent, "--agent", "greedy", "--budget", "steps=11",
    ])?;
    refused(
        &out,
        "budget_exhausted",
        "a child asking for more than its parent",
    )?;
    let ok = s.run(&[
        "token", "delegate", "--parent", &parent, "--agent", "modest", "--budget", "steps=4",
    ])?;
    ensure(ok.code == 0, || {
        format!("a child inside its parent's budget: {}", ok.brief())
    })?;
    Ok("steps=11 under a steps=10 parent: budget_exhausted; steps=4: delegated".into())
}
