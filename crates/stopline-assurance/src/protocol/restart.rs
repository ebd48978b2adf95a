//! Crashes and the restart that follows: what a gate sees once the machine is back.
//!
//! A crash stops every process at once; whatever it had not done, it never does (in the
//! threaded replay its further calls fail with an I/O error and are discarded). Five images of
//! the disk are taken at every step of every explored schedule: a power cut (durable state
//! only), a process kill (everything written survives; locks and handles vanish), two torn
//! writes (a power cut after which a file's unsynced tail was half written back, or written
//! back up to its first newline), and a power cut after which the operation journals'
//! snapshots, renamed without fsync, reached the disk with their bytes while the journals'
//! unsynced tails did not (a snapshot ahead of its journal). The restart then runs the real
//! store code alone: `load_view`; where it reports `control_epoch_unconfirmed` or
//! `control_wal_corrupt`, the owner's `Store::repair`; `load_view` again; and the gate's
//! decision for the e0 token.

use crate::protocol::fs_image::{Private, View};
use crate::protocol::fs_state::FsState;
use crate::protocol::model_fs::ModelFs;
use crate::protocol::op::Blob;
use crate::protocol::process::ProcSpec;
use crate::protocol::properties::{
    DrillsSeen, EvidenceSeen, Observation, OpSeen, SpendSeen, SPEND_PROBE,
};
use crate::protocol::scenario::{Scenario, HOME, SOLO};
use crate::protocol::solo::{ModelEnv, Solo};
use std::sync::Arc;
use stopline_core::view::Authority;
use stopline_core::{ControlView, Name, RefusalCode, Subject, TaskClass};
use stopline_store::{OwnerPlane, Store};

/// How the machine went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crash {
    /// Power cut: only what was fsynced (and whose directory entry was fsynced) survives.
    PowerCut,
    /// Every process killed: all writes survive in the page cache.
    Kill,
    /// Power cut after half of each unsynced appended tail reached the disk.
    TornHalf,
    /// Power cut after each unsynced tail reached the disk up to its first newline.
    TornLine,
    /// Power cut after the renames of the operation journals' open-set snapshots
    /// (`ops/*.open.json`, written without fsync) reached the disk with their bytes, while
    /// every file's unsynced tail — a journal's included — did not: a snapshot newer than its
    /// journal's durable end.
    SnapshotAhead,
}

/// The names [`Crash::SnapshotAhead`] keeps ahead of their directory's fsync.
fn snapshot_ahead(name: &str) -> bool {
    name.ends_with(stopline_store::ops_snapshot::SNAPSHOT_SUFFIX)
}

impl Crash {
    /// All five.
    pub const ALL: [Crash; 5] = [
        Crash::PowerCut,
        Crash::Kill,
        Crash::TornHalf,
        Crash::TornLine,
        Crash::SnapshotAhead,
    ];

    /// For traces.
    pub fn name(self) -> &'static str {
        match self {
            Crash::PowerCut => "power cut",
            Crash::Kill => "all processes killed",
            Crash::TornHalf => "power cut, unsynced tails half written",
            Crash::TornLine => "power cut, unsynced tails written to their first newline",
            Crash::SnapshotAhead => {
                "power cut, journal snapshots renamed ahead of the journals' unsynced tails"
            }
        }
    }

    /// How many bytes of an unsynced tail this crash writes back (`None`: none).
    fn cut(self) -> fn(&Blob, &Blob) -> Option<usize> {
        fn tail<'a>(live: &'a Blob, durable: &Blob) -> Option<&'a [u8]> {
            let (l, d) = (live.bytes(), durable.bytes());
            (l.len() > d.len() && l.starts_with(d)).then(|| &l[d.len()..])
        }
        match self {
            Crash::PowerCut | Crash::Kill | Crash::SnapshotAhead => |_, _| None,
            Crash::TornHalf => |l, d| tail(l, d).map(|t| t.len() / 2).filter(|&k| k > 0),
            Crash::TornLine => |l, d| tail(l, d)?.iter().position(|&b| b == b'\n').map(|i| i + 1),
        }
    }

    /// The digests of the disks every crash leaves of `fs` (in [`Crash::ALL`] order), private
    /// names left out.
    pub fn digests(fs: &FsState, private: &Private) -> [u128; 5] {
        let (power, half, line) = (
            Crash::PowerCut.cut(),
            Crash::TornHalf.cut(),
            Crash::TornLine.cut(),
        );
        let cuts = [View::Cut(&power), View::Cut(&half), View::Cut(&line)];
        let cut = fs.digests(&cuts, Some(private));
        let kill = fs.digest(View::Live, Some(private));
        // The snapshot image, when it differs from the power cut's, is keyed by its own disk
        // (every file of it as durable as it is live).
        let ahead = fs
            .power_cut_ahead(&snapshot_ahead)
            .map_or(cut[0], |image| image.digest(View::Live, Some(private)));
        [cut[0], kill, cut[1], cut[2], ahead]
    }

    /// The disk image this crash leaves of `fs`.
    pub fn image(self, fs: &FsState) -> FsState {
        if self == Crash::Kill {
            let mut image = fs.clone();
            image.drop_processes();
            return image;
        }
        if self == Crash::SnapshotAhead {
            if let Some(image) = fs.power_cut_ahead(&snapshot_ahead) {
                return image;
            }
        }
        let cut = self.cut();
        fs.power_cut(&|live, durable| match cut(live, durable) {
            Some(keep) => Blob::new(live.bytes()[..durable.bytes().len() + keep].to_vec()),
            None => durable.clone(),
        })
    }
}

