//! The protocol properties and the obligations each observation must meet.
//!
//! An *observation* is what a gate sees: a racing admission (at its return), the control
//! directory when every process has returned, or the directory after a crash and restart.
//! Every process that returned before the observation began leaves obligations on it:
//! an engage that returned Ok must still have its latch in `latches/` and keep the subject at
//! or above its level (unless a disengage lifted that halt afterwards); an emergency engage or a
//! recovery of a covering scope must make the token minted at e0 stale; an epoch that was
//! returned or seen must not be undercut.

use crate::protocol::process::Outcome;
use crate::protocol::scenario::{GateExpectation, Scenario};
use std::collections::BTreeSet;
use stopline_core::{Decision, Level, RefusalCode, Scope};

/// The properties of docs/reference.md §11 (and the absence of deadlock the search needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Property {
    /// An engage that returned Ok keeps its latch in `latches/`, crash or not.
    StopWins,
    /// No `recovered: true` over a covering latch; no allow after a covering engage returned.
    NoFalseAllClear,
    /// After an emergency engage or a covering recovery returned, the e0 token is refused.
    NoPreStopAuthority,
    /// No observation (after restart and repair) holds an epoch below one already returned.
    EpochsNeverGoBack,
    /// An engage never lowers a subject's mode (and never removes a latch).
    EngageNeverLowers,
    /// Every schedule runs to completion.
    NoDeadlock,
    /// Every latch a recovery cleared has its `latch_engaged` (and, for an emergency, its
    /// epoch advance) in the WAL before the recovery's record (docs/reference.md §5: recovery records a
    /// deferred engage before it clears).
    EveryStopOnRecord,
    /// Stronger than docs/reference.md §11 (a finding, not a gate): an epoch a gate has already judged by,
    /// or a receipt reported without advancing it, is still there after a crash and restart.
    GateEpochsSurvive,
    /// Stronger than docs/reference.md §11 (a finding): a latch a recovery reported cleared is still kept,
    /// as evidence, under `breakglass.cleared/epoch-<N>/` after a crash.
    ClearedEvidenceSurvives,
    /// Stronger than docs/reference.md §11 (a finding): an emergency engage that returned Ok (and was not
    /// coalesced) also advanced its scope's epoch, rather than reporting a warning.
    EmergencyAdvances,
    /// docs/reference.md §8: an operation whose outcome was recorded is never in doubt, crash or not.
    OpsInDoubtOnlyWhenUnknown,
    /// docs/reference.md §8: an operation in doubt blocks its own agent's chain on its target and nobody
    /// else (a model request: nobody at all), crash or not.
    DoubtBlocksOnlyItsAgent,
    /// docs/reference.md §8 with group commit: a `prepared` record the journal reported durable (so its call
    /// may be dispatched) is in the registry after any crash; nothing is dispatched on a record
    /// a crash can lose.
    PreparedSurvives,
    /// An evidence record whose append returned is in the log after any crash, the
    /// chain verifies across every segment, and the next append after the crash lands on it.
    EvidenceKept,
    /// After any crash the spending journals and `spend/settled.json` count every
    /// reservation that returned (and no journal twice: never more than was ever reserved),
    /// and the next reservation lands and is counted once.
    SpendKept,
    /// Every supervised worker that may be running is in an engage's reach (the
    /// registrations read through `runs.live/`), during a run's start and end and after any
    /// crash: no live worker is left out.
    LiveWorkersReached,
    /// After any crash the drill gate (the drill index, `Evidence::drills`)
    /// answers what a full read of the durable log answers — the same drills, the same last
    /// `pass` per harness version; never a pass the log does not give, never a refusal of a log
    /// that verifies.
    DrillGateAsTheLog,
    /// (docs/reference.md §5): on a disk that fills, a journal record is readable once and only
    /// once it is durable — a `prepared` record the journal reported durable is in the
    /// registry, one whose append failed is not, crash or not, and no line of the journal is
    /// torn in its middle.
    RecordReadableIffDurable,
    /// A plane below this host's high-water marks closes the gates (docs/reference.md, "Many
    /// hosts: etcd"): once a reader acted on a plane at some WAL and epoch, a plane read later
    /// below either — after any crash — is refused, never acted on.
    PlaneBelowMarksRefused,
    /// docs/reference.md §5, "Bounded tail": folding old revisions out of `epoch.json` never
    /// refuses a live token that no stop revoked (the floor rises only past revisions no live
    /// token can predate: `max_ttl_s` plus the margin).
    FoldSparesLiveAuthority,
    /// docs/reference.md §5, "Revoking one token": once `token revoke` answered, the token it
    /// names (with `--with-delegates`, every token delegated under it) is refused, crash or
    /// not — by every gate that reads the control state, and by every live gateway that
    /// acknowledged the revocation, from the view it holds; a token it does not name is not
    /// refused by it.
    RevokeRefusesOnlyItsTokens,
    /// docs/reference.md §5, "The gate closes before the disk answers": a gate that counts
    /// latches staged in `latches.staging/` never admits what its durable view refuses, and
    /// never acknowledges or reports a latch that was not published in `latches/`.
    StagedOnlyRefusesMore,
}

