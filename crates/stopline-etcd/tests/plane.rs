//! The etcd backend against a real etcd member: one-transaction engage, the foundation's
//! fail-closed reads (malformed latch value, WAL key gap, broken `prev`, unconfirmed epoch,
//! corrupt state, a deleted stop), disengage, drain, recovery, repair, and the fallback to the
//! local directory when etcd cannot be reached.

mod cluster;

use cluster::{Cluster, Raw};
use stopline_core::{ControlView, Level, RefusalCode, Scope};
use stopline_etcd::{EtcdPlane, EtcdTarget};
use stopline_store::ops::Census;
use stopline_store::{ControlPlane, EngageRequest, Store};

struct Host {
    _dir: tempfile::TempDir,
    plane: EtcdPlane,
}

fn host(url: &str) -> Host {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("home"));
    // Each host's own control directory exists, as `stopline init` (or any writing command)
    // leaves it: a gate whose home is missing refuses control_home_missing (docs/reference.md §5).
    store.ensure_home().unwrap();
    let plane = EtcdPlane::new(EtcdTarget::parse(url).unwrap(), store).unwrap();
    Host { _dir: dir, plane }
}

fn request(scope: &str, level: Level, by: &str) -> EngageRequest {
    EngageRequest::console(Scope::parse_stored(scope).unwrap(), level, by, "test stop")
}

fn fault_codes(view: &ControlView) -> Vec<RefusalCode> {
    view.faults.iter().map(|f| f.code).collect()
}

#[test]
fn engage_commits_latch_wal_and_epoch_together_and_reads_back() {
    let etcd = Cluster::start(1);
    let url = etcd.url("/t1");
    let a = host(&url);
    let b = host(&url);
    let raw = Raw::new(&url);

    let stop = a
        .plane
        .engage(&request("agent:worker", Level::Emergency, "x"))
        .unwrap();
    assert!(stop.warnings.is_empty(), "{:?}", stop.warnings);
    assert_eq!((stop.epoch_seq, stop.scope_revision), (Some(1), Some(1)));
    let halt = a
        .plane
        .engage(&request("machine", Level::HaltAll, "y"))
        .unwrap();
    assert_eq!(halt.epoch_seq, Some(1), "halts do not advance epochs");
    let again = a
        .plane
        .engage(&request("machine", Level::HaltAll, "y"))
        .unwrap();
    assert!(again.coalesced && again.latch.id == halt.latch.id);

    // Another host sees exactly what was committed.
    let view = b.plane.load_view();
    assert!(view.faults.is_empty(), "{:?}", view.faults);
    assert_eq!(view.latches.len(), 2);
    assert_eq!(view.epoch.seq, 1);
    let wal: Vec<String> = raw
        .list("/t1/breakglass.wal/")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(
        wal.len(),
        3,
        "latch_engaged + epoch_advance, latch_engaged: {wal:?}"
    );
    assert!(wal[0].ends_with("/00000000000000000001"));

    // Disengage lifts exactly the halt; the emergency needs recovery.
    let lifted = b
        .plane
        .disengage(&Scope::Machine, "ok", "operator")
        .unwrap();
    assert_eq!(lifted.cleared, vec![halt.latch.file_name()]);
    let refused = b.plane.disengage(
        &Scope::parse_stored("agent:worker").unwrap(),
        "no",
        "operator",
    );
    assert_eq!(
        refused.unwrap_err().code(),
        RefusalCode::EmergencyRequiresRecovery
    );
}

