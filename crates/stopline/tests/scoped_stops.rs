//! Scoped stops stop what they cover and spare everything else; epochs revoke old authority.
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

mod util;
use util::{Home, CLOCK_OFFSET};

#[test]
fn project_stop_spares_a_sibling_project_with_a_shared_prefix() {
    let home = Home::new();
    let a = home.dir.path().join("srv/a");
    let ab = home.dir.path().join("srv/ab");
    let a_sub = a.join("sub");
    for dir in [&a, &ab, &a_sub] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let token_a = home.token(&["--agent", "wa", "--project", a_sub.to_str().unwrap()]);
    let token_ab = home.token(&["--agent", "wab", "--project", ab.to_str().unwrap()]);
    home.engage(&format!("project:{}", a.display()), "emergency");
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &token_a]);
    assert_eq!(code, 4, "{receipt}");
    assert_eq!(
        receipt["code"], "stale_control_epoch",
        "pre-stop authority under the project is revoked"
    );
    let fresh_a = home.token(&["--agent", "wa2", "--project", a_sub.to_str().unwrap()]);
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &fresh_a]);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("break_glass_contained")),
        "the latch still covers fresh authority"
    );
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &token_ab]);
    assert_eq!(code, 0, "/srv/ab is not under /srv/a: {receipt}");
    let (code, _) = home.check(&[
        "--class",
        "noncritical",
        "--agent",
        "x",
        "--project",
        ab.to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
}

#[test]
fn agent_stop_revokes_that_agent_and_its_sub_agents_only() {
    let home = Home::new();
    let parent = home.token(&["--agent", "parent"]);
    let child = home.delegate(&parent, "child");
    let grandchild = home.delegate(&child, "grandchild");
    let other = home.token(&["--agent", "other"]);
    let other_child = home.delegate(&other, "helper");
    for token in [&parent, &child, &grandchild, &other, &other_child] {
        assert_eq!(
            home.check(&["--class", "noncritical", "--token", token]).0,
            0
        );
    }
    home.engage("agent:parent", "emergency");
    for token in [&parent, &child, &grandchild] {
        let (code, receipt) = home.check(&["--class", "noncritical", "--token", token]);
        assert_eq!(code, 4);
        assert_eq!(receipt["code"], "stale_control_epoch", "{receipt}");
        let verify = home.run(&["token", "verify", token]);
        assert_eq!(verify.json()["valid"], false);
        assert_eq!(verify.json()["code"], "stale_control_epoch");
    }
    for token in [&other, &other_child] {
        let (code, receipt) = home.check(&["--class", "noncritical", "--token", token]);
        assert_eq!(code, 0, "unrelated agents keep their authority: {receipt}");
    }
    // A stopped parent hands out no fresh tokens.
    let r = home.run(&["token", "delegate", "--parent", &parent, "--agent", "late"]);
    assert_eq!((r.code, r.code_str().as_str()), (1, "stale_control_epoch"));
}

#[test]
fn halt_levels_keep_authority_and_disengage_lifts_them() {
    let home = Home::new();
    let token = home.token(&["--agent", "w"]);
    let critical = home.token(&["--agent", "audit", "--role", "critical"]);
    home.engage("agent:w", "halt-noncritical");
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &token]);
    assert_eq!((code, receipt["decision"].as_str()), (3, Some("queue")));
    assert_eq!(receipt["mode"], "HALT_NONCRITICAL");
    home.engage("machine", "halt-all");
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &token]);
    assert_eq!((code, receipt["mode"].as_str()), (4, Some("HALT_ALL")));
    assert_eq!(
        home.check(&["--class", "critical", "--token", &critical]).0,
        0,
        "critical work continues at HALT_ALL"
    );
    let (code, _) = home.check(&["--class", "critical", "--token", &token]);
    assert_eq!(
        code, 4,
        "an agent token's claim of critical is judged noncritical"
    );
    // The stopped agent cannot lift its own stop.
    let r = home.run(&[
        "disengage",
        "--scope",
        "agent:w",
        "--reason",
        "let me go",
        "--token",
        &token,
    ]);
    assert_eq!(
        (r.code, r.code_str().as_str()),
        (1, "disengage_not_permitted")
    );
    let r = home.run(&[
        "disengage",
        "--scope",
        "agent:w",
        "--reason",
        "x",
        "--by",
        "random-person",
    ]);
    assert_eq!(
        (r.code, r.code_str().as_str()),
        (1, "disengage_not_permitted")
    );
    home.run(&[
        "disengage",
        "--scope",
        "machine",
        "--reason",
        "checked",
        "--by",
        "operator",
    ])
    .assert_ok();
    home.run(&[
        "disengage",
        "--scope",
        "agent:w",
        "--reason",
        "checked",
        "--by",
        "safety-monitor",
    ])
    .assert_ok();
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &token]).0,
        0,
        "authority survives halts"
    );
}