/// Number of properties and findings.
pub const COUNT: usize = 22;

impl Property {
    /// All of them, in report order.
    pub const ALL: [Property; 19] = [
        Property::StopWins,
        Property::NoFalseAllClear,
        Property::NoPreStopAuthority,
        Property::EpochsNeverGoBack,
        Property::EngageNeverLowers,
        Property::NoDeadlock,
        Property::OpsInDoubtOnlyWhenUnknown,
        Property::DoubtBlocksOnlyItsAgent,
        Property::PreparedSurvives,
        Property::EveryStopOnRecord,
        Property::EvidenceKept,
        Property::SpendKept,
        Property::LiveWorkersReached,
        Property::DrillGateAsTheLog,
        Property::RecordReadableIffDurable,
        Property::PlaneBelowMarksRefused,
        Property::FoldSparesLiveAuthority,
        Property::RevokeRefusesOnlyItsTokens,
        Property::StagedOnlyRefusesMore,
    ];

    /// Findings: checked and reported, but not part of docs/reference.md §11's verdict.
    pub const FINDINGS: [Property; 3] = [
        Property::GateEpochsSurvive,
        Property::ClearedEvidenceSurvives,
        Property::EmergencyAdvances,
    ];

    /// The name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Property::StopWins => "stop wins every race",
            Property::NoFalseAllClear => "no false all-clear",
            Property::NoPreStopAuthority => "no pre-stop authority valid after the stop",
            Property::EpochsNeverGoBack => "epochs never go back across crashes",
            Property::EngageNeverLowers => "engage never lowers a subject's mode",
            Property::NoDeadlock => "every schedule completes (no deadlock)",
            Property::EveryStopOnRecord => {
                "every cleared latch was recorded, with its epoch advance, before it was cleared"
            }
            Property::GateEpochsSurvive => {
                "an epoch a gate judged by or a receipt reported survives a crash"
            }
            Property::EmergencyAdvances => {
                "an emergency engage that returned Ok advanced its epoch"
            }
            Property::ClearedEvidenceSurvives => {
                "a latch a recovery cleared is kept under breakglass.cleared/ across a crash"
            }
            Property::OpsInDoubtOnlyWhenUnknown => {
                "an operation whose outcome was recorded is never in doubt across crashes"
            }
            Property::DoubtBlocksOnlyItsAgent => {
                "an operation in doubt blocks only its own agent (a model request nobody)"
            }
            Property::PreparedSurvives => {
                "a prepared record reported durable (its call dispatchable) survives a crash"
            }
            Property::LiveWorkersReached => {
                "every supervised worker that may be running is in an engage's reach, across crashes"
            }
            Property::EvidenceKept => {
                "an acknowledged evidence record is kept, and the chain stays whole across segments and crashes"
            }
            Property::SpendKept => {
                "spending is never lost nor counted twice across compactions and crashes, and the next reservation lands"
            }
            Property::DrillGateAsTheLog => {
                "after any crash the drill gate answers as a full read of the durable log (never a false pass)"
            }
            Property::RecordReadableIffDurable => {
                "on a disk that fills, a journal record is readable once and only once it is durable"
            }
            Property::PlaneBelowMarksRefused => {
                "a plane below a high-water mark a reader acted on is refused, across crashes"
            }
            Property::FoldSparesLiveAuthority => {
                "folding old epoch revisions refuses no live authority that no stop revoked"
            }
            Property::RevokeRefusesOnlyItsTokens => {
                "after token revoke answers, its token (and, with delegates, theirs) is refused, by every gateway that acknowledged too; no other token is"
            }
            Property::StagedOnlyRefusesMore => {
                "staged latches only refuse more, and are never acknowledged or reported"
            }
        }
    }
}