/// What the restart saw, and what it did.
#[derive(Debug, Clone)]
pub struct Restarted {
    /// The gate's view after the restart (and repair).
    pub seen: Observation,
    /// A line for traces.
    pub summary: String,
    /// True when a fault still closed every gate after the restart.
    pub closed: bool,
}

/// The bug planted in every store of a search, the restart's included (none without the
/// `planted-bugs` feature): the scenario's.
pub type Planted = crate::protocol::scenario::Planted;

/// Run the restart phase (with `repair`) or just look (without) at `image`.
pub fn observe(scenario: &Scenario, image: FsState, repair: bool, planted: Planted) -> Restarted {
    let solo = Solo::new(SOLO, image);
    let now_ms = scenario.now_ms + 1000;
    let env = Arc::new(ModelEnv::new(0xf, now_ms));
    let store = Store::with_io(HOME, Arc::new(ModelFs::new(solo.clone())), env)
        .with_wal_checkpoint_every(crate::protocol::scenario::MODEL_CHECKPOINT_EVERY)
        .with_evidence_segment_records(crate::protocol::scenario::MODEL_EVIDENCE_SEGMENT_RECORDS)
        .with_spend_compact_after(crate::protocol::scenario::MODEL_SPEND_COMPACT_AFTER);
    #[cfg(feature = "planted-bugs")]
    let store = store.with_planted_bug(planted);
    #[cfg(not(feature = "planted-bugs"))]
    let crate::protocol::scenario::Planted = planted;
    let mut view = store.load_view();
    let codes = |v: &stopline_core::ControlView| -> Vec<String> {
        v.faults.iter().map(|f| f.code.to_string()).collect()
    };
    let mut summary = format!("load_view faults {:?}", codes(&view));
    let needs_repair = view.faults.iter().any(|f| {
        matches!(
            f.code,
            RefusalCode::ControlEpochUnconfirmed | RefusalCode::ControlWalCorrupt
        )
    });
    if repair && needs_repair {
        let issued = store.keys().highest_issued_epoch().unwrap_or(0);
        match store.repair("model check restart", "operator", issued) {
            Ok(r) => summary.push_str(&format!(
                "; repair: truncated {} bytes, epoch rebuilt {} (seq {})",
                r.wal_truncated_bytes, r.epoch_rebuilt, r.epoch_seq
            )),
            Err(e) => summary.push_str(&format!("; repair refused: {e}")),
        }
        view = store.load_view();
        summary.push_str(&format!("; load_view faults {:?}", codes(&view)));
    }
    let authority = Some(Authority {
        issue_epoch: scenario.e0,
    });
    let receipt = view.decide(
        &scenario.subject,
        TaskClass::Noncritical,
        authority,
        None,
        now_ms,
    );
    let epoch_fault = view.faults.iter().any(|f| {
        matches!(
            f.code,
            RefusalCode::ControlEpochUnconfirmed
                | RefusalCode::ControlWalCorrupt
                | RefusalCode::ControlIo
        )
    });
    let disk = solo.state();
    let files = disk.live_names(&store.layout().latches());
    let cleared_root = store.layout().cleared();
    let cleared: Vec<String> = disk
        .live_names(&cleared_root)
        .into_iter()
        .flat_map(|dir| {
            let names = disk.live_names(&cleared_root.join(&dir));
            names.into_iter().map(move |n| format!("{dir}/{n}"))
        })
        .collect();
    summary.push_str(&format!(
        "; latches/ {files:?}; epoch {}; gate {:?} ({:?})",
        if epoch_fault {
            "untrusted".to_string()
        } else {
            view.epoch.seq.to_string()
        },
        receipt.decision,
        receipt.code
    ));
    let ops = operations_seen(scenario, &store, &view);
    summary.push_str(&format!("; operations {ops:?}"));
    let files_evidence = scenario.procs.iter().any(|p| {
        matches!(
            p,
            ProcSpec::AppendEvidence { .. } | ProcSpec::AppendDrill { .. }
        )
    });
    let reads_drills = scenario
        .procs
        .iter()
        .any(|p| matches!(p, ProcSpec::AppendDrill { .. } | ProcSpec::DrillGate));
    let mut drills = reads_drills.then(|| vec![drills_seen(scenario, &store, "after the crash")]);
    let evidence = files_evidence.then(|| evidence_seen(&store));
    if let Some(seen) = &evidence {
        summary.push_str(&format!("; evidence after one more append {seen:?}"));
    }
    if let Some(drills) = &mut drills {
        drills.push(drills_seen(scenario, &store, "after one more append"));
        summary.push_str(&format!("; drills {drills:?}"));
    }
    let reserves = scenario
        .procs
        .iter()
        .any(|p| matches!(p, ProcSpec::ReserveSpend { .. } | ProcSpec::CompactSpend));
    let spend = reserves.then(|| spend_seen(&store));
    if let Some(seen) = &spend {
        summary.push_str(&format!(
            "; spending, then after one more reservation {seen:?}"
        ));
    }
    let supervises = scenario
        .procs
        .iter()
        .any(|p| matches!(p, ProcSpec::Supervise { .. }));
    let reach = supervises.then(|| crate::protocol::process::reached(&store));
    if let Some(reach) = &reach {
        summary.push_str(&format!("; reach {reach:?}"));
    }
    let reads_plane = scenario
        .procs
        .iter()
        .any(|p| matches!(p, ProcSpec::ReadPlane { .. }));
    let plane = reads_plane.then(|| {
        let (wal, epoch) = crate::protocol::process::PLANE_WENT_BACK;
        store
            .marks()
            .hold(crate::protocol::process::PLANE_PREFIX, wal, epoch)
            .map_err(|refusal| refusal.code.to_string())
    });
    if let Some(plane) = &plane {
        summary.push_str(&format!("; the plane gone back {plane:?}"));
    }
    Restarted {
        closed: !view.faults.is_empty(),
        seen: Observation {
            decision: receipt.decision,
            code: receipt.code,
            mode: view.mode_for(&scenario.subject),
            epoch_seq: (!epoch_fault).then_some(view.epoch.seq),
            faulted: !view.faults.is_empty(),
            latch_files: Some(files),
            cleared_files: Some(cleared),
            ops: Some(ops),
            evidence,
            spend,
            reach,
            drills,
            plane,
        },
        summary,
    }
}

