//! The foundation's fail-closed reads, against the etcd backend through the real binary: a
//! malformed latch value is a machine emergency; a WAL key gap or a broken `prev` is
//! `control_wal_corrupt`; an epoch that does not match the WAL's last advance is
//! `control_epoch_unconfirmed`; an unreachable etcd closes the gate (`distributed_unavailable`).
//! Each `check` answers `block` (exit 4). Recovery through etcd takes the same owner console:
//! refused without a terminal, accepted on one, and then the gate reopens.

#[path = "../../stopline-etcd/tests/cluster/mod.rs"]
mod cluster;
mod etcd_support;
mod gw;
mod util;

use cluster::Raw;
use etcd_support::Host;

fn probe(host: &Host) -> (i32, serde_json::Value) {
    let run = host.run(&["check", "--class", "noncritical", "--agent", "probe"]);
    (run.code, run.json())
}

/// A host on a fresh prefix with one emergency and one halt engaged, damaged by `damage`.
fn check(etcd: &cluster::Cluster, prefix: &str, damage: impl Fn(&Raw, &str), expect: &str) {
    let host = Host::new(&etcd.url(prefix), "");
    host.engage("run:r9", "emergency");
    host.engage("run:r1", "halt-all");
    assert_eq!(
        probe(&host).0,
        0,
        "{prefix}: undamaged, an unrelated agent is allowed"
    );
    damage(&Raw::new(&etcd.url(prefix)), prefix);
    let (code, receipt) = probe(&host);
    assert_eq!(code, 4, "{prefix}: {receipt}");
    assert_eq!(receipt["decision"], "block");
    assert_eq!(receipt["code"], expect, "{prefix}: {receipt}");
}

#[test]
fn damaged_control_records_in_etcd_close_the_gate() {
    let mut etcd = cluster::Cluster::start(1);
    check(
        &etcd,
        "/malformed",
        |raw, p| raw.put(&format!("{p}/latches/latch_x.json"), b"{\"level\":\"stop\""),
        "break_glass_contained",
    );
    check(
        &etcd,
        "/gap",
        |raw, p| raw.delete(&format!("{p}/breakglass.wal/00000000000000000002")),
        "control_wal_corrupt",
    );
    check(
        &etcd,
        "/link",
        |raw, p| {
            let key = format!("{p}/breakglass.wal/00000000000000000001");
            let (_, value) = raw.list(&key).remove(0);
            let mut record: serde_json::Value = serde_json::from_slice(&value).unwrap();
            record["reason"] = "rewritten history".into();
            raw.put(&key, record.to_string().as_bytes());
        },
        "control_wal_corrupt",
    );
    check(
        &etcd,
        "/epoch",
        |raw, p| {
            raw.put(
                &format!("{p}/epoch.json"),
                br#"{"seq":0,"scopes":{},"wal_seq":0}"#,
            )
        },
        "control_epoch_unconfirmed",
    );
    let host = Host::new(&etcd.url("/gone"), "");
    assert_eq!(probe(&host).0, 0);
    etcd.kill(0);
    let (code, receipt) = probe(&host);
    assert_eq!(
        (code, receipt["code"].as_str()),
        (4, Some("distributed_unavailable"))
    );
}

#[test]
fn recovery_through_etcd_takes_the_same_owner_console() {
    let etcd = cluster::Cluster::start(1);
    let host = Host::new(&etcd.url("/owner"), "");
    host.engage("machine", "emergency");
    assert_eq!(probe(&host).0, 4);
    let plan_args = [
        "--control",
        &host.url,
        "recover",
        "plan",
        "--scope",
        "machine",
        "--reason",
        "all clear",
        "--by",
        "operator",
    ];
    let refused = host.home.run(&plan_args);
    assert_eq!(
        refused.code_str(),
        "owner_control_required",
        "{}",
        refused.stderr
    );
    let plan = host.home.run_on_pty(&plan_args, &[]);
    plan.assert_ok();
    let plan_id = plan.json()["plan"].as_str().unwrap().to_string();
    let apply = host.home.run_on_pty(
        &[
            "--control",
            &host.url,
            "recover",
            "apply",
            "--plan",
            &plan_id,
            "--by",
            "operator",
        ],
        &[],
    );
    apply.assert_ok();
    let receipt = apply.json();
    assert_eq!(receipt["recovered"], true, "{receipt}");
    assert_eq!(receipt["state"], "RUNNING");
    assert_eq!(probe(&host).0, 0, "the gate reopens after the recovery");
}
