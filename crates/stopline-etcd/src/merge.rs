//! The merged view: what a host in etcd mode enforces is the etcd view *and* its own local view.
//!
//! An engage that could not reach etcd wrote only a local latch, so a host must honour its local
//! control directory as well: latches and faults are the union of both sides (a fault on either
//! side closes every gate), the machine state is the etcd one unless that is RUNNING (then the
//! local one), and the epoch map takes, for the global sequence and for each scope, the larger
//! of the two — so an authority revoked on either side stays revoked.
//!
//! Known limit: a local fallback advance numbers its revision from the local sequence, which is
//! usually behind etcd's, so it revokes nothing by epoch on its own; the latch it wrote still
//! blocks every covered call, and the recovery that ends it advances the scope in etcd.
//! For the same reason the merged epoch floor is etcd's alone: a local floor counts in the local
//! sequence, and taken as the fleet's it would refuse every token etcd's epochs minted.

use stopline_core::{ControlState, ControlView};

/// Merge the etcd view with this host's local view.
pub fn merge(etcd: ControlView, local: ControlView) -> ControlView {
    let mut merged = etcd;
    for latch in local.latches {
        if !merged.latches.iter().any(|l| l.file == latch.file) {
            merged.latches.push(latch);
        }
    }
    merged.faults.extend(local.faults);
    // The merged map is indexed again: the index is a function of the map it reads.
    let mut epoch = merged.epoch.into_map();
    let local_epoch = local.epoch.into_map();
    epoch.seq = epoch.seq.max(local_epoch.seq);
    for (scope, revision) in local_epoch.scopes {
        let entry = epoch.scopes.entry(scope).or_insert(0);
        *entry = (*entry).max(revision);
    }
    merged.epoch = epoch.indexed();
    if merged.state.state == ControlState::Running {
        merged.state = local.state;
    }
    merged.blocked_targets.extend(local.blocked_targets);
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use stopline_core::{ActiveLatch, EpochMap, Level, Refusal, RefusalCode, Scope, StateRecord};

    fn latch(file: &str) -> ActiveLatch {
        ActiveLatch {
            file: file.into(),
            scope: Scope::Machine,
            level: Level::HaltAll,
            record: None,
            problem: None,
        }
    }

    #[test]
    fn union_of_latches_and_faults_and_the_stricter_epoch() {
        let mut etcd = ControlView::empty();
        etcd.latches.push(latch("a.json"));
        let mut etcd_epoch = EpochMap {
            seq: 5,
            ..EpochMap::default()
        };
        etcd_epoch.scopes.insert("agent:x".into(), 5);
        etcd.epoch = etcd_epoch.indexed();
        let mut local = ControlView::empty();
        local.latches.push(latch("a.json"));
        local.latches.push(latch("b.json"));
        let mut local_epoch = EpochMap {
            seq: 2,
            ..EpochMap::default()
        };
        local_epoch.scopes.insert("machine".into(), 2);
        local.epoch = local_epoch.indexed();
        local
            .faults
            .push(Refusal::new(RefusalCode::ControlWalCorrupt, "x"));
        let m = merge(etcd, local);
        let files: Vec<&str> = m.latches.iter().map(|l| l.file.as_str()).collect();
        assert_eq!(files, ["a.json", "b.json"]);
        assert_eq!(m.faults.len(), 1);
        assert_eq!(m.epoch.seq, 5);
        assert_eq!(m.epoch.scopes["machine"], 2);
        assert_eq!(m.epoch.scopes["agent:x"], 5);
        assert!(m.epoch.is_consistent());
    }

    #[test]
    fn a_declared_state_on_either_side_stands() {
        let mut frozen = StateRecord::running();
        frozen.state = ControlState::FrozenSafe;
        let mut local = ControlView::empty();
        local.state = frozen.clone();
        assert_eq!(merge(ControlView::empty(), local).state, frozen);
        let mut etcd = ControlView::empty();
        etcd.state = frozen.clone();
        assert_eq!(merge(etcd, ControlView::empty()).state, frozen);
    }
}