/// The `n` of the record the restart appends to the evidence log.
pub const PROBE: u64 = 1000;

/// Append one record to the evidence log as the first writer after the crash would (a breaker
/// trip), then read the whole chain across every segment: which records it keeps, or why it
/// cannot be trusted.
fn evidence_seen(store: &Store) -> EvidenceSeen {
    let refused = |why: String| EvidenceSeen {
        kept: Vec::new(),
        fault: Some(why),
    };
    if let Err(e) = store
        .evidence()
        .append("breaker", crate::protocol::process::evidence_record(PROBE))
    {
        return refused(format!("the first append after the crash was refused: {e}"));
    }
    let chain = match store.evidence().chain(true) {
        Ok(chain) => chain,
        Err(fault) => return refused(format!("the chain after one more append: {fault}")),
    };
    if let Some(why) = store.evidence().anchor_fault(&chain.entries) {
        return refused(format!("the head after one more append: {why}"));
    }
    let kept: Vec<u64> = chain
        .entries
        .iter()
        .filter_map(|e| e.body.get("n").and_then(serde_json::Value::as_u64))
        .collect();
    let fault = (kept.last() != Some(&PROBE))
        .then(|| format!("the record appended after the crash is not the newest: {kept:?}"));
    EvidenceSeen { kept, fault }
}

