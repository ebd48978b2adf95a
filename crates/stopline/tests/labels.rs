//! Stop by what a workload is (docs/reference.md §1, Label): `label:KEY=VALUE` stops every
//! subject whose token carries the label, across runs and down the delegation chain, and an
//! emergency on it revokes exactly those tokens. A delegate inherits its parent's labels and can
//! add one, never remove or change one.

mod util;
use util::Home;

fn noncritical(home: &Home, token: &str) -> (i32, serde_json::Value) {
    home.check(&["--class", "noncritical", "--token", token])
}

fn labels_of(token: &str) -> Vec<(String, String)> {
    stopline_token::decode_unverified(token)
        .unwrap()
        .labels
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn a_label_stop_covers_two_runs_and_a_delegate_and_spares_the_rest() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let ctf_a = home.token(&[
        "--agent",
        "red-a",
        "--run",
        "eval-1",
        "--label",
        "task=ctf-17",
        "--label",
        "kind=red-team",
    ]);
    let ctf_b = home.token(&[
        "--agent",
        "red-b",
        "--run",
        "eval-2",
        "--label",
        "TASK=ctf-17",
    ]);
    let other_task = home.token(&[
        "--agent",
        "red-c",
        "--run",
        "eval-2",
        "--label",
        "task=ctf-18",
    ]);
    let unlabeled = home.token(&["--agent", "plain", "--run", "eval-1"]);
    // A sub-agent of a labeled parent, which adds a label of its own.
    let child = home.run(&[
        "token",
        "delegate",
        "--parent",
        &ctf_b,
        "--agent",
        "helper",
        "--label",
        "role=scout",
    ]);
    let child = child.assert_ok().json()["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        labels_of(&child),
        [
            ("role".to_string(), "scout".to_string()),
            ("task".to_string(), "ctf-17".to_string())
        ]
    );
    for token in [&ctf_a, &ctf_b, &other_task, &unlabeled, &child] {
        assert_eq!(noncritical(&home, token).0, 0);
    }
    home.engage("label:task=ctf-17", "emergency");
    for token in [&ctf_a, &ctf_b, &child] {
        let (code, receipt) = noncritical(&home, token);
        assert_eq!(
            (code, receipt["code"].as_str()),
            (4, Some("stale_control_epoch")),
            "{receipt}"
        );
        let verify = home.run(&["token", "verify", token]);
        assert_eq!(
            verify.json()["code"],
            "stale_control_epoch",
            "{}",
            verify.stdout
        );
    }
    for token in [&other_task, &unlabeled] {
        let (code, receipt) = noncritical(&home, token);
        assert_eq!(code, 0, "{receipt}");
    }
    // A token minted after the stop carries the label: the latch still covers it.
    let fresh = home.token(&["--agent", "red-d", "--label", "task=ctf-17"]);
    let (code, receipt) = noncritical(&home, &fresh);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("break_glass_contained")),
        "{receipt}"
    );
    // A caller without a token cannot prove it lacks the label: the latch covers it.
    let (code, _) = home.check(&["--class", "noncritical", "--agent", "anyone"]);
    assert_eq!(code, 4);
    // Status names the scope.
    let status = home.status();
    let scopes: Vec<&str> = status["latches"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["scope"].as_str())
        .collect();
    assert_eq!(scopes, ["label:task=ctf-17"], "{status}");
    assert!(status["epoch"]["scopes"]["label:task=ctf-17"].as_u64() > Some(0));
    // A halt on a label holds; a disengage of that label lifts it.
    home.engage("label:kind=red-team", "halt-all");
    let disengaged = home.run(&[
        "disengage",
        "--scope",
        "label:kind=red-team",
        "--reason",
        "done",
        "--by",
        "operator",
    ]);
    disengaged.assert_ok();
}

#[test]
fn a_delegate_can_never_remove_or_change_a_label() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let parent = home.token(&["--agent", "red-a", "--label", "task=ctf-17"]);
    let changed = home.run(&[
        "token",
        "delegate",
        "--parent",
        &parent,
        "--agent",
        "helper",
        "--label",
        "task=ctf-18",
    ]);
    assert_eq!(changed.code_str(), "bad_request", "{}", changed.stdout);
    // Without --label the delegate still carries the parent's, and a grandchild too.
    let child = home.delegate(&parent, "helper");
    let grandchild = home.delegate(&child, "sub-helper");
    for token in [&child, &grandchild] {
        assert_eq!(
            labels_of(token),
            [("task".to_string(), "ctf-17".to_string())]
        );
    }
    home.engage("label:task=ctf-17", "halt-all");
    for token in [&parent, &child, &grandchild] {
        let (code, receipt) = noncritical(&home, token);
        assert_eq!(
            (code, receipt["code"].as_str()),
            (4, Some("break_glass_contained")),
            "{receipt}"
        );
    }
    // Malformed labels are refused before anything is minted or written.
    for bad in ["task", "task=", "=x", "Task=a b", "t=ä"] {
        let r = home.run(&["token", "issue", "--agent", "a", "--label", bad]);
        assert_eq!(r.code_str(), "scope_invalid", "{bad}: {}", r.stdout);
    }
    let r = home.run(&[
        "engage",
        "--scope",
        "label:task",
        "--reason",
        "x",
        "--by",
        "operator",
    ]);
    assert_eq!(r.code_str(), "scope_invalid", "{}", r.stdout);
}