/// One broken obligation.
#[derive(Debug, Clone)]
pub struct Violation {
    /// Which property.
    pub property: Property,
    /// What happened.
    pub detail: String,
}

/// What one gate saw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observation {
    /// The decision for the e0 token's subject, noncritical.
    pub decision: Decision,
    /// Its code.
    pub code: Option<RefusalCode>,
    /// The subject's mode from the latches.
    pub mode: stopline_core::Mode,
    /// The epoch, when the view trusted it.
    pub epoch_seq: Option<u64>,
    /// True when a fault closed the gate.
    pub faulted: bool,
    /// The entries of `latches/`, when the observation lists them (not for racing gates).
    pub latch_files: Option<Vec<String>>,
    /// `epoch-<N>/<file>` under `breakglass.cleared/`, when the observation lists them.
    pub cleared_files: Option<Vec<String>>,
    /// What the registry says of each racing operation, when the observation reads it (after
    /// a restart and at the end; not for racing gates).
    pub ops: Option<Vec<OpSeen>>,
    /// The evidence log, when the observation reads it (after a restart and at the end of a
    /// scenario that files evidence; not for racing gates).
    pub evidence: Option<EvidenceSeen>,
    /// What the spending journals count, when the observation reads them (after a restart and
    /// at the end of a scenario that reserves; not for racing gates).
    pub spend: Option<SpendSeen>,
    /// `<run>/<agent>` of every worker an engage's reach would find (`?` for a hole), when the
    /// observation reads `runs.live/` (after a restart of a scenario that supervises a run).
    pub reach: Option<Vec<String>>,
    /// The drill gate's answers and a full read's, side by side, when the observation reads
    /// them (after a restart of a scenario that files or reads drills; not for racing gates).
    pub drills: Option<Vec<DrillsSeen>>,
    /// What a reader answers of the plane gone back (`PLANE_WENT_BACK`): acted on, or the
    /// refusal's code (after a restart of a scenario that reads a plane; not for racing gates).
    pub plane: Option<Result<(), String>>,
}

/// What the drills of harness version `h` are, as one reader answers: the last drill's `pass`,
/// whether any passed, how many drills were recorded and the `n` of the newest ones (newest
/// first), or why the reader refuses (`drill_required`).
pub type DrillAnswer = Result<(Option<bool>, bool, u64, Vec<u64>), String>;

/// The drill gate's answer and a full read's, at one moment of a restart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DrillsSeen {
    /// When (`after the crash`, `after one more append`).
    pub when: &'static str,
    /// The drill index's answer (`Evidence::drills`).
    pub gate: DrillAnswer,
    /// The answer of the log read whole and verified (the records pruned with their segments
    /// included: they were read whole before the race).
    pub full: DrillAnswer,
}

/// The spending as a fresh reader finds it: what account `t` has spent, then one more
/// reservation and a count after it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpendSeen {
    /// Spent on `t` (settled and in doubt, in whole tool calls), or why it cannot be read.
    pub spent: Result<u64, String>,
    /// Spent after one more reservation of [`SPEND_PROBE`], or why it was refused.
    pub after_probe: Result<u64, String>,
}

