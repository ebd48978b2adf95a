//! Stop wins every race, through etcd: `engage` on one host and `recover apply` on another,
//! started together, many times. Every round ends with the racing stop alive; a recovery that
//! saw it reports `recovered: false` and FROZEN_SAFE, and one that reports `recovered: true`
//! never names it among what it cleared.

mod cluster;

use std::sync::{Arc, Barrier};
use std::time::Duration;
use stopline_core::latch::LatchSession;
use stopline_core::{ControlState, Level, Scope};
use stopline_etcd::{EtcdPlane, EtcdTarget};
use stopline_store::ops::Census;
use stopline_store::{ControlPlane, EngageRequest, Store};

fn plane(url: &str, dir: &tempfile::TempDir, name: &str) -> EtcdPlane {
    let store = Store::open(dir.path().join(name));
    // The host's own control directory exists, as `stopline init` leaves it (docs/reference.md §5).
    store.ensure_home().unwrap();
    EtcdPlane::new(EtcdTarget::parse(url).unwrap(), store).unwrap()
}

fn request(level: Level, by: &str) -> EngageRequest {
    EngageRequest {
        scope: Scope::Machine,
        level,
        by: by.into(),
        reason: "race".into(),
        session: LatchSession {
            bound: None,
            root: None,
            tier: "monitor".into(),
        },
    }
}

#[test]
fn engage_racing_recover_apply_never_yields_a_false_all_clear() {
    let etcd = cluster::Cluster::start(1);
    let (mut frozen, mut recovered) = (0, 0);
    for round in 0..16u64 {
        let dir = tempfile::tempdir().unwrap();
        let url = etcd.url(&format!("/race{round}"));
        let owner = plane(&url, &dir, "owner");
        let monitor = plane(&url, &dir, "monitor");
        owner.engage(&request(Level::Emergency, "first")).unwrap();
        let plan = owner
            .recover_plan(&Scope::Machine, "race", "operator", &Census::default())
            .unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let apply = {
            let (owner, barrier, plan) = (owner.clone(), barrier.clone(), plan.plan.clone());
            std::thread::spawn(move || {
                barrier.wait();
                if round % 2 == 1 {
                    std::thread::sleep(Duration::from_micros(700 * (round % 5)));
                }
                owner.recover_apply(&plan, "operator").unwrap()
            })
        };
        let engage = {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                if round % 2 == 0 {
                    std::thread::sleep(Duration::from_micros(400 * (round % 6)));
                }
                monitor
                    .engage(&request(Level::HaltAll, "monitor-race"))
                    .unwrap()
            })
        };
        let receipt = apply.join().unwrap();
        let racing = engage.join().unwrap().latch.file_name();
        let view = owner.load_view();
        assert!(view.faults.is_empty(), "round {round}: {:?}", view.faults);
        assert!(
            view.latches.iter().any(|l| l.file == racing),
            "round {round}: the racing stop was lost: {receipt:?}"
        );
        assert!(
            !receipt.cleared.contains(&racing),
            "round {round}: cleared an unplanned latch"
        );
        if receipt.recovered {
            recovered += 1;
            assert!(receipt.surviving.is_empty());
        } else {
            frozen += 1;
            assert_eq!(receipt.state, "FROZEN_SAFE");
            assert!(receipt.surviving.contains(&racing), "{receipt:?}");
            assert_eq!(view.state.state, ControlState::FrozenSafe);
        }
    }
    eprintln!(
        "races: {frozen} ended FROZEN_SAFE, {recovered} recovered before the racing stop landed"
    );
}
