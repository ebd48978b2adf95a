//! The processes of a scenario: each one real store call, as the binary makes it.
//!
//! A process is a [`ProcSpec`] run against a `Store` built over the model seams. Its result is
//! reduced to an [`Outcome`]: the facts the properties need (which latch an engage published,
//! which epoch an advance returned, what a gate decided) and nothing that differs between
//! equivalent runs.

use std::sync::{Arc, OnceLock};
use stopline_core::latch::LatchSession;
use stopline_core::ops::BlockScope;
use stopline_core::worker::{WorkerRegistration, WorkerState};
use stopline_core::{Decision, Level, Mode, RefusalCode, Scope, TaskClass};
use stopline_store::ops::OpOwner;
use stopline_store::{EngageRequest, OwnerPlane, Store};
use stopline_token::{Claims, VerifyingKey};

/// What one process does.
#[derive(Debug, Clone)]
pub enum ProcSpec {
    /// `Store::engage`.
    Engage(EngageRequest),
    /// `Store::recover_apply` of a plan recorded in the setup.
    RecoverApply {
        /// The plan id.
        plan: String,
    },
    /// The owner console's `recover plan` then `recover apply`, both raced.
    RecoverPlanApply {
        /// The scope to recover.
        scope: Scope,
    },
    /// `Store::disengage`.
    Disengage {
        /// The scope whose halts are lifted.
        scope: Scope,
    },
    /// `Store::revoke_token` (`stopline token revoke`): an epoch advance of a `token:` scope.
    Revoke {
        /// The `token:<jti>[+delegates]` scope.
        scope: Scope,
    },
    /// `stopline token revoke` with one live gateway (docs/reference.md §3, §9
    /// "Acknowledgements"): the gateway's view is the one it read before the revoke began (its
    /// last refresh), then `Store::revoke_token`, then the gateway's acknowledgement step — a
    /// read begun after the request, acknowledged when it holds the scope's new revision (or
    /// closes every gate) — and the revoke answers; then the gateway decides the gate's token
    /// from the view it holds. Crashed and killed at every step like any process.
    RevokeAcked {
        /// The `token:<jti>[+delegates]` scope.
        scope: Scope,
        /// The gate's token.
        token: String,
        /// The control plane's public key.
        key: VerifyingKey,
        /// `stopline_token::verify`'s answer, kept after the first run (as a gate's).
        verified: Arc<OnceLock<Result<Claims, String>>>,
    },
    /// `Store::drain`.
    Drain {
        /// Seconds.
        deadline_s: u64,
    },
    /// A gateway's governed call, journaled as the gateway does (docs/reference.md §8): `prepared`
    /// (fsynced), `dispatched`, and once the exchange ends — cut at a stop or not, its agent
    /// answered or gone — its outcome, or `in_doubt` when a cut exchange gave none in time.
    Operation {
        /// `mcp:<server>:<tool>` or `model:<model>`.
        target: String,
        /// The acting agent.
        agent: String,
        /// The root of its delegation chain.
        root: String,
        /// How the exchange ends.
        answer: OpAnswer,
    },
    /// A gateway preparing several operations at once through its journal's group commit
    /// (`OpsJournal::prepare_batch`: one batch, one append, one fsync); it returns as the
    /// gateway would dispatch them — once the journal says every `prepared` record is durable.
    PrepareBatch {
        /// `mcp:<server>:<tool>` targets, one operation each.
        targets: Vec<String>,
        /// The acting agent.
        agent: String,
        /// The root of its delegation chain.
        root: String,
    },
    /// A gateway preparing operations one after the other (one batch each), going on to the
    /// next when one fails (its call is refused, never dispatched): what it does on a disk
    /// that fills and empties (docs/reference.md §5).
    PrepareEach {
        /// `mcp:<server>:<tool>` targets, one operation each, in order.
        targets: Vec<String>,
        /// The acting agent.
        agent: String,
        /// The root of its delegation chain.
        root: String,
    },
    /// A reader that takes the WAL's shared lock and stalls forever holding it (a gateway
    /// frozen by SIGSTOP in the middle of a read): the lock is never released while the
    /// machine runs.
    StalledReader,
    /// Another process finishing deferred records (`Store::finish_deferred`, a gateway's
    /// periodic reload or `status`).
    FinishDeferred,
    /// A gateway's journal upkeep (`Ops::snapshot_journals`, also `stopline ops
    /// compact`): every operation journal's open-set snapshot rewritten at its end.
    CompactOps,
    /// A gateway's archive upkeep (`Ops::archive_gone_journals`, also `stopline ops
    /// compact`): the journals of writers that are gone leave `ops/` for `ops/archive/`.
    ArchiveOps,
    /// A gateway's reservation on a budget limit (`SpendJournal::lock`, which compacts the gone
    /// writers' journals it finds, then `SpendLock::reserved`, fsynced): `amount` tool calls on
    /// the account `t`.
    ReserveSpend {
        /// The reserved bound.
        amount: u64,
    },
    /// A reader of a distributed plane (a gateway's watch, the CLI) that read the plane at WAL
    /// `wal_seq` and epoch `epoch_seq` and is about to act on it: `Marks::hold` under
    /// [`PLANE_PREFIX`], which raises this host's high-water marks durably first, or refuses a
    /// plane below them.
    ReadPlane {
        /// The plane's WAL seq as read.
        wal_seq: u64,
        /// The plane's epoch as read.
        epoch_seq: u64,
    },
    /// A gateway's spend upkeep (`Spend::compact_journals`, also `stopline ops compact`).
    CompactSpend,
    /// A fresh reader's look at the spending journals (a new gateway's first reservation
    /// decides on it): what it counts on the account `t`, spent and in flight.
    LookSpend,
    /// A breaker trip's evidence record (`Evidence::append`, as `stopline_control::trip`
    /// files it), its field `n` naming it.
    AppendEvidence {
        /// The record's name in the judgment.
        n: u64,
    },
    /// A drill's record (`Evidence::append` of a `control-observation.v1`, as `stopline
    /// drill` files it) of harness version `h`, its field `n` naming it.
    AppendDrill {
        /// The record's name in the judgment.
        n: u64,
        /// Its `pass`.
        pass: bool,
    },
    /// `stopline run`'s drill gate (and `GET /v1/drills`): `Evidence::drills`, which
    /// builds the drill index of an older home.
    DrillGate,
    /// `stopline run`'s store steps for one worker, in order: `Runs::begin_run` (the entry in
    /// `runs.live/`, then the card and run record), the registration `running` (the agent was
    /// started once `begin_run` returned), the registration `exited` (its end observed), then
    /// `Runs::end_run`.
    Supervise {
        /// The run.
        run: String,
        /// The agent.
        agent: String,
    },
    /// An engage's reach (and `status`, the owner console's pid list): the registrations of
    /// what may be live, `Runs::live_worker_registrations`.
    Reach,
    /// The census of `runs.live/` by the store's rule (`Runs::retire_finished_live_runs`, run
    /// by `status` and by every `stopline run`).
    RetireLiveRuns,
    /// A gateway admission: `Store::load_view`, verify the token, `ControlView::decide`.
    /// A *staged* gate first reads `latches.staging/` (`Latches::staged`) and decides from
    /// the admission view that counts what parses there (`stopline_core::staged`), as a
    /// gateway does (docs/reference.md §5, "The gate closes before the disk answers").
    Admission {
        /// The token minted at e0.
        token: String,
        /// The control plane's public key.
        key: VerifyingKey,
        /// `stopline_token::verify`'s answer, kept after the first run: verification is a pure
        /// function of token, key and clock, and re-running it in every replay of the gate
        /// would cost more than the rest of the search.
        verified: Arc<OnceLock<Result<Claims, String>>>,
        /// True for a gate that counts staged latches for admission.
        staged: bool,
    },
}