/// The bound of the reservation an observation makes after counting.
pub const SPEND_PROBE: u64 = 16;

/// The evidence log as an observation finds it: read whole, then appended to once, then read
/// whole again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EvidenceSeen {
    /// The `n` of every record of the chain after the probe append, oldest first (empty when it
    /// did not verify).
    pub kept: Vec<u64>,
    /// Why the chain is not whole after the probe append, or why the probe was refused.
    pub fault: Option<String>,
}

/// One racing operation as an observation finds it in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OpSeen {
    /// Its target.
    pub target: String,
    /// True when it is a `model:` operation.
    pub model: bool,
    /// True when its prepared line is in the registry.
    pub recorded: bool,
    /// True when it has an outcome.
    pub resolved: bool,
    /// True when new operations on its target by its own agent are blocked.
    pub agent_blocked: bool,
    /// True when its agent's sub-agents are blocked there.
    pub sub_agent_blocked: bool,
    /// True when a bystander's are.
    pub bystander_blocked: bool,
}

/// Facts the obligations need besides the outcomes.
pub struct Context<'a> {
    /// The scenario.
    pub scenario: &'a Scenario,
    /// Halt latches a disengage recorded as lifted.
    pub disengaged: &'a BTreeSet<String>,
    /// Latch files a plan made during the race fixed (a plan made after a latch may clear it).
    pub planned: &'a BTreeSet<String>,
    /// The supervised workers that may be running at the observation.
    pub live_workers: &'a BTreeSet<String>,
}

/// Count of obligations checked, per property, and what broke.
#[derive(Default)]
pub struct Verdicts {
    /// Obligations checked, indexed by `Property as usize`.
    pub checked: [u64; COUNT],
    /// Broken ones.
    pub violations: Vec<Violation>,
}

impl Verdicts {
    /// Count one obligation of `property`, and a violation described by `detail` unless it
    /// `holds`.
    pub fn judge(&mut self, property: Property, holds: bool, detail: impl FnOnce() -> String) {
        self.checked[property as usize] += 1;
        if !holds {
            self.violations.push(Violation {
                property,
                detail: detail(),
            });
        }
    }
}

