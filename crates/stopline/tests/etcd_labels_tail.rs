//! Labels and the bounded tail in etcd mode (docs/reference.md §1 Label, §5 "Bounded tail",
//! §10): a `label:` emergency engaged on one host revokes every token carrying the label that
//! another host checks, and the plane's `epoch.json` folds away revisions past `max_ttl_s` plus
//! the margin as the local directory does; a token revoked on one host is refused on another.
//! The simulated days need a build with
//! `--features stopline/failpoints` (the store's test clock); without it nothing folds and the
//! test fails rather than skips.

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use etcd_support::Host;
use util::CLOCK_OFFSET;

#[test]
fn a_label_stop_and_the_fold_hold_across_hosts() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/labels");
    let a = Host::new(&url, "");
    let b = Host::new(&url, "");
    let carrier = a.token("red-a", &["--label", "task=ctf-17", "--run", "eval-1"]);
    let other = a.token("red-b", &["--label", "task=ctf-18"]);
    let check = |host: &Host, token: &str| {
        let run = host.run(&["check", "--class", "noncritical", "--token", token]);
        (
            run.code,
            run.json()["code"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(check(&b, &carrier).0, 0);
    a.engage("label:task=ctf-17", "emergency");
    assert_eq!(check(&b, &carrier), (4, "stale_control_epoch".into()));
    assert_eq!(check(&b, &other).0, 0);

    // Two days later another emergency: the label's revision folds out of the plane's epoch
    // and the floor takes it, in one transaction with the WAL record, read back without fault.
    let later = (2 * 86_400 * 1000_i64).to_string();
    let run = b.home.run_env(
        &[
            "--control",
            &url,
            "engage",
            "--scope",
            "agent:someone",
            "--reason",
            "two days later",
            "--by",
            "tester",
        ],
        &[(CLOCK_OFFSET, later.as_str())],
    );
    run.assert_ok();
    let status = b.home.run_env(
        &["--control", &url, "status"],
        &[(CLOCK_OFFSET, later.as_str())],
    );
    let epoch = &status.json()["epoch"];
    assert!(
        epoch["scopes"].get("label:task=ctf-17").is_none(),
        "{epoch}"
    );
    assert_eq!(epoch["scopes"]["agent:someone"], 2, "{epoch}");
    assert_eq!(epoch["floor"], 1, "{epoch}");
    assert_eq!(
        status.json()["faults"],
        serde_json::json!([]),
        "{}",
        status.stdout
    );
}

/// Revoking one token in etcd mode (docs/reference.md §5 "Revoking one token", §10): revoked on
/// the host that minted it, the token is refused by a check on another host; its agent's other
/// token and, without `--with-delegates`, its delegate keep working there; with it, the
/// delegate is refused too.
#[test]
fn a_token_revoked_on_one_host_is_refused_on_another() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/revoke");
    let a = Host::new(&url, "");
    let b = Host::new(&url, "");
    let leaked = a.token("worker", &[]);
    let sibling = a.token("worker", &[]);
    let child = a.run(&[
        "token", "delegate", "--parent", &leaked, "--agent", "helper",
    ]);
    let child = child.assert_ok().json()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let check = |token: &str| {
        let run = b.run(&["check", "--class", "noncritical", "--token", token]);
        (
            run.code,
            run.json()["code"].as_str().unwrap_or_default().to_string(),
        )
    };
    let jti = |token: &str| stopline_token::decode_unverified(token).unwrap().jti;
    let revoke = |id: &str, extra: &[&str]| {
        let mut args = vec![
            "token", "revoke", id, "--reason", "leaked", "--by", "operator",
        ];
        args.extend_from_slice(extra);
        a.run(&args).assert_ok().json()
    };
    for token in [&leaked, &sibling, &child] {
        assert_eq!(check(token).0, 0);
    }
    let receipt = revoke(&jti(&leaked), &[]);
    assert_eq!(receipt["revoked"], true, "{receipt}");
    assert_eq!(check(&leaked), (4, "stale_control_epoch".into()));
    assert_eq!(check(&sibling).0, 0);
    assert_eq!(
        check(&child).0,
        0,
        "without --with-delegates the delegate lives"
    );
    revoke(&jti(&leaked), &["--with-delegates"]);
    assert_eq!(check(&child), (4, "stale_control_epoch".into()));
    assert_eq!(check(&sibling).0, 0);
}

/// `token revoke` in etcd mode waits for this host's live gateway as the local directory's
/// does (docs/reference.md §9, "Acknowledgements"): that gateway acknowledges and refuses the
/// token from the call right after; a gateway of another host, which is not asked, is named
/// unacknowledged with a warning saying why, never counted as acknowledged.
#[test]
fn a_revoke_waits_for_this_hosts_gateway_and_names_another_hosts() {
    let etcd = cluster::Cluster::start(1);
    let url = etcd.url("/revoke-acks");
    let a = Host::new(&url, "");
    let b = Host::new(&url, "");
    let token = a.token("worker", &[]);
    let here = a.serve();
    let there = b.serve();
    assert_eq!(here.check(&token).0, "allow");
    let jti = stopline_token::decode_unverified(&token).unwrap().jti;
    let receipt = a
        .run(&[
            "token", "revoke", &jti, "--reason", "leaked", "--by", "operator",
        ])
        .assert_ok()
        .json();
    assert_eq!(
        receipt["acknowledged_by"],
        serde_json::json!([here.id()]),
        "{receipt}"
    );
    assert_eq!(
        receipt["unacknowledged"],
        serde_json::json!([there.id()]),
        "{receipt}"
    );
    let warnings: Vec<&str> = receipt["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.starts_with("gateways of other hosts"))
            && warnings
                .iter()
                .any(|w| w.starts_with("gateways_unacknowledged: ")),
        "{receipt}"
    );
    assert_eq!(
        here.check(&token),
        ("block".into(), "stale_control_epoch".into())
    );
}