/// How an [`ProcSpec::Operation`]'s exchange ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpAnswer {
    /// The upstream answered (after a cut or not): the outcome is recorded `committed`.
    Committed,
    /// The exchange was cut and the upstream gave no outcome within `cut_outcome_wait_s`.
    NoAnswerInTime,
}

/// The engage request a scenario uses.
pub fn engage(scope: Scope, level: Level, by: &str) -> EngageRequest {
    EngageRequest {
        scope,
        level,
        by: by.into(),
        reason: "model check".into(),
        session: LatchSession {
            bound: None,
            root: None,
            tier: "monitor".into(),
        },
    }
}

/// What a process returned, reduced to what the properties judge.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Engage returned Ok.
    Engaged {
        /// `latches/<file>` of the latch that stands.
        file: String,
        /// Its scope (stored form).
        scope: String,
        /// Its level.
        level: Level,
        /// The epoch the engage reported, if any.
        epoch_seq: Option<u64>,
        /// True when this engage itself advanced the epoch (emergency, not coalesced, no
        /// `epoch_or_wal_failed` warning).
        advanced: bool,
        /// True when its WAL record (and epoch advance) was left to the next process
        /// (`wal_deferred`).
        deferred: bool,
    },
    /// The stalled reader holds its lock for good.
    Stalled,
    /// `finish_deferred` returned Ok.
    Finished,
    /// `snapshot_ops_journals` returned without an error.
    Compacted,
    /// A reservation returned Ok: it is durable, and its call may be dispatched.
    Reserved {
        /// Its bound.
        amount: u64,
    },
    /// The drill gate answered (or refused).
    DrillsRead,
    /// A reader of the plane was allowed to act on what it read (its marks are durable).
    PlaneActed {
        /// The WAL seq it acted on.
        wal_seq: u64,
        /// The epoch it acted on.
        epoch_seq: u64,
    },
    /// A fresh reader's look at the spending returned Ok.
    SpendLooked {
        /// What it counted on `t`, spent and in flight (whole tool calls).
        spent: u64,
    },
    /// `append_evidence` returned Ok: the record is acknowledged.
    Filed {
        /// Its `n`.
        n: u64,
    },
    /// Recover apply returned Ok.
    Recovered {
        /// The receipt's `recovered`.
        recovered: bool,
        /// The epoch it minted.
        new_epoch: u64,
        /// Latch files it moved.
        cleared: Vec<String>,
    },
    /// Disengage returned Ok.
    Disengaged {
        /// Latch files it removed.
        cleared: Vec<String>,
    },
    /// Drain returned Ok.
    Drained,
    /// A revocation returned Ok: it is durable.
    Revoked {
        /// The scope it advanced.
        scope: Scope,
        /// The epoch after it.
        new_epoch: u64,
    },
    /// A [`ProcSpec::RevokeAcked`] answered: the revocation is durable and its gateway was asked.
    RevokeAnswered {
        /// The scope it advanced.
        scope: Scope,
        /// The epoch after it.
        new_epoch: u64,
        /// True when the gateway acknowledged the revision.
        acknowledged: bool,
        /// The gateway's decision for the gate's token from the view it holds after answering.
        decision: Decision,
        /// Its refusal code, if any.
        code: Option<RefusalCode>,
        /// True when a fault closes that gateway's gates.
        faulted: bool,
    },
    /// An operation's journal steps returned Ok.
    Operated {
        /// Its target.
        target: String,
        /// True when its outcome was recorded (false: recorded in doubt).
        resolved: bool,
    },
    /// `prepare_batch` returned Ok: every one of these operations may now be dispatched.
    Prepared {
        /// Their targets.
        targets: Vec<String>,
    },
    /// A [`ProcSpec::PrepareEach`] returned: the operations whose prepared record the journal
    /// reported durable (dispatchable), and those whose prepare failed (refused).
    PreparedEach {
        /// Reported durable.
        durable: Vec<String>,
        /// Failed.
        failed: Vec<String>,
    },
    /// A supervised run's store steps all returned Ok.
    Supervised,
    /// A reach returned: `<run>/<agent>` of every registration it found not finished.
    Reached {
        /// The workers it would reach.
        workers: Vec<String>,
    },
    /// A gate decided.
    Admitted {
        /// allow / queue / block.
        decision: Decision,
        /// The refusal code, if any.
        code: Option<RefusalCode>,
        /// The subject's mode in the view.
        mode: Mode,
        /// The view's epoch, when the view trusted it.
        epoch_seq: Option<u64>,
        /// True when a fault closed the gate.
        faulted: bool,
        /// A staged gate's decision from the durable view alone (`None`: not a staged gate).
        without_staged: Option<Decision>,
        /// The latch files the gate would acknowledge and report (its durable view's).
        reported: Vec<String>,
    },
    /// The process was killed before it returned (the machine kept running).
    Killed,
    /// The call returned an error.
    Failed {
        /// Its code.
        code: String,
    },
}