/// Judge `seen` against every outcome in `earlier` (processes that returned before it began).
pub fn obligations(
    ctx: &Context<'_>,
    earlier: &[(String, &Outcome)],
    seen: &Observation,
    out: &mut Verdicts,
) {
    let subject = &ctx.scenario.subject;
    let refused = seen.decision == Decision::Block
        && (seen.faulted || seen.code == Some(RefusalCode::StaleControlEpoch));
    let epoch_at_least = |e: u64| seen.epoch_seq.is_none_or(|seq| seq >= e);
    out.judge(
        Property::EpochsNeverGoBack,
        epoch_at_least(ctx.scenario.e0),
        || {
            format!(
                "the gate saw epoch {:?}, below the token's e0 {}",
                seen.epoch_seq, ctx.scenario.e0
            )
        },
    );
    match ctx.scenario.gate {
        GateExpectation::Judged => {}
        // The setup revoked the e0 token (a stop of its agent, then that stop's recovery): no
        // fold may make it good again.
        GateExpectation::Revoked => out.judge(Property::NoPreStopAuthority, refused, || {
            format!(
                "the e0 token, revoked by the setup, got {:?} ({:?})",
                seen.decision, seen.code
            )
        }),
        // The e0 token is alive and named by nothing: every gate that can read the control state
        // allows it. `Unrevoked`: nothing in the scenario revokes it (a fold must spare it).
        // `NotNamed`: a revocation of another token races (it must spare it).
        GateExpectation::Unrevoked | GateExpectation::NotNamed => {
            let (property, why) = if ctx.scenario.gate == GateExpectation::Unrevoked {
                (
                    Property::FoldSparesLiveAuthority,
                    "alive and revoked by nothing",
                )
            } else {
                (
                    Property::RevokeRefusesOnlyItsTokens,
                    "named by no revocation",
                )
            };
            out.judge(
                property,
                seen.faulted || seen.decision == Decision::Allow,
                || {
                    format!(
                        "the e0 token, {why}, got {:?} ({:?})",
                        seen.decision, seen.code
                    )
                },
            )
        }
    }
    for op in seen.ops.iter().flatten() {
        out.judge(
            Property::DoubtBlocksOnlyItsAgent,
            !op.bystander_blocked,
            || {
                format!(
                    "a bystander is blocked on {} by its agent's operation",
                    op.target
                )
            },
        );
        if op.recorded && !op.resolved {
            // A tool operation in doubt blocks its agent's chain; a model request nobody.
            let should_block = !op.model;
            let blocks_its_agent =
                op.agent_blocked == should_block && op.sub_agent_blocked == should_block;
            out.judge(Property::DoubtBlocksOnlyItsAgent, blocks_its_agent, || {
                format!(
                    "the operation on {} is in doubt, yet its agent is {}blocked (sub-agents {}blocked)",
                    op.target,
                    if op.agent_blocked { "" } else { "not " },
                    if op.sub_agent_blocked { "" } else { "not " },
                )
            });
        }
    }
    for (_, outcome) in earlier {
        let Outcome::SpendLooked { spent } = outcome else {
            continue;
        };
        // A look while others reserve (and a live gateway rewrites its journal): the setup's
        // spending, and any of the racing reservations, each once.
        let amounts: Vec<u64> = ctx
            .scenario
            .procs
            .iter()
            .filter_map(|p| match p {
                crate::protocol::process::ProcSpec::ReserveSpend { amount } => Some(*amount),
                _ => None,
            })
            .collect();
        let allowed: Vec<u64> = (0..1u32 << amounts.len())
            .map(|set| {
                crate::protocol::scenario::SPEND_SETUP_TOTAL
                    + amounts
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| set & (1 << i) != 0)
                        .map(|(_, a)| a)
                        .sum::<u64>()
            })
            .collect();
        out.judge(Property::SpendKept, allowed.contains(spent), || {
            format!(
                "a fresh reader's look during the race counted {spent} spent; only {allowed:?} are possible"
            )
        });
    }
    if let Some(spend) = &seen.spend {
        // The setup's spending, every reservation that returned, and any of the others whose
        // line may have become durable before the crash: nothing less (lost), nothing else
        // (the amounts are distinct powers of two, so a journal counted twice is another sum).
        let acknowledged: Vec<u64> = earlier
            .iter()
            .filter_map(|(_, o)| match o {
                Outcome::Reserved { amount } => Some(*amount),
                _ => None,
            })
            .collect();
        let maybe: Vec<u64> = ctx
            .scenario
            .procs
            .iter()
            .filter_map(|p| match p {
                crate::protocol::process::ProcSpec::ReserveSpend { amount } => Some(*amount),
                _ => None,
            })
            .filter(|a| !acknowledged.contains(a))
            .collect();
        let base = crate::protocol::scenario::SPEND_SETUP_TOTAL + acknowledged.iter().sum::<u64>();
        let allowed: Vec<u64> = (0..1u32 << maybe.len())
            .map(|set| {
                base + maybe
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| set & (1 << i) != 0)
                    .map(|(_, a)| a)
                    .sum::<u64>()
            })
            .collect();
        out.judge(
            Property::SpendKept,
            spend.spent.as_ref().is_ok_and(|s| allowed.contains(s)),
            || {
                format!(
                    "a fresh reader counts {:?} spent; only {allowed:?} are possible (the setup's {}, the reservations that returned {acknowledged:?}, perhaps {maybe:?})",
                    spend.spent,
                    crate::protocol::scenario::SPEND_SETUP_TOTAL
                )
            },
        );
        out.judge(
            Property::SpendKept,
            match (&spend.spent, &spend.after_probe) {
                (Ok(before), Ok(after)) => *after == before + SPEND_PROBE,
                _ => false,
            },
            || {
                format!(
                    "the next reservation of {SPEND_PROBE}: {:?} after {:?}",
                    spend.after_probe, spend.spent
                )
            },
        );
    }
    if let Some(reach) = &seen.reach {
        for worker in ctx.live_workers {
            out.judge(Property::LiveWorkersReached, reach.contains(worker), || {
                format!(
                    "{worker} may be running, but the reach after the crash found only {reach:?}"
                )
            });
        }
    }
    for drills in seen.drills.iter().flatten() {
        // Both refuse, or both give the same drills.
        let holds = match (&drills.gate, &drills.full) {
            (Err(_), Err(_)) => true,
            (gate, full) => gate == full,
        };
        out.judge(Property::DrillGateAsTheLog, holds, || {
            format!(
                "{}: the drill gate answers {:?}, a full read of the log {:?}",
                drills.when, drills.gate, drills.full
            )
        });
    }
    if let Some(evidence) = &seen.evidence {
        out.judge(Property::EvidenceKept, evidence.fault.is_none(), || {
            format!(
                "the evidence log after the crash: {}",
                evidence.fault.clone().unwrap_or_default()
            )
        });
    }
    if let Some(plane) = &seen.plane {
        let (wal, epoch) = crate::protocol::process::PLANE_WENT_BACK;
        for (who, outcome) in earlier {
            if let Outcome::PlaneActed { wal_seq, epoch_seq } = outcome {
                out.judge(
                    Property::PlaneBelowMarksRefused,
                    (*wal_seq <= wal && *epoch_seq <= epoch) || plane.is_err(),
                    || {
                        format!(
                            "{who} acted on the plane at WAL {wal_seq}, epoch {epoch_seq}; after it, a plane at WAL {wal}, epoch {epoch} was acted on too"
                        )
                    },
                );
            }
        }
    }
    for (who, outcome) in earlier {
        match outcome {
            Outcome::Filed { n } => {
                if let Some(evidence) = &seen.evidence {
                    out.judge(
                        Property::EvidenceKept,
                        evidence.fault.is_some() || evidence.kept.contains(n),
                        || {
                            format!(
                                "{who} returned Ok, but its record is not in the log {:?}",
                                evidence.kept
                            )
                        },
                    );
                }
            }
            Outcome::Engaged {
                file,
                scope,
                level,
                epoch_seq,
                advanced,
                ..
            } => {
                let lifted = (*level != Level::Emergency && ctx.disengaged.contains(file))
                    || ctx.planned.contains(file);
                let covers = Scope::parse_stored(scope).map_or(true, |s| subject.is_covered_by(&s));
                if let Some(files) = &seen.latch_files {
                    out.judge(Property::StopWins, lifted || files.contains(file), || {
                        format!("{who} returned Ok with {file}, which is not in latches/ {files:?}")
                    });
                }
                if covers && !lifted {
                    out.judge(
                        Property::NoFalseAllClear,
                        seen.decision != Decision::Allow,
                        || {
                            format!(
                                "the gate allowed worker after {who} returned ({file}, {level})"
                            )
                        },
                    );
                    out.judge(
                        Property::EngageNeverLowers,
                        seen.faulted || seen.mode >= level.mode(),
                        || {
                            format!(
                                "worker is {} after {who} returned a {level} latch",
                                seen.mode
                            )
                        },
                    );
                }
                // docs/reference.md §5: a failed advance after containment is a warning, not a failed
                // engage; such an engage (and a coalesced one) revokes nothing itself.
                if covers && *advanced {
                    out.judge(Property::NoPreStopAuthority, refused, || {
                        format!(
                            "the e0 token got {:?} ({:?}) after {who} returned",
                            seen.decision, seen.code
                        )
                    });
                }
                if let Some(e) = epoch_seq {
                    let property = if *advanced {
                        Property::EpochsNeverGoBack
                    } else {
                        Property::GateEpochsSurvive
                    };
                    out.judge(property, epoch_at_least(*e), || {
                        format!(
                            "the gate saw epoch {:?} after {who} returned epoch {e}",
                            seen.epoch_seq
                        )
                    });
                }
            }
            Outcome::Recovered {
                new_epoch, cleared, ..
            } => {
                if let Some(kept) = &seen.cleared_files {
                    let lost: Vec<&String> = cleared
                        .iter()
                        .filter(|f| !kept.contains(&format!("epoch-{new_epoch}/{f}")))
                        .collect();
                    out.judge(Property::ClearedEvidenceSurvives, lost.is_empty(), || {
                        format!("{who} reported {lost:?} cleared; they are not under breakglass.cleared/epoch-{new_epoch}/")
                    });
                }
                let covers = ctx
                    .scenario
                    .plan
                    .as_ref()
                    .is_some_and(|(_, s)| subject.is_covered_by(s));
                if covers {
                    out.judge(Property::NoPreStopAuthority, refused, || {
                        format!(
                            "the e0 token got {:?} ({:?}) after {who} minted epoch {new_epoch}",
                            seen.decision, seen.code
                        )
                    });
                }
                out.judge(
                    Property::EpochsNeverGoBack,
                    epoch_at_least(*new_epoch),
                    || {
                        format!(
                            "the gate saw epoch {:?} after {who} minted epoch {new_epoch}",
                            seen.epoch_seq
                        )
                    },
                );
            }
            Outcome::Revoked { scope, new_epoch } => {
                if subject.is_covered_by(scope) {
                    out.judge(Property::RevokeRefusesOnlyItsTokens, refused, || {
                        format!(
                            "the e0 token got {:?} ({:?}) after {who} revoked {scope} at epoch {new_epoch}",
                            seen.decision, seen.code
                        )
                    });
                }
                out.judge(
                    Property::EpochsNeverGoBack,
                    epoch_at_least(*new_epoch),
                    || {
                        format!(
                            "the gate saw epoch {:?} after {who} advanced to {new_epoch}",
                            seen.epoch_seq
                        )
                    },
                );
            }
            Outcome::RevokeAnswered {
                scope,
                new_epoch,
                acknowledged,
                decision,
                code,
                faulted,
            } => revoke_answered(
                ctx,
                who,
                &RevokeAnswer {
                    scope,
                    new_epoch: *new_epoch,
                    acknowledged: *acknowledged,
                    decision: *decision,
                    code: *code,
                    faulted: *faulted,
                },
                seen,
                out,
            ),
            Outcome::Operated {
                target,
                resolved: true,
            } => {
                if let Some(ops) = &seen.ops {
                    let op = ops.iter().find(|o| &o.target == target);
                    out.judge(
                        Property::OpsInDoubtOnlyWhenUnknown,
                        op.is_some_and(|o| o.resolved && !o.agent_blocked),
                        || format!("{who} recorded its outcome, but the registry now says {op:?}"),
                    );
                }
            }
            Outcome::Prepared { targets } => {
                if let Some(ops) = &seen.ops {
                    for target in targets {
                        let op = ops.iter().find(|o| &o.target == target);
                        out.judge(
                            Property::PreparedSurvives,
                            op.is_some_and(|o| o.recorded),
                            || format!("{who} was told {target}'s prepared record was durable, but the registry now says {op:?}"),
                        );
                    }
                }
            }
            Outcome::PreparedEach { durable, failed } => {
                if let Some(ops) = &seen.ops {
                    for target in durable {
                        let op = ops.iter().find(|o| &o.target == target);
                        out.judge(
                            Property::RecordReadableIffDurable,
                            op.is_some_and(|o| o.recorded),
                            || format!("{who} was told {target}'s prepared record was durable, but the registry cannot read it: {op:?}"),
                        );
                    }
                    for target in failed {
                        let op = ops.iter().find(|o| &o.target == target);
                        out.judge(
                            Property::RecordReadableIffDurable,
                            op.is_none_or(|o| !o.recorded),
                            || format!("{who} was told {target}'s prepare failed, but the registry reads it: {op:?}"),
                        );
                    }
                }
            }
            Outcome::Admitted {
                epoch_seq: Some(e), ..
            } => {
                out.judge(Property::GateEpochsSurvive, epoch_at_least(*e), || {
                    format!(
                        "the gate saw epoch {:?} after {who} had seen epoch {e}",
                        seen.epoch_seq
                    )
                });
            }
            _ => {}
        }
    }
}

