//! The scenarios: an initial control directory, prepared by the real store code running alone,
//! and the processes that then race over it.
//!
//! Every scenario also runs a gateway admission with a token minted for agent `worker` at epoch
//! e0 (after the setup), so every race is also raced by a gate. The setup's clock stands a
//! minute before the scenario's, so no racing engage is coalesced into a setup latch (the
//! `coalesce-into-plan` scenario puts them within the one-second window on purpose).

use crate::protocol::fs_state::FsState;
use crate::protocol::model_fs::ModelFs;
use crate::protocol::process::{engage, OpAnswer, ProcSpec};
use crate::protocol::solo::{ModelEnv, Solo};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use stopline_core::{Level, Name, Scope, Subject};
use stopline_store::ops::Census;
use stopline_store::{OwnerPlane, Store};
use stopline_token::IssueRequest;

/// The model's control directory.
pub const HOME: &str = "/stopline-home";
/// The setup's clock: 2026-10-31T20:10:00Z.
pub const SETUP_MS: i64 = 1_793_477_400_000;
/// The process number of the setup and restart phases.
pub const SOLO: u8 = 200;
/// Every model store writes a WAL checkpoint after every append, so every read of every
/// scenario goes through one and every checkpoint's steps are crashed.
pub const MODEL_CHECKPOINT_EVERY: usize = 1;
/// Every model store's evidence log starts a new segment every two records, so a scenario of
/// a few appends crosses a segment switch.
pub const MODEL_EVIDENCE_SEGMENT_RECORDS: u64 = 2;
/// The racing processes' stores keep one evidence segment (`[retention]
/// evidence_keep_segments = 1`), so a segment switch in a race also prunes, and every step of
/// the pruning is crashed. The setup's and the restart's stores keep every segment, so what a
/// restart reads is what the race left.
pub const MODEL_EVIDENCE_KEEP_SEGMENTS: u64 = 1;

/// Every racing (and restarting) model store's reservation compacts any gone writer's
/// spending journal it finds, so a reservation's own compaction races too.
pub const MODEL_SPEND_COMPACT_AFTER: usize = 1;

/// One race to explore.
#[derive(Clone)]
pub struct Scenario {
    /// Short name.
    pub name: &'static str,
    /// What it races.
    pub title: &'static str,
    /// The control directory after the setup, all of it durable.
    pub initial: FsState,
    /// The racing processes, in order.
    pub procs: Vec<ProcSpec>,
    /// The scenario's clock.
    pub now_ms: i64,
    /// The epoch the gate's token was minted at.
    pub e0: u64,
    /// The subject of that token.
    pub subject: Subject,
    /// Latch files the setup left, with scope and level.
    pub initial_latches: BTreeMap<String, (Scope, Level)>,
    /// Latch names fixed by the setup's recovery plan (none when the plan itself races), and
    /// the scope it recovers.
    pub plan: Option<(Vec<String>, Scope)>,
    /// Operations the setup recorded (target, agent, chain root), judged after every crash
    /// like the racing ones.
    pub setup_ops: Vec<(String, String, String)>,
    /// `<run>/<agent>` of workers the setup registered running, whose supervisors (an older
    /// stopline's) run throughout: every reach must find them.
    pub live_workers: Vec<String>,
    /// The racing process (by index) that is a live gateway to the others during the race: its
    /// spending journal, written by the setup under its name, is its own (the live
    /// rewrite). Gone after a crash, like every writer.
    pub live_spend_writer: Option<usize>,
    /// The racing stores' `[retention] spend_journal_bytes` (`None`: the default).
    pub spend_rewrite_bytes: Option<u64>,
    /// The racing stores' bytes between two rewrites of a journal's open-set snapshot by its
    /// own writer (`Store::with_ops_snapshot_every`; `None`: the default, never reached).
    pub ops_snapshot_every: Option<u64>,
    /// How many appends on one path the search may fail as a full disk does (half the bytes
    /// land, then `ENOSPC`), at any append of any process (docs/reference.md §5; 0: none).
    pub append_faults: u8,
    /// What every observation owes the e0 token whatever the racers do (the fold scenarios).
    pub gate: GateExpectation,
}

/// What every gate owes the e0 token, beside what the racers' outcomes oblige.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GateExpectation {
    /// Only what the racers' outcomes oblige (every scenario but the fold ones).
    #[default]
    Judged,
    /// The setup revoked it: every gate refuses it (`NoPreStopAuthority`).
    Revoked,
    /// Nothing revokes it and it is alive: every gate that reads the control state allows it
    /// (`FoldSparesLiveAuthority`).
    Unrevoked,
    /// Only revocations of other tokens race: every gate that reads the control state allows
    /// it (`RevokeRefusesOnlyItsTokens`).
    NotNamed,
}

/// How the gate's token was minted: under `e0`, at `iat_s`, living `ttl_s`, carrying
/// `labels`; when `delegated_from` names a parent, it is that parent's root token's delegate
/// for `worker`, which adds `labels` (the parent carrying none).
#[derive(Debug, Clone)]
struct GateToken {
    e0: u64,
    iat_s: i64,
    ttl_s: u64,
    labels: Vec<stopline_core::Label>,
    delegated_from: Option<Name>,
}

struct Setup {
    solo: Arc<Solo>,
    store: Store,
    latches: BTreeMap<String, (Scope, Level)>,
    ops: Vec<(String, String, String)>,
    /// The gate counts staged latches for admission (the `staged-gate` scenario).
    staged_gate: bool,
}

fn worker() -> Name {
    Name::parse("worker").expect("a valid name")
}

/// A racer: `monitor-b`'s emergency of another agent, `agent` (the fold and revoke scenarios'
/// unrelated stop).
fn emergency_of(agent: &str) -> ProcSpec {
    ProcSpec::Engage(engage(
        Scope::Agent(Name::parse(agent).expect("a valid name")),
        Level::Emergency,
        "monitor-b",
    ))
}