/// The drills of harness version `h` as the drill gate answers (`Evidence::drill_summary`,
/// which must agree with `Evidence::drills`; either builds an older home's index) and as a
/// full read of the log answers, the records pruned
/// with their segments included: those are read from the scenario's initial image (only the
/// setup's segments are ever pruned in a race).
fn drills_seen(scenario: &Scenario, store: &Store, when: &'static str) -> DrillsSeen {
    use stopline_store::evidence::drills::DrillIndex;
    let answer = |index: &DrillIndex| {
        let h = index.history("h");
        let newest: Vec<u64> = index
            .newest(stopline_store::evidence::drills::RECENT_DRILLS)
            .filter_map(|r| r.get("n").and_then(serde_json::Value::as_u64))
            .collect();
        (h.last_passed, h.any_passed, index.total, newest)
    };
    let full = (|| {
        let chain = store.evidence().chain(true).map_err(|f| f.to_string())?;
        if let Some(why) = store.evidence().anchor_fault(&chain.entries) {
            return Err(why);
        }
        let mut entries = Vec::new();
        if let Some(through) = chain.pruned_through {
            let initial = Store::with_io(
                HOME,
                Arc::new(ModelFs::new(Solo::new(SOLO, scenario.initial.clone()))),
                Arc::new(ModelEnv::new(0xf, scenario.now_ms)),
            );
            let before = initial
                .evidence()
                .entries()
                .map_err(|f| format!("the setup's log: {f}"))?;
            entries.extend(before.into_iter().filter(|e| e.seq <= through));
        }
        entries.extend(chain.entries);
        Ok(answer(&DrillIndex::from_entries(&entries)))
    })();
    // `stopline run`'s gate reads the summary (`drill_summary`), `GET /v1/drills` the whole
    // index: both must answer what the log does.
    let gate = store
        .evidence()
        .drill_summary()
        .map_err(|f| f.to_string())
        .and_then(|summary| {
            let index = store.evidence().drills().map_err(|f| f.to_string())?;
            let (last, any, total, newest) = answer(&index);
            let h = summary.history("h");
            if (h.last_passed, h.any_passed, summary.total) != (last, any, total) {
                return Err(format!(
                    "the drill gate's summary says {:?} of the drills, the index {:?}",
                    (h.last_passed, h.any_passed, summary.total),
                    (last, any, total)
                ));
            }
            Ok((last, any, total, newest))
        });
    DrillsSeen { when, gate, full }
}

/// What a fresh reader (a new gateway) counts spent on the spending scenarios' account — its
/// look compacts whatever gone journal it finds — then one more reservation, and what a second
/// fresh reader counts after it.
fn spend_seen(store: &Store) -> SpendSeen {
    use crate::protocol::process::{tool_calls, SPEND_ACCOUNT};
    let count = |label: &str| -> Result<(u64, stopline_store::spend::SpendJournal), String> {
        let journal = store.spend().journal(label).map_err(|e| e.to_string())?;
        let lock = journal.lock().map_err(|e| e.to_string())?;
        let elsewhere = lock.elsewhere();
        let kind = stopline_core::budget::BudgetKind::ToolCalls;
        let of = |m: &std::collections::BTreeMap<String, stopline_core::budget::Budgets>| {
            m.get(SPEND_ACCOUNT)
                .and_then(|b| b.get(&kind))
                .copied()
                .unwrap_or(0.0)
        };
        let spent = of(&elsewhere.used) + of(&elsewhere.in_flight);
        drop(lock);
        Ok((spent.round() as u64, journal))
    };
    let (spent, after_probe) = match count("probe") {
        Err(why) => (Err(why.clone()), Err(why)),
        Ok((spent, journal)) => {
            let probe = journal
                .lock()
                .and_then(|lock| {
                    lock.reserved(&[SPEND_ACCOUNT.to_string()], &tool_calls(SPEND_PROBE))
                })
                .map_err(|e| format!("the reservation after the crash was refused: {e}"));
            let after = probe.and_then(|_| count("recount").map(|(n, _)| n));
            (Ok(spent), after)
        }
    };
    SpendSeen { spent, after_probe }
}

/// What the registry of `store` (and `view`'s blocked targets) says of each racing operation.
fn operations_seen(scenario: &Scenario, store: &Store, view: &ControlView) -> Vec<OpSeen> {
    let (ops, _) = store.ops().all();
    let blocked = |target: &str, chain: &[&str]| {
        let subject = Subject::proven(
            chain.iter().filter_map(|n| Name::parse(n).ok()).collect(),
            Vec::new(),
            Vec::new(),
        );
        ["*", target].iter().any(|t| {
            view.blocked_targets
                .get(*t)
                .is_some_and(|b| b.iter().any(|b| b.blocks.covers(&subject)))
        })
    };
    scenario
        .procs
        .iter()
        .flat_map(|p| match p {
            ProcSpec::Operation {
                target,
                agent,
                root,
                ..
            } => vec![(target, agent, root)],
            ProcSpec::PrepareBatch {
                targets,
                agent,
                root,
            }
            | ProcSpec::PrepareEach {
                targets,
                agent,
                root,
            } => targets.iter().map(|t| (t, agent, root)).collect(),
            _ => Vec::new(),
        })
        .chain(scenario.setup_ops.iter().map(|(t, a, r)| (t, a, r)))
        .map(|(target, agent, root)| {
            let op = ops.values().find(|o| &o.target == target);
            OpSeen {
                target: target.clone(),
                model: target.starts_with("model:"),
                recorded: op.is_some(),
                resolved: op.is_some_and(|o| o.outcome.is_some()),
                agent_blocked: blocked(target, &[root.as_str(), agent.as_str()]),
                sub_agent_blocked: blocked(target, &[root.as_str(), "another-helper"]),
                bystander_blocked: blocked(target, &["bystander"]),
            }
        })
        .collect()
}
