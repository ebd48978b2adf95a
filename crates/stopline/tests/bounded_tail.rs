//! The bounded tail of authority (docs/reference.md §5, "Bounded tail"), through the real
//! binary: no token lives longer than `[tokens] max_ttl_s` (`ttl_too_long`, delegated ones
//! included), and `epoch.json` keeps only the revisions a live token could predate, however many
//! emergencies came before.
//!
//! The week is simulated with the store's test clock (`STOPLINE_TEST_CLOCK_OFFSET_MS`), so these
//! tests need a build with `--features stopline/failpoints`: without it every engage lands at
//! the same real second, nothing folds, and the bound assertion fails rather than skips.

#![allow(clippy::disallowed_methods)] // a test writes its own config.toml

mod util;

use serde_json::Value;
use util::{Home, CLOCK_OFFSET};

const DAY_S: i64 = 86_400;
/// `stopline_core::epoch::FOLD_MARGIN_S`.
const MARGIN_S: i64 = 3_600;

fn at(home: &Home, offset_s: i64, args: &[&str]) -> util::Run {
    let offset = (offset_s * 1000).to_string();
    home.run_env(args, &[(CLOCK_OFFSET, offset.as_str())])
}

fn epoch_json(home: &Home) -> Value {
    serde_json::from_slice(&std::fs::read(home.file("epoch.json")).unwrap()).unwrap()
}

#[test]
fn a_token_may_not_outlive_max_ttl_s_nor_may_its_delegates() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    // The default cap is one day.
    let long = home.run(&["token", "issue", "--agent", "a", "--ttl", "86401"]);
    assert_eq!((long.code, long.code_str()), (1, "ttl_too_long".into()));
    home.run(&["token", "issue", "--agent", "a", "--ttl", "86400"])
        .assert_ok();
    // A configured cap holds for issue and for delegation, whatever the parent's lifetime.
    std::fs::write(home.file("config.toml"), "[tokens]\nmax_ttl_s = 60\n").unwrap();
    let long = home.run(&["token", "issue", "--agent", "a", "--ttl", "61"]);
    assert_eq!(long.code_str(), "ttl_too_long", "{}", long.stdout);
    let parent = home.run(&["token", "issue", "--agent", "a", "--ttl", "60"]);
    let parent = parent.assert_ok().json()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let child = home.run(&[
        "token", "delegate", "--parent", &parent, "--agent", "b", "--ttl", "61",
    ]);
    assert_eq!(child.code_str(), "ttl_too_long", "{}", child.stdout);
    let child = home.run(&["token", "delegate", "--parent", &parent, "--agent", "b"]);
    let exp = child.assert_ok().json()["exp"].as_i64().unwrap();
    let parent_exp = stopline_token::decode_unverified(&parent).unwrap().exp;
    assert!(exp <= parent_exp, "{exp} > {parent_exp}");
    // Zero is no cap: it is refused as a config.
    std::fs::write(home.file("config.toml"), "[tokens]\nmax_ttl_s = 0\n").unwrap();
    let zero = home.run(&["token", "issue", "--agent", "a", "--ttl", "1"]);
    assert_eq!(zero.code_str(), "config_invalid", "{}", zero.stdout);
}

#[test]
fn epoch_json_stays_bounded_over_a_week_of_emergencies() {
    let home = Home::new();
    home.run(&["init"]).assert_ok();
    let emergencies: i64 = 1000;
    let week = 7 * DAY_S;
    let step = week / emergencies;
    // The most revisions a window of max_ttl_s plus the margin can hold, the newest included.
    let bound = ((DAY_S + MARGIN_S) / step + 1) as usize;
    let mut most = 0;
    let mut bystander = None;
    let mut revoked = None;
    for i in 0..emergencies {
        let offset = i * step;
        if i == emergencies - 20 {
            // A token nothing revokes, minted late in the week: the folds after it leave it be.
            let minted = at(
                &home,
                offset,
                &["token", "issue", "--agent", "bystander", "--ttl", "86400"],
            );
            bystander = Some(
                minted.assert_ok().json()["token"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        if i == emergencies - 1 {
            // A token the last emergency revokes, minted a moment before it.
            let minted = at(
                &home,
                offset,
                &[
                    "token",
                    "issue",
                    "--agent",
                    &format!("worker-{i}"),
                    "--ttl",
                    "86400",
                ],
            );
            revoked = Some(
                minted.assert_ok().json()["token"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            );
        }
        let scope = format!("agent:worker-{i}");
        let engaged = at(
            &home,
            offset,
            &["engage", "--scope", &scope, "--reason", "a week of drills"],
        );
        engaged.assert_ok();
        let epoch = epoch_json(&home);
        let scopes = epoch["scopes"].as_object().unwrap().len();
        most = most.max(scopes);
        assert!(
            scopes <= bound,
            "after {i} emergencies epoch.json holds {scopes} scopes (bound {bound})"
        );
    }
    let epoch = epoch_json(&home);
    assert_eq!(epoch["seq"], emergencies);
    // Folded: the first emergencies are gone, the floor stands above them, and the last day's
    // are all there.
    assert!(epoch["scopes"].get("agent:worker-0").is_none(), "{epoch}");
    let floor = epoch["floor"].as_u64().unwrap();
    assert!(floor as i64 >= emergencies - bound as i64 - 1, "{epoch}");
    for i in (emergencies - (DAY_S / step))..emergencies {
        assert!(
            epoch["scopes"].get(format!("agent:worker-{i}")).is_some(),
            "worker-{i} of the last day was folded: {epoch}"
        );
    }
    assert!(
        most >= bound - 2,
        "the window was never full: {most} of {bound}"
    );
    // The WAL agrees: it verifies, and the snapshot is confirmed against it.
    let status = at(&home, week, &["status"]);
    assert!(
        status.json()["faults"]
            .as_array()
            .is_none_or(|f| f.is_empty()),
        "{}",
        status.stdout
    );
    let verify = at(
        &home,
        week,
        &["token", "verify", bystander.as_deref().unwrap()],
    );
    assert_eq!(verify.json()["valid"], true, "{}", verify.stdout);
    // The last emergency still revokes what it covers after every fold.
    let verify = at(
        &home,
        week,
        &["token", "verify", revoked.as_deref().unwrap()],
    );
    assert_eq!(
        verify.json()["code"],
        "stale_control_epoch",
        "{}",
        verify.stdout
    );
}