impl ProcSpec {
    /// A short label for reports.
    pub fn label(&self) -> String {
        match self {
            ProcSpec::Engage(r) => format!("engage({}, {})", r.scope, r.level),
            ProcSpec::RecoverApply { .. } => "recover apply".into(),
            ProcSpec::RecoverPlanApply { scope } => format!("recover plan+apply({scope})"),
            ProcSpec::Disengage { scope } => format!("disengage({scope})"),
            ProcSpec::Drain { deadline_s } => format!("drain({deadline_s}s)"),
            ProcSpec::Revoke { scope } => format!("token revoke({scope})"),
            ProcSpec::RevokeAcked { scope, .. } => {
                format!("token revoke({scope}) with a live gateway's acknowledgement")
            }
            ProcSpec::Operation {
                target,
                agent,
                answer,
                ..
            } => format!("operation({target} by {agent}, {answer:?})"),
            ProcSpec::PrepareBatch { targets, agent, .. } => {
                format!("prepare batch({} by {agent})", targets.join(", "))
            }
            ProcSpec::PrepareEach { targets, agent, .. } => {
                format!("prepare each({} by {agent})", targets.join(", "))
            }
            ProcSpec::Admission { staged: false, .. } => "gateway admission".into(),
            ProcSpec::Admission { staged: true, .. } => {
                "gateway admission counting staged latches".into()
            }
            ProcSpec::StalledReader => "reader stalled holding the WAL lock".into(),
            ProcSpec::FinishDeferred => "finish deferred records".into(),
            ProcSpec::CompactOps => "compact the operation journals".into(),
            ProcSpec::ArchiveOps => "archive the journals of gone writers".into(),
            ProcSpec::AppendEvidence { n } => format!("append evidence record {n}"),
            ProcSpec::AppendDrill { n, pass } => format!("file drill {n} (pass {pass})"),
            ProcSpec::DrillGate => "read the drills (the drill gate)".into(),
            ProcSpec::ReadPlane { wal_seq, epoch_seq } => {
                format!("read the plane at WAL {wal_seq}, epoch {epoch_seq}, then act")
            }
            ProcSpec::Supervise { run, agent } => format!("supervise run {run} agent {agent}"),
            ProcSpec::Reach => "an engage's reach (runs.live/)".into(),
            ProcSpec::RetireLiveRuns => "retire finished runs.live/ entries".into(),
            ProcSpec::ReserveSpend { amount } => format!("reserve {amount} on a budget limit"),
            ProcSpec::CompactSpend => "compact the gone writers' spending journals".into(),
            ProcSpec::LookSpend => "a fresh reader's look at the spending".into(),
        }
    }