/// No false all-clear at a recovery's return: `rescan` is its last listing of `latches/`
/// (or the directory at its return, if it never listed it after its plan was fixed).
pub fn rescan_obligation(
    ctx: &Context<'_>,
    who: &str,
    cleared: &[String],
    rescan: &[String],
    scope_of: &dyn Fn(&str) -> Option<Scope>,
    out: &mut Verdicts,
) {
    let Some((planned, plan_scope)) = &ctx.scenario.plan else {
        return;
    };
    let covering: Vec<&String> = rescan
        .iter()
        .filter(|name| !planned.contains(name) && !ctx.planned.contains(*name))
        .filter(|name| !cleared.contains(name))
        .filter(|name| scope_of(name).is_none_or(|s| s.covers_scope(plan_scope)))
        .collect();
    out.judge(Property::NoFalseAllClear, covering.is_empty(), || {
        format!("{who} reported recovered: true while its rescan saw covering latches {covering:?}")
    });
}

/// What a `token revoke` with a live gateway answered ([`Outcome::RevokeAnswered`]).
pub struct RevokeAnswer<'a> {
    /// The scope it advanced.
    pub scope: &'a Scope,
    /// The epoch after it.
    pub new_epoch: u64,
    /// True when the gateway acknowledged.
    pub acknowledged: bool,
    /// The gateway's decision for the gate's token after the answer.
    pub decision: Decision,
    /// Its refusal code.
    pub code: Option<RefusalCode>,
    /// True when a fault closes that gateway's gates.
    pub faulted: bool,
}