#[test]
fn emergency_latches_need_recovery_not_disengage() {
    let home = Home::new();
    home.engage("agent:w", "emergency");
    let r = home.run(&[
        "disengage",
        "--scope",
        "agent:w",
        "--reason",
        "x",
        "--by",
        "operator",
    ]);
    assert_eq!(
        (r.code, r.code_str().as_str()),
        (1, "emergency_requires_recovery")
    );
    assert_eq!(home.entries("latches").len(), 1);
}

#[test]
fn future_epoch_is_refused_and_forged_tokens_are_blocked() {
    let home = Home::new();
    let token = home.token(&["--agent", "w"]);
    // A token minted by another control plane's key is forged here.
    let other = Home::new();
    other.engage("agent:z", "emergency");
    other.engage("agent:y", "emergency");
    let foreign = other.token(&["--agent", "w"]);
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &foreign]);
    assert_eq!((code, receipt["code"].as_str()), (4, Some("token_invalid")));
    // Rewind this home's epoch lineage: a token minted at epoch 2 is now from the future.
    home.engage("agent:a", "emergency");
    home.engage("agent:b", "emergency");
    let late = home.token(&["--agent", "w"]);
    for f in ["breakglass.wal.jsonl", "epoch.json"] {
        std::fs::remove_file(home.file(f)).unwrap();
    }
    for f in home.entries("latches") {
        std::fs::remove_file(home.file("latches").join(f)).unwrap();
    }
    let (code, receipt) = home.check(&["--class", "noncritical", "--token", &late]);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("future_control_epoch")),
        "{receipt}"
    );
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &token]).0,
        0
    );
    let garbage = home.check(&["--class", "noncritical", "--token", "stl1.not.atoken"]);
    assert_eq!(
        (garbage.0, garbage.1["code"].as_str()),
        (4, Some("token_invalid"))
    );
    let expired = home.token(&["--agent", "w", "--ttl", "1"]);
    // Checked 2.1 s later by the store's clock (no sleep; needs --features stopline/failpoints).
    let later = home.run_env(
        &["check", "--class", "noncritical", "--token", &expired],
        &[(CLOCK_OFFSET, "2100")],
    );
    let (code, receipt) = (later.code, later.json());
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("token_expired")),
        "a build without stopline/failpoints ignores {CLOCK_OFFSET}: {receipt}"
    );
}

#[test]
fn unprovable_identity_is_covered_by_every_agent_latch() {
    let home = Home::new();
    home.engage("agent:somebody", "halt-all");
    let (code, receipt) =
        home.check(&["--class", "noncritical", "--agent", "nobody-in-particular"]);
    assert_eq!(code, 4, "{receipt}");
    let token = home.token(&["--agent", "nobody-in-particular"]);
    assert_eq!(
        home.check(&["--class", "noncritical", "--token", &token]).0,
        0
    );
}

#[test]
fn token_from_file_and_environment() {
    let home = Home::new();
    let token = home.token(&["--agent", "w"]);
    let path = home.dir.path().join("token");
    std::fs::write(&path, &token).unwrap();
    home.engage("agent:w", "halt-all");
    let (code, _) = home.check(&[
        "--class",
        "noncritical",
        "--token-file",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 4);
    let r = home.run_env(
        &["check", "--class", "noncritical"],
        &[("STOPLINE_TOKEN", &token)],
    );
    assert_eq!(
        (r.code, r.json()["latches"].as_array().unwrap().len()),
        (4, 1)
    );
}