#[test]
fn fail_closed_reads_match_the_local_directory() {
    let etcd = Cluster::start(1);
    let raw = Raw::new(&etcd.url("/unused"));
    let check = |prefix: &str, damage: &dyn Fn(&str), expect: &dyn Fn(&ControlView)| {
        let url = etcd.url(prefix);
        let h = host(&url);
        h.plane
            .engage(&request("agent:w", Level::Emergency, "a"))
            .unwrap();
        h.plane
            .engage(&request("run:r1", Level::HaltAll, "b"))
            .unwrap();
        damage(prefix);
        expect(&h.plane.load_view());
    };
    // A malformed latch value is a machine emergency.
    check(
        "/fc1",
        &|p| raw.put(&format!("{p}/latches/latch_junk.json"), b"{not json"),
        &|v| {
            let junk = v
                .latches
                .iter()
                .find(|l| l.file == "latch_junk.json")
                .unwrap();
            assert_eq!(
                (junk.scope.clone(), junk.level),
                (Scope::Machine, Level::Emergency)
            );
        },
    );
    // A WAL key gap.
    check(
        "/fc2",
        &|p| raw.delete(&format!("{p}/breakglass.wal/00000000000000000002")),
        &|v| {
            assert!(
                fault_codes(v).contains(&RefusalCode::ControlWalCorrupt),
                "{:?}",
                v.faults
            )
        },
    );
    // A broken prev link.
    check(
        "/fc3",
        &|p| {
            let key = format!("{p}/breakglass.wal/00000000000000000002");
            let (_, value) = raw.list(&key).remove(0);
            let mut record: serde_json::Value = serde_json::from_slice(&value).unwrap();
            record["prev"] = "f".repeat(64).into();
            raw.put(&key, record.to_string().as_bytes());
        },
        &|v| {
            assert!(
                fault_codes(v).contains(&RefusalCode::ControlWalCorrupt),
                "{:?}",
                v.faults
            )
        },
    );
    // The epoch not matching the WAL's last advance.
    check(
        "/fc4",
        &|p| {
            raw.put(
                &format!("{p}/epoch.json"),
                br#"{"seq":0,"scopes":{},"wal_seq":0}"#,
            )
        },
        &|v| {
            assert!(
                fault_codes(v).contains(&RefusalCode::ControlEpochUnconfirmed),
                "{:?}",
                v.faults
            )
        },
    );
    // A corrupt state.json.
    check(
        "/fc5",
        &|p| raw.put(&format!("{p}/state.json"), b"RUNNING?"),
        &|v| {
            assert!(
                fault_codes(v).contains(&RefusalCode::ControlStateCorrupt),
                "{:?}",
                v.faults
            )
        },
    );
    // A deleted stop: the WAL ledger still records it.
    check(
        "/fc6",
        &|p| {
            let (key, _) = raw.list(&format!("{p}/latches/")).remove(0);
            raw.delete(&key);
        },
        &|v| {
            assert!(v.latches.iter().any(|l| l.scope == Scope::Machine
                && l.level == Level::Emergency
                && l.problem.as_deref().is_some_and(|p| p.contains("missing"))));
        },
    );
}

#[test]
fn recovery_and_repair_through_etcd() {
    let etcd = Cluster::start(1);
    let url = etcd.url("/rec");
    let h = host(&url);
    let raw = Raw::new(&url);
    let stop = h
        .plane
        .engage(&request("machine", Level::Emergency, "m"))
        .unwrap();
    let census = Census::default();
    let drained = h.plane.drain(60, "finish queued work", "operator").unwrap();
    assert_eq!(drained.state.as_str(), "DRAINING");
    let plan = h
        .plane
        .recover_plan(&Scope::Machine, "all clear", "operator", &census)
        .unwrap();
    assert_eq!(plan.latches, vec![stop.latch.file_name()]);
    let applied = h.plane.recover_apply(&plan.plan, "operator").unwrap();
    assert!(applied.recovered, "{applied:?}");
    assert_eq!((applied.state.as_str(), applied.new_epoch), ("RUNNING", 2));
    let again = h.plane.recover_apply(&plan.plan, "operator");
    assert_eq!(again.unwrap_err().code(), RefusalCode::PlanUnknown);
    let cleared = raw.list("/rec/breakglass.cleared/epoch-2/");
    assert_eq!(cleared.len(), 1);
    let view = h.plane.load_view();
    assert!(
        view.latches.is_empty() && view.faults.is_empty(),
        "{view:?}"
    );

    // An epoch snapshot knocked back is unconfirmed until the owner's repair rebuilds it.
    raw.put(
        "/rec/epoch.json",
        br#"{"seq":1,"scopes":{"machine":1},"wal_seq":2}"#,
    );
    assert!(fault_codes(&h.plane.load_view()).contains(&RefusalCode::ControlEpochUnconfirmed));
    let refused = h.plane.repair("rebuild", "operator", 7).unwrap_err();
    assert_eq!(refused.code(), RefusalCode::RepairRefused);
    let repaired = h.plane.repair("rebuild", "operator", 2).unwrap();
    assert!(
        repaired.epoch_rebuilt && repaired.epoch_seq == 2,
        "{repaired:?}"
    );
    assert_eq!(repaired.evidence.len(), 1);
    assert!(h.plane.load_view().faults.is_empty());
}

#[test]
fn unreachable_etcd_closes_the_gate_and_engage_contains_this_host_locally() {
    let mut etcd = Cluster::start(1);
    let url = etcd.url("/down");
    let h = host(&url);
    h.plane
        .engage(&request("agent:a", Level::HaltAll, "warmup"))
        .unwrap();
    etcd.kill(0);
    let view = h.plane.load_view();
    assert!(
        fault_codes(&view).contains(&RefusalCode::DistributedUnavailable),
        "{view:?}"
    );
    let started = std::time::Instant::now();
    let stop = h
        .plane
        .engage(&request("machine", Level::Emergency, "m"))
        .unwrap();
    assert!(
        stop.warnings[0].starts_with("distributed_publish_failed"),
        "{:?}",
        stop.warnings
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    let local = h.plane.local().load_view();
    assert!(local
        .latches
        .iter()
        .any(|l| l.file == stop.latch.file_name()));
    // Back up: the merged view holds both the etcd latch and the local fallback latch.
    etcd.restart(0);
    let view = h.plane.load_view();
    assert!(view.faults.is_empty(), "{:?}", view.faults);
    assert_eq!(view.latches.len(), 2, "{:?}", view.latches);
}