    /// Run the real store call.
    pub fn run(&self, store: &Store) -> Outcome {
        let failed = |e: stopline_store::StoreError| Outcome::Failed {
            code: e.code().to_string(),
        };
        match self {
            ProcSpec::Engage(request) => match store.engage(request) {
                Ok(out) => Outcome::Engaged {
                    file: out.latch.file_name(),
                    scope: out.latch.scope.to_string(),
                    level: out.latch.level,
                    epoch_seq: out.epoch_seq,
                    advanced: out.latch.level == Level::Emergency
                        && !out.coalesced
                        && !out.wal_deferred
                        && !out
                            .warnings
                            .iter()
                            .any(|w| w.starts_with("epoch_or_wal_failed")),
                    deferred: out.wal_deferred,
                },
                Err(e) => failed(e),
            },
            ProcSpec::RecoverApply { plan } => match store.recover_apply(plan, "operator") {
                Ok(r) => Outcome::Recovered {
                    recovered: r.recovered,
                    new_epoch: r.new_epoch,
                    cleared: r.cleared,
                },
                Err(e) => failed(e),
            },
            ProcSpec::RecoverPlanApply { scope } => {
                let census = store.ops().census();
                let plan = match store.recover_plan(scope, "model check", "operator", &census) {
                    Ok(plan) => plan.plan,
                    Err(e) => return failed(e),
                };
                match store.recover_apply(&plan, "operator") {
                    Ok(r) => Outcome::Recovered {
                        recovered: r.recovered,
                        new_epoch: r.new_epoch,
                        cleared: r.cleared,
                    },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::Disengage { scope } => {
                match store.disengage(scope, "model check", "operator") {
                    Ok(r) => Outcome::Disengaged { cleared: r.cleared },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::Revoke { scope } => {
                match store.revoke_token(scope, "operator", "model check") {
                    Ok(epoch) => Outcome::Revoked {
                        scope: scope.clone(),
                        new_epoch: epoch.seq,
                    },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::RevokeAcked {
                scope,
                token,
                key,
                verified,
            } => revoke_acked(store, scope, token, key, verified),
            ProcSpec::Drain { deadline_s } => {
                match store.drain(*deadline_s, "model check", "operator") {
                    Ok(_) => Outcome::Drained,
                    Err(e) => failed(e),
                }
            }
            ProcSpec::Operation {
                target,
                agent,
                root,
                answer,
            } => {
                let owner = OpOwner {
                    agent: Some(agent.clone()),
                    root: Some(root.clone()),
                    blocks: BlockScope::Agent,
                };
                let steps = || -> Result<(), stopline_store::StoreError> {
                    let journal = store.ops().journal("gateway")?;
                    let op = journal.prepare_for(target, &owner, Some("1"))?;
                    journal.dispatched(&op)?;
                    match answer {
                        OpAnswer::Committed => journal.outcome(&op, "committed"),
                        OpAnswer::NoAnswerInTime => journal
                            .in_doubt(&op, "cut at a stop; no outcome within cut_outcome_wait_s"),
                    }
                };
                match steps() {
                    Ok(()) => Outcome::Operated {
                        target: target.clone(),
                        resolved: *answer == OpAnswer::Committed,
                    },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::PrepareBatch {
                targets,
                agent,
                root,
            } => {
                let owner = OpOwner {
                    agent: Some(agent.clone()),
                    root: Some(root.clone()),
                    blocks: BlockScope::Agent,
                };
                let batch: Vec<(&str, &OpOwner, Option<&str>)> = targets
                    .iter()
                    .map(|t| (t.as_str(), &owner, Some("1")))
                    .collect();
                let prepared = store
                    .ops()
                    .journal("gateway")
                    .and_then(|journal| journal.prepare_batch(&batch));
                match prepared {
                    Ok(_) => Outcome::Prepared {
                        targets: targets.clone(),
                    },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::PrepareEach {
                targets,
                agent,
                root,
            } => {
                let owner = OpOwner {
                    agent: Some(agent.clone()),
                    root: Some(root.clone()),
                    blocks: BlockScope::Agent,
                };
                let journal = match store.ops().journal("gateway") {
                    Ok(journal) => journal,
                    Err(e) => return failed(e),
                };
                let (mut durable, mut refused) = (Vec::new(), Vec::new());
                for target in targets {
                    match journal.prepare_for(target, &owner, Some("1")) {
                        Ok(_) => durable.push(target.clone()),
                        Err(_) => refused.push(target.clone()),
                    }
                }
                Outcome::PreparedEach {
                    durable,
                    failed: refused,
                }
            }
            ProcSpec::Admission {
                token,
                key,
                verified,
                staged,
            } => admit(store, token, key, verified, *staged),
            ProcSpec::StalledReader => {
                match store.fs().lock(&store.layout().wal(), false, false, None) {
                    // Never released: the holder is frozen for as long as the machine runs.
                    Ok(guard) => std::mem::forget(guard),
                    Err(e) => {
                        return Outcome::Failed {
                            code: e.to_string(),
                        }
                    }
                }
                Outcome::Stalled
            }
            ProcSpec::FinishDeferred => match store.finish_deferred() {
                Ok(_) => Outcome::Finished,
                Err(e) => failed(e),
            },
            ProcSpec::ArchiveOps => {
                let report = store
                    .ops()
                    .archive_gone_journals(stopline_store::ops_archive::GoneJournals::Archive);
                if report.errors.is_empty() {
                    Outcome::Compacted
                } else {
                    Outcome::Failed {
                        code: report.errors.join("; "),
                    }
                }
            }
            ProcSpec::AppendEvidence { n } => {
                match store.evidence().append("breaker", evidence_record(*n)) {
                    Ok(_) => Outcome::Filed { n: *n },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::AppendDrill { n, pass } => {
                match store.evidence().append(
                    stopline_store::evidence::drills::DRILL_SCHEMA,
                    drill_record(*n, *pass),
                ) {
                    Ok(_) => Outcome::Filed { n: *n },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::ReadPlane { wal_seq, epoch_seq } => {
                match store.marks().hold(PLANE_PREFIX, *wal_seq, *epoch_seq) {
                    Ok(()) => Outcome::PlaneActed {
                        wal_seq: *wal_seq,
                        epoch_seq: *epoch_seq,
                    },
                    Err(refusal) => Outcome::Failed {
                        code: refusal.code.to_string(),
                    },
                }
            }
            ProcSpec::DrillGate => {
                // A refusal is an answer too; the restart judges what the index then says.
                let _ = store.evidence().drill_summary();
                Outcome::DrillsRead
            }
            ProcSpec::ReserveSpend { amount } => {
                let reserved = store.spend().journal("gateway").and_then(|journal| {
                    let lock = journal.lock()?;
                    lock.reserved(&[SPEND_ACCOUNT.to_string()], &tool_calls(*amount))
                });
                match reserved {
                    Ok(_) => Outcome::Reserved { amount: *amount },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::LookSpend => {
                let looked = store.spend().journal("reader").and_then(|journal| {
                    let lock = journal.lock()?;
                    let kind = stopline_core::budget::BudgetKind::ToolCalls;
                    let of =
                        |m: &std::collections::BTreeMap<String, stopline_core::budget::Budgets>| {
                            m.get(SPEND_ACCOUNT)
                                .and_then(|b| b.get(&kind))
                                .copied()
                                .unwrap_or(0.0)
                        };
                    let seen = lock.elsewhere();
                    Ok((of(&seen.used) + of(&seen.in_flight)).round() as u64)
                });
                match looked {
                    Ok(spent) => Outcome::SpendLooked { spent },
                    Err(e) => failed(e),
                }
            }
            ProcSpec::CompactSpend => {
                let report = store
                    .spend()
                    .compact_journals(stopline_store::ops_archive::GoneJournals::Archive);
                if report.errors.is_empty() {
                    Outcome::Compacted
                } else {
                    Outcome::Failed {
                        code: report.errors.join("; "),
                    }
                }
            }
            ProcSpec::Supervise { run, agent } => {
                let steps = || -> Result<(), stopline_store::StoreError> {
                    let entry = serde_json::json!({"project": "/project"});
                    let card = serde_json::json!({"schema": "policy-card.v1", "run_id": run});
                    let record = run_record(run, agent);
                    let live = store
                        .runs()
                        .begin_run(run, agent, 4242, &entry, &card, &record)?;
                    let entry = live.as_ref().map(|l| l.file.clone());
                    for state in ["running", "exited"] {
                        let registration = worker_registration(run, agent, state, entry.as_deref());
                        store.runs().register_worker(run, agent, &registration)?;
                    }
                    match live {
                        Some(live) => store.runs().end_run(&live),
                        None => Ok(()),
                    }
                };
                match steps() {
                    Ok(()) => Outcome::Supervised,
                    Err(e) => failed(e),
                }
            }
            ProcSpec::Reach => Outcome::Reached {
                workers: reached(store),
            },
            ProcSpec::RetireLiveRuns => {
                let retired = store.runs().retire_finished_live_runs();
                if retired.errors.is_empty() {
                    Outcome::Compacted
                } else {
                    Outcome::Failed {
                        code: retired.errors.join("; "),
                    }
                }
            }
            ProcSpec::CompactOps => match store.ops().snapshot_journals(1) {
                (_, errors) if errors.is_empty() => Outcome::Compacted,
                (_, errors) => Outcome::Failed {
                    code: errors.join("; "),
                },
            },
        }
    }
}

/// The account every spending scenario draws on.
pub const SPEND_ACCOUNT: &str = "t";

/// The prefix of the distributed plane the `plane-marks` scenario's readers read.
pub const PLANE_PREFIX: &str = "/plane";

/// The plane as a restart finds it in the `plane-marks` scenario: the WAL where it stood, the
/// epoch gone back to 1 (an old `epoch.json` restored). Any reader that acted on a higher epoch
/// before must refuse it.
pub const PLANE_WENT_BACK: (u64, u64) = (3, 1);

/// `n` tool calls, as a reservation's bound or what it used.
pub fn tool_calls(n: u64) -> stopline_core::budget::Budgets {
    [(stopline_core::budget::BudgetKind::ToolCalls, n as f64)].into()
}

/// A run record as the supervisor writes it before its agent starts.
pub fn run_record(run: &str, agent: &str) -> stopline_core::run_record::RunRecord {
    use stopline_core::run_record::{Begun, GatewayRecord, RunRecord};
    RunRecord::begun(Begun {
        run_id: run.into(),
        agent: agent.into(),
        harness_version: "harness".into(),
        command: vec!["agent".into()],
        project: "/project".into(),
        user: None,
        uid: None,
        unconfined: true,
        net: "host".into(),
        gateway: GatewayRecord {
            url: "http://127.0.0.1:8700".into(),
            addr: "127.0.0.1:8700".into(),
            config_sha256: None,
            config_hash_source: "unknown".into(),
        },
        gateway_config_sha256: None,
        supervisor_pid: 4242,
        started_at: "2026-12-07T00:00:00.000Z".into(),
    })
}

/// A worker registration as the supervisor writes it (the fields the readers look at).
pub fn worker_registration(
    run: &str,
    agent: &str,
    state: &str,
    live_entry: Option<&str>,
) -> WorkerRegistration {
    let mut registration = WorkerRegistration::new(run, agent, WorkerState::named(state));
    registration.project = Some("/project".into());
    registration.supervisor_pid = Some(4242);
    registration.live_entry = live_entry.map(str::to_string);
    registration
}

/// `<run>/<agent>` of every registration `Runs::live_worker_registrations` returns that is not
/// finished, in order; an error (a hole) is `?`.
pub fn reached(store: &Store) -> Vec<String> {
    let mut workers: Vec<String> = store
        .runs()
        .live_worker_registrations()
        .into_iter()
        .map(|found| match found {
            Ok(r) if r.finished() => String::new(),
            Ok(r) => format!("{}/{}", r.run, r.agent),
            Err(_) => "?".into(),
        })
        .filter(|w| !w.is_empty())
        .collect();
    workers.sort();
    workers.dedup();
    workers
}

/// The drill record a scenario files as `n`: harness version `h`, `pass`.
pub fn drill_record(n: u64, pass: bool) -> serde_json::Map<String, serde_json::Value> {
    stopline_store::chain::fields([
        (
            "schema",
            serde_json::json!(stopline_store::evidence::drills::DRILL_SCHEMA),
        ),
        ("harness_version", serde_json::json!("h")),
        ("pass", serde_json::json!(pass)),
        ("n", serde_json::json!(n)),
    ])
}

/// The evidence record a scenario files as `n`.
pub fn evidence_record(n: u64) -> serde_json::Map<String, serde_json::Value> {
    stopline_store::chain::fields([
        ("schema", serde_json::json!("evidence-record.v1")),
        ("agent", serde_json::json!("worker")),
        ("n", serde_json::json!(n)),
    ])
}

/// The gateway's admission of one noncritical call with `token` (docs/reference.md §3 check, §5).
/// [`ProcSpec::RevokeAcked`]: the gateway's view before, the revoke, the acknowledgement step,
/// the gateway's decision.
fn revoke_acked(
    store: &Store,
    scope: &Scope,
    token: &str,
    key: &VerifyingKey,
    verified: &OnceLock<Result<Claims, String>>,
) -> Outcome {
    // The view the live gateway holds when the revoke begins.
    let mut held = store.load_view();
    let epoch = match store.revoke_token(scope, "operator", "model check") {
        Ok(epoch) => epoch,
        Err(e) => {
            return Outcome::Failed {
                code: e.code().to_string(),
            }
        }
    };
    let revision = epoch.revision(scope);
    // The acknowledgement step (`AckServer::acknowledge_epoch`): a read begun after the
    // request; acknowledged once it holds the revision or closes every gate, and then it is
    // the view the gateway decides from.
    #[cfg(feature = "planted-bugs")]
    let answers_first =
        store.planted() == stopline_store::planted::PlantedBug::RevokeAnswersBeforeAcks;
    #[cfg(not(feature = "planted-bugs"))]
    let answers_first = false;
    let acknowledged = if answers_first {
        // The planted bug: the revoke answers as acknowledged without the gateway's read.
        true
    } else {
        let fresh = store.load_view();
        let holds = fresh.epoch.holds(&scope.to_string(), revision) || !fresh.faults.is_empty();
        if holds {
            held = fresh;
        }
        holds
    };
    let now_ms = store.now_ms();
    let verify =
        || stopline_token::verify(key, token, now_ms / 1000).map_err(|e| e.code().to_string());
    let claims = match verified.get_or_init(verify) {
        Ok(claims) => claims.clone(),
        Err(code) => return Outcome::Failed { code: code.clone() },
    };
    let receipt = held.decide(
        &claims.subject(),
        TaskClass::Noncritical,
        Some(claims.authority()),
        None,
        now_ms,
    );
    Outcome::RevokeAnswered {
        scope: scope.clone(),
        new_epoch: epoch.seq,
        acknowledged,
        decision: receipt.decision,
        code: receipt.code,
        faulted: !held.faults.is_empty(),
    }
}

fn admit(
    store: &Store,
    token: &str,
    key: &VerifyingKey,
    verified: &OnceLock<Result<Claims, String>>,
    staged: bool,
) -> Outcome {
    let now_ms = store.now_ms();
    // A staged gate reads `latches.staging/` before the view, as the gateway's watch does on
    // the staging write's event, before its read of `latches/`.
    let bodies = staged.then(|| store.latches().staged(&Default::default()).1);
    let mut view = store.load_view();
    let verify =
        || stopline_token::verify(key, token, now_ms / 1000).map_err(|e| e.code().to_string());
    let claims = match verified.get_or_init(verify) {
        Ok(claims) => claims.clone(),
        Err(code) => return Outcome::Failed { code: code.clone() },
    };
    if claims.epoch > view.epoch.seq {
        // As the gateway does: a token minted a moment ago is not refused as future.
        view = store.load_view();
    }
    let subject = claims.subject();
    let decide = |view: &stopline_core::ControlView| {
        view.decide(
            &subject,
            TaskClass::Noncritical,
            Some(claims.authority()),
            None,
            now_ms,
        )
    };
    let durable = decide(&view);
    let (receipt, without_staged) = match bodies {
        None => (durable, None),
        Some(bodies) => {
            let mut staged = stopline_core::staged::StagedLatches::default();
            for body in bodies {
                staged.stage(body, &view, now_ms);
            }
            staged.settle(&view, now_ms);
            let receipt = staged
                .admission_view(&view)
                .map_or_else(|| durable.clone(), |admission| decide(&admission));
            (receipt, Some(durable.decision))
        }
    };
    let epoch_fault = view.faults.iter().any(|f| {
        matches!(
            f.code,
            RefusalCode::ControlEpochUnconfirmed
                | RefusalCode::ControlWalCorrupt
                | RefusalCode::ControlIo
        )
    });
    Outcome::Admitted {
        decision: receipt.decision,
        code: receipt.code,
        mode: view.mode_for(&subject),
        epoch_seq: (!epoch_fault).then_some(view.epoch.seq),
        faulted: !view.faults.is_empty(),
        without_staged,
        reported: view.latches.iter().map(|l| l.file.clone()).collect(),
    }
}
