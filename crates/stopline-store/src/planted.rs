//! Known bugs that can be planted in the recovery protocol and the operation registry, so the
//! model checker can show that it finds them. Compiled only with the `planted-bugs` feature, and even then off unless a
//! store is built with [`crate::Store::with_planted_bug`]. Nothing in the binary enables it.
//!
//! Each bug breaks exactly one rule of docs/reference.md §3 (Recovery) and must be caught by one property of
//! `stopline model-check`; `stopline-assurance/tests/` asserts that it is.

/// A bug to plant in [`crate::Store::recover_apply`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PlantedBug {
    /// No bug: the protocol as written.
    #[default]
    None,
    /// Clear every latch of the plan's scope found at apply time, instead of exactly the planned
    /// names: a stop engaged after the plan is swept away ("stop wins every race" fails).
    ClearByScope,
    /// Skip the rescan after moving the planned latches and report `recovered: true`
    /// ("no false all-clear" fails when a stop raced the recovery).
    SkipRescan,
    /// Append an operation's outcome without fsync: a power cut can lose an outcome that was
    /// reported recorded ("an operation is in doubt only when its outcome is unknown" fails).
    OutcomeUnsynced,
    /// Let every operation in doubt block every agent, whatever it was prepared to block
    /// ("an operation in doubt blocks only its own agent" fails).
    DoubtBlocksEveryone,
    /// Recovery (plan and apply) does not finish the records an engage left deferred
    /// (`wal_deferred`): a latch is cleared whose `latch_engaged` and epoch advance the WAL
    /// never recorded ("every stop is on the record" fails).
    SkipDeferredRecord,
    /// The operation journal's snapshot treats a dispatched operation as resolved, so a
    /// compaction drops an operation whose outcome was never recorded: its agent is no longer
    /// blocked on its target ("an operation in doubt blocks its own agent" fails).
    CompactionDropsDispatched,
    /// A WAL checkpoint that leaves out the recovery intents not yet applied: an engage that
    /// reads from it no longer sees a pending plan and coalesces into a latch the plan is about
    /// to clear ("stop wins every race" fails, the `checkpoint-vs-plan` scenario).
    CheckpointDropsPendingPlans,
    /// The operation journal's group commit releases the callers of a batch of several records
    /// once the batch is written, leaving its fsync to a later batch: a power cut can lose a
    /// `prepared` record whose caller was told it was durable (and dispatched on it) ("nothing
    /// is dispatched before its prepared record is durable" fails).
    GroupReleasedBeforeFsync,
    /// The archive moves a gone writer's journal out of `ops/` before the archive's open set
    /// carries its open operations: a crash in between (or a gate reading then) loses an
    /// operation in doubt from every gate ("an operation in doubt blocks its own agent" fails,
    /// the `op-archive` scenario).
    ArchiveBeforeOpenSet,
    /// An evidence append trusts the head alone and never looks for the segment the next record
    /// would start: after a crash between a segment switch's first record and its head, the
    /// next record is appended to the old segment under the same `seq`, forking the chain ("an
    /// acknowledged evidence record is kept and the chain stays whole" fails, the
    /// `evidence-segments` scenario).
    SegmentSwitchUnseen,
    /// Pruning removes old evidence segments before `evidence/pruned.json` says where the kept
    /// ones start: a crash in between leaves a log whose first records are missing with nothing
    /// saying they were pruned, and every whole read fails ("the chain stays whole" fails, the
    /// `evidence-segments` scenario).
    PruneBeforeMark,
    /// Spend compaction moves a gone writer's spending journal out of `spend/` before the
    /// `spend/settled.json` that folds it in is written: a crash in between (or a reservation
    /// deciding then) forgets what that writer spent, so a budget can be overrun ("spending
    /// is never lost nor counted twice" fails, the `spend-compaction` scenario).
    SpendJournalMovedBeforeSnapshot,
    /// A reservation's look ignores what `spend/settled.json` says it covers, folding a gone
    /// writer's journal a crash left in `spend/` (after the snapshot, before its removal) from
    /// its start: that writer's spending is counted twice, and a budget refuses calls it has
    /// room for ("spending is never lost nor counted twice" fails, `spend-compaction`).
    SpendCoveredCountedTwice,
    /// A live writer's rewrite of its own spending journal keeps the settled totals and drops
    /// the open reservations: a call in flight at that gateway vanishes from every other
    /// gateway's look (and, should the writer die, from what it spent), so a budget can be
    /// overrun ("spending is never lost nor counted twice" fails, the `spend-live-rewrite`
    /// scenario).
    SpendRewriteDropsOpen,
    /// A live writer's rewrite renames the new file over its journal without fsyncing it: a
    /// power cut after the rename leaves an empty or short journal, and what that gateway
    /// spent is forgotten ("spending is never lost nor counted twice" fails after a crash, the
    /// `spend-live-rewrite` scenario).
    SpendRewriteRenamedUnsynced,
    /// A reader of `runs.live/` takes any registration of the entry's run and agent for the
    /// entry's worker, whichever instance wrote it: while a run id is reused, the earlier
    /// instance's `exited` registration hides the new worker from every reach until it
    /// registers ("every live worker is in the reach" fails, the `live-runs` scenario).
    LiveEntryTrustsAnyRegistration,
    /// The `runs.live/` entry is written without fsync of the file or of the directory: a power
    /// cut after the run record can lose the entry of a worker that runs ("every live worker is
    /// in the reach" fails after a crash, the `live-runs` scenario).
    LiveEntryUnsynced,
    /// An older home's index is marked trusted before its legacy entries are written: a crash
    /// in between (or a reach reading then) leaves a running worker of the older stopline out of
    /// every reach ("every live worker is in the reach" fails, the `live-runs-older-home`
    /// scenario).
    LiveIndexMarkedFirst,
    /// The drill index is renamed into place before its fsync, with no directory fsync
    /// (`replace_visible`): a power cut after the head naming the new drill leaves an index
    /// that is empty or older than that head, and the drill gate's answer is no longer the
    /// log's ("the drill gate answers as a full read of the log" fails, `drill-index`).
    DrillIndexRenamedBeforeFsync,
    /// The drill index's summary (`evidence/drills.json`) is written before its records'
    /// file (`evidence/drills-recent.json`): a crash between the two leaves a summary naming a
    /// drill whose record the records' file does not hold, which no crash of the right order
    /// leaves, and `GET /v1/drills` refuses a log it should answer ("the drill gate answers as
    /// a full read of the log" fails, `drills-split`).
    DrillSummaryBeforeRecords,
    /// A reader of the drill index ignores the one drill line a crash left after the head
    /// (after its fsync, before the index): a failed drill is forgotten and the gate passes
    /// a version whose last drill failed ("the drill gate answers as a full read of the log"
    /// fails, `drill-index`).
    DrillLineAfterHeadIgnored,
    /// A reader of an operation journal's open-set snapshot trusts its offset without checking
    /// its anchor: a snapshot a power cut kept while the journal lost its unsynced tail (the
    /// snapshot is written without fsync) stands for lines the journal no longer has, and an
    /// operation whose outcome never reached the disk is read as resolved ("an operation in
    /// doubt blocks its own agent" fails, the `op-writer-snapshot` and `op-compaction`
    /// scenarios).
    SnapshotAnchorUnchecked,
    /// An append that lands partly on a full disk is not cut back before its error (the model
    /// of the seam without `fs.rs`'s cut-back): the journal's next record is glued onto the
    /// torn line, and a `prepared` record reported durable cannot be read ("a journal record
    /// is readable once and only once it is durable" fails, the `op-full-disk` scenario).
    AppendNotCutBack,
    /// A reader of a distributed plane that compares the plane's WAL with this host's
    /// high-water mark but not its epoch: a plane whose epoch went back (an old `epoch.json`
    /// restored) is acted on, and authority its lost advance revoked is good again ("a plane
    /// below the marks closes the gates" fails, the `plane-marks` scenario).
    MarkAcceptsLowerEpoch,
    /// An epoch advance folds away revisions `max_ttl_s` old, without the margin: a token
    /// minted under the epoch read just before an emergency, a moment after it, is still alive
    /// when the revision that revoked it folds, and the floor refuses a token nothing revoked
    /// ("a fold refuses no live authority that no stop revoked" fails, the `epoch-fold`
    /// scenario).
    FoldWithoutMargin,
    /// The read of `latches/` also takes the bodies staged in `latches.staging/` for latches:
    /// a gate acknowledges and reports (status, phase, alerts) a stop that is not published,
    /// and that a crash before its link loses ("staged latches only refuse more, and are never
    /// acknowledged or reported" fails, the `staged-gate` scenario).
    StagedReadAsLatch,
    /// An epoch advance folds revisions away without raising the floor: a token minted before
    /// the cap (living longer than `max_ttl_s`) that a folded revision revoked is good again
    /// ("no pre-stop authority valid after the stop" fails, the `epoch-fold-floor` scenario).
    FoldWithoutFloor,
    /// `token revoke --with-delegates` records the revocation of the token alone (`token:<jti>`,
    /// without `+delegates`): a delegate of the revoked token keeps working ("after token
    /// revoke answers, its token and its delegates are refused" fails, the `revoke-delegates`
    /// scenario).
    RevokeForgetsDelegates,
    /// `token revoke` answers its live gateway acknowledged without the gateway's read begun
    /// after the request: the gateway keeps deciding from the view it held before the revoke,
    /// and admits the revoked token ("after token revoke answers, … by every gateway that
    /// acknowledged too" fails, the `revoke-acknowledged` scenario). A step of the model
    /// checker's `token revoke` process, not of the store.
    RevokeAnswersBeforeAcks,
    /// The view's epoch index looks up `token:<jti>+delegates` for the token's own id only,
    /// never for the ids of its lineage: a delegate of a token revoked `--with-delegates` is
    /// admitted ("after token revoke answers, its token and its delegates are refused" fails,
    /// the `revoke-delegates` scenario).
    IndexForgetsAncestorDelegates,
}