impl Setup {
    fn new() -> Setup {
        let solo = Solo::new(SOLO, FsState::new());
        let fs = Arc::new(ModelFs::new(solo.clone()));
        let store = Store::with_io(HOME, fs, Arc::new(ModelEnv::new(0xe, SETUP_MS)))
            .with_wal_checkpoint_every(MODEL_CHECKPOINT_EVERY)
            .with_evidence_segment_records(MODEL_EVIDENCE_SEGMENT_RECORDS);
        let layout = store.layout().clone();
        store
            .ensure_dirs(&[&layout.latches(), &layout.staging()])
            .expect("setup: directories");
        assert!(store.ensure_reserve(), "setup: reserve");
        Setup {
            solo,
            store,
            latches: BTreeMap::new(),
            ops: Vec::new(),
            staged_gate: false,
        }
    }

    /// A gateway's journal `label` (its writer gone once the setup ends, as every model writer is):
    /// a resolved call on `mcp:s:echo`, then one on `target` dispatched with no outcome, in
    /// doubt, by `agent` under `root`.
    fn gone_gateway_journal(&mut self, label: &str, target: &str, agent: &str, root: &str) {
        let journal = self.store.ops().journal(label).expect("setup: journal");
        let owner = stopline_store::ops::OpOwner {
            agent: Some(agent.into()),
            root: Some(root.into()),
            blocks: stopline_core::ops::BlockScope::Agent,
        };
        let done = journal
            .prepare_for("mcp:s:echo", &owner, Some("1"))
            .expect("setup: prepare");
        journal.dispatched(&done).expect("setup: dispatched");
        journal.outcome(&done, "committed").expect("setup: outcome");
        let open = journal
            .prepare_for(target, &owner, Some("2"))
            .expect("setup: prepare");
        journal.dispatched(&open).expect("setup: dispatched");
        self.ops.push((target.into(), agent.into(), root.into()));
    }

    fn engage(&mut self, scope: Scope, level: Level, by: &str) -> String {
        let out = self
            .store
            .engage(&engage(scope.clone(), level, by))
            .expect("setup: engage");
        self.latches.insert(out.latch.file_name(), (scope, level));
        out.latch.file_name()
    }

    /// Engage while another holder keeps the WAL's shared lock, so the engage answers
    /// `wal_deferred`: its latch is published and the WAL never records it (the lock is
    /// released once the engage returned, as a frozen reader that was resumed would).
    fn engage_deferred(&mut self, scope: Scope, level: Level, by: &str) -> String {
        let wal = self.store.layout().wal();
        let reader = self
            .store
            .fs()
            .lock(&wal, false, true, None)
            .expect("setup: the reader's lock");
        let out = self
            .store
            .engage(&engage(scope.clone(), level, by))
            .expect("setup: engage");
        assert!(out.wal_deferred, "setup: the engage was not deferred");
        drop(reader);
        self.latches.insert(out.latch.file_name(), (scope, level));
        out.latch.file_name()
    }

    fn plan(&self, scope: &Scope) -> (String, Vec<String>) {
        let receipt = self
            .store
            .recover_plan(scope, "model check", "operator", &Census::default())
            .expect("setup: plan");
        (receipt.plan, receipt.latches)
    }

    /// Mint the gate's token at the current epoch, record the issuance, persist everything.
    fn finish(
        self,
        name: &'static str,
        title: &'static str,
        racers: Vec<ProcSpec>,
        now_ms: i64,
        plan: Option<(Vec<String>, Scope)>,
    ) -> Scenario {
        let e0 = self
            .store
            .latches()
            .records()
            .epoch
            .expect("setup: epoch")
            .seq;
        let token = GateToken {
            e0,
            iat_s: SETUP_MS / 1000,
            ttl_s: stopline_token::DEFAULT_TTL_S,
            labels: Vec::new(),
            delegated_from: None,
        };
        self.finish_with(name, title, racers, now_ms, plan, token)
    }

    /// [`Setup::finish`] with the gate's token minted as `token` says.
    fn finish_with(
        self,
        name: &'static str,
        title: &'static str,
        racers: Vec<ProcSpec>,
        now_ms: i64,
        plan: Option<(Vec<String>, Scope)>,
        token: GateToken,
    ) -> Scenario {
        let e0 = token.e0;
        let seed = self.store.keys().signing_seed().expect("setup: key");
        let key = stopline_token::keys::signing_key_from_seed(&seed).expect("setup: key seed");
        let minted = match &token.delegated_from {
            None => {
                let mut request = IssueRequest::new(worker(), e0, token.iat_s);
                request.ttl_s = token.ttl_s;
                request.max_ttl_s = token.ttl_s;
                request.labels = token.labels.clone();
                request.mint(&key).expect("setup: token")
            }
            Some(parent) => {
                let mut request = IssueRequest::new(parent.clone(), e0, token.iat_s);
                request.ttl_s = token.ttl_s;
                request.max_ttl_s = token.ttl_s;
                let parent = request.mint(&key).expect("setup: parent token");
                let child = stopline_token::DelegateRequest {
                    child: worker(),
                    ttl_s: Some(token.ttl_s),
                    budgets: Default::default(),
                    labels: token.labels.clone(),
                    max_ttl_s: token.ttl_s,
                    now_unix_s: token.iat_s,
                };
                stopline_token::delegate(&key, &parent.claims, &child).expect("setup: delegate")
            }
        };
        self.store
            .keys()
            .note_issued_epoch(e0)
            .expect("setup: issued epoch");
        let mut initial = self.solo.state();
        initial.persist_all();
        let mut procs = racers;
        procs.push(ProcSpec::Admission {
            token: minted.token,
            key: key.verifying_key(),
            verified: Default::default(),
            staged: self.staged_gate,
        });
        Scenario {
            name,
            title,
            initial,
            procs,
            now_ms,
            e0,
            subject: minted.claims.subject(),
            initial_latches: self.latches,
            plan,
            setup_ops: self.ops,
            live_workers: Vec::new(),
            live_spend_writer: None,
            spend_rewrite_bytes: None,
            ops_snapshot_every: None,
            append_faults: 0,
            gate: GateExpectation::Judged,
        }
    }
}