/// The obligations of a `token revoke` that answered after asking a live gateway
/// (docs/reference.md §3): as any revocation's, every gate that reads the control state after
/// it refuses the token it names; and the gateway that acknowledged refuses it from the view it
/// holds, with no read of its own in between (`RevokeRefusesOnlyItsTokens`: an
/// acknowledgement given before its view held the revision is a revoke that answered before
/// its gateways did).
fn revoke_answered(
    ctx: &Context<'_>,
    who: &str,
    answer: &RevokeAnswer<'_>,
    seen: &Observation,
    out: &mut Verdicts,
) {
    let subject = &ctx.scenario.subject;
    let RevokeAnswer {
        scope, new_epoch, ..
    } = answer;
    if !subject.is_covered_by(scope) {
        return;
    }
    let refused = seen.decision == Decision::Block
        && (seen.faulted || seen.code == Some(RefusalCode::StaleControlEpoch));
    out.judge(Property::RevokeRefusesOnlyItsTokens, refused, || {
        format!(
            "the e0 token got {:?} ({:?}) after {who} revoked {scope} at epoch {new_epoch}",
            seen.decision, seen.code
        )
    });
    let gateway_refuses = answer.decision == Decision::Block
        && (answer.faulted || answer.code == Some(RefusalCode::StaleControlEpoch));
    out.judge(
        Property::RevokeRefusesOnlyItsTokens,
        !answer.acknowledged || gateway_refuses,
        || {
            format!(
                "the gateway acknowledged {who}'s revocation of {scope} (epoch {new_epoch}), yet its view then gave the e0 token {:?} ({:?})",
                answer.decision, answer.code
            )
        },
    );
    out.judge(
        Property::EpochsNeverGoBack,
        seen.epoch_seq.is_none_or(|seq| seq >= *new_epoch),
        || {
            format!(
                "the gate saw epoch {:?} after {who} advanced to {new_epoch}",
                seen.epoch_seq
            )
        },
    );
}