/// The scenarios of `stopline model-check`.
pub fn standard() -> Vec<Scenario> {
    let later = SETUP_MS + 60_000;
    let agent = Scope::Agent(worker());
    let mut out = Vec::new();

    let mut s = Setup::new();
    s.engage(Scope::Machine, Level::Emergency, "safety-monitor");
    let (plan, names) = s.plan(&Scope::Machine);
    let racers = vec![
        ProcSpec::Engage(engage(Scope::Machine, Level::Emergency, "monitor-b")),
        ProcSpec::RecoverApply { plan },
    ];
    let plan = Some((names, Scope::Machine));
    out.push(s.finish(
        "engage-vs-recover",
        "machine emergency engage vs machine recover apply",
        racers,
        later,
        plan,
    ));

    let s = Setup::new();
    let racers = vec![
        ProcSpec::Engage(engage(Scope::Machine, Level::HaltAll, "monitor-a")),
        ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
    ];
    out.push(s.finish(
        "two-engages",
        "machine halt-all engage vs agent emergency engage",
        racers,
        later,
        None,
    ));

    let mut s = Setup::new();
    s.engage(agent.clone(), Level::HaltAll, "monitor-a");
    let racers = vec![
        ProcSpec::Disengage {
            scope: agent.clone(),
        },
        ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
    ];
    out.push(s.finish(
        "disengage-vs-engage",
        "disengage vs emergency engage of the same agent",
        racers,
        later,
        None,
    ));

    let mut s = Setup::new();
    s.engage(Scope::Machine, Level::Emergency, "safety-monitor");
    let racers = vec![
        ProcSpec::Drain { deadline_s: 60 },
        ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
    ];
    out.push(s.finish(
        "drain-vs-engage",
        "drain vs agent emergency engage",
        racers,
        later,
        None,
    ));

    let mut s = Setup::new();
    s.engage(Scope::Machine, Level::Emergency, "safety-monitor");
    let racers = vec![
        ProcSpec::Engage(engage(Scope::Machine, Level::Emergency, "monitor-b")),
        ProcSpec::RecoverPlanApply {
            scope: Scope::Machine,
        },
    ];
    let plan = Some((Vec::new(), Scope::Machine));
    out.push(s.finish(
        "engage-vs-plan-apply",
        "machine emergency engage vs machine recover plan then apply",
        racers,
        later,
        plan,
    ));

    let mut s = Setup::new();
    s.engage(agent.clone(), Level::Emergency, "safety-monitor");
    let (plan, names) = s.plan(&agent);
    let racers = vec![
        ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
        ProcSpec::RecoverApply { plan },
    ];
    let plan = Some((names, agent.clone()));
    out.push(s.finish(
        "engage-vs-scoped-recover",
        "agent emergency engage vs agent recover apply",
        racers,
        later,
        plan,
    ));

    // docs/reference.md §5: a reader frozen while it holds the WAL's shared lock. Engage must still
    // return Ok with its latch in force (its record deferred), and the gate must block.
    let s = Setup::new();
    let racers = vec![
        ProcSpec::StalledReader,
        ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
        ProcSpec::FinishDeferred,
    ];
    out.push(s.finish(
        "stalled-reader",
        "a reader stalled forever holding the WAL lock vs agent emergency engage",
        racers,
        later,
        None,
    ));

    out.push(deferred_vs_recover());
    out
}

/// The operation scenarios (docs/reference.md §8): a gateway's call by `worker` (a sub-agent of `lead`)
/// races an emergency engage of `worker`, and every step of both is crashed. In the first the
/// engage cuts the exchange and the upstream answers later (the outcome is recorded); in the
/// second the cut exchange gets no answer in time (recorded in doubt), on a model this time.
pub fn operations() -> Vec<Scenario> {
    let later = SETUP_MS + 60_000;
    let agent = Scope::Agent(worker());
    let mut out = Vec::new();
    for (name, title, target, answer) in [
        (
            "op-cut-resolves-later",
            "a tool call cut by an agent emergency whose upstream answers later, crashed at every step",
            "mcp:s:write",
            OpAnswer::Committed,
        ),
        (
            "op-cut-no-answer",
            "a model call cut by an agent emergency whose upstream never answers, crashed at every step",
            "model:m",
            OpAnswer::NoAnswerInTime,
        ),
    ] {
        let s = Setup::new();
        let racers = vec![
            ProcSpec::Operation {
                target: target.into(),
                agent: "worker".into(),
                root: "lead".into(),
                answer,
            },
            ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
        ];
        out.push(s.finish(name, title, racers, later, None));
    }
    out.push(op_compaction());
    out.push(op_full_disk());
    out.push(op_writer_snapshot());
    out.push(op_archive());
    let s = Setup::new();
    let racers = vec![
        ProcSpec::PrepareBatch {
            targets: vec!["mcp:s:write".into(), "mcp:s:send".into()],
            agent: "worker".into(),
            root: "lead".into(),
        },
        ProcSpec::Engage(engage(agent.clone(), Level::Emergency, "monitor-b")),
    ];
    out.push(s.finish(
        "op-batch-prepared",
        "two tool calls prepared in one group-commit batch (one append, one fsync), crashed at every step",
        racers,
        later,
        None,
    ));
    out
}

/// A gateway prepares two tool calls by `worker` (a sub-agent of `lead`) one after the
/// other on a disk that fills — any one append of the run may land half its bytes and fail with
/// `ENOSPC` — crashed at every step: a prepared record the journal reported durable is read back,
/// one whose append failed never is, and no line is torn in the journal's middle.
pub fn op_full_disk() -> Scenario {
    let racers = vec![ProcSpec::PrepareEach {
        targets: vec!["mcp:s:write".into(), "mcp:s:send".into()],
        agent: "worker".into(),
        root: "lead".into(),
    }];
    let mut scenario = Setup::new().finish(
        "op-full-disk",
        "two tool calls prepared one after the other while any one append may land partly and fail (a full disk), crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    );
    scenario.append_faults = 1;
    scenario
}

/// A gateway's tool call by `worker` (a sub-agent of `lead`) raced by the journal upkeep that
/// rewrites every journal's open-set snapshot, crashed at every step of both: whatever the
/// snapshot folded away, an operation whose outcome was never recorded stays in doubt and keeps
/// blocking its agent, and one whose outcome was recorded never does.
pub fn op_compaction() -> Scenario {
    tool_call_raced_by_upkeep(
        "op-compaction",
        "a tool call raced by the journal upkeep that snapshots its open set, crashed at every step",
    )
}

/// A committed tool call by `worker` (a sub-agent of `lead`) raced by the journal upkeep.
fn tool_call_raced_by_upkeep(name: &'static str, description: &'static str) -> Scenario {
    let racers = vec![
        ProcSpec::Operation {
            target: "mcp:s:write".into(),
            agent: "worker".into(),
            root: "lead".into(),
            answer: OpAnswer::Committed,
        },
        ProcSpec::CompactOps,
    ];
    Setup::new().finish(name, description, racers, SETUP_MS + 60_000, None)
}

/// The journal's writer rewrites its open-set snapshot after every batch, from the open set
/// it keeps in memory and without fsync (`ops_open_set.rs`), while a gateway's upkeep rewrites
/// it from a read of the journal: a tool call by `worker` (a sub-agent of `lead`) raced by the
/// upkeep, crashed at every step of both — a power cut may keep a snapshot renamed after the
/// journal's last fsync while the journal loses its unsynced tail (`Crash::SnapshotAhead`).
/// Whatever snapshot survives, an operation whose outcome was never recorded stays in doubt
/// and blocks its agent, and one whose outcome was recorded never does.
pub fn op_writer_snapshot() -> Scenario {
    let mut scenario = tool_call_raced_by_upkeep(
        "op-writer-snapshot",
        "a tool call whose writer snapshots its open set after every batch, raced by the upkeep, crashed at every step",
    );
    scenario.ops_snapshot_every = Some(1);
    scenario
}

/// A gone gateway's journal with an operation in doubt, archived by two gateways' upkeep at
/// once (`Ops::archive_gone_journals`: the archive's open set, the link, the removal), raced
/// by a gate and crashed at every step: the doubt keeps blocking its agent and nobody else. An
/// earlier gateway's journal, with a doubt of its own, was archived by the setup, so the
/// archive's open set exists and is trusted throughout.
pub fn op_archive() -> Scenario {
    let mut s = Setup::new();
    s.gone_gateway_journal("gateway-earlier", "mcp:s:send", "worker", "lead");
    let report = s
        .store
        .ops()
        .archive_gone_journals(stopline_store::ops_archive::GoneJournals::Archive);
    assert_eq!(report.archived, 1, "setup: archive {report:?}");
    s.gone_gateway_journal("gateway", "mcp:s:write", "worker", "lead");
    let racers = vec![ProcSpec::ArchiveOps, ProcSpec::ArchiveOps];
    s.finish(
        "op-archive",
        "two gateways archive a gone gateway's journal with an operation in doubt, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// The evidence log's segment switch. The setup fills the first segment (two records,
/// `MODEL_EVIDENCE_SEGMENT_RECORDS`); two breaker trips then file a record each, the first of
/// them starting the next segment (`evidence.segment`, its directory fsync, the head rewrite)
/// and pruning the first (`MODEL_EVIDENCE_KEEP_SEGMENTS`: the marker, the removal), the other
/// following it there, crashed at every step: every record whose append returned is kept, the
/// chain stays whole across the switch (from the pruning marker when there is one), and the
/// first append after the crash lands on it — whether the head was rewritten or not.
pub fn evidence_segments() -> Scenario {
    let s = Setup::new();
    for n in [1, 2] {
        s.store
            .evidence()
            .append("breaker", crate::protocol::process::evidence_record(n))
            .expect("setup: evidence");
    }
    let racers = vec![
        ProcSpec::AppendEvidence { n: 3 },
        ProcSpec::AppendEvidence { n: 4 },
    ];
    s.finish(
        "evidence-segments",
        "two breaker trips file evidence across a segment switch that prunes the old segment, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// The drill index. The setup files a passing drill of harness version `h` and a
/// breaker trip (the first segment, full); a failing drill of `h` and another trip then race,
/// the first of them starting the next segment and pruning the first (with its passing drill),
/// crashed at every step — the drill's line, the index's rewrite (`evidence.drills.*`), the head
/// naming it: after any crash the drill gate answers what a full read of the durable log
/// (the pruned records included) answers, and again after the next append.
pub fn drill_index() -> Scenario {
    use crate::protocol::process::{drill_record, evidence_record};
    let s = Setup::new();
    s.store
        .evidence()
        .append(
            stopline_store::evidence::drills::DRILL_SCHEMA,
            drill_record(1, true),
        )
        .expect("setup: drill");
    s.store
        .evidence()
        .append("breaker", evidence_record(2))
        .expect("setup: evidence");
    let racers = vec![
        ProcSpec::AppendDrill { n: 3, pass: false },
        ProcSpec::AppendEvidence { n: 4 },
    ];
    s.finish(
        "drill-index",
        "a failing drill and a breaker trip filed across a segment switch that prunes a passing drill, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// An older home's drill index. The setup's log (two trips, then a passing drill of
/// `h` starting the second segment) is left as an older stopline leaves it — no
/// `evidence/drills.json`, a head without the drill anchor; the drill gate (which builds the
/// index from a full verified read, then re-anchors the head) races a failing drill of `h`,
/// crashed at every step of both: after any crash the gate answers as a full read does.
pub fn drills_older_home() -> Scenario {
    use crate::protocol::process::{drill_record, evidence_record};
    let s = Setup::new();
    for n in [1, 2] {
        s.store
            .evidence()
            .append("breaker", evidence_record(n))
            .expect("setup: evidence");
    }
    s.store
        .evidence()
        .append(
            stopline_store::evidence::drills::DRILL_SCHEMA,
            drill_record(3, true),
        )
        .expect("setup: drill");
    let layout = s.store.layout().clone();
    s.store
        .fs()
        .remove_file(&layout.evidence_drills(), "setup")
        .expect("setup: no index");
    let head = s
        .store
        .evidence()
        .head()
        .expect("setup: head")
        .expect("setup: head");
    let (segment, offset) = head.at.expect("setup: head position");
    let older = serde_json::json!({"seq": head.seq, "hash": head.hash, "segment": segment, "offset": offset});
    s.store
        .replace_atomic(
            &layout.evidence_head(),
            older.to_string().as_bytes(),
            "setup",
        )
        .expect("setup: older head");
    let racers = vec![
        ProcSpec::DrillGate,
        ProcSpec::AppendDrill { n: 4, pass: false },
    ];
    s.finish(
        "drills-older-home",
        "an older home's drill index built by the drill gate while a failing drill is filed, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// The drill index's two files. The setup's log (a passing drill of `h`, then a trip) is
/// indexed as an older stopline indexed it — one file, `evidence/drills.json` holding the
/// records ([`stopline_store::evidence::drills::DRILLS_SCHEMA_V1`]), no
/// `evidence/drills-recent.json`; a failing drill of `h` (whose append writes the split layout:
/// the records' file, then the summary, then the head) races a passing one, crashed at every
/// step of both — between the two files included: after any crash the drill gate (the summary
/// alone) and `GET /v1/drills` (both files) answer what a full read of the durable log answers,
/// so the gate never passes a drill whose line is not durable and a failed drill always closes
/// it, and again after one more append.
pub fn drills_split() -> Scenario {
    use crate::protocol::process::{drill_record, evidence_record};
    use stopline_store::evidence::drills::{DrillIndex, DRILLS_SCHEMA_V1, DRILL_SCHEMA};
    let s = Setup::new();
    s.store
        .evidence()
        .append(DRILL_SCHEMA, drill_record(1, true))
        .expect("setup: drill");
    s.store
        .evidence()
        .append("breaker", evidence_record(2))
        .expect("setup: evidence");
    let layout = s.store.layout().clone();
    let older = DrillIndex {
        schema: DRILLS_SCHEMA_V1.into(),
        ..s.store.evidence().drills().expect("setup: index")
    };
    s.store
        .replace_atomic(
            &layout.evidence_drills(),
            &serde_json::to_vec(&older).expect("setup: older index"),
            "setup",
        )
        .expect("setup: older index");
    s.store
        .fs()
        .remove_file(&layout.evidence_drills_recent(), "setup")
        .expect("setup: no records' file");
    let racers = vec![
        ProcSpec::AppendDrill { n: 3, pass: false },
        ProcSpec::AppendDrill { n: 4, pass: true },
    ];
    s.finish(
        "drills-split",
        "a failing and a passing drill filed on an older one-file drill index (which they split into the summary and the records' file), crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// Spend compaction. The setup's earlier gateway spent 4 on account `t` (settled),
/// and was compacted into `spend/settled.json`; its last gateway spent 1 (settled) and left a
/// reservation of 2 that never settled (in doubt), 7 in all. A gateway's reservation of 8
/// (whose look compacts the gone journal itself) races the spend upkeep, crashed at every step
/// of both: after any crash a fresh reader counts exactly 7, plus 8 once the reservation is
/// durable (it must, once it returned), never less and never a journal twice, and the next
/// reservation lands on it.
pub fn spend_compaction() -> Scenario {
    use crate::protocol::process::{tool_calls, SPEND_ACCOUNT};
    let s = Setup::new();
    let t = [SPEND_ACCOUNT.to_string()];
    let earlier = s
        .store
        .spend()
        .journal("gateway-earlier")
        .expect("setup: spend");
    let id = earlier
        .lock()
        .and_then(|lock| lock.reserved(&t, &tool_calls(4)))
        .expect("setup: reserve");
    earlier.settled(&id, &tool_calls(4)).expect("setup: settle");
    let report = s
        .store
        .spend()
        .compact_journals(stopline_store::ops_archive::GoneJournals::Archive);
    assert_eq!(report.compacted, 1, "setup: compact {report:?}");
    let last = s.store.spend().journal("gateway").expect("setup: spend");
    let lock = last.lock().expect("setup: lock");
    let id = lock.reserved(&t, &tool_calls(1)).expect("setup: reserve");
    lock.reserved(&t, &tool_calls(2)).expect("setup: reserve");
    drop(lock);
    last.settled(&id, &tool_calls(1)).expect("setup: settle");
    let racers = vec![ProcSpec::ReserveSpend { amount: 8 }, ProcSpec::CompactSpend];
    s.finish(
        "spend-compaction",
        "a reservation on a budget limit raced by the spend upkeep, both compacting a gone gateway's journal, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// A live gateway rewrites its own spending journal. The setup is that gateway's
/// history (its journal under its own name): 1 and 4 settled on account `t`, and a reservation
/// of 2 still open (a call in flight), 7 in all. The gateway (racer 0, alive to the others, its
/// journal rewritten past one byte) reserves 8 — its reservation first rewrites the journal:
/// a new file with the settled total and the open reservation, fsynced, renamed over the
/// journal, `spend/` fsynced — raced by another gateway's reservation of 16 and a fresh
/// reader's look, crashed at every step: the look counts 7 (plus what of 8 and 16 it finds),
/// never the journal twice nor without its open reservation; after any crash a fresh reader
/// counts 7 plus every reservation that returned, and the next reservation lands.
pub fn spend_live_rewrite() -> Scenario {
    use crate::protocol::process::{tool_calls, SPEND_ACCOUNT};
    let s = Setup::new();
    let t = [SPEND_ACCOUNT.to_string()];
    let writer = crate::protocol::solo::ModelEnv::racer_pid(0);
    let env = crate::protocol::solo::ModelEnv::new(0xe, SETUP_MS)
        .with_pid(writer)
        .with_live(Some(writer));
    let history = Store::with_io(HOME, Arc::new(ModelFs::new(s.solo.clone())), Arc::new(env));
    let live = history.spend().journal("gateway").expect("setup: spend");
    let lock = live.lock().expect("setup: lock");
    let one = lock.reserved(&t, &tool_calls(1)).expect("setup: reserve");
    let four = lock.reserved(&t, &tool_calls(4)).expect("setup: reserve");
    lock.reserved(&t, &tool_calls(2)).expect("setup: reserve");
    drop(lock);
    live.settled(&one, &tool_calls(1)).expect("setup: settle");
    live.settled(&four, &tool_calls(4)).expect("setup: settle");
    let racers = vec![
        ProcSpec::ReserveSpend { amount: 8 },
        ProcSpec::ReserveSpend { amount: 16 },
        ProcSpec::LookSpend,
    ];
    let mut scenario = s.finish(
        "spend-live-rewrite",
        "a live gateway rewrites its own spending journal at its reservation, raced by another gateway's reservation and a fresh reader, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    );
    scenario.live_spend_writer = Some(0);
    scenario.spend_rewrite_bytes = Some(1);
    scenario
}

/// What the setup of `spend-compaction` left spent on account `t`.
pub const SPEND_SETUP_TOTAL: u64 = 7;

/// The live-run index (`runs.live/`). The setup ran run `r1` of agent `worker` to its
/// end (its registration says `exited`, its entry is gone); the run id is then started again
/// (`Runs::begin_run`: the entry, the card, the record; the registrations `running` and
/// `exited`; `Runs::end_run`), raced by an engage's reach and by the census of finished entries,
/// crashed at every step: a worker that may be running is in every reach that spans it and in
/// the reach after any crash — the earlier instance's `exited` registration never hides it, and
/// no entry leaves the index while its worker runs.
pub fn live_runs() -> Scenario {
    let s = Setup::new();
    let live = s
        .store
        .runs()
        .begin_run(
            "r1",
            "worker",
            4241,
            &serde_json::json!({"project": "/project"}),
            &serde_json::json!({"schema": "policy-card.v1"}),
            &crate::protocol::process::run_record("r1", "worker"),
        )
        .expect("setup: begin_run")
        .expect("setup: the index");
    for state in ["running", "exited"] {
        let registration =
            crate::protocol::process::worker_registration("r1", "worker", state, Some(&live.file));
        s.store
            .runs()
            .register_worker("r1", "worker", &registration)
            .expect("setup: registration");
    }
    s.store.runs().end_run(&live).expect("setup: end_run");
    let racers = vec![
        ProcSpec::Supervise {
            run: "r1".into(),
            agent: "worker".into(),
        },
        ProcSpec::Reach,
        ProcSpec::RetireLiveRuns,
    ];
    s.finish(
        "live-runs",
        "a run id started again, raced by an engage's reach and the census of runs.live/, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// An older home gets its live-run index. The setup is a home an older stopline
/// wrote: no `runs.live/`, run `r0` of `worker` registered running (no `live_entry`; its
/// supervisor runs throughout) and run `old` of `worker` finished. A new run `r1` starts
/// (`Runs::begin_run` builds the index: `runs.live/`, a legacy entry for `r0`, the marker, then
/// its own entry), raced by an engage's reach, crashed at every step: `r0` is in every reach
/// and after every crash, whether the index was built, half built or not at all.
pub fn live_runs_older_home() -> Scenario {
    let s = Setup::new();
    for (run, state) in [("old", "exited"), ("r0", "running")] {
        s.store
            .runs()
            .record_run(
                run,
                &serde_json::json!({}),
                &crate::protocol::process::run_record(run, "worker"),
            )
            .expect("setup: record");
        let registration =
            crate::protocol::process::worker_registration(run, "worker", state, None);
        s.store
            .runs()
            .register_worker(run, "worker", &registration)
            .expect("setup: registration");
    }
    let racers = vec![
        ProcSpec::Supervise {
            run: "r1".into(),
            agent: "worker".into(),
        },
        ProcSpec::Reach,
    ];
    let mut scenario = s.finish(
        "live-runs-older-home",
        "an older home's first run builds runs.live/, raced by an engage's reach, crashed at every step",
        racers,
        SETUP_MS + 60_000,
        None,
    );
    scenario.live_workers = vec!["r0/worker".into()];
    scenario
}

/// A distributed plane's readers (docs/reference.md, "Many hosts: etcd"): two reads of the plane
/// as it rises (WAL 2, epoch 1; then WAL 3, epoch 2), each raising this host's high-water marks
/// before it acts, crashed at every step; after any crash a reader finds the plane gone back
/// (`PLANE_WENT_BACK`: an old `epoch.json` restored) and must refuse it once a read above it
/// was acted on.
pub fn plane_marks() -> Scenario {
    let s = Setup::new();
    let racers = vec![
        ProcSpec::ReadPlane {
            wal_seq: 2,
            epoch_seq: 1,
        },
        ProcSpec::ReadPlane {
            wal_seq: 3,
            epoch_seq: 2,
        },
    ];
    s.finish(
        "plane-marks",
        "two readers of a rising plane raise the high-water marks, crashed at every step; the plane then goes back",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// A label stop racing an agent stop (docs/reference.md §1, Label): an emergency on
/// `label:task=ctf-17` and a halt-all of `agent:worker`, crashed at every step. The gate's token
/// is a delegate of `planner` for `worker` that added the label (its parent carries none): the
/// label emergency covers it and revokes it, the agent halt covers it, and neither may lower
/// what the other did.
pub fn label_vs_agent() -> Scenario {
    let s = Setup::new();
    let label = stopline_core::Label::parse("task=ctf-17").expect("a valid label");
    let e0 = s.store.latches().records().epoch.expect("setup: epoch").seq;
    let token = GateToken {
        e0,
        iat_s: SETUP_MS / 1000,
        ttl_s: stopline_token::DEFAULT_TTL_S,
        labels: vec![label.clone()],
        delegated_from: Some(Name::parse("planner").expect("a valid name")),
    };
    let racers = vec![
        ProcSpec::Engage(engage(Scope::Label(label), Level::Emergency, "monitor-a")),
        ProcSpec::Engage(engage(Scope::Agent(worker()), Level::HaltAll, "monitor-b")),
    ];
    s.finish_with(
        "label-vs-agent",
        "label emergency engage vs agent halt-all engage; the gate's token a delegate that added the label",
        racers,
        SETUP_MS + 60_000,
        None,
        token,
    )
}

/// The bounded tail (docs/reference.md §5): an emergency of another agent engaged a day after
/// the setup's emergency, so its advance may fold the setup's revision away, crashed at every
/// step. The gate's token was minted under the epoch before the setup's emergency, on a host
/// whose clock ran 600 s ahead (so its `iat` is after the advance), living `max_ttl_s`: at the
/// race it is still alive, and nothing revokes it, so the fold must not refuse it — which it
/// does if the revision folds at `max_ttl_s` without the margin (the planted
/// `FoldWithoutMargin`).
pub fn epoch_fold() -> Scenario {
    let mut s = Setup::new();
    s.engage(
        Scope::Agent(Name::parse("old").expect("a valid name")),
        Level::Emergency,
        "safety-monitor",
    );
    let day = stopline_core::epoch::DEFAULT_MAX_TTL_S;
    let token = GateToken {
        e0: 0,
        iat_s: SETUP_MS / 1000 + 600,
        ttl_s: day,
        labels: Vec::new(),
        delegated_from: None,
    };
    let racers = vec![emergency_of("new")];
    // 300 s before the token expires: a day and 300 s after the setup's advance.
    let now_ms = SETUP_MS + (day as i64 + 300) * 1000;
    let mut scenario = s.finish_with(
        "epoch-fold",
        "an emergency a day later folds old revisions; a live token nothing revoked stays good",
        racers,
        now_ms,
        None,
        token,
    );
    scenario.gate = GateExpectation::Unrevoked;
    scenario
}

/// The bounded tail's floor (docs/reference.md §5): the setup stops agent `worker` and recovers
/// it, revoking the gate's token (minted under epoch 0 by a stopline before the cap, living two
/// days); a day and more than the margin later an emergency of another agent folds that
/// revision away, crashed at every step. The token is still alive, so the floor must refuse
/// it — which it does not if the fold forgets to raise the floor (the planted
/// `FoldWithoutFloor`).
pub fn epoch_fold_floor() -> Scenario {
    let agent = Scope::Agent(worker());
    let mut s = Setup::new();
    let latch = s.engage(agent.clone(), Level::Emergency, "safety-monitor");
    let (plan, _) = s.plan(&agent);
    s.store
        .recover_apply(&plan, "operator")
        .expect("setup: recover apply");
    s.latches.remove(&latch);
    let day = stopline_core::epoch::DEFAULT_MAX_TTL_S;
    let horizon = stopline_core::epoch::fold_horizon_s(day) as i64;
    let token = GateToken {
        e0: 0,
        iat_s: SETUP_MS / 1000,
        ttl_s: 2 * day,
        labels: Vec::new(),
        delegated_from: None,
    };
    let racers = vec![emergency_of("new")];
    let now_ms = SETUP_MS + (horizon + 60) * 1000;
    let mut scenario = s.finish_with(
        "epoch-fold-floor",
        "an emergency past the horizon folds the revision that revoked a token older than the cap; the floor still refuses it",
        racers,
        now_ms,
        None,
        token,
    );
    scenario.gate = GateExpectation::Revoked;
    scenario
}

/// An emergency engage whose WAL record and epoch advance were deferred, raced by a process
/// that finishes deferred records and by the owner's recover plan then apply of its scope:
/// whoever comes first records it, and recovery never clears it unrecorded.
pub fn deferred_vs_recover() -> Scenario {
    let agent = Scope::Agent(worker());
    let mut s = Setup::new();
    s.engage_deferred(agent.clone(), Level::Emergency, "safety-monitor");
    let racers = vec![
        ProcSpec::FinishDeferred,
        ProcSpec::RecoverPlanApply {
            scope: agent.clone(),
        },
    ];
    s.finish(
        "deferred-vs-recover",
        "a deferred emergency record, finished by another process, vs agent recover plan then apply",
        racers,
        SETUP_MS + 60_000,
        Some((Vec::new(), agent)),
    )
}

/// A gate that counts staged latches for admission (docs/reference.md §5, "The gate closes
/// before the disk answers") racing an emergency engage of its own agent: it may read the
/// staged body before the link, between the link and the directory's fsync, or after, and
/// the machine may crash at any step. It must never admit what its durable view refuses,
/// never report a latch that was not published, and is judged by every obligation a gate owes.
pub fn staged_gate() -> Scenario {
    let mut s = Setup::new();
    s.staged_gate = true;
    let racers = vec![ProcSpec::Engage(engage(
        Scope::Agent(worker()),
        Level::Emergency,
        "monitor-b",
    ))];
    s.finish(
        "staged-gate",
        "a gate counting staged latches vs an agent emergency engage",
        racers,
        SETUP_MS + 60_000,
        None,
    )
}

/// A scenario outside the standard set: the racing engage repeats the planned latch's scope,
/// level and caller within the one-second coalescing window, so it is coalesced into the very
/// latch the recovery plan is about to clear.
pub fn coalesce_into_plan() -> Scenario {
    let mut s = Setup::new();
    s.engage(Scope::Machine, Level::Emergency, "safety-monitor");
    let (plan, names) = s.plan(&Scope::Machine);
    let racers = vec![
        ProcSpec::Engage(engage(Scope::Machine, Level::Emergency, "safety-monitor")),
        ProcSpec::RecoverApply { plan },
    ];
    let plan = Some((names, Scope::Machine));
    s.finish(
        "coalesce-into-plan",
        "engage coalesced into a planned latch vs recover apply",
        racers,
        SETUP_MS + 500,
        plan,
    )
}

/// A WAL checkpoint written while a plan is pending: the setup engages a machine emergency and
/// plans its recovery, and the plan's own append writes a checkpoint (every model append does);
/// then an engage repeating the planned latch within the coalescing window races the recovery
/// apply. The engage reads the WAL from that checkpoint, which must carry the pending intent, or
/// it coalesces into a latch the plan then clears. `setup_bug` is planted in the setup's store
/// (the checkpoint is the setup's); the racers get the checker's as always.
pub fn checkpoint_vs_plan(#[allow(unused)] setup_bug: Planted) -> Scenario {
    #[allow(unused_mut)]
    let mut s = Setup::new();
    #[cfg(feature = "planted-bugs")]
    {
        s.store = s.store.clone().with_planted_bug(setup_bug);
    }
    s.engage(Scope::Machine, Level::Emergency, "safety-monitor");
    let (plan, names) = s.plan(&Scope::Machine);
    let racers = vec![
        ProcSpec::Engage(engage(Scope::Machine, Level::Emergency, "safety-monitor")),
        ProcSpec::RecoverApply { plan },
    ];
    let plan = Some((names, Scope::Machine));
    s.finish(
        "checkpoint-vs-plan",
        "engage coalescing vs recover apply, the WAL read from a checkpoint written after the plan",
        racers,
        SETUP_MS + 500,
        plan,
    )
}

/// The bug a scenario's setup may carry.
#[cfg(feature = "planted-bugs")]
pub type Planted = stopline_store::planted::PlantedBug;
/// The bug a scenario's setup may carry: none without the `planted-bugs` feature (a unit
/// struct rather than `()`, so passing it on reads as passing a value).
#[cfg(not(feature = "planted-bugs"))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Planted;

/// The home as a path.
pub fn home() -> PathBuf {
    PathBuf::from(HOME)
}

/// Revoking one token (docs/reference.md §5, "Revoking one token"): the gate's token is
/// `worker`, a delegate of `lead`'s root token; `token revoke <lead's jti> --with-delegates`
/// races an emergency of another agent (both advance the epoch under the WAL lock), crashed at
/// every step. Once the revoke answered, every gate refuses the delegate — which it does not if
/// the revocation forgets its delegates (the planted `RevokeForgetsDelegates`).
pub fn revoke_delegates() -> Scenario {
    let s = Setup::new();
    let token = GateToken {
        e0: 0,
        iat_s: SETUP_MS / 1000,
        ttl_s: stopline_token::DEFAULT_TTL_S,
        labels: Vec::new(),
        delegated_from: Some(Name::parse("lead").expect("a valid name")),
    };
    let racers = vec![emergency_of("other")];
    let mut scenario = s.finish_with(
        "revoke-delegates",
        "token revoke --with-delegates of the gate token's parent vs another agent's emergency",
        racers,
        SETUP_MS + 60_000,
        None,
        token,
    );
    let parent = scenario.subject.tokens[0].clone();
    scenario.procs.insert(
        0,
        ProcSpec::Revoke {
            scope: Scope::Token {
                jti: parent,
                delegates: true,
            },
        },
    );
    scenario
}

/// Revoking one token with a live gateway (docs/reference.md §3): `token revoke` of the gate's
/// token asks the gateway, whose view was read before the revoke began, to acknowledge the new
/// revision (a read begun after the request), racing another agent's emergency, crashed at
/// every step. Once the revoke answered, the gateway that acknowledged refuses the token from
/// the view it holds — which it does not if the revoke answers before the acknowledgement (the
/// planted `RevokeAnswersBeforeAcks`) — and so does every gate.
pub fn revoke_acknowledged() -> Scenario {
    let s = Setup::new();
    let racers = vec![emergency_of("other")];
    let mut scenario = s.finish(
        "revoke-acknowledged",
        "token revoke of the gate token, acknowledged by a live gateway, vs another agent's emergency",
        racers,
        SETUP_MS + 60_000,
        None,
    );
    let Some(ProcSpec::Admission { token, key, .. }) = scenario.procs.last().cloned() else {
        unreachable!("finish ends every scenario with its gate")
    };
    let jti = scenario
        .subject
        .tokens
        .last()
        .cloned()
        .expect("the gate's token has an id");
    scenario.procs.insert(
        0,
        ProcSpec::RevokeAcked {
            scope: Scope::Token {
                jti,
                delegates: false,
            },
            token,
            key,
            verified: Default::default(),
        },
    );
    scenario
}

/// The other half of revoking one token: the gate's token is `worker`'s root token, and two
/// revocations of other tokens race (one alone, one with its delegates), crashed at every step.
/// No gate may refuse the gate's token, crash or not (`RevokeRefusesOnlyItsTokens`): a
/// revocation covers the token it names, never its agent's others.
pub fn revoke_spares_others() -> Scenario {
    let s = Setup::new();
    let mut scenario = s.finish(
        "revoke-spares-others",
        "two revocations of other tokens of the same agent race; the gate's token stays good",
        Vec::new(),
        SETUP_MS + 60_000,
        None,
    );
    let other = |n: u8| format!("{n:x}").repeat(32);
    scenario.procs.splice(
        0..0,
        [
            ProcSpec::Revoke {
                scope: Scope::Token {
                    jti: other(1),
                    delegates: false,
                },
            },
            ProcSpec::Revoke {
                scope: Scope::Token {
                    jti: other(2),
                    delegates: true,
                },
            },
        ],
    );
    scenario.gate = GateExpectation::NotNamed;
    scenario
}
